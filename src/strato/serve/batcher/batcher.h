#pragma once
// The scheduler in front of a model version: a bounded FIFO queue and one thread per model
// instance. With dynamic batching an instance merges queued requests (same non-batch shapes) up
// to max_batch_size, waiting at most max_queue_delay for the batch to fill and dispatching early
// at a preferred size; without it every request runs alone. Requests past their timeout or whose
// client has gone are dropped before they run.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "strato/serve/backend/backend.h"

namespace strato::serve {

using Clock = std::chrono::steady_clock;

struct Timing {
    int64_t queue_ns = 0;
    int64_t compute_input_ns = 0;
    int64_t compute_infer_ns = 0;
    int64_t compute_output_ns = 0;
    int64_t batch_rows = 0;  // rows of the batch the request ran in
};

struct Job {
    std::vector<Tensor> inputs;  // config order, validated
    int64_t rows = 1;            // this request's batch size
    Clock::time_point enqueued = Clock::now();
    Clock::time_point deadline = Clock::time_point::max();
    std::shared_ptr<std::atomic<bool>> cancelled;
    /// Called once: from an instance thread, or from submit()'s caller when it ran inline.
    std::function<void(Status, std::vector<Tensor>, const Timing&)> done;
};

struct BatcherOptions {
    bool dynamic = false;
    bool batches = false;  // the model has a batch dimension (max_batch_size > 0)
    int64_t max_batch_size = 0;
    std::vector<int64_t> preferred;
    std::chrono::microseconds max_delay{0};
    int64_t max_queue_size = 0;  // requests; 0 = unbounded
    int instances = 1;
    std::string name;  // the instance threads are named "run-<name>" (the model's name)
};

class Batcher {
public:
    /// `options.instances` instances of one model (all on one device). `on_batch(rows, timing)`
    /// is called once per executed batch (for statistics).
    Batcher(std::shared_ptr<Model> model, BatcherOptions options,
            std::function<void(int64_t, const Timing&, bool ok)> on_batch = {});
    /// One instance per entry (options.instances is ignored): entries may be copies of the model
    /// on different devices, or the same model more than once. A batch runs on a free instance.
    Batcher(std::vector<std::shared_ptr<Model>> instances, BatcherOptions options,
            std::function<void(int64_t, const Timing&, bool ok)> on_batch = {});
    ~Batcher();  // stop()
    Batcher(const Batcher&) = delete;
    Batcher& operator=(const Batcher&) = delete;

    /// Queues a job; kUnavailable when the queue is full or the batcher is stopping (the job's
    /// done callback is not called then). With `may_run_inline` (the caller knows no other
    /// request is in flight), an idle instance, an empty queue and no batching delay to wait for,
    /// the job runs at once on the caller's thread: that saves two thread hand-offs per request
    /// at low load, and never costs a batch. Not for models that run on several threads
    /// (Model::intra_op_threads).
    Status submit(Job&& job, bool may_run_inline = false);  // `job` is moved from only when accepted
    bool stopping() const {
        std::lock_guard lock(mu_);
        return stopping_;
    }
    /// Requests waiting (not yet running).
    int64_t pending() const { return pending_.load(); }
    /// Runs what is queued, then ends the instance threads. Idempotent.
    void stop();

private:
    void worker();
    bool fits(const Job& first, const Job& next, int64_t rows) const;
    void run(std::vector<Job>& batch, int64_t rows, Model& model);
    size_t take_instance();            // a free instance, marked busy; under mu_, with running_ < instances
    void release_instance(size_t i);  // under mu_

    std::vector<std::shared_ptr<Model>> instances_;
    std::vector<char> busy_;  // per instance
    bool may_inline_ = true;  // every instance runs single-threaded
    BatcherOptions opt_;
    std::function<void(int64_t, const Timing&, bool)> on_batch_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> queue_;
    std::atomic<int64_t> pending_{0};
    bool forming_ = false;
    int running_ = 0;  // batches executing (instance threads and inline runs): the busy instances
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace strato::serve
