#pragma once
// A child cgroup that limits one process tree's memory and CPU time, made under the cgroup this
// process already lives in (so it nests inside whatever container or Slurm step runs us).
//
//   cgroup v2 (unified, /sys/fs/cgroup/cgroup.controllers): memory.max, cpu.max; needs the
//     memory and cpu controllers enabled for children of our cgroup (a delegated subtree).
//   cgroup v1 (hybrid layouts, e.g. containers without systemd): memory.limit_in_bytes in the
//     memory hierarchy, cpu.cfs_quota_us / cpu.cfs_period_us in the cpu hierarchy.
//
// Where neither is writable, create() fails with a message saying why, and the caller falls back
// to rlimits and thread counts. The process joins with join_self() between fork() and exec():
// it only calls open/write/close on paths prepared beforehand, so it is safe there.

#include <string>
#include <vector>

#include "strato/core/status.h"

namespace strato::cgroup {

struct Limits {
    double memory_bytes = 0;  // 0: no memory limit
    double cpus = 0;          // CPU time in cores (1.5 = one and a half cores); 0: no CPU limit
};

/// The CPUs this process may use: those of its affinity mask (taskset, Slurm, a container's
/// cpuset), at most the whole cores of its cgroup's CPU quota (cgroup v2 cpu.max up the tree, v1
/// cfs_quota_us), at least 1. std::thread::hardware_concurrency() counts every online CPU.
int usable_cpus();

/// The memory this process's cgroup leaves it: at the tightest level from its group up to the
/// root (v2 memory.max, v1 memory.limit_in_bytes), the limit and the limit minus the usage plus
/// the reclaimable file cache. /proc/meminfo shows the host's memory, and a container or Slurm
/// step with a 4 GiB limit is OOM-killed long before that runs out. -1 for both: no limit.
struct MemoryRoom {
    double limit_bytes = -1;
    double room_bytes = -1;
};
MemoryRoom memory_room();

class Group {
public:
    /// Makes the cgroup `name` (one path component) under ours and writes the limits.
    static Result<Group> create(const std::string& name, const Limits& limits);
    /// Creates nothing: reports whether create() would work here, and if not why.
    static Status available();

    Group() = default;
    Group(Group&& o) noexcept { *this = std::move(o); }
    Group& operator=(Group&& o) noexcept;
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    ~Group();

    /// Moves the calling process into the group. Async-signal-safe (for a child after fork).
    bool join_self() const;
    /// Times the memory limit killed a process of the group (the kernel's oom_kill counter).
    int oom_kills() const;
    /// "cgroup v1: memory 2.0 GiB, cpu 1.00 core(s)"
    const std::string& describe() const { return describe_; }
    bool valid() const { return !dirs_.empty(); }
    /// Removes the group (its processes must have exited); also done by the destructor.
    void remove();

private:
    std::vector<std::string> dirs_;   // one per hierarchy (v2: one)
    std::vector<std::string> procs_;  // dirs_[i] + "/cgroup.procs"
    std::string events_;              // the file with oom_kill
    std::string describe_;
};

}  // namespace strato::cgroup
