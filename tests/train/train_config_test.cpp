#include <gtest/gtest.h>

#include <filesystem>

#include "strato/train/train_config.h"

namespace strato::train {
namespace {

const std::string kConfigs = std::string(STRATO_SOURCE_DIR) + "/configs/";

TEST(TrainConfig, ShippedConfigsParse) {
    for (const auto& e : std::filesystem::directory_iterator(kConfigs)) {
        if (e.path().extension() != ".toml") continue;
        auto cfg = load_train_config(e.path().string(), {});
        EXPECT_TRUE(cfg.is_ok()) << e.path() << ": " << cfg.status().message();
    }
}

TEST(TrainConfig, ResolvedConfigRoundTrips) {
    auto cfg = load_train_config(kConfigs + "fashion_mnist_cnn.toml", {"optim.lr=0.2", "train.precision=bf16"});
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    auto again = config::load_string<TrainConfig>(config::dump(*cfg));
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ(config::dump(*again), config::dump(*cfg));
    EXPECT_DOUBLE_EQ(again->optim.lr, 0.2);
    EXPECT_EQ(again->train.precision, "bf16");
}

struct BadCase {
    std::vector<std::string> sets;
    const char* expect;
};
class TrainConfigErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(TrainConfigErrors, OneClearLine) {
    auto cfg = load_train_config(kConfigs + "fashion_mnist_cnn.toml", GetParam().sets);
    ASSERT_FALSE(cfg.is_ok());
    EXPECT_NE(cfg.status().message().find(GetParam().expect), std::string::npos) << cfg.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainConfigErrors,
    ::testing::Values(BadCase{{"optim.lr=-0.1"}, "optim.lr: expected a number in (0, 1000], got -0.1"},
                      BadCase{{"optim.name=adam"}, "optim.name: expected one of sgd, adamw, got \"adam\""},
                      BadCase{{"train.epochs=0"}, "train.epochs: expected an integer in [1, 100000], got 0"},
                      BadCase{{"train.precision=fp8"}, "train.precision: expected one of fp32, bf16"},
                      BadCase{{"model.arch=vgg"}, "model.arch: expected one of cnn, mlp, resnet"},
                      BadCase{{"data.batch_size=\"big\""}, "data.batch_size: expected an integer"},
                      BadCase{{"optim.betas=[0.9]"}, "optim.betas: expected 2 values"},
                      BadCase{{"run.name=a/b"}, "run.name: expected a plain directory name"},
                      BadCase{{"run.dir=\"\""}, "run.dir: expected the directory that holds run directories, got \"\""},
                      BadCase{{"train.precision=\"fp16\""}, "train.precision = \"fp16\" needs run.device = \"cuda\""},
                      BadCase{{"run.device=\"tpu\""}, "run.device: expected one of cpu, cuda"},
                      BadCase{{"train.cuda_graph=true"}, "train.cuda_graph = true needs run.device = \"cuda\""},
                      BadCase{{"train.cuda_graph=true", "run.device=\"cuda\"", "train.grad_accum=2"},
                              "train.cuda_graph = true needs train.grad_accum = 1"},
                      BadCase{{"dist.backend=\"nccl\""}, "dist.backend = \"nccl\" needs run.device = \"cuda\""},
                      BadCase{{"dist.backend=\"mpi\""}, "dist.backend: expected one of auto, gloo, nccl"},
                      BadCase{{"trian.epochs=3"}, "unknown key 'trian' (did you mean 'train'?)"}));

}  // namespace
}  // namespace strato::train
