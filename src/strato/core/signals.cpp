#include "strato/core/signals.h"

#include <csignal>
#include <cstdlib>
#include <unistd.h>

namespace strato::signals {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
    if (g_signal != 0) {
        // A second signal: the user insists. Exit without unwinding (async-signal-safe).
        ::_exit(128 + sig);
    }
    g_signal = sig;
}

}  // namespace

void install_stop_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }
void reset() { g_signal = 0; }

}  // namespace strato::signals
