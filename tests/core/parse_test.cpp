// Numbers and addresses read from text: all of the text or an error, never a wrapped value.

#include "strato/core/parse.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace strato {
namespace {

TEST(ParseInt, TakesAllOfTheTextInRange) {
    EXPECT_EQ(parse_int("42"), 42);
    EXPECT_EQ(parse_int("-7", -10, 10), -7);
    EXPECT_EQ(parse_int("9223372036854775807"), INT64_MAX);
    for (const char* bad : {"", " 1", "1 ", "+1", "1x", "0x10", "1.0", "1e3", "9223372036854775808", "--1"})
        EXPECT_FALSE(parse_int(bad).has_value()) << "'" << bad << "'";
    EXPECT_FALSE(parse_int("0", 1, 5).has_value());
    EXPECT_FALSE(parse_int("6", 1, 5).has_value());
    EXPECT_EQ(parse_int("5", 1, 5), 5);
}

// `strato serve --address ::1` said "ready http://::1:8000", no URL a client can use.
TEST(HostPortText, BracketsAnIpv6Address) {
    EXPECT_EQ(host_port_text("127.0.0.1", 8000), "127.0.0.1:8000");
    EXPECT_EQ(host_port_text("::1", 8000), "[::1]:8000");
    EXPECT_EQ(host_port_text("[::1]", 9), "[::1]:9");
    EXPECT_EQ(host_port_text("localhost", 1), "localhost:1");
}

TEST(ParseHostPort, PortsAreWholeNumbersInRange) {
    auto hp = parse_host_port("node1:29400", "--rdzv-endpoint");
    ASSERT_TRUE(hp.is_ok());
    EXPECT_EQ(hp->host, "node1");
    EXPECT_EQ(hp->port, 29400);
    EXPECT_EQ(parse_host_port("node1", "--rdzv-endpoint", 29400)->port, 29400);
    EXPECT_EQ(parse_host_port(":8000", "--listen", 0, "0.0.0.0")->host, "0.0.0.0");
    EXPECT_EQ(parse_host_port("node1", "peer").status().message(),
              "peer 'node1': expected HOST:PORT with a port in 1..65535");
    EXPECT_EQ(parse_host_port(":1", "--listen", 0, "127.0.0.1")->port, 1);
    for (const char* bad : {"h:0", "h:65536", "h:99999999999", "h:80x", "h:", ":80", "h: 80", "bad host:80"})
        EXPECT_FALSE(parse_host_port(bad, "x").is_ok()) << bad;
    // IPv6 was read as host ':' or '[::1]' (found by review): said to be unsupported.
    for (const char* v6 : {"::1", "[::1]:29400", "fe80::1:80"})
        EXPECT_EQ(parse_host_port(v6, "--rdzv-endpoint", 29400).status().message(),
                  fmt::format("--rdzv-endpoint '{}': IPv6 addresses are not supported; give an IPv4 address or a host "
                              "name",
                              v6));
}

TEST(ParseNumber, FiniteNumbersOrMissing) {
    EXPECT_DOUBLE_EQ(parse_number(" \t2.5\t", -1, "f").value(), 2.5);
    EXPECT_DOUBLE_EQ(parse_number("", -1, "f").value(), -1);
    EXPECT_FALSE(parse_number("1.5x", 0, "f").is_ok());
    EXPECT_FALSE(parse_number("inf", 0, "f").is_ok());
    EXPECT_FALSE(parse_number("nan", 0, "f").is_ok());
    EXPECT_EQ(parse_number("1e999", 0, "rate").status().message(), "rate: expected a number, got '1e999'");
}

}  // namespace
}  // namespace strato
