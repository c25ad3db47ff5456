#pragma once
// A tuning study as written in TOML: what to tune (parameters of a base train config, each a
// distribution), how to sample them, how to schedule the trials, and the objective.
//
//     [study]
//     name = "fmnist-mlp"
//     base = "configs/fashion_mnist_mlp.toml"   # relative to this file
//     metric = "test_acc"        # any numeric field of metrics.jsonl's eval lines
//     mode = "max"
//     trials = 27
//     parallel = 2               # trial processes at once
//     threads_per_trial = 1
//     sampler = "tpe"            # random | grid | tpe
//     scheduler = "asha"         # fifo | asha | median
//     seed = 1
//     set = ["data.limit_train=10000"]   # fixed overrides for every trial
//     trial_timeout = "2h"       # wall-clock limit of each trial process (none by default)
//     [scheduler]
//     grace = 1                  # epochs before the first decision (ASHA's r)
//     max_t = 9                  # epochs of a full trial (ASHA's R)
//     reduction = 3              # ASHA's eta
//     variant = "promotion"      # promotion (pause at rungs, resume the promoted) | stopping
//     brackets = 1               # ASHA brackets: bracket b's first rung is grace x reduction^b
//     [params]
//     "optim.lr" = { type = "loguniform", low = 1e-4, high = 0.3 }
//     "optim.momentum" = { type = "uniform", low = 0.8, high = 0.99, when = "optim.name == sgd" }
//     "model.width" = { type = "int", low = 64, high = 512, q = 64 }
//     "optim.name" = { type = "choice", values = ["sgd", "adamw"] }
//     "data.batch_size" = { type = "grid", values = [64, 128] }
//
// Every error names the file and the parameter and is found before any trial starts.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "strato/core/status.h"

namespace strato::tune {

enum class Dist { kUniform, kLogUniform, kInt, kChoice, kGrid };

struct Param {
    std::string key;
    Dist dist = Dist::kUniform;
    double low = 0, high = 1, q = 0;   // numeric distributions; q: quantisation step (0 = none)
    std::vector<std::string> values;   // choice / grid: TOML literals ("0.1", "\"sgd\"")
    std::string when_key, when_value;  // conditional: only when another parameter has this value

    bool numeric() const { return dist == Dist::kUniform || dist == Dist::kLogUniform || dist == Dist::kInt; }
    /// Internal coordinate for samplers: log for log-uniform, the index for choice/grid.
    double to_internal(const std::string& literal) const;
    /// The --set literal of an internal coordinate (rounded/quantised/clamped).
    std::string from_internal(double x) const;
    double internal_low() const;
    double internal_high() const;
};

/// Bounds of [study] memory_limit_gb (1 PB) and cpus_per_trial: their bytes and CPU quotas fit
/// an int64 however they are converted.
constexpr double kMemoryLimitGbMax = 1e6;
constexpr double kCpusPerTrialMax = 1e5;
/// Trial processes at once, of one executor: [study] parallel, tune run --parallel and tune slurm
/// --task-parallel.
constexpr int kParallelMax = 4096;
/// The trials of a grid study that leaves `trials` out (one per grid point), at most tune run's
/// --trials bound.
constexpr int64_t kGridTrialsMax = 1'000'000;

/// One trial's parameters: key -> TOML literal, as passed to `strato train --set key=literal`.
using Assignment = std::map<std::string, std::string>;

struct StudyConfig {
    std::string source;             // the study file
    std::string name = "study";
    std::string base;               // train config path (resolved)
    std::vector<std::string> fixed; // --set overrides for every trial
    std::string metric = "test_acc";
    bool maximize = true;
    int trials = 20, parallel = 1, threads_per_trial = 1;  // trials: a grid's size without `trials`
    std::string sampler = "tpe", scheduler = "asha", variant = "promotion";
    uint64_t seed = 1;
    int grace = 1, max_t = 9, reduction = 3, brackets = 1;
    int tpe_startup = 10, tpe_candidates = 24;
    double memory_limit_gb = 0;     // per trial: a cgroup memory limit, else RLIMIT_AS (0 = none)
    double cpus_per_trial = 0;      // per trial: a cgroup CPU quota in cores (0 = none)
    /// Wall-clock limit of each run of a trial process (a new one at each promotion or resume),
    /// in seconds (0 = none), and as the study file writes it ("2h"), for messages. Not part of
    /// the study's identity: it changes no trial's result, only how long one may hang.
    double trial_timeout_s = 0;
    std::string trial_timeout;
    std::vector<Param> params;

    static Result<StudyConfig> load(const std::string& path);
    static Result<StudyConfig> parse(std::string_view toml_text, const std::string& source, const std::string& base_dir);
    /// The rung milestones in epochs of an ASHA bracket: grace x reduction^(bracket+k) below
    /// max_t, then max_t. Other schedulers: {max_t}.
    std::vector<int> milestones(int bracket = 0) const;
    /// Is `a` strictly better than `b` under the study's mode?
    bool better(double a, double b) const { return maximize ? a > b : a < b; }
};

/// Checks that the base config loads with the fixed overrides, the settings the executor adds to
/// every trial (train.epochs = max_t, train.stop_after_epochs, run.threads = threads_per_trial)
/// and every parameter at each end of its range, at a value inside it and at each of its values
/// (so a parameter the train config does not have, or a fractional draw for an integer setting,
/// fails before any trial). An error names the study key to change.
Status validate_against_train_config(const StudyConfig& s);

}  // namespace strato::tune
