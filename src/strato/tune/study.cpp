#include "strato/tune/study.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "strato/core/config.h"
#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/train/train_config.h"
#include "strato/tune/sampler.h"

namespace strato::tune {

namespace stdfs = std::filesystem;

std::string study_dir(const StudyConfig& cfg, const std::string& dir_flag) {
    return dir_flag.empty() ? (stdfs::path("runs") / "tune" / cfg.name).string() : dir_flag;
}

namespace {

/// What identifies a study: changing any of it makes a different study. The number of trials is
/// not part of it: raising it continues the same study with more trials.
std::string fingerprint(const StudyConfig& c) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : c.params)
        params.push_back({p.key, static_cast<int>(p.dist), p.low, p.high, p.q, p.values, p.when_key, p.when_value});
    return nlohmann::json{{"base", c.base},        {"fixed", c.fixed},         {"metric", c.metric},
                          {"max", c.maximize},     {"sampler", c.sampler},
                          {"scheduler", c.scheduler}, {"variant", c.variant},  {"seed", c.seed},
                          {"grace", c.grace},      {"max_t", c.max_t},         {"reduction", c.reduction},
                          {"params", params}}
        .dump();
}

std::string trial_name(int id) { return fmt::format("trial-{:04d}", id); }

std::string describe(const Assignment& a) {
    std::string out;
    for (const auto& [k, v] : a) out += (out.empty() ? "" : ", ") + k + "=" + v;
    return out;
}

struct Running {
    pid_t pid = 0;
    int target = 0;
    size_t offset = 0;        // bytes of metrics.jsonl already read
    bool stop_requested = false;
};

class Executor {
public:
    Executor(const StudyConfig& c, const RunOptions& o, std::unique_ptr<Store> store)
        : c_(c), o_(o), store_(std::move(store)), milestones_(c.milestones()) {}

    Result<RunSummary> run();

private:
    Status launch(const Trial& t);
    Status poll_results(int id, Running& r);
    Status on_result(int id, int epoch, double value, Running& r);
    Status reap();
    /// The next thing to run: a promotion or a new trial; nullopt when there is none now.
    Result<std::optional<Trial>> next_job();
    double signed_value(double v) const { return c_.maximize ? v : -v; }

    const StudyConfig& c_;
    const RunOptions& o_;
    std::unique_ptr<Store> store_;
    std::vector<int> milestones_;
    std::map<int, Running> running_;
};

Status Executor::launch(const Trial& t) {
    const stdfs::path dir(o_.dir);
    std::vector<std::string> args = {o_.strato_binary, "-q", "train", c_.base};
    for (const auto& f : c_.fixed) args.insert(args.end(), {"--set", f});
    for (const auto& [k, v] : t.params) args.insert(args.end(), {"--set", k + "=" + v});
    for (std::string s : {fmt::format("run.dir=\"{}\"", (dir / "trials").string()),
                          fmt::format("run.name=\"{}\"", trial_name(t.id)), fmt::format("train.epochs={}", c_.max_t),
                          fmt::format("train.stop_after_epochs={}", t.target < c_.max_t ? t.target : 0),
                          fmt::format("run.threads={}", c_.threads_per_trial)})
        args.insert(args.end(), {"--set", s});
    args.insert(args.end(), {"--no-report", "--resume"});
    std::string log_path = (dir / "logs" / (trial_name(t.id) + ".log")).string();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const double mem = c_.memory_limit_gb;
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return io_error("fork: {}", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed executor takes its trials with it
        if (getppid() != parent) _exit(1);
        int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        if (mem > 0) {
            rlimit lim{static_cast<rlim_t>(mem * (1ull << 30)), static_cast<rlim_t>(mem * (1ull << 30))};
            setrlimit(RLIMIT_AS, &lim);
        }
        setenv("OMP_NUM_THREADS", std::to_string(c_.threads_per_trial).c_str(), 1);
        execv(argv[0], argv.data());
        _exit(127);
    }
    Running r;
    r.pid = pid;
    r.target = t.target;
    running_[t.id] = r;
    if (!o_.quiet)
        log::info("tune: {} -> {} epochs: {}", trial_name(t.id), t.target, describe(t.params));
    return Status::ok();
}

Status Executor::on_result(int id, int epoch, double value, Running& r) {
    STRATO_RETURN_IF_ERROR(store_->add_result(id, epoch, value, c_.maximize));
    if (c_.scheduler == "asha") {
        for (size_t k = 0; k + 1 < milestones_.size(); ++k) {
            if (milestones_[k] != epoch) continue;
            STRATO_RETURN_IF_ERROR(store_->add_rung(static_cast<int>(k), id, value));
            if (c_.variant == "stopping") {
                STRATO_ASSIGN_OR_RETURN(auto rung, store_->rung(static_cast<int>(k)));
                if (static_cast<int>(rung.size()) < c_.reduction) break;
                std::vector<double> vals;
                for (const auto& e : rung) vals.push_back(signed_value(e.value));
                std::sort(vals.begin(), vals.end());
                // Keep the top 1/eta: stop below the (1 - 1/eta) quantile.
                double cutoff = vals[static_cast<size_t>((1.0 - 1.0 / c_.reduction) * static_cast<double>(vals.size() - 1))];
                if (signed_value(value) < cutoff) r.stop_requested = true;
            }
        }
    } else if (c_.scheduler == "median" && epoch >= c_.grace && epoch < c_.max_t) {
        STRATO_ASSIGN_OR_RETURN(auto at, store_->results_at(epoch));
        std::vector<double> others;
        for (const auto& [t, v] : at)
            if (t != id) others.push_back(signed_value(v));
        if (others.size() >= 2) {
            std::sort(others.begin(), others.end());
            double median = others.size() % 2 ? others[others.size() / 2]
                                              : (others[others.size() / 2 - 1] + others[others.size() / 2]) / 2;
            if (signed_value(value) < median) r.stop_requested = true;
        }
    }
    if (r.stop_requested) {
        if (!o_.quiet) log::info("tune: stopping {} at epoch {} ({} = {:.4g})", trial_name(id), epoch, c_.metric, value);
        kill(r.pid, SIGTERM);
    }
    return Status::ok();
}

Status Executor::poll_results(int id, Running& r) {
    const std::string path = (stdfs::path(o_.dir) / "trials" / trial_name(id) / "metrics.jsonl").string();
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::ok();
    in.seekg(0, std::ios::end);
    const size_t size = static_cast<size_t>(in.tellg());
    if (size < r.offset) r.offset = 0;  // truncated by a resume: read again (results are idempotent)
    in.seekg(static_cast<std::streamoff>(r.offset));
    std::string chunk(size - r.offset, '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    size_t pos = 0;
    while (true) {
        size_t nl = chunk.find('\n', pos);
        if (nl == std::string::npos) break;  // a torn last line: read it next time
        auto j = nlohmann::json::parse(chunk.substr(pos, nl - pos), nullptr, false);
        pos = nl + 1;
        if (!j.is_object() || j.value("kind", "") != "eval" || !j.contains(c_.metric) || !j[c_.metric].is_number())
            continue;
        STRATO_RETURN_IF_ERROR(on_result(id, j.value("epoch", 0), j[c_.metric].get<double>(), r));
    }
    r.offset += pos;
    return Status::ok();
}

Status Executor::reap() {
    for (auto it = running_.begin(); it != running_.end();) {
        int status = 0;
        if (waitpid(it->second.pid, &status, WNOHANG) != it->second.pid) {
            STRATO_RETURN_IF_ERROR(poll_results(it->first, it->second));
            ++it;
            continue;
        }
        const int id = it->first;
        STRATO_RETURN_IF_ERROR(poll_results(id, it->second));
        STRATO_ASSIGN_OR_RETURN(auto results, store_->results(id));
        const int epochs = results.empty() ? 0 : results.back().first;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (signals::stop_requested() && code == 130) {
            // Our own shutdown: leave it running in the store; the next run resumes it.
        } else if (it->second.stop_requested && (code == 0 || code == 130)) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kStopped));
        } else if (code == 0 && epochs >= c_.max_t) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kCompleted));
        } else if (code == 0 && epochs >= it->second.target) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kPaused));
        } else if (code == 0) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kCompleted));  // early stopping in the trainer
        } else {
            std::string tail;
            if (auto log = fs::read_file((stdfs::path(o_.dir) / "logs" / (trial_name(id) + ".log")).string()))
                tail = log->substr(log->size() > 400 ? log->size() - 400 : 0);
            log::warn("tune: {} failed (exit {}): {}", trial_name(id), code, tail);
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kFailed, fmt::format("exit {}: {}", code, tail)));
        }
        it = running_.erase(it);
    }
    return Status::ok();
}

Result<std::optional<Trial>> Executor::next_job() {
    STRATO_ASSIGN_OR_RETURN(auto trials, store_->trials());
    if (c_.scheduler == "asha" && c_.variant == "promotion") {
        for (int k = static_cast<int>(milestones_.size()) - 2; k >= 0; --k) {
            STRATO_ASSIGN_OR_RETURN(auto rung, store_->rung(k));
            std::sort(rung.begin(), rung.end(), [&](const RungEntry& a, const RungEntry& b) {
                return signed_value(a.value) != signed_value(b.value) ? signed_value(a.value) > signed_value(b.value)
                                                                      : a.trial < b.trial;
            });
            const size_t n = rung.size() / static_cast<size_t>(c_.reduction);
            for (size_t i = 0; i < n; ++i) {
                if (rung[i].promoted) continue;
                auto t = std::find_if(trials.begin(), trials.end(), [&](const Trial& x) { return x.id == rung[i].trial; });
                if (t == trials.end() || t->state != TrialState::kPaused) continue;
                STRATO_RETURN_IF_ERROR(store_->promote(k, t->id, milestones_[k + 1]));
                t->state = TrialState::kRunning;
                t->target = milestones_[k + 1];
                if (!o_.quiet) log::info("tune: promoting {} from rung {} ({} epochs)", trial_name(t->id), k, milestones_[k]);
                return std::optional<Trial>(*t);
            }
        }
    }
    if (static_cast<int>(trials.size()) >= c_.trials) return std::optional<Trial>();
    std::vector<Observation> history;
    for (const auto& t : trials)
        if (t.best) history.push_back({t.params, signed_value(*t.best)});
    const int index = static_cast<int>(trials.size());
    std::mt19937_64 rng(c_.seed * 1000003ULL + static_cast<uint64_t>(index));
    Assignment a = sample(c_, index, history, rng);
    STRATO_ASSIGN_OR_RETURN(int id, store_->add_trial(a, milestones_.front()));
    Trial t;
    t.id = id;
    t.params = a;
    t.target = milestones_.front();
    return std::optional<Trial>(t);
}

Result<RunSummary> Executor::run() {
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(stdfs::path(o_.dir) / "logs"));
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(stdfs::path(o_.dir) / "trials"));
    // Trials that were running when the last executor died continue from their checkpoints.
    STRATO_ASSIGN_OR_RETURN(auto trials, store_->trials());
    for (const auto& t : trials) {
        if (t.state != TrialState::kRunning) continue;
        if (static_cast<int>(running_.size()) >= c_.parallel) break;
        if (!o_.quiet) log::info("tune: resuming {} (was running)", trial_name(t.id));
        STRATO_RETURN_IF_ERROR(launch(t));
    }
    bool cancelled = false;
    for (;;) {
        STRATO_RETURN_IF_ERROR(reap());
        if (signals::stop_requested()) {
            cancelled = true;
            if (running_.empty()) break;
            for (auto& [id, r] : running_) kill(r.pid, SIGTERM);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            continue;
        }
        // Waiting trials not yet relaunched (more were running than `parallel` allows now).
        STRATO_ASSIGN_OR_RETURN(auto all, store_->trials());
        for (const auto& t : all)
            if (t.state == TrialState::kRunning && !running_.count(t.id) &&
                static_cast<int>(running_.size()) < c_.parallel)
                STRATO_RETURN_IF_ERROR(launch(t));
        while (static_cast<int>(running_.size()) < c_.parallel) {
            STRATO_ASSIGN_OR_RETURN(auto job, next_job());
            if (!job) break;
            STRATO_RETURN_IF_ERROR(launch(*job));
        }
        if (running_.empty()) break;  // nothing runs and nothing can start: done
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (cancelled)
        return Status(StatusCode::kCancelled, "interrupted; the running trials saved checkpoints\nhint: run the same "
                                              "command again to continue the study");
    RunSummary s;
    STRATO_ASSIGN_OR_RETURN(auto done, store_->trials());
    for (const auto& t : done) {
        ++s.trials;
        s.completed += t.state == TrialState::kCompleted;
        s.stopped += t.state == TrialState::kStopped || t.state == TrialState::kPaused;
        s.failed += t.state == TrialState::kFailed;
        s.epochs_trained += t.epochs;
        if (t.best && (!s.best || c_.better(*t.best, *s.best->best))) s.best = t;
    }
    return s;
}

Result<std::unique_ptr<Store>> open_store(const StudyConfig& cfg, const std::string& dir, bool create) {
    std::string db = (stdfs::path(dir) / "study.db").string();
    std::error_code ec;
    if (!create && !stdfs::exists(db, ec)) return not_found("{} has no study.db (has the study run?)", dir);
    if (create) STRATO_RETURN_IF_ERROR(fs::ensure_dir(dir));
    STRATO_ASSIGN_OR_RETURN(auto store, Store::open(db));
    STRATO_RETURN_IF_ERROR(store->bind_study(fingerprint(cfg)));
    return store;
}

}  // namespace

Result<RunSummary> run_study(const StudyConfig& cfg, const RunOptions& options) {
    STRATO_RETURN_IF_ERROR(validate_against_train_config(cfg));
    RunOptions o = options;
    if (o.strato_binary.empty()) {
        std::error_code ec;
        o.strato_binary = stdfs::read_symlink("/proc/self/exe", ec).string();
        if (ec) return io_error("cannot find this executable: {}", ec.message());
    }
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, o.dir, true));
    Executor ex(cfg, o, std::move(store));
    return ex.run();
}

Result<nlohmann::json> study_json(const StudyConfig& cfg, const std::string& dir) {
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, false));
    STRATO_ASSIGN_OR_RETURN(auto trials, store->trials());
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : trials) {
        STRATO_ASSIGN_OR_RETURN(auto res, store->results(t.id));
        nlohmann::json r = nlohmann::json::array();
        for (const auto& [e, v] : res) r.push_back({e, v});
        ts.push_back({{"id", t.id},
                      {"name", trial_name(t.id)},
                      {"params", t.params},
                      {"state", state_name(t.state)},
                      {"epochs", t.epochs},
                      {"best", t.best ? nlohmann::json(*t.best) : nlohmann::json(nullptr)},
                      {"results", r},
                      {"error", t.error}});
    }
    nlohmann::json rungs = nlohmann::json::array();
    auto ms = cfg.milestones();
    for (size_t k = 0; k + 1 < ms.size(); ++k) {
        STRATO_ASSIGN_OR_RETURN(auto rung, store->rung(static_cast<int>(k)));
        int promoted = 0;
        for (const auto& e : rung) promoted += e.promoted;
        rungs.push_back({{"rung", k}, {"epochs", ms[k]}, {"entries", rung.size()}, {"promoted", promoted}});
    }
    return nlohmann::json{{"kind", "strato-tune"},        {"name", cfg.name},       {"metric", cfg.metric},
                          {"mode", cfg.maximize ? "max" : "min"}, {"sampler", cfg.sampler}, {"scheduler", cfg.scheduler},
                          {"variant", cfg.variant},        {"max_t", cfg.max_t},     {"trials", ts},
                          {"rungs", rungs}};
}

Result<std::string> leaderboard(const StudyConfig& cfg, const std::string& dir, int top) {
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, false));
    STRATO_ASSIGN_OR_RETURN(auto trials, store->trials());
    std::stable_sort(trials.begin(), trials.end(), [&](const Trial& a, const Trial& b) {
        if (a.best.has_value() != b.best.has_value()) return a.best.has_value();
        return a.best && cfg.better(*a.best, *b.best);
    });
    int64_t epochs = 0;
    std::map<std::string, int> states;
    for (const auto& t : trials) epochs += t.epochs, ++states[state_name(t.state)];
    std::string out = fmt::format("study {} ({} sampler, {} scheduler): {} of {} trials, {} epochs trained ({} of a full "
                                  "budget of {}); states:",
                                  cfg.name, cfg.sampler, cfg.scheduler, trials.size(), cfg.trials, epochs,
                                  fmt::format("{:.0f}%", 100.0 * static_cast<double>(epochs) / (cfg.trials * cfg.max_t)),
                                  cfg.trials * cfg.max_t);
    for (const auto& [s, n] : states) out += fmt::format(" {} {}", n, s);
    out += fmt::format("\n\n{:>4}  {:<11} {:>10} {:>7}  {}\n", "rank", "trial", cfg.metric, "epochs", "parameters");
    int rank = 0;
    for (const auto& t : trials) {
        if (++rank > top) break;
        out += fmt::format("{:>4}  {:<11} {:>10} {:>7}  {}{}\n", rank, trial_name(t.id),
                           t.best ? fmt::format("{:.4f}", *t.best) : "-", t.epochs, describe(t.params),
                           t.state == TrialState::kFailed ? "  (failed)" : "");
    }
    return out;
}

Status export_best(const StudyConfig& cfg, const std::string& dir, const std::string& out) {
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, false));
    STRATO_ASSIGN_OR_RETURN(auto trials, store->trials());
    const Trial* best = nullptr;
    for (const auto& t : trials)
        if (t.best && (!best || cfg.better(*t.best, *best->best))) best = &t;
    if (!best) return not_found("study {} has no trial with a result yet", cfg.name);
    std::vector<std::string> sets = cfg.fixed;
    for (const auto& [k, v] : best->params) sets.push_back(k + "=" + v);
    STRATO_ASSIGN_OR_RETURN(train::TrainConfig tc, train::load_train_config(cfg.base, sets));
    std::string text = fmt::format("# The best trial of study {} ({}: {} = {:.4f} after {} epochs), as a train config.\n",
                                   cfg.name, trial_name(best->id), cfg.metric, *best->best, best->epochs) +
                       config::dump(tc);
    return fs::atomic_write(out, text);
}

}  // namespace strato::tune
