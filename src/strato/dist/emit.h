#pragma once
// The same distributed job for a cluster engine (`strato launch --emit slurm|kubernetes ...`):
//   slurm      — an sbatch script: one `strato launch` per node through srun (one task per node),
//                the rendezvous on the first node of the allocation (its NodeAddr from scontrol),
//                the job id as the rendezvous id;
//   kubernetes — a Kubeflow PyTorchJob with an elasticPolicy (c10d rendezvous, MIN..MAX worker
//                pods, max restarts); the operator injects PET_NNODES, PET_RDZV_ENDPOINT, ...,
//                which `strato launch` reads as torchrun does.
// Both pass on the launcher flags that were changed from their defaults (--stop-timeout exactly as
// given, --join-timeout, --last-call, --monitor-interval, --quiet-workers, --rdzv-id, --log-dir,
// --no-python), and --nproc-per-node gpu|cpu|auto as the word, which each node evaluates. Values that
// land in #SBATCH lines or Kubernetes names (job name, partition, time, image) must be one word.

#include <string>

#include "strato/core/status.h"
#include "strato/dist/agent.h"

namespace strato::dist {

struct EmitOptions {
    LaunchOptions launch;          // nodes, processes per node, restarts, command
    std::string nproc_per_node;    // as given, when a word (gpu, cpu, auto); empty: launch.nproc_per_node
    std::string job_name = "strato-job";
    std::string strato;            // the strato executable on the nodes / in the image (empty: "strato")
    std::string image = "strato:latest";
    std::string partition, time;
    int gpus_per_node = 0, cpus_per_node = 0;
    int rdzv_port = 29400;
};

Result<std::string> emit_slurm(const EmitOptions& o);
Result<std::string> emit_pytorchjob(const EmitOptions& o);

}  // namespace strato::dist
