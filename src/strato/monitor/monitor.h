#pragma once
// The `strato monitor` loop: every interval, sample procfs and NVML (or replay a JSONL log),
// publish the snapshot on a Prometheus endpoint (default 127.0.0.1:9400, DCGM exporter's port),
// append it to a JSONL file, and run the alert rules (log, webhook, exit).
//
//     MonitorOptions o;  o.rules = load_rules("alerts.toml").value();
//     auto m = Monitor::create(o).value();
//     MonitorSummary s = m->run().value();   // until SIGINT/SIGTERM, --duration or an exit alert

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/monitor/alerts.h"
#include "strato/monitor/nvml.h"
#include "strato/monitor/procfs.h"

namespace strato::monitor {

struct MonitorOptions {
    std::string address = "127.0.0.1";
    int port = 9400;              // -1: no exporter; 0: an ephemeral port
    double interval_s = 1.0;
    double duration_s = 0;        // 0: until stopped
    std::string jsonl;            // append every snapshot here
    std::string replay;           // read snapshots from this JSONL instead of sampling (alert dry runs);
                                  // a run's metrics.jsonl works too (its "monitor" lines)
    std::vector<pid_t> pids;
    std::vector<AlertRule> rules;
    std::string nvml_library;     // empty: STRATO_NVML_LIBRARY or libnvidia-ml.so.1
    bool allow_remote_webhooks = false;
    bool dcgm_labels = false;     // GPU labels UUID/modelName exactly as DCGM (promtool lints them)
};

struct MonitorSummary {
    int64_t samples = 0;
    int64_t alerts_fired = 0;
    std::string exit_alert;       // set when an `action = "exit"` rule fired: its description
};

class Monitor {
public:
    /// Validates options (webhooks on loopback unless allowed), opens NVML (absent: a note), binds
    /// the exporter.
    static Result<std::unique_ptr<Monitor>> create(MonitorOptions options);
    ~Monitor();

    /// Samples until stopped; returns what happened.
    Result<MonitorSummary> run();
    /// Asks run() to return after the current sample (any thread).
    void stop();
    /// The exporter's port (after create()); -1 without exporter.
    int port() const;
    /// One snapshot now (procfs + GPUs), without exporting it.
    Snapshot sample();
    /// "no GPU: ..." or "2 GPUs: NVIDIA H200 (driver 560.35)".
    const std::string& gpu_summary() const { return gpu_summary_; }

private:
    Monitor() = default;
    void publish(const Snapshot& s);
    Status fire(const AlertEvent& e, MonitorSummary& summary);
    void warn_unknown_metrics(const Snapshot& s) const;

    struct Exporter;
    struct Webhooks;
    MonitorOptions options_;
    std::unique_ptr<Webhooks> webhooks_;  // sent from their own thread: a slow receiver must not stall sampling
    ProcSampler proc_;
    std::shared_ptr<Nvml> nvml_;
    std::string gpu_summary_;
    std::unique_ptr<AlertEngine> alerts_;
    std::unique_ptr<Exporter> exporter_;
    std::mutex text_mu_;
    std::string text_;  // the last snapshot in Prometheus format
    std::atomic<bool> stop_{false};
    std::set<std::string> said_notes_;  // sampler notes already logged (each once)
};

}  // namespace strato::monitor
