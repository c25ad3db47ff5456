#pragma once
// A small Prometheus registry: counters, gauges and histograms with labels, rendered in the text
// exposition format 0.0.4. Updates are lock-free atomics; series are created once (under a
// mutex) and shared with their holders.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace strato::serve::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
public:
    void add(uint64_t v = 1) { v_.fetch_add(v, std::memory_order_relaxed); }
    uint64_t value() const { return v_.load(std::memory_order_relaxed); }

private:
    std::atomic<uint64_t> v_{0};
};

class Gauge {
public:
    void add(int64_t v) { v_.fetch_add(v, std::memory_order_relaxed); }
    void set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
    int64_t value() const { return v_.load(std::memory_order_relaxed); }

private:
    std::atomic<int64_t> v_{0};
};

/// Cumulative buckets over integer observations (nanoseconds, rows...). `unit` divides values
/// when rendering (1e9 renders nanoseconds as seconds).
class Histogram {
public:
    Histogram(std::vector<uint64_t> bounds, double unit);
    void observe(uint64_t v);
    const std::vector<uint64_t>& bounds() const { return bounds_; }
    uint64_t bucket(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }  // not cumulative
    uint64_t count() const { return count_.load(std::memory_order_relaxed); }
    uint64_t sum() const { return sum_.load(std::memory_order_relaxed); }
    double unit() const { return unit_; }

private:
    std::vector<uint64_t> bounds_;
    std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1 (the last is +Inf)
    std::atomic<uint64_t> count_{0};
    std::atomic<uint64_t> sum_{0};
    double unit_;
};

/// Latency buckets from 50 µs to 60 s (in nanoseconds), roughly 1-2.5-5 per decade.
std::vector<uint64_t> latency_buckets_ns();

class Registry {
public:
    // The registry and whoever holds a series share it: a series nobody needs any more (a retired
    // model version's, a histogram replaced by one with other buckets) is freed.
    std::shared_ptr<Counter> counter(const std::string& name, const std::string& help, const Labels& labels);
    std::shared_ptr<Gauge> gauge(const std::string& name, const std::string& help, const Labels& labels);
    std::shared_ptr<Histogram> histogram(const std::string& name, const std::string& help, const Labels& labels,
                                         const std::vector<uint64_t>& bounds, double unit);
    /// Hides (or shows again) every series whose labels include all of `match` — a model version
    /// that was unloaded leaves /metrics as Triton's do; loaded again, its series come back with
    /// their counts (counters stay monotonic). The registry remembers the series of the last
    /// kMaxHidden hidden label sets; older ones are forgotten (shown again later, they start at 0,
    /// which Prometheus reads as a counter reset), so a server that deploys version after version
    /// does not grow without end.
    void set_hidden(const Labels& match, bool hidden);
    /// The whole registry in the Prometheus text format.
    std::string render() const;

    static constexpr size_t kMaxHidden = 64;

private:
    enum class Type { kCounter, kGauge, kHistogram };
    struct Family {
        Type type;
        std::string help;
        std::map<std::string, std::shared_ptr<void>> series;  // rendered labels -> the shown series
    };
    struct Hidden {
        uint64_t order = 0;  // when it was hidden: the oldest is forgotten first
        std::map<std::pair<std::string, std::string>, std::shared_ptr<void>> series;  // (family, labels)
    };
    Family& family(const std::string& name, const std::string& help, Type type);
    // The series of `name` with these labels, made by `make` when there is none or `fits` refuses it.
    std::shared_ptr<void> series(const std::string& name, const std::string& help, Type type, const Labels& labels,
                                 const std::function<std::shared_ptr<void>()>& make,
                                 const std::function<bool(void*)>& fits);

    mutable std::mutex mu_;
    std::map<std::string, Family> families_;
    std::map<std::vector<std::string>, Hidden> hidden_;  // keyed by the `k="v"` pieces a hidden series has
    uint64_t hidden_order_ = 0;
};

/// `{a="x",b="y"}` with values escaped as the text format requires; "" for no labels.
std::string render_labels(const Labels& labels);

}  // namespace strato::serve::metrics
