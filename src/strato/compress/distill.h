#pragma once
// Knowledge distillation (`strato compress distill`): trains a student from a training config,
// with a trained teacher package's softened predictions as a second target (Hinton et al. 2015,
// "Distilling the Knowledge in a Neural Network"). The run is an ordinary `strato train` run
// (checkpoints, --resume, metrics.jsonl, report, model package); only the loss differs:
//   (1 - alpha) * CE(student, labels) + alpha * T^2 * KL(softmax(teacher/T) || softmax(student/T)).
//
//   auto student = train::load_train_config("configs/fashion_mnist_student.toml", {}).value();
//   DistillOptions d{.teacher = "runs/fashion_mnist_cnn/model", .temperature = 4, .alpha = 0.9};
//   Result<train::TrainResult> r = distill(student, d, {.resume = true});
//
// The package records what was done in metrics.json:
//   "compression": {"method": "distill", "teacher": ..., "teacher_parameters": ..., "temperature": ..., "alpha": ...}

#include <memory>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/models/package.h"
#include "strato/train/train_config.h"
#include "strato/train/trainer.h"

namespace strato::compress {

struct DistillOptions {
    std::string teacher;       // the teacher's model package directory
    double temperature = 4.0;  // T > 0: softens both distributions (1 = plain softmax)
    double alpha = 0.9;        // weight of the teacher's term, in [0, 1] (0 = ordinary training)
};

/// Feeds a teacher trained with another input normalisation: maps the student's normalised
/// input x_s = (p - mean_s) / std_s to the teacher's x_t = (p - mean_t) / std_t, per channel,
/// as x_t = x_s * (std_s / std_t) + (mean_s - mean_t) / std_t, then runs the teacher. Keeps the
/// input's memory format (channels-last stays channels-last). Holds no parameters of its own.
class RenormalizedNetImpl final : public models::NetImpl {
public:
    RenormalizedNetImpl(models::Net inner, const std::vector<double>& from_mean, const std::vector<double>& from_std,
                        const std::vector<double>& to_mean, const std::vector<double>& to_std);
    /// x: [B, C, H, W], normalised the student's way -> the teacher's logits [B, classes].
    torch::Tensor forward(torch::Tensor x) override;
    const models::Net& inner() const { return inner_; }

private:
    models::Net inner_;
    torch::Tensor scale_, shift_;  // [1, C, 1, 1] buffers
};

/// Puts a teacher's outputs in the student's class order: output column i is the teacher's
/// column order[i]. For a teacher whose labels are the student's classes in another order (an
/// image folder's sorted "0", "1", "10", "2", ... against a CSV's 0, 1, 2, ..., 10), where
/// going by index would teach the student the wrong classes. Holds no parameters of its own.
class ReorderedNetImpl final : public models::NetImpl {
public:
    ReorderedNetImpl(models::Net inner, const std::vector<int64_t>& order);
    /// x: the teacher's input -> its logits [B, classes], columns in the student's order.
    torch::Tensor forward(torch::Tensor x) override;
    const models::Net& inner() const { return inner_; }

private:
    models::Net inner_;
    torch::Tensor order_;  // [classes] int64 buffer
};

/// For each of the student's classes, the teacher's index of the class of the same name, when
/// the teacher's labels are the student's in another order. Empty when they are in the same
/// order, when either list is empty, or when the names are not the same set (one per class):
/// then classes go by index.
std::vector<int64_t> class_order(const std::vector<std::string>& teacher_labels,
                                 const std::vector<std::string>& student_labels);

/// `teacher` itself when the normalisations agree (to 1e-9), else `teacher` wrapped in a
/// RenormalizedNetImpl. A missing mean or std (empty) means 0 and 1 (no normalisation), as the
/// server treats it. Errors when a list's length is not the channel count.
Result<models::Net> renormalize_input(models::Net teacher, int64_t channels, const std::vector<double>& from_mean,
                                      const std::vector<double>& from_std, const std::vector<double>& to_mean,
                                      const std::vector<double>& to_std);

/// What a distillation run adds to the trainer: the loaded teacher and the hooks.
struct Distillation {
    train::TrainHooks hooks;  // teacher (in eval mode; wrapped to re-normalise or reorder), T, alpha, metrics, init
    models::PackageInfo teacher;  // the teacher package's manifest
    int64_t teacher_parameters = 0;
    bool renormalized = false;  // the teacher's normalisation differs from the student's data
    bool reordered = false;     // the teacher's labels are the student's classes in another order
};

/// Loads the teacher package and checks that it fits the student's data: the same input shape
/// and the same number of classes (an error naming both otherwise), a temperature in [0.05, 100]
/// and an alpha in [0, 1]. Opens the student's datasets to learn their shape, normalisation and
/// class names; a teacher that names the same classes in another order has its outputs reordered.
/// The hooks' init keeps the settings in the run directory (distill.json); with `resume` (as the
/// run's TrainOptions say) it warns when they changed, and refuses a run started without a teacher.
Result<Distillation> prepare_distillation(const train::TrainConfig& student, const DistillOptions& opts,
                                          bool resume = false);

/// prepare_distillation, then train::run_training with its hooks (`train_opts.hooks` is
/// replaced). The result is the student's run, its package at result.package_dir.
Result<train::TrainResult> distill(const train::TrainConfig& student, const DistillOptions& opts,
                                   train::TrainOptions train_opts);

}  // namespace strato::compress
