#include "strato/core/duration.h"

#include <cctype>
#include <charconv>
#include <string_view>

namespace strato {

Result<int64_t> parse_duration_ns(const std::string& text, const std::string& default_unit) {
    std::string_view s(text);
    size_t i = 0;
    auto digit = [&](size_t k) { return k < s.size() && std::isdigit(static_cast<unsigned char>(s[k])); };
    while (i < s.size() && (digit(i) || s[i] == '.')) ++i;
    // An exponent ("1e3", "2.5E-1h"), not a unit starting with e.
    if (i > 0 && i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        size_t k = i + 1 + (i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-'));
        if (digit(k)) {
            i = k;
            while (digit(i)) ++i;
        }
    }
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + i, v);
    if (i == 0 || ec != std::errc() || p != s.data() + i || v < 0)
        return invalid_argument("duration '{}': expected a number with a unit, such as 250ms, 10s, 2m or 8h", text);
    std::string unit(s.substr(i));
    if (unit.empty()) unit = default_unit;
    double scale = unit == "ns" ? 1 : unit == "us" ? 1e3 : unit == "ms" ? 1e6 : unit == "s" ? 1e9 : unit == "m" ? 60e9
                 : unit == "h" ? 3600e9 : unit == "d" ? 86400e9 : -1;
    if (scale < 0) return invalid_argument("duration '{}': unknown unit '{}' (use us, ms, s, m, h or d)", text, unit);
    if (v * scale > 9.2e18) return invalid_argument("duration '{}': longer than 290 years", text);
    return static_cast<int64_t>(v * scale);
}

Result<double> parse_duration_s(const std::string& text, const std::string& default_unit) {
    STRATO_ASSIGN_OR_RETURN(int64_t ns, parse_duration_ns(text, default_unit));
    return static_cast<double>(ns) / 1e9;
}

}  // namespace strato
