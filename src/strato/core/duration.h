#pragma once
// Durations on command lines and in config files: "250ms", "10s", "2m", "8h", "3d", "1.5h", "1h30m".

#include <cstdint>
#include <string>

#include "strato/core/status.h"

namespace strato {

/// Nanoseconds in `text`, rounded: a non-negative number and a unit (ns, us, ms, s, m, h, d), or
/// several such parts summed as Go and Prometheus write them ("1h30m", "2m30s"); a bare number
/// takes `default_unit`.
Result<int64_t> parse_duration_ns(const std::string& text, const std::string& default_unit = "s");

/// Seconds in `text` (same syntax), as a double.
Result<double> parse_duration_s(const std::string& text, const std::string& default_unit = "s");

}  // namespace strato
