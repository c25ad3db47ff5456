#pragma once
// Data-parallel gradient synchronisation, as PyTorch's DistributedDataParallel does it, over a
// c10d Gloo process group (CPU; NCCL belongs to the CUDA build):
//   - as the ranks join, each compares its world size and its parameter and buffer shapes with
//     rank 0's (as torch's DDP does); a rank that differs is refused, and every rank stops at once
//     saying why;
//   - parameters and buffers are broadcast from rank 0 at the start, so every rank starts equal;
//   - gradients are packed into buckets in reverse parameter order (a small first bucket, then
//     about 25 MB each) from autograd hooks as backward produces them, and each full bucket is
//     all-reduced asynchronously, in bucket order on every rank, while backward goes on;
//   - micro-steps of gradient accumulation do not synchronise (no_sync): the gradients add up
//     locally and the next synchronised step reduces the sum;
//   - finish() waits for the reductions, averages, and writes the gradients back.
// Parameters that got no gradient in a step are reduced too (with zeros), at the end.
// A small flag rides along in the last bucket, so ranks agree on stopping without an extra
// collective. Collectives fail with an error after `timeout_s` (a dead peer never hangs a rank).
//
// Our own implementation rather than c10d::Reducer, whose constructor changes between libtorch
// versions.

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "strato/core/status.h"
#include "strato/dist/env.h"

namespace strato::dist {

struct DdpOptions {
    double timeout_s = 300;
    int64_t bucket_bytes = 25ll << 20, first_bucket_bytes = 1ll << 20;
    /// "auto": NCCL when the parameters are CUDA tensors and this build has NCCL
    /// (STRATO_WITH_CUDA), else Gloo; "gloo"; "nccl" (an error where NCCL is not built in).
    std::string backend = "auto";
    /// "key=value" words that must agree over the ranks (what decides each rank's steps and
    /// collectives: batches per epoch, epochs, grad_accum, ...). Ranks whose value of a key differs
    /// from rank 0's are refused at join, naming the key: the first collective that no longer
    /// matched crashed or hung.
    std::string settings;
};

struct DdpStats {
    int64_t steps = 0;
    double wait_s = 0;       // time finish() blocked on reductions still running
    double comm_s = 0;       // per step, from the first bucket's launch to the last one's completion
    int64_t buckets = 0;
};

class DataParallel {
public:
    /// Joins the process group described by `env` (rank 0 hosts the TCP store at
    /// MASTER_ADDR:MASTER_PORT unless the agent already does), and hooks `params`.
    static Result<std::unique_ptr<DataParallel>> create(const DistEnv& env, std::vector<torch::Tensor> params,
                                                        std::vector<torch::Tensor> buffers, const DdpOptions& options);
    ~DataParallel();

    /// Makes every rank's parameters and buffers equal to rank 0's.
    Status broadcast_state();
    /// Makes every rank's buffers (BatchNorm running statistics) equal to rank 0's: what DDP's
    /// broadcast_buffers amounts to; called before evaluating.
    Status broadcast_buffers();
    /// Before backward: `sync` false accumulates locally; `flag` is summed over ranks with the gradients.
    void prepare(bool sync, double flag = 0);
    /// After a synchronised backward: waits, averages, writes param.grad; returns the summed flag.
    Result<double> finish();
    /// Sums a few numbers over the ranks (metrics, decisions).
    Result<std::vector<double>> sum(const std::vector<double>& values);
    Status barrier();

    int rank() const { return rank_; }
    int world() const { return world_; }
    const DdpStats& stats() const { return stats_; }
    int64_t bucket_count() const;
    /// "gloo" or "nccl".
    const std::string& backend() const;

    struct Impl;

private:
    DataParallel() = default;
    std::unique_ptr<Impl> impl_;
    int rank_ = 0, world_ = 1;
    DdpStats stats_;
};

}  // namespace strato::dist
