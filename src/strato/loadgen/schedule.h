#pragma once
// Open-loop send times that follow a recording instead of one fixed rate: perf_analyzer's
// --request-intervals file (one gap in microseconds per line) or a rate trace (CSV with
// `time_s` and `rate` columns: requests per second from that time on, the format `strato
// autoscale simulate` reads). Both are piecewise-constant rates over time; the run cycles the
// recording if it lasts longer than one pass.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"

namespace strato::loadgen {

class Schedule {
public:
    /// One gap (microseconds, >= 0, integer or decimal) per line; blank lines and `#` comments
    /// are skipped. Request k goes out after the first k gaps (the first at once).
    static Result<Schedule> from_intervals(std::string_view text, const std::string& source);
    /// CSV with a header naming `time_s` and `rate` (other columns are ignored): `rate` requests/s
    /// from `time_s` until the next row; the last row lasts as long as the step before it. Times
    /// must increase; they are divided by `speedup` (replay a day in an hour: 24), rates kept,
    /// then multiplied by `rate_scale`.
    static Result<Schedule> from_rate_trace(std::string_view csv, const std::string& source, double speedup = 1,
                                            double rate_scale = 1);

    /// When request `u` (a count: request k is u = k; fractional for Poisson arrivals) should
    /// go out, in ns from the start of the run. Cycles after one pass.
    int64_t offset_ns(double u) const;
    /// Requests due in the first `ns` of the run (the inverse of offset_ns), cycles included.
    double count_at(int64_t ns) const;
    /// One pass: its length and the requests in it.
    double period_s() const { return static_cast<double>(period_ns_) / 1e9; }
    double requests_per_period() const { return total_; }
    double mean_rate() const { return total_ / period_s(); }
    /// Intervals files give each request its time: Poisson gaps do not apply to them.
    bool exact() const { return exact_; }

private:
    struct Segment {
        int64_t start_ns;
        double before;  // requests in the segments before this one
        double rate;    // requests per ns
    };
    static Result<Schedule> build(std::vector<Segment> segs, int64_t period_ns, bool exact, const std::string& source);
    std::vector<Segment> segs_;
    int64_t period_ns_ = 0;
    double total_ = 0;
    bool exact_ = false;
};

}  // namespace strato::loadgen
