#pragma once
// Inference graphs lowered from zoo networks: FusedNet (FP32) and QuantizedNet (INT8). Both walk
// the network the same way and fail the same way on a layer they do not know.
//
// FusedNet is what TorchScript's freeze + optimize_for_inference does to a model, without
// TorchScript: BatchNorm folded into the convolution before it, dropout gone, ReLU applied in
// place, convolution weights reordered once into oneDNN's blocked layout and the activations kept
// in that layout from the first convolution to the flatten / global pool (no reorder per op).
// Inference only (no autograd). Outputs equal the eager network's within float rounding.
//
//   auto f = FusedNet::lower(cfg, *float_net).value();
//   torch::Tensor logits = f->forward(x);                      // x: NCHW float, normalised
//
// QuantizedNet: INT8 inference for zoo networks through libtorch's quantized engines (oneDNN here: its AMX/VNNI
// int8 kernels), as PyTorch's static post-training quantization does it:
//   - BatchNorm folded into the preceding convolution; ReLU fused into conv, linear and the
//     residual add (quantized::conv2d_relu, linear_relu, add_relu);
//   - weights: symmetric signed 8 bit, one scale per output channel (or per tensor), zero point 0
//     (what oneDNN requires);
//   - activations: unsigned 8 bit per tensor, scale and zero point from a calibration pass with a
//     min/max, percentile or histogram (minimum-MSE clipping) observer; biases stay FP32.
//
//   auto q = QuantizedNet::lower(cfg, *float_net).value();     // float graph, observers attached
//   q->calibrate([&](auto feed) { for (x : batches) feed(x); return Status::ok(); }, opts);
//   torch::Tensor logits = q->forward(x);                      // float in, float out, int8 inside
//
// A QuantizedNet is a NetImpl: it saves to and loads from a package's weights.pt (int8 weights as
// parameters, scales and zero points as buffers) and `load_package` rebuilds it for INT8 packages.

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strato/models/zoo.h"

namespace strato::models {

struct QuantizeOptions {
    std::string observer = "histogram";  // minmax | percentile | histogram
    double percentile = 99.99;           // percentile: clip each activation at this percentile (and 100 - it)
    bool per_channel = true;             // one weight scale per output channel (else one per tensor)
};

/// The observer names QuantizeOptions::observer accepts.
const std::vector<std::string>& observer_names();

namespace qops {
class Op;
}
namespace dnnl_graph {
class Graph;
}

struct FusedOptions {
    /// Run on oneDNN primitives directly (models/dnnl_graph.h: conv + ReLU and conv + add + ReLU
    /// as one primitive each, NHWC activations); false: through libtorch's oneDNN ops
    /// (at::mkldnn_convolution on blocked tensors, one dispatch per op).
    bool primitives = true;
    /// [C, H, W]: build the batch-1 plan while lowering, so a graph oneDNN cannot run is found
    /// (and the libtorch ops used instead) before the first request.
    std::vector<int64_t> input;
    /// The graph in bfloat16 (dnnl_graph::Graph::use_bf16; needs `primitives`). On a CPU without
    /// oneDNN bf16 kernels lower() fails (found on the batch-1 plan of `input`): no FP32 fallback.
    bool bf16 = false;
};

class FusedNet final : public NetImpl {
public:
    /// Lowers `net` (a zoo network built from `cfg`, eval-mode statistics) for FP32 inference. A
    /// layer it cannot lower is an error naming the layer's path and type. The result holds its
    /// own copies of the (folded) weights: later changes to `net` do not reach it.
    static Result<std::shared_ptr<FusedNet>> lower(const ModelConfig& cfg, NetImpl& net, const FusedOptions& opts = {});
    /// Float in ([B, C, H, W], normalised, any memory format), float logits out (dense).
    torch::Tensor forward(torch::Tensor x) override;
    /// Per layer: kind, path, fused ReLU, weight shape.
    nlohmann::json describe() const;
    /// "onednn-primitives", "onednn-primitives-bf16" or "aten-onednn" (see FusedOptions).
    std::string engine() const;
    /// The oneDNN implementation of every primitive for input dims [N, C, H, W] (empty on the
    /// libtorch path), e.g. "conv: brgconv:avx512_core".
    std::vector<std::string> implementations(const std::vector<int64_t>& dims) const;

private:
    FusedNet() = default;
    std::vector<std::shared_ptr<qops::Op>> ops_;
    std::shared_ptr<dnnl_graph::Graph> graph_;
    bool bf16_ = false;
};

class QuantizedNet final : public NetImpl {
public:
    /// Lowers `net` (a zoo network built from `cfg`) to an INT8-ready graph that still runs in
    /// float: BatchNorm folded, ReLU fused. A layer it cannot lower is an error naming the layer's
    /// path and type. Selects libtorch's oneDNN quantized engine (or the best one available).
    static Result<std::shared_ptr<QuantizedNet>> lower(const ModelConfig& cfg, NetImpl& net);

    /// `feed` runs one calibration batch (normalised float images [B, C, H, W]) through the net.
    using Feed = std::function<void(const torch::Tensor&)>;
    /// Calls `for_each_batch(feed)` once per observer pass (twice for percentile and histogram:
    /// ranges first, then histograms over them), then quantizes the weights, fixes every
    /// activation's scale and zero point, and packs the weights for the engine.
    Status calibrate(const std::function<Status(const Feed&)>& for_each_batch, const QuantizeOptions& opts);

    /// Packs the int8 weights for the engine after they were loaded from an archive, and builds
    /// the oneDNN INT8 graph forward() runs (`primitives` false: libtorch's quantized ops only).
    Status prepack(bool primitives = true);

    /// Float in ([B, C, H, W], normalised), float logits out; INT8 inside once calibrated.
    torch::Tensor forward(torch::Tensor x) override;

    bool ready() const { return ready_; }
    /// "onednn-primitives" (the INT8 graph on oneDNN primitives: conv + ReLU and conv + add + ReLU
    /// as one primitive each, symmetric activations) or "libtorch-quantized" (quantized::conv2d
    /// and friends, one dispatch per op).
    std::string runtime() const;
    /// The quantized engine in use ("onednn", "fbgemm", "x86" or "qnnpack").
    static std::string engine();
    /// Per layer: kind, path, fused ReLU, activation scale/zero point, weight scale range.
    nlohmann::json describe() const;
    /// Bytes of the int8 weights plus FP32 biases and scales (what the model needs in memory).
    int64_t weight_bytes() const;

private:
    QuantizedNet() = default;
    std::vector<std::shared_ptr<qops::Op>> ops_;
    std::shared_ptr<dnnl_graph::Graph> graph_;
    bool ready_ = false;
};

}  // namespace strato::models
