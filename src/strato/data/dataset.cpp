#include "strato/data/dataset.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "strato/core/check.h"

namespace strato::data {

InMemoryDataset::InMemoryDataset(ImageShape shape, std::vector<uint8_t> pixels, std::vector<int64_t> labels,
                                 std::vector<std::string> class_names)
    : shape_(shape), pixels_(std::move(pixels)), labels_(std::move(labels)), class_names_(std::move(class_names)) {
    STRATO_ASSERT(static_cast<int64_t>(pixels_.size()) == shape_.numel() * static_cast<int64_t>(labels_.size()));
}

Status InMemoryDataset::load(int64_t index, uint8_t* dst, int64_t* label) const {
    if (index < 0 || index >= size()) return invalid_argument("sample index {} out of range [0, {})", index, size());
    const int64_t n = shape_.numel();
    std::memcpy(dst, pixels_.data() + index * n, static_cast<size_t>(n));
    *label = labels_[static_cast<size_t>(index)];
    return Status::ok();
}

void InMemoryDataset::truncate(int64_t n) {
    STRATO_ASSERT(n >= 0 && n <= size());
    labels_.resize(static_cast<size_t>(n));
    pixels_.resize(static_cast<size_t>(n * shape_.numel()));
}

void InMemoryDataset::relabel(const std::vector<int64_t>& to, std::vector<std::string> class_names) {
    STRATO_ASSERT(static_cast<int64_t>(to.size()) == num_classes());
    for (int64_t t : to) STRATO_ASSERT(t >= 0 && t < static_cast<int64_t>(class_names.size()));
    for (int64_t& y : labels_) y = to[static_cast<size_t>(y)];
    class_names_ = std::move(class_names);
}

bool is_bad_sample(const Status& status) {
    return status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kDataLoss;
}

std::string cache_root() {
    if (const char* dir = std::getenv("STRATO_CACHE_DIR"); dir && *dir) return dir;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/strato";
    if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/strato";
    return {};
}

Status channel_stats(const Dataset& ds, int64_t max_samples, std::vector<double>* mean, std::vector<double>* std) {
    const ImageShape s = ds.shape();
    const int64_t n = std::min(ds.size(), max_samples);
    if (n <= 0) return invalid_argument("cannot compute statistics of an empty dataset");
    std::vector<double> sum(static_cast<size_t>(s.channels)), sq(static_cast<size_t>(s.channels));
    std::vector<uint8_t> buf(static_cast<size_t>(s.numel()));
    const int64_t plane = s.height * s.width;
    int64_t used = n;
    for (int64_t k = 0; k < n; ++k) {
        int64_t idx = k * ds.size() / n;
        int64_t label;
        if (Status st = ds.load(idx, buf.data(), &label); !st.is_ok()) {
            // A corrupt image is the loader's business (data.on_bad_sample); the statistics
            // just leave it out.
            if (!is_bad_sample(st)) return st;
            --used;
            continue;
        }
        for (int64_t c = 0; c < s.channels; ++c) {
            double a = 0, b = 0;
            for (int64_t p = 0; p < plane; ++p) {
                double v = buf[static_cast<size_t>(c * plane + p)] / 255.0;
                a += v;
                b += v * v;
            }
            sum[static_cast<size_t>(c)] += a;
            sq[static_cast<size_t>(c)] += b;
        }
    }
    mean->assign(static_cast<size_t>(s.channels), 0.0);
    std->assign(static_cast<size_t>(s.channels), 1.0);
    if (used == 0) return invalid_argument("cannot compute statistics: none of the {} samples tried could be loaded", n);
    const double count = static_cast<double>(used * plane);
    for (size_t c = 0; c < sum.size(); ++c) {
        double m = sum[c] / count;
        (*mean)[c] = m;
        (*std)[c] = std::max(1e-6, std::sqrt(std::max(0.0, sq[c] / count - m * m)));
    }
    return Status::ok();
}

}  // namespace strato::data
