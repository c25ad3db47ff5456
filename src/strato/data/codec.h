#pragma once
// Image decoding: JPEG with libjpeg-turbo, PNG with libpng, from bytes in memory.
//
// A JPEG can be decoded at a reduced scale M/8 straight from the DCT coefficients, and only a
// region of it: the rows above the region are skipped without colour conversion and the
// columns beside it without inverse DCT. A transform that needs a 224x224 crop of a 2000x1500
// photo asks for that region at its needed size and gets far less work than a full decode.
//
// Grayscale, RGB, YCbCr and CMYK/YCCK JPEGs and every PNG colour type come out as 1 or 3
// channels; the EXIF orientation of a JPEG is applied, so pixels are upright. Corrupt,
// truncated or oversized (> 64 megapixels) input is an error naming the sample, never a crash.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"

namespace strato::data {

/// An image file larger than this is not read: 64 megapixels (the decode limit) take at most
/// ~200 MB even as an uncompressed PNG; a bigger file is not an image sample (a disk image, a
/// sparse file, a video renamed .jpg) and reading it whole would exhaust memory.
inline constexpr uint64_t kMaxImageFileBytes = 512ull << 20;
/// Bigger headers are refused before anything is allocated for the pixels.
inline constexpr int64_t kMaxImagePixels = int64_t{64} << 20;

enum class ImageFormat { kJpeg, kPng };

struct ImageInfo {
    ImageFormat format = ImageFormat::kJpeg;
    int64_t width = 0, height = 0;  // upright (after EXIF orientation)
    int64_t channels = 0;           // in the file: 1 gray, 3 colour, 4 CMYK (JPEG) or with alpha (PNG: 2/4)
    int orientation = 1;            // EXIF orientation 1..8 (JPEG), 1 otherwise
};

/// Reads the header only.
Result<ImageInfo> probe_image(std::string_view bytes, const std::string& name);

/// An interleaved (HWC) 8-bit image.
struct Pixels {
    int64_t height = 0, width = 0, channels = 0;
    std::vector<uint8_t> data;
    uint8_t* row(int64_t y) { return data.data() + y * width * channels; }
    const uint8_t* row(int64_t y) const { return data.data() + y * width * channels; }
};

struct DecodeRequest {
    int64_t channels = 3;  // output: 1 (gray) or 3 (RGB)
    // Region of the upright image to decode; w == 0 or h == 0 means the whole image.
    int64_t x = 0, y = 0, w = 0, h = 0;
    // The smallest size the caller needs the region at: a JPEG is decoded at the smallest
    // scale M/8 that keeps the region at least this big. 0 = full resolution.
    int64_t min_w = 0, min_h = 0;
    // Fast integer IDCT and upsampling (as Pillow's default draft-free decode is not): a few
    // percent of PSNR for up to 30 % speed. Off = libjpeg's accurate IDCT and fancy upsampling.
    bool fast = true;
    // Damaged JPEG data that libjpeg decodes anyway, filling the rest with grey (its corrupt-data
    // warnings: a bad Huffman code, a premature end of a data segment, a marker where a restart
    // belongs, extraneous bytes) is an error, not only a file that ends early. For checking
    // (`strato data verify --decode`); training tolerates those warnings, as other readers do.
    bool strict = false;
};

struct Decoded {
    Pixels pixels;  // the region, at `scale` (about w*scale x h*scale pixels)
    double scale = 1.0;
};

Result<Decoded> decode_image(std::string_view bytes, const std::string& name, const DecodeRequest& request = {});

/// Checks that `bytes` are a whole image before they are stored somewhere (a pack): not empty,
/// a readable JPEG or PNG header, and the end of the image present (a JPEG's end-of-image
/// marker, a PNG's IEND chunk). A file lacking its end marker is accepted only if it decodes
/// as training would decode it. Cheap for whole files: the markers or chunks are walked, the
/// pixels are not decoded. Errors name `name` and say what was expected.
Status check_image_whole(std::string_view bytes, const std::string& name);
/// The same for bytes whose header `info` (probe_image's) was already read.
Status check_image_whole(std::string_view bytes, const std::string& name, const ImageInfo& info);

}  // namespace strato::data
