// libFuzzer target for the image decode wrapper (codec.h) and the transform pipeline: any
// bytes must give an image or a clean error — no crash, leak, overflow or huge allocation.
// The input is the file; the regions, scales and channel counts tried derive from its size.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "strato/data/codec.h"
#include "strato/data/transforms.h"

using namespace strato::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    auto info = probe_image(bytes, "fuzz");
    for (int64_t channels : {1, 3}) {
        DecodeRequest req;
        req.channels = channels;
        req.fast = (size & 1) != 0;
        (void)decode_image(bytes, "fuzz", req);
        if (!info.is_ok()) continue;
        // A region inside the image at a reduced scale, and one touching the far corner.
        req.x = info->width / 3, req.y = info->height / 4;
        req.w = std::max<int64_t>(1, info->width / 2), req.h = std::max<int64_t>(1, info->height / 2);
        req.min_w = 1 + static_cast<int64_t>(size % 7), req.min_h = 1 + static_cast<int64_t>(size % 5);
        (void)decode_image(bytes, "fuzz", req);
        req.x = info->width - 1, req.y = info->height - 1, req.w = 1, req.h = 1, req.min_w = req.min_h = 0;
        (void)decode_image(bytes, "fuzz", req);
    }
    static auto pipeline = Pipeline::parse({"random-resized-crop size=16", "hflip", "color-jitter brightness=0.3 hue=0.1",
                                            "random-erasing p=0.5"},
                                           {3, 0, 0}, "fuzz")
                               .value();
    std::vector<uint8_t> out(static_cast<size_t>(pipeline->output().numel()));
    (void)pipeline->run(bytes, "fuzz", size, out.data());
    return 0;
}
