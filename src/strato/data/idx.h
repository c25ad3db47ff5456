#pragma once
// IDX files (the MNIST format), plain or gzipped: big-endian magic 0x000008TT|ndim, then ndim
// big-endian uint32 dimensions, then the data. Only unsigned-byte data (type 0x08) is read.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/data/dataset.h"

namespace strato::data {

struct IdxArray {
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
};

/// Reads an IDX file; `.gz` or not is detected from the content. Errors name the file and what
/// is wrong (bad magic, truncated data, dimensions that do not match the size).
Result<IdxArray> read_idx(const std::string& path);

/// Images [N, H, W] and labels [N] into a dataset; checks that N agrees and labels < num_classes.
Result<std::shared_ptr<InMemoryDataset>> load_idx_dataset(const std::string& images_path,
                                                          const std::string& labels_path,
                                                          std::vector<std::string> class_names);

/// The ten Fashion-MNIST class names, in label order.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace strato::data
