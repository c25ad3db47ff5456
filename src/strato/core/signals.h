#pragma once
// Cooperative stop on SIGINT/SIGTERM: the first signal sets a flag that long loops poll
// (finish the step, checkpoint, exit cleanly); a second SIGINT/SIGTERM exits at once.

namespace strato::signals {

void install_stop_handlers();
bool stop_requested();
/// The signal number that asked to stop, or 0.
int stop_signal();
/// For tests: clears the flag.
void reset();

}  // namespace strato::signals
