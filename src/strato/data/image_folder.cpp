#include "strato/data/image_folder.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "strato/core/fs.h"

namespace strato::data {
namespace stdfs = std::filesystem;
namespace {

bool has_image_extension(const stdfs::path& p) {
    std::string ext = p.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

constexpr int64_t kMaxPixels = int64_t{64} << 20;  // 64 megapixels: refuse bigger headers before allocating

Status check_size(const std::string& path, int64_t w, int64_t h) {
    if (w <= 0 || h <= 0 || w * h > kMaxPixels) {
        return invalid_argument("{}: image header says {}x{} pixels, more than the {} megapixel limit (corrupt?)", path, w,
                                h, kMaxPixels >> 20);
    }
    return Status::ok();
}

Image from_interleaved(const uint8_t* src, int64_t h, int64_t w, int64_t c) {
    Image img{{c, h, w}, std::vector<uint8_t>(static_cast<size_t>(c * h * w))};
    for (int64_t p = 0; p < h * w; ++p)
        for (int64_t k = 0; k < c; ++k) img.pixels[static_cast<size_t>(k * h * w + p)] = src[p * c + k];
    return img;
}

Result<Image> decode_png(const std::string& path, const std::string& bytes, int64_t channels) {
    png_image image;
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
        return invalid_argument("{}: not a readable PNG ({})", path, image.message);
    }
    if (Status st = check_size(path, image.width, image.height); !st.is_ok()) {
        png_image_free(&image);
        return st;
    }
    image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    std::vector<uint8_t> buf(PNG_IMAGE_SIZE(image));
    if (!png_image_finish_read(&image, nullptr, buf.data(), 0, nullptr)) {
        std::string msg = image.message;
        png_image_free(&image);
        return data_loss("{}: corrupt PNG ({})", path, msg);
    }
    return from_interleaved(buf.data(), image.height, image.width, channels);
}

Result<Image> decode_jpeg(const std::string& path, const std::string& bytes, int64_t channels) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return internal_error("cannot initialise libjpeg-turbo");
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    auto* src = reinterpret_cast<const unsigned char*>(bytes.data());
    if (tjDecompressHeader3(tj, src, bytes.size(), &w, &h, &subsamp, &colorspace) != 0) {
        std::string msg = tjGetErrorStr2(tj);
        tjDestroy(tj);
        return invalid_argument("{}: not a readable JPEG ({})", path, msg);
    }
    if (Status st = check_size(path, w, h); !st.is_ok()) {
        tjDestroy(tj);
        return st;
    }
    const int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
    std::vector<uint8_t> buf(static_cast<size_t>(w) * h * channels);
    int rc = tjDecompress2(tj, src, bytes.size(), buf.data(), w, 0, h, pf, TJFLAG_ACCURATEDCT);
    // NOTE: TurboJPEG returns -1 for warnings too ("extraneous bytes before marker"); such
    // images decode fine, as in every other JPEG reader.
    if (rc != 0 && tjGetErrorCode(tj) == TJERR_WARNING) rc = 0;
    std::string msg = rc != 0 ? tjGetErrorStr2(tj) : "";
    tjDestroy(tj);
    if (rc != 0) return data_loss("{}: corrupt JPEG ({})", path, msg);
    return from_interleaved(buf.data(), h, w, channels);
}

}  // namespace

Result<Image> decode_image_file(const std::string& path, int64_t channels) {
    if (channels != 1 && channels != 3) return invalid_argument("channels must be 1 or 3, got {}", channels);
    STRATO_ASSIGN_OR_RETURN(std::string bytes, fs::read_file(path));
    if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0) {
        return decode_png(path, bytes, channels);
    }
    if (bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF && static_cast<uint8_t>(bytes[1]) == 0xD8) {
        return decode_jpeg(path, bytes, channels);
    }
    return invalid_argument("{}: unknown image format (expected PNG or JPEG)", path);
}

Image resize_bilinear(const Image& src, int64_t height, int64_t width) {
    if (src.shape.height == height && src.shape.width == width) return src;
    const int64_t c = src.shape.channels, sh = src.shape.height, sw = src.shape.width;
    Image out{{c, height, width}, std::vector<uint8_t>(static_cast<size_t>(c * height * width))};
    const double sy = static_cast<double>(sh) / height, sx = static_cast<double>(sw) / width;
    for (int64_t y = 0; y < height; ++y) {
        double fy = std::clamp((y + 0.5) * sy - 0.5, 0.0, static_cast<double>(sh - 1));
        int64_t y0 = static_cast<int64_t>(fy), y1 = std::min(y0 + 1, sh - 1);
        double wy = fy - y0;
        for (int64_t x = 0; x < width; ++x) {
            double fx = std::clamp((x + 0.5) * sx - 0.5, 0.0, static_cast<double>(sw - 1));
            int64_t x0 = static_cast<int64_t>(fx), x1 = std::min(x0 + 1, sw - 1);
            double wx = fx - x0;
            for (int64_t k = 0; k < c; ++k) {
                const uint8_t* p = src.pixels.data() + k * sh * sw;
                double v = (1 - wy) * ((1 - wx) * p[y0 * sw + x0] + wx * p[y0 * sw + x1]) +
                           wy * ((1 - wx) * p[y1 * sw + x0] + wx * p[y1 * sw + x1]);
                out.pixels[static_cast<size_t>(k * height * width + y * width + x)] =
                    static_cast<uint8_t>(std::clamp(v + 0.5, 0.0, 255.0));
            }
        }
    }
    return out;
}

Result<std::shared_ptr<ImageFolderDataset>> ImageFolderDataset::open(const std::string& root, ImageShape shape,
                                                                     std::vector<std::string> class_names) {
    std::error_code ec;
    if (!stdfs::is_directory(root, ec)) return not_found("image folder {} does not exist or is not a directory", root);
    if (shape.channels != 1 && shape.channels != 3) {
        return invalid_argument("image folder {}: channels must be 1 or 3, got {}", root, shape.channels);
    }
    if (shape.height <= 0 || shape.width <= 0) {
        return invalid_argument("image folder {}: image size must be set (data.image_size)", root);
    }
    if (class_names.empty()) {
        for (const auto& e : stdfs::directory_iterator(root, ec))
            if (e.is_directory()) class_names.push_back(e.path().filename().string());
        std::sort(class_names.begin(), class_names.end());
    }
    if (class_names.empty()) return invalid_argument("image folder {} has no class subfolders", root);
    auto ds = std::shared_ptr<ImageFolderDataset>(new ImageFolderDataset());
    ds->shape_ = shape;
    ds->class_names_ = class_names;
    for (size_t c = 0; c < class_names.size(); ++c) {
        stdfs::path dir = stdfs::path(root) / class_names[c];
        if (!stdfs::is_directory(dir, ec)) continue;  // a split may miss a class
        std::vector<std::string> files;
        for (const auto& e : stdfs::directory_iterator(dir, ec))
            if (e.is_regular_file() && has_image_extension(e.path())) files.push_back(e.path().string());
        std::sort(files.begin(), files.end());
        for (auto& f : files) {
            ds->files_.push_back(std::move(f));
            ds->labels_.push_back(static_cast<int64_t>(c));
        }
    }
    if (ds->files_.empty()) return invalid_argument("image folder {} has no .png/.jpg images", root);
    return ds;
}

Status ImageFolderDataset::load(int64_t index, uint8_t* dst, int64_t* label) const {
    if (index < 0 || index >= size()) return invalid_argument("sample index {} out of range [0, {})", index, size());
    STRATO_ASSIGN_OR_RETURN(Image img, decode_image_file(files_[static_cast<size_t>(index)], shape_.channels));
    img = resize_bilinear(img, shape_.height, shape_.width);
    std::memcpy(dst, img.pixels.data(), img.pixels.size());
    *label = labels_[static_cast<size_t>(index)];
    return Status::ok();
}

}  // namespace strato::data
