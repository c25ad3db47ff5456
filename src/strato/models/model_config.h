#pragma once
// The [model] section of a training config (no libtorch here, so configs parse in light tools).

#include <cstdint>
#include <string>
#include <vector>

#include "strato/core/config.h"

namespace strato::models {

struct ModelConfig {
    std::string arch = "cnn";  // mlp | cnn | resnet
    int64_t width = 0;         // 0 = the architecture's default (mlp 256, cnn 32, resnet 16 / 64)
    int64_t depth = 0;         // mlp: hidden layers (2); cnn: conv blocks (2); resnet: 20/32/56/110 or 18/34/50
    int64_t hidden = 128;      // cnn: units of the fully connected layer
    double dropout = 0.0;
    bool batch_norm = true;
    // Explicit widths of the layers structured pruning may narrow, in order (empty: from width):
    //   cnn: the output channels of every conv (2 per block); resnet: the inner width of every
    //   residual block (conv1's outputs; conv1 and conv2's for bottlenecks); mlp: every hidden layer.
    // Written by `strato compress prune --method channels`; rarely set by hand.
    std::vector<int64_t> channels;

    void visit(config::Visitor& v) {
        using config::Range;
        v.field("arch", arch, {"cnn", "mlp", "resnet"});
        v.field("width", width, Range::between(0, 4096));
        v.field("depth", depth, Range::between(0, 1000));
        v.field("hidden", hidden, Range::between(1, 1 << 16));
        v.field("dropout", dropout, Range::half_open(0, 1));
        v.field("batch_norm", batch_norm);
        v.field("channels", channels, Range::between(1, 1 << 16));
    }
};

}  // namespace strato::models
