#pragma once
// Samplers propose a trial's parameters from the study's space and the trials so far:
//   random — independent draws from each distribution;
//   grid   — the cartesian product of the grid parameters in order (others drawn at random);
//   tpe    — the Tree-structured Parzen Estimator (Bergstra et al. 2011), as Optuna's defaults:
//            random for the first `startup` trials, then per parameter a Parzen density l(x) over
//            the best gamma(n) = min(ceil(0.1 n), 25) trials and g(x) over the rest, and the
//            candidate (of 24 drawn from l) with the highest l(x)/g(x).
// All are deterministic for a seed and a history.

#include <cstdint>
#include <random>
#include <vector>

#include "strato/tune/space.h"

namespace strato::tune {

struct Observation {
    Assignment params;
    double value = 0;  // the objective, already signed so that larger is better
};

/// Draws the parameters of trial number `index` (0-based).
Assignment sample(const StudyConfig& s, int index, const std::vector<Observation>& history, std::mt19937_64& rng);

/// Does parameter `p` apply under `a` (its `when` condition, if any)?
bool active(const Param& p, const Assignment& a);

/// Number of distinct grid points: the product of the grid parameters' sizes, less the points
/// that differ only in a parameter whose condition does not hold.
int64_t grid_size(const StudyConfig& s);

}  // namespace strato::tune
