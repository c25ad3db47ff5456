#include "strato/models/dnnl_graph.h"

#include <dnnl.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace strato::models::dnnl_graph {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
using Dims = std::vector<int64_t>;

enum class Kind { kConv, kLinear, kMaxPool, kAvgPool, kRelu, kFlatten };

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::kConv: return "conv";
        case Kind::kLinear: return "linear";
        case Kind::kMaxPool: return "max_pool";
        case Kind::kAvgPool: return "global_avg_pool";
        case Kind::kRelu: return "relu";
        case Kind::kFlatten: return "flatten";
    }
    return "?";
}

dnnl::engine& cpu_engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

/// Primitive attributes whose scratchpad the caller passes (DNNL_ARG_SCRATCHPAD).
dnnl::primitive_attr user_scratchpad() {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
}

memory::desc activation_desc(const Dims& d, dt type = dt::f32) {
    return d.size() == 4 ? memory::desc(d, type, tag::nhwc) : memory::desc(d, type, tag::nc);
}

/// What a convolution or linear node writes: INT8 nodes unsigned after a ReLU, signed otherwise,
/// or FP32 without an output scale; float nodes the graph's float type.
dt output_type(const Int8Weights& q, bool relu, dt float_type) {
    if (q.weight.empty()) return float_type;
    if (q.out_scale == 0.0f) return dt::f32;
    return relu ? dt::u8 : dt::s8;
}

/// oneDNN (OpenMP runtime) sizes its parallel regions from the calling thread's OpenMP thread
/// count, at primitive creation and at execution; this sets it for a scope.
class OmpThreads {
public:
    explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
        if (n != saved_) omp_set_num_threads(n);
    }
    ~OmpThreads() {
        if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
    }
    OmpThreads(const OmpThreads&) = delete;
    OmpThreads& operator=(const OmpThreads&) = delete;

private:
    int saved_;
};

/// A 64-byte aligned allocation: the scratch arena a plan's activations live in while it runs.
struct Buffer {
    explicit Buffer(size_t n) : bytes(n), ptr(std::aligned_alloc(64, (std::max<size_t>(n, 64) + 63) / 64 * 64)) {
        if (!ptr) throw std::bad_alloc();
    }
    ~Buffer() { std::free(ptr); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    size_t bytes;
    void* ptr;
};

}  // namespace

struct Node {
    Kind kind;
    int src;
    int accumulate = -1;
    ConvSpec conv;
    LinearSpec lin;
    PoolSpec pool;
    // Weights reordered into the layouts primitives asked for (shared by every plan).
    std::vector<std::pair<memory::desc, memory>> packed;
    memory bias;

    // A convolution's or a linear node's parameters.
    const Int8Weights& int8() const { return kind == Kind::kConv ? conv.int8 : lin.int8; }
    const std::vector<float>& float_bias() const { return kind == Kind::kConv ? conv.bias : lin.bias; }
    void* user_weights() {
        if (!int8().weight.empty()) return kind == Kind::kConv ? conv.int8.weight.data() : lin.int8.weight.data();
        return kind == Kind::kConv ? conv.weight.data() : lin.weight.data();
    }
};

/// The primitives for one input shape. Its activations own no memory: they are slots at fixed
/// offsets of a scratch arena lent for each run, so a cached plan costs its primitives only and
/// a server can keep one per batch size.
struct Plan {
    dnnl::stream stream{cpu_engine()};
    struct Step {
        dnnl::primitive prim;
        std::unordered_map<int, memory> args;
    };
    std::vector<Step> steps;
    memory in_user, out_user;
    std::vector<std::pair<memory, int>> bound;  // activation memories and their slots
    std::vector<size_t> slot_bytes, slot_offset;
    const char* bound_base = nullptr;  // the arena `bound` points into now
    size_t arena_bytes = 0;
    int out_slot = -1;  // set when the result is already dense FP32: copied, not reordered
    size_t out_bytes = 0;
    Dims out_dims;
    std::vector<std::string> impl;
    int threads = 1;  // the OpenMP threads its primitives were created for and run with

    /// Places the slots in the arena, 64-byte aligned (after the build, once their sizes are known).
    void lay_out() {
        slot_offset.resize(slot_bytes.size());
        arena_bytes = 0;
        for (size_t i = 0; i < slot_bytes.size(); ++i) {
            slot_offset[i] = arena_bytes;
            arena_bytes += (std::max<size_t>(slot_bytes[i], 1) + 63) / 64 * 64;
        }
    }

    void run(const float* input, float* out, Buffer& arena) {
        OmpThreads scope(threads);
        auto* base = static_cast<char*>(arena.ptr);
        if (base != bound_base) {  // set_data_handle costs ~1 us a memory: only on a new arena
            for (auto& [m, slot] : bound) m.set_data_handle(base + slot_offset[slot]);
            bound_base = base;
        }
        in_user.set_data_handle(const_cast<float*>(input));
        if (out_slot < 0) out_user.set_data_handle(out);
        for (auto& s : steps) s.prim.execute(stream, s.args);
        stream.wait();
        if (out_slot >= 0) std::memcpy(out, base + slot_offset[out_slot], out_bytes);
    }
};

struct Graph::Impl {
    std::vector<Node> nodes;
    int output = kInput;
    float input_scale = 0.0f;  // INT8 graphs: the input's s8 scale
    dt float_type = dt::f32;   // float nodes' weights and activations: f32, or bf16 (use_bf16)
    std::mutex weights_mu;  // packed weights and biases (plans are built outside `mu`)
    std::mutex mu;          // everything below
    // Per input shape (dims, strides): its idle plans and when it was last used. A dynamic
    // batcher sends every batch size up to its maximum, so this keeps more shapes than that.
    using Key = std::pair<Dims, Dims>;
    struct Shape {
        std::vector<std::unique_ptr<Plan>> idle;
        uint64_t used = 0;
    };
    std::map<Key, Shape> shapes;
    uint64_t clock = 0;
    static constexpr size_t kMaxShapes = 160;
    // The thread count a shape's first plan measured faster; outlives the shape's plans so that
    // an evicted shape is not timed again (bounded: cleared when it grows past kMaxChoices).
    std::map<Key, int> chosen;
    std::map<Key, int> tuning;  // shapes whose first plan is being timed now (count of builders)
    static constexpr size_t kMaxChoices = 4096;
    // Idle scratch arenas, lent to one run at a time; at most kMaxArenas kept (the largest).
    std::vector<std::unique_ptr<Buffer>> arenas;
    static constexpr size_t kMaxArenas = 8;

    /// A plan and an arena for one run of `key`; builds the plan (outside `mu`) when no idle one
    /// is cached.
    std::pair<std::unique_ptr<Plan>, std::unique_ptr<Buffer>> take(const Key& key) {
        std::unique_ptr<Plan> plan;
        int threads = 0;
        bool tune = false;
        {
            std::lock_guard lock(mu);
            Shape& sh = shapes[key];
            sh.used = ++clock;
            if (!sh.idle.empty()) {
                plan = std::move(sh.idle.back());
                sh.idle.pop_back();
                auto arena = take_arena(plan->arena_bytes);
                return {std::move(plan), std::move(arena)};
            }
            if (auto it = chosen.find(key); it != chosen.end()) {
                threads = it->second;
            } else {
                tune = tuning[key]++ == 0;  // one caller times; the others use all threads meanwhile
            }
        }
        try {
            plan = tune ? build_tuned(key) : build(key.first, key.second, threads > 0 ? threads : all_threads());
        } catch (...) {
            if (threads == 0) end_tuning(key, 0);
            std::lock_guard lock(mu);  // a shape the graph cannot take leaves no entry behind
            if (auto it = shapes.find(key); it != shapes.end() && it->second.idle.empty()) shapes.erase(it);
            throw;
        }
        if (threads == 0) end_tuning(key, tune ? plan->threads : 0);
        std::lock_guard lock(mu);
        auto arena = take_arena(plan->arena_bytes);
        return {std::move(plan), std::move(arena)};
    }

    void end_tuning(const Key& key, int threads) {
        std::lock_guard lock(mu);
        if (--tuning[key] == 0) tuning.erase(key);
        if (threads == 0) return;
        if (chosen.size() >= kMaxChoices) chosen.clear();
        chosen[key] = threads;
    }

    /// The smallest idle arena that holds `bytes`, or a new one (caller holds `mu`).
    std::unique_ptr<Buffer> take_arena(size_t bytes) {
        auto best = arenas.end();
        for (auto it = arenas.begin(); it != arenas.end(); ++it)
            if ((*it)->bytes >= bytes && (best == arenas.end() || (*it)->bytes < (*best)->bytes)) best = it;
        if (best == arenas.end()) return std::make_unique<Buffer>(bytes);
        auto a = std::move(*best);
        arenas.erase(best);
        return a;
    }

    /// Returns a plan and its arena after a run; keeps the plans of the most recently used shapes.
    void give_back(const Key& key, std::unique_ptr<Plan> plan, std::unique_ptr<Buffer> arena) {
        std::lock_guard lock(mu);
        arenas.push_back(std::move(arena));
        if (arenas.size() > kMaxArenas) {
            auto smallest = std::min_element(arenas.begin(), arenas.end(), [](auto& a, auto& b) { return a->bytes < b->bytes; });
            arenas.erase(smallest);
        }
        // A plan built on all threads while another caller was timing the shape is not kept
        // when one thread won.
        if (auto it = chosen.find(key); it != chosen.end() && it->second != plan->threads) return;
        Shape& sh = shapes[key];
        sh.used = ++clock;
        sh.idle.push_back(std::move(plan));
        while (shapes.size() > kMaxShapes) {
            auto oldest = shapes.begin();
            for (auto it = shapes.begin(); it != shapes.end(); ++it)
                if (it->second.used < oldest->second.used) oldest = it;
            shapes.erase(oldest);
        }
    }

    static int all_threads() { return std::max(1, omp_get_max_threads()); }

    int add(Node n) {
        if (n.src < 0 || n.src > static_cast<int>(nodes.size()))
            throw std::invalid_argument(fmt::format("dnnl_graph: node {} reads value {} that does not exist", nodes.size(), n.src));
        nodes.push_back(std::move(n));
        return static_cast<int>(nodes.size());
    }

    memory packed_weights(Node& n, const memory::desc& want, const memory::desc& user, dnnl::stream& s) {
        std::lock_guard lock(weights_mu);
        for (auto& [d, m] : n.packed)
            if (d == want) return m;
        memory u(user, cpu_engine(), n.user_weights()), w(want, cpu_engine());
        dnnl::reorder(u, w).execute(s, u, w);
        s.wait();
        n.packed.emplace_back(want, w);
        return w;
    }

    /// FP32 bias; for an INT8 node in the accumulator's units (oneDNN adds it before the output
    /// scale): bias / (input scale * weight scale).
    memory bias_of(Node& n, float in_scale) {
        std::lock_guard lock(weights_mu);
        if (!n.bias) {
            const auto& b = n.float_bias();
            const Int8Weights& q = n.int8();
            n.bias = memory(memory::desc({static_cast<int64_t>(b.size())}, dt::f32, tag::a), cpu_engine());
            auto* p = static_cast<float*>(n.bias.get_data_handle());
            for (size_t i = 0; i < b.size(); ++i) p[i] = q.weight.empty() ? b[i] : b[i] / (in_scale * q.scales[i]);
        }
        return n.bias;
    }

    /// Post-ops (the residual sum, then ReLU) and, for INT8, the per-channel output scales
    /// in_scale * weight_scale / out_scale and the sum's scale acc_scale / out_scale.
    static dnnl::primitive_attr attr(const Int8Weights& q, float in_scale, bool sum, float acc_scale, dt acc_type, bool relu) {
        const bool int8 = !q.weight.empty();
        const float out = int8 && q.out_scale != 0.0f ? q.out_scale : 1.0f;
        dnnl::post_ops po;
        if (sum) {
            if (int8) {
                po.append_sum(acc_scale / out, acc_type);
            } else {
                po.append_sum(1.0f);
            }
        }
        if (relu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        dnnl::primitive_attr a = user_scratchpad();
        a.set_post_ops(po);
        if (int8) {
            std::vector<float> scales(q.scales.size());
            for (size_t i = 0; i < scales.size(); ++i) scales[i] = in_scale * q.scales[i] / out;
            a.set_output_scales(1 << 1, scales);
        }
        return a;
    }

    std::unique_ptr<Plan> build(const Dims& dims, const Dims& strides, int threads);
    std::unique_ptr<Plan> build_tuned(const Key& key);
};

/// The first plan of a shape also picks its thread count: small work (batch 1 of a small net) is
/// often faster on one thread than split across all of them, where every primitive pays the
/// threads' synchronisation. Both plans are timed on a zero input (under ~20 ms, once per shape, on
/// the caller's thread and an arena of its own; other shapes run meanwhile).
std::unique_ptr<Plan> Graph::Impl::build_tuned(const Key& key) {
    const auto& [dims, strides] = key;
    const int all = all_threads();
    auto plan = build(dims, strides, all);
    if (all == 1) return plan;
    int64_t span = 1;
    for (size_t i = 0; i < dims.size(); ++i) span += (dims[i] - 1) * strides[i];
    std::vector<float> in(static_cast<size_t>(span), 0.0f), out(static_cast<size_t>(plan->out_user.get_desc().get_size() / sizeof(float)));
    auto arena = std::make_unique<Buffer>(plan->arena_bytes);
    auto seconds = [&](Plan& p) {
        const auto t0 = std::chrono::steady_clock::now();
        p.run(in.data(), out.data(), *arena);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    // Work above a millisecond goes to all threads without a measurement, and the rounds are
    // sized so that timing costs under ~20 ms: a server meets each new batch size under
    // load, and its requests wait meanwhile.
    const double first = seconds(*plan);
    if (first > 0.001) return plan;
    const int rounds = std::clamp(static_cast<int>(0.005 / std::max(first, 1e-6)), 4, 10);
    auto one = build(dims, strides, 1);
    // (The same nodes and slots; the scratchpad may differ with the thread count.)
    if (one->arena_bytes > arena->bytes) arena = std::make_unique<Buffer>(one->arena_bytes);
    std::vector<double> t_all, t_one;
    for (int i = 0; i < rounds + 2; ++i) {  // alternating, after two warm-up rounds
        const double a = seconds(*plan), b = seconds(*one);
        if (i >= 2) t_all.push_back(a), t_one.push_back(b);
    }
    std::sort(t_all.begin(), t_all.end());
    std::sort(t_one.begin(), t_one.end());
    if (t_one[t_one.size() / 2] >= t_all[t_all.size() / 2]) return plan;
    return one;
}

std::unique_ptr<Plan> Graph::Impl::build(const Dims& dims, const Dims& strides, int threads) {
    if (dims.size() != 4 || strides.size() != 4)
        throw std::runtime_error(fmt::format("the oneDNN graph takes [N, C, H, W] inputs, not {} dimensions", dims.size()));
    OmpThreads scope(threads);
    auto plan = std::make_unique<Plan>();
    plan->threads = threads;
    const int values = static_cast<int>(nodes.size()) + 1;

    // Liveness: the last node reading each value; values that share a buffer (flatten, in-place
    // ReLU, the convolution accumulating into its shortcut) share a root.
    std::vector<int> last_use(values, -1), root(values);
    for (int v = 0; v < values; ++v) root[v] = v;
    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
        last_use[nodes[i].src] = i;
        if (nodes[i].accumulate >= 0) last_use[nodes[i].accumulate] = std::max(last_use[nodes[i].accumulate], i);
    }
    last_use[output] = std::numeric_limits<int>::max();

    std::vector<memory::desc> desc(values);
    std::vector<memory> mem(values);
    std::vector<float> scale(values, 0.0f);  // INT8 values: their scale; FP32: 0
    scale[0] = input_scale;
    desc[0] = activation_desc(dims, input_scale != 0.0f ? dt::s8 : float_type);
    // The node whose output is the graph's writes FP32 itself (oneDNN converts on the way out).
    auto float_out = [&](int v) { return v == output ? dt::f32 : float_type; };
    std::vector<int> free_slots;
    std::vector<int> slot_of(values, -1);
    std::vector<int> root_last(values, -1);
    auto& slot_bytes = plan->slot_bytes;
    auto allocate = [&](const memory::desc& d) {  // the smallest free slot that fits, or a new one
        const size_t bytes = d.get_size();
        auto best = free_slots.end();
        for (auto it = free_slots.begin(); it != free_slots.end(); ++it)
            if (slot_bytes[*it] >= bytes && (best == free_slots.end() || slot_bytes[*it] < slot_bytes[*best])) best = it;
        if (best != free_slots.end()) {
            const int slot = *best;
            free_slots.erase(best);
            return slot;
        }
        slot_bytes.push_back(bytes);
        return static_cast<int>(slot_bytes.size()) - 1;
    };
    auto slot_memory = [&](const memory::desc& d, int slot) {  // its address is set at each run
        memory m(d, cpu_engine(), DNNL_MEMORY_NONE);
        plan->bound.emplace_back(m, slot);
        return m;
    };
    // Every primitive's scratchpad is the plan's (oneDNN's own is per thread and sized when a
    // primitive is created: a plan run on a thread that had created none failed to execute).
    // The steps run one after another, so they share one slot, as large as the largest needs.
    const int scratch_slot = static_cast<int>(slot_bytes.size());
    slot_bytes.push_back(0);
    auto push = [&](const dnnl::primitive& prim, const memory::desc& scratch, std::unordered_map<int, memory> args) {
        if (scratch.get_size() > 0) {
            slot_bytes[scratch_slot] = std::max(slot_bytes[scratch_slot], scratch.get_size());
            args[DNNL_ARG_SCRATCHPAD] = slot_memory(scratch, scratch_slot);
        }
        plan->steps.push_back({prim, std::move(args)});
    };
    auto bind = [&](int v, int slot, int r) {
        slot_of[v] = slot;
        root[v] = r;
        root_last[r] = std::max(root_last[r], last_use[v]);
        mem[v] = slot_memory(desc[v], slot);
    };
    bind(0, allocate(desc[0]), 0);

    // The input (and, at the end, the output) crosses between the caller's FP32 and the graph's
    // layout and type in one reorder, quantizing or dequantizing on the way.
    auto scaled = [](float s) {
        dnnl::primitive_attr a = user_scratchpad();
        a.set_output_scales(0, {s});
        return a;
    };
    auto reorder = [&](const memory& from, const memory& to, const dnnl::primitive_attr& a) {
        const dnnl::reorder::primitive_desc pd(from, to, a);
        push(dnnl::reorder(pd), pd.scratchpad_desc(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    };
    plan->in_user = memory(memory::desc(dims, dt::f32, strides), cpu_engine(), nullptr);
    reorder(plan->in_user, mem[0], scaled(input_scale != 0.0f ? 1.0f / input_scale : 1.0f));

    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
        Node& n = nodes[i];
        const int out = i + 1;
        const memory::desc& sd = desc[n.src];
        const Dims sdims = sd.dims();
        auto where = [&](const std::string& what) {
            return fmt::format("oneDNN graph node {} ({}) on input [{}]: {}", i, kind_name(n.kind), fmt::join(dims, ", "), what);
        };
        try {
            switch (n.kind) {
                case Kind::kConv: {
                    const ConvSpec& c = n.conv;
                    if (sdims.size() != 4 || sdims[1] != c.dims[1] * c.groups)
                        throw std::runtime_error(where(fmt::format("expects {} input channels", c.dims[1] * c.groups)));
                    Dims od = sdims;
                    od[1] = c.dims[0];
                    for (int k = 0; k < 2; ++k) {
                        const int64_t ext = (c.dims[2 + k] - 1) * c.dilation[k] + 1;
                        od[2 + k] = (sdims[2 + k] + 2 * c.padding[k] - ext) / c.stride[k] + 1;
                        if (od[2 + k] < 1) throw std::runtime_error(where("the input is smaller than the kernel"));
                    }
                    const bool int8 = !c.int8.weight.empty();
                    if (int8 != (scale[n.src] != 0.0f)) throw std::runtime_error(where("INT8 and FP32 values mixed"));
                    desc[out] = activation_desc(od, output_type(c.int8, c.relu, n.accumulate >= 0 ? float_type : float_out(out)));
                    scale[out] = int8 ? c.int8.out_scale : 0.0f;
                    Dims wdims = c.dims;
                    tag wtag = tag::oihw;
                    if (c.groups > 1) {
                        wdims = {c.groups, c.dims[0] / c.groups, c.dims[1], c.dims[2], c.dims[3]};
                        wtag = tag::goihw;
                    }
                    const memory::desc bd({c.dims[0]}, dt::f32, tag::a);
                    dnnl::convolution_forward::desc cd(
                        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, sd,
                        memory::desc(wdims, int8 ? dt::s8 : float_type, tag::any), bd, desc[out], {c.stride[0], c.stride[1]},
                        {c.dilation[0] - 1, c.dilation[1] - 1}, {c.padding[0], c.padding[1]}, {c.padding[0], c.padding[1]});
                    const int acc = n.accumulate;
                    const dt acc_type = acc >= 0 ? desc[acc].data_type() : dt::f32;
                    dnnl::convolution_forward::primitive_desc pd(
                        cd, attr(c.int8, scale[n.src], acc >= 0, acc >= 0 ? scale[acc] : 0.0f, acc_type, c.relu), cpu_engine());
                    memory w = packed_weights(n, pd.weights_desc(), memory::desc(wdims, int8 ? dt::s8 : dt::f32, wtag), plan->stream);
                    if (acc >= 0) {
                        // The output overwrites the shortcut in place: same shape and element size.
                        if (desc[acc].dims() != desc[out].dims() || desc[acc].get_size() != desc[out].get_size() ||
                            (scale[acc] != 0.0f) != int8)
                            throw std::runtime_error(where("the accumulated value has another shape or type"));
                        // Someone reads the shortcut (or its buffer) later, or it is the input itself: add into a copy.
                        if (root_last[root[acc]] > i || root[acc] == root[n.src]) {
                            bind(out, allocate(desc[out]), out);
                            memory copy = slot_memory(desc[acc], slot_of[out]);
                            reorder(mem[acc], copy, user_scratchpad());
                        } else {
                            bind(out, slot_of[acc], root[acc]);
                        }
                    } else {
                        bind(out, allocate(desc[out]), out);
                    }
                    push(dnnl::convolution_forward(pd), pd.scratchpad_desc(),
                         {{DNNL_ARG_SRC, mem[n.src]}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias_of(n, scale[n.src])}, {DNNL_ARG_DST, mem[out]}});
                    plan->impl.push_back(fmt::format("conv: {}", pd.impl_info_str()));
                    break;
                }
                case Kind::kLinear: {
                    const LinearSpec& l = n.lin;
                    Dims wdims{l.out, l.in};
                    tag wtag = tag::oi;
                    if (sdims.size() == 4) {
                        if (sdims[1] * sdims[2] * sdims[3] != l.in)
                            throw std::runtime_error(where(fmt::format("expects {} input features, the input has {}", l.in, sdims[1] * sdims[2] * sdims[3])));
                        wdims = {l.out, sdims[1], sdims[2], sdims[3]};
                        wtag = tag::oihw;  // [out, C*H*W] in NCHW flatten order
                    } else if (sdims[1] != l.in) {
                        throw std::runtime_error(where(fmt::format("expects {} input features, the input has {}", l.in, sdims[1])));
                    }
                    const bool int8 = !l.int8.weight.empty();
                    if (int8 != (scale[n.src] != 0.0f)) throw std::runtime_error(where("INT8 and FP32 values mixed"));
                    desc[out] = memory::desc({sdims[0], l.out}, output_type(l.int8, l.relu, float_out(out)), tag::nc);
                    scale[out] = int8 ? l.int8.out_scale : 0.0f;
                    const memory::desc bd({l.out}, dt::f32, tag::a);
                    dnnl::inner_product_forward::desc ld(dnnl::prop_kind::forward_inference, sd,
                                                         memory::desc(wdims, int8 ? dt::s8 : float_type, tag::any), bd, desc[out]);
                    dnnl::inner_product_forward::primitive_desc pd(ld, attr(l.int8, scale[n.src], false, 0.0f, dt::f32, l.relu), cpu_engine());
                    memory w = packed_weights(n, pd.weights_desc(), memory::desc(wdims, int8 ? dt::s8 : dt::f32, wtag), plan->stream);
                    bind(out, allocate(desc[out]), out);
                    push(dnnl::inner_product_forward(pd), pd.scratchpad_desc(),
                         {{DNNL_ARG_SRC, mem[n.src]}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias_of(n, scale[n.src])}, {DNNL_ARG_DST, mem[out]}});
                    plan->impl.push_back(fmt::format("linear: {}", pd.impl_info_str()));
                    break;
                }
                case Kind::kMaxPool:
                case Kind::kAvgPool: {
                    if (sdims.size() != 4) throw std::runtime_error(where("expects a 4-D input"));
                    PoolSpec p = n.pool;
                    if (n.kind == Kind::kAvgPool) p = PoolSpec{{sdims[2], sdims[3]}, {1, 1}, {0, 0}, false};
                    Dims od = sdims;
                    memory::dims pad_r(2);
                    for (int k = 0; k < 2; ++k) {
                        const int64_t span = sdims[2 + k] + 2 * p.padding[k] - p.kernel[k];
                        if (span < 0) throw std::runtime_error(where("the input is smaller than the pooling window"));
                        int64_t o = (p.ceil_mode ? (span + p.stride[k] - 1) / p.stride[k] : span / p.stride[k]) + 1;
                        // PyTorch's rule: the last window must start inside the input or its left padding.
                        if (p.ceil_mode && (o - 1) * p.stride[k] >= sdims[2 + k] + p.padding[k]) --o;
                        od[2 + k] = o;
                        pad_r[k] = (o - 1) * p.stride[k] + p.kernel[k] - sdims[2 + k] - p.padding[k];
                    }
                    desc[out] = activation_desc(od, sd.data_type());
                    scale[out] = scale[n.src];
                    const auto alg = n.kind == Kind::kMaxPool ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
                    dnnl::pooling_forward::desc qd(dnnl::prop_kind::forward_inference, alg, sd, desc[out], {p.stride[0], p.stride[1]},
                                                   {p.kernel[0], p.kernel[1]}, {p.padding[0], p.padding[1]}, pad_r);
                    dnnl::pooling_forward::primitive_desc pd(qd, user_scratchpad(), cpu_engine());
                    bind(out, allocate(desc[out]), out);
                    push(dnnl::pooling_forward(pd), pd.scratchpad_desc(), {{DNNL_ARG_SRC, mem[n.src]}, {DNNL_ARG_DST, mem[out]}});
                    plan->impl.push_back(fmt::format("{}: {}", kind_name(n.kind), pd.impl_info_str()));
                    break;
                }
                case Kind::kRelu: {
                    desc[out] = sd;
                    scale[out] = scale[n.src];
                    dnnl::eltwise_forward::desc ed(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, sd, 0.0f, 0.0f);
                    dnnl::eltwise_forward::primitive_desc pd(ed, user_scratchpad(), cpu_engine());
                    if (root_last[root[n.src]] <= i) {
                        bind(out, slot_of[n.src], root[n.src]);  // in place: nothing reads the input later
                    } else {
                        bind(out, allocate(desc[out]), out);
                    }
                    push(dnnl::eltwise_forward(pd), pd.scratchpad_desc(), {{DNNL_ARG_SRC, mem[n.src]}, {DNNL_ARG_DST, mem[out]}});
                    plan->impl.push_back(fmt::format("relu: {}", pd.impl_info_str()));
                    break;
                }
                case Kind::kFlatten:
                    desc[out] = sd;  // a following linear reads the 4-D layout as NCHW-flattened
                    scale[out] = scale[n.src];
                    bind(out, slot_of[n.src], root[n.src]);
                    plan->impl.push_back("flatten: view");
                    break;
            }
        } catch (const dnnl::error& e) {
            throw std::runtime_error(where(e.what()));
        }
        // Slots whose every reader has run are free again.
        for (int v = 0; v <= out; ++v)
            if (slot_of[v] >= 0 && root[v] == v && root_last[v] == i) free_slots.push_back(slot_of[v]);
    }

    const memory::desc& od = desc[output];
    plan->out_dims = od.dims();
    const tag plain = plan->out_dims.size() == 4 ? tag::nchw : tag::nc;
    plan->out_user = memory(memory::desc(plan->out_dims, dt::f32, plain), cpu_engine(), nullptr);
    if (scale[output] == 0.0f && mem[output].get_desc() == plan->out_user.get_desc()) {
        // A 10-float reorder still costs a parallel region; a copy does not.
        plan->out_slot = slot_of[output];
        plan->out_bytes = plan->out_user.get_desc().get_size();
        plan->lay_out();
        return plan;
    }
    reorder(mem[output], plan->out_user, scaled(scale[output] != 0.0f ? scale[output] : 1.0f));
    plan->lay_out();
    return plan;
}

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() = default;

int Graph::conv(int src, ConvSpec spec, int accumulate) {
    if (spec.dims.size() != 4 || spec.groups < 1 || spec.dims[0] % spec.groups != 0)
        throw std::invalid_argument("dnnl_graph::conv: weights must be [out, in / groups, kh, kw]");
    const bool int8 = !spec.int8.weight.empty();
    const size_t weights = int8 ? spec.int8.weight.size() : spec.weight.size();
    if (static_cast<int64_t>(weights) != spec.dims[0] * spec.dims[1] * spec.dims[2] * spec.dims[3] ||
        static_cast<int64_t>(spec.bias.size()) != spec.dims[0] || (int8 && spec.int8.scales.size() != spec.bias.size()))
        throw std::invalid_argument("dnnl_graph::conv: weight, scale or bias size does not match the dims");
    if (accumulate > static_cast<int>(impl_->nodes.size())) throw std::invalid_argument("dnnl_graph::conv: accumulate into an unknown value");
    Node n{Kind::kConv, src};
    n.accumulate = accumulate;
    n.conv = std::move(spec);
    return impl_->add(std::move(n));
}

int Graph::linear(int src, LinearSpec spec) {
    const bool int8 = !spec.int8.weight.empty();
    const size_t weights = int8 ? spec.int8.weight.size() : spec.weight.size();
    if (static_cast<int64_t>(weights) != spec.out * spec.in || static_cast<int64_t>(spec.bias.size()) != spec.out ||
        (int8 && spec.int8.scales.size() != spec.bias.size()))
        throw std::invalid_argument("dnnl_graph::linear: weight, scale or bias size does not match [out, in]");
    Node n{Kind::kLinear, src};
    n.lin = std::move(spec);
    return impl_->add(std::move(n));
}

int Graph::max_pool(int src, PoolSpec spec) {
    Node n{Kind::kMaxPool, src};
    n.pool = spec;
    return impl_->add(std::move(n));
}

int Graph::global_avg_pool(int src) { return impl_->add(Node{Kind::kAvgPool, src}); }
int Graph::relu(int src) { return impl_->add(Node{Kind::kRelu, src}); }
int Graph::flatten(int src) { return impl_->add(Node{Kind::kFlatten, src}); }

void Graph::quantize_input(float scale) {
    if (!(scale > 0.0f)) throw std::invalid_argument("dnnl_graph::quantize_input: the scale must be positive");
    if (impl_->float_type != dt::f32) throw std::invalid_argument("dnnl_graph::quantize_input: the graph runs in bf16");
    impl_->input_scale = scale;
}

void Graph::use_bf16() {
    if (impl_->input_scale != 0.0f) throw std::invalid_argument("dnnl_graph::use_bf16: an INT8 graph has no float nodes to run in bf16");
    impl_->float_type = dt::bf16;
}

void Graph::set_output(int value) {
    if (value < 0 || value > static_cast<int>(impl_->nodes.size())) throw std::invalid_argument("dnnl_graph: unknown output value");
    impl_->output = value;
}

namespace {

Dims dense_strides(const Dims& dims) {
    Dims s(dims.size(), 1);
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
    return s;
}

}  // namespace

void Graph::run(const float* input, const Dims& dims, const Dims& strides, const std::function<float*(const Dims&)>& output) {
    const auto key = std::make_pair(dims, strides);
    auto [plan, arena] = impl_->take(key);
    struct Return {  // the plan and arena go back even when the output callback throws
        Impl& impl;
        const Impl::Key& key;
        std::unique_ptr<Plan>& plan;
        std::unique_ptr<Buffer>& arena;
        ~Return() { impl.give_back(key, std::move(plan), std::move(arena)); }
    } give_back{*impl_, key, plan, arena};
    plan->run(input, output(plan->out_dims), *arena);
}

void Graph::prepare(const Dims& dims) {
    const auto key = std::make_pair(dims, dense_strides(dims));
    auto [plan, arena] = impl_->take(key);
    impl_->give_back(key, std::move(plan), std::move(arena));
}

int Graph::threads(const Dims& dims) {
    const auto key = std::make_pair(dims, dense_strides(dims));
    auto [plan, arena] = impl_->take(key);
    const int n = plan->threads;
    impl_->give_back(key, std::move(plan), std::move(arena));
    return n;
}

std::vector<std::string> Graph::implementations(const Dims& dims) {
    return impl_->build(dims, dense_strides(dims), Impl::all_threads())->impl;
}

}  // namespace strato::models::dnnl_graph
