#include "strato/cloud/local_provider.h"

#include <sys/prctl.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/oip_target.h"
#include "strato/serve/http/server.h"

namespace strato::cloud {

namespace {

using Clock = std::chrono::steady_clock;

// The serve flags every replica gets from the provider (check_serve_arg refuses them in serve_args).
constexpr const char* kHttpAddress = "--http-address";
constexpr const char* kHttpPort = "--http-port";
constexpr const char* kMetricsPort = "--metrics-port";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The port in a replica's "strato serve: ready http://127.0.0.1:PORT" line, once it is there.
int ready_port(const std::string& log_path) {
    static const std::string kReady = "strato serve: ready http://127.0.0.1:";
    auto text = fs::read_file(log_path);
    size_t at = text ? text->find(kReady) : std::string::npos;
    return at == std::string::npos ? 0 : std::atoi(text->c_str() + at + kReady.size());
}

/// The last non-blank line of a replica's log (at most 300 bytes of it); empty when none.
std::string last_line(const std::string& log_path) {
    auto text = fs::read_file(log_path);
    if (!text) return {};
    std::string_view t = *text;
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
    const size_t nl = t.find_last_of('\n');
    std::string_view line = nl == std::string_view::npos ? t : t.substr(nl + 1);
    return std::string(line.substr(0, 300));
}

/// Hours since Monday 00:00 local time: the schedule policy's clock.
double local_week_hour() {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    return ((tm.tm_wday + 6) % 7) * 24.0 + tm.tm_hour + tm.tm_min / 60.0 + tm.tm_sec / 3600.0;
}

// Request headers a replica needs to read the request the same way.
bool forwarded(const std::string& name) {
    for (const char* h : {"content-type", "content-encoding", "inference-header-content-length", "authorization", "accept"})
        if (strcasecmp(name.c_str(), h) == 0) return true;
    return false;
}

constexpr int64_t kRequestTimeoutMs = 120'000;  // a request through the proxy (504 past it)

// Adds one replica's Triton statistics (/v2/models[/NAME]/stats) to `into`: counts and durations
// add up, the last inference is the latest; models match by name and version, batch statistics
// by batch size.
void add_stats(nlohmann::json& into, const nlohmann::json& from, const std::string& key = "") {
    if (into.is_object() && from.is_object()) {
        for (auto it = from.begin(); it != from.end(); ++it) {
            if (!into.contains(it.key())) into[it.key()] = it.value();
            else add_stats(into[it.key()], it.value(), it.key());
        }
    } else if (into.is_array() && from.is_array() && (key == "model_stats" || key == "batch_stats")) {
        for (const auto& f : from) {
            auto it = std::find_if(into.begin(), into.end(), [&](const nlohmann::json& x) {
                if (!x.is_object() || !f.is_object()) return false;
                if (key == "batch_stats") return x.value("batch_size", int64_t{-1}) == f.value("batch_size", int64_t{-2});
                return x.value("name", std::string()) == f.value("name", std::string()) &&
                       x.value("version", std::string()) == f.value("version", std::string());
            });
            if (it == into.end()) into.push_back(f);
            else add_stats(*it, f);
        }
    } else if (into.is_number_integer() && from.is_number_integer() && key != "batch_size") {
        const auto a = into.get<uint64_t>(), b = from.get<uint64_t>();
        into = key == "last_inference" ? std::max(a, b) : a + b;
    } else if (into.is_number() && from.is_number() && key != "batch_size") {
        into = into.get<double>() + from.get<double>();
    }
}

bool is_stats_path(const std::string& path) {
    return path.starts_with("/v2/models") && (path == "/v2/models/stats" || path.ends_with("/stats"));
}

}  // namespace

struct Replica {
    pid_t pid = 0;
    std::atomic<int> port{0};  // 0 until the replica says which port the kernel gave it
    loadgen::Url url;          // set before the replica turns ready; read only after
    std::atomic<int> state{0};        // 0 starting, 1 ready, 2 draining, 3 gone
    std::atomic<bool> reaped{false};  // the process is (being) stopped and reaped: only one caller does it
    std::atomic<int64_t> in_flight{0};
    std::atomic<int64_t> served{0};
    Clock::time_point started = Clock::now();
};

struct LocalProvider::Impl {
    LocalOptions o;
    Autoscaler scaler;
    std::unique_ptr<serve::http::Server> front;
    std::unique_ptr<boost::asio::thread_pool> pool;
    mutable std::mutex mu;
    std::atomic<int> spawned{0};  // numbers the replicas' log files
    std::vector<std::shared_ptr<Replica>> replicas;
    std::vector<std::pair<double, std::string>> actions;
    struct Helper {
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> done;
    };
    std::vector<Helper> helpers;  // readiness waits and drains; only the control thread touches it

    template <typename Fn>
    void helper(Fn fn) {
        auto done = std::make_shared<std::atomic<bool>>(false);
        helpers.push_back({std::thread([fn = std::move(fn), done] {
                               fn();
                               *done = true;
                           }),
                           done});
    }
    /// Joins the helpers that have finished (called every tick, so a long run keeps few threads).
    void join_finished() {
        for (auto& h : helpers)
            if (*h.done && h.thread.joinable()) h.thread.join();
        std::erase_if(helpers, [](const Helper& h) { return !h.thread.joinable(); });
    }
    std::atomic<int64_t> in_flight{0};
    std::atomic<bool> stopping{false};
    Clock::time_point t0 = Clock::now();
    std::atomic<int> crash_streak{0};    // replicas in a row that exited while starting
    std::string start_error;             // the last line the last of them wrote (under mu)
    Clock::time_point last_spawn = Clock::now();

    explicit Impl(LocalOptions opts) : o(std::move(opts)), scaler(o.config) {}

    void note(std::string what) {
        log::info("autoscale: {}", what);
        std::lock_guard<std::mutex> lock(mu);
        actions.emplace_back(seconds_since(t0), std::move(what));
    }

    std::shared_ptr<Replica> pick() {
        std::lock_guard<std::mutex> lock(mu);
        std::shared_ptr<Replica> best;
        for (const auto& r : replicas)
            if (r->state == 1 && (!best || r->in_flight < best->in_flight)) best = r;
        if (best) ++best->in_flight;  // claimed under the lock: a drain cannot miss it
        return best;
    }

    /// A ready replica, claimed; while there is none (scaled to zero, every one starting, the last
    /// one just died), the request waits for one, up to the ready timeout, as Knative's activator
    /// holds requests: it stays counted in flight, so the backlog policy sees it and starts a
    /// replica (answered 503 at once, it was never seen, and a provider scaled to zero stayed there).
    /// Null when none came, the provider stops, or replicas keep dying at start with none left.
    std::shared_ptr<Replica> wait_for_replica() {
        const auto since = Clock::now();
        for (std::shared_ptr<Replica> r = pick();; r = pick()) {
            if (r) return r;
            if (stopping || signals::stop_requested() || seconds_since(since) >= o.ready_timeout_s) return nullptr;
            if (crash_streak > 0 && live() == 0) return nullptr;  // (a deleted model: no use waiting)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }

    void handle(serve::http::Request&& req, serve::http::Reply reply) {
        std::string path = req.target.substr(0, req.target.find('?'));
        if (path == "/strato/replicas") {
            serve::http::Response r;
            r.content_type = "application/json";
            r.body = status_json();
            return reply(std::move(r));
        }
        ++in_flight;
        boost::asio::post(*pool, [this, req = std::move(req), reply = std::move(reply)]() mutable {
            serve::http::Response out;
            std::vector<std::string> headers;
            for (const auto& [k, v] : req.headers)
                if (forwarded(k)) headers.push_back(k + ": " + v);
            // Statistics are every replica's summed, as one server's would be (from one replica, a
            // load test's server breakdown covered half the requests of two).
            if (req.method == "GET" && is_stats_path(req.target.substr(0, req.target.find('?')))) {
                out = all_stats(req.target, headers);
                --in_flight;
                return reply(std::move(out));
            }
            // One retry on another replica when a replica cannot be reached (it just died).
            for (int attempt = 0; attempt < 2; ++attempt) {
                std::shared_ptr<Replica> r = wait_for_replica();
                if (!r) {
                    out.status = 503;
                    out.content_type = "application/json";
                    out.body = R"({"error":"no replica is ready"})";
                    break;
                }
                auto res = loadgen::http_request(r->url, req.method, req.target, req.body, kRequestTimeoutMs, headers);
                --r->in_flight;
                if (!res.is_ok()) {
                    out.status = 502;
                    out.content_type = "application/json";
                    out.body = json_text(nlohmann::json{{"error", res.status().message()}});
                    // A replica that still answers its liveness probe is not dead: this request failed
                    // on its own (ran past the timeout, a bad answer). No retry, no replica stopped.
                    auto live = loadgen::http_request(r->url, "GET", "/v2/health/live", {}, 2000);
                    if (live.is_ok() && live->status == 200) {
                        if (res.status().message().find("no answer within") != std::string::npos) out.status = 504;
                        break;
                    }
                    int ready = 1;  // gone: the retry and later requests skip it; reap() stops it
                    r->state.compare_exchange_strong(ready, 3);
                    continue;
                }
                ++r->served;
                out.status = static_cast<unsigned>(res->status);
                out.body = std::move(res->body);
                for (const auto& [k, v] : res->headers) {
                    if (strcasecmp(k.c_str(), "content-type") == 0) out.content_type = v;
                    else if (strcasecmp(k.c_str(), "inference-header-content-length") == 0) out.headers.emplace_back(k, v);
                }
                break;
            }
            --in_flight;
            reply(std::move(out));
        });
    }

    serve::http::Response all_stats(const std::string& target, const std::vector<std::string>& headers) {
        std::vector<std::shared_ptr<Replica>> ready;
        {
            std::lock_guard<std::mutex> lock(mu);
            for (const auto& r : replicas)
                if (r->state == 1) ready.push_back(r);
        }
        serve::http::Response out;
        out.content_type = "application/json";
        nlohmann::json sum;
        for (const auto& r : ready) {
            auto res = loadgen::http_request(r->url, "GET", target, {}, 10'000, headers);
            if (!res.is_ok()) continue;  // gone meanwhile: the others still count
            if (res->status != 200) {  // an unknown model, say: as the replica answered
                out.status = static_cast<unsigned>(res->status);
                out.body = std::move(res->body);
                return out;
            }
            auto j = parse_json_bounded(res->body);
            if (j.is_discarded()) continue;
            if (sum.is_null()) sum = std::move(j);
            else add_stats(sum, j);
        }
        if (sum.is_null()) {
            out.status = 503;
            out.body = R"({"error":"no replica is ready"})";
            return out;
        }
        out.body = json_text(sum);
        return out;
    }

    std::string status_json() const {
        nlohmann::json reps = nlohmann::json::array();
        nlohmann::json acts = nlohmann::json::array();
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& r : replicas) {
            static const char* kStates[] = {"starting", "ready", "draining", "gone"};
            reps.push_back({{"pid", r->pid}, {"port", r->port.load()}, {"state", kStates[r->state]},
                            {"in_flight", r->in_flight.load()}, {"served", r->served.load()}});
        }
        for (const auto& [t, what] : actions) acts.push_back({{"t_s", t}, {"what", what}});
        return json_text(nlohmann::json{{"replicas", reps}, {"actions", acts}, {"in_flight", in_flight.load()}});
    }

    Result<std::shared_ptr<Replica>> spawn() {
        // Port 0: the kernel picks a free port as the replica binds it, so no other process can
        // take it between choosing and binding; the replica's ready line says which.
        std::vector<std::string> args = {o.strato_binary, "serve"};
        args.insert(args.end(), o.serve_args.begin(), o.serve_args.end());
        for (const char* a : {kHttpAddress, "127.0.0.1", kMetricsPort, "0", kHttpPort, "0"}) args.emplace_back(a);
        std::string log_path = fmt::format("{}/replica-{}.log", o.log_dir, ++spawned);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        const int fd_max = static_cast<int>(std::min(sysconf(_SC_OPEN_MAX), 65536L));
        // Opened (and truncated) here, before the readiness check can read it: an older run's
        // ready line in the same --log-dir must never name the port.
        const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (log_fd < 0) return io_error("cannot write the replica log {}: {}", log_path, strerror(errno));
        const pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
            int err = errno;
            ::close(log_fd);
            return io_error("fork: {}", strerror(err));
        }
        if (pid == 0) {
            // The provider killed outright (SIGKILL, a crash) takes its replicas along: they get
            // SIGTERM and drain. (Forked from the thread that runs the provider to its end.)
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(0);  // it died before the line above
            dup2(log_fd, 1);
            dup2(log_fd, 2);
            // Nothing of this process (the front end's sockets, other replicas' logs) leaks into the
            // replica, and a terminal's Ctrl-C reaches the provider only, which drains the replicas.
            if (close_range(3, ~0U, 0) != 0)
                for (int i = 3; i < fd_max; ++i) close(i);
            setpgid(0, 0);
            execv(argv[0], argv.data());
            _exit(127);
        }
        ::close(log_fd);
        setpgid(pid, pid);  // (also in the child: whichever runs first)
        signals::track_process_group(pid);  // a second Ctrl-C kills what a first one is draining
        auto r = std::make_shared<Replica>();
        r->pid = pid;
        {
            std::lock_guard<std::mutex> lock(mu);
            replicas.push_back(r);
        }
        helper([this, r, log_path] {
            auto start = Clock::now();
            const auto stopped = [this] { return stopping || signals::stop_requested(); };
            while (!stopped() && r->state == 0 && seconds_since(start) < o.ready_timeout_s) {
                if (exited(*r)) {
                    // Its last line says why (a missing model, a bad flag): "see the logs" alone
                    // sent the user to a file for the one line that mattered. (Kept before the
                    // state changes: start() reports it once no replica is left.)
                    std::string why = last_line(log_path);
                    {
                        std::lock_guard<std::mutex> lock(mu);
                        start_error = why;
                    }
                    r->state = 3;
                    const int streak = ++crash_streak;
                    note(fmt::format("replica pid {} exited while starting{}; see {}{}", r->pid,
                                     why.empty() ? "" : ": " + why, log_path,
                                     streak > 1 ? fmt::format(" ({} in a row)", streak) : ""));
                    return;
                }
                if (r->port == 0) {
                    int port = ready_port(log_path);
                    if (port == 0) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(50));
                        continue;
                    }
                    r->url = *loadgen::parse_url(fmt::format("http://127.0.0.1:{}", port));
                    r->port = port;
                }
                auto h = loadgen::http_request(r->url, "GET", "/v2/health/ready", {}, 1000);
                int starting = 0;  // a replica drained or stopped meanwhile stays so
                if (h.is_ok() && h->status == 200 && r->state.compare_exchange_strong(starting, 1)) {
                    crash_streak = 0;
                    note(fmt::format("replica pid {} on port {} ready after {:.1f} s", r->pid, r->port,
                                     seconds_since(start)));
                    return;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            if (r->state == 0) {
                if (!stopped())  // (a shutdown stops it too, but that is no timeout)
                    note(fmt::format("replica pid {} not ready within {:g} s; stopping it (see {})", r->pid,
                                     o.ready_timeout_s, log_path));
                terminate(r);
            }
        });
        return r;
    }

    /// True once `pid` has exited, without reaping it (WNOWAIT: the zombie keeps the pid, so its
    /// group can be untracked first); also when it was reaped already (ECHILD). `flags`: WNOHANG
    /// to look, 0 to wait.
    static bool has_exited(pid_t pid, int flags) {
        siginfo_t info{};
        const int rc = waitid(P_PID, pid, &info, WEXITED | WNOWAIT | flags);
        return (rc == 0 && info.si_pid == pid) || (rc != 0 && errno == ECHILD);
    }

    /// True once the process has exited; reaps it unless terminate() already owns that.
    static bool exited(Replica& r) {
        if (!has_exited(r.pid, WNOHANG)) return false;
        if (!r.reaped.exchange(true)) {
            signals::untrack_process_group(r.pid);  // before the reap frees the pid for another process
            waitpid(r.pid, nullptr, 0);
        }
        return true;
    }

    /// SIGTERM, 30 s to exit, then SIGKILL; reaps the process. Its group is untracked while the
    /// zombie still holds the pid: a second Ctrl-C must not SIGKILL a later process given that pid.
    static void stop_process(pid_t pid) {
        kill(pid, SIGTERM);
        for (int i = 0; i < 300 && !has_exited(pid, WNOHANG); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!has_exited(pid, WNOHANG)) {
            kill(pid, SIGKILL);
            has_exited(pid, 0);
        }
        signals::untrack_process_group(pid);
        waitpid(pid, nullptr, 0);
    }

    /// Stops and reaps the process (only the first caller does) and marks the replica gone.
    void terminate(const std::shared_ptr<Replica>& r) {
        if (!r->reaped.exchange(true)) stop_process(r->pid);
        r->state = 3;
    }

    /// Stops routing to `r`, waits for its requests in flight, then stops the process.
    void drain(std::shared_ptr<Replica> r) {
        r->state = 2;
        helper([this, r] {
            auto start = Clock::now();
            while (r->in_flight > 0 && seconds_since(start) < o.drain_timeout_s)
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            int64_t left = r->in_flight;
            terminate(r);
            note(fmt::format("replica pid {} drained{} and stopped", r->pid,
                             left ? fmt::format(" ({} requests still in flight at the deadline)", left) : ""));
        });
    }

    int ready() const {
        std::lock_guard<std::mutex> lock(mu);
        int n = 0;
        for (const auto& r : replicas) n += r->state == 1;
        return n;
    }

    int live() const {
        std::lock_guard<std::mutex> lock(mu);
        int n = 0;
        for (const auto& r : replicas) n += r->state == 0 || r->state == 1;
        return n;
    }

    void reap() {
        std::vector<std::string> said;  // noted after the lock: note() takes it too
        {
            std::lock_guard<std::mutex> lock(mu);
            for (auto& r : replicas) {
                if ((r->state == 1 || (r->state == 3 && !r->reaped)) && exited(*r)) {
                    r->state = 3;
                    said.push_back(fmt::format("replica pid {} on port {} exited after {:.0f} s; it will be replaced",
                                               r->pid, r->port, seconds_since(r->started)));
                } else if (r->state == 3 && !r->reaped.exchange(true)) {  // the proxy gave up on it, yet it runs
                    said.push_back(fmt::format("replica pid {} on port {} does not answer; stopping it", r->pid, r->port));
                    helper([pid = r->pid] { stop_process(pid); });
                }
            }
            std::erase_if(replicas, [](const auto& r) { return r->state == 3 && r->reaped && r->in_flight == 0; });
        }
        for (auto& s : said) note(std::move(s));
    }

    /// Replicas that die while starting (a deleted model, a bad flag) are replaced after a growing
    /// pause, 2, 4, ... 60 s, not every tick with a new log each time.
    bool may_spawn() {
        const int streak = crash_streak;
        if (streak == 0) return true;
        const double wait = std::min(60.0, std::pow(2.0, streak));
        if (seconds_since(last_spawn) < wait) return false;
        return true;
    }
};

LocalProvider::LocalProvider(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LocalProvider::~LocalProvider() {
    stop();
    if (impl_->front) impl_->front->stop();
    std::vector<std::shared_ptr<Replica>> reps;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        reps = impl_->replicas;
    }
    for (auto& r : reps) impl_->terminate(r);
    for (auto& h : impl_->helpers)
        if (h.thread.joinable()) h.thread.join();
    if (impl_->pool) impl_->pool->join();
}

Status check_serve_arg(std::string_view arg) {
    for (std::string_view flag : {kHttpAddress, kHttpPort, kMetricsPort})
        if (arg == flag || (arg.starts_with(flag) && arg[flag.size()] == '='))
            return invalid_argument("--serve-arg {}: the provider sets {}, {} and {} of every replica itself (127.0.0.1 "
                                    "and ports the kernel picks, behind its front end on --port); leave it out",
                                    arg, kHttpAddress, kHttpPort, kMetricsPort);
    return Status::ok();
}

Result<std::unique_ptr<LocalProvider>> LocalProvider::create(LocalOptions o) {
    if (o.strato_binary.empty()) {
        std::error_code ec;
        o.strato_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
        if (ec) return io_error("cannot find this executable: {}", ec.message());
    }
    if (o.serve_args.empty()) return invalid_argument("nothing to serve: give --model DIR or --model-repository DIR");
    // (a repeated flag made every replica exit at start, and the provider restart them for ever)
    for (const auto& a : o.serve_args) STRATO_RETURN_IF_ERROR(check_serve_arg(a));
    if (!(o.tick_s > 0)) return invalid_argument("--tick must be > 0");
    if (o.config.max_nodes < 1) return invalid_argument("max_nodes must be >= 1");
    if (std::erase_if(o.config.policies, [](const ScalePolicy& p) { return p.kind == "vertical"; }))
        log::warn("autoscale local: vertical policies change instance types; they apply to `strato autoscale "
                  "simulate` and are ignored here");
    if (o.config.policies.empty()) return invalid_argument("no policy left for the local provider (only vertical ones)");
    if (o.log_dir.empty()) {
        char tmpl[] = "/tmp/strato-autoscale-XXXXXX";
        if (!mkdtemp(tmpl)) return io_error("mkdtemp: {}", strerror(errno));
        o.log_dir = tmpl;
    }
    std::error_code ec;
    std::filesystem::create_directories(o.log_dir, ec);
    if (ec) return io_error("--log-dir {}: {}", o.log_dir, ec.message());
    return std::unique_ptr<LocalProvider>(new LocalProvider(std::make_unique<Impl>(std::move(o))));
}

Status LocalProvider::start() {
    Impl& m = *impl_;
    if (m.o.port < 0 || m.o.port > 65535) return invalid_argument("front-end port {} is not in 0..65535", m.o.port);
    m.pool = std::make_unique<boost::asio::thread_pool>(m.o.proxy_threads);
    // The front end first: a port in use or a bad --address fails before replicas load models for
    // a minute. Until one is ready, requests wait for it (up to the ready timeout).
    serve::http::ServerOptions so;
    so.address = m.o.address;
    so.port = static_cast<uint16_t>(m.o.port);
    so.threads = 2;
    so.server_name = "strato-autoscale";
    so.body_limit_flag = "";  // no flag sets it here
    so.thread_name = "autoscale-http";
    m.front = std::make_unique<serve::http::Server>(
        so, [this](serve::http::Request&& req, serve::http::Reply reply) { impl_->handle(std::move(req), std::move(reply)); });
    STRATO_RETURN_IF_ERROR(m.front->start().with_context(fmt::format("front end on {}:{}", m.o.address, m.o.port)));
    int n = std::max(m.o.config.min_nodes, 1);
    for (int i = 0; i < n; ++i) STRATO_RETURN_IF_ERROR(m.spawn().status());
    m.note(fmt::format("started {} replica(s); logs in {}", n, m.o.log_dir));
    auto start = Clock::now();
    while (seconds_since(start) < m.o.ready_timeout_s) {
        if (signals::stop_requested())  // Ctrl-C while models load: stop now, not after the ready timeout
            return Status(StatusCode::kCancelled, "stopped while the replicas were starting");
        bool ready = false, alive = false;
        {
            std::lock_guard<std::mutex> lock(m.mu);
            for (const auto& r : m.replicas) ready |= r->state == 1, alive |= r->state != 3;
        }
        if (ready) break;
        if (!alive) {
            std::lock_guard<std::mutex> lock(m.mu);
            return Status(StatusCode::kUnavailable,
                          fmt::format("no replica started{}; see the logs in {}",
                                      m.start_error.empty() ? "" : " (" + m.start_error + ")", m.o.log_dir));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Status::ok();
}

Status LocalProvider::run() {
    Impl& m = *impl_;
    while (!m.stopping && !signals::stop_requested()) {
        // The backlog: requests in flight at the proxy, averaged over the control period.
        // Utilisation: requests in flight per ready replica, capped at one (a replica serving a
        // request is busy), averaged over the period.
        double sum = 0, busy = 0;
        int samples = 0;
        auto tick_start = Clock::now();
        while (seconds_since(tick_start) < m.o.tick_s && !m.stopping && !signals::stop_requested()) {
            double in_flight = static_cast<double>(m.in_flight.load());
            sum += in_flight;
            busy += std::min(1.0, in_flight / std::max(1, m.ready()));
            ++samples;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        m.reap();
        m.join_finished();
        Observation obs;
        obs.t_s = seconds_since(m.t0);
        obs.weekday_hour = local_week_hour();
        obs.nodes = m.live();
        obs.ready = m.ready();
        obs.backlog = samples ? sum / samples : 0;
        obs.utilization = samples ? 100 * busy / samples : 0;
        // (in a crash back-off: a scale-up decided now would start its cooldown with no replica
        // started, and wait it out again once the back-off ends)
        obs.may_scale_up = m.may_spawn();
        Decision d = m.scaler.decide(obs);
        if (d.nodes > obs.nodes) {
            m.note(fmt::format("{} -> {} replicas: {}{}", obs.nodes, d.nodes, d.reason,
                               m.crash_streak > 0 ? fmt::format(" (after {} failed start(s))", m.crash_streak.load()) : ""));
            for (int i = obs.nodes; i < d.nodes; ++i) {
                Status s = m.spawn().status();
                if (!s.is_ok()) log::warn("autoscale: {}", s.message());
            }
            m.last_spawn = Clock::now();
        } else if (d.nodes < obs.nodes) {
            m.note(fmt::format("{} -> {} replicas: {}", obs.nodes, d.nodes, d.reason));
            for (int k = obs.nodes - d.nodes; k > 0; --k) {
                std::shared_ptr<Replica> victim;
                {
                    std::lock_guard<std::mutex> lock(m.mu);
                    for (const auto& r : m.replicas)  // starting ones first, then the newest ready
                        if ((r->state == 0 || r->state == 1) &&
                            (!victim || (r->state == 0 && victim->state == 1) ||
                             (r->state == victim->state && r->started > victim->started)))
                            victim = r;
                    if (victim && victim->state == 1) victim->state = 2;  // no new requests from now on
                }
                if (victim) m.drain(victim);
            }
        }
    }
    m.note("stopping: draining every replica");
    if (m.front) m.front->drain(std::chrono::milliseconds(static_cast<int64_t>(m.o.drain_timeout_s * 1000)));
    return Status::ok();
}

void LocalProvider::stop() { impl_->stopping = true; }

int LocalProvider::port() const { return impl_->front ? impl_->front->port() : -1; }

std::vector<ReplicaStatus> LocalProvider::replicas() const {
    std::vector<ReplicaStatus> out;
    std::lock_guard<std::mutex> lock(impl_->mu);
    static const char* kStates[] = {"starting", "ready", "draining", "gone"};
    for (const auto& r : impl_->replicas)
        out.push_back({r->pid, r->port.load(), kStates[r->state], r->in_flight.load(), r->served.load()});
    return out;
}

}  // namespace strato::cloud
