#include "strato/train/cuda_graph.h"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

namespace strato::train {

struct GraphedStep::Impl {
    at::cuda::CUDAGraph graph;
    torch::Tensor x, y;          // static inputs
    torch::Tensor loss, logits;  // static outputs
};

GraphedStep::GraphedStep() : impl_(std::make_unique<Impl>()) {}
GraphedStep::~GraphedStep() = default;

Result<std::unique_ptr<GraphedStep>> GraphedStep::capture(const StepFn& fn, const torch::Tensor& x,
                                                          const torch::Tensor& y, const std::vector<torch::Tensor>& params,
                                                          const std::vector<torch::Tensor>& buffers, int warmup) {
    if (!x.is_cuda() || !y.is_cuda())
        return invalid_argument("CUDA graph capture: the batch is on {}, not a CUDA device", x.device().str());
    std::unique_ptr<GraphedStep> g(new GraphedStep());
    auto& im = *g->impl_;
    const bool cache = at::autocast::is_autocast_cache_enabled();
    try {
        const c10::DeviceIndex dev = x.device().index();
        c10::cuda::CUDAGuard device_guard(dev);
        im.x = x.clone();  // keeps the memory format (channels-last stays channels-last)
        im.y = y.clone();
        std::vector<torch::Tensor> saved;
        {
            torch::NoGradGuard ng;
            for (const auto& b : buffers) saved.push_back(b.clone());
        }
        // Autocast's weight cache would keep casts made during capture alive across replays.
        at::autocast::set_autocast_cache_enabled(false);
        auto current = c10::cuda::getCurrentCUDAStream(dev);
        auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, dev);
        at::cuda::CUDAEvent ready;
        ready.record(current);
        ready.block(side);
        {
            c10::cuda::CUDAStreamGuard stream_guard(side);
            for (int i = 0; i < warmup; ++i) {
                for (const auto& p : params) p.mutable_grad() = torch::Tensor();
                fn(im.x, im.y);
            }
            for (const auto& p : params) p.mutable_grad() = torch::Tensor();
            im.graph.capture_begin();
            auto out = fn(im.x, im.y);
            im.graph.capture_end();
            im.loss = out.first;
            im.logits = out.second;
        }
        at::cuda::CUDAEvent done;
        done.record(side);
        done.block(current);
        torch::NoGradGuard ng;
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(saved[i]);
    } catch (const std::exception& e) {
        at::autocast::set_autocast_cache_enabled(cache);
        const std::string what = e.what();
        return Status(StatusCode::kInternal,
                      fmt::format("capturing the training step as a CUDA graph failed: {}\nhint: set train.cuda_graph = "
                                  "false (a model whose step synchronises with the host cannot be captured)",
                                  what.substr(0, what.find('\n'))));
    }
    at::autocast::set_autocast_cache_enabled(cache);
    return g;
}

bool GraphedStep::fits(const torch::Tensor& x, const torch::Tensor& y) const {
    return x.sizes() == impl_->x.sizes() && y.sizes() == impl_->y.sizes() && x.scalar_type() == impl_->x.scalar_type() &&
           x.device() == impl_->x.device();
}

std::pair<torch::Tensor, torch::Tensor> GraphedStep::replay(const torch::Tensor& x, const torch::Tensor& y) {
    impl_->x.copy_(x, /*non_blocking=*/true);
    impl_->y.copy_(y, /*non_blocking=*/true);
    impl_->graph.replay();
    return {impl_->loss, impl_->logits};
}

struct CopyStream::Impl {
    torch::Device device;
    c10::cuda::CUDAStream stream;
};

CopyStream::CopyStream(const torch::Device& device)
    : impl_(std::make_unique<Impl>(Impl{device, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())})) {}
CopyStream::~CopyStream() = default;

torch::Tensor CopyStream::to_device(const torch::Tensor& host) {
    const c10::DeviceIndex dev = impl_->device.index();
    c10::cuda::CUDAGuard device_guard(dev);
    auto current = c10::cuda::getCurrentCUDAStream(dev);
    torch::Tensor out;
    {
        c10::cuda::CUDAStreamGuard stream_guard(impl_->stream);
        out = host.to(impl_->device, /*non_blocking=*/true);
    }
    at::cuda::CUDAEvent copied;
    copied.record(impl_->stream);
    copied.block(current);
    out.record_stream(current);
    return out;
}

}  // namespace strato::train
