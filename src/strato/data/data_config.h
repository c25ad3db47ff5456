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
    std::string dataset = "fashion-mnist";  // fashion-mnist | idx | image-folder | shards | csv | synthetic
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
    // image-folder and shards: transforms per split (transforms.h), e.g.
    //   [data.train] transforms = ["random-resized-crop size=224", "hflip"]
    //   [data.test]  transforms = ["resize size=256", "center-crop size=224"]
    // Empty: resize to image_size.
    std::vector<std::string> train_transforms, test_transforms;
    bool fast_decode = true;       // libjpeg's fast IDCT and upsampling
    std::string cache = "none";    // none | encoded | decoded: keep samples in RAM after the first read
    int64_t cache_mb = 4096;       // per split
    std::string on_bad_sample = "error";  // error | skip: corrupt or non-image files
    int64_t shuffle_shards = 4;    // shards: shuffle samples within windows of this many shards
    // shards at an http(s):// path: the local cache (default $STRATO_CACHE_DIR/shards/<url hash>)
    std::string shard_cache_dir;
    int64_t shard_cache_mb = 16384;
    // csv: path/train.csv and path/test.csv, the label in this column
    std::string label_column = "label";
    // synthetic: random images of channels x image_size^2 (default 224) in `classes` classes,
    // limit_train (default 1024) and limit_test (default 256) of them, for throughput measurements
    int64_t classes = 1000;

    void visit(config::Visitor& v);
    /// image-folder and shards: image files of any size, decoded and brought to the model's input
    /// by the per-split transforms (the other kinds hold tensors of one shape).
    bool reads_image_files() const { return dataset == "image-folder" || dataset == "shards"; }
};

struct DataSplits {
    std::shared_ptr<Dataset> train;
    std::shared_ptr<Dataset> test;
    std::vector<double> mean;  // resolved normalisation
    std::vector<double> std;
};

/// Where fetched shards of the dataset at `url` are cached unless data.shard_cache_dir says:
/// $STRATO_CACHE_DIR (or the XDG cache)/shards/<hash of the URL>.
std::string default_shard_cache_dir(const std::string& url);

/// Opens the train and test splits the config names; resolves mean/std. `class_names`: an
/// image folder's classes in this order (a model's; folders matched by name, '/' as '_'), empty:
/// its sorted folder names.
Result<DataSplits> open_datasets(const DataConfig& cfg, const std::vector<std::string>& class_names = {});

/// Opens only the split a model is evaluated on, for a model that already knows its classes
/// (`class_names`, in its order; empty: the folders' sorted names) and normalisation (`mean`,
/// used where transforms pad). An image folder is evaluated on its test/ or val/ folder, or,
/// with neither nor a train/ folder, on the class folders directly under data.path; shards on
/// their test/ or val/ split. Other kinds open as open_datasets does.
Result<std::shared_ptr<Dataset>> open_evaluation_split(const DataConfig& cfg, const std::vector<std::string>& class_names,
                                                       const std::vector<double>& mean);

/// Loader options for training (shuffled, augmented) and evaluation (in order, plain).
LoaderOptions train_loader_options(const DataConfig& cfg, const DataSplits& splits, uint64_t seed);
LoaderOptions eval_loader_options(const DataConfig& cfg, const DataSplits& splits);

}  // namespace strato::data
