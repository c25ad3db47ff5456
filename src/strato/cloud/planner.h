#pragma once
// The planner behind `strato plan`: every provider x region x instance x node count x market
// (on-demand, spot) in the catalog, priced with the throughput model and, for spot, the expected
// preemptions and the optimal checkpoint interval; ranked by cost or time under a deadline, a
// budget and the GPU memory the job needs.
//
//     PlanRequest req;  req.workload = find_workload("resnet50-imagenet").value();
//     req.deadline_h = 4;
//     Plan p = make_plan(catalog, req).value();
//     for (const Candidate& c : p.ranked) fmt::print("{} x{} {}\n", c.inst->type, c.nodes, c.reason);
//
// make_plan prunes with a lower bound (perfect scaling, no checkpoints) and returns exactly what
// plan_brute_force returns — the property test checks that on random jobs.

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "strato/cloud/catalog.h"
#include "strato/cloud/spot.h"
#include "strato/cloud/throughput.h"

namespace strato::cloud {

enum class Objective { kCost, kTime };

struct PlanRequest {
    Workload workload;
    Objective objective = Objective::kCost;
    double deadline_h = std::numeric_limits<double>::infinity();
    double budget = std::numeric_limits<double>::infinity();  // in the catalog's currency
    // Empty: all. Providers, regions and accelerators match in any case; instance types exactly.
    std::vector<std::string> providers, regions, accelerators, instance_types;
    int max_nodes = 16;
    bool ondemand = true, spot = true;
    double storage_gbs = 1.0;      // checkpoint write bandwidth (GB/s)
    double restart_s = 600;        // replacement instance, start-up and checkpoint reload
    double startup_s = 300;        // provisioning and start-up before the first step (billed)
    double spot_hazard_per_h = kUnknown;  // overrides the catalog's interruption rates
    int top = 10;

    /// The whole request: the workload, the numbers, and check_filters.
    Status validate(const Catalog& catalog) const;
    /// Only that each provider, region, accelerator and instance type named is in `catalog` (an
    /// error names the flag: a usage error of `strato plan`, where the names come from).
    Status check_filters(const Catalog& catalog) const;
};

struct Candidate {
    const Instance* inst = nullptr;
    int nodes = 1;
    bool spot = false;
    Throughput tp;
    double work_h = 0;              // without interruptions
    double expected_h = 0;          // expected wall time (spot: with preemptions and checkpoints)
    double p10_h = 0, p90_h = 0;
    double price_per_h = 0;         // all nodes, catalog currency
    double cost = 0, cost_p90 = 0;  // expected and 90th percentile (the budget is judged on cost_p90)
    double interruptions = 0;
    double checkpoint_interval_h = 0;
    bool feasible = false;
    bool spot_outrun = false;       // spot: preemptions arrive faster than checkpoints save progress
    std::string why_not;            // the constraint it misses
    std::string reason;             // one line for the table

    int gpus() const { return inst->gpus * nodes; }
    double objective_value(Objective o) const { return o == Objective::kCost ? cost : expected_h; }
};

struct Plan {
    std::vector<Candidate> ranked;  // best first, at most `top`; one per (instance row, market), at its best node count
    size_t candidates = 0;          // in the search space
    size_t evaluated = 0;           // priced (the rest were pruned)
    std::string binding;            // when nothing is feasible: which constraint binds, and by how much
    std::vector<std::string> notes;
};

/// Prices one configuration.
Candidate evaluate(const PlanRequest& req, const ThroughputModel& model, const Currency& cur, const Instance& inst,
                   int nodes, bool spot);
/// The spot model's input for a candidate (work, job-level hazard, checkpoint and restart times).
SpotJob spot_job(const PlanRequest& req, const Candidate& c);

/// Strict weak order of the ranking: objective, then the other of cost/time, then the instance
/// key, node count and market, so ties break the same way everywhere.
bool ranks_before(const Candidate& a, const Candidate& b, Objective o);

Result<Plan> make_plan(const Catalog& catalog, const PlanRequest& req, const ThroughputModel& model = ThroughputModel());
/// Evaluates every candidate; the reference make_plan must agree with.
Result<Plan> plan_brute_force(const Catalog& catalog, const PlanRequest& req, const ThroughputModel& model = ThroughputModel());

/// Hours as "45 s", "12 min", "1 h 05 min", "3.2 d": rounded to the unit shown, with carry
/// (59.7 min is "1 h 00 min").
std::string format_hours(double h);
/// Hours to the second (or `decimals` places of a second): "33 min 10 s", "2 h 06 min 00.5 s".
std::string format_hours_exact(double h, int decimals = 0);
/// Two durations that are compared (a deadline and what a candidate needs): as format_hours,
/// or finer where that would print the same text for different numbers.
std::pair<std::string, std::string> format_hours_apart(double a, double b);

}  // namespace strato::cloud
