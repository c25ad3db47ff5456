#pragma once
// The executor of a study: runs `strato train` trial processes (up to `parallel` at once, each
// with its own threads and optional memory limit), reads their evaluation lines from
// metrics.jsonl as they appear, and lets the scheduler act:
//   fifo   — every trial trains max_t epochs;
//   asha   — promotion variant: trials pause at each rung (grace x reduction^k epochs) and the best
//            1/reduction of each rung so far are resumed from their checkpoints to the next one,
//            deepest rungs first (Li et al. 2020). "So far": without a barrier, a trial promoted
//            early can drop out of its rung's best 1/reduction as better ones arrive, and those are
//            promoted too, so a rung of n entries may promote more than n/reduction depending on
//            arrival order (the paper's mispromotions); its final best n/reduction always are.
//            Stopping variant: trials run on and stop at a rung when worse than its
//            (1 - 1/reduction) quantile so far (Ray Tune's ASHAScheduler);
//   median — stop a trial whose value at an epoch is worse than the median of the others there
//            (trials that failed left out: a crashed run's values set no bar).
// Everything is recorded in STUDY_DIR/study.db before it is acted on; trial processes die with
// the executor (PR_SET_PDEATHSIG), and a restarted executor resumes the trials that were running
// from their checkpoints.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"
#include "strato/tune/sampler.h"
#include "strato/tune/space.h"
#include "strato/tune/store.h"

namespace strato::tune {

struct RunOptions {
    std::string dir;            // the study directory (study.db, trials/, logs/)
    std::string strato_binary;  // empty: this executable
    bool quiet = false;
    /// A trial the executor stops (its [study] trial_timeout, the scheduler, a Ctrl-C) gets
    /// SIGTERM (the trainer checkpoints and exits), then SIGKILL this many seconds later if it
    /// has not exited.
    double stop_grace_s = 30;
};

struct RunSummary {
    int trials = 0, completed = 0, stopped = 0, failed = 0;
    int64_t epochs_trained = 0;  // sum over trials: the budget used
    std::optional<Trial> best;
};

/// Runs (or continues) the study until every trial is finished or SIGINT/SIGTERM (then the
/// running trials checkpoint and the call returns kCancelled; run it again to continue).
Result<RunSummary> run_study(const StudyConfig& cfg, const RunOptions& options);

/// What the sampler learns from, signed so that larger is better: a completed trial with its
/// result (its best value, the study's objective), a stopped, paused or running one with its
/// latest (as Optuna counts a pruned trial), a failed one not at all (its partial result is no
/// outcome of its configuration; Optuna's TPE leaves FAIL trials out), and one without a result
/// yet, running or paused, as the worst value so far (the constant liar, for parallel trials).
std::vector<Observation> sampler_history(const StudyConfig& cfg, const std::vector<Trial>& trials);

/// The study's state as JSON ({"kind": "strato-tune", trials with params, results, states; rungs}).
/// A trial's "params" are the `--set` literals it ran with ("\"adamw\"", "0.001"); its "values"
/// the same as JSON values ("adamw", 0.001).
Result<nlohmann::json> study_json(const StudyConfig& cfg, const std::string& dir);

/// A trial that can be the study's best: one with a result that did not fail (a trial killed by
/// its memory limit after a good epoch is no configuration to recommend, as in Optuna).
bool rankable(const Trial& t);

/// The study's best trial among `trials`: the rankable one with the best result under the
/// study's mode, the first of equals; nullopt when none is rankable. `tune run`'s summary,
/// `tune best` and `tune export-best` all pick it here, so that they always agree.
std::optional<Trial> best_trial(const StudyConfig& cfg, const std::vector<Trial>& trials);

/// `tune best`: the best trial (best_trial) as study_json lists it; kNotFound when none.
Result<nlohmann::json> best_trial_json(const StudyConfig& cfg, const std::string& dir);

/// An output of a tune command (`flag` names it) may not be one of the study's own files in
/// `dir`: study.db and its journals, anything under trials/ (the trials' metrics.jsonl and
/// checkpoints, which resumes and the scheduler read) or logs/. Checked after symbolic links
/// are resolved; standard output and other streams pass.
Status check_study_output(const std::string& dir, const std::string& out, std::string_view flag);

/// Leaderboard text: the best `top` trials by the objective.
Result<std::string> leaderboard(const StudyConfig& cfg, const std::string& dir, int top);

/// The best trial's full train config (base + fixed + its parameters, resolved) as TOML, with a
/// comment line naming the trial.
Result<std::string> best_config(const StudyConfig& cfg, const std::string& dir);

/// A study as a Slurm array job: every array task is one more executor of the same study, all
/// sharing STUDY_DIR/study.db (so the directory must be on a filesystem every node mounts, with
/// POSIX locks). Each task runs `strato tune run` with `parallel` trials at a time and leaves
/// when nothing is left to run anywhere; a task that dies has its trials taken over by another
/// (at once on the same host, after a 60 s lease elsewhere).
struct SlurmOptions {
    std::string study_file;     // the study TOML
    std::string dir;            // the study directory
    std::string strato_binary;  // empty: this executable
    int tasks = 2;              // array tasks
    int parallel = 1;           // trials per task at once
    std::string partition, time, mem, account;
    std::vector<std::string> extra;  // more sbatch options, e.g. "--gres=gpu:1"
};

/// What an #SBATCH value is: a word (--partition, --account), a time limit, a memory size, or a
/// whole sbatch option (--sbatch, which must start with '-').
enum class SbatchValue { kWord, kTime, kMemory, kOption };

/// Checks a value that `tune slurm` writes into an #SBATCH line: no control characters (a
/// newline ended the #SBATCH block and ran the rest in the shell), no blanks but in a whole
/// option, and the form Slurm expects of its kind (`flag`, if not empty, names it in the message).
Status check_sbatch_value(std::string_view flag, std::string_view value, SbatchValue kind);

/// Switches the study store to the rollback journal (WAL works on one host only), creating it if
/// needed, and returns the sbatch script.
Result<std::string> slurm_array(const StudyConfig& cfg, const SlurmOptions& options);

/// The study's directory: --dir if given, else runs/tune/<name>.
std::string study_dir(const StudyConfig& cfg, const std::string& dir_flag);

}  // namespace strato::tune
