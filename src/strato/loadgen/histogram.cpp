#include "strato/loadgen/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace strato::loadgen {
namespace {

// Values below 2^kSubBits are exact; above, each power-of-two range [2^e, 2^(e+1)) is cut into
// 2^(kSubBits-1) equal buckets, so a bucket is at most 1/1024 of its values wide.
constexpr int kSubBits = 11;
constexpr int64_t kLinear = int64_t{1} << kSubBits;  // 2048 exact buckets
constexpr int64_t kHalf = kLinear / 2;               // 1024 buckets per power of two

}  // namespace

int LatencyHistogram::bucket_of(int64_t ns) {
    if (ns < kLinear) return static_cast<int>(std::max<int64_t>(ns, 0));
    int shift = std::bit_width(static_cast<uint64_t>(ns)) - kSubBits;  // >= 1
    int64_t sub = ns >> shift;                                          // [1024, 2047]
    return static_cast<int>(kLinear + (shift - 1) * kHalf + (sub - kHalf));
}

int64_t LatencyHistogram::bucket_upper(int index) {
    if (index < kLinear) return index;
    int shift = static_cast<int>((index - kLinear) / kHalf) + 1;
    int64_t sub = (index - kLinear) % kHalf + kHalf;
    return ((sub + 1) << shift) - 1;
}

LatencyHistogram::LatencyHistogram() : counts_(bucket_of(kMaxValue) + 1, 0) {}

void LatencyHistogram::record(int64_t ns) {
    if (ns < 0) ns = 0;
    if (ns > kMaxValue) {
        ns = kMaxValue;
        ++clamped_;
    }
    ++counts_[bucket_of(ns)];
    if (count_ == 0 || ns < min_) min_ = ns;
    if (count_ == 0 || ns > max_) max_ = ns;
    ++count_;
    double v = static_cast<double>(ns);
    sum_ += v;
    sum_sq_ += v * v;
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
    if (other.count_ == 0) return;
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
    if (count_ == 0 || other.min_ < min_) min_ = other.min_;
    if (count_ == 0 || other.max_ > max_) max_ = other.max_;
    count_ += other.count_;
    clamped_ += other.clamped_;
    sum_ += other.sum_;
    sum_sq_ += other.sum_sq_;
}

void LatencyHistogram::reset() {
    std::fill(counts_.begin(), counts_.end(), 0);
    count_ = clamped_ = min_ = max_ = 0;
    sum_ = sum_sq_ = 0;
}

double LatencyHistogram::mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }

double LatencyHistogram::stddev() const {
    if (count_ < 2) return 0.0;
    double m = mean();
    double var = sum_sq_ / static_cast<double>(count_) - m * m;
    return var > 0 ? std::sqrt(var) : 0.0;
}

int64_t LatencyHistogram::percentile(double p) const {
    if (count_ == 0) return 0;
    p = std::clamp(p, 0.0, 100.0);
    // rank of the order statistic (1-based): at least p % of the values are <= it. NOTE: the product
    // carries a rounding error of a few ulps that ceil() must not see: 99.9 / 100 * 1000 is
    // 999.0000000000001 in doubles, and p99.9 of 1,000 values was the largest of them (one outlier
    // reported as the 99.9th percentile). A true p * count / 100 that is no whole number lies further
    // above one than 1e-15 of itself for any p with up to three decimals and count up to 1e9.
    const double exact = p * static_cast<double>(count_) / 100.0;
    auto rank = static_cast<int64_t>(std::ceil(exact - exact * 1e-15));
    rank = std::clamp<int64_t>(rank, 1, count_);
    int64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
        seen += counts_[i];
        if (seen >= rank) return std::clamp(bucket_upper(static_cast<int>(i)), min_, max_);
    }
    return max_;
}

std::vector<std::pair<double, int64_t>> LatencyHistogram::distribution() const {
    std::vector<std::pair<double, int64_t>> out;
    if (count_ == 0) return out;
    // Stop halving once the tail holds less than one value.
    double tail = 100.0;
    for (double p = 0.0; tail * static_cast<double>(count_) / 100.0 >= 1.0 && p < 100.0; tail /= 2.0) {
        out.emplace_back(p, percentile(p));
        p = 100.0 - tail / 2.0;
    }
    out.emplace_back(100.0, max_);
    return out;
}

}  // namespace strato::loadgen
