#include "strato/tune/store.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "strato/core/json.h"
#include "strato/core/json_depth.h"

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

std::optional<TrialState> parse_state(const std::string& s) {
    for (auto st : {TrialState::kRunning, TrialState::kPaused, TrialState::kCompleted, TrialState::kStopped,
                    TrialState::kFailed})
        if (s == state_name(st)) return st;
    return std::nullopt;
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr int kBusyTimeoutMs = 30000;

/// PRAGMA journal_mode=MODE, tried again for up to `wait_ms` while the database is busy. Leaving
/// the rollback journal needs the file to itself, and SQLite does not wait for that through the
/// busy handler: another connection merely reading the file makes it fail at once with
/// SQLITE_BUSY ("database is locked").
int switch_journal(sqlite3* db, const std::string& mode, int wait_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    const std::string sql = "PRAGMA journal_mode=" + mode;
    for (;;) {
        int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
        if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline) return rc;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
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

/// Why the database is not a study store strato may read or write, or "" when it is one (or is
/// empty); an error when it cannot be read (not a database, damaged). A study's tables are meta,
/// trials, results and rungs, with at least the columns of the oldest studies: any other table is
/// another program's (an Optuna study.db has `trials` too, and `tune run` added its tables and
/// columns to it, then failed on "no such column: id").
Result<std::string> foreign_schema(sqlite3* db, const std::string& path) {
    static const std::pair<const char*, std::vector<const char*>> kTables[] = {
        {"meta", {"key", "value"}},
        {"trials", {"id", "params", "state", "target", "epochs", "best", "last", "error"}},
        {"results", {"trial", "epoch", "value"}},
        {"rungs", {"rung", "trial", "value", "promoted"}}};
    std::vector<std::string> others;
    std::string missing;
    Stmt q(db, "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
               "ORDER BY name");
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
        const std::string name = q.text(0);
        const auto known =
            std::find_if(std::begin(kTables), std::end(kTables), [&](const auto& t) { return name == t.first; });
        if (known == std::end(kTables)) {
            others.push_back(name);
            continue;
        }
        for (const char* column : known->second) {
            Stmt c(db, "SELECT count(*) FROM pragma_table_info(?) WHERE name = ?");
            c.bind(1, name).bind(2, std::string(column));
            if (missing.empty() && (c.step() != SQLITE_ROW || c.i64(0) == 0))
                missing = fmt::format("its table {} has no column {}", name, column);
        }
    }
    if (rc != SQLITE_DONE) return io_error("cannot read the study store {}: {}", path, sqlite3_errmsg(db));
    if (!others.empty()) {
        std::string list;
        for (size_t i = 0; i < others.size() && i < 5; ++i) list += (i ? ", " : "") + others[i];
        if (others.size() > 5) list += fmt::format(" and {} more", others.size() - 5);
        return fmt::format("it holds table(s) {} that no strato study has (another program's database, such as an "
                           "Optuna study?)",
                           list);
    }
    return missing;
}

Status not_a_study(const std::string& path, const std::string& why) {
    return invalid_argument("{} is not a strato study store: {}; it was left as it is\nhint: give the study another "
                            "--dir (or another [study] name)",
                            path, why);
}

}  // namespace

Result<std::unique_ptr<Store>> Store::open(const std::string& path, bool shared) {
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
        std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
        sqlite3_close(db);
        return io_error("cannot open the study store {}: {}", path, msg);
    }
    sqlite3_busy_timeout(db, kBusyTimeoutMs);
    std::unique_ptr<Store> s(new Store(db, path));
    // Before anything is written: another program's database stays as it was.
    STRATO_ASSIGN_OR_RETURN(const std::string foreign, foreign_schema(db, path));
    if (!foreign.empty()) return not_a_study(path, foreign);
    bool fresh = false;
    {
        Stmt q(db, "SELECT count(*) FROM sqlite_master WHERE name = 'trials'");
        if (q.step() != SQLITE_ROW) return io_error("cannot read the study store {}: {}", path, sqlite3_errmsg(db));
        fresh = q.i64(0) == 0;
    }
    if (fresh) {
        // Executors started together on a new study all get here: while one switches the journal
        // the others' reads make it busy, so wait as for any lock (the last to switch finds it done).
        const std::string mode = shared ? "delete" : "wal";
        if (switch_journal(db, mode, kBusyTimeoutMs) != SQLITE_OK)
            return io_error("cannot set up the study store {}: {}", path, sqlite3_errmsg(db));
        STRATO_ASSIGN_OR_RETURN(std::string now, s->journal());
        if (now != mode) return io_error("cannot set up the study store {}: its journal stays {}, not {}", path, now, mode);
    }
    STRATO_RETURN_IF_ERROR(s->exec(
        "PRAGMA synchronous=FULL;"
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
        "CREATE TABLE IF NOT EXISTS trials(id INTEGER PRIMARY KEY, params TEXT NOT NULL, state TEXT NOT NULL,"
        " target INTEGER NOT NULL, epochs INTEGER NOT NULL DEFAULT 0, best REAL, last REAL, error TEXT,"
        " bracket INTEGER NOT NULL DEFAULT 0, owner TEXT, heartbeat REAL);"
        "CREATE TABLE IF NOT EXISTS results(trial INTEGER, epoch INTEGER, value REAL, PRIMARY KEY(trial, epoch));"
        "CREATE TABLE IF NOT EXISTS rungs(rung INTEGER, trial INTEGER, value REAL, promoted INTEGER DEFAULT 0,"
        " bracket INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(rung, trial));"));
    STRATO_RETURN_IF_ERROR(s->migrate());
    return s;
}

Result<std::unique_ptr<Store>> Store::open_read_only(const std::string& path) {
    std::string escaped;  // a URI: '%', '?' and '#' in the path are escaped
    for (char c : path) escaped += c == '%' ? "%25" : c == '?' ? "%3f" : c == '#' ? "%23" : std::string(1, c);
    std::string last;
    for (const char* how : {"mode=ro", "immutable=1"}) {
        sqlite3* db = nullptr;
        const std::string uri = fmt::format("file:{}?{}", escaped, how);
        if (sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) != SQLITE_OK) {
            last = db ? sqlite3_errmsg(db) : "out of memory";
            sqlite3_close(db);
            continue;
        }
        sqlite3_busy_timeout(db, kBusyTimeoutMs);
        std::unique_ptr<Store> s(new Store(db, path));
        Stmt q(db, "SELECT count(*) FROM sqlite_master WHERE name = 'trials'");
        if (q.step() == SQLITE_ROW) {
            STRATO_ASSIGN_OR_RETURN(const std::string foreign, foreign_schema(db, path));
            if (!foreign.empty()) return not_a_study(path, foreign);
            if (q.i64(0) == 0) return invalid_argument("{} is not a study store (no trials table)", path);
            STRATO_RETURN_IF_ERROR(s->read_old_schema());
            return s;
        }
        last = sqlite3_errmsg(db);
    }
    return io_error("cannot read the study store {}: {}", path, last);
}

Store::~Store() { sqlite3_close(db_); }

Status Store::read_old_schema() {
    // Temporary objects live in the connection's own temp schema, never in the file, and shadow
    // the file's tables of the same name: the queries below read an old study as migrate()
    // would leave it (status, best and report failed on "no such column: bracket").
    Status s;
    if (!has_column("trials", "bracket"))
        s = exec("CREATE TEMP VIEW trials AS SELECT *, 0 AS bracket, NULL AS owner, NULL AS heartbeat FROM main.trials");
    if (s.is_ok() && !has_column("rungs", "bracket"))
        s = exec("CREATE TEMP VIEW rungs AS SELECT *, 0 AS bracket FROM main.rungs");
    if (s.is_ok() && !any_row("SELECT count(*) FROM sqlite_master WHERE name = 'meta'"))
        s = exec("CREATE TEMP TABLE meta(key TEXT PRIMARY KEY, value TEXT)");
    if (s.is_ok() && !any_row("SELECT count(*) FROM sqlite_master WHERE name = 'results'"))
        s = exec("CREATE TEMP TABLE results(trial INTEGER, epoch INTEGER, value REAL, PRIMARY KEY(trial, epoch))");
    if (!s.is_ok())
        return Status(s.code(), s.message() + "\nhint: `strato tune run` on the study once upgrades its store");
    return Status::ok();
}

Status Store::migrate() {
    // Studies made before brackets and owners existed gain the columns with their defaults.
    // In one write transaction, checked again inside it: executors opening an old study at once.
    return transaction([&]() -> Status {
        if (!has_column("trials", "bracket"))
            STRATO_RETURN_IF_ERROR(exec("ALTER TABLE trials ADD COLUMN bracket INTEGER NOT NULL DEFAULT 0;"
                                        "ALTER TABLE trials ADD COLUMN owner TEXT; ALTER TABLE trials ADD COLUMN heartbeat REAL;"));
        if (!has_column("rungs", "bracket"))
            STRATO_RETURN_IF_ERROR(exec("ALTER TABLE rungs ADD COLUMN bracket INTEGER NOT NULL DEFAULT 0"));
        return Status::ok();
    });
}

bool Store::any_row(const std::string& count_sql) {
    Stmt q(db_, count_sql.c_str());
    return q.step() == SQLITE_ROW && q.i64(0) > 0;
}

bool Store::has_column(const char* table, const char* column) {
    return any_row(fmt::format("SELECT count(*) FROM pragma_table_info('{}') WHERE name = '{}'", table, column));
}

Status Store::exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : sqlite3_errmsg(db_);
        sqlite3_free(err);
        return io_error("study store: {}", msg);
    }
    return Status::ok();
}

Status Store::set_journal(const std::string& mode) {
    if (mode != "wal" && mode != "delete") return invalid_argument("study store: journal must be wal or delete");
    STRATO_RETURN_IF_ERROR(exec("PRAGMA journal_mode=" + mode));
    STRATO_ASSIGN_OR_RETURN(std::string now, journal());
    if (now != mode)
        return io_error("study store: cannot switch the journal to {} (it stays {}); is another process using the study?",
                        mode, now);
    return Status::ok();
}

Result<std::string> Store::journal() {
    Stmt q(db_, "PRAGMA journal_mode");
    if (q.step() != SQLITE_ROW) return io_error("study store: reading the journal mode: {}", sqlite3_errmsg(db_));
    return q.text(0);
}

Status Store::transaction(const std::function<Status()>& body) {
    if (depth_ > 0) return body();
    STRATO_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    ++depth_;
    Status s = body();
    --depth_;
    if (s.is_ok()) s = exec("COMMIT");
    if (!s.is_ok()) (void)exec("ROLLBACK");  // also after a failed COMMIT, which leaves it open
    return s;
}

Result<std::optional<std::string>> Store::meta(const std::string& key) {
    Stmt q(db_, "SELECT value FROM meta WHERE key = ?");
    q.bind(1, key);
    const int rc = q.step();
    if (rc == SQLITE_ROW) return std::optional<std::string>(q.text(0));
    if (rc != SQLITE_DONE) return io_error("study store: reading the study's {}: {}", key, sqlite3_errmsg(db_));
    return std::optional<std::string>();
}

Status Store::add_meta(const std::string& key, const std::string& value) {
    return Stmt(db_, "INSERT OR IGNORE INTO meta(key, value) VALUES(?, ?)")
        .bind(1, key)
        .bind(2, value)
        .run("recording the study");
}

Result<int> Store::add_trial(const Assignment& params, int target, int bracket, const std::string& owner) {
    nlohmann::json j(params);
    STRATO_RETURN_IF_ERROR(
        Stmt(db_, "INSERT INTO trials(params, state, target, bracket, owner, heartbeat) VALUES(?, 'running', ?, ?, ?, ?)")
            .bind(1, json_text(j))
            .bind(2, int64_t{target})
            .bind(3, int64_t{bracket})
            .bind(4, owner)
            .bind(5, now_s())
            .run("adding a trial"));
    return static_cast<int>(sqlite3_last_insert_rowid(db_));
}

Status Store::set_state(int trial, TrialState state, const std::string& error) {
    return Stmt(db_, state == TrialState::kRunning ? "UPDATE trials SET state = ?, error = ? WHERE id = ?"
                                                   : "UPDATE trials SET state = ?, error = ?, owner = NULL WHERE id = ?")
        .bind(1, std::string(state_name(state)))
        .bind(2, error)
        .bind(3, int64_t{trial})
        .run("updating a trial");
}

Status Store::set_owner(int trial, const std::string& owner) {
    Stmt q(db_, owner.empty() ? "UPDATE trials SET owner = NULL, heartbeat = ?1 WHERE id = ?2"
                              : "UPDATE trials SET owner = ?3, heartbeat = ?1 WHERE id = ?2");
    q.bind(1, now_s()).bind(2, int64_t{trial});
    if (!owner.empty()) q.bind(3, owner);
    return q.run("taking a trial");
}

Status Store::heartbeat(const std::string& owner) {
    return Stmt(db_, "UPDATE trials SET heartbeat = ? WHERE owner = ? AND state = 'running'")
        .bind(1, now_s())
        .bind(2, owner)
        .run("heartbeat");
}

Status Store::promote(int bracket, int rung, int trial, int target, const std::string& owner) {
    return transaction([&]() -> Status {
        STRATO_RETURN_IF_ERROR(Stmt(db_, "UPDATE rungs SET promoted = 1 WHERE bracket = ? AND rung = ? AND trial = ?")
                                   .bind(1, int64_t{bracket})
                                   .bind(2, int64_t{rung})
                                   .bind(3, int64_t{trial})
                                   .run("promoting"));
        return Stmt(db_, "UPDATE trials SET state = 'running', target = ?, owner = ?, heartbeat = ? WHERE id = ?")
            .bind(1, int64_t{target})
            .bind(2, owner)
            .bind(3, now_s())
            .bind(4, int64_t{trial})
            .run("promoting");
    });
}

Result<bool> Store::add_result(int trial, int epoch, double value, bool maximize) {
    bool inserted = false;
    Status s = transaction([&]() -> Status {
        STRATO_RETURN_IF_ERROR(Stmt(db_, "INSERT OR IGNORE INTO results(trial, epoch, value) VALUES(?, ?, ?)")
                                   .bind(1, int64_t{trial})
                                   .bind(2, int64_t{epoch})
                                   .bind(3, value)
                                   .run("recording a result"));
        inserted = sqlite3_changes(db_) > 0;
        if (!inserted) return Status::ok();
        return Stmt(db_, maximize ? "UPDATE trials SET epochs = max(epochs, ?1), last = (SELECT value FROM results WHERE "
                                    "trial = ?2 ORDER BY epoch DESC LIMIT 1), best = (SELECT max(value) FROM results "
                                    "WHERE trial = ?2) WHERE id = ?2"
                                  : "UPDATE trials SET epochs = max(epochs, ?1), last = (SELECT value FROM results WHERE "
                                    "trial = ?2 ORDER BY epoch DESC LIMIT 1), best = (SELECT min(value) FROM results "
                                    "WHERE trial = ?2) WHERE id = ?2")
            .bind(1, int64_t{epoch})
            .bind(2, int64_t{trial})
            .run("recording a result");
    });
    if (!s.is_ok()) return s;
    return inserted;
}

Status Store::add_rung(int bracket, int rung, int trial, double value) {
    return Stmt(db_, "INSERT OR IGNORE INTO rungs(bracket, rung, trial, value) VALUES(?, ?, ?, ?)")
        .bind(1, int64_t{bracket})
        .bind(2, int64_t{rung})
        .bind(3, int64_t{trial})
        .bind(4, value)
        .run("recording a rung");
}

Result<std::vector<Trial>> Store::trials() {
    std::vector<Trial> out;
    Stmt q(db_, "SELECT id, params, state, target, epochs, best, last, error, bracket, owner, heartbeat FROM trials "
                "ORDER BY id");
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
        Trial t;
        t.id = static_cast<int>(q.i64(0));
        // A trial's parameters are what it ran with: damaged ones are an error, not a trial that
        // silently ran with the base config's values (export-best wrote those).
        auto j = parse_json_bounded(q.text(1));
        if (!j.is_object())
            return data_loss("study store {}: trial {}'s parameters are not a JSON object (the study database is "
                             "damaged)",
                             path_, t.id);
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (!it->is_string())
                return data_loss("study store {}: trial {}'s parameter {} is {}, not a value (the study database is "
                                 "damaged)",
                                 path_, t.id, it.key(), it->type_name());
            t.params[it.key()] = it->get<std::string>();
        }
        // (an unknown state read as "failed": a hand-edited 'COMPLETE' hid the study's best trial)
        const auto state = parse_state(q.text(2));
        if (!state)
            return data_loss("study store {}: trial {}'s state is '{}', not running, paused, completed, stopped or "
                             "failed (the study database is damaged or was edited by hand)",
                             path_, t.id, q.text(2));
        t.state = *state;
        t.target = static_cast<int>(q.i64(3));
        t.epochs = static_cast<int>(q.i64(4));
        if (!q.null(5)) t.best = q.dbl(5);
        if (!q.null(6)) t.last = q.dbl(6);
        t.error = q.text(7);
        t.bracket = static_cast<int>(q.i64(8));
        t.owner = q.text(9);
        t.heartbeat = q.null(10) ? 0 : q.dbl(10);
        out.push_back(std::move(t));
    }
    if (rc != SQLITE_DONE) return io_error("study store: reading trials: {}", sqlite3_errmsg(db_));
    return out;
}

Result<std::vector<RungEntry>> Store::rung(int bracket, int rung) {
    std::vector<RungEntry> out;
    Stmt q(db_, "SELECT bracket, rung, trial, value, promoted FROM rungs WHERE bracket = ? AND rung = ? ORDER BY trial");
    q.bind(1, int64_t{bracket}).bind(2, int64_t{rung});
    int rc;
    while ((rc = q.step()) == SQLITE_ROW)
        out.push_back({static_cast<int>(q.i64(0)), static_cast<int>(q.i64(1)), static_cast<int>(q.i64(2)), q.dbl(3),
                       q.i64(4) != 0});
    if (rc != SQLITE_DONE) return io_error("study store: reading rung {}: {}", rung, sqlite3_errmsg(db_));
    return out;
}

Result<std::vector<std::pair<int, double>>> Store::results(int trial) {
    std::vector<std::pair<int, double>> out;
    Stmt q(db_, "SELECT epoch, value FROM results WHERE trial = ? ORDER BY epoch");
    q.bind(1, int64_t{trial});
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) out.emplace_back(static_cast<int>(q.i64(0)), q.dbl(1));
    if (rc != SQLITE_DONE) return io_error("study store: reading results: {}", sqlite3_errmsg(db_));
    return out;
}

Result<std::vector<std::pair<int, double>>> Store::results_at_without_failed(int epoch) {
    std::vector<std::pair<int, double>> out;
    Stmt q(db_, "SELECT r.trial, r.value FROM results r JOIN trials t ON t.id = r.trial WHERE r.epoch = ? AND "
                "t.state != 'failed' ORDER BY r.trial");
    q.bind(1, int64_t{epoch});
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) out.emplace_back(static_cast<int>(q.i64(0)), q.dbl(1));
    if (rc != SQLITE_DONE) return io_error("study store: reading results: {}", sqlite3_errmsg(db_));
    return out;
}

}  // namespace strato::tune
