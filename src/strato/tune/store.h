#pragma once
// The study store: one SQLite database (synchronous=FULL) holding the trials, their parameters,
// every intermediate result, the ASHA rungs, the states and which executor owns each running
// trial. Each change is one transaction, committed before the executor acts on it, so `strato
// tune` killed at any instant and started again continues the same study: no finished trial
// runs twice, none is lost. Several executors (a Slurm array, or two `strato tune run` on one
// directory) share one study: decisions are made inside BEGIN IMMEDIATE transactions.
//
// Journal: WAL for a study on one machine; the rollback journal ("delete") for a study shared by
// executors on several hosts, since WAL's index lives in shared memory of one host. The mode is
// chosen when the database is created (or changed with set_journal) and kept in the file.
//
// Not thread-safe: one Store per executor thread.

#include <sqlite3.h>

#include <functional>
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
    int bracket = 0;     // ASHA bracket
    std::optional<double> best, last;  // the metric, raw
    std::string error;
    std::string owner;   // the executor running it ("host:pid:start"); empty when none
    double heartbeat = 0;  // unix seconds of the owner's last sign of life
};

struct RungEntry {
    int bracket = 0, rung = 0, trial = 0;
    double value = 0;
    bool promoted = false;
};

class Store {
public:
    /// Opens or creates the store; a new database gets WAL, or the rollback journal if `shared`.
    static Result<std::unique_ptr<Store>> open(const std::string& path, bool shared = false);
    /// Opens an existing study for reading only (status, best, report): no schema set-up and
    /// no locks taken for writing, so a study on a read-only disk or in another user's
    /// directory can be read. A WAL study whose -shm cannot be created is read as immutable.
    /// A study from before brackets and owners is read as `open` would migrate it (bracket 0,
    /// no owner), through temporary views: the file is not changed.
    static Result<std::unique_ptr<Store>> open_read_only(const std::string& path);
    ~Store();

    /// The database file, for messages.
    const std::string& path() const { return path_; }

    /// A recorded part of the study's identity (meta table: "study", "base_config", "tpe"), if any.
    Result<std::optional<std::string>> meta(const std::string& key);
    /// Records `value` under `key` unless something is recorded there already.
    Status add_meta(const std::string& key, const std::string& value);
    /// "wal" or "delete" (needs no other connection open).
    Status set_journal(const std::string& mode);
    Result<std::string> journal();

    /// Runs `body` in one write transaction (BEGIN IMMEDIATE); nested calls join the outer one.
    /// Rolled back when `body` fails or the commit does.
    Status transaction(const std::function<Status()>& body);

    /// A new trial, running, owned by `owner`.
    Result<int> add_trial(const Assignment& params, int target, int bracket, const std::string& owner);
    /// Sets the state; any state but running also clears the owner.
    Status set_state(int trial, TrialState state, const std::string& error = {});
    /// Takes (or gives up, with an empty owner) a trial and stamps the heartbeat.
    Status set_owner(int trial, const std::string& owner);
    /// Stamps the heartbeat of every running trial `owner` holds.
    Status heartbeat(const std::string& owner);
    /// Promotes `trial` from `rung` of its bracket: marks the rung entry and sets the trial
    /// running to `target`, owned by `owner`.
    Status promote(int bracket, int rung, int trial, int target, const std::string& owner);
    /// Records a result and updates best/last/epochs; false when that epoch was already there.
    Result<bool> add_result(int trial, int epoch, double value, bool maximize);
    Status add_rung(int bracket, int rung, int trial, double value);

    Result<std::vector<Trial>> trials();
    Result<std::vector<RungEntry>> rung(int bracket, int rung);
    Result<std::vector<std::pair<int, double>>> results(int trial);
    /// The value at `epoch` (trial, value) of every trial that has not failed: what a crashed
    /// trial reported before it crashed is no outcome of its configuration (the median rule).
    Result<std::vector<std::pair<int, double>>> results_at_without_failed(int epoch);

private:
    Store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
    Status exec(const std::string& sql);
    /// Whether `count_sql` (a SELECT count(*)) counts any row; whether `table` has `column`.
    bool any_row(const std::string& count_sql);
    bool has_column(const char* table, const char* column);
    Status migrate();
    /// For a read-only store from before brackets and owners: temporary views with the defaults.
    Status read_old_schema();
    sqlite3* db_;
    std::string path_;
    int depth_ = 0;  // transaction nesting
};

}  // namespace strato::tune
