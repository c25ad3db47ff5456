#pragma once
// Pruning: global unstructured magnitude pruning (masks kept through fine-tuning, one-shot or with
// Zhu & Gupta's gradual schedule) and structured channel pruning that rebuilds a narrower network.
//
//   PruneOptions o;
//   o.model = "runs/fashion_mnist_cnn/model";
//   o.method = "channels";  o.amount = 0.3;
//   o.finetune = finetune_config("", {"train.epochs=2"}).value();
//   Result<PruneReport> r = prune_package(o);   // -> runs/fashion_mnist_cnn-prune-channels-30/model
//   fmt::print("{}", format_prune_table(*r));
//
// The pieces are usable on their own: MagnitudePruner on any module, prune_channels on a zoo
// network. Fine-tuning runs through train::run_training (checkpoints, --resume, metrics.jsonl).

#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/models/zoo.h"
#include "strato/train/train_config.h"

namespace strato::compress {

// --- Unstructured: global magnitude pruning ---

/// The weights magnitude pruning considers: the weight of every Conv2d and Linear of `net`
/// (biases and BatchNorm parameters are never pruned), by parameter name, in module order.
std::vector<std::string> prunable_weights(torch::nn::Module& net);

/// Global unstructured L1 pruning, as torch.nn.utils.prune.global_unstructured(...,
/// L1Unstructured): one threshold over all prunable weights, so layers lose different fractions.
/// The masks stay with the pruner and are re-applied after every optimizer step, so pruned
/// weights stay exactly 0 while the others train.
///
///   MagnitudePruner p(*net);
///   p.prune(*net, 0.5);   // zeroes round(0.5 * N) weights of the smallest |w|
///   ... optimizer.step(); p.apply(*net);
///
/// Not thread-safe; the net passed each time must be the one (or a copy, same parameter names)
/// the pruner was made for. Masks follow the weights to their device and layout.
class MagnitudePruner {
  public:
    explicit MagnitudePruner(torch::nn::Module& net);
    /// (Re)computes the masks on the current weights: the round(sparsity * N) weights of smallest
    /// |w| over all prunable weights (exactly that many; ties broken by position) become 0.
    /// Already-pruned weights are 0, so a higher sparsity keeps pruning them.
    void prune(torch::nn::Module& net, double sparsity);
    /// Zeroes the masked weights again.
    void apply(torch::nn::Module& net);
    double sparsity() const { return sparsity_; }
    bool has_masks() const { return !masks_.empty(); }
    const std::vector<std::string>& weights() const { return names_; }

  private:
    std::vector<std::string> names_;
    std::map<std::string, torch::Tensor> masks_;  // 1 = kept, 0 = pruned; same shape as the weight
    double sparsity_ = 0;
};

/// Zhu & Gupta 2017 ("To prune, or not to prune"), cubic schedule from 0 to `final_sparsity`:
///   s(k) = final * (1 - (1 - k / n)^3)  at ramp point k = floor(step * n / ramp_steps), capped at n,
/// so the sparsity rises fast at first and levels off; it stays at `final` after `ramp_steps`.
double gradual_sparsity(double final_sparsity, int64_t step, int64_t ramp_steps, int64_t points);

struct WeightSparsity {
    std::string name;
    std::vector<int64_t> shape;
    int64_t weights = 0;
    int64_t zeros = 0;
};
/// Measured zeros of every prunable weight of `net`.
std::vector<WeightSparsity> measure_sparsity(torch::nn::Module& net);

// --- Structured: channel pruning ---

/// One layer structured pruning may narrow (as model.channels lists them, in order).
struct ChannelLayer {
    std::string name;    // the convolution or Linear whose outputs are the channels, e.g. "features.3"
    int64_t before = 0;  // channels
    int64_t after = 0;
    std::vector<int64_t> kept;  // indices of the kept channels, ascending
};

struct ChannelPruneResult {
    models::ModelConfig model;  // the input config with model.channels set to the kept widths
    models::Net net;            // the narrower network with the kept weights, in eval mode
    std::vector<ChannelLayer> layers;
};

/// Channel importance of every prunable layer of `net` (a zoo network of `cfg.arch`): the L1
/// norm of each output filter (row) with the BatchNorm that follows folded in,
///   |gamma_c| * ||W_c||_1 / sqrt(running_var_c + eps)   (plain ||W_c||_1 where there is no BN),
/// i.e. the filter's L1 norm (Li et al. 2017) measured on the scale the next layer sees (BN
/// would undo any rescaling of W_c; |gamma| is Network Slimming's criterion). Biases are ignored.
Result<std::vector<torch::Tensor>> channel_importance(models::NetImpl& net, const models::ModelConfig& cfg);

/// Drops round(amount * C) of the C channels of every prunable layer (at least one is kept), those
/// of smallest channel_importance; with round_to > 1 the kept count of a layer wider than round_to
/// is then rounded down to a multiple of round_to (at least round_to), since CPU kernels work on
/// channel blocks of 8 or 16 and a width between two multiples costs as much as the larger one
/// (measured on the Fashion-MNIST CNN, batch 1: 22/45 channels 1.04x faster than 32/64, 24/48
/// 1.18x). Then builds the narrower network (model.channels) and copies the kept weights: the
/// layer's output rows (and bias), its BatchNorm (weight, bias, running statistics),
/// the next layer's input columns (for the cnn's last convolution: the first Linear's columns
/// c*H*W .. (c+1)*H*W-1 of each kept channel c, as flatten(1) lays them out). Residual widths
/// (block outputs, shortcuts, stem) are never pruned. A channel that outputs exactly 0 is removed
/// without changing the logits. `shape` and `classes` are what `net` was built for.
Result<ChannelPruneResult> prune_channels(models::NetImpl& net, const models::ModelConfig& cfg,
                                          const data::ImageShape& shape, int64_t classes, double amount,
                                          int64_t round_to = 1);

// --- The command: strato compress prune ---

struct PruneOptions {
    std::string model;                 // source package directory (a float package)
    std::string method = "magnitude";  // magnitude | channels
    std::optional<double> amount;      // in (0, 1); default 0.5 (magnitude), 0.3 (channels)
    int64_t round_to = 8;              // channels: kept widths rounded down to a multiple of this (1 = exact)
    std::string schedule = "oneshot";  // oneshot | gradual (magnitude only, needs fine-tuning)
    double ramp = 0.5;                 // gradual: fraction of the fine-tuning steps the sparsity ramps over
    int64_t ramp_points = 10;          // gradual: mask recomputations on the ramp
    train::TrainConfig finetune;       // data, optim, schedule, train; [model] is always the package's
    int64_t epochs = -1;               // -1: finetune.train.epochs; 0: prune without fine-tuning
    std::string output;                // run directory (package in <output>/model); empty: see default_prune_output
    bool resume = false, overwrite = false, quiet = false;
};

/// The fine-tuning config: `config_path` (a training config) with `sets`, or without a path the
/// built-in defaults (Fashion-MNIST, SGD lr 0.01 momentum 0.9, cosine, 2 epochs) with `sets`.
/// Parsed and range-checked; prune_package validates it once the package's values are in.
Result<train::TrainConfig> finetune_config(const std::string& config_path, const std::vector<std::string>& sets);

/// The default run directory: next to the source run, named after it,
/// runs/x/model -> runs/x-prune-magnitude-50 (a package not named "model": its own name).
std::string default_prune_output(const std::string& package, const std::string& method, double amount);

struct PruneLayerRow {
    std::string name;
    std::vector<int64_t> shape;  // magnitude: the weight's shape
    int64_t weights = 0, zeros = 0;
    int64_t channels_before = 0, channels_after = 0;  // channels
};

struct PruneReport {
    std::string method, schedule, source, run_dir, package;
    double amount = 0;
    int64_t round_to = 1;  // channels: the multiple kept widths were rounded down to
    int64_t epochs = 0;    // of fine-tuning
    std::vector<PruneLayerRow> layers;
    int64_t parameters_before = 0, parameters_after = 0;
    int64_t weights = 0, zeros = 0;         // over the prunable weights of the output
    std::optional<double> source_test_acc;  // on the same test split (else from its metrics.json)
    std::optional<double> test_acc;         // of the output package, after fine-tuning
    int64_t test_samples = 0;
    double sparsity() const { return weights ? static_cast<double>(zeros) / static_cast<double>(weights) : 0.0; }
    /// What goes into the package's metrics.json as "compression".
    nlohmann::json compression_json() const;
    /// Everything, for --json.
    nlohmann::json to_json() const;
};

/// Prunes the package `o.model`, fine-tunes it through the trainer (unless o.epochs == 0) and
/// writes the pruned package to <output>/model; metrics.json gets a "compression" object. Refuses
/// an INT8 package, an unknown method or schedule, an amount outside (0, 1).
Result<PruneReport> prune_package(const PruneOptions& o);

/// The per-layer table `strato compress prune` prints.
std::string format_prune_table(const PruneReport& r);

}  // namespace strato::compress
