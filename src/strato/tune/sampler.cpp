#include "strato/tune/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strato::tune {

namespace {

std::string unquote(const std::string& s) {
    return s.size() >= 2 && s.front() == '"' && s.back() == '"' ? s.substr(1, s.size() - 2) : s;
}

double draw_uniform(const Param& p, std::mt19937_64& rng) {
    if (!p.numeric()) return static_cast<double>(std::uniform_int_distribution<size_t>(0, p.values.size() - 1)(rng));
    return std::uniform_real_distribution<double>(p.internal_low(), p.internal_high())(rng);
}

/// A Parzen estimator over points in [lo, hi]: a Gaussian per point (bandwidth from the
/// neighbours' spacing, at least (hi - lo) / min(100, 1 + n)) plus a uniform prior of one point.
struct Parzen {
    std::vector<double> mu, sigma;
    double lo, hi;

    Parzen(std::vector<double> pts, double l, double h) : lo(l), hi(h) {
        std::sort(pts.begin(), pts.end());
        const double span = hi - lo;
        const double min_sigma = span / std::min(100.0, 1.0 + static_cast<double>(pts.size()));
        for (size_t i = 0; i < pts.size(); ++i) {
            double left = i > 0 ? pts[i] - pts[i - 1] : pts[i] - lo;
            double right = i + 1 < pts.size() ? pts[i + 1] - pts[i] : hi - pts[i];
            mu.push_back(pts[i]);
            sigma.push_back(std::clamp(std::max(left, right), min_sigma, span));
        }
    }
    double density(double x) const {
        const double span = hi - lo;
        double sum = 1.0 / span;  // the prior
        for (size_t i = 0; i < mu.size(); ++i) {
            double z = (x - mu[i]) / sigma[i];
            sum += std::exp(-0.5 * z * z) / (sigma[i] * std::sqrt(2 * M_PI));
        }
        return sum / static_cast<double>(mu.size() + 1);
    }
    double draw(std::mt19937_64& rng) const {
        size_t k = std::uniform_int_distribution<size_t>(0, mu.size())(rng);
        if (k == mu.size()) return std::uniform_real_distribution<double>(lo, hi)(rng);
        for (int attempt = 0; attempt < 20; ++attempt) {
            double x = std::normal_distribution<double>(mu[k], sigma[k])(rng);
            if (x >= lo && x <= hi) return x;
        }
        return std::clamp(mu[k], lo, hi);
    }
};

/// Categorical TPE: smoothed counts of each value among the good and the bad trials.
double categorical_best(const Param& p, const std::vector<double>& good, const std::vector<double>& bad,
                        std::mt19937_64& rng, int candidates) {
    const size_t k = p.values.size();
    std::vector<double> l(k, 1.0), g(k, 1.0);
    for (double x : good) l[static_cast<size_t>(x)] += 1;
    for (double x : bad) g[static_cast<size_t>(x)] += 1;
    double best = 0, best_score = -1;
    std::discrete_distribution<size_t> from_l(l.begin(), l.end());
    double lsum = std::accumulate(l.begin(), l.end(), 0.0), gsum = std::accumulate(g.begin(), g.end(), 0.0);
    for (int c = 0; c < candidates; ++c) {
        size_t x = from_l(rng);
        double score = (l[x] / lsum) / (g[x] / gsum);
        if (score > best_score) best_score = score, best = static_cast<double>(x);
    }
    return best;
}

}  // namespace

bool active(const Param& p, const Assignment& a) {
    if (p.when_key.empty()) return true;
    auto it = a.find(p.when_key);
    return it != a.end() && unquote(it->second) == unquote(p.when_value);
}

namespace {

// Past this many points of the full product, a grid with conditions is walked as the product
// (points that differ only in a parameter left out repeat) instead of enumerated per trial.
constexpr int64_t kGridEnumerationLimit = int64_t{1} << 22;

// The order to draw in: a parameter after the one its `when` names (which the parse checked is a
// choice or grid parameter, with no loop), whatever order the file lists them in (TOML tables
// read back sorted, so "model.depth" came before the "optim.name" it depended on, and was never
// drawn).
std::vector<const Param*> draw_order(const StudyConfig& s) {
    std::vector<const Param*> order;
    std::vector<bool> placed(s.params.size(), false);
    const auto is_placed = [&](const std::string& key) {
        return std::any_of(order.begin(), order.end(), [&](const Param* q) { return q->key == key; });
    };
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t i = 0; i < s.params.size(); ++i) {
            if (placed[i] || (!s.params[i].when_key.empty() && !is_placed(s.params[i].when_key))) continue;
            order.push_back(&s.params[i]);
            placed[i] = progress = true;
        }
    }
    for (size_t i = 0; i < s.params.size(); ++i)  // (a condition on a key that is no parameter: never active)
        if (!placed[i]) order.push_back(&s.params[i]);
    return order;
}

// The grid parameters' values of grid point `index` of the full product (first parameter
// fastest), leaving out the ones whose condition does not hold. `full` is false when a parameter
// left out has a value other than its first: the same point as the one with its first value.
Assignment grid_point(const std::vector<const Param*>& order, int64_t index, bool* full) {
    Assignment a;
    *full = true;
    for (const Param* p : order) {
        if (p->dist != Dist::kGrid) continue;
        const auto k = static_cast<int64_t>(p->values.size());
        const int64_t digit = index % k;
        index /= k;
        // A condition on a grid parameter is decided here (one left out itself leaves this one
        // out too); on a choice parameter, drawn later, the value counts.
        const bool on_grid = !p->when_key.empty() && std::any_of(order.begin(), order.end(), [&](const Param* q) {
            return q->key == p->when_key && q->dist == Dist::kGrid;
        });
        if (on_grid && !active(*p, a)) {
            *full = *full && digit == 0;
            continue;
        }
        a[p->key] = p->values[static_cast<size_t>(digit)];
    }
    return a;
}

// The size of the full product of the grid parameters (capped at 2^40).
int64_t grid_product(const StudyConfig& s) {
    int64_t product = 1;
    for (const auto& p : s.params)
        if (p.dist == Dist::kGrid) product = std::min<int64_t>(product * static_cast<int64_t>(p.values.size()), int64_t{1} << 40);
    return product;
}

}  // namespace

int64_t grid_size(const StudyConfig& s) {
    const auto order = draw_order(s);
    const int64_t product = grid_product(s);
    const bool conditional = std::any_of(s.params.begin(), s.params.end(),
                                         [](const Param& p) { return p.dist == Dist::kGrid && !p.when_key.empty(); });
    if (!conditional || product > kGridEnumerationLimit) return product;
    int64_t n = 0;
    for (int64_t i = 0; i < product; ++i) {
        bool full = false;
        grid_point(order, i, &full);
        n += full;
    }
    return n;
}

Assignment sample(const StudyConfig& s, int index, const std::vector<Observation>& history, std::mt19937_64& rng) {
    Assignment a;
    const std::vector<const Param*> order = draw_order(s);
    // The grid: trial `index` takes the index-th distinct point (a point that differs only in a
    // parameter whose condition does not hold is the same point), round and round.
    Assignment grid;
    if (s.sampler == "grid") {
        const int64_t points = grid_size(s);
        const int64_t product = grid_product(s);
        int64_t want = index % std::max<int64_t>(1, points);
        bool full = true;
        if (points == product) {
            grid = grid_point(order, want, &full);
        } else {
            for (int64_t i = 0; i < product; ++i) {
                grid = grid_point(order, i, &full);
                if (full && want-- == 0) break;
            }
        }
    }

    const bool tpe = s.sampler == "tpe" && static_cast<int>(history.size()) >= s.tpe_startup;
    std::vector<size_t> ranked(history.size());
    std::iota(ranked.begin(), ranked.end(), 0);
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t x, size_t y) { return history[x].value > history[y].value; });
    const size_t n_good = std::min<size_t>(static_cast<size_t>(std::ceil(0.1 * static_cast<double>(history.size()))), 25);

    for (const Param* p : order) {
        if (!active(*p, a)) continue;
        if (p->dist == Dist::kGrid && s.sampler == "grid") {
            a[p->key] = grid[p->key];
            continue;
        }
        if (!tpe) {
            a[p->key] = p->from_internal(draw_uniform(*p, rng));
            continue;
        }
        std::vector<double> good, bad;
        for (size_t r = 0; r < ranked.size(); ++r) {
            auto it = history[ranked[r]].params.find(p->key);
            if (it == history[ranked[r]].params.end()) continue;
            (r < n_good ? good : bad).push_back(p->to_internal(it->second));
        }
        if (good.empty() || bad.empty()) {
            a[p->key] = p->from_internal(draw_uniform(*p, rng));
            continue;
        }
        if (!p->numeric()) {
            a[p->key] = p->from_internal(categorical_best(*p, good, bad, rng, s.tpe_candidates));
            continue;
        }
        Parzen l(good, p->internal_low(), p->internal_high()), g(bad, p->internal_low(), p->internal_high());
        double best = l.draw(rng), best_score = -1;
        for (int c = 0; c < s.tpe_candidates; ++c) {
            double x = c == 0 ? best : l.draw(rng);
            double score = l.density(x) / g.density(x);
            if (score > best_score) best_score = score, best = x;
        }
        a[p->key] = p->from_internal(best);
    }
    return a;
}

}  // namespace strato::tune
