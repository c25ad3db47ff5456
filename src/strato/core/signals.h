#pragma once
// Cooperative stop on SIGINT/SIGTERM: the first signal sets a flag that long loops poll
// (finish the step, checkpoint, exit cleanly); a second SIGINT/SIGTERM exits at once, unless a
// SecondSignalGuard is held (then only a third does). A second signal from another sender within
// a second of the first is the same stop delivered twice (Slurm signals every process of a step
// and the parent passes it on) and is ignored.

#include <string_view>

#include "strato/core/status.h"

namespace strato::signals {

void install_stop_handlers();
bool stop_requested();
/// The signal number that asked to stop, or 0.
int stop_signal();
/// A process group that a second SIGINT/SIGTERM kills (SIGKILL) before the process exits, as
/// strato launch's workers with their children (up to 4096 groups at once).
void track_process_group(int pgid);
void untrack_process_group(int pgid);
/// True when no process has this id (kill(pid, 0) fails with ESRCH; one that exists but belongs
/// to another user is there). Ids below 1 are no process.
bool process_gone(long pid);
/// After a stop signal: kCancelled "interrupted by signal N <what>", the one wording every
/// command stops with (`what` says where and what was kept, e.g. "after pruning; no package
/// written"); before one: ok.
Status stopped(std::string_view what);
/// Stop signals received so far (0 before the first).
int signal_count();
/// For tests: clears the flag and the count.
void reset();

/// While one is alive, a second SIGINT/SIGTERM does not end the process at once: it is only
/// counted (signal_count() == 2), for a command that stops promptly on the first anyway and must
/// not lose its results to an impatient second Ctrl-C (strato loadtest writing what it measured);
/// the holder may take the count as "hurry" and skip slow optional steps. A third signal ends the
/// process as a second does otherwise. Scopes nest; other commands are unaffected.
///
///     signals::SecondSignalGuard hold;  // measure, then print and write the outputs
class SecondSignalGuard {
public:
    SecondSignalGuard();
    ~SecondSignalGuard();
    SecondSignalGuard(const SecondSignalGuard&) = delete;
    SecondSignalGuard& operator=(const SecondSignalGuard&) = delete;
};

}  // namespace strato::signals
