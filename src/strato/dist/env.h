#pragma once
// Where a worker process stands in a distributed job, read from the environment that launched it:
//   strato launch / torchrun — RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//                              MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT;
//   Slurm (an srun step)     — SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURM_NODEID,
//                              SLURM_NTASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE, SLURM_JOB_NODELIST
//                              (its first host is the master unless MASTER_ADDR says otherwise);
//                              without the step's variables, SLURM_NTASKS and SLURM_TASKS_PER_NODE
//                              when SLURM_PROCID > 0 (SLURM_PROCID=0 with SLURM_NTASKS > 1 alone is
//                              a batch script, which runs once: one process, with a warning);
//   Open MPI (mpirun)        — OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK.
// The first that is present wins, in that order. No variable at all: a single process.
// No libtorch: the launcher, doctor and tests use it too.

#include <functional>
#include <string>
#include <vector>

#include "strato/core/status.h"

namespace strato::dist {

struct DistEnv {
    int rank = 0, world_size = 1;
    int local_rank = 0, local_world_size = 1;
    int group_rank = 0;              // the node's rank
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;
    int restart_count = 0;
    bool agent_store = false;        // TORCHELASTIC_USE_AGENT_STORE: the store is already hosted
    std::string source = "single";   // single | strato | slurm | mpi

    bool distributed() const { return world_size > 1; }
    std::string describe() const;
};

using GetEnv = std::function<const char*(const char*)>;

/// Reads the process environment (or `get`, for tests). Malformed or inconsistent values
/// (RANK=abc, RANK >= WORLD_SIZE, a port out of range, MASTER_ADDR=node1:29500 or with blanks)
/// are errors naming the variable. MASTER_ADDR=[::1] is the IPv6 address ::1.
Result<DistEnv> read_env(const GetEnv& get = nullptr);

/// Expands a Slurm host list: "n[1-3,7],gpu-a[08-09],login" -> n1 n2 n3 n7 gpu-a08 gpu-a09 login;
/// text after a group and several groups in one name, as Slurm allows: "gpu[1-2]-ib" -> gpu1-ib
/// gpu2-ib, "rack[1-2]-n[01-02]" -> rack1-n01 rack1-n02 rack2-n01 rack2-n02 (at most 2^20 hosts).
Result<std::vector<std::string>> expand_hostlist(const std::string& list);

}  // namespace strato::dist
