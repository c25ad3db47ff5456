#include "strato/core/signals.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <unistd.h>

#include <fmt/format.h>

namespace strato::signals {
namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_count = 0;
// SecondSignalGuards alive: a second signal is only counted.
std::atomic<int> g_guards{0};
static_assert(std::atomic<int>::is_always_lock_free, "read in a signal handler");

// Process groups (strato launch's workers) that go down with the process on a second signal.
constexpr int kMaxGroups = 4096;
std::atomic<int> g_groups[kMaxGroups];

// Who sent the first signal (0: the kernel, e.g. a terminal's Ctrl-C) and when (CLOCK_MONOTONIC, ns).
volatile std::sig_atomic_t g_first_sender = 0;
std::atomic<int64_t> g_first_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free, "read in a signal handler");
constexpr int64_t kEchoNs = 1'000'000'000;

int64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);  // (async-signal-safe)
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int sender(const siginfo_t* info) { return info && (info->si_code == SI_USER || info->si_code == SI_QUEUE) ? info->si_pid : 0; }

extern "C" void on_stop_signal(int sig, siginfo_t* info, void*) {
    if (g_signal != 0) {
        // One stop delivered twice: Slurm signals every process of a job step, and the process's
        // parent (strato launch, the tune executor) passes the stop on too; a terminal's Ctrl-C
        // reaches the whole foreground group. A second signal from another sender within a
        // second is that echo, not a user insisting: ignored, so the job still checkpoints.
        if (sender(info) != g_first_sender && monotonic_ns() - g_first_ns.load(std::memory_order_relaxed) < kEchoNs) return;
        if (g_count < 1000) g_count = g_count + 1;
        // Held by a SecondSignalGuard: the second signal only asks to hurry; a third insists.
        if (g_guards.load(std::memory_order_relaxed) > 0 && g_count < 3) return;
        // A second signal: the user insists. Exit without unwinding (async-signal-safe), taking
        // the tracked process groups along (kill is async-signal-safe; a worker's own children
        // would otherwise outlive it).
        for (auto& g : g_groups)
            if (const int pgid = g.load(std::memory_order_relaxed); pgid > 0) ::kill(-pgid, SIGKILL);
        ::_exit(128 + sig);
    }
    g_first_sender = sender(info);
    g_first_ns.store(monotonic_ns(), std::memory_order_relaxed);
    g_signal = sig;
    g_count = 1;
}

}  // namespace

void install_stop_handlers() {
    struct sigaction sa {};
    sa.sa_sigaction = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    // A closed terminal (SIGHUP) stops a job as SIGTERM does (checkpoint, drain, stop the children
    // it started) instead of killing it on the spot; under nohup (SIGHUP ignored) it stays ignored.
    struct sigaction hup {};
    if (sigaction(SIGHUP, nullptr, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, nullptr);
}

void track_process_group(int pgid) {
    for (auto& g : g_groups) {
        int empty = 0;
        if (g.compare_exchange_strong(empty, pgid)) return;
    }
}

void untrack_process_group(int pgid) {
    for (auto& g : g_groups) {
        int mine = pgid;
        if (g.compare_exchange_strong(mine, 0)) return;
    }
}

bool process_gone(long pid) {
    return pid < 1 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }
Status stopped(std::string_view what) {
    if (!stop_requested()) return Status::ok();
    return Status(StatusCode::kCancelled, fmt::format("interrupted by signal {} {}", stop_signal(), what));
}
int signal_count() { return g_count; }
void reset() {
    g_signal = 0;
    g_count = 0;
}

SecondSignalGuard::SecondSignalGuard() { g_guards.fetch_add(1); }
SecondSignalGuard::~SecondSignalGuard() { g_guards.fetch_sub(1); }

}  // namespace strato::signals
