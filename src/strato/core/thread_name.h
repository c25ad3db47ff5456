#pragma once
// Names the calling thread: what `top -H`, `ps -L`, perf, gdb and /proc/PID/task/*/comm show.
// Linux keeps 15 characters; longer names are cut.

#include <pthread.h>

#include <string>
#include <string_view>

namespace strato {

inline void set_thread_name(std::string_view name) {
    const std::string n(name.substr(0, 15));
    pthread_setname_np(pthread_self(), n.c_str());
}

}  // namespace strato
