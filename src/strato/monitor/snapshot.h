#pragma once
// One sample of everything `strato monitor` watches: named, labelled values at one instant, in a
// form that becomes Prometheus text, a JSONL line, or the input of the alert rules.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strato::monitor {

using Labels = std::vector<std::pair<std::string, std::string>>;

struct Metric {
    std::string name;   // Prometheus name: strato_cpu_utilization_percent, DCGM_FI_DEV_GPU_UTIL, ...
    std::string alias;  // short name for alert rules and JSONL: cpu_util, gpu_util, ...
    std::string help;
    bool counter = false;  // else a gauge
    Labels labels;
    double value = 0;
};

struct Snapshot {
    double unix_s = 0;            // wall clock of the sample
    double mono_s = -1;           // a monotonic clock (live samples), for durations; -1: none (a replay)
    std::vector<Metric> metrics;
    std::vector<std::string> notes;  // "no GPU: ..." and other sampler conditions

    void add(std::string name, std::string alias, std::string help, double value, Labels labels = {},
             bool counter = false);
    /// Every metric whose name or alias is `key`.
    std::vector<const Metric*> find(const std::string& key) const;
};

/// The label that tells the series of one metric apart: gpu (not its uuid, model or device node),
/// device (a disk, an interface), pid (not comm), mountpoint; else the first. Empty when
/// unlabelled. JSONL keys a series by its value; alerts carry it as their label.
std::pair<std::string, std::string> series_label(const Labels& labels);
/// The name of that label for an alias read back from JSONL, where only the value is kept (gpu_*:
/// gpu, disk_* and net_*: device, proc_*: pid; others: series), so a replay's alerts carry the
/// labels the live monitor's do.
std::string series_label_name(std::string_view alias);

/// Prometheus text exposition format 0.0.4: HELP (when there is one) and TYPE once per family,
/// families in order of first appearance, label values escaped. A family whose name is no
/// Prometheus metric name (a replayed log's stray key) is left out, not written to spoil the page.
std::string to_prometheus(const Snapshot& s);

/// One JSON object per snapshot: {"t": unix_s, "<alias>": value | {"<label>": value, ...}}.
/// Labelled series are keyed by their most specific label (gpu index, device, pid).
nlohmann::json to_json(const Snapshot& s);

/// Parses a line written by to_json back into a snapshot (for `strato monitor --replay`). The
/// metrics strato samples get back their Prometheus name, help and type; of the labels only the
/// series' one survives. Other keys become gauges named as the key.
bool from_json(const nlohmann::json& j, Snapshot* out, std::string* error);

}  // namespace strato::monitor
