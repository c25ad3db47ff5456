// One-at-a-time background jobs: order, the bound, flush and stop.

#include "strato/core/serial_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <future>
#include <string>
#include <vector>

namespace strato {
namespace {

TEST(SerialWorker, RunsJobsInOrderOnItsOwnNamedThread) {
    std::vector<int> ran;
    std::string name;
    {
        SerialWorker w("test-worker");
        for (int i = 0; i < 5; ++i) EXPECT_TRUE(w.submit([&, i](bool run) {
            if (run) ran.push_back(i);
        }));
        w.submit([&](bool) {
            std::ifstream comm("/proc/thread-self/comm");
            std::getline(comm, name);
        });
        EXPECT_TRUE(w.flush(std::chrono::seconds(10)));
        EXPECT_EQ(w.pending(), 0u);
    }
    EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
    EXPECT_EQ(name, "test-worker");
}

TEST(SerialWorker, AFullQueueDropsItsOldestJobWhichIsToldSo) {
    SerialWorker w("bounded", 2);
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    std::atomic<bool> started{false};
    w.submit([&, gate](bool) {  // holds the thread, so the next ones queue
        started = true;
        gate.wait();
    });
    while (!started) std::this_thread::yield();
    std::vector<std::pair<int, bool>> calls;
    std::mutex mu;
    const auto job = [&](int i) {
        return [&, i](bool run) {
            std::lock_guard lock(mu);
            calls.emplace_back(i, run);
        };
    };
    EXPECT_TRUE(w.submit(job(1)));
    EXPECT_TRUE(w.submit(job(2)));
    EXPECT_FALSE(w.submit(job(3)));  // 1 goes
    EXPECT_EQ(w.pending(), 3u);      // the running one and two queued
    EXPECT_FALSE(w.flush(std::chrono::milliseconds(50)));
    release.set_value();
    EXPECT_TRUE(w.flush(std::chrono::seconds(10)));
    EXPECT_EQ(calls, (std::vector<std::pair<int, bool>>{{1, false}, {2, true}, {3, true}}));
}

TEST(SerialWorker, StopFinishesTheRunningJobAndRefusesTheRest) {
    auto w = std::make_unique<SerialWorker>("stopping");
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    std::atomic<bool> started{false}, finished{false};
    std::atomic<int> refused{0}, ran{0};
    w->submit([&, gate](bool) {
        started = true;
        gate.wait();
        finished = true;
    });
    while (!started) std::this_thread::yield();
    for (int i = 0; i < 3; ++i) w->submit([&](bool run) { ++(run ? ran : refused); });
    std::thread stopper([&] { w->stop(); });
    int probes = 1;  // until one is refused at once, stop() has not begun; those queued are refused later
    while (w->submit([&](bool run) { ++(run ? ran : refused); })) ++probes;
    release.set_value();
    stopper.join();
    EXPECT_TRUE(finished);
    EXPECT_EQ(ran, 0);
    EXPECT_EQ(refused, 3 + probes);
    w->stop();  // idempotent
    w.reset();
}

}  // namespace
}  // namespace strato
