#include "strato/serve/metrics/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "strato/core/check.h"

namespace strato::serve::metrics {

Histogram::Histogram(std::vector<uint64_t> bounds, double unit)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]), unit_(unit) {
    for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::observe(uint64_t v) {
    size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> latency_buckets_ns() {
    std::vector<uint64_t> b;
    for (uint64_t decade = 10'000; decade <= 10'000'000'000ull; decade *= 10)
        for (uint64_t m : {1, 25, 5}) {
            uint64_t v = m == 25 ? decade * 5 / 2 : decade * m;
            if (v >= 50'000 && v <= 60'000'000'000ull) b.push_back(v);
        }
    b.push_back(20'000'000'000ull);
    b.push_back(60'000'000'000ull);
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    return b;
}

namespace {

// `k="v"` with the value escaped as the text format requires.
std::string render_pair(const std::pair<std::string, std::string>& kv) {
    std::string out = kv.first + "=\"";
    for (char c : kv.second) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out + '"';
}

}  // namespace

std::string render_labels(const Labels& labels) {
    if (labels.empty()) return "";
    std::string out = "{";
    for (size_t i = 0; i < labels.size(); ++i) {
        if (i) out += ',';
        out += render_pair(labels[i]);
    }
    out += '}';
    return out;
}

namespace {

// Whether rendered `labels` hold every one of `pieces`, whole pairs only: preceded by '{' or ','
// and followed by ',' or '}' (model="fm" is not in model="fm2").
bool has_pieces(const std::string& labels, const std::vector<std::string>& pieces) {
    for (const auto& piece : pieces) {
        bool found = false;
        for (size_t at = labels.find(piece); at != std::string::npos && !found; at = labels.find(piece, at + 1)) {
            const size_t end = at + piece.size();
            found = at > 0 && (labels[at - 1] == '{' || labels[at - 1] == ',') && end < labels.size() &&
                    (labels[end] == ',' || labels[end] == '}');
        }
        if (!found) return false;
    }
    return true;
}

}  // namespace

void Registry::set_hidden(const Labels& match, bool hidden) {
    std::vector<std::string> pieces;
    for (const auto& kv : match) pieces.push_back(render_pair(kv));
    std::lock_guard lock(mu_);
    if (!hidden) {
        auto h = hidden_.find(pieces);
        if (h == hidden_.end()) return;
        for (auto& [where, ptr] : h->second.series) families_.at(where.first).series[where.second] = std::move(ptr);
        hidden_.erase(h);
        return;
    }
    auto [h, inserted] = hidden_.try_emplace(pieces);
    if (!inserted) return;
    h->second.order = ++hidden_order_;
    for (auto& [name, f] : families_) {
        for (auto it = f.series.begin(); it != f.series.end();) {
            if (!has_pieces(it->first, pieces)) {
                ++it;
                continue;
            }
            h->second.series[{name, it->first}] = std::move(it->second);
            it = f.series.erase(it);
        }
    }
    if (hidden_.size() > kMaxHidden) {
        auto oldest = std::min_element(hidden_.begin(), hidden_.end(),
                                       [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
        hidden_.erase(oldest);
    }
}

Registry::Family& Registry::family(const std::string& name, const std::string& help, Type type) {
    auto [it, inserted] = families_.try_emplace(name);
    if (inserted) {
        it->second.type = type;
        it->second.help = help;
    }
    STRATO_ASSERT(it->second.type == type, "metric ", name, " registered with two types");
    return it->second;
}

std::shared_ptr<void> Registry::series(const std::string& name, const std::string& help, Type type,
                                       const Labels& labels, const std::function<std::shared_ptr<void>()>& make,
                                       const std::function<bool(void*)>& fits) {
    std::lock_guard lock(mu_);
    Family& f = family(name, help, type);
    std::string key = render_labels(labels);
    // A series made while its label set is hidden (a version loading again) stays hidden until the
    // load is done, and finds the counts it had.
    std::shared_ptr<void>* slot = nullptr;
    for (auto& [pieces, h] : hidden_)
        if (has_pieces(key, pieces)) {
            slot = &h.series[{name, key}];
            h.order = ++hidden_order_;  // in use again: the last to be forgotten
            break;
        }
    if (!slot) slot = &f.series[key];
    // Other buckets (a model reloaded with another max_batch_size): a fresh histogram takes the
    // series (Prometheus reads the drop as a counter reset); the old one stays valid for its holders.
    if (!*slot || !fits(slot->get())) *slot = make();
    return *slot;
}

std::shared_ptr<Counter> Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
    return std::static_pointer_cast<Counter>(series(
        name, help, Type::kCounter, labels, [] { return std::make_shared<Counter>(); }, [](void*) { return true; }));
}

std::shared_ptr<Gauge> Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
    return std::static_pointer_cast<Gauge>(series(
        name, help, Type::kGauge, labels, [] { return std::make_shared<Gauge>(); }, [](void*) { return true; }));
}

std::shared_ptr<Histogram> Registry::histogram(const std::string& name, const std::string& help, const Labels& labels,
                                               const std::vector<uint64_t>& bounds, double unit) {
    return std::static_pointer_cast<Histogram>(series(
        name, help, Type::kHistogram, labels, [&] { return std::make_shared<Histogram>(bounds, unit); },
        [&](void* p) {
            const auto* h = static_cast<Histogram*>(p);
            return h->bounds() == bounds && h->unit() == unit;
        }));
}

namespace {

// Adds `le` to a rendered label set.
std::string with_le(const std::string& labels, const std::string& le) {
    if (labels.empty()) return fmt::format("{{le=\"{}\"}}", le);
    return fmt::format("{},le=\"{}\"}}", labels.substr(0, labels.size() - 1), le);
}

}  // namespace

std::string Registry::render() const {
    std::lock_guard lock(mu_);
    fmt::memory_buffer out;
    auto it = std::back_inserter(out);
    for (const auto& [name, f] : families_) {
        static const char* kTypes[] = {"counter", "gauge", "histogram"};
        fmt::format_to(it, "# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, kTypes[static_cast<int>(f.type)]);
        for (const auto& [labels, held] : f.series) {
            const void* ptr = held.get();
            switch (f.type) {
                case Type::kCounter:
                    fmt::format_to(it, "{}{} {}\n", name, labels, static_cast<const Counter*>(ptr)->value());
                    break;
                case Type::kGauge:
                    fmt::format_to(it, "{}{} {}\n", name, labels, static_cast<const Gauge*>(ptr)->value());
                    break;
                case Type::kHistogram: {
                    const auto* h = static_cast<const Histogram*>(ptr);
                    uint64_t cum = 0;
                    for (size_t i = 0; i < h->bounds().size(); ++i) {
                        cum += h->bucket(i);
                        fmt::format_to(it, "{}_bucket{} {}\n", name,
                                       with_le(labels, fmt::format("{}", static_cast<double>(h->bounds()[i]) / h->unit())), cum);
                    }
                    cum += h->bucket(h->bounds().size());
                    // The +Inf bucket and _count come from the same reads so they always agree.
                    fmt::format_to(it, "{}_bucket{} {}\n", name, with_le(labels, "+Inf"), cum);
                    fmt::format_to(it, "{}_sum{} {}\n", name, labels, static_cast<double>(h->sum()) / h->unit());
                    fmt::format_to(it, "{}_count{} {}\n", name, labels, cum);
                    break;
                }
            }
        }
    }
    return std::string(out.data(), out.size());
}

}  // namespace strato::serve::metrics
