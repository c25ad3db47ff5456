// The oneDNN graph executor on hand-built graphs whose buffers cannot all be reused in place: a
// value read again after a ReLU, a convolution adding into its own input, INT8 nodes; checked
// against libtorch's ops on the same weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <thread>

#include "strato/models/dnnl_graph.h"

namespace strato::models::dnnl_graph {
namespace {

std::vector<float> floats(const torch::Tensor& t) {
    auto c = t.contiguous();
    return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

struct Conv {
    torch::Tensor w, b;
    ConvSpec spec(bool relu) const {
        ConvSpec s{floats(w), w.sizes().vec(), floats(b)};
        s.padding = {1, 1};
        s.relu = relu;
        return s;
    }
    torch::Tensor operator()(const torch::Tensor& x) const { return torch::conv2d(x, w, b, 1, 1); }
};

Conv make_conv(int64_t out, int64_t in) { return {torch::randn({out, in, 3, 3}) * 0.2, torch::randn({out}) * 0.1}; }

torch::Tensor run(Graph& g, const torch::Tensor& x) {
    torch::Tensor out;
    g.run(x.data_ptr<float>(), x.sizes().vec(), x.strides().vec(), [&](const std::vector<int64_t>& d) {
        out = torch::empty(d);
        return out.data_ptr<float>();
    });
    return out;
}

/// A graph whose buffers cannot all be reused in place, and its reference in libtorch's ops.
struct Tangled {
    Conv c1 = make_conv(8, 3), c2 = make_conv(8, 8), c3 = make_conv(8, 8);
    torch::Tensor lw = torch::randn({5, 8}) * 0.3, lb = torch::randn({5});

    void build(Graph& g) const {
        const int a = g.conv(Graph::kInput, c1.spec(true));  // a = relu(c1(x))
        const int r = g.relu(a);                              // r = relu(a): a is read again below
        const int s = g.conv(r, c2.spec(true), a);            // s = relu(c2(r) + a), in a's buffer
        const int t = g.conv(s, c3.spec(false), s);           // t = c3(s) + s: adds into its own input
        const int p = g.flatten(g.global_avg_pool(t));
        g.set_output(g.linear(p, {floats(lw), 5, 8, floats(lb), false}));
    }
    torch::Tensor reference(const torch::Tensor& x) const {
        auto ra = torch::relu(c1(x));
        auto rs = torch::relu(c2(torch::relu(ra)) + ra);
        auto rt = c3(rs) + rs;
        return torch::linear(rt.mean({2, 3}), lw, lb);
    }
};

TEST(DnnlGraph, BuffersReadLaterAreNotOverwritten) {
    torch::manual_seed(3);
    const Tangled net;
    Graph g;
    net.build(g);
    for (int64_t batch : {1, 3}) {
        auto x = torch::randn({batch, 3, 9, 7});
        auto ref = net.reference(x);
        auto got = run(g, x);
        ASSERT_EQ(got.sizes(), ref.sizes());
        EXPECT_LE((got - ref).abs().max().item<double>(), 1e-4) << "batch " << batch;
        EXPECT_TRUE(torch::equal(run(g, x), got));  // the cached plan gives the same again
        const int threads = g.threads({batch, 3, 9, 7});  // measured on the first plan: 1 or all
        EXPECT_TRUE(threads == 1 || threads == at::get_num_threads()) << threads;
    }
}

// The same graph in bf16: FP32 in and out, bf16 inside (its rounding shows, within bf16's
// precision of the FP32 result); a bf16 graph takes no INT8 input and an INT8 one no bf16.
TEST(DnnlGraph, Bf16GraphRoundsLikeBf16) {
    torch::manual_seed(3);
    const Tangled net;
    Graph fp32, bf16;
    net.build(fp32);
    bf16.use_bf16();
    net.build(bf16);
    for (int64_t batch : {1, 3}) {
        auto x = torch::randn({batch, 3, 9, 7});
        auto ref = net.reference(x);
        torch::Tensor got;
        try {
            got = run(bf16, x);
        } catch (const std::runtime_error& e) {  // a CPU without oneDNN bf16 kernels
            GTEST_SKIP() << e.what();
        }
        ASSERT_EQ(got.sizes(), ref.sizes());
        const double err = (got - ref).abs().max().item<double>(), fp32_err = (run(fp32, x) - ref).abs().max().item<double>();
        EXPECT_LE(err, 2e-2 * std::max(1.0, ref.abs().max().item<double>())) << "batch " << batch;
        EXPECT_GT(err, 10 * fp32_err) << "batch " << batch << ": no bf16 rounding";
        EXPECT_TRUE(torch::equal(run(bf16, x), got));
    }
    EXPECT_THROW(bf16.quantize_input(0.1f), std::invalid_argument);
    Graph int8;
    int8.quantize_input(0.1f);
    EXPECT_THROW(int8.use_bf16(), std::invalid_argument);
}

// A dynamic batcher sends every batch size up to its maximum, from several threads at once: more
// shapes than plans cached once, scratch arenas lent across shapes of different sizes, and a
// caller whose output callback throws still hands its plan and arena back.
TEST(DnnlGraph, ManyShapesFromManyThreads) {
    torch::manual_seed(5);
    const auto c1 = make_conv(16, 3), c2 = make_conv(16, 16);
    const auto lw = torch::randn({4, 16}) * 0.3, lb = torch::randn({4});
    Graph g;
    const int a = g.conv(Graph::kInput, c1.spec(true));
    const int b = g.conv(a, c2.spec(true), a);
    g.set_output(g.linear(g.flatten(g.global_avg_pool(b)), {floats(lw), 4, 16, floats(lb), false}));
    std::vector<torch::Tensor> xs, refs;
    for (int64_t batch = 1; batch <= 40; ++batch) {
        xs.push_back(torch::randn({batch, 3, 6, 5}));
        auto ra = torch::relu(c1(xs.back()));
        refs.push_back(torch::linear(torch::relu(c2(ra) + ra).mean({2, 3}), lw, lb));
    }
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int round = 0; round < 2; ++round)
                for (size_t k = 0; k < xs.size(); ++k) {
                    const size_t i = (k * 7 + static_cast<size_t>(t) * 11) % xs.size();  // each thread its own order
                    auto got = run(g, xs[i]);
                    if (got.sizes() != refs[i].sizes() || (got - refs[i]).abs().max().item<double>() > 1e-4) ++bad;
                }
        });
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);

    const auto& x = xs[2];
    EXPECT_THROW(g.run(x.data_ptr<float>(), x.sizes().vec(), x.strides().vec(),
                       [](const std::vector<int64_t>&) -> float* { throw std::runtime_error("no room"); }),
                 std::runtime_error);
    EXPECT_LE((run(g, x) - refs[2]).abs().max().item<double>(), 1e-4);
}

/// An INT8 copy of a float convolution: symmetric per-channel weights.
ConvSpec int8_conv(const Conv& c, float out_scale, bool relu) {
    auto ws = c.w.abs().flatten(1).amax(1) / 127;
    auto qw = (c.w / ws.view({-1, 1, 1, 1})).round().to(torch::kChar).contiguous();
    ConvSpec spec = c.spec(relu);
    spec.weight.clear();
    spec.int8.weight.assign(qw.data_ptr<int8_t>(), qw.data_ptr<int8_t>() + qw.numel());
    spec.int8.scales = floats(ws);
    spec.int8.out_scale = out_scale;
    return spec;
}

// Found by review: a plan built on one thread (a server's model load, or another batcher thread)
// and run on a thread that had never built one failed with "could not execute a primitive":
// oneDNN's library scratchpad is per thread, sized when a primitive is created. An INT8
// package's first batch-1 request answered 500 until some other batch size had run on that
// thread. Plans carry their scratchpad in the arena now.
TEST(DnnlGraph, APlanBuiltOnOneThreadRunsOnAnother) {
    torch::manual_seed(6);
    // The Fashion-MNIST CNN's shape: its 256 -> 10 head is oneDNN's brgemm inner product, which
    // takes a scratchpad.
    const auto c1 = make_conv(32, 1), c2 = make_conv(64, 32);
    const auto l1w = torch::randn({256, 64 * 7 * 7}) * 0.02, l1b = torch::randn({256}) * 0.1;
    const auto l2w = torch::randn({10, 256}) * 0.1, l2b = torch::randn({10});
    auto linear = [](const torch::Tensor& w, const torch::Tensor& b, bool int8, bool relu, float out_scale) {
        LinearSpec spec{floats(w), w.size(0), w.size(1), floats(b), relu};
        if (int8) {
            auto ws = w.abs().amax(1) / 127;
            auto qw = (w / ws.view({-1, 1})).round().to(torch::kChar).contiguous();
            spec.weight.clear();
            spec.int8.weight.assign(qw.data_ptr<int8_t>(), qw.data_ptr<int8_t>() + qw.numel());
            spec.int8.scales = floats(ws);
            spec.int8.out_scale = out_scale;
        }
        return spec;
    };
    for (const bool int8 : {true, false}) {
        Graph g;
        if (int8) g.quantize_input(1.0f / 127);
        const PoolSpec pool{{2, 2}, {2, 2}, {0, 0}, false};
        int v = g.conv(Graph::kInput, int8 ? int8_conv(c1, 0.02f, true) : c1.spec(true));
        v = g.max_pool(v, pool);
        v = g.max_pool(g.conv(v, int8 ? int8_conv(c2, 0.05f, true) : c2.spec(true)), pool);
        v = g.linear(g.flatten(v), linear(l1w, l1b, int8, true, 0.05f));
        g.set_output(g.linear(v, linear(l2w, l2b, int8, false, 0.0f)));
        auto x = torch::rand({1, 1, 28, 28});
        torch::Tensor here = run(g, x);  // built (and timed) on this thread, then cached
        std::string error;
        torch::Tensor there;
        std::thread([&] {
            try {
                there = run(g, x);
            } catch (const std::exception& e) {
                error = e.what();
            }
        }).join();
        ASSERT_EQ(error, "") << (int8 ? "int8" : "fp32");
        EXPECT_TRUE(torch::equal(here, there)) << (int8 ? "int8" : "fp32");
    }
}

TEST(DnnlGraph, Int8NodesFollowTheFloatComputation) {
    torch::manual_seed(4);
    const auto c1 = make_conv(16, 1);
    auto x = torch::randn({2, 1, 12, 12});
    auto ref = torch::relu(c1(x));
    // Symmetric per-channel int8 weights, input in s8, output u8 dequantized at the end.
    auto amax = c1.w.abs().flatten(1).amax(1);
    auto ws = amax / 127;
    auto qw = (c1.w / ws.view({-1, 1, 1, 1})).round().to(torch::kChar).contiguous();
    const float in_scale = x.abs().max().item<float>() / 127, out_scale = ref.max().item<float>() / 255;
    Graph g;
    g.quantize_input(in_scale);
    ConvSpec spec = c1.spec(true);
    spec.weight.clear();
    spec.int8.weight.assign(qw.data_ptr<int8_t>(), qw.data_ptr<int8_t>() + qw.numel());
    spec.int8.scales = floats(ws);
    spec.int8.out_scale = out_scale;
    g.set_output(g.conv(Graph::kInput, std::move(spec)));
    auto got = run(g, x);
    ASSERT_EQ(got.sizes(), ref.sizes());
    // Within a few quantization steps of the input and output.
    EXPECT_LE((got - ref).abs().max().item<double>(), 4 * out_scale + 10 * in_scale * amax.max().item<double>());
    EXPECT_GT(torch::cosine_similarity(got.flatten(), ref.flatten(), 0).item<double>(), 0.999);
}

TEST(DnnlGraph, BadGraphsAndShapesAreClearErrors) {
    Graph g;
    EXPECT_THROW(g.conv(5, make_conv(4, 3).spec(false)), std::invalid_argument);  // no value 5
    ConvSpec wrong = make_conv(4, 3).spec(false);
    wrong.bias.pop_back();
    EXPECT_THROW(g.conv(Graph::kInput, wrong), std::invalid_argument);
    g.set_output(g.conv(Graph::kInput, make_conv(4, 3).spec(true)));
    auto x = torch::randn({1, 2, 8, 8});  // 2 channels, the convolution wants 3
    try {
        run(g, x);
        FAIL() << "a wrong channel count ran";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("expects 3 input channels"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace strato::models::dnnl_graph
