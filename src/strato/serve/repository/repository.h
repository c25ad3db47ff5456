#pragma once
// The model repository in Triton's layout:
//   <repo>/<model>/config.pbtxt | config.toml   (optional when the backend can fill it in)
//   <repo>/<model>/<version>/<model file>       (numeric version directories)
// plus models given directly (`--model name=DIR`, a strato package as version 1). Control modes
// none / poll / explicit as in tritonserver. A (re)load builds the new versions completely and
// then swaps them in; requests already holding the old version finish on it, so a reload under
// load fails no request. A failed reload keeps the old versions serving.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "strato/serve/batcher/batcher.h"
#include "strato/serve/metrics/metrics.h"
#include "strato/serve/repository/model_config.h"

namespace strato::serve {

struct StatCounter {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> ns{0};
    void add(int64_t n) {
        count.fetch_add(1, std::memory_order_relaxed);
        ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(n, 0)), std::memory_order_relaxed);
    }
};

struct BatchStat {
    uint64_t count = 0;
    uint64_t input_ns = 0, infer_ns = 0, output_ns = 0;
};

/// Statistics of one model version, in the shape of Triton's statistics extension.
struct VersionStats {
    std::atomic<uint64_t> last_inference_ms{0};
    std::atomic<uint64_t> inference_count{0};  // rows
    std::atomic<uint64_t> execution_count{0};  // batches
    StatCounter success, fail, queue, compute_input, compute_infer, compute_output;
    std::mutex mu;
    std::map<int64_t, BatchStat> batch_stats;
};

/// Prometheus series of one model version (shared with the registry).
struct VersionMetrics {
    std::shared_ptr<metrics::Counter> success;
    std::shared_ptr<metrics::Counter> fail_rejected;
    std::shared_ptr<metrics::Counter> fail_canceled;
    std::shared_ptr<metrics::Counter> fail_backend;
    std::shared_ptr<metrics::Counter> fail_other;
    std::shared_ptr<metrics::Counter> inference_count;
    std::shared_ptr<metrics::Counter> exec_count;
    std::shared_ptr<metrics::Counter> request_us;
    std::shared_ptr<metrics::Counter> queue_us;
    std::shared_ptr<metrics::Counter> input_us;
    std::shared_ptr<metrics::Counter> infer_us;
    std::shared_ptr<metrics::Counter> output_us;
    std::shared_ptr<metrics::Gauge> pending;
    std::shared_ptr<metrics::Histogram> request_hist;
    std::shared_ptr<metrics::Histogram> queue_hist;
    std::shared_ptr<metrics::Histogram> infer_hist;
    std::shared_ptr<metrics::Histogram> batch_hist;
};

struct ModelVersion {
    std::string name;
    int64_t version = 0;
    std::string dir;
    ModelConfig config;
    std::string platform;  // reported in metadata
    std::vector<std::string> labels;
    std::vector<std::shared_ptr<Model>> instances;  // one per instance (a copy per device)
    std::map<Device, std::shared_ptr<Model>> copies;  // the copy on each device the instances use
    std::unique_ptr<Batcher> batcher;
    VersionStats stats;
    VersionMetrics metrics;
};

enum class ModelState { kUnknown, kReady, kUnavailable, kLoading, kUnloading };
const char* model_state_name(ModelState s);

enum class ControlMode { kNone, kPoll, kExplicit };

struct RepositoryOptions {
    std::vector<std::string> paths;                      // --model-repository (repeatable)
    std::vector<std::pair<std::string, std::string>> packages;  // --model name=DIR
    ControlMode mode = ControlMode::kNone;
    std::vector<std::string> startup_models;             // --load-model (explicit mode; "*" = all)
    std::chrono::seconds poll_interval{15};
    int64_t default_max_queue_size = 4096;               // when a config sets none
    bool strict_readiness = true;
    /// Asked between the models start() loads and between warm-up runs: true stops the start
    /// (kCancelled), so SIGTERM during a long startup does not wait for every model.
    std::function<bool()> interrupted;
};

struct IndexEntry {
    std::string name;
    std::string version;
    std::string state;
    std::string reason;
};

class Repository {
public:
    Repository(RepositoryOptions options, metrics::Registry* registry);
    ~Repository();

    /// Loads what the control mode says to load at startup. Models that fail are reported and
    /// left UNAVAILABLE (as tritonserver does); an unreadable repository path is an error.
    Status start();
    /// Unloads everything, running what is queued first.
    void stop();

    /// The version to serve: `version` empty = the highest ready one. As tritonserver: unknown
    /// model kInvalidArgument; no ready version kNotFound; a named version that is not ready
    /// kUnavailable when it has served or the model is loading, else kNotFound.
    Result<std::shared_ptr<ModelVersion>> get(const std::string& name, const std::string& version) const;
    /// Ready versions of a model (highest first); empty when none.
    std::vector<std::shared_ptr<ModelVersion>> versions(const std::string& name) const;
    std::vector<std::shared_ptr<ModelVersion>> all_versions() const;
    std::vector<IndexEntry> index(bool ready_only) const;
    /// True when every model that should be loaded is ready (strict) or always (not strict).
    bool ready() const;

    /// Loads or reloads a model. `config_json` overrides its config file (the load API). Any failure
    /// is kInvalidArgument (Triton's answer), except kUnavailable outside explicit mode.
    Status load(const std::string& name, const std::optional<nlohmann::json>& config_json = std::nullopt);
    Status unload(const std::string& name);
    ControlMode mode() const { return opt_.mode; }
    /// One poll pass (the poll thread calls it; tests may too).
    void poll_once();

private:
    struct Entry {
        ModelState state = ModelState::kUnknown;
        std::string reason;
        std::string dir;             // the model directory (or the package directory)
        bool package = false;        // given with --model: dir is the version directory itself
        std::string fingerprint;     // for polling
        std::map<int64_t, std::shared_ptr<ModelVersion>> versions;
        /// Every version that has served (kept through unloads and reloads that drop it): a
        /// request naming one of these that is not ready now is 503, one never served 404.
        std::set<int64_t> served;
    };

    Result<std::string> locate(const std::string& name) const;  // model directory in the repositories
    std::string fingerprint(const Entry& e) const;
    Result<std::map<int64_t, std::shared_ptr<ModelVersion>>> build(const std::string& name, const Entry& e,
                                                                   const std::optional<nlohmann::json>& config_json);
    /// `poll`: a reload the poll thread asked for (a model whose version directories are all gone
    /// is unloaded rather than kept as after a failed reload).
    Status load_locked(const std::string& name, const std::optional<nlohmann::json>& config_json, bool poll = false);
    void retire(std::map<int64_t, std::shared_ptr<ModelVersion>> old);
    void poll_loop();

    RepositoryOptions opt_;
    metrics::Registry* registry_;
    mutable std::mutex mu_;           // guards entries_
    std::mutex load_mu_;              // one load/unload at a time
    std::string poll_error_;          // why the last poll could not list the repository (said once)
    std::set<std::string> shadowed_;  // repository models hidden behind a --model package's name (said once)
    std::map<std::string, Entry> entries_;
    std::thread poller_;
    std::mutex poll_mu_;
    std::condition_variable poll_cv_;
    bool stopping_ = false;
    struct Retiree {
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> done;
    };
    std::vector<Retiree> retirees_;  // finished ones are joined at the next retire()
};

/// True when `name` can name a model: no path separators, no leading dot, printable, <= 255 bytes.
bool valid_model_name(std::string_view name);

}  // namespace strato::serve
