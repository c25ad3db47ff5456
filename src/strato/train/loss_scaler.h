#pragma once
// Dynamic loss scaling for fp16 mixed precision — what Python's torch.amp.GradScaler does,
// which libtorch's C++ API lacks. Device-agnostic: the same code runs on CPU tensors (where it is
// unit-tested with forced overflows) and CUDA tensors.
//
//   scaler.scale(loss).backward();          // gradients are `scale` times too large
//   bool ok = scaler.unscale(params);       // divides them back; false when any is inf/NaN
//   if (ok) optimizer.step();               // a step with overflowed gradients is skipped
//   scaler.update(!ok);                     // inf: scale x backoff; growth_interval clean steps: x growth
//
// Under data parallelism the gradients are already all-reduced when unscale() looks at them,
// so an overflow on any rank is seen by every rank and all skip the same step.

#include <torch/torch.h>

#include <vector>

namespace strato::train {

struct LossScalerOptions {
    double init_scale = 65536.0;  // 2^16, as GradScaler
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
    double min_scale = 1.0;       // never below (a model that overflows at scale 1 is broken)
};

class DynamicLossScaler {
public:
    explicit DynamicLossScaler(LossScalerOptions o = {}) : o_(o), scale_(o.init_scale) {}

    torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
    /// Divides every defined gradient by the scale, in place; returns false when any gradient
    /// holds an inf or a NaN (one host synchronisation).
    bool unscale(const std::vector<torch::Tensor>& params);
    /// After a step: back off on overflow, grow after growth_interval clean steps.
    void update(bool overflowed);

    double current_scale() const { return scale_; }
    int64_t clean_steps() const { return clean_; }
    int64_t skipped_steps() const { return skipped_; }
    /// For checkpoints: scale and the clean-step counter.
    void restore(double scale, int64_t clean) { scale_ = scale, clean_ = clean; }

private:
    LossScalerOptions o_;
    double scale_;
    int64_t clean_ = 0, skipped_ = 0;
};

}  // namespace strato::train
