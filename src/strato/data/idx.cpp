#include "strato/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace strato::data {
namespace {

constexpr uint64_t kIdxMaxBytes = uint64_t{16} << 30;  // 16 GiB: far above any IDX set, far below a wrap

uint32_t be32(const uint8_t* p) {
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

/// The bytes of an IDX file, plain or gzip. A gzip file is read member by member (as gzip(1)
/// does: `cat a.gz b.gz` is one valid stream); what follows the last member must be nothing, as
/// zlib's gzread would skip any trailing garbage without a word. Offsets in errors are in the
/// file as stored.
class IdxStream {
  public:
    ~IdxStream() {
        if (gz_) inflateEnd(&zs_);
        if (f_) std::fclose(f_);
    }

    Status open(const std::string& path) {
        path_ = path;
        f_ = std::fopen(path.c_str(), "rb");
        if (!f_) return io_error("cannot open {}: {}", path, std::strerror(errno));
        in_.resize(size_t{1} << 20);
        STRATO_RETURN_IF_ERROR(fill(2));
        gz_ = avail_ >= 2 && in_[pos_] == 0x1f && in_[pos_ + 1] == 0x8b;
        if (gz_) {
            if (inflateInit2(&zs_, 15 + 16) != Z_OK) return internal_error("{}: cannot start zlib", path);
            member_start_ = 0;
        }
        return Status::ok();
    }

    /// Reads up to n bytes (fewer only at the end of the data).
    Result<size_t> read(uint8_t* dst, size_t n) { return gz_ ? read_gzip(dst, n) : read_plain(dst, n); }

  private:
    /// Makes at least `want` bytes available (fewer at the end of the file).
    Status fill(size_t want) {
        if (avail_ >= want || eof_) return Status::ok();
        std::memmove(in_.data(), in_.data() + pos_, avail_);
        pos_ = 0;
        while (avail_ < want && !eof_) {
            const size_t r = std::fread(in_.data() + avail_, 1, in_.size() - avail_, f_);
            if (r == 0) {
                if (std::ferror(f_)) return io_error("cannot read {}: {}", path_, std::strerror(errno));
                eof_ = true;
            }
            avail_ += r;
            file_pos_ += r;
        }
        return Status::ok();
    }
    /// The file offset of the next unconsumed byte.
    uint64_t offset() const { return file_pos_ - avail_; }

    Result<size_t> read_plain(uint8_t* dst, size_t n) {
        size_t got = 0;
        while (got < n) {
            STRATO_RETURN_IF_ERROR(fill(1));
            if (avail_ == 0) break;
            const size_t k = std::min(n - got, avail_);
            std::memcpy(dst + got, in_.data() + pos_, k);
            pos_ += k, avail_ -= k, got += k;
        }
        return got;
    }

    Result<size_t> read_gzip(uint8_t* dst, size_t n) {
        size_t got = 0;
        while (got < n && !done_) {
            STRATO_RETURN_IF_ERROR(fill(1));
            if (avail_ == 0) {
                return data_loss("{}: gzip stream truncated at offset {} (the member starting at offset {} has no "
                                 "end; expected its compressed data and 8-byte trailer)",
                                 path_, offset(), member_start_);
            }
            zs_.next_in = in_.data() + pos_;
            zs_.avail_in = static_cast<uInt>(std::min<size_t>(avail_, 1u << 30));
            zs_.next_out = dst + got;
            zs_.avail_out = static_cast<uInt>(std::min<size_t>(n - got, 1u << 30));
            const uInt in_before = zs_.avail_in, out_before = zs_.avail_out;
            const int ret = inflate(&zs_, Z_NO_FLUSH);
            const size_t used = in_before - zs_.avail_in;
            pos_ += used, avail_ -= used;
            got += out_before - zs_.avail_out;
            if (ret == Z_STREAM_END) {
                // The member's CRC-32 and length matched. Another member, or the end of the file.
                STRATO_RETURN_IF_ERROR(fill(2));
                if (avail_ == 0) {
                    done_ = true;
                } else if (avail_ >= 2 && in_[pos_] == 0x1f && in_[pos_ + 1] == 0x8b) {
                    member_start_ = offset();
                    inflateReset(&zs_);
                } else {
                    std::error_code ec;
                    const auto size = std::filesystem::file_size(path_, ec);
                    return data_loss("{}: {} bytes of trailing data at offset {} after the last gzip member "
                                     "(expected the end of the file or another gzip member; corrupt or "
                                     "concatenated with something else?)",
                                     path_, ec ? avail_ : size - offset(), offset());
                }
            } else if ((ret != Z_OK && ret != Z_BUF_ERROR) || (used == 0 && zs_.avail_out == out_before)) {
                return data_loss("{}: corrupt gzip stream near offset {} ({})", path_, offset(),
                                 zs_.msg ? zs_.msg : zError(ret));
            }
        }
        return got;
    }

    std::string path_;
    std::FILE* f_ = nullptr;
    bool gz_ = false, eof_ = false, done_ = false;
    z_stream zs_{};
    std::vector<uint8_t> in_;
    size_t pos_ = 0, avail_ = 0;
    uint64_t file_pos_ = 0, member_start_ = 0;
};

}  // namespace

Result<IdxArray> read_idx(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        return not_found("dataset file {} does not exist", path);
    }
    IdxStream f;
    STRATO_RETURN_IF_ERROR(f.open(path));
    uint8_t head[4 + 4 * 4];
    STRATO_ASSIGN_OR_RETURN(size_t n, f.read(head, 4));
    if (n < 4) return data_loss("{}: {} bytes, too short for an IDX header", path, n);
    if (head[0] != 0 || head[1] != 0) {
        return invalid_argument("{}: not an IDX file (magic {:02x}{:02x}{:02x}{:02x}, expected 0000TTNN)", path,
                                head[0], head[1], head[2], head[3]);
    }
    if (head[2] != 0x08) {
        return invalid_argument("{}: IDX element type 0x{:02x} is not supported (expected 0x08, unsigned byte)", path,
                                head[2]);
    }
    const size_t ndim = head[3];
    if (ndim == 0 || ndim > 4) return invalid_argument("{}: IDX header says {} dimensions, expected 1..4", path, ndim);
    STRATO_ASSIGN_OR_RETURN(n, f.read(head + 4, 4 * ndim));
    if (n < 4 * ndim) return data_loss("{}: truncated IDX header", path);
    IdxArray out;
    uint64_t total = 1;
    for (size_t d = 0; d < ndim; ++d) {
        uint32_t v = be32(&head[4 + 4 * d]);
        out.dims.push_back(v);
        if (__builtin_mul_overflow(total, uint64_t{v}, &total) || total > kIdxMaxBytes) {
            return invalid_argument("{}: IDX dimensions promise more than {} GiB of data (corrupt header?)", path,
                                    kIdxMaxBytes >> 30);
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
        STRATO_ASSIGN_OR_RETURN(const size_t r, f.read(out.data.data() + got, step));
        got += r;
        if (r < step) break;
    }
    out.data.resize(got);
    uint8_t extra;
    size_t more = 0;
    if (got == total) {
        STRATO_ASSIGN_OR_RETURN(more, f.read(&extra, 1));
    }
    if (got != total || more > 0) {
        return data_loss("{}: IDX header promises {} bytes of data, file has {}{} (truncated or corrupt)", path, total,
                         got, more > 0 ? " and more" : "");
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
    // (found by review: an empty split went on to "loader: the dataset is empty", naming no file)
    if (images.dims[0] == 0) return invalid_argument("{}: holds no images (its IDX header says 0)", images_path);
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
