#include "strato/loadgen/schedule.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "strato/core/csv_table.h"

namespace strato::loadgen {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

// One pass at most (~100 years in ns): the run's clock, an int64 of ns from boot, adds it.
constexpr int64_t kMaxPeriodNs = int64_t{3'155'760'000} * 1'000'000'000;
constexpr double kYearS = 365.25 * 86400;

/// A finite number in [lo, hi], or nullopt (empty, not a number, out of range).
std::optional<double> number_in(std::string_view text, double lo, double hi) {
    auto v = parse_number(text, std::nan(""), "");
    if (!v.is_ok() || !(*v >= lo && *v <= hi)) return std::nullopt;
    return *v;
}

}  // namespace

Result<Schedule> Schedule::build(std::vector<Segment> segs, int64_t period_ns, bool exact, const std::string& source) {
    Schedule s;
    s.segs_ = std::move(segs);
    s.period_ns_ = period_ns;
    s.exact_ = exact;
    s.total_ = 0;
    for (size_t i = 0; i < s.segs_.size(); ++i) {
        s.segs_[i].before = s.total_;
        const int64_t end = i + 1 < s.segs_.size() ? s.segs_[i + 1].start_ns : period_ns;
        s.total_ += exact ? 1.0 : s.segs_[i].rate * static_cast<double>(end - s.segs_[i].start_ns);
    }
    if (period_ns <= 0) return invalid_argument("{}: the schedule lasts 0 s", source);
    if (s.total_ < 1) return invalid_argument("{}: the schedule asks for fewer than one request", source);
    return s;
}

Result<Schedule> Schedule::from_intervals(std::string_view text, const std::string& source) {
    std::vector<Segment> segs;
    int64_t t = 0;
    int line_no = 0;
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        const std::string_view line = trim(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line_no;
        if (line.empty() || line.front() == '#') continue;
        auto us = number_in(line, 0, 1e12);
        if (!us)
            return invalid_argument("{}:{}: expected a gap in microseconds (a number in [0, 1e12]), got '{}'", source,
                                    line_no, line);
        const auto gap = std::max<int64_t>(1, std::llround(*us * 1e3));
        // (10,000 gaps of 1e12 us overflowed the int64 clock: undefined, "the schedule lasts 0 s")
        if (t > kMaxPeriodNs - gap)
            return invalid_argument("{}:{}: the gaps add up to more than {:.0f} years, the longest schedule", source,
                                    line_no, kMaxPeriodNs / 1e9 / kYearS);
        segs.push_back({t, 0, 1.0 / static_cast<double>(gap)});
        t += gap;
    }
    if (segs.empty()) return invalid_argument("{}: no intervals (one gap in microseconds per line)", source);
    return build(std::move(segs), t, true, source);
}

Result<Schedule> Schedule::from_rate_trace(std::string_view csv, const std::string& source, double speedup,
                                           double rate_scale) {
    if (!(speedup > 0) || !std::isfinite(speedup)) return invalid_argument("trace speed-up must be > 0, got {}", speedup);
    if (!(rate_scale > 0) || !std::isfinite(rate_scale))
        return invalid_argument("trace rate scale must be > 0, got {}", rate_scale);
    STRATO_ASSIGN_OR_RETURN(CsvTable table, CsvTable::parse(csv, source));
    STRATO_RETURN_IF_ERROR(table.require_columns({"time_s", "rate"}));
    std::vector<std::pair<double, double>> rows;  // (time_s, rate)
    for (size_t r = 0; r < table.rows(); ++r) {
        const int line_no = table.line(r);
        auto t = number_in(table.at(r, "time_s"), 0, 1e18);
        if (!t)
            return invalid_argument("{}:{}: time_s: expected seconds >= 0, got '{}'", source, line_no,
                                    table.at(r, "time_s"));
        auto rate = number_in(table.at(r, "rate"), 0, 1e9);
        if (!rate)
            return invalid_argument("{}:{}: rate: expected requests per second in [0, 1e9], got '{}'", source, line_no,
                                    table.at(r, "rate"));
        if (!rows.empty() && *t <= rows.back().first)
            return invalid_argument("{}:{}: time_s {} does not come after {}", source, line_no, *t, rows.back().first);
        if (*t - (rows.empty() ? *t : rows.front().first) > 1e9)
            return invalid_argument("{}:{}: time_s {} is more than 1e9 s into the trace", source, line_no, *t);
        rows.emplace_back(*t, *rate);
    }
    if (rows.size() < 2)
        return invalid_argument("{}: a rate trace needs at least two rows (time_s,rate), found {}", source, rows.size());
    std::vector<Segment> segs;
    const double t0 = rows.front().first;
    const double last_step = rows.back().first - rows[rows.size() - 2].first;
    // (a week's trace at --trace-speedup 1e-6 is 6e20 ns: llround() of it was undefined, and the run
    // refused as "the schedule lasts 0 s")
    if (const double period_s = (rows.back().first + last_step - t0) / speedup; period_s * 1e9 > kMaxPeriodNs)
        return invalid_argument("{}: one pass lasts {:.3g} s at speed-up {:g}, more than {:.0f} years, the longest "
                                "schedule",
                                source, period_s, speedup, kMaxPeriodNs / 1e9 / kYearS);
    auto at_ns = [&](double t) { return static_cast<int64_t>(std::llround((t - t0) / speedup * 1e9)); };
    for (const auto& [t, r] : rows) segs.push_back({at_ns(t), 0, r * rate_scale / 1e9});
    return build(std::move(segs), at_ns(rows.back().first + last_step), false, source);
}

int64_t Schedule::offset_ns(double u) const {
    const double cycle = std::floor(u / total_);
    double r = u - cycle * total_;
    auto it = std::upper_bound(segs_.begin(), segs_.end(), r, [](double v, const Segment& s) { return v < s.before; });
    const Segment& s = *(it == segs_.begin() ? it : it - 1);
    double in = s.rate > 0 ? (r - s.before) / s.rate : 0;
    if (exact_) in = 0;
    return static_cast<int64_t>(cycle) * period_ns_ + s.start_ns + static_cast<int64_t>(in);
}

double Schedule::count_at(int64_t ns) const {
    if (ns <= 0) return 0;
    const int64_t cycle = ns / period_ns_, t = ns % period_ns_;
    auto it = std::upper_bound(segs_.begin(), segs_.end(), t, [](int64_t v, const Segment& s) { return v < s.start_ns; });
    const Segment& s = *(it - 1);  // segs_[0].start_ns == 0 <= t
    const double in = exact_ ? 1.0 : s.rate * static_cast<double>(t - s.start_ns);
    return static_cast<double>(cycle) * total_ + s.before + in;
}

}  // namespace strato::loadgen
