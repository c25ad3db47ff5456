#pragma once
// Checkpoints: checkpoints/step-NNNNNNNNN/{model.pt, optim.pt, rng.pt, state.json, manifest.json}
// plus checkpoints/latest (the name of the newest one, for people and tools). A checkpoint
// directory is complete before it is renamed into place, so a kill at any instant leaves the
// previous good checkpoint. Loading takes the newest checkpoint whose files all match the SHA-256
// in its manifest; a corrupt one is skipped with a warning in favour of the one before.

#include <nlohmann/json_fwd.hpp>
#include <torch/torch.h>

#include <cmath>
#include <optional>
#include <string>

#include "strato/core/status.h"
#include "strato/train/train_config.h"

namespace strato::train {

/// Everything besides weights and optimizer moments needed to continue a run exactly.
struct TrainState {
    int64_t step = 0;        // optimizer steps done
    int64_t epoch = 0;       // current epoch
    int64_t next_batch = 0;  // next loader batch within the epoch
    int64_t batch_size = 0;  // data.batch_size next_batch counts in (0: a checkpoint from before it was kept)
    int64_t train_samples = 0;  // the training split's size the epoch's order was drawn over (0: not kept)
    int64_t order_seed = -1;    // run.seed, which draws the epoch's order (-1: not kept)
    int64_t order_shuffle = -1;  // data.shuffle: 1 or 0 (-1: not kept)
    int64_t metrics_lines = 0;
    double best_acc = -1.0;
    int64_t best_step = -1;
    double best_loss = std::nan("");  // the test loss of that evaluation (NaN: not known, an older checkpoint)
    int64_t bad_evals = 0;   // evaluations since the last improvement (early stopping)
    double elapsed_s = 0.0;  // training wall time before this process
    // training time of the current epoch before this process (NaN: not known, a checkpoint from
    // before it was kept; a resumed epoch's epoch_time_s was then only the rest's)
    double epoch_elapsed_s = 0.0;
    // running sums of the current epoch's training loss/accuracy
    double epoch_loss_sum = 0.0;
    int64_t epoch_correct = 0;
    int64_t epoch_seen = 0;
    // running sums of the current train.log_every window (a resumed run's first "train" line
    // averaged only the steps after the resume)
    double window_loss_sum = 0.0;
    int64_t window_correct = 0;
    int64_t window_seen = 0;
    // fp16 dynamic loss scaling (train.precision = "fp16")
    double loss_scale = 0.0;  // 0: none yet
    int64_t loss_scale_clean_steps = 0;
};

/// True when every floating-point parameter and buffer of `m` is finite (no NaN, no infinity):
/// a diverged training's weights are neither saved nor resumed from.
bool finite_weights(const torch::nn::Module& m);

/// The words a checkpoint refused for a diverged run's state carries (see CheckpointStore).
inline constexpr const char* kDivergedCheckpoint = "the run had diverged";

class CheckpointStore {
public:
    /// `world_size`: the processes training together (dist::read_env's), recorded in each
    /// checkpoint so a resume by another number of processes is said.
    CheckpointStore(std::string run_dir, CheckpointConfig cfg, int64_t world_size = 1);

    /// Writes a checkpoint for `state.step` and prunes old ones (keep_last, keep_best). Each
    /// records the run's id (checkpoints/run-id, made by the first save), so that a checkpoint
    /// copied in from another run is not resumed from. A non-finite number in the state (fp16's
    /// skipped steps' losses) is written as a string: JSON has no NaN.
    Status save(const TrainState& state, torch::nn::Module& model, torch::optim::Optimizer& optim);
    /// Restores the newest usable checkpoint into model/optim and the global RNG; nullopt when
    /// there is none; an error when some exist but none is usable. Unusable: a file that does not
    /// match its checksum, a step that is not the one in the directory's name, another run's id,
    /// NaN or infinite weights (kDivergedCheckpoint).
    Result<std::optional<TrainState>> load_latest(torch::nn::Module& model, torch::optim::Optimizer& optim);
    /// Loads only the weights of checkpoint `step` (its model.pt, checked against the manifest's
    /// SHA-256) into `model`: the best evaluation's weights for the package (train.early_stopping_
    /// restore_best). kNotFound when that checkpoint is not kept.
    Status load_weights(int64_t step, torch::nn::Module& model);
    bool any() const;
    std::string dir() const { return dir_; }

private:
    Status verify_and_load(const std::string& name, torch::nn::Module& model, torch::optim::Optimizer& optim,
                           TrainState& state);
    std::vector<std::string> list_desc() const;
    void prune(const TrainState& state);
    /// A checkpoint whose manifest names another run's id (copied in from elsewhere) is an error.
    Status check_run_id(const nlohmann::json& manifest);
    /// This run's id (checkpoints/run-id); empty when there is none yet. `create`: make one.
    Result<std::string> run_id(bool create);

    std::string dir_;
    CheckpointConfig cfg_;
    int64_t world_size_;
    std::string run_id_;  // cached once read or made
};

}  // namespace strato::train
