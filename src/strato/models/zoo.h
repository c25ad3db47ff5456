#pragma once
// The model zoo: networks built on torch::nn, created by name from the [model] config section.
//
//   ModelConfig cfg;  cfg.arch = "resnet"; cfg.depth = 20;
//   Net net = create_model(cfg, {1, 28, 28}, 10).value();
//   torch::Tensor logits = net->forward(x);  // x: [B, C, H, W] -> [B, classes]

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "strato/models/model_config.h"
#include "strato/data/dataset.h"

namespace strato::models {

/// Every network maps [B, C, H, W] float images to [B, classes] logits.
class NetImpl : public torch::nn::Module {
public:
    virtual torch::Tensor forward(torch::Tensor x) = 0;
};
using Net = std::shared_ptr<NetImpl>;

/// Builds an untrained network for images of `shape` and `classes` outputs. Unknown names and
/// invalid sizes are errors naming the key.
Result<Net> create_model(const ModelConfig& cfg, const data::ImageShape& shape, int64_t classes);

/// The parameters create_model would make for the same arguments, counted without allocating
/// any (a double: a corrupt manifest may ask for more than int64 holds). create_model refuses a
/// network whose fp32 weights alone exceed the machine's memory.
Result<double> count_parameters(const ModelConfig& cfg, const data::ImageShape& shape, int64_t classes);

/// Names the registry knows, for help texts.
std::vector<std::string> model_names();

int64_t parameter_count(const torch::nn::Module& m);

/// The first line of a libtorch error, without the C++ backtrace.
std::string torch_error_message(const c10::Error& e);

/// What one sample's forward pass costs, counted by libtorch's own profiler.
struct ForwardCost {
    double flops = 0;                // convolutions and matrix products, 2 per multiply-add
    double activation_elements = 0;  // FP32 elements the forward pass allocates (kept for backward)
};
/// Runs one training-mode forward pass of a batch of two zero images of `shape` under the
/// profiler (FLOPs as the profiler computes them, memory allocations), counted per image — the
/// input of `strato plan --run`. (Two: batch norm in training needs more than one value per
/// channel, which one image of a network with a 1x1 last feature map does not give.) Leaves `net`
/// in eval mode.
ForwardCost count_forward(NetImpl& net, const data::ImageShape& shape);

/// True for architectures built from 2-D convolutions (cnn, resnet).
bool is_convolutional(const ModelConfig& cfg);
/// Stores every 4-D parameter and buffer in channels-last (NHWC) layout, as Python's
/// `module.to(memory_format=torch.channels_last)`. oneDNN's CPU convolutions run 1.3-1.45x
/// faster on it here (measured in training, fp32 and bf16); values are unchanged.
void to_channels_last(torch::nn::Module& m);
/// A fresh channels-last (NHWC) copy of a [B, C, H, W] tensor. Not x.contiguous(ChannelsLast):
/// with one channel that returns x with its NCHW strides, which oneDNN then treats as NCHW and
/// runs the first convolution on its slow path.
torch::Tensor channels_last_copy(const torch::Tensor& x);

}  // namespace strato::models
