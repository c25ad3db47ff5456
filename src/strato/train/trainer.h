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

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "strato/core/status.h"
#include "strato/data/data_config.h"
#include "strato/data/loader.h"
#include "strato/train/train_config.h"

namespace strato::models {
class NetImpl;
struct PackageInfo;
}

namespace strato::train {

/// What `strato compress` adds to an ordinary training run; every member is optional.
struct TrainHooks {
    /// Called once on the freshly built network (before channels-last conversion and before a
    /// checkpoint is restored): start from given weights, e.g. a pruned package's.
    std::function<Status(models::NetImpl&)> init;
    /// Called after every optimizer step with the optimizer steps done so far and the run's total
    /// (pruning re-applies its masks here, and moves along its sparsity schedule), and once more
    /// before the first step of this process, after a checkpoint is restored, with the step the
    /// run starts from (0 when fresh).
    std::function<void(models::NetImpl&, int64_t step, int64_t total_steps)> after_step;
    /// Knowledge distillation (Hinton et al. 2015): with a teacher, the loss is
    ///   (1 - alpha) * CE(student, labels) + alpha * T^2 * KL(softmax(teacher/T) || softmax(student/T)).
    /// The teacher sees the student's (normalised) inputs and must be in eval mode.
    std::shared_ptr<models::NetImpl> teacher;
    double kd_temperature = 4.0;
    double kd_alpha = 0.9;
    /// Merged into the package's metrics.json (what the compression did).
    nlohmann::json package_metrics = nlohmann::json::object();
};

struct TrainOptions {
    bool resume = false;     // continue from checkpoints/latest when there is one
    bool overwrite = false;  // delete an existing run directory first
    bool quiet = false;      // no progress bars
    const TrainHooks* hooks = nullptr;
    /// Packages the run reads (a distillation teacher): the run never deletes or replaces them --
    /// a run directory holding one is not overwritten, nor is a package saved over one.
    std::vector<std::string> inputs = {};
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
    int64_t weights_step = 0;  // the step whose weights the package holds (the best evaluation's: early stopping)
    int rank = 0;              // under data parallelism only rank 0 writes the run directory and the package
};

Result<TrainResult> run_training(const TrainConfig& cfg, const TrainOptions& opts);

/// The loss of a distillation run (TrainHooks::teacher), for logits [B, classes] in float:
///   (1 - alpha) * hard + alpha * T^2 * KL(softmax(teacher/T) || softmax(student/T)),
/// the KL divergence summed over classes and averaged over the batch; `hard` is the ordinary
/// cross-entropy with the labels. The T^2 keeps the soft term's gradients on the scale of the
/// hard term's as T changes (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network").
torch::Tensor distillation_loss(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                                const torch::Tensor& hard, double temperature, double alpha);

struct EvalResult {
    double loss = 0.0;
    double accuracy = 0.0;
    int64_t count = 0;    // samples scored
    int64_t skipped = 0;  // unreadable samples left out (data.on_bad_sample = "skip")
    double seconds = 0.0;
};

/// Accuracy and mean cross-entropy of `net` over every batch of `loader` (epoch 0, in order);
/// `channels_last` feeds NHWC inputs (for a net converted with models::to_channels_last); on
/// `device` (where `net` lives), under bf16 or fp16 autocast when asked. `interrupted`, when
/// given, is asked before each batch: once true, the evaluation ends with kCancelled
/// ("interrupted while evaluating, after N of the test samples").
Result<EvalResult> evaluate(models::NetImpl& net, data::Loader& loader, bool bf16, bool channels_last,
                            const torch::Device& device = torch::kCPU, bool fp16 = false,
                            const std::function<bool()>& interrupted = {});

struct PackageEval {
    EvalResult result;
    std::string arch;
    int64_t parameters = 0;
    std::vector<std::string> labels;
};

/// Opens `data` the way a package needs it: images brought to the package's input size (unless
/// data.image_size says otherwise), the package's own normalisation; a shape or class-count
/// mismatch is an error naming both. `resolved` (optional) receives the data config used.
enum class PackageData {
    /// Train and test splits as a training run reads them (prune's fine-tuning): the data's
    /// classes must be the model's, in its order.
    kFineTune,
    /// Train and test splits read only through the model (quantize's calibration and scores):
    /// an image folder's classes, and Fashion-MNIST's in a model that orders them otherwise, are
    /// matched to the model's by name.
    kCalibrate,
    /// The test split alone (open_evaluation_split: an image folder needs no train/ folder, its
    /// classes are the package's); `train` stays null.
    kEvaluate,
};
Result<data::DataSplits> open_package_data(const models::PackageInfo& info, const data::DataConfig& data,
                                           data::DataConfig* resolved = nullptr, PackageData use = PackageData::kFineTune);

/// `error`, from opening `data` for a package (open_package_data), as said to a user: names the
/// data read (the default is Fashion-MNIST, whatever the model learnt) and, for data that does
/// not fit, what would. `role`: "test data", "calibration data"; `verb`: "evaluate", "calibrate".
Status package_data_error(const models::PackageInfo& info, const data::DataConfig& data, const Status& error,
                          std::string_view role, std::string_view verb);

/// Loads the model package at `package_dir` and evaluates it on the test split of `data`
/// (normalised with the package's own preprocessing); `interrupted` as for evaluate().
Result<PackageEval> evaluate_package(const std::string& package_dir, const data::DataConfig& data, bool bf16,
                                     bool fuse = true, const std::function<bool()>& interrupted = {});

/// A loader batch's images as a [B, C, H, W] tensor: a view of the batch buffer (valid until the
/// next batch), or a channels-last copy for a net converted with models::to_channels_last.
torch::Tensor images_tensor(data::Batch& b, bool channels_last);

/// Sets libtorch's intra-op threads and returns the count in use. 0: OMP_NUM_THREADS when set,
/// else one per CPU this process may use (affinity mask and cgroup quota). `source`, when given,
/// gets where the count came from ("from OMP_NUM_THREADS=4", "one per usable CPU", "as asked").
int configure_threads(int64_t threads, std::string* source = nullptr);

/// torch::optim::SGD's step (weight decay, momentum, dampening, Nesterov; the same momentum
/// buffers, so checkpoints are unchanged) done with multi-tensor `_foreach` operations: a few
/// launches per step on a GPU instead of several per parameter. Returns false, doing nothing,
/// for another optimizer.
bool foreach_sgd_step(torch::optim::Optimizer& optimizer);

}  // namespace strato::train
