#pragma once
// The study store: one SQLite database (WAL, synchronous=FULL) holding the trials, their
// parameters, every intermediate result, the ASHA rungs and the states. Each change is one
// transaction, committed before the executor acts on it, so `strato tune` killed at any instant
// and started again continues the same study: no finished trial runs twice, none is lost.
//
// Not thread-safe: one Store per executor thread.

#include <sqlite3.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/tune/space.h"

namespace strato::tune {

enum class TrialState { kRunning, kPaused, kCompleted, kStopped, kFailed };
const char* state_name(TrialState s);

struct Trial {
    int id = 0;
    Assignment params;
    TrialState state = TrialState::kRunning;
    int target = 0;      // epochs this segment trains to
    int epochs = 0;      // epochs finished (last eval line)
    std::optional<double> best, last;  // the metric, raw
    std::string error;
};

struct RungEntry {
    int rung = 0, trial = 0;
    double value = 0;
    bool promoted = false;
};

class Store {
public:
    static Result<std::unique_ptr<Store>> open(const std::string& path);
    ~Store();

    /// Records the study definition; a different one for an existing study is an error.
    Status bind_study(const std::string& fingerprint);

    Result<int> add_trial(const Assignment& params, int target);  // state running
    Status set_state(int trial, TrialState state, const std::string& error = {});
    /// Promotes `trial` from `rung`: marks the rung entry and sets the trial running to `target`.
    Status promote(int rung, int trial, int target);
    /// Records a result (ignored when that epoch is already there) and updates best/last/epochs.
    Status add_result(int trial, int epoch, double value, bool maximize);
    Status add_rung(int rung, int trial, double value);

    Result<std::vector<Trial>> trials();
    Result<std::vector<RungEntry>> rung(int rung);
    Result<std::vector<std::pair<int, double>>> results(int trial);
    /// Every trial's value at `epoch` (trial, value).
    Result<std::vector<std::pair<int, double>>> results_at(int epoch);

private:
    explicit Store(sqlite3* db) : db_(db) {}
    Status exec(const std::string& sql);
    sqlite3* db_;
};

}  // namespace strato::tune
