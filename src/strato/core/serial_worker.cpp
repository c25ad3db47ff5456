#include "strato/core/serial_worker.h"

#include <utility>

#include "strato/core/thread_name.h"

namespace strato {

SerialWorker::SerialWorker(std::string thread_name, size_t max_queued)
    : name_(std::move(thread_name)), max_queued_(max_queued), thread_([this] { loop(); }) {}

SerialWorker::~SerialWorker() { stop(); }

bool SerialWorker::submit(Job job) {
    Job dropped;
    {
        std::lock_guard lock(mu_);
        if (stopping_) {
            dropped = std::move(job);
        } else {
            if (max_queued_ > 0 && jobs_.size() >= max_queued_) {
                dropped = std::move(jobs_.front());
                jobs_.pop_front();
            }
            jobs_.push_back(std::move(job));
            cv_.notify_all();
        }
    }
    if (!dropped) return true;
    dropped(false);  // (outside the lock: it may take its own)
    return false;
}

bool SerialWorker::flush(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return jobs_.empty() && !running_; });
}

size_t SerialWorker::pending() {
    std::lock_guard lock(mu_);
    return jobs_.size() + (running_ ? 1 : 0);
}

void SerialWorker::stop() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void SerialWorker::loop() {
    set_thread_name(name_);
    std::unique_lock lock(mu_);
    while (true) {
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        Job job = std::move(jobs_.front());
        jobs_.pop_front();
        const bool run = !stopping_;
        running_ = true;
        lock.unlock();
        job(run);
        lock.lock();
        running_ = false;
        cv_.notify_all();
    }
}

}  // namespace strato
