#pragma once
// Cooperative stop on SIGINT/SIGTERM: the first signal sets a flag that long loops poll
// (finish the step, checkpoint, exit cleanly); a second SIGINT/SIGTERM exits at once.

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
/// For tests: clears the flag.
void reset();

}  // namespace strato::signals
