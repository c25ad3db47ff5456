#include "strato/train/loss_scaler.h"

#include <algorithm>

namespace strato::train {

bool DynamicLossScaler::unscale(const std::vector<torch::Tensor>& params) {
    torch::NoGradGuard ng;
    std::vector<torch::Tensor> grads;
    for (const auto& p : params)
        if (p.grad().defined()) grads.push_back(p.grad());
    if (!grads.empty() && grads.front().is_cuda()) {
        // On a GPU, GradScaler's fused kernel: one launch checks and unscales all of them.
        const auto opts = grads.front().options().dtype(torch::kFloat);
        auto found_inf = torch::zeros({1}, opts);
        auto inv = torch::full({1}, static_cast<float>(1.0 / scale_), opts);
        at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
        return found_inf.item<float>() == 0.0f;
    }
    torch::Tensor bad;  // accumulated on the gradients' device: no synchronisation per tensor
    const double inv = 1.0 / scale_;
    for (const auto& g : grads) {
        auto nonfinite = torch::logical_not(torch::isfinite(g)).any();
        bad = bad.defined() ? torch::logical_or(bad, nonfinite) : nonfinite;
        g.mul_(inv);
    }
    return !bad.defined() || !bad.item<bool>();
}

void DynamicLossScaler::update(bool overflowed) {
    if (overflowed) {
        scale_ = std::max(o_.min_scale, scale_ * o_.backoff_factor);
        clean_ = 0;
        ++skipped_;
        return;
    }
    if (++clean_ >= o_.growth_interval) {
        scale_ *= o_.growth_factor;
        clean_ = 0;
    }
}

}  // namespace strato::train
