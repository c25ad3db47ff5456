#include <gtest/gtest.h>

#include "strato/train/schedule.h"

namespace strato::train {
namespace {

TEST(Schedule, Constant) {
    ScheduleConfig s;
    s.name = "constant";
    EXPECT_DOUBLE_EQ(learning_rate(s, 0.1, 0, 100, 10), 0.1);
    EXPECT_DOUBLE_EQ(learning_rate(s, 0.1, 99, 100, 10), 0.1);
}

TEST(Schedule, StepDecaysEveryStepEpochs) {
    ScheduleConfig s;
    s.name = "step";
    s.step_epochs = 2;
    s.gamma = 0.5;
    EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 19, 100, 10), 1.0);
    EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 20, 100, 10), 0.5);
    EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 45, 100, 10), 0.25);
}

TEST(Schedule, CosineWithWarmup) {
    ScheduleConfig s;
    s.name = "cosine";
    s.warmup_epochs = 1;
    s.warmup_start_factor = 0.0;
    s.min_lr = 0.0;
    EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 0, 110, 10), 0.0);
    EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 5, 110, 10), 0.5);
    EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 10, 110, 10), 1.0);   // warmup done, cosine starts
    EXPECT_NEAR(learning_rate(s, 1.0, 60, 110, 10), 0.5, 1e-12);  // half way
    EXPECT_NEAR(learning_rate(s, 1.0, 110, 110, 10), 0.0, 1e-12);
}

TEST(Schedule, OneCycleRisesThenFalls) {
    ScheduleConfig s;
    s.name = "onecycle";
    s.pct_start = 0.3;
    s.div_factor = 25;
    s.final_div_factor = 1e4;
    EXPECT_NEAR(learning_rate(s, 1.0, 0, 100, 10), 0.04, 1e-12);
    EXPECT_NEAR(learning_rate(s, 1.0, 30, 100, 10), 1.0, 1e-12);
    EXPECT_LT(learning_rate(s, 1.0, 99, 100, 10), 0.001);
    EXPECT_GT(learning_rate(s, 1.0, 15, 100, 10), learning_rate(s, 1.0, 5, 100, 10));
}

}  // namespace
}  // namespace strato::train
