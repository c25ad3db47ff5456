// The dynamic loss scaler on CPU tensors with forced overflows, and the version-independent
// autocast guard.

#include "strato/train/loss_scaler.h"

#include <gtest/gtest.h>

#include <limits>

#include "strato/models/torch_compat.h"
#include "strato/train/trainer.h"

namespace strato::train {
namespace {

std::vector<torch::Tensor> params_with_grads(std::vector<float> grads) {
    std::vector<torch::Tensor> ps;
    for (float g : grads) {
        auto p = torch::zeros({3}, torch::requires_grad());
        p.mutable_grad() = torch::full({3}, g);
        ps.push_back(p);
    }
    return ps;
}

TEST(LossScaler, ScalesAndUnscales) {
    DynamicLossScaler s;
    EXPECT_DOUBLE_EQ(s.scale(torch::tensor(2.0f)).item<double>(), 2.0 * 65536);
    // A real backward through the scaled loss, then unscale: the true gradient comes back.
    auto w = torch::tensor({1.5f, -2.0f}, torch::requires_grad());
    auto loss = (w * w).sum();
    s.scale(loss).backward();
    ASSERT_TRUE(s.unscale({w}));
    EXPECT_TRUE(torch::allclose(w.grad(), torch::tensor({3.0f, -4.0f})));
}

TEST(LossScaler, OverflowSkipsTheStepAndBacksOff) {
    LossScalerOptions o;
    o.init_scale = 1024;
    DynamicLossScaler s(o);
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
        auto ps = params_with_grads({1.0f, bad});
        const double before = s.current_scale();
        auto w = ps[0].clone();
        torch::optim::SGD opt(ps, torch::optim::SGDOptions(0.1));
        const bool ok = s.unscale(ps);
        EXPECT_FALSE(ok) << bad;
        if (ok) opt.step();
        s.update(!ok);
        EXPECT_TRUE(torch::equal(ps[0], w)) << "a skipped step changes no weight";
        EXPECT_DOUBLE_EQ(s.current_scale(), before * 0.5);
    }
    EXPECT_EQ(s.skipped_steps(), 3);
    EXPECT_EQ(s.clean_steps(), 0);
}

TEST(LossScaler, GrowsAfterTheIntervalAndNeverDropsBelowTheFloor) {
    LossScalerOptions o;
    o.init_scale = 8;
    o.growth_interval = 3;
    DynamicLossScaler s(o);
    for (int i = 0; i < 2; ++i) s.update(false);
    EXPECT_DOUBLE_EQ(s.current_scale(), 8);
    s.update(false);
    EXPECT_DOUBLE_EQ(s.current_scale(), 16);
    EXPECT_EQ(s.clean_steps(), 0);
    s.update(false);
    s.update(true);  // an overflow resets the clean streak
    s.update(false);
    s.update(false);
    EXPECT_DOUBLE_EQ(s.current_scale(), 8);
    for (int i = 0; i < 10; ++i) s.update(true);
    EXPECT_DOUBLE_EQ(s.current_scale(), 1.0);
    s.restore(256, 2);
    s.update(false);
    EXPECT_DOUBLE_EQ(s.current_scale(), 512);
}

TEST(LossScaler, UnscaleIgnoresParametersWithoutGradients) {
    DynamicLossScaler s;
    auto a = torch::zeros({2}, torch::requires_grad());
    EXPECT_TRUE(s.unscale({a}));
    EXPECT_FALSE(a.grad().defined());
}

TEST(Compat, AutocastGuardRestoresTheState) {
    const bool before = compat::autocast_enabled(c10::DeviceType::CPU);
    {
        compat::AutocastGuard g(c10::DeviceType::CPU, at::kBFloat16, true);
        EXPECT_TRUE(compat::autocast_enabled(c10::DeviceType::CPU));
        auto y = torch::mm(torch::ones({4, 4}), torch::ones({4, 4}));
        EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(compat::autocast_enabled(c10::DeviceType::CPU), before);
    {
        compat::AutocastGuard off(c10::DeviceType::CPU, at::kBFloat16, false);
        EXPECT_EQ(torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(), at::kFloat);
    }
}

// The multi-tensor SGD the trainer runs on GPUs is torch::optim::SGD's step, value for value
// (here on CPU, where _foreach falls back to one operation per tensor), and keeps its state.
TEST(ForeachSgd, MatchesTorchSgdStepForStep) {
    for (bool nesterov : {true, false}) {
        for (double wd : {0.0, 5e-4}) {
            torch::manual_seed(7);
            std::vector<torch::Tensor> a, b;
            for (auto shape : std::vector<std::vector<int64_t>>{{4, 3}, {5}, {2, 2, 3, 3}}) {
                auto t = torch::randn(shape);
                a.push_back(t.clone().requires_grad_());
                b.push_back(t.clone().requires_grad_());
            }
            auto opts = torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(wd);
            torch::optim::SGD ref(a, opts), ours(b, opts);
            for (int step = 0; step < 4; ++step) {
                for (size_t i = 0; i < a.size(); ++i) {
                    auto g = torch::randn(a[i].sizes());
                    a[i].mutable_grad() = g.clone();
                    b[i].mutable_grad() = g.clone();
                }
                ref.step();
                ASSERT_TRUE(foreach_sgd_step(ours));
                for (size_t i = 0; i < a.size(); ++i)
                    EXPECT_TRUE(torch::equal(a[i], b[i])) << "nesterov " << nesterov << " wd " << wd << " step " << step;
            }
            EXPECT_EQ(ours.state().size(), ref.state().size());  // one momentum buffer per parameter
        }
    }
    torch::optim::AdamW adam(std::vector<torch::Tensor>{torch::zeros({2}, torch::requires_grad())});
    EXPECT_FALSE(foreach_sgd_step(adam));
}

}  // namespace
}  // namespace strato::train
