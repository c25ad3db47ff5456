#include "strato/dist/agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <iterator>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/parse.h"
#include "strato/core/signals.h"
#include "strato/dist/rendezvous.h"

extern char** environ;

namespace strato::dist {

namespace stdfs = std::filesystem;

namespace {

constexpr size_t kTailLines = 40;
constexpr size_t kMaxLineBytes = 64 << 10;  // a longer run without a newline is cut into lines of this size

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string host_name() {
    char h[256] = {};
    gethostname(h, sizeof h - 1);
    return h;
}

// The id names the log directory and travels in the rendezvous protocol's words: characters
// other than letters, digits, '.', '_' and '-' become '_' (on every node alike, so
// `--rdzv-id "$SLURM_JOB_NAME"` with blanks or '/' still meets; "a/../b" cannot leave the
// log directory).
std::string job_id_chars(std::string id) {
    for (char& c : id)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
    return id;
}

/// A port nobody listens on now (bound and released; the worker of rank 0 binds it next).
/// A port nothing else is handed meanwhile, for the workers' store: one outside the kernel's
/// ephemeral range (net.ipv4.ip_local_port_range), which outgoing connections take their local
/// ports from. A port bind(0) chose is in that range, and between the choice and rank 0's bind
/// (seconds, as libtorch loads) any process's connect() could take it: rank 0 then failed with
/// "address in use" (seen under a parallel test run). Falls back to bind(0).
int free_port(const std::string& addr) {
    auto bind_to = [&addr](int want) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = addr == "0.0.0.0" ? INADDR_ANY : htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(want));
        int port = -1;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
            socklen_t len = sizeof a;
            if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) port = ntohs(a.sin_port);
        }
        ::close(fd);
        return port;
    };
    int lo = 32768, hi = 60999;  // (Linux's default range)
    if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) {
        int a = 0, b = 0;
        if (range >> a >> b && 0 < a && a <= b && b <= 65535) lo = a, hi = b;
    }
    // Below the range from 10000 (under it lie well-known services), and above it.
    std::vector<std::pair<int, int>> spans;
    if (lo - 1 >= 10000) spans.emplace_back(10000, lo - 1);
    if (hi + 1 <= 65535) spans.emplace_back(hi + 1, 65535);
    int total = 0;
    for (const auto& [a, b] : spans) total += b - a + 1;
    std::mt19937 rng(std::random_device{}());
    for (int tries = 0; total > 0 && tries < 64; ++tries) {
        int k = std::uniform_int_distribution<int>(0, total - 1)(rng);
        for (const auto& [a, b] : spans) {
            if (k <= b - a) {
                if (const int port = bind_to(a + k); port > 0) return port;
                break;
            }
            k -= b - a + 1;
        }
    }
    const int port = bind_to(0);
    return port > 0 ? port : 29500;
}

/// The Python a `.py` command runs with: the first python3 in an absolute directory of PATH -- an
/// activated virtualenv's or conda environment's, as torchrun runs it with its own sys.executable
/// -- else /usr/bin/python3 (found by review: always /usr/bin/python3, which in a virtualenv is
/// the Python without the job's packages: "No module named torch").
std::string python_interpreter() {
    const char* path = std::getenv("PATH");
    std::string_view rest = path ? path : "";
    while (!rest.empty()) {
        const size_t colon = rest.find(':');
        const std::string dir(rest.substr(0, colon));
        rest.remove_prefix(colon == std::string_view::npos ? rest.size() : colon + 1);
        if (!dir.starts_with('/')) continue;  // (not a python3 that the working directory holds)
        const std::string candidate = dir + (dir.ends_with('/') ? "" : "/") + "python3";
        struct stat st {};
        if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
            return candidate;
    }
    return "/usr/bin/python3";
}

std::string signal_text(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

// ---- the launcher's own messages on stderr ----

/// log:: writes to stderr blocking: a stderr pipe nobody reads (`2>&1 | less` paused, a FIFO, a
/// hung log shipper) would hold the agent in write(), deaf to its workers and to SIGINT/SIGTERM,
/// with the rendezvous heartbeat stopped. The agent's messages go through note:: instead: written
/// at once when stderr has room (a pipe with a free buffer takes a line without blocking), else
/// kept, up to kMax (then the oldest are dropped), and written by the event loop once it has room.
/// Single-threaded: only the agent's thread calls it (the rendezvous thread logs nothing).
namespace note {

constexpr size_t kMax = 1000;
// A pipe that polls writable has room for one page, and a write of at most PIPE_BUF bytes does not
// block there; a longer one waits for the reader (a message naming a 4 KB log directory held the
// agent in write() for good). Messages are cut to fit, with the level's prefix and the newline.
constexpr size_t kMaxMessage = PIPE_BUF - 64;
std::deque<std::pair<log::Level, std::string>> g_pending;
size_t g_dropped = 0;  // messages dropped from a full queue, said once stderr takes messages again

bool stderr_has_room() {
    pollfd q{STDERR_FILENO, POLLOUT, 0};
    return ::poll(&q, 1, 0) == 1 && (q.revents & POLLOUT);
}

void flush() {
    if (g_dropped > 0 && stderr_has_room()) {
        log::write(log::Level::kWarn,
                   fmt::format("launch: {} message(s) were dropped: standard error did not take them", g_dropped));
        g_dropped = 0;
    }
    while (!g_pending.empty() && stderr_has_room()) {
        log::write(g_pending.front().first, g_pending.front().second);
        g_pending.pop_front();
    }
}

/// `message` cut to kMaxMessage bytes at most (at a character boundary), saying how much was cut.
std::string fit(std::string message) {
    if (message.size() <= kMaxMessage) return message;
    const size_t total = message.size();
    size_t keep = kMaxMessage - 32;
    while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;  // (UTF-8)
    message.resize(keep);
    return message + fmt::format("... ({} bytes cut)", total - keep);
}

void say(log::Level level, std::string message) {
    if (!log::enabled(level)) return;
    if (g_pending.size() >= kMax) {
        g_pending.pop_front();
        ++g_dropped;
    }
    g_pending.emplace_back(level, fit(std::move(message)));
    flush();
}

/// At the end: waits up to `wait_s` for stderr to take what is left; the rest is dropped.
void finish(double wait_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    for (flush(); !g_pending.empty() && std::chrono::steady_clock::now() < deadline; flush()) {
        pollfd q{STDERR_FILENO, POLLOUT, 0};
        if (::poll(&q, 1, 50) == 1 && (q.revents & (POLLERR | POLLNVAL))) break;
    }
    g_pending.clear();
    g_dropped = 0;
}

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
    if (log::enabled(log::Level::kInfo)) say(log::Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
    if (log::enabled(log::Level::kWarn)) say(log::Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
    if (log::enabled(log::Level::kError)) say(log::Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace note

using Round = RoundAssignment;  // what a round gives this node, from the rendezvous or decided alone

struct Failure {
    int local_rank = 0, rank = 0, exit_code = 0, signal = 0;
    std::deque<std::string> tail;
    std::string worker_error;  // the worker's own TORCHELASTIC_ERROR_FILE, if it wrote one
    bool worker_error_truncated = false;  // it was longer than kWorkerErrorMax: its start is kept
    int64_t worker_error_bytes = -1;       // its size, when it is a regular file
    double timestamp = 0;                  // Unix seconds, when it was seen
    int code() const { return signal ? 128 + signal : exit_code; }
    std::string what() const {
        return signal ? fmt::format("rank {} (local rank {}) was killed by {}", rank, local_rank, signal_text(signal))
                      : fmt::format("rank {} (local rank {}) exited with code {}", rank, local_rank, exit_code);
    }
};

/// The worker's TORCHELASTIC_ERROR_FILE, at most kWorkerErrorMax bytes of it: it was read whole,
/// so a huge file, or one linked to /dev/zero (1.2 GB of the agent's memory before the read gave
/// up), went into memory and into error.json. Opened without blocking (a named pipe without a
/// writer reads as empty) and read without waiting for more. False when there is none.
constexpr size_t kWorkerErrorMax = 64 << 10;

bool read_worker_error(const std::string& path, Failure* f) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return false;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        ::close(fd);
        return false;
    }
    std::string text(kWorkerErrorMax + 1, '\0');
    size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<size_t>(n);
    }
    ::close(fd);
    if (S_ISREG(st.st_mode))
        f->worker_error_bytes = static_cast<int64_t>(std::max<size_t>(got, static_cast<size_t>(st.st_size)));
    f->worker_error_truncated = got > kWorkerErrorMax || f->worker_error_bytes > static_cast<int64_t>(kWorkerErrorMax);
    text.resize(std::min(got, kWorkerErrorMax));
    f->worker_error = std::move(text);
    return !f->worker_error.empty();
}

// ---- the echo of worker lines on the launcher's standard output ----

/// Worker lines on the launcher's standard output, written without ever blocking the launcher: a
/// reader that stops reading (a paused `| less`, a FIFO nobody reads) would otherwise hold it in
/// write(), deaf to SIGINT/SIGTERM and with its rendezvous heartbeat stopped. Lines wait in a
/// buffer of up to kBufferMax bytes; when it is full the echo waits for a reader that is taking
/// lines (the workers then go at its pace, as under torchrun), but once the reader has taken
/// nothing for kStallS (or a stop signal came) lines are dropped and counted until it reads again
/// (the logs keep every line), and the launcher says so. The event loop watches fd() for room
/// while pending().
class Echo {
public:
    /// `fd` < 0: no echo. `logs` is where every line is kept (for the messages).
    Echo(int fd, std::string logs) : fd_(fd), logs_(std::move(logs)) {
        struct stat st {};
        closed_ = fd < 0;
        if (fd < 0 || fstat(fd, &st) != 0) return;
        if (S_ISSOCK(st.st_mode)) {
            socket_ = true;  // send(MSG_DONTWAIT) below
        } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
            // A non-blocking open file description of our own for the same pipe or terminal:
            // O_NONBLOCK on the shared one would reach the shell and every other process on it.
            own_ = ::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
            careful_ = own_ < 0;  // else: room checked with poll(), at most PIPE_BUF bytes a write
        }
    }
    ~Echo() {
        if (own_ >= 0) ::close(own_);
    }
    Echo(const Echo&) = delete;
    Echo& operator=(const Echo&) = delete;

    void add(int rank, std::string_view line) {
        if (closed_) return;
        if (buffer_.size() - written_ >= kBufferMax && !stalled_) make_room();
        if (buffer_.size() - written_ >= kBufferMax) {
            if (dropped_++ == 0) note_ = true;
            return;
        }
        fmt::format_to(std::back_inserter(buffer_), "[{}]: ", rank);
        buffer_.append(line);  // (NUL bytes too)
        buffer_ += '\n';
    }
    /// Writes what the reader takes now.
    void flush() {
        while (!closed_ && written_ < buffer_.size()) {
            const ssize_t n = write_some(buffer_.data() + written_, buffer_.size() - written_);
            if (n > 0) {
                written_ += static_cast<size_t>(n);
                total_ += static_cast<size_t>(n);
                stalled_ = false;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            // A closed stdout (EPIPE) ends the echo; the logs keep every line.
            closed_ = true;
            note::warn("launch: standard output is closed ({}); worker output goes to the logs in {} only",
                       n < 0 ? strerror(errno) : "nothing written", logs_);
        }
        if (written_ == buffer_.size() || written_ > (1u << 20)) {
            buffer_.erase(0, written_);
            written_ = 0;
        }
        if (note_ && stderr_has_room()) {
            note_ = false;
            note::warn("launch: standard output is not keeping up; worker lines are dropped from the echo (the logs "
                       "in {} keep all of them)", logs_);
        }
    }
    /// At the end: waits up to `wait_s` for the reader, then says what was dropped.
    void finish(double wait_s) {
        const double deadline = now_s() + wait_s;
        for (flush(); pending() && now_s() < deadline; flush()) {
            pollfd p{fd(), POLLOUT, 0};
            ::poll(&p, 1, std::max(1, static_cast<int>((deadline - now_s()) * 1000)));
        }
        if (pending())
            dropped_ += static_cast<size_t>(std::count(buffer_.begin() + static_cast<long>(written_), buffer_.end(), '\n'));
        if (dropped_ > 0 && stderr_has_room())
            note::warn("launch: {} worker line(s) were not echoed (standard output did not keep up); the logs in {} "
                       "have them", dropped_, logs_);
        dropped_ = 0;
        buffer_.clear();
        written_ = 0;
    }
    bool pending() const { return !closed_ && written_ < buffer_.size(); }
    int fd() const { return own_ >= 0 ? own_ : fd_; }

private:
    static constexpr size_t kBufferMax = 4 << 20;
    static constexpr double kStallS = 0.1;
    // At most this long waiting for the reader between two new_round() calls (the event loop's
    // turns, each of which runs the rendezvous heartbeat): a slow but steady reader (a terminal
    // over a slow link) must not hold the heartbeat back; past it, lines are dropped.
    static constexpr double kMaxWaitPerRoundS = 0.5;

public:
    /// A new turn of the event loop (the heartbeat just ran): the echo may wait for the reader again.
    void new_round() { waited_s_ = 0; }

private:
    /// Waits while the reader takes lines; gives up (stalled) after kStallS without progress, or
    /// once this round's waiting reached kMaxWaitPerRoundS.
    void make_room() {
        const double start = now_s();
        double deadline = start + kStallS;
        for (size_t seen = total_; !closed_ && !signals::stop_requested();) {
            flush();
            if (buffer_.size() - written_ < kBufferMax) break;
            if (total_ != seen) {
                seen = total_;
                deadline = now_s() + kStallS;
            }
            deadline = std::min(deadline, start + kMaxWaitPerRoundS - waited_s_);
            if (now_s() >= deadline) {
                stalled_ = true;
                break;
            }
            pollfd q{fd(), POLLOUT, 0};
            ::poll(&q, 1, std::max(1, static_cast<int>((deadline - now_s()) * 1000)));
        }
        if (closed_ || signals::stop_requested()) stalled_ = true;
        waited_s_ += now_s() - start;
    }

    ssize_t write_some(const char* p, size_t n) {
        if (socket_) return ::send(fd_, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (careful_) {
            // A blocking pipe or terminal: a write of up to PIPE_BUF bytes into a pipe with room
            // does not block.
            pollfd q{fd_, POLLOUT, 0};
            if (::poll(&q, 1, 0) != 1 || !(q.revents & POLLOUT)) {
                if (q.revents & (POLLERR | POLLHUP)) return ::write(fd_, p, std::min<size_t>(n, PIPE_BUF));  // (EPIPE)
                errno = EAGAIN;
                return -1;
            }
            n = std::min<size_t>(n, PIPE_BUF);
        }
        return ::write(fd(), p, n);
    }
    static bool stderr_has_room() { return note::stderr_has_room(); }

    int fd_;
    std::string logs_;
    int own_ = -1;
    bool socket_ = false, careful_ = false, closed_ = false, note_ = false;
    bool stalled_ = false;  // the reader took nothing for kStallS: drop instead of waiting
    std::string buffer_;
    size_t written_ = 0, total_ = 0;
    size_t dropped_ = 0;
    double waited_s_ = 0;  // waiting for the reader since new_round()
};

// ---- the local worker group ----

class Group {
public:
    explicit Group(const LaunchOptions& o) : o_(o), echo_(o.tee ? STDOUT_FILENO : -1, o.log_dir) {}
    ~Group() {
        stop();
        if (o_.tee) echo_.finish(1.0);
    }

    Status start(const Round& r, const std::string& run_id, const std::string& dir);
    enum class State { kRunning, kSucceeded, kFailed };
    State poll(Failure* f);
    /// SIGTERM to every worker's process group, SIGKILL after the grace period; `tick` runs while
    /// it waits (the rendezvous heartbeat must go on).
    void stop(const std::function<void()>& tick = nullptr);
    /// Reads the workers' output as it comes until `until` (now_s's clock), with `tick` at least
    /// every second; returns early when a worker's output ends (it exited, most likely) and, with
    /// `wake_on_stop`, at once when SIGINT/SIGTERM/SIGHUP asks the launcher to stop.
    void wait(double until, bool wake_on_stop, const std::function<void()>& tick = nullptr);

private:
    struct Worker {
        int local_rank = 0, rank = 0;
        pid_t pid = -1;
        int out = -1;
        std::string partial;
        std::deque<std::string> tail;
        std::ofstream log;
        std::string error_file;
        bool exited = false;
        int status = 0;
    };
    void drain(Worker& w, bool final);

    const LaunchOptions& o_;
    std::vector<Worker> workers_;
    Echo echo_;
};

Status Group::start(const Round& r, const std::string& run_id, const std::string& dir) {
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(dir));
    workers_.clear();
    workers_.resize(static_cast<size_t>(o_.nproc_per_node));
    std::vector<std::string> argv_s = o_.command;
    if (!o_.no_python && !argv_s.empty() && argv_s[0].size() > 3 && argv_s[0].ends_with(".py"))
        argv_s.insert(argv_s.begin(), {python_interpreter(), "-u"});
    for (int lr = 0; lr < o_.nproc_per_node; ++lr) {
        Worker& w = workers_[static_cast<size_t>(lr)];
        w.local_rank = lr;
        w.rank = r.rank_offset + lr;
        const std::string log_path = fmt::format("{}/rank_{}.log", dir, w.rank);
        w.log.open(log_path);
        if (!w.log)
            note::warn("launch: cannot write {} ({}); rank {}'s output is not kept", log_path, strerror(errno), w.rank);
        // Absolute, as torchrun's: a worker that changes its directory (Hydra's run directory, a
        // script's os.chdir) wrote a relative path somewhere else, and its error was lost (found by
        // review, with the default --log-dir runs/launch/<id>).
        std::error_code abs_ec;
        const stdfs::path abs_dir = stdfs::absolute(dir, abs_ec);
        w.error_file = fmt::format("{}/rank_{}.error.json", abs_ec ? dir : abs_dir.string(), w.rank);
        // (one left by an earlier run in a reused log directory was taken as this worker's error)
        if (::unlink(w.error_file.c_str()) != 0 && errno != ENOENT)
            note::warn("launch: cannot remove the earlier {}: {}", w.error_file, strerror(errno));
        std::map<std::string, std::string> env;
        for (char** e = environ; *e; ++e) {
            std::string kv = *e;
            size_t eq = kv.find('=');
            if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
        }
        auto set = [&](const char* k, const std::string& v) { env[k] = v; };
        set("RANK", std::to_string(w.rank));
        set("LOCAL_RANK", std::to_string(lr));
        set("GROUP_RANK", std::to_string(r.group_rank));
        set("ROLE_RANK", std::to_string(w.rank));
        set("ROLE_NAME", "default");
        set("LOCAL_WORLD_SIZE", std::to_string(o_.nproc_per_node));
        set("WORLD_SIZE", std::to_string(r.world_size));
        set("ROLE_WORLD_SIZE", std::to_string(r.world_size));
        set("GROUP_WORLD_SIZE", std::to_string(r.group_world_size));
        set("MASTER_ADDR", r.master_addr);
        set("MASTER_PORT", std::to_string(r.master_port));
        set("TORCHELASTIC_RESTART_COUNT", std::to_string(r.restarts));
        set("TORCHELASTIC_MAX_RESTARTS", std::to_string(o_.max_restarts));
        set("TORCHELASTIC_RUN_ID", run_id);
        set("TORCHELASTIC_USE_AGENT_STORE", "False");
        set("TORCHELASTIC_ERROR_FILE", w.error_file);
        if (o_.nproc_per_node > 1 && !env.count("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", "1");
        // As torchrun: a NCCL collective with a dead peer fails at its timeout instead of hanging.
        // torchrun from PyTorch 2.2 sets the variable's new name, which those versions read first
        // (found by review: a worker comparing its environment with torchrun's lacked it); the old
        // name stays for PyTorch before 2.2 and libtorch 1.x.
        if (!env.count("NCCL_ASYNC_ERROR_HANDLING")) set("NCCL_ASYNC_ERROR_HANDLING", "1");
        if (!env.count("TORCH_NCCL_ASYNC_ERROR_HANDLING")) set("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        std::vector<std::string> env_s;
        for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
        std::vector<char*> envp, argv;
        for (auto& s : env_s) envp.push_back(s.data());
        envp.push_back(nullptr);
        for (auto& s : argv_s) argv.push_back(s.data());
        argv.push_back(nullptr);
        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) != 0) return io_error("pipe: {}", strerror(errno));
        const pid_t parent = getpid();
        // SIGINT/SIGTERM are held from before the fork until the child has dropped the agent's
        // handlers: a stop sent to a worker that has not exec'd yet would otherwise run the
        // inherited handler, which only sets a flag in the child's copy of the agent, and be lost
        // (the worker then ran on until SIGKILL, --stop-timeout later).
        sigset_t stop_signals, old_mask;
        sigemptyset(&stop_signals);
        sigaddset(&stop_signals, SIGINT);
        sigaddset(&stop_signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
        pid_t pid = fork();
        if (pid < 0) {
            pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
            ::close(pipefd[0]);
            ::close(pipefd[1]);
            return io_error("fork: {}", strerror(errno));
        }
        if (pid == 0) {
            struct sigaction dfl {};
            dfl.sa_handler = SIG_DFL;
            sigaction(SIGINT, &dfl, nullptr);
            sigaction(SIGTERM, &dfl, nullptr);
            sigaction(SIGPIPE, &dfl, nullptr);  // (an ignored signal stays ignored across exec)
            sigprocmask(SIG_SETMASK, &old_mask, nullptr);  // a stop already sent acts now, as on the worker
            prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed agent takes its workers with it
            if (getppid() != parent) _exit(1);
            setpgid(0, 0);  // the worker and its children are stopped together
            // In a group of its own the worker is in the terminal's background: reading it would
            // stop the worker (SIGTTIN) and hang the job. Workers read no input, as under a
            // scheduler; a read sees end of file.
            if (int null_fd = ::open("/dev/null", O_RDONLY); null_fd >= 0) dup2(null_fd, 0);
            dup2(pipefd[1], 1);
            dup2(pipefd[1], 2);
            close_range(3, ~0U, 0);
            execvpe(argv[0], argv.data(), envp.data());
            dprintf(2, "strato launch: cannot run %s: %s\n", argv[0], strerror(errno));
            _exit(127);
        }
        pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
        ::close(pipefd[1]);
        setpgid(pid, pid);  // also here: a stop right after fork must reach the group
        signals::track_process_group(pid);  // a second stop signal kills the group before the agent exits
        fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
        w.pid = pid;
        w.out = pipefd[0];
    }
    return Status::ok();
}

void Group::drain(Worker& w, bool final) {
    auto emit = [&](std::string_view line) {
        w.log << line << '\n';
        w.tail.emplace_back(line);
        if (w.tail.size() > kTailLines) w.tail.pop_front();
        if (o_.tee) echo_.add(w.rank, line);
    };
    // Whole lines are passed on after every read, so a worker writing without pause is never
    // held in memory; a run of kMaxLineBytes without a newline is passed on as a line of its own.
    auto split = [&] {
        size_t start = 0;
        while (true) {
            const size_t nl = w.partial.find('\n', start);
            if (nl == std::string::npos) {
                if (w.partial.size() - start < kMaxLineBytes) break;
                emit(std::string_view(w.partial).substr(start, kMaxLineBytes));
                start += kMaxLineBytes;
                continue;
            }
            emit(std::string_view(w.partial).substr(start, nl - start));
            start = nl + 1;
        }
        w.partial.erase(0, start);
    };
    char buf[8192];
    // At most 1 MiB a call while the worker runs (64 MiB once it has exited: its children may
    // still hold the pipe): one that writes without pause must not keep the agent from the others.
    size_t budget = final ? size_t{64} << 20 : size_t{1} << 20;
    while (w.out >= 0 && budget > 0) {
        ssize_t n = ::read(w.out, buf, sizeof buf);
        if (n > 0) {
            w.partial.append(buf, static_cast<size_t>(n));
            split();
            budget -= std::min(budget, static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || errno != EAGAIN) {
            ::close(w.out);
            w.out = -1;
            final = true;
        }
        break;
    }
    if (final && !w.partial.empty()) {
        emit(w.partial);
        w.partial.clear();
    }
    w.log.flush();
    if (o_.tee) echo_.flush();
}

void Group::wait(double until, bool wake_on_stop, const std::function<void()>& tick) {
    sigset_t stops, unblocked;
    sigemptyset(&stops);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    for (;;) {
        fds.clear();
        owners.clear();
        for (auto& w : workers_) {
            if (w.out < 0) continue;
            fds.push_back({w.out, POLLIN, 0});
            owners.push_back(&w);
        }
        if (o_.tee && echo_.pending()) fds.push_back({echo_.fd(), POLLOUT, 0});
        const double left = std::min(until - now_s(), 1.0);  // the heartbeat (tick) goes on meanwhile
        if (left <= 0) return;
        timespec ts{};
        ts.tv_sec = static_cast<time_t>(left);
        ts.tv_nsec = static_cast<long>((left - static_cast<double>(ts.tv_sec)) * 1e9);
        int n;
        if (wake_on_stop) {
            // Stop signals are held from the flag's check until ppoll, which lets them in: one that
            // comes in between interrupts it instead of waiting out the timeout.
            pthread_sigmask(SIG_BLOCK, &stops, &unblocked);
            if (signals::stop_requested()) {
                pthread_sigmask(SIG_SETMASK, &unblocked, nullptr);
                return;
            }
            n = ::ppoll(fds.data(), fds.size(), &ts, &unblocked);
            pthread_sigmask(SIG_SETMASK, &unblocked, nullptr);
        } else {
            n = ::ppoll(fds.data(), fds.size(), &ts, nullptr);
        }
        if (n < 0 && errno != EINTR) {
            note::warn("launch: poll: {}", strerror(errno));
            std::this_thread::sleep_for(std::chrono::duration<double>(left));
        }
        bool ended = false;
        for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
            if (!fds[i].revents) continue;
            if (i < owners.size()) {
                drain(*owners[i], false);
                ended |= owners[i]->out < 0;
            } else {
                echo_.flush();
            }
        }
        if (tick) tick();
        note::flush();
        if (o_.tee) echo_.new_round();
        if (ended) return;
    }
}

Group::State Group::poll(Failure* f) {
    bool all_ok = true;
    for (auto& w : workers_) {
        drain(w, false);
        if (!w.exited) {
            int status = 0;
            if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
                w.exited = true;
                w.status = status;
                drain(w, true);
            }
        }
        if (!w.exited) all_ok = false;
    }
    // The failure to report among those seen in this check: a worker killed by a signal before one
    // that exited non-zero (peers of a killed rank exit 1 on the broken collective, and may be
    // seen in the same check), then the lowest rank.
    const Worker* first = nullptr;
    for (const auto& w : workers_) {
        if (!w.exited || (WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)) continue;
        if (!first || (WIFSIGNALED(w.status) && !WIFSIGNALED(first->status))) first = &w;
    }
    if (!first) return all_ok ? State::kSucceeded : State::kRunning;
    f->local_rank = first->local_rank;
    f->rank = first->rank;
    f->exit_code = WIFEXITED(first->status) ? WEXITSTATUS(first->status) : 0;
    f->signal = WIFSIGNALED(first->status) ? WTERMSIG(first->status) : 0;
    f->tail = first->tail;
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    f->timestamp = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
    read_worker_error(first->error_file, f);
    return State::kFailed;
}

void Group::stop(const std::function<void()>& tick) {
    bool any = false;
    for (auto& w : workers_) {
        if (w.pid <= 0) continue;
        kill(-w.pid, SIGTERM);  // exited leaders too: their children may live on in the group
        any |= !w.exited;
    }
    const double deadline = now_s() + o_.stop_timeout_s;
    while (any && now_s() < deadline) {
        if (tick) tick();
        any = false;
        for (auto& w : workers_) {
            drain(w, false);
            if (w.exited) continue;
            int status = 0;
            if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
                w.exited = true;
                w.status = status;
                drain(w, true);
            } else {
                any = true;
            }
        }
        if (any) wait(std::min(deadline, now_s() + 0.05), false);
    }
    for (auto& w : workers_) {
        if (w.pid <= 0) continue;
        if (!w.exited)
            note::warn("launch: rank {} did not stop within {:.0f} s of SIGTERM; sending SIGKILL", w.rank,
                       o_.stop_timeout_s);
        kill(-w.pid, SIGKILL);  // whatever is left of the group
        signals::untrack_process_group(w.pid);
        if (w.exited) continue;
        waitpid(w.pid, &w.status, 0);
        w.exited = true;
        drain(w, true);
    }
    for (auto& w : workers_) {
        if (w.out >= 0) ::close(w.out), w.out = -1;
        w.pid = -1;  // reaped: a later stop must not signal a process group that reused the id
    }
}

// ---- coordinators: alone, or through the rendezvous ----

class Coordinator {
public:
    virtual ~Coordinator() = default;
    /// The next round's assignment; kCancelled when the job is to stop (its message says why).
    virtual Result<Round> next_round() = 0;
    virtual Status failed(const std::string& why) = 0;
    virtual Status done() = 0;
    virtual Result<RendezvousClient::Event> poll(std::string* message) = 0;
    virtual void keepalive() {}
};

class LocalCoordinator : public Coordinator {
public:
    explicit LocalCoordinator(const LaunchOptions& o) : o_(o) {}
    Result<Round> next_round() override {
        if (round_ > o_.max_restarts)
            return Status(StatusCode::kCancelled, fmt::format("no restarts left (max_restarts = {})", o_.max_restarts));
        Round r;
        r.round = r.restarts = round_;
        const int nodes = o_.standalone ? 1 : o_.max_nodes;
        r.group_rank = o_.standalone ? 0 : std::max(0, o_.node_rank);
        r.group_world_size = nodes;
        r.world_size = nodes * o_.nproc_per_node;
        r.rank_offset = r.group_rank * o_.nproc_per_node;
        r.master_addr = o_.standalone ? "127.0.0.1" : o_.master_addr;
        r.master_port = o_.standalone ? free_port("127.0.0.1") : o_.master_port;
        return r;
    }
    Status failed(const std::string&) override {
        ++round_;
        return Status::ok();
    }
    Status done() override {
        done_ = true;
        return Status::ok();
    }
    Result<RendezvousClient::Event> poll(std::string*) override {
        return done_ ? RendezvousClient::Event::kExit : RendezvousClient::Event::kNone;
    }

private:
    const LaunchOptions& o_;
    int round_ = 0;
    bool done_ = false;
};

class RdzvCoordinator : public Coordinator {
public:
    /// `endpoint_host`: the host of --rdzv-endpoint. A node that reached it over loopback through a
    /// name that is no loopback address (loopback_alias) is the other nodes' master by its host name.
    RdzvCoordinator(const LaunchOptions& o, std::unique_ptr<RendezvousServer> server, std::unique_ptr<RendezvousClient> c,
                    const std::string& endpoint_host)
        : o_(o), server_(std::move(server)), client_(std::move(c)), by_name_(loopback_alias(endpoint_host)) {}
    Result<Round> next_round() override {
        RendezvousClient::Join j;
        j.run_id = o_.rdzv_id;
        j.node_id = fmt::format("{}:{}", host_name(), getpid());
        j.node_rank = o_.node_rank;
        j.local_world_size = o_.nproc_per_node;
        j.addr = client_->local_address();
        // (found by review: "127.0.0.1" became MASTER_ADDR on every node of a job whose endpoint
        // was the host's name, mapped to loopback on the host itself)
        if (by_name_ && j.addr.starts_with("127.") && !host_name().empty()) j.addr = host_name();
        j.master_port = free_port(j.addr == "127.0.0.1" ? "127.0.0.1" : "0.0.0.0");
        STRATO_ASSIGN_OR_RETURN(Round r, client_->join(j, o_.join_timeout_s + o_.last_call_s + 30));
        round_ = r.round;
        return r;
    }
    Status failed(const std::string& why) override { return client_->fail(round_, why); }
    Status done() override { return client_->done(round_); }
    Result<RendezvousClient::Event> poll(std::string* message) override { return client_->poll(message); }
    void keepalive() override { client_->keepalive(); }

private:
    const LaunchOptions& o_;
    std::unique_ptr<RendezvousServer> server_;  // when this node hosts it
    std::unique_ptr<RendezvousClient> client_;
    bool by_name_ = false;
    int round_ = 0;
};

/// A reused log directory: an earlier run's error.json files would name a failure this run did not
/// have. Every node removes those written before `start_s` (CLOCK_REALTIME_COARSE, the clock of
/// file times): one written since is this run's, by a node sharing the directory. The node hosting
/// the job removes every earlier one; the others only those naming their own host (on a node-local
/// directory, all of them; on a shared one, the other nodes' belong to the host to clear).
void remove_earlier_errors(const std::string& log_dir, bool hosting, double start_s) {
    std::vector<stdfs::path> files{stdfs::path(log_dir) / "error.json"};
    std::error_code ec;
    for (stdfs::directory_iterator it(log_dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (!it->is_directory(ec) || !it->path().filename().string().starts_with("attempt_")) continue;
        files.push_back(it->path() / "error.json");
        std::error_code ec2;
        for (stdfs::directory_iterator in(it->path(), ec2), e2; !ec2 && in != e2; in.increment(ec2)) {
            const std::string n = in->path().filename().string();
            if (n.starts_with("node_") && n.ends_with(".error.json")) files.push_back(in->path());
        }
    }
    const std::string me = host_name();
    int removed = 0;
    for (const auto& f : files) {
        struct stat st {};
        if (::lstat(f.c_str(), &st) != 0) continue;
        const double mtime_s = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
        if (mtime_s >= start_s) continue;  // this run's, by a node sharing the directory
        if (!hosting) {
            auto text = fs::read_file(f, 1 << 20);
            if (!text) continue;
            auto j = parse_json_bounded(*text);
            if (j.is_discarded() || !j.is_object() || !j.contains("host") || j["host"] != me) continue;
        }
        removed += stdfs::remove(f, ec) ? 1 : 0;
    }
    if (removed > 0) note::info("launch: removed {} error.json file(s) an earlier run left in {}", removed, log_dir);
}

/// Writes the failure to attempt_N/node_<group rank>.error.json, and to attempt_N/error.json and
/// <log dir>/error.json unless another node of this run recorded the root cause there first
/// (error_file_keeps). True when <log dir>/error.json is this failure.
Result<bool> write_error_file(const std::string& log_dir, const std::string& attempt_dir, const Failure& f, const Round& r,
                              double start_s) {
    nlohmann::json tail = nlohmann::json::array();
    for (const auto& l : f.tail) tail.push_back(l);
    nlohmann::json j{{"message", f.what()},
                     {"rank", f.rank},
                     {"local_rank", f.local_rank},
                     {"group_rank", r.group_rank},
                     {"host", host_name()},
                     {"attempt", r.round},
                     {"timestamp", f.timestamp},
                     {"last_lines", tail}};
    if (f.signal) {
        j["signal"] = signal_text(f.signal);
    } else {
        j["exit_code"] = f.exit_code;
    }
    if (!f.worker_error.empty()) {
        auto w = parse_json_bounded(f.worker_error);
        j["worker_error"] = w.is_discarded() ? nlohmann::json(f.worker_error) : w;
        if (f.worker_error_truncated) {  // (its first 64 KiB, as text: cut, it is no JSON)
            j["worker_error_truncated"] = true;
            if (f.worker_error_bytes >= 0) j["worker_error_bytes"] = f.worker_error_bytes;
        }
    }
    std::string text = json_text(j, 2) + "\n";
    STRATO_RETURN_IF_ERROR(fs::atomic_write(fmt::format("{}/node_{}.error.json", attempt_dir, r.group_rank), text));
    const FailureRank mine{r.round, f.signal != 0, f.timestamp};
    // (checked, then written: two nodes failing within the same instant may still race)
    if (!error_file_keeps(attempt_dir + "/error.json", mine, start_s))
        STRATO_RETURN_IF_ERROR(fs::atomic_write(attempt_dir + "/error.json", text));
    if (error_file_keeps(log_dir + "/error.json", mine, start_s)) return false;
    STRATO_RETURN_IF_ERROR(fs::atomic_write(log_dir + "/error.json", text));
    return true;
}

}  // namespace

bool error_file_keeps(const std::string& path, const FailureRank& mine, double start_s) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    const double mtime_s = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
    if (mtime_s < start_s) return false;  // an earlier run's
    auto text = fs::read_file(path, 1 << 20);
    if (!text) return false;
    const auto j = parse_json_bounded(*text);
    if (j.is_discarded() || !j.is_object()) return false;
    const auto attempt = j.find("attempt"), timestamp = j.find("timestamp");
    if (attempt == j.end() || !attempt->is_number_integer() || timestamp == j.end() || !timestamp->is_number())
        return false;
    const int theirs = attempt->get<int>();
    if (theirs != mine.attempt) return theirs > mine.attempt;
    const bool signaled = j.contains("signal");
    if (signaled != mine.signaled) return signaled;
    return timestamp->get<double>() <= mine.timestamp;
}

int visible_gpus(int physical, const char* visible) {
    if (physical <= 0 || visible == nullptr) return std::max(0, physical);
    int n = 0;
    std::string_view rest(visible);
    while (n < physical) {
        const size_t comma = rest.find(',');
        std::string_view e = rest.substr(0, comma);
        while (!e.empty() && std::isspace(static_cast<unsigned char>(e.front()))) e.remove_prefix(1);
        while (!e.empty() && std::isspace(static_cast<unsigned char>(e.back()))) e.remove_suffix(1);
        if (!(e.starts_with("GPU-") || e.starts_with("MIG-") || parse_int(e, 0, physical - 1))) break;
        ++n;
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    return n;
}

Status parse_nnodes(const std::string& text, LaunchOptions* o) {
    const size_t colon = text.find(':');
    auto lo = parse_int(std::string_view(text).substr(0, colon), 1, 1 << 20);
    auto hi = colon == std::string::npos ? lo : parse_int(std::string_view(text).substr(colon + 1), 1, 1 << 20);
    if (!lo || !hi) return invalid_argument("--nnodes '{}': expected N or MIN:MAX (whole numbers >= 1)", text);
    if (*hi < *lo) return invalid_argument("--nnodes '{}': need 1 <= MIN <= MAX", text);
    o->min_nodes = static_cast<int>(*lo);
    o->max_nodes = static_cast<int>(*hi);
    return Status::ok();
}

Status check_timing(const LaunchOptions& o) {
    if (o.max_restarts < 0) return invalid_argument("launch: --max-restarts must be >= 0");
    // Seconds: finite and in range (a NaN or negative interval never sleeps, a NaN timeout
    // skips the grace period).
    const struct {
        const char* flag;
        double value, lo, hi;
    } seconds[] = {{"--monitor-interval", o.monitor_interval_s, 0.001, 60},
                   {"--stop-timeout", o.stop_timeout_s, 0, 86400},
                   {"--join-timeout", o.join_timeout_s, 0.1, 7 * 86400.0},
                   {"--last-call", o.last_call_s, 0, 86400}};
    for (const auto& f : seconds)
        if (!(f.value >= f.lo && f.value <= f.hi))
            return invalid_argument("launch: {} must be between {} and {} seconds, got {}", f.flag, f.lo, f.hi, f.value);
    return Status::ok();
}

Status check_options(const LaunchOptions& in) {
    LaunchOptions o = in;
    if (o.command.empty()) return invalid_argument("launch: no command to run (strato launch [OPTIONS] COMMAND [ARGS...])");
    if (o.nproc_per_node < 1) return invalid_argument("launch: --nproc-per-node must be >= 1");
    STRATO_RETURN_IF_ERROR(check_timing(o));
    if (o.master_port < 1 || o.master_port > 65535)
        return invalid_argument("launch: --master-port must be in 1..65535, got {}", o.master_port);
    if (o.master_addr.empty() || o.master_addr.find_first_of(" \t\n") != std::string::npos)
        return invalid_argument("launch: --master-addr must be a host name or address, got '{}'", o.master_addr);
    if (o.rdzv_backend != "static" && o.rdzv_backend != "c10d")
        return invalid_argument("launch: --rdzv-backend must be static or c10d, got '{}'", o.rdzv_backend);
    if (o.standalone) {
        o.min_nodes = o.max_nodes = 1;
        o.rdzv_backend = "static";
    }
    if (in.standalone && in.max_nodes > 1)  // (not silently one node of a job the user thinks has several)
        return invalid_argument("launch: --standalone runs one node, but --nnodes {} asks for {}",
                                in.min_nodes == in.max_nodes ? std::to_string(in.max_nodes)
                                                             : fmt::format("{}:{}", in.min_nodes, in.max_nodes),
                                in.max_nodes);
    const bool rendezvous = o.rdzv_backend == "c10d" && !o.standalone;
    if (rendezvous && o.rdzv_endpoint.empty())
        return invalid_argument("launch: --rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]");
    if (rendezvous) {
        STRATO_RETURN_IF_ERROR(parse_host_port(o.rdzv_endpoint, "launch: --rdzv-endpoint", 29400).status());
    }
    if (!rendezvous && o.max_nodes > 1) {
        if (o.min_nodes != o.max_nodes)
            return invalid_argument("launch: --nnodes MIN:MAX (elastic) needs --rdzv-backend c10d and --rdzv-endpoint");
        if (o.node_rank < 0 || o.node_rank >= o.max_nodes)
            return invalid_argument("launch: the static backend with --nnodes {} needs --node-rank in 0..{}", o.max_nodes,
                                    o.max_nodes - 1);
    }
    if (!rendezvous && o.node_rank >= o.max_nodes)
        return invalid_argument("launch: --node-rank {} is not below --nnodes {}", o.node_rank, o.max_nodes);
    if (o.node_rank < -1) return invalid_argument("launch: --node-rank must be >= 0, got {}", o.node_rank);
    if (static_cast<int64_t>(o.max_nodes) * o.nproc_per_node > INT32_MAX)  // (ranks are ints, as in c10d)
        return invalid_argument("launch: --nnodes {} x --nproc-per-node {} is more than {} ranks", o.max_nodes,
                                o.nproc_per_node, INT32_MAX);
    if (o.rdzv_id.size() > 128) return invalid_argument("launch: --rdzv-id is longer than 128 characters");
    const std::string id = job_id_chars(o.rdzv_id);
    if (id == "." || id == "..") return invalid_argument("launch: --rdzv-id '{}' is no name for a job", o.rdzv_id);
    return Status::ok();
}

Result<int> run_launch(const LaunchOptions& in) {
    timespec start_ts{};
    clock_gettime(CLOCK_REALTIME_COARSE, &start_ts);  // (error files older than this are an earlier run's)
    const double start_s = static_cast<double>(start_ts.tv_sec) + static_cast<double>(start_ts.tv_nsec) * 1e-9;
    LaunchOptions o = in;
    STRATO_RETURN_IF_ERROR(check_options(o));
    // The messages stderr did not take yet, at whatever return (after the workers are stopped).
    struct NotesAtExit {
        ~NotesAtExit() { note::finish(1.0); }
    } notes_at_exit;
    if (o.standalone) {
        o.min_nodes = o.max_nodes = 1;
        o.rdzv_backend = "static";
    }
    const bool rendezvous = o.rdzv_backend == "c10d" && !o.standalone;
    HostPort endpoint;
    if (rendezvous) {
        STRATO_ASSIGN_OR_RETURN(endpoint, parse_host_port(o.rdzv_endpoint, "launch: --rdzv-endpoint", 29400));
    }
    // One node: a free port on 127.0.0.1, unless --master-addr/--master-port say where (torchrun
    // uses them).
    if (!rendezvous && o.max_nodes == 1 && !o.master_given) o.standalone = true;
    const std::string id = job_id_chars(o.rdzv_id);
    if (id != o.rdzv_id) note::info("launch: --rdzv-id '{}' is used as '{}'", o.rdzv_id, id);
    o.rdzv_id = id;
    if ((o.rdzv_id == "none" || o.rdzv_id.empty()) && !rendezvous) {
        // One node: an id of its own. Several static nodes: one id on all of them (found by review:
        // each node's host and pid gave the nodes of one job different TORCHELASTIC_RUN_IDs and
        // log directories), from what they share, the master.
        o.rdzv_id = job_id_chars(o.max_nodes == 1 ? fmt::format("{}-{}", host_name(), getpid())
                                                  : fmt::format("static-{}-{}", o.master_addr, o.master_port));
    }
    if (o.rdzv_id.empty()) o.rdzv_id = "none";
    if (o.log_dir.empty()) o.log_dir = (stdfs::path("runs") / "launch" / o.rdzv_id).string();
    // The options are good: from here on SIGINT/SIGTERM ask the job to stop (exit 128 + signal,
    // workers stopped in order) instead of killing the agent, also while it waits for the
    // rendezvous and before the first worker starts.
    signals::install_stop_handlers();
    // Output piped into `head`, or a closed ssh session, must not kill the agent (and with it,
    // through PR_SET_PDEATHSIG, every worker without a checkpoint): echoing stops, logs go on.
    ::signal(SIGPIPE, SIG_IGN);
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(o.log_dir));

    std::unique_ptr<Coordinator> coord;
    bool hosting = o.node_rank <= 0;  // this node hosts the job: the rendezvous, or node 0 of a static one
    if (rendezvous) {
        RdzvSettings s;
        s.run_id = o.rdzv_id;
        s.min_nodes = o.min_nodes;
        s.max_nodes = o.max_nodes;
        s.max_restarts = o.max_restarts;
        s.join_timeout_s = o.join_timeout_s;
        s.last_call_s = o.min_nodes == o.max_nodes ? 0 : o.last_call_s;
        // The agent that can bind the endpoint hosts the rendezvous; the others find it taken.
        std::unique_ptr<RendezvousServer> server;
        auto srv = RendezvousServer::start(endpoint.host, endpoint.port, s);
        hosting = srv.is_ok();
        if (srv) server = std::move(*srv);
        auto client = RendezvousClient::connect(endpoint.host, endpoint.port, o.join_timeout_s);
        if (!client && signals::stop_requested()) return 128 + signals::stop_signal();
        if (!client) return client.status();
        // Another node hosts it -- or a process that is no rendezvous holds the port, which shows
        // only as silence later: say why this node could not host it.
        if (!srv) note::info("launch: joining the rendezvous at {}:{} (hosting it here failed: {})", endpoint.host,
                             endpoint.port, srv.status().message());
        coord = std::make_unique<RdzvCoordinator>(o, std::move(server), std::move(*client), endpoint.host);
    } else {
        coord = std::make_unique<LocalCoordinator>(o);
    }
    // A reused log directory: an earlier run's error.json files would name a failure this run did
    // not have; they are cleared before any worker of this node runs.
    remove_earlier_errors(o.log_dir, hosting, start_s);

    int last_code = 1;
    Group group(o);
    Coordinator* c = coord.get();
    const auto keepalive = [c] { c->keepalive(); };
    for (;;) {
        auto r = coord->next_round();
        if (!r) {
            if (r.status().code() == StatusCode::kCancelled && r.status().message() == "EXIT") {
                note::info("launch: the job finished while this node waited for a place in it");
                return 0;
            }
            if (r.status().code() == StatusCode::kCancelled && signals::stop_requested())
                return 128 + signals::stop_signal();
            if (r.status().code() == StatusCode::kCancelled) {
                note::error("launch: giving up: {}", r.status().message());
                return last_code;
            }
            return r.status();
        }
        if (signals::stop_requested()) return 128 + signals::stop_signal();  // asked to stop before any worker ran
        const std::string attempt_dir = (stdfs::path(o.log_dir) / fmt::format("attempt_{}", r->round)).string();
        note::info("launch: attempt {}: ranks {}..{} of {} on node {} of {}, master {}:{}", r->round, r->rank_offset,
                   r->rank_offset + o.nproc_per_node - 1, r->world_size, r->group_rank, r->group_world_size,
                   r->master_addr, r->master_port);
        STRATO_RETURN_IF_ERROR(group.start(*r, o.rdzv_id, attempt_dir));
        bool reported_done = false;
        for (;;) {
            if (signals::stop_requested()) {
                note::info("launch: stopping the workers (signal {})", signals::stop_signal());
                group.stop(keepalive);
                return 128 + signals::stop_signal();
            }
            Failure f;
            auto state = group.poll(&f);
            if (state == Group::State::kFailed) {
                note::error("launch: {} (attempt {}); stopping the other workers", f.what(), r->round);
                group.stop(keepalive);
                if (auto w = write_error_file(o.log_dir, attempt_dir, f, *r, start_s); !w)
                    note::warn("launch: cannot write the error file: {}", w.status().message());
                else if (*w)
                    note::info("launch: details in {}/error.json", o.log_dir);
                else
                    note::info("launch: details in {}/node_{}.error.json ({}/error.json names another node's failure, "
                               "which came first)",
                               attempt_dir, r->group_rank, o.log_dir);
                last_code = f.code();
                STRATO_RETURN_IF_ERROR(coord->failed(f.what()));
                break;
            }
            if (state == Group::State::kSucceeded && !reported_done) {
                STRATO_RETURN_IF_ERROR(coord->done());
                reported_done = true;
            }
            std::string message;
            auto ev = coord->poll(&message);
            if (!ev) {
                group.stop(keepalive);
                return ev.status();
            }
            if (*ev == RendezvousClient::Event::kExit) return 0;
            if (*ev == RendezvousClient::Event::kAbort) {
                group.stop(keepalive);
                note::error("launch: the rendezvous gave up: {}", message);
                return last_code;
            }
            if (*ev == RendezvousClient::Event::kRestart) {
                note::warn("launch: restarting the group: {}", message);
                group.stop(keepalive);
                break;
            }
            // Until the next check: output is read as it comes, a stop signal wakes at once.
            group.wait(now_s() + o.monitor_interval_s, true, keepalive);
        }
    }
}

}  // namespace strato::dist
