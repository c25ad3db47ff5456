#pragma once
// Learning-rate schedules as pure functions of the optimizer step, so resuming needs no state.

#include <cstdint>

#include "strato/train/train_config.h"

namespace strato::train {

/// The learning rate for optimizer step `step` (0-based) of `total_steps`, with
/// `steps_per_epoch` steps in an epoch (epoch-valued keys are converted with it).
double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps,
                     int64_t steps_per_epoch);

}  // namespace strato::train
