#include "strato/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace strato::data {
namespace {

constexpr uint64_t kIdxMaxBytes = uint64_t{16} << 30;  // 16 GiB: far above any IDX set, far below a wrap

uint32_t be32(const uint8_t* p) {
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Result<IdxArray> read_idx(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        return not_found("dataset file {} does not exist", path);
    }
    gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
    if (!f) return io_error("cannot open {}: {}", path, std::strerror(errno));
    gzbuffer(f, 1 << 20);
    // Reads up to n bytes; -1 on a corrupt stream.
    auto read = [&](uint8_t* dst, size_t n) -> int64_t {
        size_t got = 0;
        while (got < n) {
            int r = gzread(f, dst + got, static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30)));
            if (r < 0) return -1;
            if (r == 0) break;
            got += static_cast<size_t>(r);
        }
        return static_cast<int64_t>(got);
    };
    auto corrupt = [&]() {
        int err = 0;
        std::string msg = gzerror(f, &err);
        gzclose(f);
        return data_loss("{}: corrupt gzip stream ({})", path, msg);
    };
    uint8_t head[4 + 4 * 4];
    int64_t n = read(head, 4);
    if (n < 0) return corrupt();
    if (n < 4) {
        gzclose(f);
        return data_loss("{}: {} bytes, too short for an IDX header", path, n);
    }
    auto fail = [&](Status st) {
        gzclose(f);
        return st;
    };
    if (head[0] != 0 || head[1] != 0) {
        return fail(invalid_argument("{}: not an IDX file (magic {:02x}{:02x}{:02x}{:02x}, expected 0000TTNN)", path,
                                     head[0], head[1], head[2], head[3]));
    }
    if (head[2] != 0x08) {
        return fail(invalid_argument("{}: IDX element type 0x{:02x} is not supported (expected 0x08, unsigned byte)",
                                     path, head[2]));
    }
    const size_t ndim = head[3];
    if (ndim == 0 || ndim > 4) return fail(invalid_argument("{}: IDX header says {} dimensions, expected 1..4", path, ndim));
    n = read(head + 4, 4 * ndim);
    if (n < 0) return corrupt();
    if (n < static_cast<int64_t>(4 * ndim)) return fail(data_loss("{}: truncated IDX header", path));
    IdxArray out;
    uint64_t total = 1;
    for (size_t d = 0; d < ndim; ++d) {
        uint32_t v = be32(&head[4 + 4 * d]);
        out.dims.push_back(v);
        if (__builtin_mul_overflow(total, uint64_t{v}, &total) || total > kIdxMaxBytes) {
            return fail(invalid_argument("{}: IDX dimensions promise more than {} GiB of data (corrupt header?)", path,
                                         kIdxMaxBytes >> 30));
        }
    }
    // Read exactly what the header promises (so a corrupt header cannot make us swallow a huge
    // stream), then make sure nothing follows. The buffer grows with what arrives, so a corrupt
    // header on a short file fails with a clear message instead of allocating gigabytes first.
    constexpr uint64_t kStep = uint64_t{64} << 20;
    uint64_t got = 0;
    while (got < total) {
        const uint64_t step = std::min(total - got, kStep);
        out.data.resize(got + step);
        const int64_t r = read(out.data.data() + got, step);
        if (r < 0) return corrupt();
        got += static_cast<uint64_t>(r);
        if (static_cast<uint64_t>(r) < step) break;
    }
    out.data.resize(got);
    n = static_cast<int64_t>(got);
    uint8_t extra;
    const int64_t more = static_cast<uint64_t>(n) == total ? read(&extra, 1) : 0;
    if (more < 0) return corrupt();
    gzclose(f);
    if (static_cast<uint64_t>(n) != total || more > 0) {
        return data_loss("{}: IDX header promises {} bytes of data, file has {}{} (truncated or corrupt)", path, total,
                         n, more > 0 ? " and more" : "");
    }
    return out;
}

Result<std::shared_ptr<InMemoryDataset>> load_idx_dataset(const std::string& images_path,
                                                          const std::string& labels_path,
                                                          std::vector<std::string> class_names) {
    STRATO_ASSIGN_OR_RETURN(IdxArray images, read_idx(images_path));
    STRATO_ASSIGN_OR_RETURN(IdxArray labels, read_idx(labels_path));
    if (images.dims.size() != 3 && images.dims.size() != 4) {
        return invalid_argument("{}: expected images of shape [N, H, W] or [N, H, W, C], got {} dimensions",
                                images_path, images.dims.size());
    }
    if (labels.dims.size() != 1) {
        return invalid_argument("{}: expected labels of shape [N], got {} dimensions", labels_path, labels.dims.size());
    }
    if (images.dims[0] != labels.dims[0]) {
        return invalid_argument("{} has {} images but {} has {} labels", images_path, images.dims[0], labels_path,
                                labels.dims[0]);
    }
    ImageShape shape{images.dims.size() == 4 ? images.dims[3] : 1, images.dims[1], images.dims[2]};
    if (shape.numel() == 0) return invalid_argument("{}: images have a zero dimension", images_path);
    std::vector<uint8_t> pixels = std::move(images.data);
    if (shape.channels > 1) {  // HWC -> CHW
        std::vector<uint8_t> chw(pixels.size());
        const int64_t n = images.dims[0], plane = shape.height * shape.width;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t p = 0; p < plane; ++p)
                for (int64_t c = 0; c < shape.channels; ++c)
                    chw[static_cast<size_t>(i * shape.numel() + c * plane + p)] =
                        pixels[static_cast<size_t>(i * shape.numel() + p * shape.channels + c)];
        pixels = std::move(chw);
    }
    std::vector<int64_t> y(labels.data.begin(), labels.data.end());
    int64_t max_label = y.empty() ? -1 : *std::max_element(y.begin(), y.end());
    if (class_names.empty()) {
        for (int64_t c = 0; c <= max_label; ++c) class_names.push_back(std::to_string(c));
    }
    if (max_label >= static_cast<int64_t>(class_names.size())) {
        return invalid_argument("{}: label {} found, but there are only {} classes", labels_path, max_label,
                                class_names.size());
    }
    return std::make_shared<InMemoryDataset>(shape, std::move(pixels), std::move(y), std::move(class_names));
}

const std::vector<std::string>& fashion_mnist_classes() {
    static const std::vector<std::string> kNames = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    return kNames;
}

}  // namespace strato::data
