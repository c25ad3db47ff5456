// The local provider with stand-in replicas (fake_replica.cpp): what a replica inherits, the
// proxy's retry when a replica dies, and a replica that answers ready while it is drained.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "strato/cloud/local_provider.h"
#include "strato/core/fs.h"
#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/oip_target.h"

namespace strato::cloud {
namespace {

using namespace std::chrono_literals;

struct Fixture {
    std::string dir;
    std::unique_ptr<LocalProvider> provider;

    Fixture(const std::string& name, const std::string& toml) {
        dir = testing::TempDir() + "strato-local-" + name + "-" + std::to_string(getpid());
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir + "/logs");
        LocalOptions o;
        o.strato_binary = FAKE_REPLICA;
        o.serve_args = {"--model", "unused"};
        o.port = 0;
        o.tick_s = 0.1;
        o.ready_timeout_s = 10;
        o.log_dir = dir + "/logs";
        o.config = AutoscaleConfig::parse(toml, "test.toml").value();
        auto p = LocalProvider::create(o);
        EXPECT_TRUE(p.is_ok()) << p.status().message();
        provider = std::move(*p);
    }
    ~Fixture() {
        provider.reset();
        std::filesystem::remove_all(dir);
    }

    Result<loadgen::HttpReply> get(const std::string& target) {
        auto url = loadgen::parse_url("http://127.0.0.1:" + std::to_string(provider->port()));
        return loadgen::http_request(*url, "GET", target, {}, 5000);
    }

    /// Waits until `n` replicas are ready; false after 10 s.
    bool ready(size_t n) {
        for (auto t0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - t0 < 10s;) {
            auto rs = provider->replicas();
            if (rs.size() == n && std::all_of(rs.begin(), rs.end(), [](const auto& r) { return r.state == "ready"; }))
                return true;
            std::this_thread::sleep_for(10ms);
        }
        return false;
    }
};

TEST(LocalProvider, ReplicasInheritNoDescriptorsAndHaveTheirOwnProcessGroup) {
    int leak[2];
    ASSERT_EQ(pipe(leak), 0);  // without O_CLOEXEC, as a library might open one
    Fixture f("fds", "[autoscale]\nmin_nodes = 1\nmax_nodes = 1\n[[policy]]\nkind = \"backlog\"\nper_node = 1\n");
    ASSERT_TRUE(f.provider->start().is_ok());
    ASSERT_TRUE(f.ready(1));
    auto r = f.get("/whoami");
    close(leak[0]);
    close(leak[1]);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    pid_t pid = f.provider->replicas().at(0).pid;
    EXPECT_EQ(r->body, fmt::format("pid={} pgid={} fds=", pid, pid));
}

// Replicas bind port 0; each one's port comes from its own ready line, never from an older run's
// log of the same name in --log-dir.
TEST(LocalProvider, ReplicaPortsComeFromTheirReadyLines) {
    Fixture f("ports", "[autoscale]\nmin_nodes = 2\nmax_nodes = 2\n[[policy]]\nkind = \"backlog\"\nper_node = 1\n");
    ASSERT_TRUE(strato::fs::atomic_write(f.dir + "/logs/replica-1.log",
                                         "strato serve: ready http://127.0.0.1:1 metrics=off models: old\n")
                    .is_ok());
    ASSERT_TRUE(f.provider->start().is_ok());
    ASSERT_TRUE(f.ready(2));
    auto rs = f.provider->replicas();
    EXPECT_NE(rs[0].port, rs[1].port);
    for (const auto& r : rs) {
        EXPECT_GT(r.port, 1);
        auto url = loadgen::parse_url("http://127.0.0.1:" + std::to_string(r.port));
        auto reply = loadgen::http_request(*url, "GET", "/whoami", {}, 5000);
        ASSERT_TRUE(reply.is_ok()) << reply.status().message();
        EXPECT_EQ(reply->body.substr(0, reply->body.find(' ')), fmt::format("pid={}", r.pid));
    }
}

TEST(LocalProvider, RetriesOnAnotherReplicaWhenOneDied) {
    Fixture f("retry", "[autoscale]\nmin_nodes = 2\nmax_nodes = 2\n[[policy]]\nkind = \"backlog\"\nper_node = 1\n");
    ASSERT_TRUE(f.provider->start().is_ok());
    ASSERT_TRUE(f.ready(2));
    auto rs = f.provider->replicas();
    // The proxy picks the first of the replicas with the fewest requests in flight: the dead one.
    ASSERT_EQ(kill(rs[0].pid, SIGKILL), 0);
    // Until the kernel has torn it down, a killed process still holds its listening socket; wait
    // for that (a zombie or gone) rather than a fixed time a loaded machine may not honour.
    auto dead = [pid = rs[0].pid] {
        auto stat = strato::fs::read_file(fmt::format("/proc/{}/stat", pid));
        return !stat || stat->find(") Z ") != std::string::npos;
    };
    for (int i = 0; i < 2000 && !dead(); ++i) std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(dead());
    for (int i = 0; i < 3; ++i) {
        auto r = f.get("/whoami");
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r->status, 200) << r->body;
        EXPECT_NE(r->body.find(fmt::format("pid={} ", rs[1].pid)), std::string::npos) << r->body;
    }
    EXPECT_EQ(f.provider->replicas().at(0).state, "gone");
}

// A replica that dies while it serves a request: the request is retried on another replica and
// answered, not lost (the proxy sees the broken connection, the replica fails its liveness probe).
TEST(LocalProvider, ARequestWhoseReplicaDiesMidwayIsAnsweredByAnother) {
    Fixture f("midway", "[autoscale]\nmin_nodes = 2\nmax_nodes = 2\n[[policy]]\nkind = \"backlog\"\nper_node = 1\n");
    ASSERT_TRUE(f.provider->start().is_ok());
    ASSERT_TRUE(f.ready(2));
    Result<loadgen::HttpReply> reply = io_error("not yet");
    std::thread client([&] { reply = f.get("/sleep"); });  // the fake answers /sleep after 500 ms
    pid_t busy = 0;
    for (int i = 0; i < 400 && !busy; ++i) {
        for (const auto& r : f.provider->replicas())
            if (r.in_flight > 0) busy = r.pid;
        if (!busy) std::this_thread::sleep_for(1ms);
    }
    ASSERT_NE(busy, 0) << "no replica took the request";
    ASSERT_EQ(kill(busy, SIGKILL), 0);
    client.join();
    ASSERT_TRUE(reply.is_ok()) << reply.status().message();
    EXPECT_EQ(reply->status, 200) << reply->body;  // (from the other replica, unless the kill came late)
}

TEST(LocalProvider, ReplicasThatDieAtStartAreReplacedAfterAGrowingPause) {
    // A deleted model: every replacement exits at start. It was restarted every tick, a new log
    // each time, for ever.
    Fixture f("crashy", "[autoscale]\nmin_nodes = 2\nmax_nodes = 2\ncooldown_up = 0\n[[policy]]\nkind = \"backlog\"\nper_node = 1\n");
    setenv("FAKE_REPLICA_CRASHY", f.dir.c_str(), 1);
    ASSERT_TRUE(f.provider->start().is_ok());
    std::thread control([&] { EXPECT_TRUE(f.provider->run().is_ok()); });
    std::this_thread::sleep_for(5s);
    f.provider->stop();
    control.join();
    unsetenv("FAKE_REPLICA_CRASHY");
    int logs = 0;
    for (const auto& e : std::filesystem::directory_iterator(f.dir + "/logs")) logs += e.path().extension() == ".log";
    // 2 at start, then after pauses of 2 and 4 s: at most 4 in 5 s (every 0.1 s tick: dozens)
    EXPECT_GE(logs, 3);
    EXPECT_LE(logs, 4);
}

TEST(LocalProvider, AReplicaDrainedWhileStartingIsNeverReady) {
    // Scale up to 2 while a request is in flight, down to 1 right after: the second replica is
    // drained while it starts, and answers ready once told to stop.
    Fixture f("drain",
              "[autoscale]\nmin_nodes = 1\nmax_nodes = 2\ncooldown_up = 0\ncooldown_down = 0\n"
              "down_after = 0\n[[policy]]\nkind = \"backlog\"\nper_node = 0.001\n");
    setenv("FAKE_REPLICA_LAZY", f.dir.c_str(), 1);
    ASSERT_TRUE(f.provider->start().is_ok());
    ASSERT_TRUE(f.ready(1));
    const pid_t first = f.provider->replicas().at(0).pid;
    std::thread control([&] { EXPECT_TRUE(f.provider->run().is_ok()); });
    std::thread client([&] { EXPECT_TRUE(f.get("/sleep").is_ok()); });
    bool seen = false, ready = false, gone = false;
    for (auto t0 = std::chrono::steady_clock::now(); !gone && std::chrono::steady_clock::now() - t0 < 10s;) {
        bool there = false;
        for (const auto& r : f.provider->replicas()) {
            if (r.pid == first) continue;
            there = seen = true;
            ready |= r.state == "ready";
        }
        gone = seen && !there;
        std::this_thread::sleep_for(5ms);
    }
    client.join();
    f.provider->stop();
    control.join();
    unsetenv("FAKE_REPLICA_LAZY");
    EXPECT_TRUE(seen);
    EXPECT_TRUE(gone);
    EXPECT_FALSE(ready);
}

// Found by review: replicas that could not start (a missing model) ended the provider with "no
// replica started; see the logs in DIR": the reason was one file away. It is in the message.
TEST(LocalProvider, AReplicaThatCannotStartSaysWhy) {
    Fixture f("fail", "[autoscale]\nmin_nodes = 1\nmax_nodes = 1\n[[policy]]\nkind = \"backlog\"\nper_node = 1\n");
    setenv("FAKE_REPLICA_FAIL", "--model m=/gone: /gone is not a directory", 1);
    Status s = f.provider->start();
    unsetenv("FAKE_REPLICA_FAIL");
    EXPECT_EQ(s.message(), fmt::format("no replica started (strato serve: error: --model m=/gone: /gone is not a "
                                       "directory); see the logs in {}/logs",
                                       f.dir));
}

// Found by review: with min_nodes = 0 the provider scaled to zero and stayed there: a request
// with no replica ready was answered 503 at once, so the backlog never saw it. It now waits for
// the replica its own backlog starts (as Knative's activator holds requests).
TEST(LocalProvider, ARequestScalesUpFromZero) {
    Fixture f("zero",
              "[autoscale]\nmin_nodes = 0\nmax_nodes = 1\ncooldown_up = 0\ncooldown_down = 0\n"
              "down_after = 0\n[[policy]]\nkind = \"backlog\"\nper_node = 1\n");
    ASSERT_TRUE(f.provider->start().is_ok());
    ASSERT_TRUE(f.ready(1));
    std::thread control([&] { EXPECT_TRUE(f.provider->run().is_ok()); });
    bool zero = false;
    for (auto t0 = std::chrono::steady_clock::now(); !zero && std::chrono::steady_clock::now() - t0 < 10s;) {
        zero = f.provider->replicas().empty();
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(zero) << "never scaled down to zero";
    auto r = f.get("/whoami");
    f.provider->stop();
    control.join();
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body.rfind("pid=", 0), 0u) << r->body;
}

// Found by review: `--serve-arg=--metrics-port --serve-arg=9102` repeated a flag the provider sets
// on every replica; serve refused the repeat and every replica exited at start, again and again.
TEST(LocalProvider, ServeArgsThatTheProviderSetsAreRefused) {
    LocalOptions o;
    o.strato_binary = FAKE_REPLICA;
    o.config = AutoscaleConfig::parse("[[policy]]\nkind = \"backlog\"\nper_node = 1\n", "test.toml").value();
    for (const char* reserved : {"--metrics-port", "--http-port=9000", "--http-address"}) {
        o.serve_args = {"--model", "unused", reserved, "9102"};
        auto p = LocalProvider::create(o);
        ASSERT_FALSE(p.is_ok()) << reserved;
        EXPECT_EQ(p.status().message().rfind(fmt::format("--serve-arg {}: the provider sets --http-address, --http-port "
                                                         "and --metrics-port of every replica itself",
                                                         reserved),
                                             0),
                  0u)
            << p.status().message();
    }
    // Other serve flags, and look-alikes, pass.
    for (const char* fine : {"--metrics-portal", "--max-batch-size", "--http-threads=4"})
        EXPECT_TRUE(check_serve_arg(fine).is_ok()) << fine;
}

}  // namespace
}  // namespace strato::cloud
