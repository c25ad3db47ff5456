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

}  // namespace
}  // namespace strato
