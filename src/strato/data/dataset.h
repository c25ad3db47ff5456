#pragma once
// Datasets of fixed-shape uint8 images with integer labels. Loading is separated from batching
// (loader.h) so every dataset gets the same threaded, deterministic, resumable loader.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strato/core/status.h"

namespace strato::data {

struct ImageShape {
    int64_t channels = 1;
    int64_t height = 0;
    int64_t width = 0;
    int64_t numel() const { return channels * height * width; }
    bool operator==(const ImageShape&) const = default;
};

/// A labelled image dataset. `load` writes sample i as CHW uint8 into `dst` (shape().numel()
/// bytes). Implementations are safe to call from several threads at once.
class Dataset {
public:
    virtual ~Dataset() = default;
    virtual int64_t size() const = 0;
    virtual ImageShape shape() const = 0;
    virtual const std::vector<std::string>& class_names() const = 0;
    virtual Status load(int64_t index, uint8_t* dst, int64_t* label) const = 0;
    /// As load, with random transforms drawn from `seed` (the loader derives it from the seed,
    /// epoch and position, so it does not depend on threads or timing). Datasets without random
    /// transforms ignore it.
    virtual Status load_random(int64_t index, uint64_t seed, uint8_t* dst, int64_t* label) const {
        (void)seed;
        return load(index, dst, label);
    }
    /// Contiguous index ranges cheaper to read together (shards): their first indices, from 0.
    /// Empty when access is uniformly cheap. The loader shuffles groups, then within groups.
    virtual std::vector<int64_t> group_starts() const { return {}; }
    /// A hint: samples will be loaded in `order` from position `from` (remote data fetches ahead).
    virtual void will_read(const std::vector<int64_t>& order, int64_t from) const {
        (void)order;
        (void)from;
    }
    int64_t num_classes() const { return static_cast<int64_t>(class_names().size()); }
    /// True for datasets of float features (CSV tables): load_float, not load, gives the samples.
    virtual bool is_float() const { return false; }
    /// Writes sample `index` as shape().numel() floats into `dst`.
    virtual Status load_float(int64_t index, float* dst, int64_t* label) const {
        (void)index;
        (void)dst;
        (void)label;
        return {StatusCode::kUnimplemented, "this dataset has uint8 images, not float features (use load)"};
    }
};

/// A dataset held in memory (IDX files, small folders).
class InMemoryDataset final : public Dataset {
public:
    InMemoryDataset(ImageShape shape, std::vector<uint8_t> pixels, std::vector<int64_t> labels,
                    std::vector<std::string> class_names);

    int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
    ImageShape shape() const override { return shape_; }
    const std::vector<std::string>& class_names() const override { return class_names_; }
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override;

    const std::vector<uint8_t>& pixels() const { return pixels_; }
    const std::vector<int64_t>& labels() const { return labels_; }
    /// Keeps the first n samples (n <= size()).
    void truncate(int64_t n);
    /// Renumbers the classes: a sample of class c becomes class to[c], and the classes are named
    /// `class_names` (to.size() == num_classes(); every to[c] < class_names.size()).
    void relabel(const std::vector<int64_t>& to, std::vector<std::string> class_names);

private:
    ImageShape shape_;
    std::vector<uint8_t> pixels_;
    std::vector<int64_t> labels_;
    std::vector<std::string> class_names_;
};

/// True for a sample that cannot be decoded (corrupt, truncated, not an image): the errors
/// `data.on_bad_sample = "skip"` passes over. A missing file or an unreachable server is not.
bool is_bad_sample(const Status& status);

/// Where strato keeps caches (image folder indexes, remote shards): $STRATO_CACHE_DIR, else
/// $XDG_CACHE_HOME/strato, else ~/.cache/strato; empty when none of them is set.
std::string cache_root();

/// Per-channel mean and standard deviation of pixel values scaled to [0, 1], over up to
/// `max_samples` samples spread evenly over the dataset.
Status channel_stats(const Dataset& ds, int64_t max_samples, std::vector<double>* mean, std::vector<double>* std);

}  // namespace strato::data
