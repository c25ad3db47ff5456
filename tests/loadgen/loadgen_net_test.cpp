// The load generator against real servers on 127.0.0.1 whose behaviour is known: a latency
// distribution it must report within 5 %, a 1 s stall that open-loop measurement must show in
// the tail, and every failure class (refused, reset, 5xx, timeout, a server that goes away) —
// counted, reported, and never a hang past the deadline plus the grace period.

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <sys/resource.h>

#include "strato/loadgen/load.h"
#include "strato/loadgen/runner.h"

namespace strato::loadgen {
namespace {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// What the test server does with request number `index` (0-based, over all connections).
struct Action {
    int64_t delay_ns = 0;      // answer after this long
    int status = 200;
    bool close = false;        // close the connection instead of answering
    bool never = false;        // never answer (the connection stays open)
    bool close_after = false;  // answer, then close (without "Connection: close")
    std::string stray;         // bytes sent 20 ms after the answer, on the then idle connection
};

// A keep-alive HTTP/1.1 server on 127.0.0.1 with one event-loop thread; reads GET requests (no
// bodies) and answers each as `behaviour` says, with asynchronous timers (no blocking).
class TestServer {
public:
    explicit TestServer(std::function<Action(int64_t index, int64_t arrival_ns)> behaviour)
        : behaviour_(std::move(behaviour)), acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
        port_ = acceptor_.local_endpoint().port();
        accept();
        thread_ = std::thread([this] { io_.run(); });
    }
    ~TestServer() { stop(); }

    uint16_t port() const { return port_; }
    int64_t requests() const { return count_; }
    int64_t connections() const { return accepted_; }
    /// Closes the listener and every connection: the target disappears.
    void stop() {
        if (stopped_.exchange(true)) return;
        asio::post(io_, [this] {
            boost::system::error_code ec;
            acceptor_.close(ec);
            for (auto& w : conns_)
                if (auto c = w.lock()) c->sock.close(ec);
            io_.stop();
        });
        if (thread_.joinable()) thread_.join();
    }

private:
    struct Conn {
        explicit Conn(asio::io_context& io) : sock(io) {}
        tcp::socket sock;
        asio::streambuf buf;
    };

    void accept() {
        acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
            if (ec) return;
            auto c = std::make_shared<Conn>(io_);
            ++accepted_;
            c->sock = std::move(s);
            conns_.push_back(c);
            read(c);
            accept();
        });
    }

    void read(const std::shared_ptr<Conn>& c) {
        asio::async_read_until(c->sock, c->buf, "\r\n\r\n", [this, c](boost::system::error_code ec, size_t n) {
            if (ec) return;
            c->buf.consume(n);
            Action a = behaviour_(count_++, now_ns());
            if (a.never) return held_.push_back(c);  // keep the socket open, answer nothing
            if (a.close) {
                boost::system::error_code ignored;
                c->sock.close(ignored);
                return;
            }
            auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::nanoseconds(a.delay_ns));
            timer->async_wait([this, c, timer, a](boost::system::error_code) {
                auto body = std::make_shared<std::string>(
                    "HTTP/1.1 " + std::to_string(a.status) + " X\r\nContent-Length: 2\r\n\r\nok");
                asio::async_write(c->sock, asio::buffer(*body), [this, body, c, a](boost::system::error_code, size_t) {
                    boost::system::error_code ignored;
                    if (a.close_after) c->sock.close(ignored);
                    if (a.stray.empty()) return;
                    auto later = std::make_shared<asio::steady_timer>(io_, 20ms);
                    later->async_wait([c, later, a](boost::system::error_code) {
                        auto bytes = std::make_shared<std::string>(a.stray);
                        asio::async_write(c->sock, asio::buffer(*bytes), [bytes, c](boost::system::error_code, size_t) {});
                    });
                });
            });
            if (!a.close_after) read(c);
        });
    }

    std::function<Action(int64_t, int64_t)> behaviour_;
    asio::io_context io_;
    tcp::acceptor acceptor_;
    std::vector<std::weak_ptr<Conn>> conns_;
    std::vector<std::shared_ptr<Conn>> held_;  // connections that are never answered
    std::thread thread_;
    std::atomic<int64_t> count_{0};
    std::atomic<int64_t> accepted_{0};
    std::atomic<bool> stopped_{false};
    uint16_t port_ = 0;
};

Target target_for(uint16_t port) {
    Target t;
    auto url = parse_url("http://127.0.0.1:" + std::to_string(port) + "/x");
    EXPECT_TRUE(url.is_ok());
    t.url = *url;
    t.requests.push_back(build_request(t.url, "GET", {}, ""));
    return t;
}

uint16_t free_port() {
    asio::io_context io;
    tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    return a.local_endpoint().port();  // closed when `a` goes: nothing listens there afterwards
}

double rel(double got, double want) { return std::abs(got - want) / want; }

TEST(LoadNet, KnownLatencyDistributionIsReportedWithinFivePercent) {
    // 90 % of requests take 10 ms, 10 % take 100 ms (every tenth, whichever connection).
    TestServer server([](int64_t i, int64_t) { return Action{.delay_ns = i % 10 == 9 ? 100'000'000 : 10'000'000}; });
    RunOptions o;
    o.load.concurrency = 8;
    o.load.threads = 2;
    o.warmup_s = 0.2;
    o.duration_s = 3;
    auto p = run_point(target_for(server.port()), o, 8);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    const auto& h = p->m.latency;
    ASSERT_GT(h.count(), 800);
    EXPECT_EQ(p->m.errors(), 0);
    double p50 = static_cast<double>(h.percentile(50)), p99 = static_cast<double>(h.percentile(99));
    std::printf("  %lld requests: p50 %.3f ms (truth 10), p99 %.3f ms (truth 100), %.1f req/s\n",
                static_cast<long long>(h.count()), p50 / 1e6, p99 / 1e6, p->m.throughput());
    EXPECT_LT(rel(p50, 10e6), 0.05) << "p50 " << p50 / 1e6 << " ms, truth 10 ms";
    EXPECT_LT(rel(p99, 100e6), 0.05) << "p99 " << p99 / 1e6 << " ms, truth 100 ms";
    // closed loop at 8 outstanding: throughput = 8 / mean latency (19 ms) ~ 421 req/s
    EXPECT_LT(rel(p->m.throughput(), 8 / 0.019), 0.10) << p->m.throughput();
}

// Answers in 1 ms, except that everything arriving during one second, starting 1 s after the
// first request, is held until that second is over.
std::function<Action(int64_t, int64_t)> stall_after_one_second() {
    auto first = std::make_shared<std::atomic<int64_t>>(0);
    return [first](int64_t, int64_t arrival) {
        int64_t expected = 0;
        first->compare_exchange_strong(expected, arrival);
        int64_t stall_from = *first + 1'000'000'000, stall_to = stall_from + 1'000'000'000;
        if (arrival >= stall_from && arrival < stall_to) return Action{.delay_ns = stall_to - arrival};
        return Action{.delay_ns = 1'000'000};
    };
}

TEST(LoadNet, OpenLoopShowsAOneSecondStallInTheTail) {
    TestServer server(stall_after_one_second());
    RunOptions o;
    o.load.mode = LoadOptions::Mode::kOpen;
    o.load.threads = 1;
    o.load.max_connections = 16;  // fewer than the stall needs: later requests queue, timed from their intended send
    o.warmup_s = 0;
    o.duration_s = 3.5;
    auto p = run_point(target_for(server.port()), o, 200);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    const auto& h = p->m.latency;
    EXPECT_GT(h.count(), 500);
    std::printf("  open loop: p50 %.1f ms, p99 %.1f ms, max %.1f ms, %lld sent late\n", h.percentile(50) / 1e6,
                h.percentile(99) / 1e6, h.max() / 1e6, static_cast<long long>(p->m.delayed));
    EXPECT_GT(h.percentile(99), 800'000'000) << "p99 " << h.percentile(99) / 1e6 << " ms: the stall is hidden";
    EXPECT_GT(h.max(), 900'000'000);
    EXPECT_LT(h.percentile(50), 500'000'000);
    EXPECT_GT(p->m.delayed, 0) << "queued requests must be counted as sent late";
    // The same stall in a closed loop with one connection hides in the median: a single slow request.
    RunOptions c;
    c.load.concurrency = 1;
    c.warmup_s = 0;
    c.duration_s = 3.5;
    TestServer server2(stall_after_one_second());
    auto q = run_point(target_for(server2.port()), c, 1);
    ASSERT_TRUE(q.is_ok());
    std::printf("  closed loop, 1 connection: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", q->m.latency.percentile(50) / 1e6,
                q->m.latency.percentile(99) / 1e6, q->m.latency.max() / 1e6);
    EXPECT_LT(q->m.latency.percentile(99), 100'000'000) << "closed loop: coordinated omission hides the stall";
}

// Runs a closed loop for `seconds` and checks the run ended by its deadline plus the grace period.
PointResult run_bounded(uint16_t port, double seconds, int64_t timeout_ns = 30'000'000'000, int concurrency = 4) {
    RunOptions o;
    o.load.concurrency = concurrency;
    o.load.threads = 2;
    o.load.timeout_ns = timeout_ns;
    o.warmup_s = 0;
    o.duration_s = seconds;
    o.grace_s = 0.5;
    int64_t t0 = now_ns();
    auto p = run_point(target_for(port), o, concurrency);
    double took = static_cast<double>(now_ns() - t0) / 1e9;
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    // 3 s of slack for a loaded machine, below the 5 s a test server holds its replies.
    EXPECT_LT(took, seconds + o.grace_s + 3.0) << "the run must end by its deadline plus the grace period";
    return p.is_ok() ? *p : PointResult{};
}

TEST(LoadNet, RefusedConnectionsAreCountedAndTheRunEnds) {
    auto p = run_bounded(free_port(), 1.0);
    EXPECT_EQ(p.m.ok, 0);
    EXPECT_GT(p.m.connect_errors, 0);
}

TEST(LoadNet, ResetsAndServerErrorsAreCountedByClass) {
    // (A request whose reused connection closes unanswered is sent once more on a new one, as curl
    // does: two closes in a row make most of those fail for good.)
    TestServer server([](int64_t i, int64_t) {
        if (i % 4 == 1 || i % 4 == 2) return Action{.close = true};
        if (i % 4 == 3) return Action{.status = 503};
        return Action{};
    });
    auto p = run_bounded(server.port(), 1.0);
    EXPECT_GT(p.m.ok, 10);
    EXPECT_GT(p.m.reset_errors, 10);
    ASSERT_TRUE(p.m.http.count(503));
    EXPECT_GT(p.m.http.at(503), 10);
    EXPECT_EQ(p.m.http.size(), 1u);
    EXPECT_EQ(p.m.timeouts, 0);
    std::string table = format_table({p});
    EXPECT_NE(table.find("reset/closed"), std::string::npos) << table;
    EXPECT_NE(table.find("HTTP 503"), std::string::npos) << table;
}

// Found by review: a server that closes each connection after its response (without saying
// "Connection: close") got every second request written onto the closed socket, counted as a
// reset: 50 "errors" in 100 requests the server never saw.
TEST(LoadNet, AServerThatClosesAfterEachResponseIsNoError) {
    TestServer server([](int64_t, int64_t) { return Action{.close_after = true}; });
    RunOptions o;
    o.load.concurrency = 1;
    o.warmup_s = 0;
    o.requests = 100;
    auto p = run_point(target_for(server.port()), o, 1);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.ok, 100);
    EXPECT_EQ(p->m.reset_errors, 0);
    EXPECT_GE(server.requests(), 100);  // (a request written onto the closing socket is read by none)
}

TEST(LoadNet, RequestsWithoutAnAnswerTimeOut) {
    TestServer server([](int64_t i, int64_t) { return i % 2 ? Action{.never = true} : Action{}; });
    auto p = run_bounded(server.port(), 1.5, 200'000'000, 2);
    EXPECT_GT(p.m.timeouts, 2);
    EXPECT_GT(p.m.ok, 2);
}

TEST(LoadNet, AServerThatDisappearsMidRunIsReportedAndTheRunEnds) {
    auto server = std::make_unique<TestServer>([](int64_t, int64_t) { return Action{.delay_ns = 1'000'000}; });
    uint16_t port = server->port();
    std::thread killer([&] {
        std::this_thread::sleep_for(700ms);
        server->stop();
    });
    auto p = run_bounded(port, 2.0);
    killer.join();
    EXPECT_GT(p.m.ok, 10);
    EXPECT_GT(p.m.connect_errors + p.m.reset_errors, 0);
}

TEST(LoadNet, OutstandingRequestsAtTheDeadlineAreUnfinishedNotLost) {
    TestServer server([](int64_t i, int64_t) { return Action{.delay_ns = i < 4 ? 0 : 5'000'000'000}; });
    auto p = run_bounded(server.port(), 0.5);
    EXPECT_EQ(p.m.unfinished, 4);
}

// Found by review: requests answered in the grace were counted nowhere, and the counts did not add
// up to what the server received.
TEST(LoadNet, RequestsAnsweredInTheGraceAreLateAndEveryRequestIsCounted) {
    // Each request takes 300 ms: those in flight at the 0.5 s deadline end in the 0.5 s grace.
    TestServer server([](int64_t, int64_t) { return Action{.delay_ns = 300'000'000}; });
    auto p = run_bounded(server.port(), 0.5);
    EXPECT_EQ(p.m.late, 4);
    EXPECT_EQ(p.m.unfinished, 0);
    EXPECT_EQ(p.m.ok + p.m.errors() + p.m.late + p.m.unfinished, server.requests());
    EXPECT_EQ(static_cast<int64_t>(p.m.latency.count()), p.m.ok);  // the late are not in the latencies
}

// Found by review: after a warm-up, -n 100 measured 130-140 requests (the count was polled).
TEST(LoadNet, RequestCountAfterAWarmupSendsThatMany) {
    TestServer server([](int64_t, int64_t) { return Action{}; });
    RunOptions o;
    o.load.concurrency = 4;
    o.warmup_s = 0.2;
    o.requests = 100;
    auto p = run_point(target_for(server.port()), o, 4);
    ASSERT_TRUE(p.is_ok());
    const int64_t measured = p->m.ok + p->m.errors() + p->m.late + p->m.unfinished;
    EXPECT_GE(measured, 100);
    // With the warm-up's requests still in flight (one per connection) and what is sent between
    // the warm-up's end and the budget (a few, more on a loaded machine); polling the count let
    // hundreds more through against this server.
    EXPECT_LE(measured, 124);
    EXPECT_EQ(p->m.unfinished, 0);
}

// Found by review: an open loop with more threads than --max-connections opened one connection
// per thread.
// Found by review: the window of -n N ended when the runner's poll (every 5 ms) saw the last answer,
// not with the answer: -n 10 against a server of 30,000 req/s measured 11 ms, 976 req/s. Here each
// poll takes 0.5 s (its Ctrl-C check sleeps): the window must still end with the fifth answer.
TEST(LoadNet, ARequestCountsWindowEndsWithItsLastAnswer) {
    TestServer server([](int64_t, int64_t) { return Action{}; });
    RunOptions o;
    o.load.concurrency = 1;
    o.load.threads = 1;
    o.warmup_s = 0;
    o.requests = 5;
    o.interrupted = [] {
        std::this_thread::sleep_for(500ms);
        return false;
    };
    auto p = run_point(target_for(server.port()), o, 1);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.ok, 5);
    EXPECT_LT(p->m.seconds, 0.25);  // 5 answers on loopback, not the 0.5 s poll
    EXPECT_GT(p->m.seconds, 0);
}

TEST(LoadNet, OpenLoopKeepsToMaxConnectionsWhateverTheThreads) {
    TestServer server([](int64_t, int64_t) { return Action{.delay_ns = 20'000'000}; });
    RunOptions o;
    o.load.mode = LoadOptions::Mode::kOpen;
    o.load.threads = 16;
    o.load.max_connections = 2;
    o.warmup_s = 0;
    o.duration_s = 0.5;
    auto p = run_point(target_for(server.port()), o, 200);
    ASSERT_TRUE(p.is_ok());
    EXPECT_LE(server.connections(), 2);
    EXPECT_GT(p->m.ok, 10);
}

// Found by review: -n against a dead port never ended (refused connects take no budget).
TEST(LoadNet, RequestCountEndsAgainstADeadPort) {
    RunOptions o;
    o.load.concurrency = 2;
    o.load.threads = 1;
    o.warmup_s = 0.1;
    o.requests = 5;
    const int64_t t0 = now_ns();
    auto p = run_point(target_for(free_port()), o, 2);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_GT(p->m.connect_errors, 0);
    EXPECT_LT(static_cast<double>(now_ns() - t0) / 1e9, 10.0);
}

// Found by review: a failed connect took nothing of the request budget, so `-n 1 --request-rate 5`
// against a dead port ran for 51 s and counted 257 connect errors (one per due request, until the
// runner gave up at the budget plus --max-connections).
TEST(LoadNet, RequestCountCountsFailedConnectsAgainstTheBudget) {
    for (auto mode : {LoadOptions::Mode::kOpen, LoadOptions::Mode::kClosed}) {
        RunOptions o;
        o.load.mode = mode;
        o.load.threads = 1;
        o.load.concurrency = 1;
        o.warmup_s = 0;
        o.requests = 3;
        o.grace_s = 0.2;
        auto p = run_point(target_for(free_port()), o, mode == LoadOptions::Mode::kOpen ? 50 : 1);
        ASSERT_TRUE(p.is_ok()) << p.status().message();
        EXPECT_EQ(p->m.connect_errors, 3) << (mode == LoadOptions::Mode::kOpen ? "open loop" : "closed loop");
        EXPECT_EQ(p->m.ok + p->m.errors(), 3);
    }
}

TEST(LoadNet, RequestCountStopsTheRun) {
    TestServer server([](int64_t, int64_t) { return Action{}; });
    RunOptions o;
    o.load.concurrency = 2;
    o.warmup_s = 0;
    o.requests = 300;
    auto p = run_point(target_for(server.port()), o, 2);
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(p->m.ok, 300);
    EXPECT_EQ(server.requests(), 300);
}

// --busy-poll: the threads poll before sleeping; what they measure, the open-loop schedule, the
// stop at the deadline and the timeouts are the same as without it.
TEST(LoadNet, BusyPollingMeasuresTheSameAndKeepsTheSchedule) {
    TestServer server([](int64_t i, int64_t) { return Action{.delay_ns = i % 10 == 9 ? 20'000'000 : 2'000'000}; });
    RunOptions c;
    c.load.concurrency = 4;
    c.load.threads = 2;
    c.load.busy_poll_ns = 200'000;
    c.warmup_s = 0.1;
    c.duration_s = 1.5;
    auto p = run_point(target_for(server.port()), c, 4);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.errors(), 0);
    // Spinning threads compete for the cores with the server here, so the bounds are looser than
    // the 5 % of KnownLatencyDistributionIsReportedWithinFivePercent: they catch a wrong clock,
    // not scheduling noise.
    EXPECT_LT(rel(static_cast<double>(p->m.latency.percentile(50)), 2e6), 0.25) << p->m.latency.percentile(50);
    EXPECT_LT(rel(static_cast<double>(p->m.latency.percentile(99)), 20e6), 0.25) << p->m.latency.percentile(99);

    RunOptions o;
    o.load.mode = LoadOptions::Mode::kOpen;
    o.load.threads = 1;
    // A 10 ms spin, longer than the 5 ms gap: every send falls due while spinning. A spin that ran
    // past the timer sends nearly all requests over 1 ms late (measured: 351 of 400); with both
    // cores busy elsewhere about a quarter are.
    o.load.busy_poll_ns = 10'000'000;
    o.warmup_s = 0;
    o.duration_s = 2;
    const int64_t t0 = now_ns();
    auto q = run_point(target_for(server.port()), o, 200);
    ASSERT_TRUE(q.is_ok()) << q.status().message();
    EXPECT_LT(static_cast<double>(now_ns() - t0) / 1e9, o.duration_s + o.grace_s + 5.0);
    EXPECT_LT(rel(q->m.throughput(), 200), 0.05) << q->m.throughput();
    EXPECT_LT(q->m.delayed, q->m.ok / 2) << "requests sent over 1 ms after their intended time (spinning past a timer)";

    TestServer silent([](int64_t, int64_t) { return Action{.never = true}; });
    RunOptions t;
    t.load.concurrency = 2;
    t.load.busy_poll_ns = 500'000;
    t.load.timeout_ns = 200'000'000;
    t.warmup_s = 0;
    t.duration_s = 1;
    t.grace_s = 0.5;
    const int64_t t1 = now_ns();
    auto r = run_point(target_for(silent.port()), t, 2);
    ASSERT_TRUE(r.is_ok());
    EXPECT_LT(static_cast<double>(now_ns() - t1) / 1e9, 6.5);
    EXPECT_GT(r->m.timeouts, 2);
}

TEST(LoadNet, StabilityWindowsStopWhenThreeAgree) {
    TestServer server([](int64_t, int64_t) { return Action{.delay_ns = 2'000'000}; });
    RunOptions o;
    o.load.concurrency = 2;
    o.warmup_s = 0.1;
    o.stability_pct = 25;
    o.window_s = 0.3;
    o.max_trials = 8;
    auto p = run_point(target_for(server.port()), o, 2);
    ASSERT_TRUE(p.is_ok());
    EXPECT_TRUE(p->stable);
    EXPECT_GE(p->windows, 3);
    EXPECT_LE(p->windows, 8);
    EXPECT_NEAR(p->m.seconds, 0.9, 0.15);  // the last three windows
}

// Found by review: against a server that never answers, three empty windows "agreed" on 0 req/s and
// a mean of 0 ms, and the level was reported stable.
TEST(LoadNet, WindowsThatAnswerNothingAreNotStable) {
    TestServer server([](int64_t, int64_t) { return Action{.never = true}; });
    RunOptions o;
    o.load.concurrency = 1;
    o.load.threads = 1;
    o.warmup_s = 0;
    o.stability_pct = 10;
    o.window_s = 0.1;
    o.max_trials = 3;
    o.grace_s = 0.05;
    auto p = run_point(target_for(server.port()), o, 1);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.ok, 0);
    EXPECT_EQ(p->windows, 3);
    EXPECT_FALSE(p->stable);
    EXPECT_NE(format_table({*p}).find("(not stable)"), std::string::npos);
}

TEST(LoadNet, SloSearchFindsTheKnee) {
    // Capacity about 400 req/s: a single-file server that takes 2.5 ms per request.
    std::atomic<int64_t> busy_until{0};
    TestServer server([&](int64_t, int64_t arrival) {
        int64_t start = std::max(arrival, busy_until.load());
        busy_until = start + 2'500'000;
        return Action{.delay_ns = busy_until - arrival};
    });
    RunOptions o;
    o.load.threads = 1;
    o.warmup_s = 0.1;
    o.duration_s = 0.6;
    o.grace_s = 0.2;
    // A p99 objective of 100 ms: past capacity the queue grows (rate - 400) × 0.6 s requests of
    // 2.5 ms each, a miss above ~465 req/s; below it only a scheduling stall of 100 ms misses
    // (a 20 ms objective failed at 50 req/s in CI when one stall on the busy 2 cores was the p99).
    constexpr int64_t kSlo = 100'000'000;
    auto r = slo_search(target_for(server.port()), o, kSlo, 50, 3200);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_TRUE(r->found);
    EXPECT_GE(r->best_rate, 200);
    EXPECT_LE(r->best_rate, 480);
    EXPECT_TRUE(slo_miss_reason(*r->best, kSlo).empty());
}

// Found by review: a probe that could not start after others were measured (here: out of file
// descriptors, as `ulimit -n` lowered mid-run) threw the measured probes away; the search returned
// only the error, and the command printed no table and wrote no --json. (A death test: the limit
// is lowered for good, so in a child process of its own.)
void slo_search_losing_its_descriptors() {
    TestServer server([](int64_t, int64_t) { return Action{.delay_ns = 1'000'000}; });
    RunOptions o;
    o.load.threads = 1;
    o.load.max_connections = 64;
    o.warmup_s = 0;
    o.duration_s = 1;
    o.grace_s = 0.2;
    bool lowered = false;
    o.progress = [&](const std::string& line) {
        if (lowered || line.rfind("SLO probe", 0) != 0) return;
        rlimit few{32, 32};  // the next probe's 64 connections do not fit
        lowered = ::setrlimit(RLIMIT_NOFILE, &few) == 0;
    };
    auto r = slo_search(target_for(server.port()), o, 1'000'000'000, 20, 1000);
    std::string why;
    if (!lowered) why = "the limit was not lowered";
    else if (!r.is_ok()) why = "the search returned only an error: " + r.status().message();
    else if (r->probes.size() != 1) why = fmt::format("{} probes kept, expected 1", r->probes.size());
    else if (!r->found || r->best_rate != 20) why = "the measured probe is not the answer";
    else if (r->capped) why = "said to be capped at --max-rate";
    else if (r->failed.is_ok()) why = "the failure is not said";
    else if (r->failed.message().find("file descriptors") == std::string::npos) why = "failure: " + r->failed.message();
    else if (auto j = to_json(r->probes, "t", o, *r);
             !j["slo"]["failed"].is_string() ||
             j["slo"]["failed"].get<std::string>().find("file descriptors") == std::string::npos)
        why = "the JSON does not say it: " + j["slo"].dump().substr(0, 300);
    std::fprintf(stderr, "%s\n", why.c_str());
    std::exit(why.empty() ? 0 : 1);
}

TEST(LoadNetDeathTest, AnSloProbeThatCannotStartKeepsTheProbesMeasured) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(slo_search_losing_its_descriptors(), ::testing::ExitedWithCode(0), "");
}

// A server that answers after `delay_ns` and keeps each request's arrival time.
struct ArrivalServer {
    explicit ArrivalServer(int64_t delay_ns)
        : server([this, delay_ns](int64_t, int64_t t) {
              std::lock_guard lock(mu);
              at.push_back(t);
              return Action{.delay_ns = delay_ns};
          }) {}
    std::mutex mu;
    std::vector<int64_t> at;
    TestServer server;  // last: destroyed (its thread stopped) before what it writes to
};

// Open loop on `s` with 2 threads and no warm-up.
RunOptions following(const Schedule& s) {
    RunOptions o;
    o.load.mode = LoadOptions::Mode::kOpen;
    o.load.threads = 2;
    o.load.schedule = std::make_shared<const Schedule>(s);
    o.warmup_s = 0;
    return o;
}

// --trace: the server sees the recording's rates second by second, every request of one pass
// arrives, and the timeline reports what was asked and answered per window.
TEST(LoadNet, RateTraceIsReplayedSecondBySecond) {
    ArrivalServer log(1'000'000);
    auto& arrivals = log.at;
    auto& server = log.server;
    auto sched = Schedule::from_rate_trace("time_s,rate\n0,100\n1,400\n2,0\n", "t.csv");
    ASSERT_TRUE(sched.is_ok()) << sched.status().message();
    EXPECT_DOUBLE_EQ(sched->requests_per_period(), 500);
    RunOptions o = following(*sched);
    o.duration_s = sched->period_s();
    o.window_s = 1;
    const int64_t start = now_ns();
    auto p = run_point(target_for(server.port()), o, sched->mean_rate());
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.ok, 500);
    EXPECT_EQ(p->m.errors(), 0);
    EXPECT_EQ(server.requests(), 500);
    std::lock_guard lock(log.mu);
    int per_second[4] = {0, 0, 0, 0};
    for (int64_t at : arrivals) ++per_second[std::clamp<int64_t>((at - start) / 1'000'000'000, 0, 3)];
    // Sends are on schedule unless this machine stalls; a stall across a boundary moves what
    // fell due during it (a 150 ms stall: 60 at 400 req/s) into the next second.
    EXPECT_NEAR(per_second[0], 100, 60);
    EXPECT_NEAR(per_second[1], 400, 60);
    EXPECT_EQ(per_second[2] + per_second[3], 500 - per_second[0] - per_second[1]);
    EXPECT_LE(per_second[2] + per_second[3], 60);
    ASSERT_EQ(p->timeline.size(), 3u);
    EXPECT_NEAR(p->timeline[0].asked, 100, 10);
    EXPECT_NEAR(p->timeline[1].asked, 400, 40);
    EXPECT_NEAR(p->timeline[2].asked, 0, 10);
    EXPECT_GT(p->timeline[1].throughput, 2 * p->timeline[0].throughput);
}

// --request-intervals: perf_analyzer's file, cycled; the gaps alternate as written.
TEST(LoadNet, RequestIntervalsAreSentAsWrittenAndCycled) {
    ArrivalServer log(0);
    auto& arrivals = log.at;
    auto& server = log.server;
    auto sched = Schedule::from_intervals("2000\n8000\n", "iv.txt");  // 2 requests per 10 ms
    ASSERT_TRUE(sched.is_ok());
    RunOptions o = following(*sched);
    o.duration_s = 1;
    auto p = run_point(target_for(server.port()), o, sched->mean_rate());
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_NEAR(static_cast<double>(p->m.ok), 200, 3);  // 100 passes of the file in 1 s
    std::lock_guard lock(log.mu);
    std::sort(arrivals.begin(), arrivals.end());
    std::vector<int64_t> gaps;
    for (size_t i = 1; i < arrivals.size(); ++i) gaps.push_back(arrivals[i] - arrivals[i - 1]);
    std::sort(gaps.begin(), gaps.end());
    ASSERT_GE(gaps.size(), 100u);
    // A quarter of the way up the sorted gaps lies among the 2 ms ones, three quarters among the 8 ms.
    EXPECT_NEAR(static_cast<double>(gaps[gaps.size() / 4]), 2e6, 0.5e6);
    EXPECT_NEAR(static_cast<double>(gaps[gaps.size() * 3 / 4]), 8e6, 0.5e6);
}

// A Ctrl-C that arrives `after_s` seconds from now (as the command's stop_requested()).
std::function<bool()> ctrl_c_after(double after_s) {
    const int64_t at = now_ns() + static_cast<int64_t>(after_s * 1e9);
    return [at] { return now_ns() >= at; };
}

double seconds_since(int64_t t0) { return static_cast<double>(now_ns() - t0) / 1e9; }

// Found by review: against a server that never answers, a Ctrl-C 3 s into a 20 s run with --grace
// 8s exited 8.1 s later: the grace wait never looked at the interrupt.
TEST(LoadNet, CtrlCCutsTheGraceShortAndTheOutstandingAreUnfinished) {
    TestServer server([](int64_t, int64_t) { return Action{.never = true}; });
    RunOptions o;
    o.load.concurrency = 2;
    o.load.threads = 1;
    o.warmup_s = 0;
    o.duration_s = 20;
    o.grace_s = 8;
    const int64_t t0 = now_ns();
    o.interrupted = ctrl_c_after(0.3);
    auto p = run_point(target_for(server.port()), o, 2);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_TRUE(p->interrupted);
    EXPECT_EQ(p->m.ok, 0);
    EXPECT_EQ(p->m.unfinished, 2);
    EXPECT_NEAR(p->m.seconds, 0.3, 0.2);
}

// The SLO search raises the grace to twice the objective (8 s here): a Ctrl-C cuts that short too.
TEST(LoadNet, CtrlCCutsTheSloSearchsRaisedGraceShort) {
    TestServer server([](int64_t, int64_t) { return Action{.never = true}; });
    RunOptions o;
    o.load.threads = 1;
    o.warmup_s = 0;
    o.duration_s = 20;
    const int64_t t0 = now_ns();
    o.interrupted = ctrl_c_after(0.3);
    auto r = slo_search(target_for(server.port()), o, 4'000'000'000, 10, 1000);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_TRUE(r->interrupted);
    EXPECT_FALSE(r->found);
}

// Found by review: a probe cut short by Ctrl-C after 0.25 s of its 1 s "met" the objective and was
// reported as the highest rate that does (JSON found: true).
TEST(LoadNet, AnSloProbeCutShortIsNeitherAPassNorTheAnswer) {
    TestServer server([](int64_t, int64_t) { return Action{.delay_ns = 10'000'000}; });
    RunOptions o;
    o.load.threads = 1;
    o.warmup_s = 0;
    o.duration_s = 1;
    {  // in the first probe: nothing is found
        o.interrupted = ctrl_c_after(0.3);
        auto r = slo_search(target_for(server.port()), o, 50'000'000, 40, 1000);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_TRUE(r->interrupted);
        EXPECT_FALSE(r->found);
        EXPECT_EQ(r->best_rate, 0);
        EXPECT_FALSE(r->best);
        ASSERT_EQ(r->probes.size(), 1u);
        EXPECT_TRUE(r->probes[0].interrupted);
        EXPECT_GT(r->probes[0].m.ok, 0);  // it measured something, and it is kept (marked)
        auto j = to_json(r->probes, "t", o, *r);
        EXPECT_EQ(j["slo"]["interrupted"], true);
        EXPECT_EQ(j["slo"]["found"], false);
        EXPECT_EQ(j["interrupted"], true);
    }
    {  // in the second: the first, complete and passing, is the answer
        o.interrupted = ctrl_c_after(1.6);
        auto r = slo_search(target_for(server.port()), o, 50'000'000, 40, 1000);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_TRUE(r->interrupted);
        ASSERT_TRUE(r->found);
        EXPECT_EQ(r->best_rate, 40);
        EXPECT_FALSE(r->capped);
        ASSERT_EQ(r->probes.size(), 2u);
        EXPECT_FALSE(r->probes[0].interrupted);
        EXPECT_TRUE(r->probes[1].interrupted);
        EXPECT_EQ(r->probes[1].level, 80);
    }
}

// Found by review: the level a Ctrl-C cut short was an ordinary row of the sweep.
TEST(LoadNet, AnInterruptedSweepLevelIsMarkedPartial) {
    TestServer server([](int64_t, int64_t) { return Action{.delay_ns = 1'000'000}; });
    RunOptions o;
    o.load.threads = 1;
    o.warmup_s = 0;
    o.duration_s = 0.6;
    o.grace_s = 0.2;
    o.interrupted = ctrl_c_after(0.9);
    auto points = run_sweep(target_for(server.port()), o, {1, 2, 4});
    ASSERT_TRUE(points.is_ok()) << points.status().message();
    ASSERT_EQ(points->size(), 2u);
    EXPECT_FALSE((*points)[0].interrupted);
    EXPECT_TRUE((*points)[1].interrupted);
    std::string table = format_table(*points);
    EXPECT_EQ(table.find("interrupted"), table.rfind("interrupted")) << table;  // one row only
    EXPECT_NE(table.find("(interrupted after"), std::string::npos) << table;
    auto j = to_json(*points, "t", o, std::nullopt);
    EXPECT_EQ(j["points"][0]["interrupted"], false);
    EXPECT_EQ(j["points"][1]["interrupted"], true);
    EXPECT_EQ(j["interrupted"], true);
}

// Found by review: against a dead port, an open loop counted more connect errors than requests
// were due (a connect made ahead of demand, or retried after the queue drained, failed no request).
TEST(LoadNet, OpenLoopCountsEachDueRequestOnceAgainstADeadPort) {
    RunOptions o;
    o.load.mode = LoadOptions::Mode::kOpen;
    o.load.threads = 1;
    o.warmup_s = 0;
    o.duration_s = 1.1;
    o.grace_s = 0.2;
    auto p = run_point(target_for(free_port()), o, 4);  // due at 0, 0.25, 0.5, 0.75 and 1 s
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.ok, 0);
    EXPECT_EQ(p->m.ok + p->m.errors() + p->m.late + p->m.unfinished, 5);
    EXPECT_GE(p->m.connect_errors, 4);
}

// A recording's requests add up to one pass whatever the server does: ok + errors + late +
// unfinished is what fell due. Its next pass's first request, due as the run ended, waited for a
// connection (a dead port; a server that holds the only one) and was counted unfinished: 21 of 20.
TEST(LoadNet, ARecordingsRequestsAddUpToOnePassAgainstADeadOrSilentServer) {
    TestServer silent([](int64_t, int64_t) { return Action{.never = true}; });
    auto sched = Schedule::from_rate_trace("time_s,rate\n0,100\n1,100\n", "t.csv", 10);  // 20 in 0.2 s
    ASSERT_TRUE(sched.is_ok()) << sched.status().message();
    for (int round = 0; round < 4; ++round) {
        RunOptions o;
        o.load.mode = LoadOptions::Mode::kOpen;
        o.load.schedule = std::make_shared<const Schedule>(*sched);
        o.load.threads = 1;
        o.load.max_connections = 1;
        o.warmup_s = 0;
        o.duration_s = sched->period_s();
        o.window_s = 1;
        o.grace_s = 0.05;
        const uint16_t port = round % 2 ? silent.port() : free_port();
        auto p = run_point(target_for(port), o, sched->mean_rate());
        ASSERT_TRUE(p.is_ok()) << p.status().message();
        EXPECT_EQ(p->m.ok + p->m.errors() + p->m.late + p->m.unfinished, 20)
            << (round % 2 ? "silent server" : "dead port") << ": " << p->m.connect_errors << " connect errors, "
            << p->m.unfinished << " unfinished";
    }
}

// Found by review: a recording that asks for more than the client takes (perf_analyzer intervals of
// 0: one request a nanosecond) fell behind, and the requests due but never taken were counted
// nowhere: a 0.5 s run of 5e8 due requests added up to 2.6e7 (ok + errors + late + unfinished).
TEST(LoadNet, ARecordingTooFastForTheClientCountsEveryDueRequest) {
    TestServer silent([](int64_t, int64_t) { return Action{.never = true}; });
    auto sched = Schedule::from_intervals("0\n", "zero.txt");  // (a gap of 0 is 1 ns)
    ASSERT_TRUE(sched.is_ok()) << sched.status().message();
    for (int round = 0; round < 2; ++round) {
        RunOptions o = following(*sched);  // 2 threads: each counts its own share
        o.load.max_connections = 2;
        o.duration_s = 0.2;
        o.grace_s = 0.05;
        o.window_s = 1;
        const uint16_t port = round ? silent.port() : free_port();
        auto p = run_point(target_for(port), o, sched->mean_rate());
        ASSERT_TRUE(p.is_ok()) << p.status().message();
        // what fell due in the 0.2 s: one a nanosecond
        EXPECT_EQ(p->m.ok + p->m.errors() + p->m.late + p->m.unfinished, 200'000'000)
            << (round ? "silent server" : "dead port") << ": " << p->m.connect_errors << " connect errors, "
            << p->m.unfinished << " unfinished";
    }
}

// Found by review: a recording's last window ended after the grace (the wait for outstanding
// answers), and its asked rate counted what the schedule asked in the grace, which was never sent:
// 100 req/s asked read as 50 with a grace as long as the window.
TEST(LoadNet, TheLastWindowOfARecordingEndsBeforeTheGrace) {
    TestServer silent([](int64_t, int64_t) { return Action{.never = true}; });
    // 0 req/s for 0.25 s, then 100 req/s for 0.25 s; the next pass starts with 0 again
    auto sched = Schedule::from_rate_trace("time_s,rate\n0,0\n1,100\n", "t.csv", 4);
    ASSERT_TRUE(sched.is_ok()) << sched.status().message();
    RunOptions o = following(*sched);
    o.duration_s = sched->period_s();
    o.window_s = 0.25;
    o.grace_s = 0.25;  // waited for in full: the server answers nothing
    auto p = run_point(target_for(silent.port()), o, sched->mean_rate());
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    ASSERT_EQ(p->timeline.size(), 2u);
    EXPECT_NEAR(p->timeline[0].asked, 0, 20);
    EXPECT_NEAR(p->timeline[1].asked, 100, 20);
}

// The retry of a request whose reused connection closed unanswered works in the open loop too:
// each due request counted once, none a reset.
TEST(LoadNet, OpenLoopAgainstAServerThatClosesAfterEachResponse) {
    TestServer server([](int64_t, int64_t) { return Action{.close_after = true}; });
    RunOptions o;
    o.load.mode = LoadOptions::Mode::kOpen;
    o.load.threads = 1;
    o.load.max_connections = 1;
    o.warmup_s = 0;
    o.duration_s = 1.025;  // (not on a due time: 1.05 s counted it or not, by the scheduler's timing)
    o.grace_s = 0.5;
    auto p = run_point(target_for(server.port()), o, 20);  // due every 50 ms: 0 ... 1 s
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.errors(), 0);
    EXPECT_EQ(p->m.ok + p->m.late + p->m.unfinished, 21);
    EXPECT_GE(p->m.ok, 20);
}

// A server on 127.0.0.1 that takes one connection at a time and hands it to `serve`, on a thread
// of its own, until it is destroyed.
class SerialServer {
public:
    explicit SerialServer(std::function<void(tcp::socket&)> serve)
        : serve_(std::move(serve)), acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
        port_ = acceptor_.local_endpoint().port();
        thread_ = std::thread([this] {
            for (;;) {
                boost::system::error_code ec;
                tcp::socket s(io_);
                acceptor_.accept(s, ec);
                if (ec || stopped_) return;
                serve_(s);
            }
        });
    }
    ~SerialServer() {
        stopped_ = true;
        boost::system::error_code ec;
        asio::io_context io;
        tcp::socket poke(io);
        poke.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);  // wakes the accept
        poke.close(ec);
        thread_.join();
    }
    uint16_t port() const { return port_; }

private:
    std::function<void(tcp::socket&)> serve_;
    asio::io_context io_;
    tcp::acceptor acceptor_;
    std::thread thread_;
    std::atomic<bool> stopped_{false};
    uint16_t port_ = 0;
};

// A server on 127.0.0.1 that answers every request (on any connection, one at a time) with the
// same raw bytes, then closes the connection: for answers no well-behaved server sends.
class RawServer {
public:
    explicit RawServer(std::string reply)
        : reply_(std::move(reply)), server_([this](tcp::socket& s) {
              boost::system::error_code ec;
              asio::streambuf buf;
              asio::read_until(s, buf, "\r\n\r\n", ec);
              if (ec) return;
              asio::write(s, asio::buffer(reply_), ec);
              s.shutdown(tcp::socket::shutdown_send, ec);
              // (read until the client closes: a close with unread bytes would be an RST)
              char sink[256];
              while (!ec) s.read_some(asio::buffer(sink), ec);
          }) {}
    uint16_t port() const { return server_.port(); }

private:
    std::string reply_;
    SerialServer server_;
};

// A server on 127.0.0.1 that answers each request with a 413 as soon as its head is read, keeps the
// connection, and reads and drops the body the request announced (what a server that refuses large
// bodies does, as RFC 9112 9.3 asks); a request line that is not one is a 400 and a close. With
// `close`, it closes the connection after the 413 instead, the body unread (a reset for the client's
// write, as nginx's lingering close ends).
class EarlyAnswerServer {
public:
    explicit EarlyAnswerServer(bool close = false) : close_(close), server_([this](tcp::socket& s) { serve(s); }) {}
    uint16_t port() const { return server_.port(); }
    int out_of_step() const { return out_of_step_; }

private:
    void serve(tcp::socket& s) {
        boost::system::error_code ec;
        asio::streambuf buf;
        while (!ec) {
            const size_t n = asio::read_until(s, buf, "\r\n\r\n", ec);
            if (ec) break;
            std::string head(asio::buffers_begin(buf.data()), asio::buffers_begin(buf.data()) + n);
            buf.consume(n);
            if (!head.starts_with("POST ")) {
                ++out_of_step_;
                asio::write(s, asio::buffer(std::string("HTTP/1.1 400 X\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")), ec);
                break;
            }
            if (close_) {
                asio::write(s, asio::buffer(std::string("HTTP/1.1 413 X\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")), ec);
                s.close(ec);
                break;
            }
            asio::write(s, asio::buffer(std::string("HTTP/1.1 413 X\r\nContent-Length: 0\r\n\r\n")), ec);
            const size_t at = head.find("Content-Length: ");
            size_t left = at == std::string::npos ? 0 : std::stoull(head.substr(at + 16));
            const size_t buffered = std::min(left, buf.size());
            buf.consume(buffered);
            left -= buffered;
            std::vector<char> sink(1 << 20);
            while (left > 0 && !ec) left -= s.read_some(asio::buffer(sink.data(), std::min(left, sink.size())), ec);
        }
    }

    bool close_;
    std::atomic<int> out_of_step_{0};
    SerialServer server_;  // last: its thread starts once the members it reads are made
};

// Found by review: an answer that came before the whole request was written (a 413 for a large body)
// left the rest of the body unsent, and the next request went out on the same connection: the server,
// still reading the first body, took it for that body's bytes (resets and 400s the client caused).
TEST(LoadNet, AnAnswerBeforeTheBodyIsWrittenEndsTheConnection) {
    EarlyAnswerServer server;
    Target t = target_for(server.port());
    t.requests = {build_request(t.url, "POST", {}, std::string(32 << 20, 'x'))};  // more than the socket buffers
    RunOptions o;
    o.load.concurrency = 1;
    o.load.threads = 1;
    o.load.timeout_ns = 10'000'000'000;
    o.warmup_s = 0;
    o.requests = 4;
    auto p = run_point(t, o, 1);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.http[413], 4);
    EXPECT_EQ(p->m.errors(), 4) << format_table({*p});
    EXPECT_EQ(server.out_of_step(), 0);
}

// Found by review: a server that answers a 413 and closes, the body unread, resets the client's write;
// the answer waiting in the receive buffer was never read, and 41 of 50 413s counted "reset/closed".
TEST(LoadNet, AnAnswerBeforeAResetWriteIsRead) {
    EarlyAnswerServer server(/*close=*/true);
    Target t = target_for(server.port());
    t.requests = {build_request(t.url, "POST", {}, std::string(32 << 20, 'x'))};
    RunOptions o;
    o.load.concurrency = 1;
    o.load.threads = 1;
    o.load.timeout_ns = 10'000'000'000;
    o.warmup_s = 0;
    o.requests = 8;
    auto p = run_point(t, o, 1);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->m.http[413], 8) << format_table({*p});
    EXPECT_EQ(p->m.reset_errors, 0);
}

PointResult run_requests(uint16_t port, int64_t n) {
    RunOptions o;
    o.load.concurrency = 1;
    o.load.timeout_ns = 10'000'000'000;
    o.warmup_s = 0;
    o.requests = n;
    auto p = run_point(target_for(port), o, 1);
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    return p.is_ok() ? *p : PointResult{};
}

// Found by review: a body cut short by the close (Content-Length promised more), bytes that are
// not HTTP, and a body longer than its Content-Length were all counted "reset/closed" or passed as
// answers; they are bad responses, and the output says which.
TEST(LoadNet, TruncatedAndNonHttpAnswersAreBadResponsesThatSayWhy) {
    struct Case {
        std::string reply, why;
    };
    for (const Case& k : {Case{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "truncated body"},
                          Case{"SSH-2.0-OpenSSH_9.2\r\n", "does not start with 'HTTP/'"},
                          Case{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", "after the end of a complete response"}}) {
        RawServer server(k.reply);
        auto p = run_requests(server.port(), 5);
        EXPECT_EQ(p.m.ok, 0) << k.reply;
        EXPECT_EQ(p.m.reset_errors, 0) << k.reply;
        EXPECT_EQ(p.m.protocol_errors, 5) << k.reply;
        EXPECT_NE(p.m.protocol_example.find(k.why), std::string::npos) << p.m.protocol_example;
        const std::string table = format_table({p});
        EXPECT_NE(table.find("5 bad response (first: "), std::string::npos) << table;
        EXPECT_EQ(table.find("reset/closed"), std::string::npos) << table;
        const auto j = to_json({p}, "t", RunOptions{}, std::nullopt);
        EXPECT_EQ(j["points"][0]["errors"]["protocol"], 5);
        EXPECT_NE(j["points"][0]["errors"]["protocol_example"].get<std::string>().find(k.why), std::string::npos);
    }
    RawServer closes("");  // a close before a byte of the answer stays a reset
    auto p = run_requests(closes.port(), 5);
    EXPECT_EQ(p.m.reset_errors, 5);
    EXPECT_EQ(p.m.protocol_errors, 0);
}

// Found by review: bytes on an idle keep-alive connection (a second response to one request, sent
// after the first had been read) closed the connection and were counted nowhere: the run looked clean.
TEST(LoadNet, BytesOnAnIdleConnectionAreABadResponseThatSaysWhy) {
    TestServer server([](int64_t, int64_t) {
        return Action{.stray = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"};
    });
    RunOptions o;
    o.load.mode = LoadOptions::Mode::kOpen;
    o.load.threads = 1;
    o.load.max_connections = 1;
    o.warmup_s = 0;
    o.duration_s = 1.025;
    o.grace_s = 0.5;
    auto p = run_point(target_for(server.port()), o, 10);  // due every 100 ms: the stray bytes find it idle
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_GE(p->m.ok, 8);
    EXPECT_GE(p->m.protocol_errors, 5);
    EXPECT_NE(p->m.protocol_example.find("idle keep-alive connection"), std::string::npos) << p->m.protocol_example;
    const std::string table = format_table({*p});
    EXPECT_NE(table.find("bad response (first: "), std::string::npos) << table;
    EXPECT_NE(slo_miss_reason(*p, 1'000'000'000), "") << "a server sending stray bytes meets no objective";

    // A 408 on an idle connection is how some servers say they close it: no error.
    TestServer closing([](int64_t, int64_t) {
        return Action{.stray = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"};
    });
    p = run_point(target_for(closing.port()), o, 10);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_GE(p->m.ok, 8);
    EXPECT_EQ(p->m.errors(), 0) << p->m.protocol_example;
}

TEST(LoadNet, LoopbackCheck) {
    EXPECT_TRUE(*is_loopback_host("127.0.0.1"));
    EXPECT_TRUE(*is_loopback_host("127.3.4.5"));
    EXPECT_TRUE(*is_loopback_host("localhost"));
    EXPECT_TRUE(*is_loopback_host("::1"));
    EXPECT_FALSE(*is_loopback_host("10.1.2.3"));
    EXPECT_FALSE(*is_loopback_host("192.0.2.7"));
}

}  // namespace
}  // namespace strato::loadgen
