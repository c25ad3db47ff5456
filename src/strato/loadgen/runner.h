#pragma once
// Measurement plans on top of LoadSession: one load level measured for a duration, a request
// count, or until perf_analyzer's stability rule holds (three consecutive windows whose
// throughput and mean latency agree within a tolerance); sweeps over levels; the search for the
// highest request rate that meets a p99 latency objective; and the outputs (console table,
// perf_analyzer-style CSV, JSON that `strato report` renders).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strato/core/duration.h"
#include "strato/core/status.h"
#include "strato/loadgen/load.h"
#include "strato/loadgen/oip_target.h"

namespace strato::loadgen {

struct RunOptions {
    LoadOptions load;                 // mode, threads, timeout, seed...; the level is set per point
    double duration_s = 10;           // per level, after the warm-up (fixed mode)
    int64_t requests = -1;            // per level instead of a duration (> 0)
    double warmup_s = 1;
    double stability_pct = 0;         // > 0: measure windows until 3 in a row agree within this %
    double window_s = 5;              // stability window (perf_analyzer's --measurement-interval)
    int max_trials = 10;              // stability windows at most
    double grace_s = 2;               // wait for outstanding requests after a point's deadline
    int64_t batch_size = 1;           // inferences per request (for inferences/s)
    std::function<Result<ServerStats>()> server_stats;  // optional: read before and after
    std::function<void(const std::string&)> progress;   // optional: one line per window/point
    std::function<bool()> interrupted;                  // optional: stop early (Ctrl-C)
};

/// One window of a run that follows a schedule (--trace, --request-intervals).
struct TimelineEntry {
    double t_s = 0;           // end of the window, from the start of the schedule
    double asked = 0;         // requests/s the schedule asked for in it
    double throughput = 0;    // 2xx answers/s
    int64_t p50_ns = 0, p99_ns = 0;
    int64_t errors = 0;
};

/// One measured load level.
struct PointResult {
    bool rate_mode = false;
    double level = 0;               // concurrency or requests/s asked for
    Measurement m;
    std::optional<ServerBreakdown> server;
    int windows = 1;
    bool stable = true;             // false: stability was asked for and not reached
    bool interrupted = false;       // Ctrl-C cut it short: a partial measurement, not the level's
    std::vector<TimelineEntry> timeline;  // with a schedule: one entry per --measurement-interval
};

/// Measures one level. Ctrl-C (`options.interrupted`) ends it early, the grace wait too, and marks
/// it `interrupted`; in the warm-up, with nothing measured (empty counts).
Result<PointResult> run_point(const Target& target, const RunOptions& options, double level);

/// Runs every level in order; stops early (returning what it has, the level cut short marked
/// `interrupted`) when interrupted. A level that
/// fails after others were measured: with `failed`, the error goes there and the points measured
/// so far are returned (minutes of measuring are not thrown away); without it, the error.
Result<std::vector<PointResult>> run_sweep(const Target& target, const RunOptions& options,
                                           const std::vector<double>& levels, Status* failed = nullptr);

/// The highest open-loop request rate whose p99 latency meets `slo_p99_ns` with no errors and
/// the rate actually delivered (>= 90 % of the asked rate): doubling from `start_rate`, then
/// bisection to within 5 %. `probes` keeps every measured point. A probe cut short by Ctrl-C
/// (`interrupted`) is judged neither way and ends the search: `found`/`best_rate` then come from
/// the complete probes before it.
struct SloResult {
    int64_t slo_p99_ns = 0;
    bool found = false;
    double best_rate = 0;
    std::optional<PointResult> best;
    std::vector<PointResult> probes;
    bool capped = false;       // the objective was met at --max-rate itself: the limit lies beyond it
    bool interrupted = false;  // Ctrl-C ended the search before it converged
    // A probe that could not start after others were measured (out of file descriptors, the name
    // no longer resolving): the search stopped there; `probes` and `found` are what came before.
    Status failed;
};
Result<SloResult> slo_search(const Target& target, const RunOptions& options, int64_t slo_p99_ns, double start_rate,
                             double max_rate);

/// Why a probe misses the objective, or "" when it meets it.
std::string slo_miss_reason(const PointResult& p, int64_t slo_p99_ns);

/// Parses a level list "1:64:x2" (start:end[:step|xFACTOR]) or "1,2,8"; integers when `integer`.
/// Levels from START:END[:STEP|xFACTOR] or a list; each positive, finite and at most `max`.
Result<std::vector<double>> parse_range(const std::string& text, bool integer, double max = 1e7);

/// Console table of the points (one row each) plus the error breakdown.
std::string format_table(const std::vector<PointResult>& points);
/// perf_analyzer's CSV: columns in its names and order, microseconds, rows sorted by throughput.
std::string format_csv(const std::vector<PointResult>& points, int64_t batch_size);
/// Everything measured, for --json and `strato report`: {"kind": "strato-loadtest", ...}.
nlohmann::json to_json(const std::vector<PointResult>& points, const std::string& target, const RunOptions& options,
                       const std::optional<SloResult>& slo);

}  // namespace strato::loadgen
