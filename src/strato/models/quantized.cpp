#include "strato/models/quantized.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/quantized/PackedParams.h>

#include "strato/core/log.h"
#include "strato/models/dnnl_graph.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>

namespace strato::models {
namespace nn = torch::nn;

const std::vector<std::string>& observer_names() {
    static const std::vector<std::string> kNames = {"minmax", "percentile", "histogram"};
    return kNames;
}

namespace qops {
namespace {

constexpr int64_t kBins = 2048;

/// Records the range of one activation tensor over the calibration batches (pass 1), then a
/// histogram over that range (pass 2), and turns them into u8 quantization parameters.
class Observer {
public:
    void observe(const torch::Tensor& t, int pass) {
        auto f = t.detach().to(torch::kFloat);
        if (pass == 0) {
            lo_ = std::min(lo_, f.min().item<double>());
            hi_ = std::max(hi_, f.max().item<double>());
            return;
        }
        if (!(hi_ > lo_)) return;
        auto h = torch::histc(f.flatten(), kBins, lo_, hi_).to(torch::kDouble);
        if (hist_.numel() == 0) hist_ = torch::zeros({kBins}, torch::kDouble);
        hist_ += h;
    }

    /// The clipping range [a, b] (always containing 0) the options ask for.
    std::pair<double, double> range(const QuantizeOptions& o) const {
        if (!(hi_ >= lo_)) return {0.0, 1.0};  // never observed: a harmless default
        double a = lo_, b = hi_;
        if (o.observer != "minmax" && hist_.numel() == kBins && hi_ > lo_) {
            auto [pa, pb] = o.observer == "percentile" ? percentile_range(o.percentile) : mse_range();
            a = pa, b = pb;
        }
        return {std::min(a, 0.0), std::max(b, 0.0)};
    }

private:
    std::vector<double> counts() const {
        auto c = hist_.contiguous();
        return {c.data_ptr<double>(), c.data_ptr<double>() + kBins};
    }
    double edge(int64_t i) const { return lo_ + (hi_ - lo_) * static_cast<double>(i) / kBins; }

    /// Value below which `fraction` of the observed mass lies (interpolated within a bin).
    static double quantile(const std::vector<double>& c, double total, double fraction, double lo, double width) {
        double target = fraction * total, acc = 0;
        for (int64_t i = 0; i < kBins; ++i) {
            if (acc + c[i] >= target && c[i] > 0) return lo + width * (static_cast<double>(i) + (target - acc) / c[i]);
            acc += c[i];
        }
        return lo + width * kBins;
    }

    std::pair<double, double> percentile_range(double p) const {
        auto c = counts();
        double total = 0;
        for (double v : c) total += v;
        if (total <= 0) return {lo_, hi_};
        const double width = (hi_ - lo_) / kBins, tail = 1.0 - p / 100.0;
        return {lo_ >= 0 ? lo_ : quantile(c, total, tail, lo_, width), quantile(c, total, 1.0 - tail, lo_, width)};
    }

    /// The range whose 8-bit quantization has the smallest expected squared error over the
    /// histogram: clipping error outside it plus the uniform rounding error (step^2 / 12) inside.
    /// Candidates trim the same mass from each signed tail (only the upper one after a ReLU).
    std::pair<double, double> mse_range() const {
        auto c = counts();
        double total = 0;
        for (double v : c) total += v;
        if (total <= 0) return {lo_, hi_};
        const double width = (hi_ - lo_) / kBins;
        auto error = [&](double a, double b) {
            a = std::min(a, 0.0), b = std::max(b, 0.0);
            const double step = (b - a) / 255.0, round_err = step * step / 12.0;
            double e = 0;
            for (int64_t i = 0; i < kBins; ++i) {
                if (c[i] == 0) continue;
                const double x = edge(i) + width / 2;
                const double d = x < a ? a - x : (x > b ? x - b : 0.0);
                e += c[i] * (d > 0 ? d * d : round_err);
            }
            return e;
        };
        std::pair<double, double> best{lo_, hi_};
        double best_err = error(lo_, hi_);
        for (int k = 0; k <= 200; ++k) {
            const double tail = std::pow(10.0, -7.0 + 5.0 * k / 200.0);  // 1e-7 .. 1e-2 of the mass per tail
            const double a = lo_ >= 0 ? lo_ : quantile(c, total, tail, lo_, width);
            const double b = quantile(c, total, 1.0 - tail, lo_, width);
            if (!(b > a)) continue;
            const double e = error(a, b);
            if (e < best_err) best_err = e, best = {a, b};
        }
        return best;
    }

    double lo_ = std::numeric_limits<double>::infinity();
    double hi_ = -std::numeric_limits<double>::infinity();
    torch::Tensor hist_;
};

}  // namespace

/// One step of the lowered graph. run_float() is the calibration path (observing), run_int8()
/// the quantized one, run_fused() FusedNet's FP32 inference; the tensors that define it are
/// parameters and buffers, so the module archive of a QuantizedNet is the INT8 package's weights.pt.
class Op : public nn::Module {
public:
    virtual torch::Tensor run_float(const torch::Tensor& x, int pass) = 0;
    virtual torch::Tensor run_int8(const torch::Tensor& q) = 0;
    virtual torch::Tensor run_fused(const torch::Tensor& x) = 0;
    virtual void quantize(const QuantizeOptions&) {}
    virtual void pack() {}
    virtual void pack_fused() {}
    /// Adds this step to FusedNet's oneDNN graph reading value `x`; returns its output value.
    virtual int emit(dnnl_graph::Graph&, int) const {
        throw std::invalid_argument(fmt::format("{}: no oneDNN graph node for {}", path, describe().value("kind", "?")));
    }
    /// The same for QuantizedNet's INT8 graph (`last`: the op whose output is the net's).
    virtual int emit_int8(dnnl_graph::Graph& g, int x, bool /*last*/) const { return emit(g, x); }
    virtual nlohmann::json describe() const = 0;
    std::string path;
};

namespace {

// Marks a packing error that is a package's parameter out of range (data), not the engine's.
constexpr const char* kBadQParam = "[bad quantization parameter] ";

/// FusedNet keeps activations in oneDNN's blocked layout between convolutions (when libtorch has
/// oneDNN); ops that need a plain tensor convert back.
torch::Tensor to_blocked(const torch::Tensor& x) { return x.is_mkldnn() || !at::hasMKLDNN() ? x : x.to_mkldnn(); }
torch::Tensor to_plain(const torch::Tensor& x) { return x.is_mkldnn() ? x.to_dense() : x; }

/// An op whose output has its own u8 scale and zero point (buffers "scale", "zero_point").
class Requant : public Op {
protected:
    Requant() {
        scale_ = register_buffer("scale", torch::ones({1}));
        zero_point_ = register_buffer("zero_point", torch::zeros({1}, torch::kLong));
    }
    void set_qparams(const QuantizeOptions& o) {
        auto [a, b] = observer_.range(o);
        double s = (b - a) / 255.0;
        if (!(s > 1e-12)) s = 1e-12;
        const int64_t zp = std::clamp<int64_t>(std::llround(-a / s), 0, 255);
        scale_.fill_(s);
        zero_point_.fill_(zp);
    }
    /// Reads the (loaded or calibrated) parameters once, so forward passes do not touch tensors.
    void pack() override {
        cached_scale_ = scale_.item<float>();
        cached_zero_point_ = zero_point_.item<int64_t>();
        // From a package's weights file: a scale of 0, NaN or inf, or a zero point off the uint8
        // range, loaded silently and gave garbage (12 % accuracy).
        TORCH_CHECK(std::isfinite(cached_scale_) && cached_scale_ > 0, kBadQParam, "activation scale ", cached_scale_,
                    " is not a positive finite number");
        TORCH_CHECK(cached_zero_point_ >= 0 && cached_zero_point_ <= 255, kBadQParam, "activation zero point ",
                    cached_zero_point_, " is not in 0..255");
    }
    double scale() const { return cached_scale_; }
    int64_t zero_point() const { return cached_zero_point_; }
    nlohmann::json qparams() const {
        return {{"scale", scale_.item<float>()}, {"zero_point", zero_point_.item<int64_t>()}};
    }
    // The oneDNN INT8 graph has no zero points: the calibrated range [a, b] becomes a signed
    // symmetric scale, or an unsigned one from 0 after a ReLU (where a is 0 and nothing changes).
    float signed_scale() const {
        const double a = -static_cast<double>(cached_zero_point_) * cached_scale_, b = (255.0 - cached_zero_point_) * cached_scale_;
        return static_cast<float>(std::max({-a, b, 1e-12}) / 127.0);
    }
    float unsigned_scale() const {
        return static_cast<float>(std::max((255.0 - cached_zero_point_) * cached_scale_, 1e-12) / 255.0);
    }
    Observer observer_;
    torch::Tensor scale_, zero_point_;
    double cached_scale_ = 1.0;
    int64_t cached_zero_point_ = 0;
};

class Input final : public Requant {
public:
    torch::Tensor run_float(const torch::Tensor& x, int pass) override {
        observer_.observe(x, pass);
        return x;
    }
    torch::Tensor run_int8(const torch::Tensor& x) override {
        return at::quantize_per_tensor(x.to(torch::kFloat), scale(), zero_point(), at::kQUInt8);
    }
    torch::Tensor run_fused(const torch::Tensor& x) override { return x; }
    int emit_int8(dnnl_graph::Graph& g, int x, bool) const override {
        g.quantize_input(signed_scale());
        return x;
    }
    void quantize(const QuantizeOptions& o) override { set_qparams(o); }
    nlohmann::json describe() const override {
        auto j = qparams();
        j["kind"] = "quantize";
        return j;
    }
};

/// Conv2d or Linear with folded BatchNorm and an optional fused ReLU. Its "weight" parameter is
/// the int8 one for QuantizedNet and the folded FP32 one for FusedNet.
class Weighted final : public Requant {
public:
    enum Kind { kConv, kLinear };
    Weighted(Kind kind, torch::Tensor weight, torch::Tensor bias, bool relu, bool int8) : kind_(kind), relu_(relu) {
        float_weight_ = weight.detach().clone().contiguous();
        weight_ = register_parameter("weight", int8 ? torch::zeros(weight.sizes(), torch::kChar) : float_weight_,
                                     /*requires_grad=*/false);
        bias_ = register_parameter("bias", bias.detach().clone().to(torch::kFloat), /*requires_grad=*/false);
        weight_scale_ = register_buffer("weight_scale", torch::ones({weight.size(0)}));
    }
    std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
    int64_t groups = 1;

    torch::Tensor run_float(const torch::Tensor& x, int pass) override {
        torch::Tensor y = kind_ == kConv ? torch::conv2d(x, float_weight_, bias_, stride, padding, dilation, groups)
                                         : torch::linear(x, float_weight_, bias_);
        if (relu_) y = torch::relu(y);
        observer_.observe(y, pass);
        return y;
    }

    void quantize(const QuantizeOptions& o) override {
        set_qparams(o);
        auto w = float_weight_.to(torch::kFloat);
        auto amax = w.abs().flatten(1).amax(1);
        if (!o.per_channel) amax = amax.max().expand_as(amax).clone();
        auto s = (amax / 127.0).clamp_min(1e-12);
        std::vector<int64_t> view(static_cast<size_t>(w.dim()), 1);
        view[0] = -1;
        weight_.copy_((w / s.view(view)).round().clamp(-127, 127).to(torch::kChar));
        weight_scale_.copy_(s);
    }

    void pack() override {
        Requant::pack();
        TORCH_CHECK(weight_scale_.isfinite().all().item<bool>() && weight_scale_.gt(0).all().item<bool>(), kBadQParam,
                    "weight scales must be positive finite numbers");
        auto q = at::_make_per_channel_quantized_tensor(weight_.contiguous(), weight_scale_.to(torch::kDouble),
                                                        torch::zeros({weight_.size(0)}, torch::kLong), 0);
        if (kind_ == kLinear) {
            static auto prepack = c10::Dispatcher::singleton()
                                      .findSchemaOrThrow("quantized::linear_prepack", "")
                                      .typed<c10::intrusive_ptr<LinearPackedParamsBase>(at::Tensor, c10::optional<at::Tensor>)>();
            linear_ = prepack.call(q, bias_);
            return;
        }
        static auto prepack = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::conv2d_prepack", "");
        torch::jit::Stack st{q,
                             c10::optional<at::Tensor>(bias_),
                             c10::List<int64_t>(stride),
                             c10::List<int64_t>(padding),
                             c10::List<int64_t>(dilation),
                             groups};
        prepack.callBoxed(&st);
        conv_ = st[0].toCustomClass<ConvPackedParamsBase<2>>();
    }

    torch::Tensor run_int8(const torch::Tensor& q) override {
        if (kind_ == kLinear) return relu_ ? linear_->apply_relu(q, scale(), zero_point()) : linear_->apply(q, scale(), zero_point());
        return relu_ ? conv_->apply_relu(q, scale(), zero_point()) : conv_->apply(q, scale(), zero_point());
    }

    /// Reorders a convolution's weights once into oneDNN's blocked layout for these strides and
    /// paddings (what TorchScript's frozen graphs do), instead of on every call.
    void pack_fused() override {
        if (kind_ == kConv && at::hasMKLDNN())
            blocked_weight_ = at::mkldnn_reorder_conv2d_weight(float_weight_.to_mkldnn(), padding, stride, dilation, groups);
    }

    torch::Tensor run_fused(const torch::Tensor& x) override {
        torch::Tensor y;
        if (kind_ == kLinear) {
            y = torch::linear(to_plain(x), float_weight_, bias_);
        } else if (blocked_weight_.defined()) {
            y = at::mkldnn_convolution(to_blocked(x), blocked_weight_, bias_, padding, stride, dilation, groups);
        } else {
            y = torch::conv2d(x, float_weight_, bias_, stride, padding, dilation, groups);
        }
        return relu_ ? at::relu_(y) : y;
    }

    int emit(dnnl_graph::Graph& g, int x) const override { return emit(g, x, -1, relu_); }
    int emit_int8(dnnl_graph::Graph& g, int x, bool last) const override {
        return emit(g, x, -1, relu_, last && !relu_ ? 0.0f : relu_ ? unsigned_scale() : signed_scale());
    }
    /// `accumulate`: the value this convolution's output is added to before `relu`. With an
    /// `out_scale` (INT8: > 0, or 0 for FP32 output) the node runs on the int8 weights.
    int emit(dnnl_graph::Graph& g, int x, int accumulate, bool relu, std::optional<float> out_scale = {}) const {
        auto floats = [](const torch::Tensor& t) {
            auto c = t.detach().to(torch::kFloat).contiguous();
            return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
        };
        dnnl_graph::Int8Weights q;
        if (out_scale) {
            auto w = weight_.contiguous();
            q.weight.assign(w.data_ptr<int8_t>(), w.data_ptr<int8_t>() + w.numel());
            q.scales = floats(weight_scale_);
            q.out_scale = *out_scale;
        }
        std::vector<float> w = out_scale ? std::vector<float>{} : floats(float_weight_);
        if (kind_ == kLinear) return g.linear(x, {std::move(w), weight_.size(0), weight_.size(1), floats(bias_), relu, std::move(q)});
        dnnl_graph::ConvSpec c{std::move(w), weight_.sizes().vec(), floats(bias_)};
        c.int8 = std::move(q);
        c.stride = {stride[0], stride[1]};
        c.padding = {padding[0], padding[1]};
        c.dilation = {dilation[0], dilation[1]};
        c.groups = groups;
        c.relu = relu;
        return g.conv(x, std::move(c), accumulate);
    }

    nlohmann::json describe() const override {
        auto j = qparams();
        j["kind"] = kind_ == kConv ? "conv" : "linear";
        j["relu"] = relu_;
        j["weight_shape"] = weight_.sizes().vec();
        j["weight_scale_min"] = weight_scale_.min().item<double>();
        j["weight_scale_max"] = weight_scale_.max().item<double>();
        return j;
    }

private:
    Kind kind_;
    bool relu_;
    torch::Tensor float_weight_;   // folded FP32 weights (for QuantizedNet: calibration only, not saved)
    torch::Tensor blocked_weight_;  // FusedNet: float_weight_ in oneDNN's layout
    torch::Tensor weight_, bias_, weight_scale_;
    c10::intrusive_ptr<LinearPackedParamsBase> linear_;
    c10::intrusive_ptr<ConvPackedParamsBase<2>> conv_;
};

/// Shape-only steps: the output keeps the input's scale and zero point.
class MaxPool final : public Op {
public:
    explicit MaxPool(const nn::MaxPool2dOptions& o) {
        auto two = [](const torch::ExpandingArray<2>& e) { return c10::IntArrayRef(e).vec(); };
        kernel_ = two(o.kernel_size());
        stride_ = two(o.stride());
        padding_ = two(o.padding());
        dilation_ = two(o.dilation());
        ceil_ = o.ceil_mode();
    }
    torch::Tensor run_float(const torch::Tensor& x, int) override { return run_int8(x); }
    torch::Tensor run_fused(const torch::Tensor& x) override { return run_int8(x); }
    // Every list written out with 2 elements: the quantized kernel does not apply the defaults.
    torch::Tensor run_int8(const torch::Tensor& q) override { return at::max_pool2d(q, kernel_, stride_, padding_, dilation_, ceil_); }
    int emit(dnnl_graph::Graph& g, int x) const override {
        if (dilation_ != std::vector<int64_t>{1, 1}) throw std::invalid_argument(path + ": dilated max-pooling has no oneDNN graph node");
        return g.max_pool(x, {{kernel_[0], kernel_[1]}, {stride_[0], stride_[1]}, {padding_[0], padding_[1]}, ceil_});
    }
    nlohmann::json describe() const override { return {{"kind", "max_pool"}, {"kernel", kernel_}, {"stride", stride_}}; }

private:
    std::vector<int64_t> kernel_, stride_, padding_, dilation_;
    bool ceil_ = false;
};

class Flatten final : public Op {
public:
    torch::Tensor run_float(const torch::Tensor& x, int) override { return run_int8(x); }
    // NCHW order, as the float Linear after it was trained on.
    torch::Tensor run_int8(const torch::Tensor& q) override { return q.contiguous().flatten(1); }
    torch::Tensor run_fused(const torch::Tensor& x) override { return to_plain(x).flatten(1); }
    int emit(dnnl_graph::Graph& g, int x) const override { return g.flatten(x); }
    nlohmann::json describe() const override { return {{"kind", "flatten"}}; }
};

class GlobalAvgPool final : public Op {
public:
    torch::Tensor run_float(const torch::Tensor& x, int) override { return run_int8(x); }
    torch::Tensor run_int8(const torch::Tensor& q) override { return at::adaptive_avg_pool2d(q, {1, 1}).flatten(1); }
    torch::Tensor run_fused(const torch::Tensor& x) override { return to_plain(at::adaptive_avg_pool2d(x, {1, 1})).flatten(1); }
    int emit(dnnl_graph::Graph& g, int x) const override { return g.flatten(g.global_avg_pool(x)); }
    nlohmann::json describe() const override { return {{"kind", "global_avg_pool"}}; }
};

class Relu final : public Op {
public:
    torch::Tensor run_float(const torch::Tensor& x, int) override { return torch::relu(x); }
    torch::Tensor run_int8(const torch::Tensor& q) override { return at::relu(q); }
    torch::Tensor run_fused(const torch::Tensor& x) override { return at::relu(x); }
    int emit(dnnl_graph::Graph& g, int x) const override { return g.relu(x); }
    nlohmann::json describe() const override { return {{"kind", "relu"}}; }
};

/// A residual block: main path (2 or 3 convolutions), shortcut (identity or 1x1 conv), and the
/// add + ReLU, which gets its own output scale.
class Residual final : public Requant {
public:
    Residual(std::vector<std::shared_ptr<Weighted>> main, std::shared_ptr<Weighted> shortcut)
        : main_(std::move(main)), shortcut_(std::move(shortcut)) {
        for (size_t i = 0; i < main_.size(); ++i) register_module("conv" + std::to_string(i + 1), main_[i]);
        if (shortcut_) register_module("shortcut", shortcut_);
    }
    torch::Tensor run_float(const torch::Tensor& x, int pass) override {
        torch::Tensor y = x;
        for (auto& c : main_) y = c->run_float(y, pass);
        torch::Tensor out = torch::relu(y + (shortcut_ ? shortcut_->run_float(x, pass) : x));
        observer_.observe(out, pass);
        return out;
    }
    torch::Tensor run_int8(const torch::Tensor& q) override {
        static auto add_relu = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("quantized::add_relu", "")
                                   .typed<at::Tensor(at::Tensor, at::Tensor, double, int64_t)>();
        torch::Tensor y = q;
        for (auto& c : main_) y = c->run_int8(y);
        torch::Tensor s = shortcut_ ? shortcut_->run_int8(q) : q;
        return add_relu.call(y, s, scale(), zero_point());
    }
    torch::Tensor run_fused(const torch::Tensor& x) override {
        const torch::Tensor in = to_blocked(x);  // the add wants both sides in one layout
        torch::Tensor y = in;
        for (auto& c : main_) y = c->run_fused(y);
        return at::relu_(y.add_(shortcut_ ? shortcut_->run_fused(in) : in));
    }
    void quantize(const QuantizeOptions& o) override {
        for (auto& c : main_) c->quantize(o);
        if (shortcut_) shortcut_->quantize(o);
        set_qparams(o);
    }
    void pack() override {
        Requant::pack();
        for (auto& c : main_) c->pack();
        if (shortcut_) shortcut_->pack();
    }
    void pack_fused() override {
        for (auto& c : main_) c->pack_fused();
        if (shortcut_) shortcut_->pack_fused();
    }
    /// The last convolution adds its output into the shortcut's and applies the ReLU (oneDNN
    /// sum + eltwise post-ops), so the add and the ReLU cost no pass of their own.
    int emit(dnnl_graph::Graph& g, int x) const override {
        int y = x;
        for (size_t i = 0; i + 1 < main_.size(); ++i) y = main_[i]->emit(g, y);
        const int sc = shortcut_ ? shortcut_->emit(g, x) : x;
        return main_.back()->emit(g, y, sc, /*relu=*/true);
    }
    int emit_int8(dnnl_graph::Graph& g, int x, bool) const override {
        int y = x;
        for (size_t i = 0; i + 1 < main_.size(); ++i) y = main_[i]->emit_int8(g, y, false);
        const int sc = shortcut_ ? shortcut_->emit_int8(g, x, false) : x;
        return main_.back()->emit(g, y, sc, /*relu=*/true, unsigned_scale());
    }
    nlohmann::json describe() const override {
        auto j = qparams();
        j["kind"] = "residual_add_relu";
        j["main"] = nlohmann::json::array();
        for (const auto& c : main_) j["main"].push_back(c->describe());
        if (shortcut_) j["shortcut"] = shortcut_->describe();
        return j;
    }

private:
    std::vector<std::shared_ptr<Weighted>> main_;
    std::shared_ptr<Weighted> shortcut_;
};

// ---- lowering ----

/// True for a Functional that computes ReLU (the zoo writes its ReLUs as Functional(torch::relu)).
bool is_relu(nn::Module& m) {
    if (m.as<nn::ReLU>()) return true;
    auto* f = m.as<nn::Functional>();
    if (!f) return false;
    torch::NoGradGuard no_grad;
    auto probe = torch::tensor({-1.5f, 0.0f, 2.5f});
    auto out = f->forward(probe);
    return out.sizes() == probe.sizes() && out.equal(torch::relu(probe));
}

/// `w`, `b` of a convolution with the BatchNorm after it folded in (eval-mode statistics).
std::pair<torch::Tensor, torch::Tensor> fold(const torch::Tensor& w, const torch::Tensor& b, nn::BatchNorm2dImpl* bn) {
    torch::NoGradGuard no_grad;
    auto weight = w.detach().to(torch::kFloat).contiguous();
    auto bias = b.defined() ? b.detach().to(torch::kFloat) : torch::zeros({weight.size(0)});
    if (!bn) return {weight, bias};
    auto inv = bn->weight.detach() / torch::sqrt(bn->running_var.detach() + bn->options.eps());
    return {weight * inv.view({-1, 1, 1, 1}), (bias - bn->running_mean.detach()) * inv + bn->bias.detach()};
}

std::shared_ptr<Weighted> make_conv(nn::Conv2dImpl& c, nn::BatchNorm2dImpl* bn, bool relu, const std::string& path,
                                    bool int8) {
    auto [w, b] = fold(c.weight, c.options.bias() ? c.bias : torch::Tensor(), bn);
    auto op = std::make_shared<Weighted>(Weighted::kConv, w, b, relu, int8);
    op->stride = {c.options.stride()->at(0), c.options.stride()->at(1)};
    op->dilation = {c.options.dilation()->at(0), c.options.dilation()->at(1)};
    op->groups = c.options.groups();
    const auto* pad = c10::get_if<torch::ExpandingArray<2>>(&c.options.padding());
    if (!pad) throw std::invalid_argument(path + ": 'same'/'valid' padding is not supported by the lowering");
    op->padding = {(*pad)->at(0), (*pad)->at(1)};
    op->path = path;
    return op;
}

struct Lowering {
    bool int8 = false;
    std::vector<std::shared_ptr<Op>> ops;

    Status unsupported(const std::string& path, const nn::Module& m) const {
        return invalid_argument(
            "{} does not support the layer {} ({}); supported: Conv2d, BatchNorm2d after a Conv2d, ReLU, MaxPool2d, "
            "Linear, Flatten, Dropout and ResNet basic/bottleneck blocks",
            int8 ? "INT8 quantization" : "the FP32 inference lowering", path, m.name());
    }

    Status sequence(const std::string& path, nn::Module& seq) {
        auto children = seq.named_children();
        const auto n = static_cast<int64_t>(children.size());
        auto at = [&](int64_t i) -> nn::Module* { return i < n ? children[i].value().get() : nullptr; };
        for (int64_t i = 0; i < n; ++i) {
            nn::Module& m = *children[i].value();
            const std::string p = path + "." + children[i].key();
            if (auto* conv = m.as<nn::Conv2d>()) {
                nn::BatchNorm2dImpl* bn = at(i + 1) ? at(i + 1)->as<nn::BatchNorm2d>() : nullptr;
                if (bn) ++i;
                const bool relu = at(i + 1) && is_relu(*at(i + 1));
                if (relu) ++i;
                ops.push_back(make_conv(*conv, bn, relu, p, int8));
            } else if (auto* lin = m.as<nn::Linear>()) {
                const bool relu = at(i + 1) && is_relu(*at(i + 1));
                if (relu) ++i;
                auto op = std::make_shared<Weighted>(Weighted::kLinear, lin->weight.detach(),
                                                     lin->options.bias() ? lin->bias.detach() : torch::zeros({lin->weight.size(0)}),
                                                     relu, int8);
                op->path = p;
                ops.push_back(op);
            } else if (auto* pool = m.as<nn::MaxPool2d>()) {
                ops.push_back(std::make_shared<MaxPool>(pool->options));
            } else if (m.as<nn::Flatten>()) {
                ops.push_back(std::make_shared<Flatten>());
            } else if (m.as<nn::Dropout>()) {
                continue;  // identity at inference
            } else if (is_relu(m)) {
                ops.push_back(std::make_shared<Relu>());
            } else if (m.as<nn::Sequential>()) {
                STRATO_RETURN_IF_ERROR(sequence(p, m));
            } else if (auto block = residual(p, m); block.is_ok()) {
                ops.push_back(*block);
            } else {
                return block.status();
            }
        }
        return Status::ok();
    }

    /// A zoo BasicBlock (conv1 bn1 conv2 bn2 shortcut) or Bottleneck (... conv3 bn3 shortcut).
    Result<std::shared_ptr<Op>> residual(const std::string& path, nn::Module& m) {
        auto children = m.named_children();
        auto get = [&](const char* name) -> nn::Module* {
            auto* v = children.find(name);
            return v ? v->get() : nullptr;
        };
        const bool bottleneck = get("conv3") != nullptr;
        std::vector<std::string> names = {"conv1", "bn1", "conv2", "bn2", "shortcut"};
        if (bottleneck) names = {"conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "shortcut"};
        if (children.size() != names.size()) return unsupported(path, m);
        for (const auto& name : names)
            if (!get(name.c_str())) return unsupported(path, m);
        std::vector<std::shared_ptr<Weighted>> main;
        const int convs = bottleneck ? 3 : 2;
        for (int k = 1; k <= convs; ++k) {
            auto* conv = get(("conv" + std::to_string(k)).c_str())->as<nn::Conv2d>();
            auto* bn = get(("bn" + std::to_string(k)).c_str())->as<nn::BatchNorm2d>();
            if (!conv || !bn) return unsupported(path, m);
            main.push_back(make_conv(*conv, bn, /*relu=*/k < convs, path + ".conv" + std::to_string(k), int8));
        }
        std::shared_ptr<Weighted> shortcut;
        auto sc = get("shortcut")->named_children();
        if (sc.size() == 2) {
            auto* conv = sc[0].value()->as<nn::Conv2d>();
            auto* bn = sc[1].value()->as<nn::BatchNorm2d>();
            if (!conv || !bn) return unsupported(path + ".shortcut", *get("shortcut"));
            shortcut = make_conv(*conv, bn, false, path + ".shortcut", int8);
        } else if (!sc.is_empty()) {
            return unsupported(path + ".shortcut", *get("shortcut"));
        }
        auto op = std::make_shared<Residual>(std::move(main), std::move(shortcut));
        op->path = path;
        return std::shared_ptr<Op>(op);
    }
};

}  // namespace
}  // namespace qops

std::string QuantizedNet::engine() {
    switch (at::globalContext().qEngine()) {
        case at::QEngine::ONEDNN: return "onednn";
        case at::QEngine::FBGEMM: return "fbgemm";
        case at::QEngine::QNNPACK: return "qnnpack";
        default: return "x86";
    }
}

namespace {

/// oneDNN first (AMX/VNNI kernels here), then FBGEMM, then whatever the build has. The engine
/// must be chosen before weights are packed: packing is engine specific.
Status select_engine() {
    const auto& engines = at::globalContext().supportedQEngines();
    auto has = [&](at::QEngine e) { return std::find(engines.begin(), engines.end(), e) != engines.end(); };
    for (at::QEngine e : {at::QEngine::ONEDNN, at::QEngine::FBGEMM, at::QEngine::QNNPACK}) {
        if (has(e)) {
            if (at::globalContext().qEngine() != e) at::globalContext().setQEngine(e);
            return Status::ok();
        }
    }
    return Status{StatusCode::kUnimplemented, "this libtorch has no quantized engine (onednn, fbgemm or qnnpack)"};
}

}  // namespace

namespace {

/// The lowered graph of `net`: INT8-ready ops (starting with the input quantization) or FusedNet's.
Result<std::vector<std::shared_ptr<qops::Op>>> lower_ops(const ModelConfig& cfg, NetImpl& net, bool int8) {
    const char* what = int8 ? "INT8 quantization" : "the FP32 inference lowering";
    qops::Lowering l;
    l.int8 = int8;
    if (int8) l.ops.push_back(std::make_shared<qops::Input>());
    auto child = [&](const char* name) -> Result<nn::Module*> {
        auto children = net.named_children();
        auto* v = children.find(name);
        if (!v) return invalid_argument("model.arch {}: the network has no '{}' part for {}", cfg.arch, name, what);
        return v->get();
    };
    try {
        if (cfg.arch == "mlp") {
            l.ops.push_back(std::make_shared<qops::Flatten>());
            STRATO_ASSIGN_OR_RETURN(nn::Module * body, child("body"));
            STRATO_RETURN_IF_ERROR(l.sequence("body", *body));
        } else if (cfg.arch == "cnn") {
            for (const char* part : {"features", "classifier"}) {
                STRATO_ASSIGN_OR_RETURN(nn::Module * m, child(part));
                STRATO_RETURN_IF_ERROR(l.sequence(part, *m));
            }
        } else if (cfg.arch == "resnet") {
            for (const char* part : {"stem", "stages"}) {
                STRATO_ASSIGN_OR_RETURN(nn::Module * m, child(part));
                STRATO_RETURN_IF_ERROR(l.sequence(part, *m));
            }
            l.ops.push_back(std::make_shared<qops::GlobalAvgPool>());
            STRATO_ASSIGN_OR_RETURN(nn::Module * head, child("head"));
            STRATO_RETURN_IF_ERROR(l.sequence("head", *head));
        } else {
            return invalid_argument("{} does not support model.arch '{}'", what, cfg.arch);
        }
    } catch (const std::invalid_argument& e) {
        return invalid_argument("{}", e.what());
    }
    return std::move(l.ops);
}

template <typename T>
void register_ops(T& net, const std::vector<std::shared_ptr<qops::Op>>& ops) {
    for (size_t i = 0; i < ops.size(); ++i) net.register_module("op" + std::to_string(i), ops[i]);
}

}  // namespace

Result<std::shared_ptr<QuantizedNet>> QuantizedNet::lower(const ModelConfig& cfg, NetImpl& net) {
    STRATO_RETURN_IF_ERROR(select_engine());
    auto q = std::shared_ptr<QuantizedNet>(new QuantizedNet());
    STRATO_ASSIGN_OR_RETURN(q->ops_, lower_ops(cfg, net, /*int8=*/true));
    register_ops(*q, q->ops_);
    q->eval();
    return q;
}

Result<std::shared_ptr<FusedNet>> FusedNet::lower(const ModelConfig& cfg, NetImpl& net, const FusedOptions& opts) {
    auto f = std::shared_ptr<FusedNet>(new FusedNet());
    STRATO_ASSIGN_OR_RETURN(f->ops_, lower_ops(cfg, net, /*int8=*/false));
    register_ops(*f, f->ops_);
    try {
        torch::NoGradGuard no_grad;
        for (auto& op : f->ops_) op->pack_fused();
    } catch (const c10::Error& e) {
        return internal_error("reordering the FP32 weights for oneDNN: {}", torch_error_message(e));
    }
    if (opts.bf16 && !(opts.primitives && at::hasMKLDNN()))
        return Status{StatusCode::kUnimplemented, "the bf16 graph runs on oneDNN primitives, which this libtorch lacks"};
    if (opts.primitives && at::hasMKLDNN()) {
        try {
            auto g = std::make_shared<dnnl_graph::Graph>();
            if (opts.bf16) g->use_bf16();
            int v = dnnl_graph::Graph::kInput;
            for (const auto& op : f->ops_) v = op->emit(*g, v);
            g->set_output(v);
            if (opts.input.size() == 3) g->prepare({1, opts.input[0], opts.input[1], opts.input[2]});
            f->graph_ = std::move(g);
            f->bf16_ = opts.bf16;
        } catch (const std::exception& e) {
            if (opts.bf16) return Status{StatusCode::kUnimplemented, fmt::format("bf16 graph on oneDNN primitives: {}", e.what())};
            log::warn("FP32 graph on oneDNN primitives: {}; using libtorch's oneDNN ops instead", e.what());
        }
    }
    f->eval();
    return f;
}

std::string FusedNet::engine() const { return !graph_ ? "aten-onednn" : bf16_ ? "onednn-primitives-bf16" : "onednn-primitives"; }

std::vector<std::string> FusedNet::implementations(const std::vector<int64_t>& dims) const {
    return graph_ ? graph_->implementations(dims) : std::vector<std::string>{};
}

namespace {

/// Runs `x` through a oneDNN graph; nullopt (after one warning) when the graph cannot take it,
/// and the caller runs its libtorch ops instead.
std::optional<torch::Tensor> run_graph(dnnl_graph::Graph& g, const torch::Tensor& x) {
    torch::Tensor y = x.to(torch::kFloat);
    if (y.dim() != 4 || !y.device().is_cpu()) return std::nullopt;
    if (!y.is_contiguous() && !y.is_contiguous(at::MemoryFormat::ChannelsLast)) y = y.contiguous();
    try {
        torch::Tensor out;
        g.run(y.data_ptr<float>(), y.sizes().vec(), y.strides().vec(), [&](const std::vector<int64_t>& dims) {
            out = torch::empty(dims, torch::kFloat);
            return out.data_ptr<float>();
        });
        return out.dim() == 4 ? out.flatten(1) : out;
    } catch (const std::runtime_error& e) {
        static std::once_flag once;
        std::call_once(once, [&] { log::warn("{}; this input runs through libtorch's ops", e.what()); });
        return std::nullopt;
    }
}

}  // namespace

torch::Tensor FusedNet::forward(torch::Tensor x) {
    torch::NoGradGuard no_grad;
    if (graph_)
        if (auto y = run_graph(*graph_, x)) return *y;
    torch::Tensor y = x.to(torch::kFloat);
    for (auto& op : ops_) y = op->run_fused(y);
    return qops::to_plain(y);
}

nlohmann::json FusedNet::describe() const {
    auto layers = nlohmann::json::array();
    for (const auto& op : ops_) {
        auto j = op->describe();
        for (const char* k : {"scale", "zero_point", "weight_scale_min", "weight_scale_max"}) j.erase(k);
        if (!op->path.empty()) j["path"] = op->path;
        layers.push_back(std::move(j));
    }
    return layers;
}

Status QuantizedNet::calibrate(const std::function<Status(const Feed&)>& for_each_batch, const QuantizeOptions& opts) {
    if (std::find(observer_names().begin(), observer_names().end(), opts.observer) == observer_names().end())
        return invalid_argument("observer '{}' is unknown (expected minmax, percentile or histogram)", opts.observer);
    if (!(opts.percentile > 50 && opts.percentile <= 100))
        return invalid_argument("percentile {} is out of range (expected 50 < p <= 100, e.g. 99.99)", opts.percentile);
    const int passes = opts.observer == "minmax" ? 1 : 2;
    int64_t batches = 0;
    try {
        torch::NoGradGuard no_grad;
        for (int pass = 0; pass < passes; ++pass) {
            batches = 0;
            STRATO_RETURN_IF_ERROR(for_each_batch([&](const torch::Tensor& x) {
                torch::Tensor y = x.to(torch::kFloat);
                for (auto& op : ops_) y = op->run_float(y, pass);
                ++batches;
            }));
        }
        if (batches == 0) return invalid_argument("calibration saw no data: at least one batch of samples is needed");
        for (auto& op : ops_) op->quantize(opts);
    } catch (const c10::Error& e) {
        return internal_error("calibration: {}", torch_error_message(e));
    }
    return prepack();
}

Status QuantizedNet::prepack(bool primitives) {
    STRATO_RETURN_IF_ERROR(select_engine());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < ops_.size(); ++i) {
        try {
            ops_[i]->pack();
        } catch (const c10::Error& e) {
            // A package's parameters out of range are its data; anything else is the engine's.
            std::string msg = torch_error_message(e);
            if (const size_t at = msg.find(qops::kBadQParam); at != std::string::npos) {
                msg.erase(at, std::string_view(qops::kBadQParam).size());
                return data_loss("INT8 layer {}: {}", ops_[i]->path.empty() ? fmt::format("#{}", i + 1) : ops_[i]->path,
                                 msg);
            }
            return internal_error("packing the int8 weights for {}: {}", engine(), msg);
        }
    }
    graph_.reset();
    if (primitives && at::hasMKLDNN()) {
        try {
            auto g = std::make_shared<dnnl_graph::Graph>();
            int v = dnnl_graph::Graph::kInput;
            for (size_t i = 0; i < ops_.size(); ++i) v = ops_[i]->emit_int8(*g, v, i + 1 == ops_.size());
            g->set_output(v);
            graph_ = std::move(g);
        } catch (const std::exception& e) {
            log::warn("INT8 graph on oneDNN primitives: {}; using libtorch's quantized ops instead", e.what());
        }
    }
    ready_ = true;
    return Status::ok();
}

std::string QuantizedNet::runtime() const { return graph_ ? "onednn-primitives" : "libtorch-quantized"; }

torch::Tensor QuantizedNet::forward(torch::Tensor x) {
    TORCH_CHECK(ready_, "QuantizedNet::forward before calibrate() or prepack()");
    if (graph_)
        if (auto y = run_graph(*graph_, x)) return *y;
    torch::Tensor q = x;
    for (auto& op : ops_) q = op->run_int8(q);
    return q.dequantize();
}

nlohmann::json QuantizedNet::describe() const {
    auto layers = nlohmann::json::array();
    for (const auto& op : ops_) {
        auto j = op->describe();
        if (!op->path.empty()) j["path"] = op->path;
        layers.push_back(std::move(j));
    }
    return layers;
}

int64_t QuantizedNet::weight_bytes() const {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel() * static_cast<int64_t>(p.element_size());
    for (const auto& b : buffers()) n += b.numel() * static_cast<int64_t>(b.element_size());
    return n;
}

}  // namespace strato::models
