#pragma once
// CUDA-graph capture of a training step's forward and backward (train.cuda_graph = true), the
// whole-network capture that torch.cuda.graphs documents: warm-up runs on a side stream, one
// capture into the graph's own memory pool, then every step copies its batch into the static
// inputs and replays. The optimizer step stays outside the graph. Shapes must not change: a batch
// of another size runs eagerly. Built with STRATO_WITH_CUDA only (src/strato/train/CMakeLists.txt).

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "strato/core/status.h"

namespace strato::train {

/// Forward, loss and backward on (x, y); returns {loss, logits}.
using StepFn = std::function<std::pair<torch::Tensor, torch::Tensor>(const torch::Tensor& x, const torch::Tensor& y)>;

class GraphedStep {
public:
    /// Captures `fn` for CUDA inputs shaped as `x` and `y`. The gradients of `params` are made
    /// inside the capture and stay at the same addresses: replays overwrite them (do not set them
    /// to none afterwards; zero them in place before an eager step). `buffers` (BatchNorm
    /// statistics) are put back after the warm-up runs, so the model is as before the call.
    static Result<std::unique_ptr<GraphedStep>> capture(const StepFn& fn, const torch::Tensor& x, const torch::Tensor& y,
                                                        const std::vector<torch::Tensor>& params,
                                                        const std::vector<torch::Tensor>& buffers, int warmup = 3);
    ~GraphedStep();
    GraphedStep(const GraphedStep&) = delete;
    GraphedStep& operator=(const GraphedStep&) = delete;

    /// Whether a batch of this shape can be replayed.
    bool fits(const torch::Tensor& x, const torch::Tensor& y) const;
    /// Copies the batch into the static inputs and replays on the current stream. The returned
    /// {loss, logits} are the graph's static outputs, overwritten by the next replay.
    std::pair<torch::Tensor, torch::Tensor> replay(const torch::Tensor& x, const torch::Tensor& y);

private:
    GraphedStep();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Host-to-device copies on a CUDA stream of their own: a batch's copy runs on the copy engine
/// while the previous step's kernels run, instead of queueing behind them on the compute stream.
/// The compute stream waits for the copy (an event), and the copy's memory is marked as used by
/// it, so the caching allocator does not hand it out too early.
class CopyStream {
public:
    explicit CopyStream(const torch::Device& device);
    ~CopyStream();
    CopyStream(const CopyStream&) = delete;
    CopyStream& operator=(const CopyStream&) = delete;
    /// `host` (pinned, for an asynchronous copy) on the device, ready for work queued after this call.
    torch::Tensor to_device(const torch::Tensor& host);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace strato::train
