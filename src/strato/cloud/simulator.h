#pragma once
// A discrete-event cluster simulator: replays a load trace (work arriving per second, plus
// explicit spot preemptions) against the autoscaling policies, with nodes that take time to boot,
// spot nodes preempted at the catalog's rate (replaced, or replaced on-demand when spot is off),
// a fluid work queue, and per-second billing. Out come cost, SLO violations (queueing delay
// above the objective), utilisation and node-count timelines.
//
// Trace CSV: a header with `time_s` and `rate` (work units per second from that time on) and an
// optional `preempt` (spot nodes reclaimed at that time):
//     time_s,rate,preempt
//     0,800,0
//     3600,5200,0
//     5400,5200,2
//
//     SimResult r = simulate(trace, options).value();
//
// Deterministic for a seed. Not thread-safe; run one simulation per thread.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strato/cloud/autoscale.h"
#include "strato/cloud/catalog.h"
#include "strato/cloud/spot.h"

namespace strato::cloud {

struct TracePoint {
    double t_s = 0;
    double rate = 0;
    int preempt = 0;
};

struct Trace {
    std::vector<TracePoint> points;  // sorted by time
    std::string source;
};
Result<Trace> parse_trace(std::string_view csv, const std::string& source);
Result<Trace> load_trace(const std::string& path);

struct SimOptions {
    AutoscaleConfig config;
    std::string instance;            // node type at the start (catalog)
    std::string region;              // empty: the cheapest region of the type
    double per_gpu_capacity = 0;     // work units per second one GPU of the instance serves
    double boot_s = 180;             // from launch to serving
    double tick_s = 30;              // control-loop period
    double slo_wait_s = 60;          // the objective: queueing delay of arriving work
    double spot_hazard_per_h = kUnknown;  // per spot node; default: the catalog's rate
    double start_weekday_hour = 0;   // schedule clock at t = 0 (0 = Monday 00:00)
    double horizon_s = 0;            // 0: the last trace row's time (the trace end)
    int initial_nodes = -1;          // -1: min_nodes
    uint64_t seed = 1;
    bool timeline = true;            // record a point per tick (per k ticks, with their peaks, past kTimelinePoints)
};

constexpr double kTimelinePoints = 100'000;

struct TimelinePoint {
    double t_s;
    int nodes, ready;
    double rate, capacity, backlog, utilization, wait_s;
};

struct SimResult {
    double cost = 0;            // catalog currency
    double node_hours = 0;
    double slo_violation_s = 0; // time during which the queueing delay exceeded slo_wait_s
    double duration_s = 0;
    double arrived = 0, served = 0;
    double mean_utilization = 0;  // served / capacity-time, percent
    int max_nodes = 0, preemptions = 0, scale_actions = 0;
    int64_t events = 0;
    double wall_s = 0;          // simulation run time
    std::string currency;
    std::string region;         // of the node type (the cheapest when none was asked for)
    std::vector<TimelinePoint> timeline;
    std::vector<std::pair<double, std::string>> actions;  // (t, what and why); the first kMaxActions
    int64_t actions_dropped = 0;                           // those past kMaxActions, counted only
    static constexpr size_t kMaxActions = 100000;
};

Result<SimResult> simulate(const Trace& trace, const Catalog& catalog, const SimOptions& options);

/// One spot training job (the planner's model, simulated): segments of work and checkpoints,
/// preemptions at rate hazard_per_s, each losing the segment in progress and costing restart_s.
struct SpotJobRun {
    double wall_s = 0;
    int interruptions = 0;
    int64_t events = 0;
};
SpotJobRun simulate_spot_job(const SpotJob& job, uint64_t seed);

/// The simulation as JSON ({"kind": "strato-autoscale-sim", ...}) for reports and scripts.
nlohmann::json sim_to_json(const SimResult& r, const SimOptions& o);

}  // namespace strato::cloud
