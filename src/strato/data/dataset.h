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
    int64_t num_classes() const { return static_cast<int64_t>(class_names().size()); }
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

private:
    ImageShape shape_;
    std::vector<uint8_t> pixels_;
    std::vector<int64_t> labels_;
    std::vector<std::string> class_names_;
};

/// Per-channel mean and standard deviation of pixel values scaled to [0, 1], over up to
/// `max_samples` samples spread evenly over the dataset.
Status channel_stats(const Dataset& ds, int64_t max_samples, std::vector<double>* mean, std::vector<double>* std);

}  // namespace strato::data
