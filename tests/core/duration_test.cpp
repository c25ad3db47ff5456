// Durations on command lines and in config files.

#include "strato/core/duration.h"

#include <gtest/gtest.h>

namespace strato {
namespace {

TEST(Duration, UnitsAndErrors) {
    EXPECT_EQ(*parse_duration_ns("250ms"), 250'000'000);
    EXPECT_EQ(*parse_duration_ns("2"), 2'000'000'000);
    EXPECT_EQ(*parse_duration_ns("50", "ms"), 50'000'000);
    EXPECT_EQ(*parse_duration_ns("1.5s"), 1'500'000'000);
    EXPECT_EQ(*parse_duration_ns("1m"), 60'000'000'000);
    EXPECT_EQ(*parse_duration_ns("150us"), 150'000);
    for (const char* bad : {"", "ms", "5 s", "5x", "-1s"}) EXPECT_FALSE(parse_duration_ns(bad).is_ok()) << bad;
    EXPECT_EQ(*parse_duration_ns("8h"), int64_t{8} * 3600 * 1'000'000'000);
    EXPECT_EQ(*parse_duration_ns("2", "h"), int64_t{7200} * 1'000'000'000);
    EXPECT_DOUBLE_EQ(*parse_duration_s("1.5d"), 1.5 * 86400);
    EXPECT_FALSE(parse_duration_ns("400y").is_ok());
    EXPECT_FALSE(parse_duration_ns("999999d").is_ok());
}

// Found by review: "1h30m" (Go's and Prometheus' way, and what `for 1h30m` in an alert rule
// copied from Prometheus says) was "unknown unit 'h30m'"; "8.2s" was truncated to 8199999999 ns.
TEST(Duration, PartsAreSummedAndNanosecondsRounded) {
    EXPECT_EQ(*parse_duration_ns("1h30m"), int64_t{5400} * 1'000'000'000);
    EXPECT_EQ(*parse_duration_ns("2m30s"), int64_t{150} * 1'000'000'000);
    EXPECT_EQ(*parse_duration_ns("1s500ms"), 1'500'000'000);
    EXPECT_EQ(*parse_duration_ns("1d12h", "ms"), int64_t{36} * 3600 * 1'000'000'000);
    EXPECT_EQ(*parse_duration_ns("8.2s"), 8'200'000'000);
    EXPECT_EQ(*parse_duration_ns("8.2ms"), 8'200'000);
    EXPECT_EQ(*parse_duration_ns("1e3ms"), 1'000'000'000);
    EXPECT_EQ(*parse_duration_ns("5ns"), 5);
    // A number after the first part needs its unit; blanks and signs are still refused.
    for (const char* bad : {"1h30", "1h-30m", "1h 30m", "h30m", "1h30x", "1h.m", "200000d200000d"})
        EXPECT_FALSE(parse_duration_ns(bad).is_ok()) << bad;
    EXPECT_EQ(parse_duration_ns("1h30x").status().message(),
              "duration '1h30x': unknown unit 'x' (use ns, us, ms, s, m, h or d)");
    EXPECT_EQ(parse_duration_ns("1h30").status().message(),
              "duration '1h30': expected a number with a unit, such as 250ms, 10s, 2m, 8h or 1h30m");
}

}  // namespace
}  // namespace strato
