#include "strato/data/transforms.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <sstream>

#include "strato/data/loader.h"

namespace strato::data {

// --- resampling ------------------------------------------------------------------------------

namespace {

// The resampling loops are compiled twice, for AVX2 and for the baseline, and the loader picks
// at run time (glibc ifunc): 2-3x faster passes on every x86-64 made since 2013, and the
// binary still runs everywhere. Clang 14 cannot multiversion templates: baseline only there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATO_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STRATO_SIMD_CLONES
#endif

constexpr int kPrecision = 22;  // fixed-point weights: sums of 255 * 2^22 fit in int32

/// Per output pixel: the first input pixel and the weights of the inputs it averages.
struct Taps {
    std::vector<int32_t> first, count;
    std::vector<int32_t> weights;  // count_max per output pixel
    int32_t stride = 0;
};

/// Triangle (bilinear) filter widened by the shrink factor, so shrinking averages every input
/// pixel (antialiasing) as Pillow's resize does.
Taps make_taps(int64_t in, int64_t out) {
    Taps t;
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    const double fscale = std::max(scale, 1.0);
    const double support = fscale;  // the triangle's support (1) times the shrink factor
    t.stride = static_cast<int32_t>(std::ceil(support) * 2 + 1);
    t.first.resize(static_cast<size_t>(out));
    t.count.resize(static_cast<size_t>(out));
    t.weights.assign(static_cast<size_t>(out * t.stride), 0);
    std::vector<double> w(static_cast<size_t>(t.stride));
    for (int64_t x = 0; x < out; ++x) {
        const double center = (static_cast<double>(x) + 0.5) * scale;
        int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
        int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
        if (hi - lo > t.stride) hi = lo + t.stride;
        double total = 0;
        for (int64_t i = lo; i < hi; ++i) {
            const double d = (static_cast<double>(i) - center + 0.5) / fscale;
            const double v = std::max(0.0, 1.0 - std::abs(d));
            w[static_cast<size_t>(i - lo)] = v;
            total += v;
        }
        if (total <= 0) {  // cannot happen for in >= 1, but never divide by zero
            lo = std::min<int64_t>(static_cast<int64_t>(center), in - 1), hi = lo + 1, w[0] = total = 1;
        }
        t.first[static_cast<size_t>(x)] = static_cast<int32_t>(lo);
        t.count[static_cast<size_t>(x)] = static_cast<int32_t>(hi - lo);
        // Rounded weights that sum to exactly 2^kPrecision.
        int32_t acc = 0;
        int32_t* dst = &t.weights[static_cast<size_t>(x * t.stride)];
        for (int64_t i = 0; i < hi - lo; ++i) {
            dst[i] = static_cast<int32_t>(std::lround(w[static_cast<size_t>(i)] / total * (1 << kPrecision)));
            acc += dst[i];
        }
        dst[(hi - lo) / 2] += (1 << kPrecision) - acc;
    }
    return t;
}

inline uint8_t clamp8(int32_t v) {
    v = (v + (1 << (kPrecision - 1))) >> kPrecision;
    return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

/// The horizontal pass with a fixed number of taps N (each output's taps padded with zero
/// weights and shifted to stay inside the row): straight-line code the compiler schedules well.
/// Enlarging and mild shrinking, the common cases, need at most 4.
template <int C, int N>
STRATO_SIMD_CLONES void horizontal_fixed(const uint8_t* src, int64_t stride, int64_t rows, const Taps& t, int64_t in_w, int64_t out_w,
                      uint8_t* dst) {
    std::vector<int32_t> first(static_cast<size_t>(out_w)), w(static_cast<size_t>(out_w * N), 0);
    for (int64_t x = 0; x < out_w; ++x) {
        const int32_t f = t.first[static_cast<size_t>(x)], n = t.count[static_cast<size_t>(x)];
        const int32_t start = std::max<int32_t>(0, std::min<int32_t>(f, static_cast<int32_t>(in_w) - N));
        first[static_cast<size_t>(x)] = start * C;
        for (int32_t k = 0; k < n; ++k) w[static_cast<size_t>(x * N + f - start + k)] = t.weights[static_cast<size_t>(x * t.stride + k)];
    }
    for (int64_t y = 0; y < rows; ++y) {
        const uint8_t* s = src + y * stride;
        uint8_t* d = dst + y * out_w * C;
        const int32_t* wx = w.data();
        for (int64_t x = 0; x < out_w; ++x, wx += N) {
            const uint8_t* p = s + first[static_cast<size_t>(x)];
            for (int c = 0; c < C; ++c) {
                int32_t acc = 0;
                for (int k = 0; k < N; ++k) acc += p[k * C + c] * wx[k];
                d[x * C + c] = clamp8(acc);
            }
        }
    }
}

template <int C>
void horizontal(const uint8_t* src, int64_t stride, int64_t rows, const Taps& t, int64_t in_w, int64_t out_w,
                uint8_t* dst) {
    const int32_t taps = *std::max_element(t.count.begin(), t.count.end());
    if (in_w >= 4 && taps <= 2) return horizontal_fixed<C, 2>(src, stride, rows, t, in_w, out_w, dst);
    if (in_w >= 4 && taps <= 3) return horizontal_fixed<C, 3>(src, stride, rows, t, in_w, out_w, dst);
    if (in_w >= 4 && taps <= 4) return horizontal_fixed<C, 4>(src, stride, rows, t, in_w, out_w, dst);
    for (int64_t y = 0; y < rows; ++y) {
        const uint8_t* s = src + y * stride;
        uint8_t* d = dst + y * out_w * C;
        for (int64_t x = 0; x < out_w; ++x) {
            const int32_t* w = &t.weights[static_cast<size_t>(x * t.stride)];
            const uint8_t* p = s + t.first[static_cast<size_t>(x)] * C;
            std::array<int32_t, C> acc{};
            for (int32_t k = 0, n = t.count[static_cast<size_t>(x)]; k < n; ++k)
                for (int c = 0; c < C; ++c) acc[c] += p[k * C + c] * w[k];
            for (int c = 0; c < C; ++c) d[x * C + c] = clamp8(acc[c]);
        }
    }
}

STRATO_SIMD_CLONES void vertical(const uint8_t* src, int64_t row_bytes, const Taps& t, int64_t out_h, uint8_t* dst) {
    std::vector<int32_t> acc(static_cast<size_t>(row_bytes));
    for (int64_t y = 0; y < out_h; ++y) {
        const int32_t* w = &t.weights[static_cast<size_t>(y * t.stride)];
        const uint8_t* s = src + t.first[static_cast<size_t>(y)] * row_bytes;
        std::fill(acc.begin(), acc.end(), 0);
        for (int32_t k = 0, n = t.count[static_cast<size_t>(y)]; k < n; ++k) {
            const uint8_t* r = s + k * row_bytes;
            const int32_t wk = w[k];
            for (int64_t i = 0; i < row_bytes; ++i) acc[static_cast<size_t>(i)] += r[i] * wk;
        }
        uint8_t* d = dst + y * row_bytes;
        for (int64_t i = 0; i < row_bytes; ++i) d[i] = clamp8(acc[static_cast<size_t>(i)]);
    }
}

/// Resizes the w x h window at `src` (row stride in bytes) into `out` (HWC, out_w x out_h).
void resize_window(const uint8_t* src, int64_t stride, int64_t w, int64_t h, int64_t c, int64_t out_w, int64_t out_h,
                   Pixels* out) {
    out->width = out_w, out->height = out_h, out->channels = c;
    out->data.resize(static_cast<size_t>(out_w * out_h * c));
    auto hpass = [&](const uint8_t* in, int64_t in_stride, int64_t rows, uint8_t* to) {
        const Taps tx = make_taps(w, out_w);
        if (c == 3) horizontal<3>(in, in_stride, rows, tx, w, out_w, to);
        else if (c == 1) horizontal<1>(in, in_stride, rows, tx, w, out_w, to);
        else horizontal<4>(in, in_stride, rows, tx, w, out_w, to);
    };
    auto copy_rows = [&](const uint8_t* in, int64_t in_stride, int64_t rows, int64_t row_bytes, uint8_t* to) {
        for (int64_t y = 0; y < rows; ++y) std::memcpy(to + y * row_bytes, in + y * in_stride, static_cast<size_t>(row_bytes));
    };
    // The horizontal pass is the slow one (it gathers): run it on the fewer rows, so shrink
    // vertically first and enlarge vertically last.
    std::vector<uint8_t> tmp;
    if (out_h < h && out_w != w) {
        tmp.resize(static_cast<size_t>(out_h * w * c));
        std::vector<uint8_t> dense;
        const uint8_t* in = src;
        if (stride != w * c) {  // the vertical pass wants dense rows
            dense.resize(static_cast<size_t>(h * w * c));
            copy_rows(src, stride, h, w * c, dense.data());
            in = dense.data();
        }
        vertical(in, w * c, make_taps(h, out_h), out_h, tmp.data());
        hpass(tmp.data(), w * c, out_h, out->data.data());
        return;
    }
    const uint8_t* rows = src;
    int64_t row_stride = stride;
    if (out_w != w) {
        tmp.resize(static_cast<size_t>(h * out_w * c));
        hpass(src, stride, h, tmp.data());
        rows = tmp.data();
        row_stride = out_w * c;
    }
    if (out_h != h) {
        if (row_stride != out_w * c) {
            std::vector<uint8_t> dense(static_cast<size_t>(h * out_w * c));
            copy_rows(rows, row_stride, h, out_w * c, dense.data());
            vertical(dense.data(), out_w * c, make_taps(h, out_h), out_h, out->data.data());
        } else {
            vertical(rows, row_stride, make_taps(h, out_h), out_h, out->data.data());
        }
    } else {
        copy_rows(rows, row_stride, h, out_w * c, out->data.data());
    }
}

// --- random numbers --------------------------------------------------------------------------

struct Rng {
    uint64_t state;
    uint64_t next() { return state = mix64(state); }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    /// Integer in [lo, hi].
    int64_t between(int64_t lo, int64_t hi) {
        if (hi <= lo) return lo;
        const auto n = static_cast<uint64_t>(hi - lo + 1);
        return lo + static_cast<int64_t>((static_cast<__uint128_t>(next()) * n) >> 64);
    }
};

Rng op_rng(uint64_t seed, size_t op) { return Rng{mix64(seed ^ mix64(0x7a4f00 + op))}; }

}  // namespace

void resize(const Pixels& src, int64_t height, int64_t width, Pixels* out) {
    resize_window(src.data.data(), src.width * src.channels, src.width, src.height, src.channels, width, height, out);
}

// --- the transforms --------------------------------------------------------------------------

enum class OpKind { kResize, kCenterCrop, kRandomResizedCrop, kRandomCrop, kHFlip, kColorJitter, kGrayscale, kErasing };

struct Pipeline::Op {
    OpKind kind;
    std::string spec;
    int64_t h = 0, w = 0;  // size (h = w = shorter side for resize with one value: w = 0)
    double p = 0.5;
    std::array<double, 2> scale{0.08, 1.0}, ratio{3.0 / 4.0, 4.0 / 3.0};
    int64_t padding = 0;
    double brightness = 0, contrast = 0, saturation = 0, hue = 0;
    std::string value = "mean";  // erasing: mean | random | 0..255
    uint8_t fill = 0;            // erasing with a number
    bool geometric() const { return kind <= OpKind::kHFlip; }
};

/// Where the output's pixels come from: the rectangle (rx, ry, rw, rh) of the source image
/// (fractional; may reach outside it, which reads as zeros) shown at lw x lh, mirrored if flip.
struct Pipeline::Plan {
    double rx = 0, ry = 0, rw = 0, rh = 0;
    int64_t lw = 0, lh = 0;
    bool flip = false;

    /// Crops the logical image to (left, top, w, h) in its own coordinates.
    void crop(double left, double top, int64_t w, int64_t h) {
        if (flip) left = static_cast<double>(lw) - left - static_cast<double>(w);
        const double sx = rw / static_cast<double>(lw), sy = rh / static_cast<double>(lh);
        rx += left * sx, ry += top * sy;
        rw = static_cast<double>(w) * sx, rh = static_cast<double>(h) * sy;
        lw = w, lh = h;
    }
};

namespace {

Result<double> parse_number(std::string_view text, const std::string& what) {
    double v = 0;
    std::istringstream in{std::string(text)};
    if (!(in >> v) || !in.eof() || !std::isfinite(v)) return invalid_argument("{}: '{}' is not a number", what, text);
    return v;
}

Result<std::array<double, 2>> parse_pair(std::string_view text, const std::string& what) {
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos) return invalid_argument("{}: expected two numbers 'a,b', got '{}'", what, text);
    STRATO_ASSIGN_OR_RETURN(double a, parse_number(text.substr(0, comma), what));
    STRATO_ASSIGN_OR_RETURN(double b, parse_number(text.substr(comma + 1), what));
    if (a > b) return invalid_argument("{}: expected a <= b in 'a,b', got '{}'", what, text);
    return std::array<double, 2>{a, b};
}

Result<int64_t> parse_size(double v, const std::string& what) {
    if (v < 1 || v > 16384 || v != std::floor(v)) return invalid_argument("{}: expected an integer in [1, 16384], got {}", what, v);
    return static_cast<int64_t>(v);
}

const char* kKnown =
    "random-resized-crop, resize, center-crop, random-crop, hflip, color-jitter, grayscale, random-erasing";

Result<std::shared_ptr<Pipeline::Op>> parse_op(const std::string& spec, const std::string& where) {
    std::istringstream in(spec);
    std::string name;
    in >> name;
    auto op = std::make_shared<Pipeline::Op>();
    op->spec = spec;
    const std::string ctx = fmt::format("{}: '{}'", where, spec);
    std::vector<std::string> allowed;
    if (name == "resize") op->kind = OpKind::kResize, allowed = {"size"};
    else if (name == "center-crop") op->kind = OpKind::kCenterCrop, allowed = {"size"};
    else if (name == "random-resized-crop") op->kind = OpKind::kRandomResizedCrop, allowed = {"size", "scale", "ratio"};
    else if (name == "random-crop") op->kind = OpKind::kRandomCrop, allowed = {"size", "padding"};
    else if (name == "hflip") op->kind = OpKind::kHFlip, allowed = {"p"};
    else if (name == "color-jitter") op->kind = OpKind::kColorJitter, allowed = {"brightness", "contrast", "saturation", "hue"};
    else if (name == "grayscale") op->kind = OpKind::kGrayscale, op->p = 0.1, allowed = {"p"};
    else if (name == "random-erasing") {
        op->kind = OpKind::kErasing, allowed = {"p", "scale", "ratio", "value"};
        op->scale = {0.02, 0.33}, op->ratio = {0.3, 3.3};
    } else {
        return invalid_argument("{}: unknown transform '{}' (expected one of: {})", ctx, name, kKnown);
    }
    bool has_size = false;
    for (std::string kv; in >> kv;) {
        const size_t eq = kv.find('=');
        const std::string key = kv.substr(0, eq);
        if (eq == std::string::npos || std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
            return invalid_argument("{}: unexpected '{}' (expected key=value with key one of: {})", ctx, kv,
                                    fmt::join(allowed, ", "));
        }
        const std::string val = kv.substr(eq + 1);
        const std::string what = fmt::format("{} {}", ctx, key);
        if (key == "size") {
            has_size = true;
            if (val.find(',') != std::string::npos) {
                const size_t c = val.find(',');
                STRATO_ASSIGN_OR_RETURN(double hv, parse_number(val.substr(0, c), what));
                STRATO_ASSIGN_OR_RETURN(double wv, parse_number(val.substr(c + 1), what));
                STRATO_ASSIGN_OR_RETURN(op->h, parse_size(hv, what));
                STRATO_ASSIGN_OR_RETURN(op->w, parse_size(wv, what));
            } else {
                STRATO_ASSIGN_OR_RETURN(double v, parse_number(val, what));
                STRATO_ASSIGN_OR_RETURN(op->h, parse_size(v, what));
                op->w = op->kind == OpKind::kResize ? 0 : op->h;
            }
        } else if (key == "scale" || key == "ratio") {
            STRATO_ASSIGN_OR_RETURN(auto pr, parse_pair(val, what));
            if (!(pr[0] > 0)) return invalid_argument("{}: expected numbers > 0, got '{}'", what, val);
            if (key == "scale" && pr[1] > 1) return invalid_argument("{}: an area fraction must be at most 1, got '{}'", what, val);
            (key == "scale" ? op->scale : op->ratio) = pr;
        } else if (key == "padding") {
            STRATO_ASSIGN_OR_RETURN(double v, parse_number(val, what));
            if (v < 0 || v > 1024 || v != std::floor(v)) return invalid_argument("{}: expected an integer in [0, 1024]", what);
            op->padding = static_cast<int64_t>(v);
        } else if (key == "value") {
            if (val != "mean" && val != "random") {
                auto num = parse_number(val, what);
                const double v = num.is_ok() ? *num : -1;
                if (v < 0 || v > 255 || v != std::floor(v))
                    return invalid_argument("{}: expected mean, random or an integer in [0, 255], got '{}'", what, val);
                op->fill = static_cast<uint8_t>(v);
            }
            op->value = val;
        } else {
            STRATO_ASSIGN_OR_RETURN(double v, parse_number(val, what));
            const double hi = key == "hue" ? 0.5 : key == "p" ? 1.0 : 1e6;
            if (v < 0 || v > hi) return invalid_argument("{}: expected a number in [0, {}], got {}", what, hi, v);
            if (key == "p") op->p = v;
            if (key == "brightness") op->brightness = v;
            if (key == "contrast") op->contrast = v;
            if (key == "saturation") op->saturation = v;
            if (key == "hue") op->hue = v;
        }
    }
    const bool needs_size = op->kind == OpKind::kResize || op->kind == OpKind::kCenterCrop ||
                            op->kind == OpKind::kRandomResizedCrop || op->kind == OpKind::kRandomCrop;
    if (needs_size && !has_size) return invalid_argument("{}: size=N (or size=H,W) is required", ctx);
    return op;
}

}  // namespace

Result<std::shared_ptr<Pipeline>> Pipeline::parse(const std::vector<std::string>& specs, ImageShape output,
                                                  const std::string& where, const std::string& size_key) {
    if (output.channels != 1 && output.channels != 3)
        return invalid_argument("{}: images must have 1 or 3 channels, got {}", where, output.channels);
    auto p = std::shared_ptr<Pipeline>(new Pipeline());
    // The size after each geometric op, when it is fixed whatever the source size.
    int64_t fh = 0, fw = 0;
    bool any_geometry = false;
    for (const auto& spec : specs) {
        STRATO_ASSIGN_OR_RETURN(auto op, parse_op(spec, where));
        if (op->geometric() && op->kind != OpKind::kHFlip) {
            any_geometry = true;
            if (op->kind == OpKind::kResize && op->w == 0) fh = fw = 0;
            else fh = op->h, fw = op->w;
        }
        p->ops_.push_back(std::move(op));
    }
    if (!any_geometry) {
        if (output.height <= 0 || output.width <= 0)
            return invalid_argument("{}: the image size is not set ({}) and no transform fixes it", where, size_key);
        auto op = std::make_shared<Op>();
        op->kind = OpKind::kResize, op->spec = "resize", op->h = output.height, op->w = output.width;
        p->ops_.insert(p->ops_.begin(), std::move(op));
        fh = output.height, fw = output.width;
    }
    if (fh == 0) {
        return invalid_argument(
            "{}: the transforms do not end at a fixed size (a batch needs one): end the geometry with center-crop, "
            "random-resized-crop, random-crop or resize size=H,W",
            where);
    }
    if (output.height > 0 && (fh != output.height || fw != output.width)) {
        return invalid_argument("{}: the transforms end at {}x{} but {} is {}x{}", where, fh, fw, size_key,
                                output.height, output.width);
    }
    p->output_ = {output.channels, fh, fw};
    p->fill_.assign(static_cast<size_t>(output.channels), 0);
    return p;
}

Status Pipeline::check_spec(const std::string& spec, const std::string& where) {
    return parse_op(spec, where).status();
}

bool Pipeline::random() const {
    for (const auto& op : ops_)
        if (op->kind != OpKind::kResize && op->kind != OpKind::kCenterCrop) return true;
    return false;
}

void Pipeline::set_mean(const std::vector<double>& mean) {
    for (size_t c = 0; c < fill_.size() && !mean.empty(); ++c)
        fill_[c] = static_cast<uint8_t>(std::lround(std::clamp(mean[std::min(c, mean.size() - 1)], 0.0, 1.0) * 255));
}

Pipeline::Plan Pipeline::plan(int64_t width, int64_t height, uint64_t seed) const {
    Plan g;
    g.rw = static_cast<double>(width), g.rh = static_cast<double>(height);
    g.lw = width, g.lh = height;
    for (size_t k = 0; k < ops_.size(); ++k) {
        const Op& op = *ops_[k];
        Rng rng = op_rng(seed, k);
        switch (op.kind) {
            case OpKind::kResize:
                if (op.w > 0) {
                    g.lw = op.w, g.lh = op.h;
                } else if (g.lw <= g.lh) {  // torchvision: the shorter side to size, the longer one scaled (truncated)
                    g.lh = std::max<int64_t>(1, op.h * g.lh / g.lw), g.lw = op.h;
                } else {
                    g.lw = std::max<int64_t>(1, op.h * g.lw / g.lh), g.lh = op.h;
                }
                break;
            case OpKind::kCenterCrop: {
                // torchvision: round-half-to-even of the offset, or pad (d // 2) before when the
                // crop is larger than the image.
                auto offset = [](int64_t have, int64_t want) {
                    return have >= want ? std::nearbyint(static_cast<double>(have - want) / 2.0)
                                        : -static_cast<double>((want - have) / 2);
                };
                g.crop(offset(g.lw, op.w), offset(g.lh, op.h), op.w, op.h);
                break;
            }
            case OpKind::kRandomCrop: {
                const int64_t top = rng.between(0, g.lh + 2 * op.padding - op.h);
                const int64_t left = rng.between(0, g.lw + 2 * op.padding - op.w);
                g.crop(static_cast<double>(left - op.padding), static_cast<double>(top - op.padding), op.w, op.h);
                break;
            }
            case OpKind::kRandomResizedCrop: {
                // torchvision's RandomResizedCrop.get_params: ten tries at a random area and aspect
                // ratio, then the whole image clamped to the ratio range.
                const double area = static_cast<double>(g.lw * g.lh);
                const double lr0 = std::log(op.ratio[0]), lr1 = std::log(op.ratio[1]);
                int64_t cw = 0, ch = 0, top = 0, left = 0;
                bool found = false;
                for (int attempt = 0; attempt < 10 && !found; ++attempt) {
                    const double target = area * rng.uniform(op.scale[0], op.scale[1]);
                    const double aspect = std::exp(rng.uniform(lr0, lr1));
                    cw = std::lround(std::sqrt(target * aspect));
                    ch = std::lround(std::sqrt(target / aspect));
                    if (cw > 0 && ch > 0 && cw <= g.lw && ch <= g.lh) {
                        top = rng.between(0, g.lh - ch);
                        left = rng.between(0, g.lw - cw);
                        found = true;
                    }
                }
                if (!found) {
                    const double in_ratio = static_cast<double>(g.lw) / static_cast<double>(g.lh);
                    if (in_ratio < op.ratio[0]) cw = g.lw, ch = std::lround(static_cast<double>(cw) / op.ratio[0]);
                    else if (in_ratio > op.ratio[1]) ch = g.lh, cw = std::lround(static_cast<double>(ch) * op.ratio[1]);
                    else cw = g.lw, ch = g.lh;
                    ch = std::clamp<int64_t>(ch, 1, g.lh), cw = std::clamp<int64_t>(cw, 1, g.lw);
                    top = (g.lh - ch) / 2, left = (g.lw - cw) / 2;
                }
                g.crop(static_cast<double>(left), static_cast<double>(top), cw, ch);
                g.lw = op.w, g.lh = op.h;
                break;
            }
            case OpKind::kHFlip:
                if (rng.uniform() < op.p) g.flip = !g.flip;
                break;
            default:
                break;
        }
    }
    return g;
}

namespace {

/// The intersection of the plan's source rectangle with the image, in whole source pixels, and
/// where it lands in the output.
struct Window {
    int64_t x0, y0, x1, y1;  // source
    int64_t ox0, oy0, ox1, oy1;  // output
    bool empty() const { return x1 <= x0 || y1 <= y0 || ox1 <= ox0 || oy1 <= oy0; }
};

Window window_of(double rx, double ry, double rw, double rh, int64_t lw, int64_t lh, int64_t width, int64_t height) {
    Window w{};
    // The whole source pixels covering the rectangle (floor of the start, ceiling of the end), so
    // the output is covered to its edges; a fraction of a pixel more of the source is resampled
    // in, never a black border. (1e-9: 7.0000000001 is 7, not a pixel more.)
    w.x0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(std::max(rx, 0.0) + 1e-9)), 0, width);
    w.y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(std::max(ry, 0.0) + 1e-9)), 0, height);
    w.x1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(std::min(rx + rw, static_cast<double>(width)) - 1e-9)), 0, width);
    w.y1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(std::min(ry + rh, static_cast<double>(height)) - 1e-9)), 0, height);
    if (w.x1 <= w.x0 && w.x0 < width) w.x1 = w.x0 + 1;
    if (w.y1 <= w.y0 && w.y0 < height) w.y1 = w.y0 + 1;
    auto map = [](double v, double origin, double extent, int64_t n) {
        return std::clamp<int64_t>(std::llround((v - origin) / extent * static_cast<double>(n)), 0, n);
    };
    w.ox0 = map(static_cast<double>(w.x0), rx, rw, lw), w.ox1 = map(static_cast<double>(w.x1), rx, rw, lw);
    w.oy0 = map(static_cast<double>(w.y0), ry, rh, lh), w.oy1 = map(static_cast<double>(w.y1), ry, rh, lh);
    return w;
}

}  // namespace

Status Pipeline::run(std::string_view bytes, const std::string& name, uint64_t seed, uint8_t* dst) const {
    DecodeRequest req;
    req.channels = output_.channels;
    req.fast = fast_;
    if (full_decode_) {
        STRATO_ASSIGN_OR_RETURN(Decoded d, decode_image(bytes, name, req));
        return run(d.pixels, seed, dst);
    }
    STRATO_ASSIGN_OR_RETURN(ImageInfo info, probe_image(bytes, name));
    const Plan g = plan(info.width, info.height, seed);
    const Window w = window_of(g.rx, g.ry, g.rw, g.rh, g.lw, g.lh, info.width, info.height);
    Pixels region;
    if (!w.empty()) {
        req.x = w.x0, req.y = w.y0, req.w = w.x1 - w.x0, req.h = w.y1 - w.y0;
        req.min_w = w.ox1 - w.ox0, req.min_h = w.oy1 - w.oy0;
        STRATO_ASSIGN_OR_RETURN(Decoded d, decode_image(bytes, name, req));
        region = std::move(d.pixels);
    }
    return execute(g, w.ox0, w.oy0, w.ox1, w.oy1, region, seed, dst);
}

Status Pipeline::run(const Pixels& decoded, uint64_t seed, uint8_t* dst) const {
    if (decoded.channels != output_.channels)
        return invalid_argument("decoded image has {} channels, the pipeline makes {}", decoded.channels, output_.channels);
    const Plan g = plan(decoded.width, decoded.height, seed);
    const Window w = window_of(g.rx, g.ry, g.rw, g.rh, g.lw, g.lh, decoded.width, decoded.height);
    Pixels region;
    if (!w.empty()) {
        region.width = w.x1 - w.x0, region.height = w.y1 - w.y0, region.channels = decoded.channels;
        region.data.resize(static_cast<size_t>(region.width * region.height * region.channels));
        for (int64_t y = 0; y < region.height; ++y)
            std::memcpy(region.row(y), decoded.row(w.y0 + y) + w.x0 * decoded.channels,
                        static_cast<size_t>(region.width * region.channels));
    }
    return execute(g, w.ox0, w.oy0, w.ox1, w.oy1, region, seed, dst);
}

namespace {

void blend_lut(uint8_t* px, int64_t n, double factor, double other) {
    std::array<uint8_t, 256> lut;
    for (int v = 0; v < 256; ++v)
        lut[static_cast<size_t>(v)] = static_cast<uint8_t>(std::clamp(std::lround(factor * v + (1 - factor) * other), 0L, 255L));
    for (int64_t i = 0; i < n; ++i) px[i] = lut[px[i]];
}

/// torchvision's rgb_to_grayscale weights.
inline float gray_of(float r, float g, float b) { return 0.2989f * r + 0.587f * g + 0.114f * b; }

void adjust_saturation(uint8_t* chw, int64_t plane, double f) {
    uint8_t *r = chw, *g = chw + plane, *b = chw + 2 * plane;
    const auto ff = static_cast<float>(f);
    for (int64_t i = 0; i < plane; ++i) {
        const float y = gray_of(r[i], g[i], b[i]);
        auto mix = [&](uint8_t v) { return static_cast<uint8_t>(std::clamp(ff * v + (1 - ff) * y + 0.5f, 0.0f, 255.0f)); };
        r[i] = mix(r[i]), g[i] = mix(g[i]), b[i] = mix(b[i]);
    }
}

void adjust_hue(uint8_t* chw, int64_t plane, double shift) {
    uint8_t *rp = chw, *gp = chw + plane, *bp = chw + 2 * plane;
    for (int64_t i = 0; i < plane; ++i) {
        const float r = rp[i] / 255.0f, g = gp[i] / 255.0f, b = bp[i] / 255.0f;
        const float mx = std::max({r, g, b}), mn = std::min({r, g, b}), d = mx - mn;
        if (d <= 0) continue;  // gray: no hue
        float h = mx == r ? (g - b) / d : mx == g ? 2.0f + (b - r) / d : 4.0f + (r - g) / d;
        h = h / 6.0f + static_cast<float>(shift);
        h -= std::floor(h);
        const float s = d / mx, v = mx;
        const float h6 = h * 6.0f;
        const int sector = static_cast<int>(h6) % 6;
        const float f = h6 - std::floor(h6);
        const float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
        float o[3];
        switch (sector) {
            case 0: o[0] = v, o[1] = t, o[2] = p; break;
            case 1: o[0] = q, o[1] = v, o[2] = p; break;
            case 2: o[0] = p, o[1] = v, o[2] = t; break;
            case 3: o[0] = p, o[1] = q, o[2] = v; break;
            case 4: o[0] = t, o[1] = p, o[2] = v; break;
            default: o[0] = v, o[1] = p, o[2] = q; break;
        }
        rp[i] = static_cast<uint8_t>(o[0] * 255.0f + 0.5f);
        gp[i] = static_cast<uint8_t>(o[1] * 255.0f + 0.5f);
        bp[i] = static_cast<uint8_t>(o[2] * 255.0f + 0.5f);
    }
}

double mean_gray(const uint8_t* chw, int64_t plane, int64_t channels) {
    double sum = 0;
    for (int64_t i = 0; i < plane; ++i)
        sum += channels == 3 ? gray_of(chw[i], chw[plane + i], chw[2 * plane + i]) : chw[i];
    return sum / static_cast<double>(plane);
}

}  // namespace

Status Pipeline::execute(const Plan& g, int64_t ox0, int64_t oy0, int64_t ox1, int64_t oy1, const Pixels& region,
                         uint64_t seed, uint8_t* dst) const {
    const int64_t c = output_.channels, oh = output_.height, ow = output_.width, plane = oh * ow;
    if (g.lw != ow || g.lh != oh) return internal_error("transform plan ends at {}x{}, expected {}x{}", g.lw, g.lh, ow, oh);
    if (ox0 > 0 || oy0 > 0 || ox1 < ow || oy1 < oh || region.width == 0) std::memset(dst, 0, static_cast<size_t>(c * plane));
    if (region.width > 0 && region.height > 0 && ox1 > ox0 && oy1 > oy0) {
        Pixels sized;
        const Pixels* src = &region;
        if (region.width != ox1 - ox0 || region.height != oy1 - oy0) {
            resize(region, oy1 - oy0, ox1 - ox0, &sized);
            src = &sized;
        }
        // HWC -> CHW into the output rectangle, mirrored if the plan says so.
        for (int64_t y = 0; y < src->height; ++y) {
            const uint8_t* s = src->row(y);
            uint8_t* d = dst + (oy0 + y) * ow;
            if (!g.flip) {
                if (c == 3) {
                    uint8_t *r = d + ox0, *gg = d + plane + ox0, *b = d + 2 * plane + ox0;
                    for (int64_t x = 0; x < src->width; ++x) r[x] = s[3 * x], gg[x] = s[3 * x + 1], b[x] = s[3 * x + 2];
                } else {
                    std::memcpy(d + ox0, s, static_cast<size_t>(src->width));
                }
            } else {
                for (int64_t x = 0; x < src->width; ++x) {
                    const int64_t to = ow - 1 - (ox0 + x);
                    for (int64_t k = 0; k < c; ++k) d[k * plane + to] = s[x * c + k];
                }
            }
        }
    }
    for (size_t k = 0; k < ops_.size(); ++k) {
        const Op& op = *ops_[k];
        if (op.geometric()) continue;
        Rng rng = op_rng(seed, k);
        if (op.kind == OpKind::kGrayscale) {
            if (rng.uniform() >= op.p || c != 3) continue;
            for (int64_t i = 0; i < plane; ++i) {
                const auto v = static_cast<uint8_t>(gray_of(dst[i], dst[plane + i], dst[2 * plane + i]) + 0.5f);
                dst[i] = dst[plane + i] = dst[2 * plane + i] = v;
            }
        } else if (op.kind == OpKind::kColorJitter) {
            // torchvision: the four adjustments in a random order, each with a random factor.
            std::array<int, 4> order{0, 1, 2, 3};
            for (int i = 3; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.between(0, i))]);
            const double fb = rng.uniform(std::max(0.0, 1 - op.brightness), 1 + op.brightness);
            const double fc = rng.uniform(std::max(0.0, 1 - op.contrast), 1 + op.contrast);
            const double fs = rng.uniform(std::max(0.0, 1 - op.saturation), 1 + op.saturation);
            const double fh = rng.uniform(-op.hue, op.hue);
            for (int step : order) {
                if (step == 0 && op.brightness > 0) blend_lut(dst, c * plane, fb, 0.0);
                if (step == 1 && op.contrast > 0) blend_lut(dst, c * plane, fc, mean_gray(dst, plane, c));
                if (step == 2 && op.saturation > 0 && c == 3) adjust_saturation(dst, plane, fs);
                if (step == 3 && op.hue > 0 && c == 3) adjust_hue(dst, plane, fh);
            }
        } else if (op.kind == OpKind::kErasing) {
            // torchvision's RandomErasing.get_params: ten tries at a random area and ratio.
            if (rng.uniform() >= op.p) continue;
            const double area = static_cast<double>(plane);
            const double lr0 = std::log(op.ratio[0]), lr1 = std::log(op.ratio[1]);
            for (int attempt = 0; attempt < 10; ++attempt) {
                const double target = area * rng.uniform(op.scale[0], op.scale[1]);
                const double aspect = std::exp(rng.uniform(lr0, lr1));
                const int64_t eh = std::lround(std::sqrt(target * aspect)), ew = std::lround(std::sqrt(target / aspect));
                if (!(eh < oh && ew < ow) || eh <= 0 || ew <= 0) continue;
                const int64_t top = rng.between(0, oh - eh), left = rng.between(0, ow - ew);
                const bool noise = op.value == "random";
                for (int64_t ch = 0; ch < c; ++ch) {
                    const uint8_t fill = op.value == "mean" ? fill_[static_cast<size_t>(ch)]
                                         : noise          ? 0
                                                          : op.fill;
                    for (int64_t y = top; y < top + eh; ++y) {
                        uint8_t* row = dst + ch * plane + y * ow + left;
                        if (noise) {
                            for (int64_t x = 0; x < ew; ++x) row[x] = static_cast<uint8_t>(rng.next() >> 56);
                        } else {
                            std::memset(row, fill, static_cast<size_t>(ew));
                        }
                    }
                }
                break;
            }
        }
    }
    return Status::ok();
}

}  // namespace strato::data
