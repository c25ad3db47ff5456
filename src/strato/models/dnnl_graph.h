#pragma once
// An FP32 (or bf16, or INT8) inference graph run on oneDNN primitives directly (the libdnnl.so.2
// libtorch itself links), without libtorch's per-op dispatch in between. FusedNet describes its
// lowered ops here once; each distinct input shape then gets a plan: one primitive per node,
// created once, with ReLU and the residual add + ReLU as convolution post-ops, activations
// channels-last (NHWC, where oneDNN's brgemm convolutions handle any channel count without padding
// to a block of 16), weights reordered once into the layout each primitive wants, and activation
// slots reused by liveness in a scratch arena each run borrows (cached plans hold no activation
// memory); a shape's first plan, when under a millisecond, is timed on all threads and on one, and
// the faster count kept.
// At batch 1 that is about 4x less time than the same net through at::mkldnn_convolution
// (bench/compress, docs/compress.md).
//
//   dnnl_graph::Graph g;
//   int x = dnnl_graph::Graph::kInput;
//   x = g.conv(x, {.weight = w, .dims = {16, 1, 3, 3}, .bias = b, .padding = {1, 1}, .relu = true});
//   ...
//   g.set_output(x);
//   g.run(x_ptr, {1, 1, 28, 28}, x_strides, [&](auto& d) { return alloc(d); });  // plans cached per shape
//
// No libtorch here: weights come in as plain float arrays in PyTorch's layouts (OIHW, [out, in]).

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace strato::models::dnnl_graph {

/// INT8 convolution / linear: symmetric int8 weights with one scale per output channel, FP32
/// bias; the input's scale is its value's. Output: unsigned 8 bit after a ReLU, signed otherwise,
/// with `out_scale`; out_scale 0 gives FP32 output.
struct Int8Weights {
    std::vector<int8_t> weight;  // same layout as the float weights; empty: an FP32 node
    std::vector<float> scales;   // [out]
    float out_scale = 0.0f;
};

struct ConvSpec {
    std::vector<float> weight;  // PyTorch layout: [out, in / groups, kh, kw]
    std::vector<int64_t> dims;  // that shape
    std::vector<float> bias;    // [out]
    std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
    int64_t groups = 1;
    bool relu = false;
    Int8Weights int8;
};

struct LinearSpec {
    std::vector<float> weight;  // [out, in], `in` in NCHW flatten order when the input is 4-D
    int64_t out = 0, in = 0;
    std::vector<float> bias;  // [out]
    bool relu = false;
    Int8Weights int8;
};

struct PoolSpec {
    std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0};
    bool ceil_mode = false;
};

class Graph {
public:
    static constexpr int kInput = 0;
    Graph();
    ~Graph();
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    /// Each returns the id of the node's output. `accumulate`: a value the convolution's output
    /// is added to before its ReLU (the residual shortcut); no node may read it afterwards.
    int conv(int src, ConvSpec spec, int accumulate = -1);
    int linear(int src, LinearSpec spec);
    int max_pool(int src, PoolSpec spec);
    int global_avg_pool(int src);
    int relu(int src);
    /// [N, C, H, W] seen as [N, C*H*W] in NCHW order (a following linear takes it as it is).
    int flatten(int src);
    /// INT8 graphs: the input is quantized to signed 8 bit with this scale (symmetric).
    void quantize_input(float scale);
    /// Float graphs: weights and activations in bfloat16 (accumulation, biases, input and output
    /// stay FP32) — oneDNN's AMX or AVX512-BF16 kernels. Plans for a CPU without bf16 support
    /// fail to build (a std::runtime_error from run/prepare). Call before the first run.
    void use_bf16();
    /// The graph's result; an INT8 value is dequantized into the FP32 output.
    void set_output(int value);

    /// Runs the graph on a float input of shape `dims` (N, C, H, W) with element `strides`;
    /// `output(out_dims)` returns where to write the output, dense row-major. Thread-safe:
    /// concurrent calls use different plans. Throws std::runtime_error on a shape the graph cannot
    /// take (a oneDNN error), naming the node.
    void run(const float* input, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
             const std::function<float*(const std::vector<int64_t>&)>& output);

    /// Builds (and caches) the plan for `dims` now: the check that every node has a primitive.
    void prepare(const std::vector<int64_t>& dims);
    /// The OpenMP threads the plans for `dims` run on: the caller's count, or 1 where one thread
    /// was measured faster when the shape's first plan was built.
    int threads(const std::vector<int64_t>& dims);
    /// The oneDNN implementation chosen per node for `dims`, e.g. "conv: brgconv:avx512_core".
    std::vector<std::string> implementations(const std::vector<int64_t>& dims);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace strato::models::dnnl_graph
