#pragma once
// Image transforms, torchvision-style, configured as short strings:
//
//   "random-resized-crop size=224 scale=0.08,1 ratio=0.75,1.3333"
//   "resize size=256"            shorter side to 256 (size=H,W: exactly H x W)
//   "center-crop size=224"
//   "random-crop size=32 padding=4"
//   "hflip p=0.5"
//   "color-jitter brightness=0.4 contrast=0.4 saturation=0.4 hue=0.1"
//   "grayscale p=0.1"            (random grayscale; the channel count stays)
//   "random-erasing p=0.5 scale=0.02,0.33 ratio=0.3,3.3 value=mean|random|0"
//
// Normalisation and the uint8 → float conversion are not transforms here: the loader fuses
// them into batch assembly (data.mean / data.std).
//
// Geometry is planned before decoding. The geometric transforms (resize, crops, flip) only
// move a rectangle over the source image; the pipeline then decodes just that rectangle, at the
// smallest JPEG DCT scale that keeps it at least as big as the output, and resamples it once
// (separable, antialiased when shrinking, like Pillow's bilinear). Pixel transforms run after
// the geometry, in their listed order. Random choices come from the sample's seed alone, so a
// sample is transformed identically whatever thread or run decodes it.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"
#include "strato/data/codec.h"
#include "strato/data/dataset.h"

namespace strato::data {

/// Resizes an HWC image (bilinear, antialiased when shrinking). Writes `out` (resized).
void resize(const Pixels& src, int64_t height, int64_t width, Pixels* out);

class Pipeline {
public:
    /// Parses transform strings. `output` is the dataset's sample shape: the transforms must end
    /// at exactly that size (the last geometric one fixes it); with no transforms the image is
    /// resized to it. `where` names the config key in errors ("data.train.transforms"), `size_key`
    /// the setting that gives `output`'s size.
    static Result<std::shared_ptr<Pipeline>> parse(const std::vector<std::string>& specs, ImageShape output,
                                                   const std::string& where,
                                                   const std::string& size_key = "data.image_size");

    /// Checks one transform string alone (name, keys, values), as parse() does; for a command
    /// line's flag, where the whole list is checked later. Errors start with `where`.
    static Status check_spec(const std::string& spec, const std::string& where);

    /// Decodes `bytes` and writes the transformed CHW image into `dst` (output().numel() bytes).
    /// `seed` drives every random choice.
    Status run(std::string_view bytes, const std::string& name, uint64_t seed, uint8_t* dst) const;
    /// Same from already decoded, upright, full-size pixels (the in-RAM decoded cache).
    Status run(const Pixels& decoded, uint64_t seed, uint8_t* dst) const;

    ImageShape output() const { return output_; }
    bool random() const;  // any random transform
    /// Per-channel mean on [0, 1], the fill of random-erasing value=mean (normalised: 0).
    void set_mean(const std::vector<double>& mean);
    /// false: decode with libjpeg's accurate IDCT and fancy upsampling (slower).
    void set_fast_decode(bool fast) { fast_ = fast; }
    /// true: always decode the whole image at full scale (so results equal those of run(Pixels)).
    void set_full_decode(bool full) { full_decode_ = full; }

    struct Op;

private:
    Pipeline() = default;
    struct Plan;
    Status execute(const Plan& plan, int64_t ox0, int64_t oy0, int64_t ox1, int64_t oy1, const Pixels& region, uint64_t seed,
                   uint8_t* dst) const;
    Plan plan(int64_t width, int64_t height, uint64_t seed) const;

    std::vector<std::shared_ptr<const Op>> ops_;
    ImageShape output_;
    std::vector<uint8_t> fill_;  // random-erasing value=mean, per channel
    bool fast_ = true;
    bool full_decode_ = false;
};

}  // namespace strato::data
