#pragma once
// The node agent behind `strato launch` (torchrun's elastic agent, for any command): starts
// nproc_per_node worker processes with the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), watches them, and when
// one fails stops the others (SIGTERM, SIGKILL after a grace period), writes an error file naming
// the first failing rank, its exit code or signal and its last output lines, and restarts the
// whole group — on every node, through the rendezvous — with TORCHELASTIC_RESTART_COUNT + 1, up
// to max_restarts. Workers are meant to resume from their latest checkpoint.
//
// One node (--standalone, or --nnodes 1): the agent decides alone. Several nodes: --rdzv-backend
// c10d with --rdzv-endpoint HOST:PORT (strato's own rendezvous, see rendezvous.h; the agent that
// can bind the endpoint hosts it), or static (fixed --nnodes N and --node-rank, --master-addr and
// --master-port; no coordination between nodes, as torchrun's static backend).

#include <string>
#include <vector>

#include "strato/core/status.h"

namespace strato::dist {

struct LaunchOptions {
    int nproc_per_node = 1;
    int min_nodes = 1, max_nodes = 1;
    int node_rank = -1;                 // static backend (and a preference under c10d)
    std::string rdzv_backend = "static";  // static | c10d
    std::string rdzv_endpoint;          // HOST[:PORT] (default port 29400)
    std::string rdzv_id = "none";
    double join_timeout_s = 600, last_call_s = 30;
    bool standalone = false;
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;            // static; standalone picks a free port
    bool master_given = false;          // --master-addr/--master-port given: used on one node too (as torchrun)
    bool no_python = false;             // run a .py command as given (its #! line), not with /usr/bin/python3
    int max_restarts = 0;
    double monitor_interval_s = 0.1;
    double stop_timeout_s = 30;         // SIGTERM -> SIGKILL
    std::string log_dir;                // per-attempt worker logs and error.json (default runs/launch/<id>)
    bool tee = true;                    // also print worker lines, prefixed "[rank]:"
    std::vector<std::string> command;   // what each worker runs
};

/// Parses "N" or "MIN:MAX" (--nnodes).
Status parse_nnodes(const std::string& text, LaunchOptions* o);

/// What torchrun's `--nproc-per-node gpu` counts, torch.cuda.device_count(), without CUDA: of
/// `physical` GPUs (NVML's count), those CUDA_VISIBLE_DEVICES (`visible`; null when unset) shows a
/// process — its entries up to the first that names no device, as CUDA reads it: "" or "-1" hides
/// every GPU, "0,1" shows 2, "1,7" of 2 GPUs shows 1, "GPU-<uuid>" and "MIG-<uuid>" entries count.
int visible_gpus(int physical, const char* visible);

/// Checks the options given in seconds (--monitor-interval, --stop-timeout, --join-timeout,
/// --last-call: finite and in range) and --max-restarts >= 0.
Status check_timing(const LaunchOptions& o);

/// Checks every option before anything runs (the command, --nproc-per-node, the seconds, ports,
/// --master-addr, --rdzv-backend and --rdzv-endpoint, --nnodes with the backend, --node-rank,
/// --rdzv-id): a kInvalidArgument status naming the flag (a usage error). run_launch calls it.
Status check_options(const LaunchOptions& o);

/// What decides between two failures for error.json.
struct FailureRank {
    int attempt = 0;
    bool signaled = false;  // killed by a signal (peers of a killed rank exit 1 on the broken collective)
    double timestamp = 0;   // Unix seconds, when the agent saw the worker end
};
/// True when the error file at `path`, written by a node of this run (modified at or after
/// `start_s`, Unix seconds), names a failure that `mine` must not replace. The nodes of a job may
/// share a log directory, and one rank's death makes its peers on other nodes fail a moment
/// later: error.json keeps the root cause, as torchrun's agent reports the first failure — the
/// later attempt's, then a worker killed by a signal before one that exited non-zero, then the
/// earlier. A missing, stale or unreadable file keeps nothing.
bool error_file_keeps(const std::string& path, const FailureRank& mine, double start_s);

/// Runs the job to the end: 0 when every worker of the last round exited 0, else non-zero
/// (the first failure's exit code, 128+signal, 130 when interrupted). Errors before any worker
/// started (bad options, unreachable rendezvous) come back as a Status.
Result<int> run_launch(const LaunchOptions& options);

}  // namespace strato::dist
