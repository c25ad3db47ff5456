#pragma once
// Runs jobs one at a time, in order, on a thread of its own: work that may block (a model load,
// an HTTP POST to a receiver that hangs) kept off the threads that must stay responsive (I/O
// loops, sampling). Optionally bounded: when full, the oldest queued job is dropped.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace strato {

class SerialWorker {
public:
    /// `job(true)` runs it; `job(false)` is called instead for a job that will not run (still
    /// queued at stop(), dropped from a full queue, or submitted after stop()), so it can answer.
    using Job = std::function<void(bool run)>;
    /// `thread_name`: what top -H and /proc show; `max_queued`: 0 for no bound.
    explicit SerialWorker(std::string thread_name, size_t max_queued = 0);
    ~SerialWorker();
    SerialWorker(const SerialWorker&) = delete;
    SerialWorker& operator=(const SerialWorker&) = delete;

    /// Queues `job`. False when a job was refused: the oldest, dropped from a full queue for this
    /// one, or this one, submitted after stop().
    bool submit(Job job);
    /// Waits until nothing is queued or running, at most `limit`; false when that did not happen.
    bool flush(std::chrono::milliseconds limit);
    /// Jobs queued or running.
    size_t pending();
    /// Finishes the running job, refuses the queued ones, joins. Idempotent.
    void stop();

private:
    void loop();

    const std::string name_;
    const size_t max_queued_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> jobs_;
    bool stopping_ = false;
    bool running_ = false;
    std::thread thread_;  // (last: starts once the rest is built)
};

}  // namespace strato
