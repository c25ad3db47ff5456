#pragma once
// Spot/preemptible runs: how long a job with checkpoints takes when instances are reclaimed at a
// constant hazard rate, and the checkpoint interval that minimises it.
//
// The job of `work_s` seconds is cut into segments of `interval_s` of work followed by a
// checkpoint of `checkpoint_s`. A preemption loses the segment in progress and costs `restart_s`
// (provisioning, loading the checkpoint) before the segment starts again. With preemptions a
// Poisson process of rate lambda (any of the job's nodes: lambda = nodes x per-node hazard), one
// segment of length s takes in expectation (1/lambda + R)(e^(lambda s) - 1) — exact for this
// model, so the cluster simulator can be checked against it. The interval defaults to Young's
// first-order optimum sqrt(2 C / lambda) (Young 1974; Daly 2006 adds the C correction).

#include <cstdint>
#include <vector>

namespace strato::cloud {

struct SpotJob {
    double work_s = 0;          // compute time without interruptions or checkpoints
    double hazard_per_s = 0;    // job-level preemption rate (all nodes)
    double checkpoint_s = 0;    // time to write one checkpoint
    double restart_s = 0;       // from preemption to training again (replacement, reload)
    double interval_s = 0;      // work between checkpoints; 0: Young's optimum
};

struct SpotEstimate {
    double interval_s = 0;          // work between checkpoints used
    double expected_wall_s = 0;
    double expected_interruptions = 0;
    double p10_wall_s = 0, p90_wall_s = 0;  // from the Poisson quantiles of the interruption count
    bool feasible = true;           // false: the expected time is unbounded in practice (> 100x work)
};

/// Young's interval sqrt(2 C / lambda), clamped to [C, work] (no checkpoint needed when the job
/// is shorter than the interval). Without hazard, the whole job.
double young_interval(double checkpoint_s, double hazard_per_s, double work_s);

/// Expected wall time, interruptions and a 10-90 % range for `job`.
SpotEstimate estimate_spot(const SpotJob& job);

/// The q-quantile of a Poisson distribution with mean `mu` (smallest k with CDF(k) >= q).
double poisson_quantile(double mu, double q);

/// The q-quantile of a sample sorted ascending, by nearest rank: the smallest value with at least
/// q of the sample at or below it (p90 of 10 runs is the 9th, not the largest). NaN when empty.
double sample_quantile(const std::vector<double>& sorted, double q);

}  // namespace strato::cloud
