#pragma once
// The same distributed job for a cluster engine (`strato launch --emit slurm|kubernetes ...`):
//   slurm      — an sbatch script: one `strato launch` per node through srun (one task per node),
//                the rendezvous on the first node of the allocation (its NodeAddr from scontrol),
//                the job id as the rendezvous id;
//   kubernetes — a Kubeflow PyTorchJob with an elasticPolicy (c10d rendezvous, MIN..MAX worker
//                pods, max restarts); the operator injects PET_NNODES, PET_RDZV_ENDPOINT, ...,
//                which `strato launch` reads as torchrun does.

#include <string>

#include "strato/core/status.h"
#include "strato/dist/agent.h"

namespace strato::dist {

struct EmitOptions {
    LaunchOptions launch;          // nodes, processes per node, restarts, command
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
