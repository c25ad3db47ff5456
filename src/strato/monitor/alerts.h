#pragma once
// Alert rules over monitor snapshots, with Prometheus' `for` semantics: a rule's condition must
// hold on every sample for the whole duration (pending) before it fires; it resolves on the first
// sample where it no longer holds or its series is gone. Rules come from TOML:
//
//     [[rule]]
//     name = "gpu-idle"
//     when = "gpu_util < 20 for 10m"     # metric op threshold [for duration]
//     action = "webhook"                  # log (default) | webhook | exit
//     webhook = "http://127.0.0.1:9093/api/alerts"
//     severity = "warning"
//
// The metric is an alias (gpu_util, cpu_util, mem_used_pct, ...) or a Prometheus name; each labelled
// series (each GPU) is its own alert. avg(m), min(m), max(m) and sum(m) aggregate over the series
// first ("avg(gpu_util) > 90 for 10m"). Not thread-safe: one engine per sampling loop.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"
#include "strato/monitor/snapshot.h"

namespace strato::monitor {

struct AlertRule {
    std::string name;
    std::string expr;        // as written
    std::string aggregate;   // "", avg, min, max, sum
    std::string metric;
    std::string op;          // < <= > >= == !=
    double threshold = 0;
    double for_s = 0;
    std::string action = "log";  // log | webhook | exit
    std::string webhook;
    std::string severity = "warning";

    bool holds(double v) const;
};

/// Parses "avg(gpu_util) > 90 for 10m"; errors name what is wrong.
Result<AlertRule> parse_condition(std::string_view expr);
/// Reads [[rule]] tables; errors name the file, the rule and the key.
Result<std::vector<AlertRule>> parse_rules(std::string_view toml_text, const std::string& source);
Result<std::vector<AlertRule>> load_rules(const std::string& path);

/// A series' identifying labels ({"gpu": "0"}); live samples and replayed logs give the same ones.
using SeriesLabels = std::map<std::string, std::string>;

struct AlertEvent {
    const AlertRule* rule = nullptr;
    SeriesLabels labels;      // {"gpu": "0"}; empty for aggregates and unlabelled metrics
    bool firing = true;       // false: resolved
    double value = 0;         // NaN: resolved because the series is gone
    double since_unix_s = 0;  // when the condition started to hold
    double at_unix_s = 0;
    /// "gpu=0" (labels joined), "" without.
    std::string series() const;
    /// "gpu-idle firing: gpu_util{gpu=0} = 3 < 20 for 10m (since 12:00:03)"
    std::string describe() const;
    /// Alertmanager's webhook payload (version 4) with this one alert: alertname, severity and
    /// the series' labels as labels of their own (routes and group_by can match them).
    std::string webhook_json() const;
};

class AlertEngine {
public:
    /// A gap between samples longer than `max_gap_s` and than 3 times the median of the recent
    /// gaps (the first gap: longer than `max_gap_s`) -- two logs joined, a machine asleep -- or a
    /// clock that went back, restarts the "for" of
    /// conditions not yet firing: a "for 10m" needs ten minutes of samples, not two samples ten
    /// minutes apart. (The median: a log sampled every 6 minutes has no gaps at 6 minutes.)
    explicit AlertEngine(std::vector<AlertRule> rules, double max_gap_s = 300)
        : rules_(std::move(rules)), max_gap_s_(max_gap_s) {}
    /// Advances every rule to `s` and returns the alerts that fired or resolved at it. Durations
    /// are measured on `s.mono_s` when set (a live sampler: a wall-clock step changes nothing),
    /// else on `s.unix_s` (a replayed log).
    std::vector<AlertEvent> evaluate(const Snapshot& s);
    const std::vector<AlertRule>& rules() const { return rules_; }
    /// Alerts firing now.
    size_t firing() const;

private:
    struct State {
        // (optional, not a -1 marker: a replayed log's clock may be negative)
        std::optional<double> since;  // condition holding since, on the engine's clock; empty: not holding
        double since_unix = 0;        // the same moment on the wall clock (for messages)
        bool firing = false;
        bool seen = false;  // in the snapshot being evaluated
    };
    std::vector<AlertRule> rules_;
    double max_gap_s_;
    std::optional<double> last_clock_;  // the previous sample's clock; empty: none yet
    std::vector<double> gaps_;  // the last kGapHistory gaps between samples, oldest first
    static constexpr size_t kGapHistory = 64;
    std::vector<std::map<SeriesLabels, State>> state_;  // per rule, per series
};

}  // namespace strato::monitor
