#pragma once
// The full training config: [run], [data], [model], [optim], [schedule], [train], [checkpoint],
// [dist].
// See configs/fashion_mnist_cnn.toml for an annotated example and docs/config.md for every key.

#include <string>
#include <vector>

#include "strato/core/config.h"
#include "strato/data/data_config.h"
#include "strato/models/model_config.h"

namespace strato::train {

struct RunConfig {
    std::string name = "run";
    std::string dir = "runs";  // the run directory is <dir>/<name>
    int64_t seed = 0;
    bool deterministic = false;  // bitwise-reproducible on CPU (same thread count)
    int64_t threads = 0;         // intra-op threads; 0 = number of cores
    std::string device = "cpu";  // cpu | cuda (cuda:LOCAL_RANK under data parallelism; needs a CUDA libtorch)
    void visit(config::Visitor& v);
};

struct OptimConfig {
    std::string name = "sgd";  // sgd | adamw
    double lr = 0.05;
    double momentum = 0.9;
    bool nesterov = true;
    double weight_decay = 5e-4;
    std::vector<double> betas = {0.9, 0.999};
    double eps = 1e-8;
    void visit(config::Visitor& v);
};

struct ScheduleConfig {
    std::string name = "cosine";  // constant | step | cosine | onecycle
    double warmup_epochs = 0.0;   // linear warmup from warmup_start_factor * lr
    double warmup_start_factor = 0.1;
    double step_epochs = 10.0;    // step: multiply by gamma every step_epochs
    double gamma = 0.1;
    double min_lr = 0.0;          // cosine: final learning rate
    double pct_start = 0.3;       // onecycle: fraction of steps spent rising
    double div_factor = 25.0;     // onecycle: initial lr = lr / div_factor
    double final_div_factor = 1e4;  // onecycle: final lr = initial / final_div_factor
    void visit(config::Visitor& v);
};

struct LoopConfig {
    int64_t epochs = 10;
    int64_t max_steps = 0;  // stop after this many optimizer steps (0 = no limit)
    int64_t stop_after_epochs = 0;  // pause after this many epochs, the schedule still spanning `epochs` (0 = off)
    int64_t grad_accum = 1;
    double clip_grad_norm = 0.0;  // 0 = off
    double label_smoothing = 0.0;
    std::string precision = "fp32";  // fp32 | bf16 (autocast) | fp16 (autocast + dynamic loss scaling; cuda)
    bool channels_last = true;       // NHWC layout for convolutional models (faster with oneDNN)
    bool cuda_graph = false;         // cuda: replay forward + backward as one captured CUDA graph (static shapes)
    int64_t log_every = 50;          // optimizer steps between train metrics lines
    int64_t monitor_every = 0;       // optimizer steps between host/GPU samples ("monitor" lines); 0 = off
    int64_t eval_every = 1;          // epochs between evaluations
    int64_t early_stopping_patience = 0;  // evaluations without improvement before stopping; 0 = off
    double early_stopping_min_delta = 0.0;
    // With early stopping on, the package holds the best evaluation's weights (its checkpoint),
    // not the last ones (Keras' restore_best_weights, HF's load_best_model_at_end).
    bool early_stopping_restore_best = true;
    void visit(config::Visitor& v);
};

struct CheckpointConfig {
    int64_t every_steps = 0;  // also checkpoint every N optimizer steps (0 = at epoch ends only)
    int64_t keep_last = 3;
    bool keep_best = true;    // never delete the checkpoint with the best test accuracy
    void visit(config::Visitor& v);
};

/// Data parallelism under `strato launch` (or torchrun, srun, mpirun): used when the
/// environment says WORLD_SIZE > 1. data.batch_size is per process.
struct DistConfig {
    double timeout_s = 300;       // a collective or the rendezvous of ranks that takes longer fails
    double bucket_mb = 25;        // gradient bucket size (DDP's bucket_cap_mb)
    double first_bucket_mb = 1;   // the first, smaller bucket, so communication starts early
    std::string backend = "auto";  // auto (NCCL for CUDA parameters where built, else Gloo) | gloo | nccl
    void visit(config::Visitor& v);
};

struct TrainConfig {
    RunConfig run;
    data::DataConfig data;
    models::ModelConfig model;
    OptimConfig optim;
    ScheduleConfig schedule;
    LoopConfig train;
    CheckpointConfig checkpoint;
    DistConfig dist;
    void visit(config::Visitor& v);

    std::string run_dir() const;
    /// Cross-field checks the per-field ranges cannot express.
    Status validate() const;
};

/// Loads a config file with `--set` overrides and validates it.
Result<TrainConfig> load_train_config(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace strato::train
