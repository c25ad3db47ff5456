// Unit tests of the load generator's pieces: histogram accuracy against exact order statistics,
// the incremental response parser at every split point, URL/range/duration parsing, and the
// CSV/JSON/HTML outputs.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <random>

#include "strato/core/signals.h"
#include "strato/loadgen/histogram.h"
#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/runner.h"
#include "strato/loadgen/schedule.h"
#include "strato/report/loadtest_report.h"

namespace strato::loadgen {
namespace {

// The order statistic by a brute-force sort, its rank in integers (p has at most three decimals):
// the smallest k with k / n >= p / 100.
int64_t exact_percentile(std::vector<int64_t> v, double p) {
    std::sort(v.begin(), v.end());
    const auto n = static_cast<int64_t>(v.size());
    const int64_t milli = std::llround(p * 1000);  // p = milli / 1000
    int64_t rank = (milli * n + 100'000 - 1) / 100'000;
    rank = std::clamp<int64_t>(rank, 1, n);
    return v[static_cast<size_t>(rank - 1)];
}

// Values below 2048 ns have buckets of their own, so there the histogram's percentile must be the
// sorted values' order statistic exactly, for every count. p99.9 of 1,000 values was the largest
// of them: p / 100 * n is 999.0000000000001 in doubles, and its ceil() one rank too high.
TEST(Histogram, PercentilesEqualABruteForceSortWhereBucketsAreExact) {
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<int64_t> value(0, 2047);
    for (int n = 1; n <= 3000; n += (n < 200 ? 1 : 7)) {
        std::vector<int64_t> values;
        LatencyHistogram h;
        for (int i = 0; i < n; ++i) {
            values.push_back(value(rng));
            h.record(values.back());
        }
        for (double p : {0.0, 0.1, 1.0, 10.0, 17.6, 25.0, 33.3, 50.0, 64.9, 75.0, 87.5, 90.0, 90.4, 95.0, 99.0, 99.5,
                         99.9, 99.99, 100.0})
            ASSERT_EQ(h.percentile(p), exact_percentile(values, p)) << "p" << p << " of " << n << " values";
    }
    // One outlier among 1,000: p99.9 is the 999th value, not the outlier.
    LatencyHistogram h;
    for (int i = 0; i < 999; ++i) h.record(1'000);
    h.record(5'000'000'000);
    EXPECT_EQ(h.percentile(99.9), 1'000);
    EXPECT_EQ(h.percentile(100), 5'000'000'000);
}

TEST(Histogram, PercentilesWithinATenthOfAPercentOfExactOrderStatistics) {
    std::mt19937_64 rng(7);
    std::lognormal_distribution<double> dist(std::log(2e6), 1.5);  // ~2 ms median, long tail
    std::vector<int64_t> values;
    LatencyHistogram h;
    for (int i = 0; i < 200000; ++i) {
        auto v = std::min<int64_t>(static_cast<int64_t>(dist(rng)), LatencyHistogram::kMaxValue);
        values.push_back(v);
        h.record(v);
    }
    for (double p : {0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
        int64_t want = exact_percentile(values, p), got = h.percentile(p);
        EXPECT_LE(std::abs(static_cast<double>(got - want)), 0.001 * static_cast<double>(want) + 1)
            << "p" << p << ": histogram " << got << " exact " << want;
        EXPECT_GE(got, want) << "p" << p << " reported below the true value";
    }
    EXPECT_EQ(h.count(), 200000);
    EXPECT_EQ(h.max(), *std::max_element(values.begin(), values.end()));
    EXPECT_EQ(h.min(), *std::min_element(values.begin(), values.end()));
    double mean = 0;
    for (auto v : values) mean += static_cast<double>(v);
    mean /= static_cast<double>(values.size());
    EXPECT_NEAR(h.mean(), mean, mean * 1e-9);
}

TEST(Histogram, BucketsAreExactBelow2048AndNeverWiderThanATenthOfAPercent) {
    for (int64_t v = 0; v < 2048; ++v) EXPECT_EQ(LatencyHistogram::bucket_upper(LatencyHistogram::bucket_of(v)), v);
    for (int64_t v : {int64_t{2048}, int64_t{4097}, int64_t{1'000'000}, int64_t{123'456'789}, LatencyHistogram::kMaxValue}) {
        int b = LatencyHistogram::bucket_of(v);
        int64_t hi = LatencyHistogram::bucket_upper(b), lo = b > 0 ? LatencyHistogram::bucket_upper(b - 1) + 1 : 0;
        EXPECT_LE(lo, v);
        EXPECT_GE(hi, v);
        EXPECT_LE(static_cast<double>(hi - lo + 1), static_cast<double>(v) / 1024.0 + 1) << v;
    }
}

TEST(Histogram, MergeClampAndDistribution) {
    LatencyHistogram a, b;
    for (int i = 1; i <= 900; ++i) a.record(1'000'000);
    for (int i = 1; i <= 100; ++i) b.record(50'000'000);
    b.record(LatencyHistogram::kMaxValue * 2);
    a.merge(b);
    EXPECT_EQ(a.count(), 1001);
    EXPECT_EQ(a.clamped(), 1);
    EXPECT_EQ(a.max(), LatencyHistogram::kMaxValue);
    EXPECT_NEAR(a.percentile(50), 1'000'000, 1000);
    EXPECT_NEAR(a.percentile(95), 50'000'000, 50'000);
    auto d = a.distribution();
    ASSERT_GE(d.size(), 5u);
    EXPECT_EQ(d.front().first, 0.0);
    EXPECT_EQ(d.back().first, 100.0);
    for (size_t i = 1; i < d.size(); ++i) {
        EXPECT_GT(d[i].first, d[i - 1].first);
        EXPECT_GE(d[i].second, d[i - 1].second);
    }
    LatencyHistogram empty;
    EXPECT_EQ(empty.percentile(99), 0);
    EXPECT_TRUE(empty.distribution().empty());
    a.reset();
    EXPECT_EQ(a.count(), 0);
}

// Feeds `wire` split at `cut` and returns the parser after both parts.
ResponseParser parse_split(const std::string& wire, size_t cut, size_t* consumed) {
    ResponseParser p;
    p.keep_body(true);
    size_t used = p.feed(wire.data(), cut);
    if (!p.done() && !p.failed()) used += p.feed(wire.data() + cut, wire.size() - cut);
    *consumed = used;
    return p;
}

TEST(ResponseParser, ContentLengthAndChunkedAtEverySplitPoint) {
    const std::string cl = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world";
    const std::string ch =
        "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
    for (const auto* wire : {&cl, &ch}) {
        for (size_t cut = 0; cut <= wire->size(); ++cut) {
            size_t used = 0;
            auto p = parse_split(*wire + "HTTP/1.1 next", cut, &used);
            ASSERT_TRUE(p.done()) << "cut " << cut << ": " << p.error();
            EXPECT_EQ(used, wire->size()) << "cut " << cut << ": must stop at the end of one response";
            EXPECT_EQ(p.body(), "hello world") << "cut " << cut;
            EXPECT_TRUE(p.keep_alive());
            EXPECT_EQ(p.bytes(), static_cast<int64_t>(wire->size()));
        }
    }
}

TEST(ResponseParser, CloseDelimitedInterimNoBodyAndConnectionClose) {
    ResponseParser p;
    p.keep_body(true);
    std::string until_close = "HTTP/1.0 200 OK\r\n\r\nabc";
    p.feed(until_close.data(), until_close.size());
    EXPECT_FALSE(p.done());
    p.finish_on_eof();
    EXPECT_TRUE(p.done());
    EXPECT_EQ(p.body(), "abc");
    EXPECT_FALSE(p.keep_alive());

    p.reset();
    std::string interim = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
    p.feed(interim.data(), interim.size());
    EXPECT_TRUE(p.done());
    EXPECT_EQ(p.status(), 204);
    EXPECT_FALSE(p.keep_alive());

    p.reset();
    std::string partial = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    p.feed(partial.data(), partial.size());
    p.finish_on_eof();
    EXPECT_TRUE(p.failed());
    EXPECT_NE(p.error().find("closed"), std::string::npos);

    // The answer to a HEAD ends with its head, Content-Length notwithstanding (loadtest -X HEAD
    // counted every answer as an error before).
    p.reset();
    p.answers_head(true);
    std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 32\r\n\r\nHTTP/1.1 200 OK\r\n";
    EXPECT_EQ(p.feed(head.data(), head.size()), head.find("HTTP/1.1", 5));
    EXPECT_TRUE(p.done());
    EXPECT_TRUE(p.keep_alive());
    p.reset();  // and the next request is not a HEAD again unless told
    std::string get = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    p.feed(get.data(), get.size());
    EXPECT_EQ(p.body(), "ok");
}

TEST(ResponseParser, MalformedResponsesFailWithAReason) {
    for (std::string wire : {"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n",
                             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
                             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nab",
                             "HTTP/1.1 200 OK\r\nContent-Length: 2, 5\r\n\r\nab", "HTTP/1.1 200 OK\r\nContent-Length: 2,\r\n\r\nab",
                             "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\nab"}) {
        ResponseParser p;
        p.feed(wire.data(), wire.size());
        EXPECT_TRUE(p.failed()) << wire;
        EXPECT_FALSE(p.error().empty());
    }
    ResponseParser same;  // the same length twice is one length
    const std::string twice = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nab";
    same.feed(twice.data(), twice.size());
    EXPECT_TRUE(same.done() && !same.failed()) << same.error();
    // Found by review: "chunked, gzip" was read as chunk sizes; chunked counts only as the last
    // coding (two lines are one list), else the body runs to the close.
    ResponseParser gz;
    gz.keep_body(true);
    const std::string gzipped = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\nContent-Length: 1\r\n\r\nzz\r\n";
    gz.feed(gzipped.data(), gzipped.size());
    EXPECT_FALSE(gz.done() || gz.failed()) << gz.error();
    gz.finish_on_eof();
    EXPECT_TRUE(gz.done());
    EXPECT_EQ(gz.body(), "zz\r\n");
    EXPECT_FALSE(gz.keep_alive());
    ResponseParser two_lines;
    const std::string both = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\ntransfer-encoding: Chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n";
    two_lines.feed(both.data(), both.size());
    EXPECT_TRUE(two_lines.done() && !two_lines.failed()) << two_lines.error();
    // Found by review: a list of one length repeated (RFC 9110 8.6, two lines a proxy joined) was
    // "malformed"; it is that length.
    ResponseParser list;
    const std::string listed = "HTTP/1.1 200 OK\r\nContent-Length: 2 , 2\r\n\r\nabHTTP";
    EXPECT_EQ(list.feed(listed.data(), listed.size()), listed.size() - 4);
    EXPECT_TRUE(list.done() && !list.failed()) << list.error();
    ResponseParser big;
    std::string head = "HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a');
    big.feed(head.data(), head.size());
    EXPECT_TRUE(big.failed());
}

// Found by review: bytes that are no HTTP failed only at the blank line, the close (counted a
// reset) or the timeout; a truncated body said only "closed in the middle of a response".
TEST(ResponseParser, NonHttpBytesFailAtOnceAndATruncatedBodySaysHowMuchCame) {
    for (std::string wire : {"SSH-2.0-OpenSSH_9.2", "\x16\x03\x01", "HTTX", "hello"}) {
        ResponseParser p;
        p.feed(wire.data(), wire.size());
        EXPECT_TRUE(p.failed()) << wire;
        EXPECT_NE(p.error().find("does not start with 'HTTP/'"), std::string::npos) << p.error();
    }
    ResponseParser prefix;  // a status line split after a few bytes is no error
    prefix.feed("HTT", 3);
    EXPECT_FALSE(prefix.failed()) << prefix.error();
    prefix.feed("P/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 36);
    EXPECT_TRUE(prefix.done()) << prefix.error();

    ResponseParser body;
    const std::string partial = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    body.feed(partial.data(), partial.size());
    EXPECT_TRUE(body.started());
    body.finish_on_eof();
    ASSERT_TRUE(body.failed());
    EXPECT_NE(body.error().find("truncated body"), std::string::npos) << body.error();
    EXPECT_NE(body.error().find("3 of the 10 bytes"), std::string::npos) << body.error();

    ResponseParser chunked;
    const std::string cut = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
    chunked.feed(cut.data(), cut.size());
    chunked.finish_on_eof();
    ASSERT_TRUE(chunked.failed());
    EXPECT_NE(chunked.error().find("truncated chunked body"), std::string::npos) << chunked.error();

    ResponseParser head;
    head.feed("HTTP/1.1 200", 12);
    head.finish_on_eof();
    EXPECT_NE(head.error().find("in the response head"), std::string::npos) << head.error();

    ResponseParser none;
    none.finish_on_eof();
    EXPECT_NE(none.error().find("before a response"), std::string::npos) << none.error();
}

TEST(Url, ParsesHostsPortsAndTargets) {
    auto u = parse_url("http://127.0.0.1:8000/v2/models/m/infer?x=1");
    ASSERT_TRUE(u.is_ok()) << u.status().message();
    EXPECT_EQ(u->host, "127.0.0.1");
    EXPECT_EQ(u->port, 8000);
    EXPECT_EQ(u->target, "/v2/models/m/infer?x=1");
    EXPECT_EQ(u->host_header, "127.0.0.1:8000");
    auto v6 = parse_url("http://[::1]:9/");
    ASSERT_TRUE(v6.is_ok());
    EXPECT_EQ(v6->host, "::1");
    EXPECT_EQ(v6->host_header, "[::1]:9");
    auto bare = parse_url("http://localhost");
    ASSERT_TRUE(bare.is_ok());
    EXPECT_EQ(bare->port, 80);
    EXPECT_EQ(bare->target, "/");
    for (const char* bad : {"https://a/", "ftp://a", "http://", "http://a:0/", "http://a:99999/", "http://a:x/", "http://u@a/", "127.0.0.1:80"})
        EXPECT_FALSE(parse_url(bad).is_ok()) << bad;
}

TEST(Parsing, RangesAndDurations) {
    auto r = parse_range("1:64:x2", true);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, (std::vector<double>{1, 2, 4, 8, 16, 32, 64}));
    EXPECT_EQ(*parse_range("1:48:x2", true), (std::vector<double>{1, 2, 4, 8, 16, 32, 48}));
    EXPECT_EQ(*parse_range("10:30:10", false), (std::vector<double>{10, 20, 30}));
    EXPECT_EQ(*parse_range("4:6", true), (std::vector<double>{4, 5, 6}));
    EXPECT_EQ(*parse_range("1,4,16", true), (std::vector<double>{1, 4, 16}));
    for (const char* bad : {"", "0:4", "4:1", "1:4:x1", "1:2:3:4", "a:b", "1.5:4", "1,,2", "inf", "1:inf", "nan"})
        EXPECT_FALSE(parse_range(bad, true).is_ok()) << bad;
    // Above the cap (an int cast of 1e10 was undefined behaviour, "concurrency -2147483648").
    EXPECT_FALSE(parse_range("1e10", false).is_ok());
    EXPECT_FALSE(parse_range("1,200000", true, 100000).is_ok());
    EXPECT_TRUE(parse_range("1,100000", true, 100000).is_ok());
    // Rates below --request-rate's floor: at 1e-300 req/s the gap between requests was infinite, its
    // int64 cast undefined, and requests went out every nanosecond.
    for (const char* tiny : {"1e-300:1", "1e-300", "1,1e-7", "1e-9:1e-8:x2"}) {
        auto t = parse_range(tiny, false);
        EXPECT_FALSE(t.is_ok()) << tiny;
        EXPECT_NE(t.status().message().find("is below the least allowed, 1e-06"), std::string::npos)
            << t.status().message();
    }
    EXPECT_EQ(*parse_range("1e-6,2", false), (std::vector<double>{1e-6, 2}));
    Target target;
    target.url = *parse_url("http://127.0.0.1:1/");  // (nothing is sent: the session must not start)
    target.requests.push_back("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    LoadOptions open;
    open.mode = LoadOptions::Mode::kOpen;
    open.rate = 1e-300;
    EXPECT_FALSE(LoadSession::start(target, open).is_ok());
}

// A request never answered kept out of p99 and the error count let the SLO search call a server
// that dropped 5 % of its requests a pass (found by review).
TEST(Slo, UnansweredRequestsMissTheObjective) {
    PointResult p;
    p.m.ok = 100;
    for (int i = 0; i < 100; ++i) p.m.latency.record(1'000'000);
    EXPECT_EQ(slo_miss_reason(p, 50'000'000), "");
    p.m.unfinished = 1;  // 1 of 101: p99 may still be within the objective
    EXPECT_EQ(slo_miss_reason(p, 50'000'000), "");
    // ... unless the answered ones' tail is slow: with the unanswered one counted as the slowest,
    // p99 of all lands on an answered 60 ms (of 995 answered at 1 ms and 5 at 60 ms, 5 unanswered).
    PointResult q;
    q.m.ok = 1000;
    for (int i = 0; i < 995; ++i) q.m.latency.record(1'000'000);
    for (int i = 0; i < 5; ++i) q.m.latency.record(60'000'000);
    EXPECT_EQ(slo_miss_reason(q, 50'000'000), "");  // answered alone: p99 1 ms
    q.m.unfinished = 6;
    EXPECT_NE(slo_miss_reason(q, 50'000'000).find("unanswered requests counted as slower"), std::string::npos)
        << slo_miss_reason(q, 50'000'000);
    p.m.unfinished = 5;
    EXPECT_EQ(slo_miss_reason(p, 50'000'000),
              "5 of 105 requests unanswered or never sent (p99 counts them as slower than the objective)");
}

TEST(Outputs, CsvUsesPerfAnalyzerColumnsAndJsonRendersAsAReport) {
    PointResult a, b;
    a.level = 1;
    b.level = 2;
    for (int i = 0; i < 100; ++i) a.m.latency.record(1'000'000), b.m.latency.record(2'000'000);
    a.m.ok = 100, a.m.seconds = 1;
    b.m.ok = 300, b.m.seconds = 1;
    b.m.http[503] = 2;
    b.server = ServerBreakdown{300, 1500, 400, 10, 900, 20, 1.5};
    std::string csv = format_csv({b, a}, 4);
    EXPECT_EQ(csv.substr(0, csv.find('\n')),
              "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
              "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
              "Avg latency,Errors");
    // sorted by throughput; inferences/s = requests/s x batch; server columns in µs
    EXPECT_NE(csv.find("\n1,400.00,0,"), std::string::npos) << csv;
    EXPECT_NE(csv.find("\n2,1200.00,0,670,400,10,900,20,0,2000,2000,2000,2000,2000,2\n"), std::string::npos) << csv;
    EXPECT_LT(csv.find("\n1,"), csv.find("\n2,"));

    RunOptions ro;
    auto j = to_json({a, b}, "http://127.0.0.1:1/x", ro, std::nullopt);
    EXPECT_EQ(j["kind"], "strato-loadtest");
    EXPECT_EQ(j["points"][1]["errors"]["http"]["503"], 2);
    EXPECT_DOUBLE_EQ(j["points"][0]["latency_us"]["p50"].get<double>(), 1000.0);
    auto html = report::render_loadtest_report(j);
    ASSERT_TRUE(html.is_ok());
    EXPECT_NE(html->find("Latency vs throughput"), std::string::npos);
    EXPECT_NE(html->find("Latency distribution"), std::string::npos);
    EXPECT_NE(html->find("<svg"), std::string::npos);
    EXPECT_EQ(html->find("<script"), std::string::npos);
    EXPECT_EQ(html->find("Rate over time"), std::string::npos);  // no timeline without a trace
    // A trace run's timeline: in the JSON and as two charts.
    a.timeline = {{5, 100, 99.5, 400'000, 2'000'000, 0}, {10, 300, 280, 600'000, 9'000'000, 3}};
    j = to_json({a}, "http://127.0.0.1:1/x", ro, std::nullopt);
    ASSERT_EQ(j["points"][0]["timeline"].size(), 2u);
    EXPECT_DOUBLE_EQ(j["points"][0]["timeline"][1]["asked"].get<double>(), 300);
    EXPECT_DOUBLE_EQ(j["points"][0]["timeline"][1]["p99_us"].get<double>(), 9000);
    EXPECT_EQ(j["points"][0]["timeline"][1]["errors"], 3);
    html = report::render_loadtest_report(j);
    ASSERT_TRUE(html.is_ok());
    EXPECT_NE(html->find("Rate over time"), std::string::npos);
    EXPECT_NE(html->find("Latency over time"), std::string::npos);
    EXPECT_FALSE(report::render_loadtest_report(nlohmann::json{{"kind", "other"}}).is_ok());
    // A hand-edited file with a field of another type: an error that says so, not an exception.
    auto typed = report::render_loadtest_report(nlohmann::json{{"kind", "strato-loadtest"}, {"target", 5}});
    ASSERT_FALSE(typed.is_ok());
    EXPECT_NE(typed.status().message().find("field target is a number, expected a string"), std::string::npos)
        << typed.status().message();
    for (const auto& [bad, said] : std::vector<std::pair<nlohmann::json, std::string>>{
             {{{"points", {{{"latency_us", 3}}}}}, "field points[0].latency_us is a number, expected an object"},
             {{{"points", {1}}}, "field points[0] is a number, expected an object"},
             {{{"points", {j["points"][0], {{"timeline", "x"}}}}}, "field points[1].timeline is a string, expected an array"},
             {{{"points", nlohmann::json::array()}, {"slo", {{"found", "yes"}}}}, "field slo.found is a string, expected a boolean"},
             {{{"mode", 1}}, "field mode is a number, expected a string"},
             {{{"points", {{"a", 1}}}}, "field points is an object, expected an array"}}) {
        nlohmann::json doc = bad;
        doc["kind"] = "strato-loadtest";
        auto r = report::render_loadtest_report(doc);
        ASSERT_FALSE(r.is_ok()) << doc;
        EXPECT_NE(r.status().message().find(said), std::string::npos) << r.status().message();
    }
    EXPECT_FALSE(report::render_loadtest_report(nlohmann::json::array()).is_ok());
    // Noted at review: the page left out what the table and JSON say of a cut-short run — the
    // interrupted level, late and unfinished requests, an SLO answer at the highest rate probed.
    {
        PointResult cut = b;
        cut.interrupted = true;
        cut.m.late = 7;
        cut.m.unfinished = 11;
        SloResult slo;
        slo.slo_p99_ns = 50'000'000;
        slo.found = true;
        slo.best_rate = 400;
        slo.capped = true;
        auto page = report::render_loadtest_report(to_json({a, cut}, "http://127.0.0.1:1/x", ro, slo));
        ASSERT_TRUE(page.is_ok()) << page.status().message();
        EXPECT_NE(page->find("<b>Interrupted</b>"), std::string::npos);
        EXPECT_NE(page->find("2 <i>interrupted</i>"), std::string::npos) << *page;
        EXPECT_NE(page->find("<td class=\"num\">7</td><td class=\"num\">11</td>"), std::string::npos) << *page;
        EXPECT_NE(page->find("the limit may lie beyond"), std::string::npos);
        nlohmann::json doc = to_json({a}, "x", ro, std::nullopt);
        doc["interrupted"] = "yes";
        auto typed_flag = report::render_loadtest_report(doc);
        ASSERT_FALSE(typed_flag.is_ok());
        EXPECT_NE(typed_flag.status().message().find("field interrupted is a string, expected a boolean"), std::string::npos)
            << typed_flag.status().message();
    }

    std::string table = format_table({a, b});
    EXPECT_NE(table.find("2 HTTP 503"), std::string::npos) << table;
    EXPECT_NE(table.find("server: request 1500 us"), std::string::npos) << table;
}

// Found by review: a level that answered nothing 2xx (only errors, or nothing at all) showed p50 to
// max as 0.00 ms, the best latencies of the run; it shows "-".
TEST(Outputs, ALevelWithoutAnAnswerShowsNoLatency) {
    PointResult only_errors;
    only_errors.level = 4;
    only_errors.m.seconds = 1;
    only_errors.m.http[503] = 7;
    PointResult answered = only_errors;
    answered.level = 8;
    answered.m.ok = 1;
    answered.m.latency.record(2'000'000);
    const std::string table = format_table({only_errors, answered});
    EXPECT_EQ(table.find("0.00"), std::string::npos) << table;
    EXPECT_NE(table.find("        -         -         -         -         -         -        7"), std::string::npos)
        << table;
    EXPECT_NE(table.find("2.00      2.00      2.00      2.00      2.00      2.00        7"), std::string::npos) << table;
}

TEST(Schedule, IntervalsGiveEachRequestItsTimeAndCycle) {
    auto s = Schedule::from_intervals("# perf_analyzer intervals, us\n1000\n\n3000\n  500.5 \r\n", "iv.txt");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_TRUE(s->exact());
    EXPECT_DOUBLE_EQ(s->requests_per_period(), 3);
    EXPECT_NEAR(s->period_s(), 4.5005e-3, 1e-12);
    // Request k goes out after the first k gaps; the fourth starts the next pass.
    EXPECT_EQ(s->offset_ns(0), 0);
    EXPECT_EQ(s->offset_ns(1), 1'000'000);
    EXPECT_EQ(s->offset_ns(2), 4'000'000);
    EXPECT_EQ(s->offset_ns(3), 4'500'500);
    EXPECT_EQ(s->offset_ns(5), 4'500'500 + 4'000'000);
    EXPECT_DOUBLE_EQ(s->count_at(0), 0);
    EXPECT_DOUBLE_EQ(s->count_at(1), 1);  // request 0 is due at once
    EXPECT_DOUBLE_EQ(s->count_at(1'000'001), 2);
    EXPECT_DOUBLE_EQ(s->count_at(4'500'500 + 1), 4);

    auto bad = Schedule::from_intervals("1000\nfast\n", "iv.txt");
    EXPECT_NE(bad.status().message().find("iv.txt:2: expected a gap in microseconds"), std::string::npos)
        << bad.status().message();
    EXPECT_FALSE(Schedule::from_intervals("-5\n", "iv.txt").is_ok());
    EXPECT_FALSE(Schedule::from_intervals("1e400\n", "iv.txt").is_ok());
    EXPECT_NE(Schedule::from_intervals("# nothing\n", "iv.txt").status().message().find("no intervals"), std::string::npos);
    // Gaps that add up past the int64 clock (10,000 of 1e12 us) overflowed it: undefined, and
    // refused as "the schedule lasts 0 s". Now the line where the sum passes a century.
    std::string huge;
    for (int i = 0; i < 10000; ++i) huge += "1e12\n";
    auto long_sum = Schedule::from_intervals(huge, "iv.txt");
    const std::string long_why = long_sum.status().message();
    EXPECT_NE(long_why.find("iv.txt:3156: the gaps add up to more than 100 years"), std::string::npos) << long_why;
}

TEST(Schedule, RateTracesArePiecewiseConstantRatesWithSpeedupAndScale) {
    // 100 req/s for 10 s, nothing for 10 s, 400 req/s for 10 s (the last row lasts a step).
    const char* csv = "time_s,rate,preempt\n100,100,0\n110,0,1\n120,400,0\n";
    auto s = Schedule::from_rate_trace(csv, "t.csv");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_FALSE(s->exact());
    EXPECT_DOUBLE_EQ(s->period_s(), 30);
    EXPECT_DOUBLE_EQ(s->requests_per_period(), 5000);
    EXPECT_EQ(s->offset_ns(0), 0);
    EXPECT_EQ(s->offset_ns(50), 500'000'000);
    EXPECT_EQ(s->offset_ns(1000), 20'000'000'000);  // the quiet 10 s are skipped
    EXPECT_EQ(s->offset_ns(1400), 21'000'000'000);
    EXPECT_EQ(s->offset_ns(5000), 30'000'000'000);  // the next pass
    for (double u : {0.0, 17.0, 999.0, 1000.0, 3210.0, 4999.0, 7777.0})
        EXPECT_NEAR(s->count_at(s->offset_ns(u)), u, 1e-3) << u;
    EXPECT_NEAR(s->count_at(15'000'000'000), 1000, 1e-9);

    // 10 times faster, rates kept (so a tenth of the requests), then doubled.
    auto fast = Schedule::from_rate_trace(csv, "t.csv", 10, 2);
    ASSERT_TRUE(fast.is_ok());
    EXPECT_DOUBLE_EQ(fast->period_s(), 3);
    EXPECT_NEAR(fast->requests_per_period(), 1000, 1e-9);
    EXPECT_EQ(fast->offset_ns(100), 500'000'000);
    EXPECT_EQ(fast->offset_ns(200), 2'000'000'000);  // the first request after the quiet second

    auto err = [](const char* text) { return Schedule::from_rate_trace(text, "t.csv").status().message(); };
    EXPECT_NE(err("t,r\n0,1\n").find("t.csv:1: missing column 'time_s' in the header (expected time_s, rate; the header names 't', 'r')"), std::string::npos);
    EXPECT_NE(err("time_s,rate\n0,1\n").find("at least two rows"), std::string::npos);
    EXPECT_NE(err("time_s,rate\n0,1\n5,x\n").find("t.csv:3: rate: expected requests per second"), std::string::npos);
    EXPECT_NE(err("time_s,rate\n5,1\n5,2\n").find("t.csv:3: time_s 5 does not come after 5"), std::string::npos);
    EXPECT_NE(err("time_s,rate\n0,0\n5,0\n").find("fewer than one request"), std::string::npos);
    EXPECT_NE(err("rate,time_s\n1\n").find("t.csv:2: expected 2 fields as in the header, got 1"), std::string::npos);
    EXPECT_NE(err("time_s,rate\n0,1\n5,\n").find("t.csv:3: rate: expected requests per second"), std::string::npos);
    // Quoted fields, a byte-order mark, spaces after commas and extra columns are a spreadsheet's CSV.
    auto sheet = Schedule::from_rate_trace("\xEF\xBB\xBFtime_s, rate, note\n0, 10,\"quiet, night\"\r\n\"10\",20,x\r\n", "t.csv");
    ASSERT_TRUE(sheet.is_ok()) << sheet.status().message();
    EXPECT_DOUBLE_EQ(sheet->requests_per_period(), 300);
    EXPECT_FALSE(Schedule::from_rate_trace(csv, "t.csv", 0).is_ok());
    // A week slowed down a million times (--trace-speedup 1e-6) is 6e20 ns: llround() of it was
    // undefined and the trace refused as "the schedule lasts 0 s".
    auto slow = Schedule::from_rate_trace("time_s,rate\n0,10\n604800,10\n", "week.csv", 1e-6);
    const std::string slow_why = slow.status().message();
    EXPECT_NE(slow_why.find("week.csv: one pass lasts 1.21e+12 s at speed-up 1e-06, more than 100 years"),
              std::string::npos)
        << slow_why;
    EXPECT_TRUE(Schedule::from_rate_trace("time_s,rate\n0,10\n604800,10\n", "week.csv", 0.01).is_ok());
}

// strato loadtest holds a SecondSignalGuard so that a second Ctrl-C does not lose what it measured
// (it _exit()ed in the grace wait with no table and no --json). Each case runs in a child process.
TEST(SecondSignal, ExitsAtOnceUnlessAGuardHoldsItThenAThirdDoes) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    auto first = [] {
        signals::install_stop_handlers();
        signals::reset();
        std::raise(SIGINT);
    };
    // Without a guard (every other command): the second exits 130.
    EXPECT_EXIT(
        {
            first();
            std::raise(SIGINT);
            std::_Exit(0);
        },
        testing::ExitedWithCode(130), "");
    // With one: the second is counted (hurry), the process goes on.
    EXPECT_EXIT(
        {
            signals::SecondSignalGuard hold;
            first();
            std::raise(SIGINT);
            std::_Exit(signals::stop_requested() && signals::signal_count() == 2 ? 3 : 4);
        },
        testing::ExitedWithCode(3), "");
    // A third insists.
    EXPECT_EXIT(
        {
            signals::SecondSignalGuard hold;
            first();
            std::raise(SIGINT);
            std::raise(SIGINT);
            std::_Exit(0);
        },
        testing::ExitedWithCode(130), "");
    // A released guard defers nothing.
    EXPECT_EXIT(
        {
            { signals::SecondSignalGuard hold; }
            first();
            std::raise(SIGINT);
            std::_Exit(0);
        },
        testing::ExitedWithCode(130), "");
}

TEST(BuildRequest, HeadersAndContentLength) {
    auto u = parse_url("http://127.0.0.1:8000/p");
    ASSERT_TRUE(u.is_ok());
    EXPECT_EQ(build_request(*u, "GET", {}, ""), "GET /p HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n");
    EXPECT_EQ(build_request(*u, "POST", {"X-A: b"}, "hi"),
              "POST /p HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nX-A: b\r\nContent-Length: 2\r\n\r\nhi");
}

// Found by review: -H 'Host: api.example' sent a second Host header (a 400 by RFC 9112 for every
// request), and a header without a colon, or with a CR/LF in it, went out as it was.
TEST(BuildRequest, AHostHeaderReplacesTheDefaultAndBadHeadersAreRefused) {
    auto u = parse_url("http://127.0.0.1:8000/p");
    ASSERT_TRUE(u.is_ok());
    EXPECT_EQ(build_request(*u, "GET", {"host: api.example"}, ""), "GET /p HTTP/1.1\r\nhost: api.example\r\n\r\n");
    EXPECT_TRUE(check_header("Authorization: Bearer a.b-c").is_ok());
    EXPECT_TRUE(check_header("X-Empty:").is_ok());
    for (const char* bad : {"X-Foo", ": v", "X Foo: v", "X-A: b\r\nX-Injected: 1", "X-A: b\n", "X-A: \x7f"}) {
        Status st = check_header(bad);
        EXPECT_FALSE(st.is_ok()) << bad;
        EXPECT_NE(st.message().find("header '"), std::string::npos) << st.message();
    }
}

}  // namespace
}  // namespace strato::loadgen
