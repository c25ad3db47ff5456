#include "strato/cloud/spot.h"

#include <algorithm>
#include <cmath>

namespace strato::cloud {

double young_interval(double checkpoint_s, double hazard_per_s, double work_s) {
    if (!(hazard_per_s > 0)) return work_s;
    double tau = std::sqrt(2 * std::max(checkpoint_s, 1e-9) / hazard_per_s);
    return std::clamp(tau, std::min(std::max(checkpoint_s, 1.0), work_s), work_s);
}

double poisson_quantile(double mu, double q) {
    if (!(mu > 0)) return 0;
    if (!std::isfinite(mu)) return mu;
    if (mu > 500) {  // normal approximation; the pmf recursion underflows this far out
        double lo = -8, hi = 8;  // solve Phi(z) = q by bisection
        for (int i = 0; i < 60; ++i) {
            double mid = (lo + hi) / 2;
            (0.5 * std::erfc(-mid / std::sqrt(2.0)) < q ? lo : hi) = mid;
        }
        // In doubles: mu may pass any integer type (1e21 interruptions of a hopeless spot plan).
        return std::max(0.0, std::ceil(mu + hi * std::sqrt(mu)));
    }
    double p = std::exp(-mu), cdf = p;
    int64_t k = 0;
    while (cdf < q && k < 100000) {
        ++k;
        p *= mu / k;
        cdf += p;
    }
    return static_cast<double>(k);
}

double sample_quantile(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return std::nan("");
    // (a tolerance: 0.9 x 10 is 9.000000000000002, whose ceiling made the 10th the 90th percentile)
    const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(sorted.size()) * (1 - 1e-12));
    return sorted[static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size()))) - 1];
}

SpotEstimate estimate_spot(const SpotJob& job) {
    SpotEstimate e;
    const double lambda = job.hazard_per_s;
    double tau = job.interval_s > 0 ? std::min(job.interval_s, job.work_s) : young_interval(job.checkpoint_s, lambda, job.work_s);
    e.interval_s = tau;
    if (!(job.work_s > 0)) return e;
    const bool checkpoints = tau < job.work_s;
    // Full segments of tau work + a checkpoint, then the remainder (no checkpoint after the last,
    // which is a whole tau when tau divides the work).
    // (A relative tolerance: 3 tau / tau can be 3.0000000000000004, which made a fourth, empty
    // segment and one checkpoint too many.)
    double full = checkpoints ? std::ceil(job.work_s / tau * (1 - 1e-12)) - 1 : 0;
    double rest = job.work_s - full * tau;
    auto segment = [&](double s, double* fails) {
        if (!(lambda > 0)) {
            *fails = 0;
            return s;
        }
        double grow = std::expm1(lambda * s);
        *fails = grow;
        return (1 / lambda + job.restart_s) * grow;
    };
    double f_full = 0, f_rest = 0;
    double wall = full * segment(tau + job.checkpoint_s, &f_full) + (rest > 0 ? segment(rest, &f_rest) : 0);
    e.expected_wall_s = wall;
    e.expected_interruptions = full * f_full + f_rest;
    e.feasible = std::isfinite(wall) && wall < 100 * job.work_s;
    double base = job.work_s + full * job.checkpoint_s;
    double per_loss = job.restart_s + (tau + (checkpoints ? job.checkpoint_s : 0)) / 2;
    e.p10_wall_s = base + poisson_quantile(e.expected_interruptions, 0.1) * per_loss;
    e.p90_wall_s = base + poisson_quantile(e.expected_interruptions, 0.9) * per_loss;
    // The count quantiles are whole numbers; keep the range around the mean.
    e.p10_wall_s = std::min(e.p10_wall_s, wall);
    e.p90_wall_s = std::max(e.p90_wall_s, wall);
    return e;
}

}  // namespace strato::cloud
