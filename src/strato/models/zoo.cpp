#include "strato/models/zoo.h"

#ifndef STRATO_MINIMAL  // strato plan's FLOP count; the minimal subset leaves it out
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <map>

namespace strato::models {
namespace nn = torch::nn;

int64_t parameter_count(const torch::nn::Module& m) {
    int64_t n = 0;
    for (const auto& p : m.parameters()) n += p.numel();
    return n;
}

std::string torch_error_message(const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    return msg;
}

#ifndef STRATO_MINIMAL
ForwardCost count_forward(NetImpl& net, const data::ImageShape& shape) {
    namespace prof = torch::autograd::profiler;
    using torch::profiler::impl::ProfilerConfig;
    using torch::profiler::impl::ProfilerState;
    net.train();
    // Two images, counted as one: a training-mode batch norm needs more than one value per channel,
    // and a network whose last feature map is 1x1 (a resnet on a CSV's features, on 4x4 images)
    // failed on one image with libtorch's "Expected more than 1 value per channel when training".
    constexpr int64_t kBatch = 2;
    torch::Tensor x = torch::zeros({kBatch, shape.channels, shape.height, shape.width});
    ProfilerConfig cfg(ProfilerState::CPU, /*report_input_shapes=*/true, /*profile_memory=*/true,
                       /*with_stack=*/false, /*with_flops=*/true);
    prof::enableProfilerLegacy(cfg);
    torch::Tensor y = net.forward(x);
    prof::thread_event_lists lists = prof::disableProfilerLegacy();
    net.eval();
    ForwardCost cost;
    double bytes = 0;
    for (auto& list : lists) {
        for (auto& ev : list) {
            cost.flops += static_cast<double>(ev.flops());
            if (ev.kind() == prof::EventKind::MemoryAlloc && ev.cpuMemoryUsage() > 0)
                bytes += static_cast<double>(ev.cpuMemoryUsage());
        }
    }
    cost.flops /= kBatch;
    cost.activation_elements = bytes / 4 / kBatch;
    return cost;
}
#endif

bool is_convolutional(const ModelConfig& cfg) { return cfg.arch == "cnn" || cfg.arch == "resnet"; }

void to_channels_last(torch::nn::Module& m) {
    torch::NoGradGuard no_grad;
    for (auto& p : m.parameters()) {
        if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
    }
    for (auto& b : m.buffers()) {
        if (b.dim() == 4) b.set_data(b.data().contiguous(at::MemoryFormat::ChannelsLast));
    }
}

torch::Tensor channels_last_copy(const torch::Tensor& x) {
    return torch::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::ChannelsLast)).copy_(x);
}

namespace {

// Parameter counts of the layers below, in double: a corrupt manifest or a typo in a config may
// ask for more than int64 holds, and the count is what refuses it before anything is allocated.
double conv_parameters(double in, double out, double k, bool bias) { return in * out * k * k + (bias ? out : 0); }
double linear_parameters(double in, double out) { return in * out + out; }
double bn_parameters(double c) { return 2 * c; }  // weight and bias; running statistics are buffers

/// A network's parameter count, known before it is built, and how to build it.
struct Plan {
    double parameters = 0;
    std::function<Net()> build;
};

/// Multi-layer perceptron: flatten -> [Linear -> ReLU -> Dropout] x depth -> Linear.
/// `hidden`: the width of each hidden layer (784-256-128-10 by default).
class MlpImpl final : public NetImpl {
public:
    MlpImpl(int64_t in, const std::vector<int64_t>& hidden, double dropout, int64_t classes) {
        int64_t d = in;
        for (int64_t h : hidden) {
            body_->push_back(nn::Linear(d, h));
            body_->push_back(nn::Functional(torch::relu));
            if (dropout > 0) body_->push_back(nn::Dropout(dropout));
            d = h;
        }
        body_->push_back(nn::Linear(d, classes));
        register_module("body", body_);
    }
    torch::Tensor forward(torch::Tensor x) override { return body_->forward(x.flatten(1)); }

private:
    nn::Sequential body_;
};

/// Small CNN: [conv3x3 -> BN -> ReLU -> conv3x3 -> BN -> ReLU -> maxpool2] x depth, then
/// Linear(hidden) -> ReLU -> Dropout -> Linear(classes). `convs`: the output channels of each
/// convolution, two per block (by default doubling per block).
class CnnImpl final : public NetImpl {
public:
    CnnImpl(const data::ImageShape& s, const std::vector<int64_t>& convs, int64_t hidden, double dropout, bool bn,
            int64_t classes) {
        int64_t c = s.channels, h = s.height, w = s.width;
        for (size_t i = 0; i < convs.size(); ++i) {
            const int64_t out = convs[i];
            features_->push_back(nn::Conv2d(nn::Conv2dOptions(c, out, 3).padding(1).bias(!bn)));
            if (bn) features_->push_back(nn::BatchNorm2d(out));
            features_->push_back(nn::Functional(torch::relu));
            c = out;
            if (i % 2 == 1) {
                features_->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2)));
                h /= 2;
                w /= 2;
            }
        }
        classifier_->push_back(nn::Flatten());
        if (dropout > 0) classifier_->push_back(nn::Dropout(dropout));
        classifier_->push_back(nn::Linear(c * h * w, hidden));
        classifier_->push_back(nn::Functional(torch::relu));
        if (dropout > 0) classifier_->push_back(nn::Dropout(dropout));
        classifier_->push_back(nn::Linear(hidden, classes));
        register_module("features", features_);
        register_module("classifier", classifier_);
    }
    torch::Tensor forward(torch::Tensor x) override { return classifier_->forward(features_->forward(x)); }

private:
    nn::Sequential features_, classifier_;
};

// --- ResNet (He et al. 2016, "Deep Residual Learning for Image Recognition") ---

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
    return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

/// Two 3x3 convolutions with an identity (or 1x1 projection) shortcut. `inner`: conv1's outputs
/// (`planes` unless pruned); the block's output, `planes`, is what the shortcut adds to.
class BasicBlockImpl : public nn::Module {
public:
    static constexpr int64_t kExpansion = 1;
    BasicBlockImpl(int64_t in, int64_t inner, int64_t planes, int64_t stride)
        : conv1_(conv(in, inner, 3, stride)), bn1_(inner), conv2_(conv(inner, planes, 3, 1)), bn2_(planes) {
        register_module("conv1", conv1_);
        register_module("bn1", bn1_);
        register_module("conv2", conv2_);
        register_module("bn2", bn2_);
        if (stride != 1 || in != planes) {
            shortcut_->push_back(conv(in, planes, 1, stride));
            shortcut_->push_back(nn::BatchNorm2d(planes));
        }
        register_module("shortcut", shortcut_);
    }
    torch::Tensor forward(torch::Tensor x) {
        auto y = torch::relu(bn1_(conv1_(x)));
        y = bn2_(conv2_(y));
        return torch::relu(y + (shortcut_->is_empty() ? x : shortcut_->forward(x)));
    }

private:
    nn::Conv2d conv1_;
    nn::BatchNorm2d bn1_;
    nn::Conv2d conv2_;
    nn::BatchNorm2d bn2_;
    nn::Sequential shortcut_;
};
TORCH_MODULE(BasicBlock);

/// 1x1 reduce, 3x3, 1x1 expand (x4), as in ResNet-50. `inner1`, `inner2`: conv1's and conv2's
/// outputs (`planes` unless pruned); the block's output is `planes * 4`.
class BottleneckImpl : public nn::Module {
public:
    static constexpr int64_t kExpansion = 4;
    BottleneckImpl(int64_t in, int64_t inner1, int64_t inner2, int64_t planes, int64_t stride)
        : conv1_(conv(in, inner1, 1, 1)), bn1_(inner1), conv2_(conv(inner1, inner2, 3, stride)), bn2_(inner2),
          conv3_(conv(inner2, planes * kExpansion, 1, 1)), bn3_(planes * kExpansion) {
        register_module("conv1", conv1_);
        register_module("bn1", bn1_);
        register_module("conv2", conv2_);
        register_module("bn2", bn2_);
        register_module("conv3", conv3_);
        register_module("bn3", bn3_);
        if (stride != 1 || in != planes * kExpansion) {
            shortcut_->push_back(conv(in, planes * kExpansion, 1, stride));
            shortcut_->push_back(nn::BatchNorm2d(planes * kExpansion));
        }
        register_module("shortcut", shortcut_);
    }
    torch::Tensor forward(torch::Tensor x) {
        auto y = torch::relu(bn1_(conv1_(x)));
        y = torch::relu(bn2_(conv2_(y)));
        y = bn3_(conv3_(y));
        return torch::relu(y + (shortcut_->is_empty() ? x : shortcut_->forward(x)));
    }

private:
    nn::Conv2d conv1_;
    nn::BatchNorm2d bn1_;
    nn::Conv2d conv2_;
    nn::BatchNorm2d bn2_;
    nn::Conv2d conv3_;
    nn::BatchNorm2d bn3_;
    nn::Sequential shortcut_;
};
TORCH_MODULE(Bottleneck);

class ResNetImpl final : public NetImpl {
public:
    /// `blocks` per stage; `widths` per stage; `inner`: the inner widths of the blocks in order
    /// (one per basic block, two per bottleneck; empty: the stage widths); `small_stem`: 3x3
    /// stride-1 stem without max-pool (CIFAR-style, for inputs up to 64 px), else the 7x7
    /// stride-2 stem + max-pool of ImageNet.
    ResNetImpl(const data::ImageShape& s, std::vector<int64_t> blocks, std::vector<int64_t> widths,
               const std::vector<int64_t>& inner, bool bottleneck, bool small_stem, double dropout, int64_t classes) {
        int64_t in = widths[0];
        if (small_stem) {
            stem_->push_back(conv(s.channels, in, 3, 1));
        } else {
            stem_->push_back(conv(s.channels, in, 7, 2));
        }
        stem_->push_back(nn::BatchNorm2d(in));
        stem_->push_back(nn::Functional(torch::relu));
        if (!small_stem) stem_->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
        size_t next = 0;  // into `inner`
        auto inner_width = [&](int64_t planes) { return inner.empty() ? planes : inner.at(next++); };
        for (size_t st = 0; st < blocks.size(); ++st) {
            for (int64_t b = 0; b < blocks[st]; ++b) {
                int64_t stride = (st > 0 && b == 0) ? 2 : 1;
                if (bottleneck) {
                    const int64_t i1 = inner_width(widths[st]), i2 = inner_width(widths[st]);
                    stages_->push_back(Bottleneck(in, i1, i2, widths[st], stride));
                    in = widths[st] * BottleneckImpl::kExpansion;
                } else {
                    stages_->push_back(BasicBlock(in, inner_width(widths[st]), widths[st], stride));
                    in = widths[st];
                }
            }
        }
        if (dropout > 0) head_->push_back(nn::Dropout(dropout));
        head_->push_back(nn::Linear(in, classes));
        register_module("stem", stem_);
        register_module("stages", stages_);
        register_module("head", head_);
        for (auto& m : modules(/*include_self=*/false)) {
            if (auto* c = m->as<nn::Conv2d>()) torch::nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
        }
    }
    /// The parameters the constructor above creates, counted without creating them.
    static double parameters(const data::ImageShape& s, const std::vector<int64_t>& blocks,
                             const std::vector<int64_t>& widths, const std::vector<int64_t>& inner, bool bottleneck,
                             bool small_stem, int64_t classes) {
        auto conv = [](double i, double o, double k) { return conv_parameters(i, o, k, false); };
        double in = static_cast<double>(widths[0]);
        double n = conv(static_cast<double>(s.channels), in, small_stem ? 3 : 7) + bn_parameters(in);
        size_t next = 0;
        auto inner_width = [&](int64_t planes) { return static_cast<double>(inner.empty() ? planes : inner.at(next++)); };
        for (size_t st = 0; st < blocks.size(); ++st) {
            const double planes = static_cast<double>(widths[st]);
            for (int64_t b = 0; b < blocks[st]; ++b) {
                const bool stride = st > 0 && b == 0;
                const double out = bottleneck ? planes * BottleneckImpl::kExpansion : planes;
                if (bottleneck) {
                    const double i1 = inner_width(widths[st]), i2 = inner_width(widths[st]);
                    n += conv(in, i1, 1) + bn_parameters(i1) + conv(i1, i2, 3) + bn_parameters(i2) + conv(i2, out, 1) +
                         bn_parameters(out);
                } else {
                    const double i1 = inner_width(widths[st]);
                    n += conv(in, i1, 3) + bn_parameters(i1) + conv(i1, out, 3) + bn_parameters(out);
                }
                if (stride || in != out) n += conv(in, out, 1) + bn_parameters(out);
                in = out;
            }
        }
        return n + linear_parameters(in, static_cast<double>(classes));
    }

    torch::Tensor forward(torch::Tensor x) override {
        auto y = stages_->forward(stem_->forward(x));
        y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);  // [B, C]
        return head_->forward(y);
    }

private:
    nn::Sequential stem_, stages_, head_;
};

/// model.channels, when set, must give exactly `expected` widths; `what` says what each one is.
Status check_channels(const ModelConfig& c, size_t expected, const std::string& what) {
    if (c.channels.empty() || c.channels.size() == expected) return Status::ok();
    return invalid_argument("model.channels: this {} has {} prunable layers, so expected {} entries ({}), got {}",
                            c.arch, expected, expected, what, c.channels.size());
}

Result<Plan> make_mlp(const ModelConfig& c, const data::ImageShape& s, int64_t classes) {
    int64_t depth = c.depth ? c.depth : 2;
    if (depth > 16) return invalid_argument("model.depth: the mlp supports 1..16 hidden layers, got {}", depth);
    STRATO_RETURN_IF_ERROR(check_channels(c, static_cast<size_t>(depth), "the width of each hidden layer"));
    std::vector<int64_t> hidden = c.channels;
    const int64_t width = c.width ? c.width : 256;
    for (int64_t i = 0; hidden.size() < static_cast<size_t>(depth); ++i) hidden.push_back(std::max<int64_t>(8, width >> i));
    Plan plan;
    double d = static_cast<double>(s.numel());
    for (int64_t h : hidden) plan.parameters += linear_parameters(d, static_cast<double>(h)), d = static_cast<double>(h);
    plan.parameters += linear_parameters(d, static_cast<double>(classes));
    plan.build = [=] { return Net(std::make_shared<MlpImpl>(s.numel(), hidden, c.dropout, classes)); };
    return plan;
}

Result<Plan> make_cnn(const ModelConfig& c, const data::ImageShape& s, int64_t classes) {
    int64_t depth = c.depth ? c.depth : 2;
    int64_t min_side = std::min(s.height, s.width);
    // Every block halves the image (a 2x2 max-pool). NOTE: depth goes up to 1000, and a shift by
    // 64 or more is undefined: x86 takes it modulo 64, so depth 65 passed for a 28x28 image.
    if (min_side < 2)
        return invalid_argument("model.cnn: a {}x{} input is too small for the cnn (each block max-pools by 2, so it "
                                "needs at least 2x2); use arch \"mlp\" for it",
                                s.height, s.width);
    if (depth >= 63 || (min_side >> depth) < 1) {
        return invalid_argument("model.depth: {} pooling blocks shrink a {}x{} image to nothing; use at most {}", depth,
                                s.height, s.width, static_cast<int>(std::log2(static_cast<double>(min_side))));
    }
    STRATO_RETURN_IF_ERROR(check_channels(c, static_cast<size_t>(2 * depth),
                                          "the output channels of every convolution, 2 per block"));
    std::vector<int64_t> convs = c.channels;
    const int64_t width = c.width ? c.width : 32;
    if (convs.empty()) {
        for (int64_t b = 0; b < depth; ++b) convs.insert(convs.end(), 2, width << b);  // doubling per block
    }
    Plan plan;
    double ch = static_cast<double>(s.channels), h = static_cast<double>(s.height), w = static_cast<double>(s.width);
    for (size_t i = 0; i < convs.size(); ++i) {  // as CnnImpl builds it
        const double out = static_cast<double>(convs[i]);
        plan.parameters += conv_parameters(ch, out, 3, !c.batch_norm) + (c.batch_norm ? bn_parameters(out) : 0);
        ch = out;
        if (i % 2 == 1) h = std::floor(h / 2), w = std::floor(w / 2);
    }
    const double hidden = static_cast<double>(c.hidden);
    plan.parameters += linear_parameters(ch * h * w, hidden) + linear_parameters(hidden, static_cast<double>(classes));
    plan.build = [=] { return Net(std::make_shared<CnnImpl>(s, convs, c.hidden, c.dropout, c.batch_norm, classes)); };
    return plan;
}

Result<Plan> make_resnet(const ModelConfig& c, const data::ImageShape& s, int64_t classes) {
    const int64_t depth = c.depth ? c.depth : 20;
    bool small_stem = std::max(s.height, s.width) <= 64;
    static const std::map<int64_t, std::pair<std::vector<int64_t>, bool>> kImagenet = {
        {18, {{2, 2, 2, 2}, false}}, {34, {{3, 4, 6, 3}, false}}, {50, {{3, 4, 6, 3}, true}}};
    std::vector<int64_t> blocks, widths;
    bool bottleneck = false;
    if (auto it = kImagenet.find(depth); it != kImagenet.end()) {
        int64_t w = c.width ? c.width : 64;
        blocks = it->second.first;
        widths = {w, 2 * w, 4 * w, 8 * w};
        bottleneck = it->second.second;
    } else if (depth >= 8 && (depth - 2) % 6 == 0) {  // CIFAR family: 6n+2 layers, 3 stages of n blocks
        int64_t n = (depth - 2) / 6, w = c.width ? c.width : 16;
        blocks = {n, n, n};
        widths = {w, 2 * w, 4 * w};
        small_stem = true;
    } else {
        return invalid_argument(
            "model.depth: resnet depth {} is not supported (expected 18, 34, 50, or 6n+2 such as 20, 32, 56, 110)", depth);
    }
    int64_t n_blocks = 0;
    for (int64_t b : blocks) n_blocks += b;
    STRATO_RETURN_IF_ERROR(check_channels(
        c, static_cast<size_t>(bottleneck ? 2 * n_blocks : n_blocks),
        bottleneck ? "the outputs of conv1 and of conv2 of every bottleneck block, 2 per block"
                   : "the inner width of every residual block: conv1's outputs, conv2's inputs"));
    Plan plan;
    plan.parameters = ResNetImpl::parameters(s, blocks, widths, c.channels, bottleneck, small_stem, classes);
    plan.build = [=] {
        return Net(std::make_shared<ResNetImpl>(s, blocks, widths, c.channels, bottleneck, small_stem, c.dropout, classes));
    };
    return plan;
}

using Factory = Result<Plan> (*)(const ModelConfig&, const data::ImageShape&, int64_t);
const std::map<std::string, Factory>& registry() {
    static const std::map<std::string, Factory> kRegistry = {
        {"mlp", make_mlp}, {"cnn", make_cnn}, {"resnet", make_resnet}};
    return kRegistry;
}

}  // namespace

std::vector<std::string> model_names() {
    std::vector<std::string> names;
    for (const auto& [k, _] : registry()) names.push_back(k);
    return names;
}

namespace {

Result<Plan> plan_model(const ModelConfig& cfg, const data::ImageShape& shape, int64_t classes) {
    auto it = registry().find(cfg.arch);
    if (it == registry().end())
        return invalid_argument("model.arch: unknown model '{}' (expected one of: {})", cfg.arch,
                                fmt::join(model_names(), ", "));
    if (classes < 1) return invalid_argument("model.{}: expected at least 1 class, got {}", cfg.arch, classes);
    // The config's ranges (ModelConfig::visit), for a config built in code: a negative width made
    // libtorch's "Trying to create tensor with negative dimension", a hidden of 0 a network that
    // answers every image alike, a dropout of 1.5 Dropout's own message.
    if (cfg.width < 0) return invalid_argument("model.width: expected 0 (the default) or more, got {}", cfg.width);
    if (cfg.depth < 0) return invalid_argument("model.depth: expected 0 (the default) or more, got {}", cfg.depth);
    if (cfg.hidden < 1) return invalid_argument("model.hidden: expected at least 1, got {}", cfg.hidden);
    if (!(cfg.dropout >= 0 && cfg.dropout < 1))
        return invalid_argument("model.dropout: expected a probability in [0, 1), got {}", cfg.dropout);
    for (size_t i = 0; i < cfg.channels.size(); ++i)
        if (cfg.channels[i] < 1)
            return invalid_argument("model.channels[{}]: expected at least 1, got {}", i, cfg.channels[i]);
    if (shape.channels < 1 || shape.height < 1 || shape.width < 1)
        return invalid_argument("model.{}: input {}x{}x{} has an empty side", cfg.arch, shape.channels, shape.height,
                                shape.width);
    return it->second(cfg, shape, classes);
}

double physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

}  // namespace

Result<double> count_parameters(const ModelConfig& cfg, const data::ImageShape& shape, int64_t classes) {
    STRATO_ASSIGN_OR_RETURN(Plan plan, plan_model(cfg, shape, classes));
    return plan.parameters;
}

Result<Net> create_model(const ModelConfig& cfg, const data::ImageShape& shape, int64_t classes) {
    STRATO_ASSIGN_OR_RETURN(Plan plan, plan_model(cfg, shape, classes));
    // Refused before any allocation: libtorch would start filling tens of GB with random weights.
    const double bytes = plan.parameters * 4, memory = physical_memory_bytes();
    if (memory > 0 && bytes > memory)
        return invalid_argument(
            "model.{}: {:.3g} parameters for input {}x{}x{} and {} classes need {:.1f} GiB for the weights alone, more "
            "than this machine's {:.1f} GiB of memory",
            cfg.arch, plan.parameters, shape.channels, shape.height, shape.width, classes, bytes / (1u << 30),
            memory / (1u << 30));
    try {
        return plan.build();
    } catch (const c10::Error& e) {
        return invalid_argument("model.{}: cannot build for input {}x{}x{}: {}", cfg.arch, shape.channels, shape.height,
                                shape.width, torch_error_message(e));
    }
}

}  // namespace strato::models
