#pragma once
// Image datasets: a SampleSource of encoded JPEG/PNG files (an image folder here, tar shards in
// shards.h) plus a transform pipeline (transforms.h) make a Dataset the loader batches.
//
// An image folder has one subfolder per class (`root/<class>/*.jpg|jpeg|png`), as torchvision's
// ImageFolder. Its index (the sorted file list) is cached under $STRATO_CACHE_DIR (default
// ~/.cache/strato) and reused while the modification times of the class folders and of every
// folder below them that holds images are unchanged, so opening a folder of a million files does
// not list it again. (A file added to a nested folder that held no images when indexed is missed
// until its parent changes.)

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "strato/data/codec.h"
#include "strato/data/dataset.h"
#include "strato/data/source.h"
#include "strato/data/transforms.h"

namespace strato::data {

class ImageFolderSource final : public SampleSource {
public:
    /// `class_names` empty: the sorted subfolder names. A split may lack some of the given
    /// classes (their folders missing or empty): they are reported by empty_classes(); a class
    /// folder not among them is an error. Files are listed as the packer lists them
    /// (index_image_folder in shards.h): recursively, .jpg/.jpeg/.png in any case.
    static Result<std::shared_ptr<ImageFolderSource>> open(const std::string& root,
                                                           std::vector<std::string> class_names = {});

    int64_t size() const override { return static_cast<int64_t>(files_.size()); }
    const std::vector<std::string>& class_names() const override { return class_names_; }
    int64_t label(int64_t index) const override { return labels_[static_cast<size_t>(index)]; }
    std::string name(int64_t index) const override;
    Status read(int64_t index, EncodedSample* out) const override;

    const std::string& root() const { return root_; }
    /// Relative path of sample `index` ("cat/001.jpg").
    const std::string& file(int64_t index) const { return files_[static_cast<size_t>(index)]; }
    /// Classes with no image in this folder.
    const std::vector<std::string>& empty_classes() const { return empty_classes_; }
    bool index_from_cache() const { return from_cache_; }

private:
    std::string root_;
    std::vector<std::string> files_;
    std::vector<int64_t> labels_;
    std::vector<std::string> class_names_;
    std::vector<std::string> empty_classes_;
    bool from_cache_ = false;
};

struct ImageDatasetOptions {
    ImageShape shape{3, 0, 0};  // channels; height/width 0: the size the transforms end at
    std::vector<std::string> transforms;  // transforms.h; empty: resize to shape
    std::string where = "data.transforms";  // the config key, for errors
    bool fast_decode = true;
    // Keep samples in RAM after their first read: "encoded" (file bytes: no disk or network
    // reads after the first epoch) or "decoded" (pixels: no decoding either; every image is then
    // decoded whole, so results do not depend on what is cached), up to cache_mb.
    std::string cache = "none";
    int64_t cache_mb = 4096;
};

class ImageDataset final : public Dataset {
public:
    static Result<std::shared_ptr<ImageDataset>> create(std::shared_ptr<const SampleSource> source,
                                                        ImageDatasetOptions options);

    int64_t size() const override { return source_->size(); }
    ImageShape shape() const override { return pipeline_->output(); }
    const std::vector<std::string>& class_names() const override { return source_->class_names(); }
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override { return load_random(index, 0, dst, label); }
    Status load_random(int64_t index, uint64_t seed, uint8_t* dst, int64_t* label) const override;
    std::vector<int64_t> group_starts() const override { return source_->group_starts(); }
    void will_read(const std::vector<int64_t>& order, int64_t from) const override { source_->will_read(order, from); }

    const SampleSource& source() const { return *source_; }
    Pipeline& pipeline() { return *pipeline_; }

    struct CacheStats {
        int64_t entries = 0, bytes = 0, hits = 0, misses = 0;
    };
    CacheStats cache_stats() const;

private:
    ImageDataset() = default;

    std::shared_ptr<const SampleSource> source_;
    std::shared_ptr<Pipeline> pipeline_;
    ImageDatasetOptions opts_;
    mutable std::mutex mu_;
    mutable std::unordered_map<int64_t, std::shared_ptr<const std::string>> encoded_;
    mutable std::unordered_map<int64_t, std::shared_ptr<const Pixels>> decoded_;
    mutable CacheStats cache_;
};

/// An image folder as a dataset (the source plus a pipeline).
Result<std::shared_ptr<ImageDataset>> open_image_folder(const std::string& root, ImageDatasetOptions options,
                                                        std::vector<std::string> class_names = {});

}  // namespace strato::data
