#pragma once
// The training loop: data -> model -> loss -> optimizer, with LR schedules, gradient
// accumulation and clipping, label smoothing, bf16 autocast on CPU, evaluation every epoch,
// checkpoints with exact resume, early stopping, metrics.jsonl and a model package at the end.
//
//   auto cfg = load_train_config("configs/fashion_mnist_cnn.toml", {"train.epochs=3"}).value();
//   Result<TrainResult> r = run_training(cfg, {.resume = true});
//
// SIGINT/SIGTERM (after signals::install_stop_handlers()) finish the current step, write a
// checkpoint and return a kCancelled status.

#include <torch/torch.h>

#include <string>

#include "strato/core/status.h"
#include "strato/data/data_config.h"
#include "strato/data/loader.h"
#include "strato/train/train_config.h"

namespace strato::models {
class NetImpl;
}

namespace strato::train {

struct TrainOptions {
    bool resume = false;     // continue from checkpoints/latest when there is one
    bool overwrite = false;  // delete an existing run directory first
    bool quiet = false;      // no progress bars
};

struct TrainResult {
    std::string run_dir;
    std::string package_dir;
    int64_t steps = 0;
    int64_t epochs = 0;
    double test_acc = 0.0;
    double test_loss = 0.0;
    double best_test_acc = 0.0;
    double wall_time_s = 0.0;
    bool early_stopped = false;
};

Result<TrainResult> run_training(const TrainConfig& cfg, const TrainOptions& opts);

struct EvalResult {
    double loss = 0.0;
    double accuracy = 0.0;
    int64_t count = 0;
    double seconds = 0.0;
};

/// Accuracy and mean cross-entropy of `net` over every batch of `loader` (epoch 0, in order);
/// `channels_last` feeds NHWC inputs (for a net converted with models::to_channels_last); on
/// `device` (where `net` lives), under bf16 or fp16 autocast when asked.
Result<EvalResult> evaluate(models::NetImpl& net, data::Loader& loader, bool bf16, bool channels_last,
                            const torch::Device& device = torch::kCPU, bool fp16 = false);

struct PackageEval {
    EvalResult result;
    std::string arch;
    int64_t parameters = 0;
    std::vector<std::string> labels;
};

/// Loads the model package at `package_dir` and evaluates it on the test split of `data`
/// (normalised with the package's own preprocessing).
Result<PackageEval> evaluate_package(const std::string& package_dir, const data::DataConfig& data, bool bf16);

/// Sets libtorch's intra-op threads (0 = number of cores) and returns the count in use.
int configure_threads(int64_t threads);

}  // namespace strato::train
