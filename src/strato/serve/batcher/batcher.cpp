#include "strato/serve/batcher/batcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <system_error>

#include "strato/core/log.h"
#include "strato/core/thread_name.h"

namespace strato::serve {
namespace {

int64_t ns_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// Whether two requests' tensors for one input can share a batch: both absent (an optional input
// left out has no shape), or both present with the same type and the same dims after the batch one.
bool same_inner_dims(const Tensor& a, const Tensor& b) {
    if (a.shape.empty() || b.shape.empty()) return a.shape.empty() && b.shape.empty();
    return a.dtype == b.dtype && a.shape.size() == b.shape.size() &&
           std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
}

}  // namespace

Batcher::Batcher(std::shared_ptr<Model> model, BatcherOptions options,
                 std::function<void(int64_t, const Timing&, bool)> on_batch)
    : Batcher(std::vector<std::shared_ptr<Model>>(static_cast<size_t>(std::max(1, options.instances)), model), options,
              std::move(on_batch)) {}

Batcher::Batcher(std::vector<std::shared_ptr<Model>> instances, BatcherOptions options,
                 std::function<void(int64_t, const Timing&, bool)> on_batch)
    : instances_(std::move(instances)), opt_(std::move(options)), on_batch_(std::move(on_batch)) {
    std::sort(opt_.preferred.begin(), opt_.preferred.end());
    if (instances_.empty()) throw std::invalid_argument("Batcher: no model instance");
    opt_.instances = static_cast<int>(instances_.size());
    busy_.assign(instances_.size(), 0);
    for (const auto& m : instances_) may_inline_ = may_inline_ && (!m || m->intra_op_threads() <= 1);
    try {
        for (size_t i = 0; i < instances_.size(); ++i)
            threads_.emplace_back([this] {
                set_thread_name("run-" + opt_.name);
                worker();
            });
    } catch (const std::system_error& e) {  // out of threads: stop those started (a joinable one would terminate)
        const size_t started = threads_.size();
        stop();
        throw std::runtime_error(fmt::format("cannot start instance thread {} of {}: {}", started + 1, instances_.size(),
                                             e.what()));
    }
}

size_t Batcher::take_instance() {
    size_t i = 0;
    while (busy_[i]) ++i;  // running_ < instances: one is free
    busy_[i] = 1;
    ++running_;
    return i;
}

void Batcher::release_instance(size_t i) {
    busy_[i] = 0;
    --running_;
}

Batcher::~Batcher() { stop(); }

Status Batcher::submit(Job&& job, bool may_run_inline) {
    size_t slot;
    {
        std::lock_guard lock(mu_);
        if (stopping_) return Status{StatusCode::kUnavailable, "the model is being unloaded"};
        if (opt_.max_queue_size > 0 && static_cast<int64_t>(queue_.size()) >= opt_.max_queue_size)
            return Status{StatusCode::kUnavailable,
                    fmt::format("Exceeds maximum queue size ({} requests waiting); retry later or raise "
                                "dynamic_batching.default_queue_policy.max_queue_size", queue_.size())};
        bool inline_run = may_run_inline && may_inline_ && queue_.empty() && !forming_ && running_ < opt_.instances &&
                          (!opt_.dynamic || opt_.max_delay.count() == 0);
        if (!inline_run) {
            queue_.push_back(std::move(job));
            pending_.store(static_cast<int64_t>(queue_.size()));
            cv_.notify_all();
            return Status::ok();
        }
        slot = take_instance();
    }
    std::vector<Job> batch;
    batch.push_back(std::move(job));
    int64_t rows = batch.front().rows;
    run(batch, rows, *instances_[slot]);
    bool waiting;  // only a queued job waits for a free instance; waking idle workers costs futex calls
    {
        std::lock_guard lock(mu_);
        release_instance(slot);
        waiting = !queue_.empty();
    }
    if (waiting) cv_.notify_all();
    return Status::ok();
}

void Batcher::stop() {
    {
        std::lock_guard lock(mu_);
        if (stopping_ && threads_.empty()) return;
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
}

bool Batcher::fits(const Job& first, const Job& next, int64_t rows) const {
    if (rows + next.rows > opt_.max_batch_size) return false;
    if (next.inputs.size() != first.inputs.size()) return false;
    for (size_t i = 0; i < first.inputs.size(); ++i)
        if (!same_inner_dims(first.inputs[i], next.inputs[i])) return false;
    return true;
}

void Batcher::worker() {
    std::vector<Job> batch;
    std::vector<Job> dropped;
    while (true) {
        batch.clear();
        dropped.clear();
        int64_t rows = 0;
        size_t slot = 0;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] {
                return (stopping_ && queue_.empty()) ||
                       (!forming_ && !queue_.empty() && running_ < opt_.instances);
            });
            if (queue_.empty()) return;  // stopping
            forming_ = true;
            // Pops the next live job, setting aside expired and abandoned ones.
            auto pop_live = [&]() -> bool {
                auto now = Clock::now();
                while (!queue_.empty()) {
                    Job& j = queue_.front();
                    if (now >= j.deadline || (j.cancelled && j.cancelled->load())) {
                        dropped.push_back(std::move(j));
                        queue_.pop_front();
                        continue;
                    }
                    return true;
                }
                return false;
            };
            if (pop_live()) {
                batch.push_back(std::move(queue_.front()));
                queue_.pop_front();
                rows = batch.front().rows;
                if (opt_.dynamic) {
                    // As Triton's dynamic batcher: a batch that reaches a preferred size goes at
                    // once, grown while it can reach a larger one; one that never reaches the
                    // largest preferred size, when a smaller one was reached on the way, sends that
                    // prefix now (the rest waits its turn) instead of waiting out the delay.
                    auto deadline = batch.front().enqueued + opt_.max_delay;
                    const int64_t max_preferred = opt_.preferred.empty() ? opt_.max_batch_size : opt_.preferred.back();
                    auto preferred = [&](int64_t r) {
                        return std::binary_search(opt_.preferred.begin(), opt_.preferred.end(), r);
                    };
                    size_t mark = preferred(rows) ? 1 : 0;  // jobs in the batch at its last preferred size
                    while (rows < opt_.max_batch_size) {
                        bool blocked = false;
                        while (pop_live()) {
                            const Job& next = queue_.front();
                            if (!fits(batch.front(), next, rows) || (mark > 0 && rows + next.rows > max_preferred)) {
                                blocked = true;
                                break;
                            }
                            rows += next.rows;
                            batch.push_back(std::move(queue_.front()));
                            queue_.pop_front();
                            if (preferred(rows)) mark = batch.size();
                            if (rows >= opt_.max_batch_size) break;
                        }
                        if (blocked || rows >= max_preferred || stopping_ || mark > 0) break;
                        if (Clock::now() >= deadline) break;
                        cv_.wait_until(lock, deadline);
                    }
                    // (past the delay, as Triton, everything pending goes)
                    if (mark > 0 && rows < max_preferred && !stopping_ && Clock::now() < deadline) {
                        while (batch.size() > mark) {
                            rows -= batch.back().rows;
                            queue_.push_front(std::move(batch.back()));
                            batch.pop_back();
                        }
                    }
                }
            }
            forming_ = false;
            if (!batch.empty()) slot = take_instance();
            pending_.store(static_cast<int64_t>(queue_.size()));
        }
        cv_.notify_all();
        for (auto& j : dropped) {
            Timing t;
            t.queue_ns = ns_between(j.enqueued, Clock::now());
            if (j.cancelled && j.cancelled->load())
                j.done({StatusCode::kCancelled, "the client closed the connection before the request ran"}, {}, t);
            else
                j.done({StatusCode::kUnavailable, "Request timeout expired"}, {}, t);
        }
        if (!batch.empty()) {
            run(batch, rows, *instances_[slot]);
            std::lock_guard lock(mu_);
            release_instance(slot);
        }
    }
}

void Batcher::run(std::vector<Job>& batch, int64_t rows, Model& model) {
    Timing t;
    t.batch_rows = rows;
    auto start = Clock::now();
    std::vector<Tensor> inputs;
    if (batch.size() == 1) {
        inputs = std::move(batch.front().inputs);
    } else {
        inputs.resize(batch.front().inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
            Tensor& in = inputs[i];
            const Tensor& first = batch.front().inputs[i];
            if (first.shape.empty()) continue;  // an optional input all of them left out (fits())
            in.name = first.name;
            in.dtype = first.dtype;
            in.shape = first.shape;
            in.shape[0] = rows;
            size_t total = 0;
            for (const auto& j : batch) total += j.inputs[i].data.size();
            in.data.reserve(total);
            for (const auto& j : batch) in.data += j.inputs[i].data;
        }
    }
    auto infer_start = Clock::now();
    std::vector<Tensor> outputs;
    Status st;
    try {
        st = model.execute(inputs, &outputs);
    } catch (const std::exception& e) {
        st = internal_error("the backend failed: {}", e.what());
    }
    auto infer_end = Clock::now();
    t.compute_input_ns = ns_between(start, infer_start);
    t.compute_infer_ns = ns_between(infer_start, infer_end);

    // Split each output along the batch dimension, in job order.
    std::vector<std::vector<Tensor>> per_job(batch.size());
    if (st.is_ok() && batch.size() > 1) {
        for (const Tensor& out : outputs) {
            if (out.shape.empty() || out.shape[0] != rows || out.dtype == DataType::kBytes ||
                out.data.size() % static_cast<size_t>(rows) != 0) {
                st = internal_error("output '{}' of shape {} cannot be split into a batch of {}", out.name,
                                    shape_string(out.shape), rows);
                break;
            }
            size_t row_bytes = out.data.size() / static_cast<size_t>(rows);
            size_t off = 0;
            for (size_t k = 0; k < batch.size(); ++k) {
                Tensor part;
                part.name = out.name;
                part.dtype = out.dtype;
                part.shape = out.shape;
                part.shape[0] = batch[k].rows;
                size_t n = row_bytes * static_cast<size_t>(batch[k].rows);
                part.data.assign(out.data, off, n);
                off += n;
                per_job[k].push_back(std::move(part));
            }
        }
    } else if (st.is_ok()) {
        per_job[0] = std::move(outputs);
    }
    t.compute_output_ns = ns_between(infer_end, Clock::now());
    if (on_batch_) on_batch_(rows, t, st.is_ok());
    for (size_t k = 0; k < batch.size(); ++k) {
        Timing jt = t;
        jt.queue_ns = ns_between(batch[k].enqueued, start);
        batch[k].done(st, st.is_ok() ? std::move(per_job[k]) : std::vector<Tensor>{}, jt);
    }
}

}  // namespace strato::serve
