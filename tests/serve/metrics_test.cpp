#include "strato/serve/metrics/metrics.h"

#include <gtest/gtest.h>

namespace strato::serve::metrics {
namespace {

TEST(Metrics, RendersCountersGaugesAndCumulativeHistograms) {
    Registry r;
    r.counter("nv_inference_count", "Inferences", {{"model", "m"}, {"version", "1"}})->add(3);
    r.counter("nv_inference_count", "Inferences", {{"model", "m"}, {"version", "1"}})->add(2);  // same series
    r.gauge("queue", "Queue depth", {})->set(7);
    auto h = r.histogram("lat_seconds", "Latency", {{"model", "a\"b"}}, {1000, 2000}, 1e6);
    h->observe(500);
    h->observe(1500);
    h->observe(999999);
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
    r.counter("c", "C", {{"model", "fm"}, {"version", "1"}})->add(3);
    r.counter("c", "C", {{"model", "fm2"}, {"version", "1"}})->add(4);
    r.counter("c", "C", {{"model", "fm"}, {"version", "1"}, {"reason", "X"}})->add(5);
    r.set_hidden({{"model", "fm"}, {"version", "1"}}, true);
    std::string text = r.render();
    EXPECT_EQ(text.find("model=\"fm\","), std::string::npos) << text;  // both of fm's series, and only those
    EXPECT_NE(text.find("c{model=\"fm2\",version=\"1\"} 4\n"), std::string::npos) << text;
    r.set_hidden({{"model", "fm"}, {"version", "1"}}, false);
    text = r.render();
    EXPECT_NE(text.find("c{model=\"fm\",version=\"1\"} 3\n"), std::string::npos) << text;
    EXPECT_NE(text.find("c{model=\"fm\",version=\"1\",reason=\"X\"} 5\n"), std::string::npos) << text;
}

TEST(Metrics, ASeriesAskedForWhileHiddenStaysHiddenWithItsCountsUntilShown) {
    Registry r;
    r.counter("c", "C", {{"model", "fm"}, {"version", "1"}})->add(3);
    r.set_hidden({{"model", "fm"}, {"version", "1"}}, true);
    // A version loading again asks for its series before it is shown.
    auto c = r.counter("c", "C", {{"model", "fm"}, {"version", "1"}});
    EXPECT_EQ(c->value(), 3u);
    auto g = r.gauge("g", "G", {{"model", "fm"}, {"version", "1"}});  // new while hidden
    g->set(9);
    EXPECT_EQ(r.render().find("model=\"fm\""), std::string::npos) << r.render();
    r.set_hidden({{"model", "fm"}, {"version", "1"}}, false);
    EXPECT_NE(r.render().find("c{model=\"fm\",version=\"1\"} 3\n"), std::string::npos) << r.render();
    EXPECT_NE(r.render().find("g{model=\"fm\",version=\"1\"} 9\n"), std::string::npos) << r.render();
}

TEST(Metrics, VersionAfterVersionTheOldestHiddenSeriesAreForgottenAndFreed) {
    Registry r;
    std::weak_ptr<Counter> first;
    for (size_t v = 1; v <= Registry::kMaxHidden + 10; ++v) {
        const Labels l{{"model", "m"}, {"version", std::to_string(v)}};
        auto c = r.counter("c", "C", l);
        c->add(v);
        if (v == 1) first = c;
        r.set_hidden(l, true);  // the next version replaces it; `c` (its holder) goes away
    }
    EXPECT_TRUE(first.expired());  // version 1 was forgotten: nobody holds its counter
    // The newest hidden ones are remembered with their counts, the forgotten start again at 0.
    const Labels last{{"model", "m"}, {"version", std::to_string(Registry::kMaxHidden + 10)}};
    EXPECT_EQ(r.counter("c", "C", last)->value(), Registry::kMaxHidden + 10);
    EXPECT_EQ(r.counter("c", "C", {{"model", "m"}, {"version", "1"}})->value(), 0u);
    // A hidden version asked for again (loading once more) is not the next to be forgotten, even
    // if it was the oldest hidden (found by review: a rollback to it lost its series).
    const Labels oldest{{"model", "m"}, {"version", "11"}};
    EXPECT_EQ(r.counter("c", "C", oldest)->value(), 11u);
    r.set_hidden({{"model", "other"}, {"version", "1"}}, true);  // one more hidden: one is forgotten
    auto again = r.counter("c", "C", oldest);
    r.set_hidden(oldest, false);
    EXPECT_EQ(again->value(), 11u);
    EXPECT_NE(r.render().find("c{model=\"m\",version=\"11\"} 11\n"), std::string::npos) << r.render();
    // Asked for again, a forgotten version's series is a new, shown one; the hidden stay hidden.
    EXPECT_NE(r.render().find("c{model=\"m\",version=\"1\"} 0\n"), std::string::npos) << r.render();
    EXPECT_EQ(r.render().find("version=\"2\""), std::string::npos) << r.render();
}

TEST(Metrics, AHistogramAskedForWithOtherBucketsIsANewOne) {
    Registry r;
    auto old = r.histogram("b", "B", {{"model", "m"}}, {1, 2, 4}, 1.0);
    old->observe(3);
    auto fresh = r.histogram("b", "B", {{"model", "m"}}, {1, 2, 4, 8, 16}, 1.0);
    EXPECT_NE(old, fresh);
    fresh->observe(12);
    old->observe(1);  // the old one stays valid for whoever holds it
    std::string text = r.render();
    EXPECT_NE(text.find("b_bucket{model=\"m\",le=\"16\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("b_count{model=\"m\"} 1\n"), std::string::npos) << text;
    EXPECT_EQ(r.histogram("b", "B", {{"model", "m"}}, {1, 2, 4, 8, 16}, 1.0), fresh);
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
