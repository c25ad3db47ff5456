#pragma once
// A latency histogram in the HdrHistogram style: log-linear buckets that keep three significant
// digits (relative error < 0.1 %) from 1 ns to 60 s in a fixed ~220 KB array, so recording is a
// few instructions and merging per-thread histograms is a loop over counters. Values are
// nanoseconds; anything above 60 s is clamped into the top bucket and counted in `clamped()`.

#include <cstdint>
#include <utility>
#include <vector>

namespace strato::loadgen {

/// Records latencies and answers percentiles over them.
///
///     LatencyHistogram h;
///     h.record(1'200'000);               // 1.2 ms
///     int64_t p99 = h.percentile(99.0);  // ns, within 0.1 % of the true order statistic
///
/// Not thread-safe: give each thread its own and `merge` them.
class LatencyHistogram {
public:
    static constexpr int64_t kMaxValue = 60'000'000'000;  // 60 s in ns

    LatencyHistogram();

    void record(int64_t ns);
    void merge(const LatencyHistogram& other);
    void reset();

    int64_t count() const { return count_; }
    int64_t clamped() const { return clamped_; }
    int64_t min() const { return count_ ? min_ : 0; }
    int64_t max() const { return count_ ? max_ : 0; }
    double mean() const;
    double stddev() const;

    /// The value at percentile `p` (0..100): the smallest recorded value v such that at least
    /// p % of the values are <= v, reported as the upper end of its bucket (never above max()).
    /// 0 when empty.
    int64_t percentile(double p) const;

    /// (percentile, value) pairs for a latency-distribution chart: the percentiles
    /// 0, 50, 75, 87.5, ... halving the remaining tail each step (as HdrHistogram's
    /// percentile output does), then 100. Empty when nothing was recorded.
    std::vector<std::pair<double, int64_t>> distribution() const;

    /// Bucket index of a value and the largest value a bucket holds (exposed for tests).
    static int bucket_of(int64_t ns);
    static int64_t bucket_upper(int index);

private:
    std::vector<int64_t> counts_;
    int64_t count_ = 0;
    int64_t clamped_ = 0;
    int64_t min_ = 0;
    int64_t max_ = 0;
    double sum_ = 0;
    double sum_sq_ = 0;
};

}  // namespace strato::loadgen
