#include "strato/serve/repository/repository.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/log.h"
#include "strato/core/memory.h"
#include "strato/core/thread_name.h"

namespace strato::serve {
namespace fs = std::filesystem;

const char* model_state_name(ModelState s) {
    switch (s) {
        case ModelState::kReady: return "READY";
        case ModelState::kUnavailable: return "UNAVAILABLE";
        case ModelState::kLoading: return "LOADING";
        case ModelState::kUnloading: return "UNLOADING";
        default: return "UNKNOWN";
    }
}

bool valid_model_name(std::string_view name) {
    if (name.empty() || name.size() > 255 || name[0] == '.') return false;
    for (char c : name)
        if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    return is_utf8(name);  // (a name goes into JSON, metrics labels and URLs: one a client can send back)
}

namespace {

/// One sample of a model_warmup input, as raw little-endian bytes (BYTES: length-prefixed).
Result<std::string> warmup_sample(const WarmupInput& in, const std::string& model_dir, std::mt19937& rng) {
    int64_t elements = 1;
    for (int64_t d : in.dims) elements *= d;
    const size_t n = static_cast<size_t>(elements);
    const size_t width = in.dtype == DataType::kBytes ? 4 : datatype_size(in.dtype);
    switch (in.fill) {
        case WarmupInput::Fill::kFile: {
            const auto path = (std::filesystem::path(model_dir) / "warmup" / in.input_data_file).string();
            STRATO_ASSIGN_OR_RETURN(std::string bytes, strato::fs::read_file(path));
            if (in.dtype != DataType::kBytes && bytes.size() != n * width)
                return invalid_argument("{}: {} bytes; one sample of {} {} is {} bytes", path, bytes.size(), shape_string(in.dims),
                                        datatype_name(in.dtype), n * width);
            return bytes;
        }
        case WarmupInput::Fill::kRandom: {
            std::string out(n * width, '\0');
            std::uniform_real_distribution<float> unit(0.0f, 1.0f);
            for (size_t i = 0; i < n; ++i) {
                char* p = out.data() + i * width;
                const auto r = static_cast<uint32_t>(rng());
                switch (in.dtype) {
                    case DataType::kFp32: { const float v = unit(rng); std::memcpy(p, &v, 4); break; }
                    case DataType::kFp64: { const double v = unit(rng); std::memcpy(p, &v, 8); break; }
                    case DataType::kFp16: { const uint16_t v = 0x3800 | (r & 0x3ff); std::memcpy(p, &v, 2); break; }  // [0.5, 1)
                    case DataType::kBf16: { const uint16_t v = 0x3f00 | (r & 0x7f); std::memcpy(p, &v, 2); break; }   // [0.5, 1)
                    case DataType::kBool: *p = static_cast<char>(r & 1); break;
                    default: std::memcpy(p, &r, std::min<size_t>(width, 1)); break;  // integers: 0..255 in the low byte
                }
            }
            return out;
        }
        default:
            return std::string(n * width, '\0');  // zero_data (BYTES: empty strings)
    }
}

/// One model_warmup sample, ready to run: its inputs in config order and how often.
struct WarmupRequest {
    std::string what;  // "model_warmup 'NAME'", for errors
    int64_t count = 1;
    std::vector<Tensor> inputs;
};

/// The config's model_warmup samples as requests (files read, random data drawn once per model
/// version; every copy of the model then runs the same ones).
Result<std::vector<WarmupRequest>> warmup_requests(const ModelConfig& cfg, const std::string& model_dir) {
    std::vector<WarmupRequest> out;
    std::mt19937 rng(0);
    for (const auto& w : cfg.model_warmup) {
        WarmupRequest req{fmt::format("model_warmup '{}'", w.name), w.count, {}};
        const int64_t rows = cfg.max_batch_size > 0 ? w.batch_size : 1;
        for (const auto& spec : cfg.inputs) {
            auto it = w.inputs.find(spec.name);
            if (it == w.inputs.end()) {  // an optional input left out: an empty tensor in its place, as in a request
                req.inputs.emplace_back();
                continue;
            }
            auto sample = warmup_sample(it->second, model_dir, rng);
            if (!sample) return sample.status().with_context(req.what);
            Tensor t;
            t.name = spec.name;
            t.dtype = it->second.dtype;
            if (cfg.max_batch_size > 0) t.shape.push_back(rows);
            t.shape.insert(t.shape.end(), it->second.dims.begin(), it->second.dims.end());
            t.data.reserve(sample->size() * static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) t.data += *sample;
            req.inputs.push_back(std::move(t));
        }
        out.push_back(std::move(req));
    }
    return out;
}

/// Runs the warm-up requests on `m`, as Triton runs them on each instance before the model is
/// ready; a failure fails the load.
Status run_warmup(const std::vector<WarmupRequest>& requests, Model& m, const std::function<bool()>& interrupted) {
    for (const auto& req : requests) {
        for (int64_t i = 0; i < req.count; ++i) {
            if (interrupted && interrupted()) return {StatusCode::kCancelled, req.what + ": interrupted"};
            std::vector<Tensor> out;
            STRATO_RETURN_IF_ERROR(m.execute(req.inputs, &out).with_context(req.what));
        }
    }
    return Status::ok();
}

// The entries of `dir`, without exceptions: a range-for over a directory_iterator throws when
// reading the directory fails midway (an I/O error on a network file system), which on the poll
// thread would end the server. `ec` says why listing stopped.
std::vector<fs::directory_entry> list_dir(const fs::path& dir, std::error_code& ec) {
    std::vector<fs::directory_entry> out;
    ec.clear();
    fs::directory_iterator it(dir, ec), end;
    for (; !ec && it != end; it.increment(ec)) out.push_back(*it);
    return out;
}

bool is_version_dir_name(const std::string& s) {
    if (s.empty() || s[0] == '0' || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return false;
    // Every int64 version: 9223372036854775807 at most.
    return s.size() < 19 || (s.size() == 19 && s <= "9223372036854775807");
}

// The numeric version directories of a model directory.
std::map<int64_t, std::string> version_dirs(const std::string& dir, std::error_code& ec) {
    std::map<int64_t, std::string> found;
    for (const auto& it : list_dir(dir, ec)) {
        std::string n = it.path().filename().string();
        std::error_code ec2;
        if (it.is_directory(ec2) && is_version_dir_name(n)) found[std::stoll(n)] = it.path().string();
    }
    return found;
}

// Powers of two from 1 to 65536 rows, the same for every model and config: replicas and reloads
// with another max_batch_size aggregate (a reload used to keep the first load's buckets).
std::vector<uint64_t> batch_bounds() {
    std::vector<uint64_t> b;
    for (uint64_t v = 1; v <= 65536; v *= 2) b.push_back(v);
    return b;
}

VersionMetrics make_metrics(metrics::Registry& r, const std::string& model, int64_t version) {
    metrics::Labels l{{"model", model}, {"version", std::to_string(version)}};
    auto with = [&](const char* k, const char* v) {
        metrics::Labels x = l;
        x.emplace_back(k, v);
        return x;
    };
    const char* fail_help = "Number of failed inference requests, all batch sizes";
    VersionMetrics m;
    m.success = r.counter("nv_inference_request_success", "Number of successful inference requests, all batch sizes", l);
    m.fail_rejected = r.counter("nv_inference_request_failure", fail_help, with("reason", "REJECTED"));
    m.fail_canceled = r.counter("nv_inference_request_failure", fail_help, with("reason", "CANCELED"));
    m.fail_backend = r.counter("nv_inference_request_failure", fail_help, with("reason", "BACKEND"));
    m.fail_other = r.counter("nv_inference_request_failure", fail_help, with("reason", "OTHER"));
    m.inference_count = r.counter("nv_inference_count", "Number of inferences performed (does not include cached requests)", l);
    m.exec_count = r.counter("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)", l);
    m.request_us = r.counter("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds (includes cached requests)", l);
    m.queue_us = r.counter("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds (includes cached requests)", l);
    m.input_us = r.counter("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds (does not include cached requests)", l);
    m.infer_us = r.counter("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds (does not include cached requests)", l);
    m.output_us = r.counter("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds (does not include cached requests)", l);
    m.pending = r.gauge("nv_inference_pending_request_count", "Instantaneous number of pending requests awaiting execution per-model.", l);
    auto lat = metrics::latency_buckets_ns();
    m.request_hist = r.histogram("strato_inference_request_duration_seconds",
                                  "Inference request latency inside the server (queue + compute), aggregatable across replicas", l, lat, 1e9);
    m.queue_hist = r.histogram("strato_inference_queue_duration_seconds", "Time requests waited in the batcher queue", l, lat, 1e9);
    m.infer_hist = r.histogram("strato_inference_compute_infer_duration_seconds", "Model execution time per batch", l, lat, 1e9);
    m.batch_hist = r.histogram("strato_inference_batch_size", "Rows per model execution", l, batch_bounds(), 1.0);
    return m;
}

// The versions in `gone` that `kept` does not have leave /metrics (as an unloaded model's do in
// Triton); those in `kept` are shown (loaded again after an unload, with their counts). Called
// once the swap is made: a load that fails changes nothing.
void hide_metrics(metrics::Registry* r, const std::string& model, const std::map<int64_t, std::shared_ptr<ModelVersion>>& gone,
                  const std::map<int64_t, std::shared_ptr<ModelVersion>>& kept = {}) {
    if (!r) return;
    // Shown first: hiding the retired ones may forget the oldest hidden set, which must not be
    // one that is loaded again here.
    for (const auto& [v, mv] : kept) r->set_hidden({{"model", model}, {"version", std::to_string(v)}}, false);
    for (const auto& [v, mv] : gone)
        if (!kept.count(v)) r->set_hidden({{"model", model}, {"version", std::to_string(v)}}, true);
}

}  // namespace

Repository::Repository(RepositoryOptions options, metrics::Registry* registry)
    : opt_(std::move(options)), registry_(registry) {}

Repository::~Repository() { stop(); }

Result<std::string> Repository::locate(const std::string& name) const {
    if (!valid_model_name(name))
        return invalid_argument("'{}' is not a valid model name (no '/', '\\', leading '.', or control characters)", name);
    std::error_code ec;
    std::vector<std::string> found;
    for (const auto& p : opt_.paths) {
        fs::path d = fs::path(p) / name;
        if (fs::is_directory(d, ec)) found.push_back(d.string());
    }
    // As tritonserver: a name in two repositories is not served from whichever comes first.
    if (found.size() > 1)
        return Status{StatusCode::kAlreadyExists,
                      fmt::format("failed to load '{}': the model is not unique across the model repositories ({})", name,
                                  fmt::join(found, ", "))};
    if (found.size() == 1) return found[0];
    return invalid_argument("failed to load '{}': no model directory '{}' in the model repository ({})", name, name,
                            fmt::join(opt_.paths, ", "));
}

std::string Repository::fingerprint(const Entry& e) const {
    std::string fp;
    std::error_code ec;
    auto add = [&](const fs::path& p) {
        auto t = fs::last_write_time(p, ec);
        auto sz = fs::is_regular_file(p, ec) ? fs::file_size(p, ec) : 0;
        fp += fmt::format("{}:{}:{};", p.string(), t.time_since_epoch().count(), sz);
        // A link's target too: `ln -sfn releases/v7 <model>/1` is the atomic way to deploy, and the
        // new target's files may carry the old one's times and sizes (copies with normalised mtimes).
        if (fs::is_symlink(p, ec)) fp += fmt::format("->{};", fs::read_symlink(p, ec).string());
    };
    fs::path dir(e.dir);
    if (!fs::is_directory(dir, ec)) return "";
    std::vector<fs::path> items;
    for (const auto& it : list_dir(dir, ec)) items.push_back(it.path());
    std::sort(items.begin(), items.end());
    for (const auto& p : items) {
        add(p);
        if (fs::is_directory(p, ec)) {
            std::vector<fs::path> inner;
            for (const auto& it : list_dir(p, ec)) inner.push_back(it.path());
            std::sort(inner.begin(), inner.end());
            for (const auto& q : inner) add(q);
        }
    }
    return fp;
}

Result<std::map<int64_t, std::shared_ptr<ModelVersion>>> Repository::build(const std::string& name, const Entry& e,
                                                                           const std::optional<nlohmann::json>& config_json) {
    ModelConfig base;
    std::string source = e.dir;
    if (config_json) {
        source = fmt::format("the load request's config for '{}'", name);
        STRATO_ASSIGN_OR_RETURN(base, parse_model_config_json(*config_json, source));
    } else if (!e.package) {
        std::error_code ec;
        fs::path pb = fs::path(e.dir) / "config.pbtxt", tm = fs::path(e.dir) / "config.toml";
        // symlink_status: a dangling link is a config that cannot be read, not a missing one (the
        // model would load with filled-in defaults without a word).
        const bool has_pb = fs::exists(fs::symlink_status(pb, ec)), has_tm = fs::exists(fs::symlink_status(tm, ec));
        if (has_pb && has_tm)
            return invalid_argument("model '{}': both {} and {} exist; keep one (they could say different things)", name,
                                    pb.string(), tm.string());
        if (has_pb) {
            source = pb.string();
            STRATO_ASSIGN_OR_RETURN(std::string text, strato::fs::read_file(source, strato::fs::kTextFileLimit));
            STRATO_ASSIGN_OR_RETURN(base, parse_model_config_pbtxt(text, source));
        } else if (has_tm) {
            source = tm.string();
            STRATO_ASSIGN_OR_RETURN(std::string text, strato::fs::read_file(source, strato::fs::kTextFileLimit));
            STRATO_ASSIGN_OR_RETURN(base, parse_model_config_toml(text, source));
        }
    }
    if (base.name.empty()) base.name = name;
    if (base.name != name)
        return invalid_argument("{}: config name '{}' does not match the model directory name '{}'", source, base.name, name);

    // Version directories, then the version policy.
    std::map<int64_t, std::string> found;
    if (e.package) {
        found[1] = e.dir;
    } else {
        std::error_code ec;
        found = version_dirs(e.dir, ec);
        if (ec) return io_error("cannot list {}: {}", e.dir, ec.message());
    }
    if (found.empty()) {
        // `--model-repository models/resnet` (the model, not the repository) makes "1", "2", ...
        // models without versions: say what the mistake was.
        std::string hint;
        const fs::path parent = fs::path(e.dir).parent_path();
        std::error_code ec;
        if (!e.package && is_version_dir_name(name) &&
            (fs::exists(parent / "config.pbtxt", ec) || fs::exists(parent / "config.toml", ec) || detect_backend(e.dir)))
            hint = fmt::format("; {} looks like a model directory (a config, or version directories holding model "
                               "files): --model-repository takes the directory that holds the model directories",
                               parent.string());
        return not_found("model '{}': no version directories in {} (expected {}/1/<model file>){}", name, e.dir, e.dir,
                         hint);
    }
    std::map<int64_t, std::string> chosen;
    const auto& pol = base.version_policy;
    // Checked before anything is built: a policy that selects nothing would retire the serving versions.
    if (pol.kind == VersionPolicy::Kind::kLatest && pol.num_versions < 1)
        return invalid_argument("{}: version_policy latest num_versions must be >= 1, got {}", source, pol.num_versions);
    if (pol.kind == VersionPolicy::Kind::kSpecific && pol.versions.empty())
        return invalid_argument("{}: version_policy specific names no version (expected versions: [1, ...])", source);
    if (pol.kind == VersionPolicy::Kind::kAll) {
        chosen = found;
    } else if (pol.kind == VersionPolicy::Kind::kLatest) {
        int64_t n = 0;
        for (auto it = found.rbegin(); it != found.rend() && n < pol.num_versions; ++it, ++n) chosen.insert(*it);
    } else {
        // As tritonserver: a named version without its directory is reported and skipped; the
        // others load.
        for (int64_t v : pol.versions) {
            auto it = found.find(v);
            if (it == found.end())
                log::error("serve: model '{}': version_policy names version {} but {}/{} does not exist; it is not served",
                           name, v, e.dir, v);
            else
                chosen.insert(*it);
        }
        if (chosen.empty())
            return not_found("model '{}': none of the versions version_policy names ({}) is in {}", name,
                             fmt::join(pol.versions, ", "), e.dir);
    }

    std::map<int64_t, std::shared_ptr<ModelVersion>> out;
    for (const auto& [ver, vdir] : chosen) {
        ModelConfig cfg = base;
        const Backend* b = find_backend(cfg);
        if (!b && (!cfg.backend.empty() || !cfg.platform.empty()))
            return Status{StatusCode::kUnimplemented,
                    fmt::format("model '{}': backend '{}' / platform '{}' is not available (strato serves: {})", name,
                                cfg.backend, cfg.platform, backend_list())};
        if (!b) b = detect_backend(vdir);
        if (!b)
            return not_found("model '{}' version {}: no model file in {} (strato serves: {})", name, ver, vdir, backend_list());
        if (cfg.backend.empty()) cfg.backend = b->name;
        if (cfg.platform.empty()) cfg.platform = b->platforms.empty() ? b->name : b->platforms.front();
        std::string what = fmt::format("model '{}' version {}", name, ver);
        if (b->autocomplete) STRATO_RETURN_IF_ERROR(b->autocomplete(&cfg, vdir).with_context(what));
        STRATO_RETURN_IF_ERROR(validate_model_config(cfg, source));
        STRATO_ASSIGN_OR_RETURN(std::vector<Device> devices, place_instances(&cfg, b->gpu, b->gpu ? visible_gpus() : 0));
        auto t0 = Clock::now();
        auto warmup = warmup_requests(cfg, e.dir);
        if (!warmup) return warmup.status().with_context(what);
        auto mv = std::make_shared<ModelVersion>();
        auto& per_device = mv->copies;  // instances on one device share a copy
        for (const Device& d : devices) {
            auto& m = per_device[d];
            if (!m) {
                const std::string where = d.is_gpu() ? fmt::format("{} on {}", what, d.name()) : what;
                auto loaded = b->load(cfg, vdir, d);
                if (!loaded) return loaded.status().with_context(where);
                m = std::move(loaded).value();
                STRATO_RETURN_IF_ERROR(run_warmup(*warmup, *m, opt_.interrupted).with_context(where));
            }
            mv->instances.push_back(m);
        }
        mv->name = name;
        mv->version = ver;
        mv->dir = vdir;
        mv->config = cfg;
        mv->platform = cfg.platform;
        mv->labels = mv->instances.front()->labels();
        for (const auto& o : cfg.outputs) {
            if (o.label_filename.empty() || !mv->labels.empty()) continue;
            auto text = strato::fs::read_file((fs::path(e.dir) / o.label_filename).string(), strato::fs::kTextFileLimit);
            if (!text) return text.status().with_context(what);
            size_t pos = 0;
            while (pos < text->size()) {
                size_t nl = text->find('\n', pos);
                if (nl == std::string::npos) nl = text->size();
                mv->labels.push_back(text->substr(pos, nl - pos));
                pos = nl + 1;
            }
        }
        mv->metrics = make_metrics(*registry_, name, ver);
        BatcherOptions bo;
        bo.name = name;
        bo.batches = cfg.max_batch_size > 0;
        bo.dynamic = cfg.dynamic_batching.has_value() && bo.batches;  // (without a batch dim: its queue policy only)
        bo.max_batch_size = cfg.max_batch_size;
        bo.instances = static_cast<int>(mv->instances.size());
        bo.max_queue_size = opt_.default_max_queue_size;
        if (cfg.dynamic_batching) {
            bo.preferred = cfg.dynamic_batching->preferred_batch_size;
            bo.max_delay = std::chrono::microseconds(cfg.dynamic_batching->max_queue_delay_us);
            if (cfg.dynamic_batching->max_queue_size > 0) bo.max_queue_size = cfg.dynamic_batching->max_queue_size;
        }
        ModelVersion* raw = mv.get();
        mv->batcher = std::make_unique<Batcher>(mv->instances, bo, [raw](int64_t rows, const Timing& t, bool ok) {
            if (!ok) return;
            raw->stats.execution_count.fetch_add(1);
            raw->metrics.exec_count->add();
            raw->metrics.batch_hist->observe(static_cast<uint64_t>(rows));
            raw->metrics.infer_hist->observe(static_cast<uint64_t>(t.compute_infer_ns));
            std::lock_guard lock(raw->stats.mu);
            auto& bs = raw->stats.batch_stats[rows];
            ++bs.count;
            bs.input_ns += t.compute_input_ns;
            bs.infer_ns += t.compute_infer_ns;
            bs.output_ns += t.compute_output_ns;
        });
        std::string where;
        for (const auto& [d, m] : per_device) {
            const std::string how = m->describe();
            where += fmt::format("{}{}{}", where.empty() ? "" : ", ", d.name(), how.empty() ? "" : ": " + how);
        }
        log::info("serve: loaded model '{}' version {} ({}, max_batch_size {}, {}{} instance(s) on {}) in {:.0f} ms", name, ver,
                  cfg.platform, cfg.max_batch_size, bo.dynamic ? "dynamic batching, " : "", bo.instances, where,
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        out[ver] = std::move(mv);
    }
    return out;
}

void Repository::retire(std::map<int64_t, std::shared_ptr<ModelVersion>> old) {
    if (old.empty()) return;
    // Stop in the background: queued requests run on the old version, then it is freed here,
    // never on one of its own instance threads.
    std::lock_guard lock(poll_mu_);
    for (auto it = retirees_.begin(); it != retirees_.end();) {
        if (it->done->load()) {
            it->thread.join();
            it = retirees_.erase(it);
        } else {
            ++it;
        }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread t([old = std::move(old), done]() mutable {
        for (auto& [v, mv] : old) mv->batcher->stop();
        old.clear();
        release_free_memory();  // the unloaded weights, not kept in an arena
        done->store(true);
    });
    // Named here, before the unload is answered (inside, it could still carry its creator's name
    // when a client looks): while a "repo-unload" thread lives, the old version is being freed.
    pthread_setname_np(t.native_handle(), "repo-unload");
    retirees_.push_back({std::move(t), done});
}

Status Repository::load_locked(const std::string& name, const std::optional<nlohmann::json>& config_json, bool poll) {
    Entry proto;
    {
        std::lock_guard lock(mu_);
        auto it = entries_.find(name);
        if (it != entries_.end() && it->second.package) {
            proto.dir = it->second.dir;
            proto.package = true;
        }
    }
    if (!proto.package) {
        auto dir = locate(name);
        if (!dir && dir.status().code() == StatusCode::kAlreadyExists) {
            // A name in two repositories is a model that cannot load: UNAVAILABLE with its reason
            // (the server is not ready while it lasts), its serving versions kept as after any
            // failed reload. No fingerprint: once one copy goes, the next poll loads it again.
            std::lock_guard lock(mu_);
            Entry& e = entries_[name];
            if (e.reason != dir.status().message()) log::error("serve: {}", dir.status().message());
            e.reason = dir.status().message();
            e.fingerprint.clear();
            if (e.versions.empty()) e.state = ModelState::kUnavailable;
            return dir.status();
        }
        if (!dir) {
            log::error("serve: {}", dir.status().message());
            return dir.status();
        }
        proto.dir = *dir;
    }
    std::string fp = fingerprint(proto);
    {
        std::lock_guard lock(mu_);
        Entry& e = entries_[name];
        e.dir = proto.dir;
        e.package = proto.package;
        if (e.versions.empty()) e.state = ModelState::kLoading;
    }
    auto t0 = Clock::now();
    // Backends read files users and exporters wrote; whatever one throws fails this load only,
    // never the server (a poll thread has no one above it to catch).
    auto built = [&]() -> Result<std::map<int64_t, std::shared_ptr<ModelVersion>>> {
        try {
            return build(name, proto, config_json);
        } catch (const std::exception& ex) {
            // (libtorch's errors append a stack trace: the reason shown in the index is the message)
            std::string what = ex.what();
            if (auto at = what.find("\nException raised from "); at != std::string::npos) what.resize(at);
            return invalid_argument("{}: {}", proto.dir, what);
        }
    }();
    std::map<int64_t, std::shared_ptr<ModelVersion>> old;
    // (listed before the lock: inference lookups take it, and a slow file system must not hold them)
    std::error_code ec;
    const bool no_versions = !built && poll && !proto.package && version_dirs(proto.dir, ec).empty() && !ec;
    {
        std::lock_guard lock(mu_);
        Entry& e = entries_[name];
        e.fingerprint = fp;
        if (no_versions && !e.versions.empty()) {
            // Every version directory left the repository: those versions are unloaded (as
            // tritonserver does in poll mode), not kept as after a failed reload.
            old = std::move(e.versions);
            e.versions.clear();
            hide_metrics(registry_, name, old);
            e.state = ModelState::kUnavailable;
            e.reason = built.status().message();
            log::info("serve: '{}' has no version directories left; unloaded", name);
        } else if (!built) {
            e.reason = built.status().message();
            if (e.versions.empty()) e.state = ModelState::kUnavailable;
            log::error("serve: failed to load '{}': {}", name, e.reason);
            return built.status();
        }
    }
    if (!built) {
        retire(std::move(old));
        return built.status();
    }
    {
        std::lock_guard lock(mu_);
        Entry& e = entries_[name];
        old = std::move(e.versions);
        e.versions = std::move(built).value();
        for (const auto& [v, mv] : e.versions) e.served.insert(v);
        e.state = ModelState::kReady;
        e.reason.clear();
        hide_metrics(registry_, name, old, e.versions);
    }
    if (!old.empty())
        log::info("serve: reloaded '{}' in {:.0f} ms; the previous versions finish their queued requests", name,
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    retire(std::move(old));
    return Status::ok();
}

Status Repository::start() {
    std::error_code ec;
    for (size_t i = 0; i < opt_.paths.size(); ++i) {
        if (!fs::is_directory(opt_.paths[i], ec)) return not_found("--model-repository {}: not a directory", opt_.paths[i]);
        // One directory twice ("repo" and "repo/") would make every model "not unique".
        for (size_t j = 0; j < i; ++j)
            if (fs::equivalent(opt_.paths[i], opt_.paths[j], ec))
                return invalid_argument("--model-repository {} and --model-repository {} are the same directory",
                                        opt_.paths[j], opt_.paths[i]);
    }
    std::map<std::string, std::string> package_dirs;
    for (const auto& [name, dir] : opt_.packages) {
        if (!valid_model_name(name)) return invalid_argument("--model {}={}: '{}' is not a valid model name", name, dir, name);
        if (!fs::is_directory(dir, ec)) return not_found("--model {}={}: {} is not a directory", name, dir, dir);
        // One name, one model: a second --model or a repository's model of that name would be
        // served instead of, or hidden behind, the other without a word.
        if (auto [it, fresh] = package_dirs.emplace(name, dir); !fresh)
            return invalid_argument("--model {}: the name is given twice ({} and {}); name them apart with NAME=DIR", name,
                                    it->second, dir);
        for (const auto& p : opt_.paths)
            if (fs::is_directory(fs::path(p) / name, ec))
                return invalid_argument("--model {}={}: --model-repository {} also has a model '{}' (rename one with NAME=DIR)",
                                        name, dir, p, name);
        // A package is served with the config filled in from it: a config file put beside it
        // (instance_group, dynamic_batching, ...) is not read, which must not go unsaid.
        for (const char* file : {"config.pbtxt", "config.toml"})
            if (fs::exists(fs::path(dir) / file, ec))
                log::warn("serve: --model {}={}: {} is not read (a --model package is served with the config filled in "
                          "from it); to configure the model, serve it from a --model-repository as {}/1/ beside "
                          "{}/{}",
                          name, dir, (fs::path(dir) / file).string(), name, name, file);
        std::lock_guard lock(mu_);
        Entry& e = entries_[name];
        e.dir = dir;
        e.package = true;
    }
    std::set<std::string> to_load;
    for (const auto& [name, dir] : opt_.packages) to_load.insert(name);
    const bool star = std::find(opt_.startup_models.begin(), opt_.startup_models.end(), "*") != opt_.startup_models.end();
    // As tritonserver: '*' is all models, and naming others beside it is an error (a typo among
    // them would go unnoticed).
    if (star && opt_.startup_models.size() > 1)
        return invalid_argument("--load-model '*' loads every model; it cannot be given with other --load-model names");
    bool all = opt_.mode != ControlMode::kExplicit || star;
    if (all) {
        for (const auto& p : opt_.paths)
            for (const auto& it : list_dir(p, ec)) {
                const std::string n = it.path().filename().string();
                if (std::error_code ec2; !it.is_directory(ec2)) continue;
                if (valid_model_name(n)) to_load.insert(n);
                else if (n[0] != '.')
                    log::warn("serve: {}: {} is not a valid model name (control characters, '\\' or bytes that are "
                              "not UTF-8); it is not served", p, json_text(n));
            }
    } else {
        // A name that is not in the repository is a typo in the launch script, not a model that
        // failed to load: refuse to start rather than come up ready without it.
        for (const auto& m : opt_.startup_models) {
            auto dir = locate(m);
            if (!dir) return Status(dir.status().code(), fmt::format("--load-model {}: {}", m, dir.status().message()));
            to_load.insert(m);
        }
    }
    if (opt_.mode != ControlMode::kExplicit && !opt_.startup_models.empty())
        log::warn("serve: --load-model is for --model-control-mode explicit; in this mode every model in the repository "
                  "loads");
    std::lock_guard lock(load_mu_);
    for (const auto& name : to_load) {
        if (opt_.interrupted && opt_.interrupted())
            return {StatusCode::kCancelled, "interrupted while loading the models"};
        (void)load_locked(name, std::nullopt);  // failures stay UNAVAILABLE, as in tritonserver
    }
    if (opt_.mode == ControlMode::kPoll)
        poller_ = std::thread([this] {
            set_thread_name("repo-poll");
            poll_loop();
        });
    return Status::ok();
}

void Repository::stop() {
    {
        std::lock_guard lock(poll_mu_);
        stopping_ = true;
    }
    poll_cv_.notify_all();
    if (poller_.joinable()) poller_.join();
    std::map<std::string, Entry> entries;
    {
        std::lock_guard lock(mu_);
        entries = std::move(entries_);
        entries_.clear();
    }
    for (auto& [name, e] : entries)
        for (auto& [v, mv] : e.versions) mv->batcher->stop();
    entries.clear();
    std::vector<Retiree> retirees;
    {
        std::lock_guard lock(poll_mu_);
        retirees = std::move(retirees_);
        retirees_.clear();
    }
    for (auto& r : retirees) r.thread.join();
}

Result<std::shared_ptr<ModelVersion>> Repository::get(const std::string& name, const std::string& version) const {
    std::lock_guard lock(mu_);
    auto it = entries_.find(name);
    // (kUnknown without versions: a --model package named before its first load began)
    if (it == entries_.end() || (it->second.versions.empty() && it->second.state == ModelState::kUnknown))
        return invalid_argument("Request for unknown model: '{}' is not found", name);
    const Entry& e = it->second;
    if (!version.empty()) {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(version.data(), version.data() + version.size(), v);
        if (ec != std::errc() || p != version.data() + version.size())
            return invalid_argument("model version must be an integer, got '{}'", version);
        if (auto vit = e.versions.find(v); vit != e.versions.end()) return vit->second;
        // As tritonserver's GetModel: a version it knows that is not ready (unloaded, dropped by
        // a reload's version policy, loading) is 503 — try again later; one it never had is 404.
        if (e.served.count(v) || e.state == ModelState::kLoading) {
            std::string why = e.versions.empty() && e.state == ModelState::kLoading ? "loading" : e.versions.empty() ? e.reason : "";
            return Status{StatusCode::kUnavailable, fmt::format("Request for unknown model: '{}' version {} is not at ready state{}",
                                                              name, v, why.empty() ? "" : " (" + why + ")")};
        }
        return not_found("Request for unknown model: '{}' version {} is not found", name, v);
    }
    // A model the server knows without a ready version (its first load running, unloaded, or
    // failed): 404 "has no available versions" in every one of those states, as tritonserver
    // answers (its model stays in its map from the first load on). Which state is said after.
    if (e.versions.empty()) {
        std::string why = e.state == ModelState::kLoading ? "loading" : e.reason;
        return Status{StatusCode::kNotFound, fmt::format("Request for unknown model: '{}' has no available versions{}", name,
                                                      why.empty() ? "" : " (" + why + ")")};
    }
    return e.versions.rbegin()->second;
}

std::vector<std::shared_ptr<ModelVersion>> Repository::versions(const std::string& name) const {
    std::lock_guard lock(mu_);
    std::vector<std::shared_ptr<ModelVersion>> out;
    auto it = entries_.find(name);
    if (it == entries_.end()) return out;
    for (auto v = it->second.versions.rbegin(); v != it->second.versions.rend(); ++v) out.push_back(v->second);
    return out;
}

std::vector<std::shared_ptr<ModelVersion>> Repository::all_versions() const {
    std::lock_guard lock(mu_);
    std::vector<std::shared_ptr<ModelVersion>> out;
    for (const auto& [n, e] : entries_)
        for (const auto& [v, mv] : e.versions) out.push_back(mv);
    return out;
}

std::vector<IndexEntry> Repository::index(bool ready_only) const {
    std::vector<IndexEntry> out;
    std::set<std::string> seen;
    {
        std::lock_guard lock(mu_);
        for (const auto& [n, e] : entries_) {
            seen.insert(n);
            if (!e.versions.empty()) {
                // A reload that failed leaves the versions serving: they are READY (as in
                // tritonserver), and the reason says it is about the reload, not about them.
                const std::string why = e.reason.empty() ? "" : "serving; the last reload failed: " + e.reason;
                for (const auto& [v, mv] : e.versions) out.push_back({n, std::to_string(v), "READY", why});
            } else if (!ready_only) {
                out.push_back({n, "", model_state_name(e.state), e.reason});
            }
        }
    }
    if (!ready_only) {
        std::error_code ec;
        for (const auto& p : opt_.paths)
            for (const auto& it : list_dir(p, ec)) {
                std::string n = it.path().filename().string();
                std::error_code ec2;
                if (it.is_directory(ec2) && valid_model_name(n) && seen.insert(n).second) out.push_back({n, "", "", ""});
            }
    }
    std::sort(out.begin(), out.end(), [](const IndexEntry& a, const IndexEntry& b) {
        return std::tie(a.name, a.version) < std::tie(b.name, b.version);
    });
    return out;
}

bool Repository::ready() const {
    if (!opt_.strict_readiness) return true;
    std::lock_guard lock(mu_);
    for (const auto& [n, e] : entries_)
        // A model unloaded on purpose does not make the server unready (as in tritonserver).
        if (e.versions.empty() && e.state != ModelState::kUnknown && e.reason != "unloaded") return false;
    return true;
}

Status Repository::load(const std::string& name, const std::optional<nlohmann::json>& config_json) {
    if (opt_.mode == ControlMode::kNone)
        return Status{StatusCode::kUnavailable, "explicit model load / unload is not allowed: start the server with --model-control-mode=explicit"};
    if (opt_.mode == ControlMode::kPoll)
        return Status{StatusCode::kUnavailable, "explicit model load / unload is not allowed if polling is enabled"};
    std::lock_guard lock(load_mu_);
    // Triton answers every failed load (unknown model, bad config, a model file its backend cannot
    // read, a GPU instance group without a GPU) with INVALID_ARG, an HTTP 400; only the control-mode
    // refusals above are UNAVAILABLE (503).
    Status st = load_locked(name, config_json);
    if (st.code() == StatusCode::kCancelled) return {StatusCode::kUnavailable, "the server is shutting down"};
    return st.is_ok() ? st : Status(StatusCode::kInvalidArgument, st.message());
}

Status Repository::unload(const std::string& name) {
    if (opt_.mode != ControlMode::kExplicit)
        return Status{StatusCode::kUnavailable, opt_.mode == ControlMode::kPoll
                                              ? "explicit model load / unload is not allowed if polling is enabled"
                                              : "explicit model load / unload is not allowed: start the server with --model-control-mode=explicit"};
    if (!valid_model_name(name)) return invalid_argument("'{}' is not a valid model name", name);
    std::lock_guard lock(load_mu_);
    std::map<int64_t, std::shared_ptr<ModelVersion>> old;
    {
        std::lock_guard l2(mu_);
        auto it = entries_.find(name);
        if (it == entries_.end()) {
            // Triton answers an unload of an unknown model with success; keep that.
            return Status::ok();
        }
        old = std::move(it->second.versions);
        it->second.versions.clear();
        it->second.state = ModelState::kUnavailable;
        it->second.reason = "unloaded";
        hide_metrics(registry_, name, old);
    }
    log::info("serve: unloaded '{}'", name);
    retire(std::move(old));
    return Status::ok();
}

void Repository::poll_once() {
    std::lock_guard lock(load_mu_);
    std::set<std::string> on_disk;
    // A repository that cannot be listed (moved away, an NFS hiccup, permissions) is no empty
    // one: the models stay as they are, and the server says why once.
    std::string error;
    for (const auto& p : opt_.paths) {
        std::error_code ec;
        for (const auto& it : list_dir(p, ec)) {
            std::error_code ec2;
            if (it.is_directory(ec2) && valid_model_name(it.path().filename().string()))
                on_disk.insert(it.path().filename().string());
        }
        if (ec) {
            error = fmt::format("{}: {}", p, ec.message());
            break;
        }
    }
    if (!error.empty()) {
        if (error != poll_error_)
            log::error("serve: cannot list the model repository ({}); the loaded models stay as they are until it can be",
                       error);
        poll_error_ = error;
        return;
    }
    if (!poll_error_.empty()) log::info("serve: the model repository can be listed again");
    poll_error_.clear();
    std::vector<std::string> reload, remove;
    {
        std::lock_guard l2(mu_);
        for (const auto& n : on_disk) {
            auto it = entries_.find(n);
            if (it == entries_.end()) {
                reload.push_back(n);
                continue;
            }
            // A copy of the model that appeared in another repository (or left it), or a model
            // that moved between repositories: loaded again, which says so. A --model package
            // of a name a repository took later stays as it is (its entry is no repository's),
            // which is said once: the repository's model would otherwise wait unseen.
            if (it->second.package) {
                if (shadowed_.insert(n).second)
                    log::warn("serve: the model repository now has a model directory '{}', but --model {}={} is served "
                              "under that name; the repository's '{}' is not loaded (rename one)",
                              n, n, it->second.dir, n);
                continue;
            }
            if (auto dir = locate(n); dir ? *dir != it->second.dir : dir.status().message() != it->second.reason) {
                reload.push_back(n);
                continue;
            }
            Entry probe;
            probe.dir = it->second.dir;
            if (fingerprint(probe) != it->second.fingerprint) reload.push_back(n);
        }
        for (auto it = shadowed_.begin(); it != shadowed_.end();) it = on_disk.count(*it) ? std::next(it) : shadowed_.erase(it);
        // Gone from disk: unloaded, and so is a model that never loaded (it would keep the
        // server unready under --strict-readiness until a restart).
        for (const auto& [n, e] : entries_)
            if (!e.package && !on_disk.count(n) && e.state != ModelState::kLoading) remove.push_back(n);
    }
    for (const auto& n : reload) (void)load_locked(n, std::nullopt, /*poll=*/true);
    for (const auto& n : remove) {
        std::map<int64_t, std::shared_ptr<ModelVersion>> old;
        {
            std::lock_guard l2(mu_);
            old = std::move(entries_[n].versions);
            entries_.erase(n);
            hide_metrics(registry_, n, old);
        }
        log::info("serve: '{}' left the repository; unloaded", n);
        retire(std::move(old));
    }
}

void Repository::poll_loop() {
    while (true) {
        {
            std::unique_lock lock(poll_mu_);
            poll_cv_.wait_for(lock, opt_.poll_interval, [&] { return stopping_; });
            if (stopping_) return;
        }
        poll_once();
    }
}

}  // namespace strato::serve
