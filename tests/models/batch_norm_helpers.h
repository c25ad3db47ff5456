#pragma once
// Shared by the model and compression tests: BatchNorm layers with non-trivial statistics.

#include <torch/torch.h>

namespace strato::test_support {

/// Random BatchNorm statistics and affine parameters, so folding them is really exercised.
inline void randomize_batch_norm(torch::nn::Module& net) {
    torch::NoGradGuard no_grad;
    for (auto& m : net.modules(/*include_self=*/false)) {
        if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
            bn->weight.uniform_(0.5, 1.5);
            bn->bias.uniform_(-0.2, 0.2);
            bn->running_mean.uniform_(-0.2, 0.2);
            bn->running_var.uniform_(0.5, 2.0);
        }
    }
}

}  // namespace strato::test_support
