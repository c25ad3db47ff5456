#include "strato/serve/metrics/metrics.h"

#include <gtest/gtest.h>

namespace strato::serve::metrics {
namespace {

TEST(Metrics, RendersCountersGaugesAndCumulativeHistograms) {
    Registry r;
    r.counter("nv_inference_count", "Inferences", {{"model", "m"}, {"version", "1"}}).add(3);
    r.counter("nv_inference_count", "Inferences", {{"model", "m"}, {"version", "1"}}).add(2);  // same series
    r.gauge("queue", "Queue depth", {}).set(7);
    Histogram& h = r.histogram("lat_seconds", "Latency", {{"model", "a\"b"}}, {1000, 2000}, 1e6);
    h.observe(500);
    h.observe(1500);
    h.observe(999999);
    std::string text = r.render();
    EXPECT_NE(text.find("# TYPE nv_inference_count counter\nnv_inference_count{model=\"m\",version=\"1\"} 5\n"), std::string::npos) << text;
    EXPECT_NE(text.find("queue 7\n"), std::string::npos);
    EXPECT_NE(text.find("lat_seconds_bucket{model=\"a\\\"b\",le=\"0.001\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("lat_seconds_bucket{model=\"a\\\"b\",le=\"0.002\"} 2\n"), std::string::npos);
    EXPECT_NE(text.find("lat_seconds_bucket{model=\"a\\\"b\",le=\"+Inf\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("lat_seconds_count{model=\"a\\\"b\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("lat_seconds_sum{model=\"a\\\"b\"} 1.001999"), std::string::npos) << text;
}

TEST(Metrics, HiddenSeriesLeaveTheOutputAndComeBackWithTheirCounts) {
    Registry r;
    r.counter("c", "C", {{"model", "fm"}, {"version", "1"}}).add(3);
    r.counter("c", "C", {{"model", "fm2"}, {"version", "1"}}).add(4);
    r.counter("c", "C", {{"model", "fm"}, {"version", "1"}, {"reason", "X"}}).add(5);
    r.set_hidden({{"model", "fm"}, {"version", "1"}}, true);
    std::string text = r.render();
    EXPECT_EQ(text.find("model=\"fm\","), std::string::npos) << text;  // both of fm's series, and only those
    EXPECT_NE(text.find("c{model=\"fm2\",version=\"1\"} 4\n"), std::string::npos) << text;
    r.set_hidden({{"model", "fm"}, {"version", "1"}}, false);
    text = r.render();
    EXPECT_NE(text.find("c{model=\"fm\",version=\"1\"} 3\n"), std::string::npos) << text;
    EXPECT_NE(text.find("c{model=\"fm\",version=\"1\",reason=\"X\"} 5\n"), std::string::npos) << text;
}

TEST(Metrics, AHistogramAskedForWithOtherBucketsIsANewOne) {
    Registry r;
    Histogram& old = r.histogram("b", "B", {{"model", "m"}}, {1, 2, 4}, 1.0);
    old.observe(3);
    Histogram& fresh = r.histogram("b", "B", {{"model", "m"}}, {1, 2, 4, 8, 16}, 1.0);
    EXPECT_NE(&old, &fresh);
    fresh.observe(12);
    old.observe(1);  // the old one stays valid for whoever holds it
    std::string text = r.render();
    EXPECT_NE(text.find("b_bucket{model=\"m\",le=\"16\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("b_count{model=\"m\"} 1\n"), std::string::npos) << text;
    EXPECT_EQ(&r.histogram("b", "B", {{"model", "m"}}, {1, 2, 4, 8, 16}, 1.0), &fresh);
}

TEST(Metrics, LatencyBucketsAreSortedAndSpan50usTo60s) {
    auto b = latency_buckets_ns();
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.front(), 50'000u);
    EXPECT_EQ(b.back(), 60'000'000'000u);
    EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

}  // namespace
}  // namespace strato::serve::metrics
