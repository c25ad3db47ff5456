#pragma once
// A small Prometheus registry: counters, gauges and histograms with labels, rendered in the text
// exposition format 0.0.4. Updates are lock-free atomics; series are created once (under a
// mutex) and live as long as the registry, so callers may keep references to them.

#include <atomic>
#include <cstdint>
#include <deque>
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
    Counter& counter(const std::string& name, const std::string& help, const Labels& labels);
    Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels);
    Histogram& histogram(const std::string& name, const std::string& help, const Labels& labels,
                         const std::vector<uint64_t>& bounds, double unit);
    /// Hides (or shows again) every series whose labels include all of `match` — a model version
    /// that was unloaded leaves /metrics as Triton's do; loaded again, its series come back with
    /// their counts (counters stay monotonic). The objects stay valid for whoever still holds them.
    void set_hidden(const Labels& match, bool hidden);
    /// The whole registry in the Prometheus text format.
    std::string render() const;

private:
    enum class Type { kCounter, kGauge, kHistogram };
    struct Family {
        Type type;
        std::string help;
        std::map<std::string, size_t> index;  // rendered labels -> position in series
        std::vector<std::pair<std::string, void*>> series;
    };
    Family& family(const std::string& name, const std::string& help, Type type);

    bool is_hidden(const std::string& rendered_labels) const;

    mutable std::mutex mu_;
    std::map<std::string, Family> families_;
    std::set<std::vector<std::string>> hidden_;  // each: the `k="v"` pieces a hidden series has
    std::deque<Counter> counters_;
    std::deque<Gauge> gauges_;
    std::deque<Histogram> histograms_;
};

/// `{a="x",b="y"}` with values escaped as the text format requires; "" for no labels.
std::string render_labels(const Labels& labels);

}  // namespace strato::serve::metrics
