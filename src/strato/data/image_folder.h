#pragma once
// A folder of images with one subfolder per class (`root/<class>/*.png|jpg`), as torchvision's
// ImageFolder. Images are decoded on demand (PNG with libpng, JPEG with libjpeg-turbo) and
// resized bilinearly to a fixed shape. The file index is built once, sorted, so it is stable.

#include <string>
#include <vector>

#include "strato/data/dataset.h"

namespace strato::data {

/// Decoded image, CHW uint8.
struct Image {
    ImageShape shape;
    std::vector<uint8_t> pixels;
};

/// Decodes a PNG or JPEG file to `channels` channels (1 = gray, 3 = RGB).
Result<Image> decode_image_file(const std::string& path, int64_t channels);
/// Bilinear resize of a CHW image.
Image resize_bilinear(const Image& src, int64_t height, int64_t width);

class ImageFolderDataset final : public Dataset {
public:
    /// `shape` fixes channels and size; every image is converted to it.
    static Result<std::shared_ptr<ImageFolderDataset>> open(const std::string& root, ImageShape shape,
                                                            std::vector<std::string> class_names = {});

    int64_t size() const override { return static_cast<int64_t>(files_.size()); }
    ImageShape shape() const override { return shape_; }
    const std::vector<std::string>& class_names() const override { return class_names_; }
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override;

private:
    ImageShape shape_;
    std::vector<std::string> files_;
    std::vector<int64_t> labels_;
    std::vector<std::string> class_names_;
};

}  // namespace strato::data
