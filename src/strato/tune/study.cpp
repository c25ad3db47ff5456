#include "strato/tune/study.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include "strato/core/cgroup.h"
#include "strato/core/config.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/parse.h"
#include "strato/core/signals.h"
#include "strato/core/toml_guard.h"
#include "strato/train/train_config.h"
#include "strato/tune/sampler.h"

namespace strato::tune {

namespace stdfs = std::filesystem;

bool rankable(const Trial& t) { return t.best.has_value() && t.state != TrialState::kFailed; }

std::optional<Trial> best_trial(const StudyConfig& cfg, const std::vector<Trial>& trials) {
    const Trial* best = nullptr;
    for (const auto& t : trials)
        if (rankable(t) && (!best || cfg.better(*t.best, *best->best))) best = &t;
    return best ? std::optional<Trial>(*best) : std::nullopt;
}

Status check_study_output(const std::string& dir, const std::string& out, std::string_view flag) {
    if (fs::is_stream(out)) return Status::ok();  // (-, /dev/stdout, a pipe: nothing of the study's there)
    const stdfs::path d(dir);
    for (const char* sub : {"trials", "logs"})
        if (fs::is_within(out, d / sub))
            return invalid_argument("{} {}: inside {}, which the study owns (its trials' {}); writing there would "
                                    "replace a file the study reads\nhint: choose a path outside {} and {}",
                                    flag, out, (d / sub).string(),
                                    sub == std::string("trials") ? "runs: metrics.jsonl, checkpoints" : "logs",
                                    (d / "trials").string(), (d / "logs").string());
    for (const char* db : {"study.db", "study.db-wal", "study.db-shm", "study.db-journal"})
        if (fs::is_within(out, d / db))
            return invalid_argument("{} {}: that is the study's database {}; writing there would destroy the "
                                    "study\nhint: choose another path",
                                    flag, out, (d / db).string());
    return Status::ok();
}

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
    nlohmann::json j{{"base", c.base},        {"fixed", c.fixed},         {"metric", c.metric},
                          {"max", c.maximize},     {"sampler", c.sampler},
                          {"scheduler", c.scheduler}, {"variant", c.variant},  {"seed", c.seed},
                          {"grace", c.grace},      {"max_t", c.max_t},         {"reduction", c.reduction},
                          {"params", params}};
    if (c.brackets != 1) j["brackets"] = c.brackets;  // studies from before brackets keep their fingerprint
    return json_text(j);
}

// The value for a message: control characters as \xNN, so that the message stays one line.
std::string printable(std::string_view v) {
    std::string out;
    for (char c : v)
        out += std::iscntrl(static_cast<unsigned char>(c)) ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                                                           : std::string(1, c);
    return out;
}

/// The parts of a study's identity besides its definition, each kept under its own key of the
/// study's meta table: the base train config's contents (the trials train on the file as it is
/// when they start or resume, so an edit mixed trials of two setups) and, for TPE, its settings.
/// A study recorded before a part existed takes up its value at the next `tune run`.
std::vector<std::pair<std::string, std::string>> identity_parts(const StudyConfig& c, const std::string& base_text) {
    std::vector<std::pair<std::string, std::string>> parts = {{"study", fingerprint(c)}, {"base_config", base_text}};
    if (c.sampler == "tpe")
        parts.emplace_back(
            "tpe", json_text(nlohmann::json{{"startup_trials", c.tpe_startup}, {"candidates", c.tpe_candidates}}));
    return parts;
}

// A recorded parameter (fingerprint's [key, dist, low, high, q, values, when key, when value]) as
// the study file says it: `loguniform [0.0001, 0.1]`, `choice ["adamw", "sgd"] when ...`.
std::string param_text(const nlohmann::json& p) {
    static const char* kDists[] = {"uniform", "loguniform", "int", "choice", "grid"};
    if (!p.is_array() || p.size() < 8 || !p[1].is_number_integer() || p[1].get<int>() < 0 || p[1].get<int>() > 4)
        return p.dump();
    const int dist = p[1].get<int>();
    std::string out = kDists[dist];
    const auto number = [](const nlohmann::json& x) {
        return x.is_number() ? fmt::format("{}", x.get<double>()) : x.dump();
    };
    if (dist <= 2) {
        out += fmt::format(" [{}, {}]", number(p[2]), number(p[3]));
        if (p[4].is_number() && p[4].get<double>() > 0) out += " q " + number(p[4]);
    } else {
        std::string values;
        for (const auto& v : p[5])
            values += (values.empty() ? "" : ", ") + (v.is_string() ? v.get<std::string>() : v.dump());
        out += " [" + values + "]";
    }
    if (p[6].is_string() && !p[6].get<std::string>().empty())
        out += fmt::format(" when {} == {}", p[6].get<std::string>(), p[7].is_string() ? p[7].get<std::string>() : "");
    return out;
}

// Which parameters differ between two recorded [params] (it said only "[params] changed", and a
// study of ten parameters left the reader to find the one): `[params] "optim.lr" (was loguniform
// [0.0001, 0.1], now loguniform [0.0001, 0.3])`, "was absent" for one added.
std::string param_changes(const nlohmann::json& was, const nlohmann::json& now) {
    std::map<std::string, std::pair<nlohmann::json, nlohmann::json>> by_key;
    for (const auto& p : was)
        if (p.is_array() && !p.empty() && p[0].is_string()) by_key[p[0].get<std::string>()].first = p;
    for (const auto& p : now)
        if (p.is_array() && !p.empty() && p[0].is_string()) by_key[p[0].get<std::string>()].second = p;
    std::string out;
    for (const auto& [key, pair] : by_key) {
        if (pair.first == pair.second) continue;
        out += fmt::format("{}[params] \"{}\" (was {}, now {})", out.empty() ? "" : ", ", printable(key),
                           pair.first.is_null() ? "absent" : param_text(pair.first),
                           pair.second.is_null() ? "absent" : param_text(pair.second));
    }
    return out.empty() ? "[params]" : out;
}

// What differs between two recorded identities (JSON objects): the study keys, with the old and
// new value where they are short.
std::string json_changes(const std::string& was, const std::string& now) {
    static const std::pair<const char*, const char*> kNames[] = {
        {"base", "[study] base"},           {"fixed", "[study] set"},
        {"metric", "[study] metric"},       {"max", "[study] mode"},
        {"sampler", "[study] sampler"},     {"scheduler", "[study] scheduler"},
        {"seed", "[study] seed"},           {"variant", "[scheduler] variant"},
        {"grace", "[scheduler] grace"},     {"max_t", "[scheduler] max_t"},
        {"reduction", "[scheduler] reduction"}, {"brackets", "[scheduler] brackets"},
        {"params", "[params]"},             {"startup_trials", "[tpe] startup_trials"},
        {"candidates", "[tpe] candidates"}};
    const nlohmann::json a = parse_json_bounded(was), b = parse_json_bounded(now);
    if (!a.is_object() || !b.is_object()) return "its definition";
    const auto value = [](const nlohmann::json& j, const std::string& key) -> nlohmann::json {
        if (j.contains(key)) return key == "max" ? nlohmann::json(j[key] == true ? "max" : "min") : j[key];
        return key == "brackets" ? nlohmann::json(1) : nlohmann::json();  // (recorded only when not 1)
    };
    std::string out;
    for (const auto& [key, name] : kNames) {
        const nlohmann::json x = value(a, key), y = value(b, key);
        if (x == y) continue;
        out += out.empty() ? "" : ", ";
        if (key == std::string("params") && x.is_array() && y.is_array()) {
            out += param_changes(x, y);
            continue;
        }
        out += name;
        if (x.is_primitive() && y.is_primitive()) out += fmt::format(" (was {}, now {})", x.dump(), y.dump());
    }
    return out.empty() ? "its definition" : out;
}

// The first line where two texts differ, for a message.
std::string first_difference(const std::string& was, const std::string& now) {
    std::istringstream a(was), b(now);
    std::string x, y;
    for (int line = 1;; ++line) {
        const bool more_a = static_cast<bool>(std::getline(a, x)), more_b = static_cast<bool>(std::getline(b, y));
        if (!more_a && !more_b) return "only in its line endings";
        if (!more_a) x = "<end of file>";
        if (!more_b) y = "<end of file>";
        if (more_a && more_b && x == y) continue;
        const auto shown = [](std::string v) { return v.size() > 80 ? v.substr(0, 77) + "..." : v; };
        return fmt::format("line {} was '{}', now '{}'", line, printable(shown(x)), printable(shown(y)));
    }
}

std::string trial_name(int id) { return fmt::format("trial-{:04d}", id); }

// A trial's memory limit in bytes, bounded (as a parsed study is) so that every integer it
// becomes (memory.max, RLIMIT_AS) holds it: 1e30 GB wrote -9223372036854775808.
double memory_limit_bytes(const StudyConfig& c) {
    return std::clamp(c.memory_limit_gb, 0.0, kMemoryLimitGbMax) * double(1ull << 30);
}

// A trial as the study defines it. A row edited by hand or damaged crashed the executor or ran a
// configuration no sampler proposes: a bracket past the study's indexed past its rungs (a
// segmentation fault), a parameter "abc" ended `tune run` with "error: stod", a choice value not
// in the list was read as its first value by TPE, a parameter left out trained on the base
// config's value.
Status check_trial(const StudyConfig& c, const std::string& db, const Trial& t) {
    const auto damaged = [&](const std::string& what) {
        return data_loss("study store {}: trial {}'s {} (the study database is damaged or was edited by hand)", db,
                         t.id, what);
    };
    if (t.bracket < 0 || t.bracket >= c.brackets)
        return damaged(fmt::format("bracket is {}, but the study has {} bracket(s)", t.bracket, c.brackets));
    if (t.target < 1 || t.target > c.max_t)
        return damaged(fmt::format("target is {} epochs, not in 1..{} ([scheduler] max_t)", t.target, c.max_t));
    for (const auto& [key, literal] : t.params) {
        const auto p = std::find_if(c.params.begin(), c.params.end(), [&](const Param& q) { return q.key == key; });
        if (p == c.params.end()) return damaged(fmt::format("parameter {} is not one of the study's [params]", key));
        if (!p->numeric()) {
            if (std::find(p->values.begin(), p->values.end(), literal) == p->values.end())
                return damaged(fmt::format("parameter {} is {}, not one of its values", key, literal));
            continue;
        }
        auto v = parse_number(literal, std::nan(""), "");
        // (a drawn value is written rounded, to 15 significant digits, by older versions to 6: the
        // rounding may pass an end; a loguniform's must stay above 0, whose log the sampler takes)
        const double x = v ? *v : std::nan("");  // (NaN: in no range)
        const bool in_range = p->dist == Dist::kLogUniform
                                  ? x > 0 && x >= p->low * (1 - 1e-6) && x <= p->high * (1 + 1e-6)
                                  : std::fabs(x - std::clamp(x, p->low, p->high)) <=
                                        1e-6 * std::max(std::fabs(p->low), std::fabs(p->high));
        if (!in_range || (p->dist == Dist::kInt && x != std::floor(x)))
            return damaged(fmt::format("parameter {} is '{}', not {} in [{}, {}]", key, printable(literal),
                                       p->dist == Dist::kInt ? "a whole number" : "a number", p->low, p->high));
    }
    for (const auto& p : c.params)
        if (active(p, t.params) && !t.params.count(p.key))
            return damaged(fmt::format("parameter {} has no value", p.key));
    return Status::ok();
}

// The study's trials, each checked against its definition.
Result<std::vector<Trial>> study_trials(Store& store, const StudyConfig& c) {
    STRATO_ASSIGN_OR_RETURN(std::vector<Trial> trials, store.trials());
    for (const auto& t : trials) STRATO_RETURN_IF_ERROR(check_trial(c, store.path(), t));
    return trials;
}

std::string describe(const Assignment& a) {
    std::string out;
    for (const auto& [k, v] : a) out += (out.empty() ? "" : ", ") + k + "=" + v;
    return out;
}

/// Field 22 of /proc/PID/stat (start time in clock ticks since boot), or empty when no such process.
std::string process_start(pid_t pid) {
    auto stat = fs::read_file(fmt::format("/proc/{}/stat", pid));
    if (!stat) return {};
    size_t p = stat->rfind(')');
    if (p == std::string::npos) return {};
    std::istringstream in(stat->substr(p + 2));
    std::string field;
    for (int i = 3; i <= 22 && in >> field; ++i) {
    }
    return field;
}

// The host as far as process ids go: containers that share a host name (host networking) but
// not a PID namespace cannot check each other's processes, and took each other's live trials.
std::string host_name() {
    char h[256] = {};
    gethostname(h, sizeof h - 1);
    std::error_code ec;
    const std::string ns = stdfs::read_symlink("/proc/self/ns/pid", ec).string();  // "pid:[4026531836]"
    const size_t a = ns.find('['), b = ns.find(']');
    if (ec || a == std::string::npos || b == std::string::npos || b < a) return h;
    return std::string(h) + "#" + ns.substr(a + 1, b - a - 1);
}

/// Another executor's lease: on this host its process is checked directly (so a study killed
/// with kill -9 is taken over at once); elsewhere its heartbeat must be younger than this.
constexpr double kLeaseSeconds = 60;
constexpr auto kHeartbeatEvery = std::chrono::seconds(5);

double now_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool owner_alive(const Trial& t, const std::string& host) {
    if (t.owner.empty()) return false;
    size_t a = t.owner.rfind(':'), b = a == std::string::npos ? a : t.owner.rfind(':', a - 1);
    if (b != std::string::npos && t.owner.compare(0, b, host) == 0 && b == host.size()) {
        auto pid = parse_int(std::string_view(t.owner).substr(b + 1, a - b - 1), 1, INT32_MAX);
        return pid && process_start(static_cast<pid_t>(*pid)) == t.owner.substr(a + 1);
    }
    return now_s() - t.heartbeat < kLeaseSeconds;
}

struct Running {
    pid_t pid = 0;
    int target = 0, bracket = 0;
    size_t offset = 0;            // bytes of metrics.jsonl already read
    bool stop_requested = false;  // the scheduler stopped it
    bool term_sent = false;       // SIGTERM sent (only ever once: a second one makes the trainer exit at once)
    bool taken = false;           // another executor took the trial over (we were presumed dead)
    std::chrono::steady_clock::time_point started;  // this run of the trial process
    bool timed_out = false;                         // past [study] trial_timeout: stopped, and failed
    std::chrono::steady_clock::time_point kill_at;  // SIGTERM sent: SIGKILL then, if it has not exited
    bool killed = false;                            // we sent that SIGKILL (its exit is our stop, not a crash)
    std::unique_ptr<cgroup::Group> group;
};

class Executor {
public:
    Executor(const StudyConfig& c, const RunOptions& o, std::unique_ptr<Store> store, std::string base_text)
        : c_(c), o_(o), store_(std::move(store)), host_(host_name()), base_text_(std::move(base_text)) {
        owner_ = fmt::format("{}:{}:{}", host_, getpid(), process_start(getpid()));
        for (int b = 0; b < c.brackets; ++b) brackets_.push_back(c.milestones(b));
    }

    Result<RunSummary> run();

private:
    Status launch(const Trial& t);
    Status poll_results(int id, Running& r);
    Status on_result(int id, int epoch, double value, Running& r);
    Status reap();
    /// [study] trial_timeout: a trial process running longer gets SIGTERM (a checkpoint and
    /// exit). Any trial sent SIGTERM (a timeout, the scheduler's stop, a Ctrl-C) that has not
    /// exited RunOptions::stop_grace_s later gets SIGKILL to its process group: a hung trainer
    /// held the scheduler's stop and a Ctrl-C's shutdown forever.
    void enforce_timeouts();
    /// The last 400 bytes of a trial's log (logs/trial-NNNN.log), for the reason it failed.
    std::string log_tail(int id) const {
        auto log = fs::read_file((stdfs::path(o_.dir) / "logs" / (trial_name(id) + ".log")).string());
        return log ? log->substr(log->size() > 400 ? log->size() - 400 : 0) : std::string();
    }
    /// Takes over trials left running by executors that are gone, as far as `parallel` allows.
    Status adopt();
    /// The heartbeat; a trial another executor has taken over meanwhile (this one stalled past
    /// its lease) is killed here and left to its new owner.
    Status beat();
    /// The next thing to run: a promotion or a new trial; nullopt when there is none now.
    Result<std::optional<Trial>> next_job();
    void signal_once(Running& r) {
        if (r.term_sent) return;
        r.term_sent = true;
        r.kill_at = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                           std::chrono::duration<double>(std::max(0.0, o_.stop_grace_s)));
        kill(r.pid, SIGTERM);
    }
    double signed_value(double v) const { return c_.maximize ? v : -v; }
    bool promotion() const { return c_.scheduler == "asha" && c_.variant == "promotion"; }

    const StudyConfig& c_;
    const RunOptions& o_;
    std::unique_ptr<Store> store_;
    std::vector<std::vector<int>> brackets_;  // milestones per ASHA bracket
    std::map<int, Running> running_;
    std::string host_, owner_;
    std::string base_text_;  // the base train config the study's trials train on (study.db's record)
    bool cgroups_ = false;
    bool shutting_down_ = false;  // stopping the trials because one could not start (not by a signal)
    std::set<int> waiting_;       // trials not taken over yet since a process still holds their directory
};

Status Executor::launch(const Trial& t) {
    // Each trial reads the base config when it starts or resumes: one edited while the study runs
    // would train this trial on another setup than the others. The running trials stop at a
    // checkpoint, and the next `tune run` says what changed.
    if (auto now = fs::read_file(c_.base, fs::kTextFileLimit); !now || *now != base_text_) {
        (void)store_->set_owner(t.id, "");
        return Status(
            StatusCode::kUnavailable,
            fmt::format("cannot start {}: the base train config {} {} since the study started", trial_name(t.id),
                        c_.base, now ? "changed" : "cannot be read (" + now.status().message() + ")"));
    }
    const stdfs::path dir(o_.dir);
    std::vector<std::string> args = {o_.strato_binary, "-q", "train", c_.base};
    for (const auto& f : c_.fixed) args.insert(args.end(), {"--set", f});
    for (const auto& [k, v] : t.params) args.insert(args.end(), {"--set", k + "=" + v});
    // (TOML strings: JSON's escapes are TOML's, so a --dir with a quote or backslash stays itself)
    for (std::string s : {"run.dir=" + json_text(nlohmann::json((dir / "trials").string())),
                          fmt::format("run.name=\"{}\"", trial_name(t.id)), fmt::format("train.epochs={}", c_.max_t),
                          fmt::format("train.stop_after_epochs={}", t.target < c_.max_t ? t.target : 0),
                          fmt::format("run.threads={}", c_.threads_per_trial)})
        args.insert(args.end(), {"--set", s});
    args.insert(args.end(), {"--no-report", "--resume"});
    std::string log_path = (dir / "logs" / (trial_name(t.id) + ".log")).string();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    Running r;
    r.target = t.target;
    r.bracket = t.bracket;
    const double mem = memory_limit_bytes(c_);
    if (cgroups_) {
        auto g = cgroup::Group::create(fmt::format("strato-tune-{}-{}", getpid(), trial_name(t.id)),
                                       cgroup::Limits{mem, c_.cpus_per_trial});
        if (g) {
            r.group = std::make_unique<cgroup::Group>(std::move(*g));
        } else {
            log::warn("tune: {}: no cgroup ({}); limiting memory with RLIMIT_AS only", trial_name(t.id), g.status().message());
            cgroups_ = false;
        }
    }
    const cgroup::Group* group = r.group.get();
    const std::string env_threads = std::to_string(c_.threads_per_trial);
    const pid_t parent = getpid();
    // SIGINT/SIGTERM are held from before the fork until the child has dropped the executor's
    // handlers: the one SIGTERM a trial gets (signal_once) would otherwise, before the exec, run
    // the inherited handler and be lost, and the executor would wait on that trial for ever.
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    // A trial that cannot even start (the strato binary removed or replaced while the study runs)
    // is no failed trial: the child sends exec's errno through this pipe, closed on a good exec.
    int exec_pipe[2];
    if (pipe2(exec_pipe, O_CLOEXEC) != 0) return io_error("pipe: {}", strerror(errno));
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGINT, &dfl, nullptr);
        sigaction(SIGTERM, &dfl, nullptr);
        sigprocmask(SIG_SETMASK, &old_mask, nullptr);  // a stop already sent acts now, as on the trainer
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed executor takes its trials with it
        if (getppid() != parent) _exit(1);
        setpgid(0, 0);  // Ctrl-C reaches the executor only; it stops the trials once, in order
        if (exec_pipe[1] != 3) {
            dup2(exec_pipe[1], 3);
            fcntl(3, F_SETFD, FD_CLOEXEC);
        }
        close_range(4, ~0U, 0);
        int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        if (group) {
            if (!group->join_self()) _exit(126);
        } else if (mem > 0) {
            rlimit lim{static_cast<rlim_t>(mem), static_cast<rlim_t>(mem)};
            setrlimit(RLIMIT_AS, &lim);
        }
        setenv("OMP_NUM_THREADS", env_threads.c_str(), 1);
        execv(argv[0], argv.data());
        const int e = errno;
        (void)!write(3, &e, sizeof e);
        _exit(127);
    }
    const int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    close(exec_pipe[1]);
    if (pid < 0) {
        close(exec_pipe[0]);
        return io_error("fork: {}", strerror(fork_errno));
    }
    int exec_errno = 0;
    ssize_t got = 0;
    do got = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
    while (got < 0 && errno == EINTR);
    close(exec_pipe[0]);
    if (got == static_cast<ssize_t>(sizeof exec_errno)) {
        while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        (void)store_->set_owner(t.id, "");  // given up, as an interrupted trial: the next run takes it
        return Status(StatusCode::kUnavailable,  // (what tells it from the study's own errors)
                      fmt::format("cannot start {}: {}: {}", trial_name(t.id), argv[0], strerror(exec_errno)));
    }
    r.pid = pid;
    r.started = std::chrono::steady_clock::now();
    running_[t.id] = std::move(r);
    if (!o_.quiet)
        log::info("tune: {} -> {} epochs{}: {}", trial_name(t.id), t.target,
                  c_.brackets > 1 ? fmt::format(" (bracket {})", t.bracket) : "", describe(t.params));
    return Status::ok();
}

Status Executor::on_result(int id, int epoch, double value, Running& r) {
    // The result, its rung entry and the scheduler's decision in one transaction: a kill between
    // the result and its entry left the result without it, and the resume (the result "not
    // fresh") never added it; a kill between a decision to stop and the trial's exit resumed the
    // trial, which then trained on to max_t, never judged again.
    const auto& ms = brackets_[static_cast<size_t>(r.bracket)];
    int rung_k = -1;
    if (c_.scheduler == "asha")
        for (size_t k = 0; k + 1 < ms.size(); ++k)
            if (ms[k] == epoch) rung_k = static_cast<int>(k);
    bool stop = false;
    Status saved = store_->transaction([&]() -> Status {
        STRATO_ASSIGN_OR_RETURN(const bool fresh, store_->add_result(id, epoch, value, c_.maximize));
        // A trial resumed from its checkpoint prints the epochs it had already done again: the
        // scheduler has ruled on those.
        if (!fresh) return Status::ok();
        if (rung_k >= 0) STRATO_RETURN_IF_ERROR(store_->add_rung(r.bracket, rung_k, id, value));
        if (c_.scheduler == "asha" && rung_k >= 0 && c_.variant == "stopping") {
            STRATO_ASSIGN_OR_RETURN(auto rung, store_->rung(r.bracket, rung_k));
            if (static_cast<int>(rung.size()) >= c_.reduction) {
                std::vector<double> vals;
                for (const auto& e : rung) vals.push_back(signed_value(e.value));
                std::sort(vals.begin(), vals.end());
                // Keep the top 1/eta: stop below the (1 - 1/eta) quantile, interpolated between
                // neighbours as Ray's ASHA (numpy's percentile) does. (The nearest lower value was
                // the trial's own when it sat there, and it was never stopped.)
                const double pos = (1.0 - 1.0 / c_.reduction) * static_cast<double>(vals.size() - 1);
                const auto lo = static_cast<size_t>(pos);
                const double frac = pos - static_cast<double>(lo);
                const double cutoff = lo + 1 < vals.size() ? vals[lo] + frac * (vals[lo + 1] - vals[lo]) : vals[lo];
                stop = signed_value(value) < cutoff;
            }
        } else if (c_.scheduler == "median" && epoch >= c_.grace && epoch < c_.max_t) {
            // The others that reported at this epoch and have not failed: a crashed trial's
            // values (a run cut short) set no bar, as they count for neither TPE nor the ranking.
            STRATO_ASSIGN_OR_RETURN(auto at, store_->results_at_without_failed(epoch));
            std::vector<double> others;
            for (const auto& [t, v] : at)
                if (t != id) others.push_back(signed_value(v));
            if (others.size() >= 2) {
                std::sort(others.begin(), others.end());
                double median = others.size() % 2 ? others[others.size() / 2]
                                                  : (others[others.size() / 2 - 1] + others[others.size() / 2]) / 2;
                stop = signed_value(value) < median;
            }
        }
        // Stopped in the store at once (the trial finishes its step and checkpoints meanwhile):
        // a study killed before the trial exits does not resume it.
        if (stop && !r.stop_requested) return store_->set_state(id, TrialState::kStopped);
        return Status::ok();
    });
    if (!saved.is_ok()) return saved;
    if (stop) r.stop_requested = true;
    if (r.stop_requested && !r.term_sent) {
        if (!o_.quiet) log::info("tune: stopping {} at epoch {} ({} = {:.4g})", trial_name(id), epoch, c_.metric, value);
        signal_once(r);
    }
    return Status::ok();
}

Status Executor::poll_results(int id, Running& r) {
    const std::string path = (stdfs::path(o_.dir) / "trials" / trial_name(id) / "metrics.jsonl").string();
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::ok();
    in.seekg(0, std::ios::end);
    const size_t size = static_cast<size_t>(in.tellg());
    if (size < r.offset) r.offset = 0;  // truncated by a resume: read again (only new epochs count)
    in.seekg(static_cast<std::streamoff>(r.offset));
    std::string chunk(size - r.offset, '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    size_t pos = 0;
    while (true) {
        size_t nl = chunk.find('\n', pos);
        if (nl == std::string::npos) break;  // a torn last line: read it next time
        auto j = parse_json_bounded(chunk.substr(pos, nl - pos));
        pos = nl + 1;
        // A trial's metrics.jsonl may come from the user's own script: a line of another shape is
        // skipped, never a type error that stops the study.
        if (!j.is_object() || !j.contains("kind") || j["kind"] != "eval" || !j.contains(c_.metric) ||
            !j[c_.metric].is_number() || !j.contains("epoch") || !j["epoch"].is_number_integer())
            continue;
        STRATO_RETURN_IF_ERROR(on_result(id, j["epoch"].get<int>(), j[c_.metric].get<double>(), r));
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
        Running& r = it->second;
        if (r.taken) {  // its new owner records what happens to it
            it = running_.erase(it);
            continue;
        }
        STRATO_RETURN_IF_ERROR(poll_results(id, r));
        STRATO_ASSIGN_OR_RETURN(auto results, store_->results(id));
        const int epochs = results.empty() ? 0 : results.back().first;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        // What a trial answers to our SIGTERM: the trainer's checkpointed exit (130), or the
        // signal itself when it came before the trainer's handler was installed.
        const bool terminated = code == 130 || code == 128 + SIGTERM || (r.killed && code == 128 + SIGKILL);
        if ((signals::stop_requested() || shutting_down_) && terminated && !r.stop_requested && !r.timed_out) {
            // Our own shutdown: it stays running in the store, free for the next executor.
            STRATO_RETURN_IF_ERROR(store_->set_owner(id, ""));
        } else if (r.stop_requested && (code == 0 || terminated)) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kStopped));
        } else if (code == 0 && epochs >= c_.max_t) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kCompleted));
        } else if (code == 0 && epochs >= r.target) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kPaused));
        } else if (code == 0 && !results.empty()) {
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kCompleted));  // early stopping in the trainer
        } else if (code == 0) {
            // "completed" with no result: nothing to rank it by, and nothing said why. (The
            // trainer's evaluations at a fractional epoch, "partial": true, are not whole epochs.)
            const std::string why = fmt::format(
                "exited 0 without reporting {} at a whole epoch (no \"kind\": \"eval\" line with an integer "
                "\"epoch\" in {})",
                c_.metric, (stdfs::path(o_.dir) / "trials" / trial_name(id) / "metrics.jsonl").string());
            log::warn("tune: {} failed: {}", trial_name(id), why);
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kFailed, why));
        } else if (r.timed_out) {
            const std::string tail = log_tail(id);  // (what it printed last, for where it hung)
            const std::string why =
                fmt::format("stopped after {} ([study] trial_timeout) without finishing", printable(c_.trial_timeout));
            log::warn("tune: {} failed: {}", trial_name(id), why);
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kFailed, fmt::format("{}: {}", why, tail)));
        } else {
            // "exit 137" read as the trainer's own exit status: it was SIGKILL, most often the
            // kernel's out-of-memory killer (or kill -9); exit 130, a stop from outside the tuner.
            std::string why = fmt::format("exit {}", code);
            if (WIFSIGNALED(status))
                why = fmt::format("killed by signal {} ({}){}", WTERMSIG(status), strsignal(WTERMSIG(status)),
                                  WTERMSIG(status) == SIGKILL ? ": out of memory (the kernel's OOM killer), or kill -9" : "");
            else if (terminated)
                why = fmt::format("exit {}: stopped by a signal that did not come from the tuner", code);
            if (r.group && r.group->oom_kills() > 0)
                why = fmt::format("killed by the memory limit ({})", r.group->describe());
            else if (code == 126 && r.group)
                why = "could not join its cgroup";
            const std::string tail = log_tail(id);
            log::warn("tune: {} failed ({}): {}", trial_name(id), why, tail);
            STRATO_RETURN_IF_ERROR(store_->set_state(id, TrialState::kFailed, fmt::format("{}: {}", why, tail)));
        }
        it = running_.erase(it);  // the cgroup goes with it
    }
    return Status::ok();
}

void Executor::enforce_timeouts() {
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, r] : running_) {
        if (r.taken) continue;
        if (c_.trial_timeout_s > 0 && !r.timed_out &&
            std::chrono::duration<double>(now - r.started).count() >= c_.trial_timeout_s) {
            r.timed_out = true;
            log::warn("tune: {} has run for {} ([study] trial_timeout) without finishing; stopping it", trial_name(id),
                      printable(c_.trial_timeout));
            // (a trial the scheduler or a Ctrl-C already signalled gets no second SIGTERM: the
            // trainer would exit without its checkpoint; SIGKILL comes after the first one's grace)
            signal_once(r);
        } else if (r.term_sent && !r.killed && now >= r.kill_at) {
            log::warn("tune: {} did not exit within {:g} s of SIGTERM; sending SIGKILL", trial_name(id), o_.stop_grace_s);
            // The trial leads its own process group (setpgid in launch): its children go too. Not
            // reaped yet, so the pid is still the trial's.
            kill(-r.pid, SIGKILL);
            kill(r.pid, SIGKILL);
            r.killed = true;
        }
    }
}

Status Executor::adopt() {
    std::vector<Trial> take;
    Status s = store_->transaction([&]() -> Status {
        STRATO_ASSIGN_OR_RETURN(auto all, study_trials(*store_, c_));
        for (const auto& t : all) {
            if (running_.size() + take.size() >= static_cast<size_t>(c_.parallel)) break;
            if (t.state != TrialState::kRunning || running_.count(t.id) || owner_alive(t, host_)) continue;
            // A trainer still holds its run directory: the trial process of an executor killed a
            // moment ago, still exiting (its memory unmapped before its files are closed), or
            // one of an executor elsewhere whose lease ran out while it lives. Started now, the
            // trial's trainer found the directory in use, exited 1, and the trial was marked
            // failed for good. It is taken once the directory is free.
            if (auto held = fs::lock_dir(stdfs::path(o_.dir) / "trials" / trial_name(t.id)); !held.is_ok()) {
                if (held.status().code() != StatusCode::kAlreadyExists) return held.status();
                if (waiting_.insert(t.id).second && !o_.quiet)
                    log::info("tune: {} waits: {}", trial_name(t.id), held.status().message());
                continue;
            }
            STRATO_RETURN_IF_ERROR(store_->set_owner(t.id, owner_));
            take.push_back(t);
        }
        return Status::ok();
    });
    if (!s.is_ok()) return s;
    for (const auto& t : take) {
        if (!o_.quiet) log::info("tune: resuming {} (was running{})", trial_name(t.id), t.owner.empty() ? "" : " in " + t.owner);
        STRATO_RETURN_IF_ERROR(launch(t));
    }
    return Status::ok();
}

Status Executor::beat() {
    STRATO_RETURN_IF_ERROR(store_->heartbeat(owner_));
    STRATO_ASSIGN_OR_RETURN(auto all, study_trials(*store_, c_));
    for (const auto& t : all) {
        auto it = running_.find(t.id);
        if (it == running_.end() || it->second.taken || t.owner.empty() || t.owner == owner_) continue;
        log::warn("tune: {} was taken over by {} (this executor missed its lease); stopping our copy", trial_name(t.id),
                  t.owner);
        it->second.taken = true;
        kill(it->second.pid, SIGKILL);
    }
    return Status::ok();
}

Result<std::optional<Trial>> Executor::next_job() {
    std::optional<Trial> job;
    Status s = store_->transaction([&]() -> Status {
        STRATO_ASSIGN_OR_RETURN(auto trials, study_trials(*store_, c_));
        if (promotion()) {
            for (int b = 0; b < c_.brackets; ++b) {
                const auto& ms = brackets_[static_cast<size_t>(b)];
                for (int k = static_cast<int>(ms.size()) - 2; k >= 0; --k) {
                    STRATO_ASSIGN_OR_RETURN(auto rung, store_->rung(b, k));
                    std::sort(rung.begin(), rung.end(), [&](const RungEntry& x, const RungEntry& y) {
                        return signed_value(x.value) != signed_value(y.value) ? signed_value(x.value) > signed_value(y.value)
                                                                              : x.trial < y.trial;
                    });
                    // The top 1/eta of the rung go on. A trial that failed at the rung cannot, and
                    // takes no place: the next best does (a failed trial at the top held the only
                    // place and nobody was promoted). One promoted from it that failed later has
                    // had its place: the rung promotes no more than 1/eta.
                    const size_t n = rung.size() / static_cast<size_t>(c_.reduction);
                    const auto trial_of = [&](const RungEntry& r) {
                        return std::find_if(trials.begin(), trials.end(), [&](const Trial& x) { return x.id == r.trial; });
                    };
                    std::erase_if(rung, [&](const RungEntry& r) {
                        auto t = trial_of(r);
                        return !r.promoted && t != trials.end() && t->state == TrialState::kFailed;
                    });
                    for (size_t i = 0; i < std::min(n, rung.size()); ++i) {
                        if (rung[i].promoted) continue;
                        auto t = trial_of(rung[i]);
                        if (t == trials.end() || t->state != TrialState::kPaused) continue;
                        STRATO_RETURN_IF_ERROR(store_->promote(b, k, t->id, ms[static_cast<size_t>(k) + 1], owner_));
                        t->state = TrialState::kRunning;
                        t->target = ms[static_cast<size_t>(k) + 1];
                        if (!o_.quiet)
                            log::info("tune: promoting {} from rung {} ({} epochs)", trial_name(t->id), k, ms[static_cast<size_t>(k)]);
                        job = *t;
                        return Status::ok();
                    }
                }
            }
        }
        if (static_cast<int>(trials.size()) >= c_.trials) return Status::ok();
        const std::vector<Observation> history = sampler_history(c_, trials);
        const int index = static_cast<int>(trials.size());
        std::mt19937_64 rng(c_.seed * 1000003ULL + static_cast<uint64_t>(index));
        Trial t;
        t.params = sample(c_, index, history, rng);
        t.bracket = index % c_.brackets;
        t.target = promotion() ? brackets_[static_cast<size_t>(t.bracket)].front() : c_.max_t;
        STRATO_ASSIGN_OR_RETURN(t.id, store_->add_trial(t.params, t.target, t.bracket, owner_));
        job = t;
        return Status::ok();
    });
    if (!s.is_ok()) return s;
    return job;
}

Result<RunSummary> Executor::run() {
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(stdfs::path(o_.dir) / "logs"));
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(stdfs::path(o_.dir) / "trials"));
    {
        // Trial directories the study does not know are another study's (study.db removed, or a
        // --dir reused): trials resume from checkpoints there, so a new trial would take up the
        // old one's weights and results.
        // (listed before the study is read: a trial another executor adds meanwhile is known)
        std::vector<stdfs::path> dirs;
        std::error_code ec;
        for (const auto& e : stdfs::directory_iterator(stdfs::path(o_.dir) / "trials", ec))
            if (e.path().filename().string().rfind("trial-", 0) == 0) dirs.push_back(e.path());
        STRATO_ASSIGN_OR_RETURN(auto known, study_trials(*store_, c_));
        std::set<std::string> names;
        for (const auto& t : known) names.insert(trial_name(t.id));
        for (const auto& d : dirs) {
            const std::string n = d.filename().string();
            if (!names.count(n))
                return Status(StatusCode::kAlreadyExists,
                              fmt::format("{} belongs to no trial of this study (its study.db was removed, or the "
                                          "directory held another study)\nhint: remove {} and {}, or give the study "
                                          "another --dir",
                                          d.string(), (stdfs::path(o_.dir) / "trials").string(),
                                          (stdfs::path(o_.dir) / "logs").string()));
        }
    }
    if (c_.memory_limit_gb > 0 || c_.cpus_per_trial > 0) {
        Status s = cgroup::Group::available();
        cgroups_ = s.is_ok();
        if (!cgroups_ && c_.cpus_per_trial > 0)
            log::warn("tune: cpus_per_trial needs cgroups, which are not available here ({}); trials are limited to "
                      "{} thread(s) only",
                      s.message(), c_.threads_per_trial);
        else if (!o_.quiet)
            log::info("tune: per-trial limits through {}", cgroups_ ? "cgroups" : "RLIMIT_AS (no cgroups: " + s.message() + ")");
    }
    bool cancelled = false;
    // A trial that could not start: the running ones stop at a checkpoint, then the run ends with
    // this error (and the trial is taken up again by the next run).
    Status cannot_start;
    auto last_beat = std::chrono::steady_clock::now();
    for (;;) {
        STRATO_RETURN_IF_ERROR(reap());
        enforce_timeouts();  // (also while stopping: a hung trial ignores the SIGTERM of a Ctrl-C too)
        if (std::chrono::steady_clock::now() - last_beat > kHeartbeatEvery) {
            STRATO_RETURN_IF_ERROR(beat());  // also while stopping: checkpoints can take a while
            last_beat = std::chrono::steady_clock::now();
        }
        if (signals::stop_requested() || !cannot_start.is_ok()) {
            cancelled = cannot_start.is_ok();
            shutting_down_ = true;  // the trials it stops are given up for the next run, not failed
            if (running_.empty()) break;
            for (auto& [id, r] : running_) signal_once(r);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            continue;
        }
        cannot_start = adopt();
        while (cannot_start.is_ok() && static_cast<int>(running_.size()) < c_.parallel) {
            STRATO_ASSIGN_OR_RETURN(auto job, next_job());
            if (!job) break;
            cannot_start = launch(*job);
        }
        if (!cannot_start.is_ok() && cannot_start.code() != StatusCode::kUnavailable)
            return cannot_start;  // the study database or a fork, not a trial that cannot start
        if (!cannot_start.is_ok()) continue;
        if (running_.empty()) {
            // Nothing runs here and nothing can start. Done, unless other executors still run
            // trials, whose results may promote trials or leave trials to take over.
            STRATO_ASSIGN_OR_RETURN(auto all, study_trials(*store_, c_));
            if (std::none_of(all.begin(), all.end(), [](const Trial& t) { return t.state == TrialState::kRunning; }))
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            continue;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!cannot_start.is_ok())
        return Status(cannot_start.code(), cannot_start.message() +
                                               "\nhint: the running trials stopped at a checkpoint; once it can start, "
                                               "`strato tune run` again continues the study");
    if (cancelled)
        return Status(StatusCode::kCancelled, "interrupted; the running trials saved checkpoints\nhint: run the same "
                                              "command again to continue the study");
    RunSummary s;
    STRATO_ASSIGN_OR_RETURN(auto done, study_trials(*store_, c_));
    for (const auto& t : done) {
        ++s.trials;
        s.completed += t.state == TrialState::kCompleted;
        s.stopped += t.state == TrialState::kStopped || t.state == TrialState::kPaused;
        s.failed += t.state == TrialState::kFailed;
        s.epochs_trained += t.epochs;
    }
    s.best = best_trial(c_, done);
    // A rung promotes its best 1/reduction once it holds `reduction` trials: a study of too few
    // trials ended with every trial paused at a rung, none trained to max_t, and nothing said so
    // (Ray Tune's ASHA and Optuna's pruner let the best one so far go on).
    if (promotion() && s.completed == 0) {
        const auto paused = std::count_if(done.begin(), done.end(), [](const Trial& t) { return t.state == TrialState::kPaused; });
        if (paused > 0)
            log::warn("tune: no trial trained to max_t = {} epochs: {} trial(s) wait paused at a rung, which promotes its "
                      "best 1/{} only once it holds {} trials; more trials promote them (`strato tune run --trials N` "
                      "continues this study)",
                      c_.max_t, paused, c_.reduction, c_.reduction);
    }
    return s;
}

}  // namespace

std::vector<Observation> sampler_history(const StudyConfig& cfg, const std::vector<Trial>& trials) {
    const auto signed_value = [&](double v) { return cfg.maximize ? v : -v; };
    std::vector<Observation> history;
    std::optional<double> worst;
    for (const auto& t : trials) {
        // A failed trial's results are those of a run cut short (a crash, divergence, the memory
        // limit): no outcome of its configuration. Optuna's TPE leaves FAIL trials out too.
        if (t.state == TrialState::kFailed || !t.best) continue;
        // A completed trial counts with its result (the study's objective, as the leaderboard
        // ranks it); one stopped, paused at a rung or still running with its latest, as Optuna
        // counts a pruned trial with its last intermediate value.
        const double v = signed_value(t.state == TrialState::kCompleted || !t.last ? *t.best : *t.last);
        history.push_back({t.params, v});
        worst = std::min(worst.value_or(v), v);
    }
    // Constant liar: trials still without a result count as the worst seen so far, so that
    // parallel executors do not all propose the same promising point.
    if (worst)
        for (const auto& t : trials)
            if (!t.best && (t.state == TrialState::kRunning || t.state == TrialState::kPaused))
                history.push_back({t.params, *worst});
    return history;
}

namespace {

Result<std::unique_ptr<Store>> open_store(const StudyConfig& cfg, const std::string& dir, bool create,
                                          bool shared = false) {
    std::string db = (stdfs::path(dir) / "study.db").string();
    std::error_code ec;
    if (!create && !stdfs::exists(db, ec)) return not_found("{} has no study.db (has the study run?)", dir);
    // The base train config as the trials read it. (status, best, report of a study whose base
    // has gone still read it; export-best fails on the missing file itself.)
    auto base_text = fs::read_file(cfg.base, fs::kTextFileLimit);
    if (!base_text && create) return base_text.status().with_context("the study's base train config");
    std::unique_ptr<Store> store;
    if (!create) {  // status, best, report: read, never write (the study may be on a read-only disk)
        STRATO_ASSIGN_OR_RETURN(store, Store::open_read_only(db));
    } else {
        STRATO_RETURN_IF_ERROR(fs::ensure_dir(dir));
        STRATO_ASSIGN_OR_RETURN(store, Store::open(db, shared));
    }
    // Each part of the identity recorded must be the study's now; one not recorded yet (a new
    // study, or one from before the part existed) is recorded by `tune run`, in one transaction.
    const auto check = [&]() -> Status {
        for (const auto& [key, value] : identity_parts(cfg, base_text ? *base_text : std::string())) {
            if (key == "base_config" && !base_text) continue;
            STRATO_ASSIGN_OR_RETURN(std::optional<std::string> was, store->meta(key));
            if (!was) {
                if (create) STRATO_RETURN_IF_ERROR(store->add_meta(key, value));
                continue;
            }
            if (*was == value) continue;
            const std::string hint =
                "\nhint: restore it, or start a new study: another [study] name (its default directory) or --dir";
            if (key == "base_config")
                return Status(StatusCode::kInvalidArgument,
                              fmt::format("{} holds a study whose trials trained on other contents of the base train "
                                          "config {} ({}); resuming would mix trials of two setups{}",
                                          db, cfg.base, first_difference(*was, value), hint));
            return Status(StatusCode::kInvalidArgument,
                          fmt::format("{} holds a different study: {} changed since it started; resuming would mix "
                                      "trials of two setups{}",
                                      db, json_changes(*was, value), hint));
        }
        return Status::ok();
    };
    STRATO_RETURN_IF_ERROR(create ? store->transaction(check) : check());
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
    if (const int64_t points = cfg.sampler == "grid" ? grid_size(cfg) : 0; points > 0 && points < cfg.trials)
        log::warn("tune: the grid has {} distinct point(s) and the study {} trials: the grid is run again from its "
                  "first point after that",
                  points, cfg.trials);
    else if (points > cfg.trials)  // (the first points only: a value of the last grid parameter never ran, unsaid)
        log::warn("tune: the grid has {} distinct points and the study {} trials: the last {} points do not run "
                  "(leave trials out to run the whole grid once)",
                  points, cfg.trials, points - cfg.trials);
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, o.dir, true));
    STRATO_ASSIGN_OR_RETURN(std::optional<std::string> base_text, store->meta("base_config"));
    Executor ex(cfg, o, std::move(store), base_text.value_or(std::string()));
    return ex.run();
}

Status check_sbatch_value(std::string_view flag, std::string_view value, SbatchValue kind) {
    // A newline ended the #SBATCH block and ran the rest as a shell command in every task.
    const bool option = kind == SbatchValue::kOption;
    const std::string what = fmt::format("{}{}'{}'", flag, flag.empty() ? "" : " ", printable(value));
    if (std::string why = why_not_script_text(value, /*one_word=*/!option); !why.empty())
        return invalid_argument("{}: {}", what, why);
    const auto digits = [](std::string_view v) {
        return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    };
    switch (kind) {
        case SbatchValue::kOption:
            if (value.size() < 2 || value[0] != '-')
                return invalid_argument("{}: expected an sbatch option starting with '-', e.g. --sbatch=--gres=gpu:1",
                                        what);
            break;
        case SbatchValue::kTime: {
            // Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; or unlimited.
            if (value == "UNLIMITED" || value == "unlimited" || value == "INFINITE" || value == "infinite") break;
            std::string_view rest = value;
            if (size_t dash = rest.find('-'); dash != std::string_view::npos) {
                if (!digits(rest.substr(0, dash))) rest = {};
                else rest = rest.substr(dash + 1);
            }
            int parts = 0;
            for (bool more = !rest.empty(); more; ++parts) {
                const size_t colon = rest.find(':');
                more = colon != std::string_view::npos;
                if (!digits(rest.substr(0, colon))) parts = 9;
                rest = more ? rest.substr(colon + 1) : std::string_view();
            }
            if (parts < 1 || parts > 3)
                return invalid_argument("{}: expected a Slurm time limit: MINUTES, HH:MM:SS, D-HH[:MM[:SS]] or "
                                        "unlimited, e.g. 04:00:00",
                                        what);
            break;
        }
        case SbatchValue::kMemory: {
            std::string_view number = value;
            if (!number.empty() && std::string_view("KMGTkmgt").find(number.back()) != std::string_view::npos)
                number.remove_suffix(1);
            if (!digits(number))
                return invalid_argument("{}: expected a Slurm memory size: a whole number with an optional unit "
                                        "K, M (the default), G or T, e.g. 16G",
                                        what);
            break;
        }
        case SbatchValue::kWord: break;
    }
    return Status::ok();
}

Result<std::string> slurm_array(const StudyConfig& cfg, const SlurmOptions& options) {
    // (tune run's own bound on --parallel; each task runs `tune run --parallel <task-parallel>`)
    if (options.tasks < 1 || options.tasks > 1000000 || options.parallel < 1 || options.parallel > kParallelMax)
        return invalid_argument("tune slurm: need --tasks in 1..1000000 and --task-parallel in 1..{}, got {} and {}",
                                kParallelMax, options.tasks, options.parallel);
    // (empty: not given, no #SBATCH line)
    const std::tuple<const char*, std::string, SbatchValue> values[] = {
        {"--partition", options.partition, SbatchValue::kWord},
        {"--account", options.account, SbatchValue::kWord},
        {"--time", options.time, SbatchValue::kTime},
        {"--mem", options.mem, SbatchValue::kMemory}};
    for (const auto& [flag, value, kind] : values)
        if (!value.empty()) STRATO_RETURN_IF_ERROR(check_sbatch_value(flag, value, kind));
    for (const auto& e : options.extra) STRATO_RETURN_IF_ERROR(check_sbatch_value("--sbatch", e, SbatchValue::kOption));
    STRATO_RETURN_IF_ERROR(validate_against_train_config(cfg));
    std::error_code ec;
    const std::string dir = stdfs::absolute(options.dir, ec).lexically_normal().string();
    const std::string study = stdfs::absolute(options.study_file, ec).lexically_normal().string();
    if (dir.find_first_of(" \t\n\r\"'%") != std::string::npos)
        return invalid_argument("tune slurm: the study directory '{}' holds blanks, quotes or '%' (Slurm's pattern "
                                "sign), which an #SBATCH --output line cannot carry; choose a --dir without them",
                                dir);
    std::string binary = options.strato_binary;
    if (binary.empty()) binary = stdfs::read_symlink("/proc/self/exe", ec).string();
    if (binary.empty()) return io_error("cannot find this executable: {}", ec.message());
    // Quoted, a path may hold blanks and quotes; but a newline in the study file's path ended the
    // script's comment line and ran the rest as a command in every task (and sbatch read no
    // #SBATCH line after it).
    const auto control = [](const std::string& v) {
        return std::any_of(v.begin(), v.end(), [](char c) { return std::iscntrl(static_cast<unsigned char>(c)); });
    };
    for (const auto& [what, path] : {std::pair<const char*, const std::string&>{"the study file", study},
                                     std::pair<const char*, const std::string&>{"the strato executable", binary}})
        if (control(path))
            return invalid_argument("tune slurm: the path of {} '{}' holds a control character (a newline, a tab), "
                                    "which a batch script cannot carry safely; rename it",
                                    what, printable(path));
    {
        STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, true, true));
        STRATO_RETURN_IF_ERROR(store->set_journal("delete"));
    }
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(stdfs::path(dir) / "logs"));
    std::string s = fmt::format(
        "#!/bin/bash\n"
        "# Study {name} as a Slurm array, written by `strato tune slurm`: {tasks} tasks, each an executor of the\n"
        "# same study ({dir}/study.db) running up to {par} trial(s) at a time. Submit: sbatch <this file>.\n"
        "# Follow it: strato tune status {study_q} --dir {dir_q}\n"
        "#SBATCH --job-name={job}\n"
        "#SBATCH --array=0-{last}\n"
        "#SBATCH --ntasks=1\n"
        "#SBATCH --cpus-per-task={cpus}\n"
        "#SBATCH --output={dir}/logs/slurm-%A_%a.out\n",
        fmt::arg("name", cfg.name), fmt::arg("tasks", options.tasks), fmt::arg("dir", dir),
        fmt::arg("par", options.parallel), fmt::arg("study_q", fs::shell_quote(study)), fmt::arg("dir_q", fs::shell_quote(dir)),
        fmt::arg("job", "strato-tune-" + cfg.name), fmt::arg("last", options.tasks - 1),
        fmt::arg("cpus", int64_t{options.parallel} *
                             std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::max<double>(
                                                      cfg.threads_per_trial, std::min(cfg.cpus_per_trial, kCpusPerTrialMax)))))));
    if (!options.partition.empty()) s += "#SBATCH --partition=" + options.partition + "\n";
    if (!options.account.empty()) s += "#SBATCH --account=" + options.account + "\n";
    if (!options.time.empty()) s += "#SBATCH --time=" + options.time + "\n";
    if (!options.mem.empty())
        s += "#SBATCH --mem=" + options.mem + "\n";
    else if (const double gb = memory_limit_bytes(cfg) / double(1ull << 30); gb > 0)  // (<= 4096 x 1e6)
        s += fmt::format("#SBATCH --mem={}G\n", static_cast<int64_t>(std::ceil(gb * options.parallel)) + 1);
    for (const auto& e : options.extra) s += "#SBATCH " + e + "\n";
    s += fmt::format("set -eu\nexport OMP_NUM_THREADS={}\nexec {} tune run {} --dir {} --parallel {}\n",
                     cfg.threads_per_trial, fs::shell_quote(binary), fs::shell_quote(study), fs::shell_quote(dir), options.parallel);
    return s;
}

namespace {

// A trial's parameters as JSON values: "params" holds the --set literals the trial ran with
// (`"\"adamw\""`, `"0.001"`), which a reader of `tune best` had to parse as TOML again.
nlohmann::json param_values(const Assignment& a) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, literal] : a) {
        nlohmann::json v = literal;  // (a literal TOML does not read: as written)
        if (auto t = parse_toml_named("v = " + literal, key); t.is_ok()) {
            const toml::node& n = *t->get("v");
            if (auto x = n.value_exact<std::string>()) v = *x;
            else if (auto i = n.value_exact<int64_t>()) v = *i;
            else if (auto d = n.value_exact<double>(); d && std::isfinite(*d)) v = *d;
            else if (auto b = n.value_exact<bool>()) v = *b;
        }
        out[key] = std::move(v);
    }
    return out;
}

// A trial as study_json lists it.
Result<nlohmann::json> trial_json(Store& store, const Trial& t) {
    STRATO_ASSIGN_OR_RETURN(auto res, store.results(t.id));
    nlohmann::json r = nlohmann::json::array();
    for (const auto& [e, v] : res) r.push_back({e, v});
    return nlohmann::json{{"id", t.id},
                          {"name", trial_name(t.id)},
                          {"params", t.params},
                          {"values", param_values(t.params)},
                          {"state", state_name(t.state)},
                          {"epochs", t.epochs},
                          {"best", t.best ? nlohmann::json(*t.best) : nlohmann::json(nullptr)},
                          {"results", r},
                          {"bracket", t.bracket},
                          {"owner", t.owner},
                          {"error", t.error}};
}

Status no_best(const StudyConfig& cfg) {
    return not_found("study {} has no trial with a result yet (failed trials do not count)", cfg.name);
}

}  // namespace

Result<nlohmann::json> best_trial_json(const StudyConfig& cfg, const std::string& dir) {
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, false));
    STRATO_ASSIGN_OR_RETURN(auto trials, study_trials(*store, cfg));
    const std::optional<Trial> best = best_trial(cfg, trials);
    if (!best) return no_best(cfg);
    return trial_json(*store, *best);
}

Result<nlohmann::json> study_json(const StudyConfig& cfg, const std::string& dir) {
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, false));
    STRATO_ASSIGN_OR_RETURN(auto trials, study_trials(*store, cfg));
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : trials) {
        STRATO_ASSIGN_OR_RETURN(nlohmann::json j, trial_json(*store, t));
        ts.push_back(std::move(j));
    }
    nlohmann::json rungs = nlohmann::json::array();
    for (int b = 0; b < cfg.brackets; ++b) {
        auto ms = cfg.milestones(b);
        for (size_t k = 0; k + 1 < ms.size(); ++k) {
            STRATO_ASSIGN_OR_RETURN(auto rung, store->rung(b, static_cast<int>(k)));
            int promoted = 0;
            for (const auto& e : rung) promoted += e.promoted;
            rungs.push_back({{"bracket", b}, {"rung", k}, {"epochs", ms[k]}, {"entries", rung.size()}, {"promoted", promoted}});
        }
    }
    return nlohmann::json{{"kind", "strato-tune"},        {"name", cfg.name},       {"metric", cfg.metric},
                          {"mode", cfg.maximize ? "max" : "min"}, {"sampler", cfg.sampler}, {"scheduler", cfg.scheduler},
                          {"variant", cfg.variant},        {"max_t", cfg.max_t},     {"brackets", cfg.brackets},     {"trials", ts},
                          {"rungs", rungs}};
}

Result<std::string> leaderboard(const StudyConfig& cfg, const std::string& dir, int top) {
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, false));
    STRATO_ASSIGN_OR_RETURN(auto trials, study_trials(*store, cfg));
    std::stable_sort(trials.begin(), trials.end(), [&](const Trial& a, const Trial& b) {
        // Trials with a result that did not fail, then failed ones with a result, then the rest.
        const auto rank = [](const Trial& t) { return rankable(t) ? 0 : t.best ? 1 : 2; };
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        return a.best && cfg.better(*a.best, *b.best);
    });
    int64_t epochs = 0;
    std::map<std::string, int> states;
    const std::string host = host_name();
    for (const auto& t : trials) {
        epochs += t.epochs;
        // "running" with no executor left (stopped by Ctrl-C, killed): the next run takes it up.
        ++states[t.state == TrialState::kRunning && !owner_alive(t, host) ? "interrupted" : state_name(t.state)];
    }
    // A study extended with `tune run --trials N` has more trials than its file says.
    const int64_t planned = std::max<int64_t>(cfg.trials, static_cast<int64_t>(trials.size()));
    std::string out = fmt::format("study {} ({} sampler, {} scheduler): {} of {} trials{}, {} epochs trained ({} of a "
                                  "full budget of {}); states:",
                                  cfg.name, cfg.sampler, cfg.scheduler, trials.size(), planned,
                                  planned > cfg.trials ? fmt::format(" (extended from {})", cfg.trials) : "", epochs,
                                  fmt::format("{:.0f}%", 100.0 * static_cast<double>(epochs) /
                                                             (static_cast<double>(planned) * cfg.max_t)),
                                  planned * cfg.max_t);
    for (const auto& [s, n] : states) out += fmt::format(" {} {}", n, s);
    if (states.empty()) out += " none yet";
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

Result<std::string> best_config(const StudyConfig& cfg, const std::string& dir) {
    STRATO_ASSIGN_OR_RETURN(auto store, open_store(cfg, dir, false));
    STRATO_ASSIGN_OR_RETURN(auto trials, study_trials(*store, cfg));
    const std::optional<Trial> best = best_trial(cfg, trials);
    if (!best) return no_best(cfg);
    std::vector<std::string> sets = cfg.fixed;
    for (const auto& [k, v] : best->params) sets.push_back(k + "=" + v);
    // Trials train with train.epochs = max_t (the learning-rate schedule's length), however many
    // epochs the scheduler let them run.
    sets.push_back(fmt::format("train.epochs={}", cfg.max_t));
    STRATO_ASSIGN_OR_RETURN(train::TrainConfig tc, train::load_train_config(cfg.base, sets));
    std::string text = fmt::format("# The best trial of study {} ({}: best {} = {:.4f} in the {} epoch(s) it ran), as a "
                                   "train config.\n",
                                   cfg.name, trial_name(best->id), cfg.metric, *best->best, best->epochs) +
                       config::dump(tc);
    return text;
}

}  // namespace strato::tune
