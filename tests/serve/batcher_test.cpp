#include "strato/serve/batcher/batcher.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>

namespace strato::serve {
namespace {

// Doubles its FP32 input; records the batch sizes it ran; can hold executions at a gate.
class Doubler : public Model {
public:
    Status execute(const std::vector<Tensor>& in, std::vector<Tensor>* out) override {
        {
            std::unique_lock lock(mu);
            batches.push_back(in[0].shape[0]);
            cv.wait(lock, [&] { return open; });
        }
        Tensor t = in[0];
        t.name = "y";
        auto* f = reinterpret_cast<float*>(t.data.data());
        for (size_t i = 0; i < t.data.size() / 4; ++i) f[i] *= 2;
        out->push_back(std::move(t));
        return Status::ok();
    }
    void set_open(bool o) {
        {
            std::lock_guard lock(mu);
            open = o;
        }
        cv.notify_all();
    }
    std::vector<int64_t> seen() {
        std::lock_guard lock(mu);
        return batches;
    }
    std::mutex mu;
    std::condition_variable cv;
    bool open = true;
    std::vector<int64_t> batches;
};

struct Outcome {
    Status status;
    std::vector<Tensor> outputs;
    Timing timing;
};

Job make_job(float value, int64_t rows, std::promise<Outcome>* p) {
    Job j;
    Tensor t{"x", DataType::kFp32, {rows, 2}, std::string(static_cast<size_t>(rows) * 8, '\0')};
    auto* f = reinterpret_cast<float*>(t.data.data());
    for (int64_t i = 0; i < rows * 2; ++i) f[i] = value;
    j.inputs.push_back(std::move(t));
    j.rows = rows;
    j.done = [p](Status s, std::vector<Tensor> o, const Timing& timing) { p->set_value({s, std::move(o), timing}); };
    return j;
}

BatcherOptions dynamic(int64_t max_batch, int64_t delay_us) {
    BatcherOptions o;
    o.dynamic = o.batches = true;
    o.max_batch_size = max_batch;
    o.max_delay = std::chrono::microseconds(delay_us);
    return o;
}

TEST(Batcher, MergesQueuedRequestsAndSplitsResultsInOrder) {
    auto model = std::make_shared<Doubler>();
    Batcher b(model, dynamic(5, 10'000'000));
    std::vector<std::promise<Outcome>> ps(4);
    for (int i = 0; i < 4; ++i) {
        Job j = make_job(static_cast<float>(i + 1), i == 3 ? 2 : 1, &ps[i]);
        ASSERT_TRUE(b.submit(std::move(j)).is_ok());
    }
    for (int i = 0; i < 4; ++i) {
        Outcome o = ps[i].get_future().get();
        ASSERT_TRUE(o.status.is_ok()) << o.status.message();
        ASSERT_EQ(o.outputs.size(), 1u);
        int64_t rows = i == 3 ? 2 : 1;
        EXPECT_EQ(o.outputs[0].shape, (std::vector<int64_t>{rows, 2}));
        const auto* f = reinterpret_cast<const float*>(o.outputs[0].data.data());
        for (int64_t k = 0; k < rows * 2; ++k) EXPECT_EQ(f[k], 2.0f * (i + 1));
    }
    // The first request waits up to 10 s for company; the fifth row fills the batch, which then
    // runs at once: one batch of five, however slowly this thread submitted them.
    EXPECT_EQ(model->seen(), (std::vector<int64_t>{5}));
}

TEST(Batcher, MaxQueueDelayBoundsTheWaitOfALoneRequest) {
    auto model = std::make_shared<Doubler>();
    Batcher b(model, dynamic(64, 20'000));
    std::promise<Outcome> p;
    auto t0 = Clock::now();
    ASSERT_TRUE(b.submit(make_job(1, 1, &p)).is_ok());
    Outcome o = p.get_future().get();
    auto waited = Clock::now() - t0;
    EXPECT_TRUE(o.status.is_ok());
    EXPECT_GE(waited, std::chrono::milliseconds(19));
    EXPECT_LT(waited, std::chrono::seconds(2));
    EXPECT_EQ(o.timing.batch_rows, 1);
}

TEST(Batcher, PreferredSizeDispatchesWithoutWaitingForTheDelay) {
    auto model = std::make_shared<Doubler>();
    BatcherOptions opt = dynamic(16, 10'000'000);  // a 10 s delay that must not be waited
    opt.preferred = {2};
    Batcher b(model, opt);
    std::promise<Outcome> p1, p2;
    auto t0 = Clock::now();
    ASSERT_TRUE(b.submit(make_job(1, 1, &p1)).is_ok());
    ASSERT_TRUE(b.submit(make_job(2, 1, &p2)).is_ok());
    EXPECT_TRUE(p1.get_future().get().status.is_ok());
    EXPECT_TRUE(p2.get_future().get().status.is_ok());
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

// Found by review: with preferred_batch_size [4], a queue of five 1-row requests waited out the
// whole delay as one batch of 5; Triton sends the 4 that make the preferred size at once.
TEST(Batcher, APreferredSizeReachedOnTheWayIsSentWithoutTheRest) {
    auto model = std::make_shared<Doubler>();
    model->set_open(false);  // the first batch holds the only instance while the queue fills
    BatcherOptions opt = dynamic(8, 10'000'000);
    opt.preferred = {4};
    Batcher b(model, opt);
    std::vector<std::promise<Outcome>> ps(6);
    ASSERT_TRUE(b.submit(make_job(1, 8, &ps[0])).is_ok());
    while (model->seen().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 1; i < 6; ++i) ASSERT_TRUE(b.submit(make_job(static_cast<float>(i), 1, &ps[i])).is_ok());
    const auto t0 = Clock::now();
    model->set_open(true);
    for (int i = 0; i < 5; ++i) {
        Outcome o = ps[i].get_future().get();
        ASSERT_TRUE(o.status.is_ok()) << o.status.message();
        if (i > 0) EXPECT_EQ(o.timing.batch_rows, 4);
    }
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "the preferred batch waited for the 10 s delay";
    b.stop();  // the fifth one-row request waits for company until then
    EXPECT_TRUE(ps[5].get_future().get().status.is_ok());
    EXPECT_EQ(model->seen(), (std::vector<int64_t>{8, 4, 1}));
}

// With preferred sizes [2, 8], three queued one-row requests: the 2 that make a preferred size go
// at once and the third goes back to the front of the queue, in order, to wait for company.
TEST(Batcher, RequestsPastAReachedPreferredSizeGoBackInOrder) {
    auto model = std::make_shared<Doubler>();
    model->set_open(false);
    BatcherOptions opt = dynamic(8, 10'000'000);
    opt.preferred = {2, 8};
    Batcher b(model, opt);
    std::vector<std::promise<Outcome>> ps(4);
    ASSERT_TRUE(b.submit(make_job(9, 8, &ps[0])).is_ok());  // holds the only instance
    while (model->seen().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 1; i < 4; ++i) ASSERT_TRUE(b.submit(make_job(static_cast<float>(i), 1, &ps[i])).is_ok());
    model->set_open(true);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(ps[i].get_future().get().status.is_ok());
    // The third waits in the queue (10 s delay): it was put back, not lost or run out of order.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(b.pending(), 1);
    EXPECT_EQ(model->seen(), (std::vector<int64_t>{8, 2}));
    b.stop();
    Outcome last = ps[3].get_future().get();
    ASSERT_TRUE(last.status.is_ok());
    EXPECT_EQ(reinterpret_cast<const float*>(last.outputs[0].data.data())[0], 6.0f);
    EXPECT_EQ(model->seen(), (std::vector<int64_t>{8, 2, 1}));
}

// Found by review: two requests that both left out an optional input were merged and the batcher
// indexed the absent input's empty shape (SIGSEGV); one with it and one without must not merge.
TEST(Batcher, AnOptionalInputLeftOutMergesOnlyWithRequestsThatLeftItOut) {
    auto model = std::make_shared<Doubler>();
    Batcher b(model, dynamic(3, 10'000'000));
    std::vector<std::promise<Outcome>> ps(3);
    for (int i = 0; i < 3; ++i) {
        Job j = make_job(static_cast<float>(i + 1), 1, &ps[i]);
        Tensor opt{"opt", DataType::kFp32, {1, 2}, std::string(8, '\0')};
        j.inputs.push_back(i == 2 ? std::move(opt) : Tensor{});  // the third one gives it
        ASSERT_TRUE(b.submit(std::move(j)).is_ok());
    }
    for (int i = 0; i < 2; ++i) {
        Outcome o = ps[i].get_future().get();
        ASSERT_TRUE(o.status.is_ok()) << o.status.message();
        EXPECT_EQ(o.timing.batch_rows, 2);
        EXPECT_EQ(reinterpret_cast<const float*>(o.outputs[0].data.data())[0], 2.0f * static_cast<float>(i + 1));
    }
    b.stop();
    EXPECT_TRUE(ps[2].get_future().get().status.is_ok());
    EXPECT_EQ(model->seen(), (std::vector<int64_t>{2, 1}));
}

TEST(Batcher, FullQueueRefusesWithUnavailable) {
    auto model = std::make_shared<Doubler>();
    model->set_open(false);  // hold the first execution
    BatcherOptions opt = dynamic(1, 0);
    opt.max_queue_size = 2;
    Batcher b(model, opt);
    std::vector<std::promise<Outcome>> ps(4);
    ASSERT_TRUE(b.submit(make_job(1, 1, &ps[0])).is_ok());
    while (model->seen().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(b.submit(make_job(2, 1, &ps[1])).is_ok());
    ASSERT_TRUE(b.submit(make_job(3, 1, &ps[2])).is_ok());
    Job extra = make_job(4, 1, &ps[3]);
    Status s = b.submit(std::move(extra));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("Exceeds maximum queue size"), std::string::npos);
    EXPECT_TRUE(static_cast<bool>(extra.done));  // a refused job is left intact
    model->set_open(true);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(ps[i].get_future().get().status.is_ok());
}

TEST(Batcher, ExpiredAndCancelledRequestsAreDroppedBeforeRunning) {
    auto model = std::make_shared<Doubler>();
    model->set_open(false);
    Batcher b(model, dynamic(1, 0));
    std::promise<Outcome> p0, p1, p2;
    ASSERT_TRUE(b.submit(make_job(1, 1, &p0)).is_ok());
    while (model->seen().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Job late = make_job(2, 1, &p1);
    late.deadline = Clock::now() + std::chrono::milliseconds(1);
    ASSERT_TRUE(b.submit(std::move(late)).is_ok());
    Job gone = make_job(3, 1, &p2);
    gone.cancelled = std::make_shared<std::atomic<bool>>(true);
    ASSERT_TRUE(b.submit(std::move(gone)).is_ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    model->set_open(true);
    EXPECT_TRUE(p0.get_future().get().status.is_ok());
    Outcome o1 = p1.get_future().get(), o2 = p2.get_future().get();
    EXPECT_EQ(o1.status.code(), StatusCode::kUnavailable);
    EXPECT_EQ(o1.status.message(), "Request timeout expired");
    EXPECT_EQ(o2.status.code(), StatusCode::kCancelled);
    EXPECT_EQ(model->seen().size(), 1u);  // neither ran
}

TEST(Batcher, StopRunsWhatIsQueuedThenRefuses) {
    auto model = std::make_shared<Doubler>();
    BatcherOptions opt;  // no dynamic batching: one request per execution
    opt.batches = true;
    opt.max_batch_size = 8;
    opt.instances = 2;
    auto b = std::make_unique<Batcher>(model, opt);
    std::vector<std::promise<Outcome>> ps(20);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(b->submit(make_job(static_cast<float>(i), 1, &ps[i])).is_ok());
    b->stop();
    for (auto& p : ps) EXPECT_TRUE(p.get_future().get().status.is_ok());
    EXPECT_EQ(model->seen().size(), 20u);
    std::promise<Outcome> after;
    EXPECT_EQ(b->submit(make_job(1, 1, &after)).code(), StatusCode::kUnavailable);
}

TEST(Batcher, RunsInlineOnlyWhenAllowedAndIdle) {
    auto model = std::make_shared<Doubler>();
    Batcher b(model, dynamic(8, 0));
    std::promise<Outcome> p1, p2;
    std::thread::id ran_on;
    Job j = make_job(1, 1, &p1);
    auto inner = j.done;
    j.done = [&, inner](Status s, std::vector<Tensor> o, const Timing& t) {
        ran_on = std::this_thread::get_id();
        inner(s, std::move(o), t);
    };
    ASSERT_TRUE(b.submit(std::move(j), /*may_run_inline=*/true).is_ok());
    EXPECT_EQ(ran_on, std::this_thread::get_id());  // already done, on this thread
    EXPECT_TRUE(p1.get_future().get().status.is_ok());
    Job k = make_job(2, 1, &p2);
    k.done = [&, inner = k.done](Status s, std::vector<Tensor> o, const Timing& t) {
        ran_on = std::this_thread::get_id();
        inner(s, std::move(o), t);
    };
    ASSERT_TRUE(b.submit(std::move(k)).is_ok());
    EXPECT_TRUE(p2.get_future().get().status.is_ok());
    EXPECT_NE(ran_on, std::this_thread::get_id());  // an instance thread ran it
}

// A model that runs on several OpenMP threads never runs on the caller's (an HTTP) thread, even
// when allowed and idle: each such thread would keep an OpenMP pool (Model::intra_op_threads).
TEST(Batcher, AMultiThreadedModelRunsOnlyOnInstanceThreads) {
    struct Parallel : Doubler {
        int intra_op_threads() const override { return 2; }
    };
    Batcher b(std::make_shared<Parallel>(), dynamic(8, 0));
    for (int i = 0; i < 3; ++i) {
        std::promise<Outcome> p;
        std::thread::id ran_on;
        Job j = make_job(1, 1, &p);
        j.done = [&, inner = j.done](Status s, std::vector<Tensor> o, const Timing& t) {
            ran_on = std::this_thread::get_id();
            inner(s, std::move(o), t);
        };
        ASSERT_TRUE(b.submit(std::move(j), /*may_run_inline=*/true).is_ok());
        EXPECT_TRUE(p.get_future().get().status.is_ok());
        EXPECT_NE(ran_on, std::this_thread::get_id()) << "submission " << i << " ran inline";
    }
}

// Instances with a model each (copies on different devices): two batches held at once run on
// both, each on a free one, and an instance is free again once its batch is done.
TEST(Batcher, EachInstanceRunsOnItsOwnModel) {
    auto a = std::make_shared<Doubler>(), b2 = std::make_shared<Doubler>();
    a->set_open(false);
    b2->set_open(false);
    BatcherOptions opt;
    opt.batches = true;
    opt.max_batch_size = 4;
    opt.instances = 7;  // ignored: one instance per model given
    Batcher b({a, b2}, opt);
    std::vector<std::promise<Outcome>> ps(4);
    ASSERT_TRUE(b.submit(make_job(1, 1, &ps[0])).is_ok());
    ASSERT_TRUE(b.submit(make_job(2, 1, &ps[1])).is_ok());
    auto t0 = Clock::now();
    while ((a->seen().empty() || b2->seen().empty()) && Clock::now() - t0 < std::chrono::seconds(5))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(a->seen().size(), 1u);  // both held, one on each instance
    EXPECT_EQ(b2->seen().size(), 1u);
    ASSERT_TRUE(b.submit(make_job(3, 1, &ps[2])).is_ok());  // waits: no instance is free
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(a->seen().size() + b2->seen().size(), 2u);
    b2->set_open(true);  // the second instance finishes and takes the third request
    EXPECT_TRUE(ps[1].get_future().get().status.is_ok());
    EXPECT_TRUE(ps[2].get_future().get().status.is_ok());
    EXPECT_EQ(b2->seen().size(), 2u);
    EXPECT_EQ(a->seen().size(), 1u);
    a->set_open(true);
    EXPECT_TRUE(ps[0].get_future().get().status.is_ok());
    ASSERT_TRUE(b.submit(make_job(4, 1, &ps[3]), /*may_run_inline=*/true).is_ok());
    EXPECT_TRUE(ps[3].get_future().get().status.is_ok());
    EXPECT_EQ(a->seen().size() + b2->seen().size(), 4u);
}

}  // namespace
}  // namespace strato::serve
