#include "strato/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace strato::train {

double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps,
                     int64_t steps_per_epoch) {
    const double t = static_cast<double>(step);
    const double total = static_cast<double>(std::max<int64_t>(1, total_steps));
    const double spe = static_cast<double>(std::max<int64_t>(1, steps_per_epoch));
    if (s.name == "onecycle") {  // Smith & Topin 2019 (super-convergence): cosine up to base_lr, then down
        const double up = std::max(1.0, s.pct_start * total);
        const double lr0 = base_lr / s.div_factor, lr_end = lr0 / s.final_div_factor;
        auto cos_interp = [](double a, double b, double p) { return b + (a - b) * 0.5 * (1 + std::cos(std::numbers::pi * p)); };
        if (t < up) return cos_interp(lr0, base_lr, t / up);
        return cos_interp(base_lr, lr_end, std::min(1.0, (t - up) / std::max(1.0, total - up)));
    }
    const double warmup = s.warmup_epochs * spe;
    if (warmup > 0 && t < warmup) {
        const double f = s.warmup_start_factor + (1.0 - s.warmup_start_factor) * (t / warmup);
        return base_lr * f;
    }
    if (s.name == "step") {
        const double k = std::floor(t / (s.step_epochs * spe));
        return base_lr * std::pow(s.gamma, k);
    }
    if (s.name == "cosine") {
        const double p = std::clamp((t - warmup) / std::max(1.0, total - warmup), 0.0, 1.0);
        return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * p));
    }
    return base_lr;  // constant
}

}  // namespace strato::train
