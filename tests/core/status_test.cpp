#include <gtest/gtest.h>

#include "strato/core/check.h"
#include "strato/core/status.h"

namespace strato {
namespace {

Result<int> parse_positive(int x) {
    if (x <= 0) return invalid_argument("expected a positive number, got {}", x);
    return x;
}

Result<int> twice(int x) {
    STRATO_ASSIGN_OR_RETURN(int v, parse_positive(x));
    return 2 * v;
}

TEST(Status, OkAndErrors) {
    EXPECT_TRUE(Status::ok().is_ok());
    Status s = not_found("model {} missing", "m");
    EXPECT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kNotFound);
    EXPECT_EQ(s.message(), "model m missing");
    EXPECT_EQ(s.with_context("loading").message(), "loading: model m missing");
    EXPECT_EQ(status_code_to_http(StatusCode::kInvalidArgument), 400);
    EXPECT_EQ(status_code_to_http(StatusCode::kNotFound), 404);
    EXPECT_EQ(status_code_to_http(StatusCode::kUnavailable), 503);
}

TEST(Result, PropagatesErrors) {
    EXPECT_EQ(*twice(3), 6);
    auto r = twice(-1);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("got -1"), std::string::npos);
}

TEST(Check, ThrowsTypedErrors) {
    try {
        STRATO_CHECK(1 == 2, "expected ", 1, ", got ", 2);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
        EXPECT_STREQ(e.what(), "expected 1, got 2");
    }
    try {
        STRATO_ASSERT(false, "broken");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), StatusCode::kInternal);
        EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos);
    }
}

}  // namespace
}  // namespace strato
