#include "strato/core/duration.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string_view>

namespace strato {

namespace {

double unit_ns(std::string_view unit) {
    return unit == "ns"   ? 1
           : unit == "us" ? 1e3
           : unit == "ms" ? 1e6
           : unit == "s"  ? 1e9
           : unit == "m"  ? 60e9
           : unit == "h"  ? 3600e9
           : unit == "d"  ? 86400e9
                          : -1;
}

}  // namespace

Result<int64_t> parse_duration_ns(const std::string& text, const std::string& default_unit) {
    std::string_view s(text);
    auto digit = [&](size_t k) { return k < s.size() && std::isdigit(static_cast<unsigned char>(s[k])); };
    auto bad_number = [&] {
        return invalid_argument("duration '{}': expected a number with a unit, such as 250ms, 10s, 2m, 8h or 1h30m",
                                text);
    };
    // One or more parts of a number and a unit, summed, as Go and Prometheus write them ("1h30m",
    // "2m30s"; found by review: "1h30m" was "unknown unit 'h30m'"); a lone number takes `default_unit`.
    double total_ns = 0;
    size_t i = 0;
    do {
        const size_t start = i;
        while (i < s.size() && (digit(i) || s[i] == '.')) ++i;
        // An exponent ("1e3", "2.5E-1h"), not a unit starting with e.
        if (i > start && i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
            size_t k = i + 1 + (i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-'));
            if (digit(k)) {
                i = k;
                while (digit(i)) ++i;
            }
        }
        double v = 0;
        auto [p, ec] = std::from_chars(s.data() + start, s.data() + i, v);
        if (i == start || ec != std::errc() || p != s.data() + i || !(v >= 0)) return bad_number();
        const size_t unit_start = i;
        while (i < s.size() && !digit(i) && s[i] != '.') ++i;
        std::string_view unit = s.substr(unit_start, i - unit_start);
        if (unit.empty()) {
            if (start > 0 || i < s.size()) return bad_number();
            unit = default_unit;
        }
        const double scale = unit_ns(unit);
        if (scale < 0)
            return invalid_argument("duration '{}': unknown unit '{}' (use ns, us, ms, s, m, h or d)", text, unit);
        total_ns += v * scale;
    } while (i < s.size());
    if (!(total_ns <= 9.2e18)) return invalid_argument("duration '{}': longer than 290 years", text);
    // Rounded, not truncated: "8.2s" is 8.2 * 1e9 = 8199999999.999999 in doubles (found by review).
    return static_cast<int64_t>(std::llround(total_ns));
}

Result<double> parse_duration_s(const std::string& text, const std::string& default_unit) {
    STRATO_ASSIGN_OR_RETURN(int64_t ns, parse_duration_ns(text, default_unit));
    return static_cast<double>(ns) / 1e9;
}

}  // namespace strato
