#pragma once
// The [data] section of a training config and the factory that opens the train/test splits.

#include <memory>
#include <string>
#include <vector>

#include "strato/core/config.h"
#include "strato/data/dataset.h"
#include "strato/data/loader.h"

namespace strato::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct DataConfig {
    std::string dataset = "fashion-mnist";  // fashion-mnist | idx | image-folder | synthetic
    std::string path = kFashionMnistDir;
    // idx: file names inside `path` (gzipped or plain)
    std::string train_images = "train-images-idx3-ubyte.gz";
    std::string train_labels = "train-labels-idx1-ubyte.gz";
    std::string test_images = "t10k-images-idx3-ubyte.gz";
    std::string test_labels = "t10k-labels-idx1-ubyte.gz";
    // image-folder: path/train/<class>/..., path/test/<class>/...
    int64_t image_size = 0;  // resize to image_size x image_size (image-folder)
    int64_t channels = 3;    // image-folder: 1 or 3
    int64_t batch_size = 128;
    int64_t eval_batch_size = 1000;
    int64_t workers = 2;
    int64_t prefetch = 4;
    bool shuffle = true;
    bool drop_last = false;
    std::vector<std::string> augment;  // hflip, random-crop
    int64_t crop_padding = 2;
    std::vector<double> mean;  // empty: computed from the training set
    std::vector<double> std;
    int64_t limit_train = 0;  // use only the first N training samples (0 = all); in-memory datasets
    int64_t limit_test = 0;
    // synthetic: random images of channels x image_size^2 (default 224) in `classes` classes,
    // limit_train (default 1024) and limit_test (default 256) of them, for throughput measurements
    int64_t classes = 1000;

    void visit(config::Visitor& v);
};

struct DataSplits {
    std::shared_ptr<Dataset> train;
    std::shared_ptr<Dataset> test;
    std::vector<double> mean;  // resolved normalisation
    std::vector<double> std;
};

/// Opens the train and test splits the config names; resolves mean/std.
Result<DataSplits> open_datasets(const DataConfig& cfg);

/// Loader options for training (shuffled, augmented) and evaluation (in order, plain).
LoaderOptions train_loader_options(const DataConfig& cfg, const DataSplits& splits, uint64_t seed);
LoaderOptions eval_loader_options(const DataConfig& cfg, const DataSplits& splits);

}  // namespace strato::data
