#include "strato/tune/store.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace strato::tune {

const char* state_name(TrialState s) {
    switch (s) {
        case TrialState::kRunning: return "running";
        case TrialState::kPaused: return "paused";
        case TrialState::kCompleted: return "completed";
        case TrialState::kStopped: return "stopped";
        case TrialState::kFailed: return "failed";
    }
    return "?";
}

namespace {

TrialState parse_state(const std::string& s) {
    for (auto st : {TrialState::kRunning, TrialState::kPaused, TrialState::kCompleted, TrialState::kStopped,
                    TrialState::kFailed})
        if (s == state_name(st)) return st;
    return TrialState::kFailed;
}

/// A prepared statement that finalises itself.
class Stmt {
public:
    Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
    ~Stmt() { sqlite3_finalize(s_); }
    Stmt& bind(int i, int64_t v) { return sqlite3_bind_int64(s_, i, v), *this; }
    Stmt& bind(int i, double v) { return sqlite3_bind_double(s_, i, v), *this; }
    Stmt& bind(int i, const std::string& v) { return sqlite3_bind_text(s_, i, v.c_str(), -1, SQLITE_TRANSIENT), *this; }
    /// SQLITE_ROW, SQLITE_DONE or an error code.
    int step() { return rc_ != SQLITE_OK ? rc_ : sqlite3_step(s_); }
    Status run(const char* what) {
        int rc = step();
        if (rc != SQLITE_DONE && rc != SQLITE_ROW) return io_error("study store: {}: {}", what, sqlite3_errmsg(db_));
        return Status::ok();
    }
    int64_t i64(int c) { return sqlite3_column_int64(s_, c); }
    double dbl(int c) { return sqlite3_column_double(s_, c); }
    bool null(int c) { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
    std::string text(int c) {
        auto* t = sqlite3_column_text(s_, c);
        return t ? reinterpret_cast<const char*>(t) : "";
    }

private:
    sqlite3* db_;
    sqlite3_stmt* s_ = nullptr;
    int rc_ = SQLITE_OK;
};

}  // namespace

Result<std::unique_ptr<Store>> Store::open(const std::string& path) {
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
        std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
        sqlite3_close(db);
        return io_error("cannot open the study store {}: {}", path, msg);
    }
    sqlite3_busy_timeout(db, 10000);
    std::unique_ptr<Store> s(new Store(db));
    STRATO_RETURN_IF_ERROR(s->exec(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
        "CREATE TABLE IF NOT EXISTS trials(id INTEGER PRIMARY KEY, params TEXT NOT NULL, state TEXT NOT NULL,"
        " target INTEGER NOT NULL, epochs INTEGER NOT NULL DEFAULT 0, best REAL, last REAL, error TEXT);"
        "CREATE TABLE IF NOT EXISTS results(trial INTEGER, epoch INTEGER, value REAL, PRIMARY KEY(trial, epoch));"
        "CREATE TABLE IF NOT EXISTS rungs(rung INTEGER, trial INTEGER, value REAL, promoted INTEGER DEFAULT 0,"
        " PRIMARY KEY(rung, trial));"));
    return s;
}

Store::~Store() { sqlite3_close(db_); }

Status Store::exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        return io_error("study store: {}", msg);
    }
    return Status::ok();
}

Status Store::bind_study(const std::string& fingerprint) {
    Stmt q(db_, "SELECT value FROM meta WHERE key = 'study'");
    if (q.step() == SQLITE_ROW) {
        if (q.text(0) != fingerprint)
            return invalid_argument("this study directory holds a different study (its [study], [scheduler] or [params] "
                                    "changed); use a new --dir or restore the original file");
        return Status::ok();
    }
    return Stmt(db_, "INSERT INTO meta(key, value) VALUES('study', ?)").bind(1, fingerprint).run("recording the study");
}

Result<int> Store::add_trial(const Assignment& params, int target) {
    nlohmann::json j(params);
    STRATO_RETURN_IF_ERROR(Stmt(db_, "INSERT INTO trials(params, state, target) VALUES(?, 'running', ?)")
                               .bind(1, j.dump())
                               .bind(2, int64_t{target})
                               .run("adding a trial"));
    return static_cast<int>(sqlite3_last_insert_rowid(db_));
}

Status Store::set_state(int trial, TrialState state, const std::string& error) {
    return Stmt(db_, "UPDATE trials SET state = ?, error = ? WHERE id = ?")
        .bind(1, std::string(state_name(state)))
        .bind(2, error)
        .bind(3, int64_t{trial})
        .run("updating a trial");
}

Status Store::promote(int rung, int trial, int target) {
    STRATO_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    Status s = Stmt(db_, "UPDATE rungs SET promoted = 1 WHERE rung = ? AND trial = ?")
                   .bind(1, int64_t{rung})
                   .bind(2, int64_t{trial})
                   .run("promoting");
    if (s.is_ok())
        s = Stmt(db_, "UPDATE trials SET state = 'running', target = ? WHERE id = ?")
                .bind(1, int64_t{target})
                .bind(2, int64_t{trial})
                .run("promoting");
    if (!s.is_ok()) {
        (void)exec("ROLLBACK");
        return s;
    }
    return exec("COMMIT");
}

Status Store::add_result(int trial, int epoch, double value, bool maximize) {
    STRATO_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    Status s = Stmt(db_, "INSERT OR IGNORE INTO results(trial, epoch, value) VALUES(?, ?, ?)")
                   .bind(1, int64_t{trial})
                   .bind(2, int64_t{epoch})
                   .bind(3, value)
                   .run("recording a result");
    if (s.is_ok())
        s = Stmt(db_, maximize ? "UPDATE trials SET epochs = max(epochs, ?1), last = (SELECT value FROM results WHERE "
                                 "trial = ?2 ORDER BY epoch DESC LIMIT 1), best = (SELECT max(value) FROM results WHERE "
                                 "trial = ?2) WHERE id = ?2"
                               : "UPDATE trials SET epochs = max(epochs, ?1), last = (SELECT value FROM results WHERE "
                                 "trial = ?2 ORDER BY epoch DESC LIMIT 1), best = (SELECT min(value) FROM results WHERE "
                                 "trial = ?2) WHERE id = ?2")
                .bind(1, int64_t{epoch})
                .bind(2, int64_t{trial})
                .run("recording a result");
    if (!s.is_ok()) {
        (void)exec("ROLLBACK");
        return s;
    }
    return exec("COMMIT");
}

Status Store::add_rung(int rung, int trial, double value) {
    return Stmt(db_, "INSERT OR IGNORE INTO rungs(rung, trial, value) VALUES(?, ?, ?)")
        .bind(1, int64_t{rung})
        .bind(2, int64_t{trial})
        .bind(3, value)
        .run("recording a rung");
}

Result<std::vector<Trial>> Store::trials() {
    std::vector<Trial> out;
    Stmt q(db_, "SELECT id, params, state, target, epochs, best, last, error FROM trials ORDER BY id");
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
        Trial t;
        t.id = static_cast<int>(q.i64(0));
        auto j = nlohmann::json::parse(q.text(1), nullptr, false);
        if (j.is_object())
            for (auto it = j.begin(); it != j.end(); ++it) t.params[it.key()] = it->get<std::string>();
        t.state = parse_state(q.text(2));
        t.target = static_cast<int>(q.i64(3));
        t.epochs = static_cast<int>(q.i64(4));
        if (!q.null(5)) t.best = q.dbl(5);
        if (!q.null(6)) t.last = q.dbl(6);
        t.error = q.text(7);
        out.push_back(std::move(t));
    }
    if (rc != SQLITE_DONE) return io_error("study store: reading trials: {}", sqlite3_errmsg(db_));
    return out;
}

Result<std::vector<RungEntry>> Store::rung(int rung) {
    std::vector<RungEntry> out;
    Stmt q(db_, "SELECT rung, trial, value, promoted FROM rungs WHERE rung = ? ORDER BY trial");
    q.bind(1, int64_t{rung});
    while (q.step() == SQLITE_ROW)
        out.push_back({static_cast<int>(q.i64(0)), static_cast<int>(q.i64(1)), q.dbl(2), q.i64(3) != 0});
    return out;
}

Result<std::vector<std::pair<int, double>>> Store::results(int trial) {
    std::vector<std::pair<int, double>> out;
    Stmt q(db_, "SELECT epoch, value FROM results WHERE trial = ? ORDER BY epoch");
    q.bind(1, int64_t{trial});
    while (q.step() == SQLITE_ROW) out.emplace_back(static_cast<int>(q.i64(0)), q.dbl(1));
    return out;
}

Result<std::vector<std::pair<int, double>>> Store::results_at(int epoch) {
    std::vector<std::pair<int, double>> out;
    Stmt q(db_, "SELECT trial, value FROM results WHERE epoch = ? ORDER BY trial");
    q.bind(1, int64_t{epoch});
    while (q.step() == SQLITE_ROW) out.emplace_back(static_cast<int>(q.i64(0)), q.dbl(1));
    return out;
}

}  // namespace strato::tune
