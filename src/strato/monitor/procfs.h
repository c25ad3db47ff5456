#pragma once
// Host and process statistics from procfs: CPU utilisation (from /proc/stat deltas), memory
// (/proc/meminfo), load, disk bytes per device (/proc/diskstats), network bytes per interface
// (/proc/net/dev; whole disks only, so sums count each byte once), and per-process CPU time, resident memory and threads (/proc/PID/stat,
// /proc/PID/statm). Counters are exported as totals (Prometheus computes rates); the first sample
// of CPU utilisation is over the time since boot.
//
// Not thread-safe: one sampler per sampling thread.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "strato/monitor/snapshot.h"

namespace strato::monitor {

struct ProcOptions {
    std::string root = "/proc";
    std::string sys_root = "/sys";  // /sys/block tells whole disks from partitions
    std::vector<pid_t> pids;  // processes to watch besides strato itself
};

class ProcSampler {
public:
    explicit ProcSampler(ProcOptions options = {});
    /// Appends host and process metrics to `out`. Unreadable files become notes, never errors.
    void sample(Snapshot& out);

private:
    struct CpuTimes {
        uint64_t busy = 0, total = 0;
    };
    ProcOptions options_;
    CpuTimes last_cpu_;
    double last_util_ = 0;  // repeated when no CPU time passed since the last sample
    std::map<pid_t, std::string> start_times_;  // each watched process's start time, first seen
};

}  // namespace strato::monitor
