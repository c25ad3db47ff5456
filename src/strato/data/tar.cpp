#include "strato/data/tar.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace strato::data {
namespace {

constexpr int64_t kMaxMetaBytes = int64_t{1} << 20;  // pax and GNU long-name payloads
constexpr size_t kWriteBuffer = size_t{1} << 20;

// ustar header layout (POSIX.1-1988).
constexpr size_t kName = 0, kNameLen = 100;
constexpr size_t kMode = 100, kUid = 108, kGid = 116, kSize = 124, kMtime = 136, kChksum = 148;
constexpr size_t kType = 156, kMagic = 257, kVersion = 263, kPrefix = 345, kPrefixLen = 155;
// Old-GNU sparse files (type 'S'): "more sparse map blocks follow" flags of the header and of
// each extension block.
constexpr size_t kGnuIsExtended = 482, kGnuExtIsExtended = 504;

std::string os_error() { return std::strerror(errno); }

void put_octal(std::string& h, size_t at, size_t width, int64_t value) {
    // width-1 octal digits and a NUL.
    std::string digits = fmt::format("{:0{}o}", value, width - 1);
    std::memcpy(h.data() + at, digits.data(), width - 1);
    h[at + width - 1] = '\0';
}

std::string_view field(const char* block, size_t at, size_t len) {
    const char* p = block + at;
    size_t n = 0;
    while (n < len && p[n] != '\0') ++n;
    return {p, n};
}

/// An octal (or GNU base-256) numeric field; false when malformed.
bool parse_number(const char* block, size_t at, size_t len, int64_t* out) {
    const auto* p = reinterpret_cast<const unsigned char*>(block + at);
    if (p[0] & 0x80) {                   // GNU base-256: big-endian, top bit of the first byte is the marker
        if (p[0] == 0xff) return false;  // negative
        uint64_t v = p[0] & 0x7f;
        for (size_t i = 1; i < len; ++i) {
            if (v >> 55) return false;
            v = (v << 8) | p[i];
        }
        *out = static_cast<int64_t>(v);
        return v <= static_cast<uint64_t>(INT64_MAX);
    }
    size_t i = 0;
    while (i < len && p[i] == ' ') ++i;
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i, ++digits) {
        if (v >> 60) return false;
        v = v * 8 + (p[i] - '0');
    }
    for (; i < len; ++i)
        if (p[i] != ' ' && p[i] != '\0') return false;
    *out = static_cast<int64_t>(v);
    return true;
}

bool all_zero(const char* block) {
    for (int64_t i = 0; i < kTarBlock; ++i)
        if (block[i] != 0) return false;
    return true;
}

/// Applies the "path" and "size" records of a pax extended header.
Status parse_pax(std::string_view data, const std::string& what, int64_t offset, std::string* path, int64_t* size) {
    size_t pos = 0;
    while (pos < data.size()) {
        if (data[pos] == '\0') break;  // some writers pad with NULs
        size_t sp = data.find(' ', pos);
        size_t len = 0;
        bool ok = sp != std::string_view::npos && sp > pos;
        for (size_t i = pos; ok && i < sp; ++i) {
            if (data[i] < '0' || data[i] > '9' || len > data.size())
                ok = false;
            else
                len = len * 10 + static_cast<size_t>(data[i] - '0');
        }
        ok = ok && len > sp - pos + 2 && pos + len <= data.size() && data[pos + len - 1] == '\n';
        if (!ok) return data_loss("{}: malformed pax header record at offset {}", what, offset + kTarBlock + pos);
        std::string_view rec = data.substr(sp + 1, pos + len - 1 - (sp + 1));
        size_t eq = rec.find('=');
        if (eq != std::string_view::npos) {
            std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
            if (key == "path") *path = std::string(value);
            if (key == "size") {
                // At most 18 digits (< 10^18 fits int64_t); nothing else, and no sum before that is known.
                int64_t v = 0;
                const bool digits = !value.empty() && value.size() < 19 &&
                                    std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
                if (digits)
                    for (char c : value) v = v * 10 + (c - '0');
                if (!digits)
                    return data_loss("{}: pax header at offset {} has size '{}', expected a number", what, offset,
                                     value);
                *size = v;
            }
        }
        pos += len;
    }
    return Status::ok();
}

}  // namespace

Result<std::string> tar_header(std::string_view name, int64_t size) {
    if (name.empty()) return invalid_argument("tar member name is empty");
    if (name.find('\0') != std::string_view::npos)
        return invalid_argument("tar member name '{}' contains a NUL byte", name);
    if (size < 0 || size >= (int64_t{1} << 33)) {
        return invalid_argument("tar member '{}' is {} bytes; ustar allows up to 8 GiB - 1", name, size);
    }
    std::string_view prefix, rest = name;
    if (name.size() > kNameLen) {
        if (name.size() > kPrefixLen + 1 + kNameLen) {
            return invalid_argument(
                "tar member name '{}' is {} bytes; ustar allows 255 (a 155-byte directory prefix, "
                "'/', a 100-byte name)",
                name, name.size());
        }
        // The split is at a '/' with at most 155 bytes before it and 1..100 after it.
        size_t cut = std::string_view::npos;
        for (size_t i = name.size() - 1; i > 0; --i) {
            if (name[i] != '/') continue;
            if (name.size() - i - 1 > kNameLen) break;
            if (i <= kPrefixLen && i + 1 < name.size()) {
                cut = i;
                break;
            }
        }
        if (cut == std::string_view::npos) {
            return invalid_argument(
                "tar member name '{}' ({} bytes) cannot be stored in ustar: it needs a '/' with at "
                "most 155 bytes before it and at most 100 after it",
                name, name.size());
        }
        prefix = name.substr(0, cut);
        rest = name.substr(cut + 1);
    }
    std::string h(kTarBlock, '\0');
    std::memcpy(h.data() + kName, rest.data(), rest.size());
    put_octal(h, kMode, 8, 0644);
    put_octal(h, kUid, 8, 0);
    put_octal(h, kGid, 8, 0);
    put_octal(h, kSize, 12, size);
    put_octal(h, kMtime, 12, 0);
    h[kType] = '0';
    std::memcpy(h.data() + kMagic, "ustar", 6);  // with its NUL
    std::memcpy(h.data() + kVersion, "00", 2);
    if (!prefix.empty()) std::memcpy(h.data() + kPrefix, prefix.data(), prefix.size());
    std::memset(h.data() + kChksum, ' ', 8);
    int64_t sum = 0;
    for (unsigned char c : h) sum += c;
    std::string chk = fmt::format("{:06o}", sum);
    std::memcpy(h.data() + kChksum, chk.data(), 6);
    h[kChksum + 6] = '\0';
    h[kChksum + 7] = ' ';
    return h;
}

// ---- writer ---------------------------------------------------------------------------------

struct TarWriter::Hasher {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~Hasher() { EVP_MD_CTX_free(ctx); }
};

Result<std::unique_ptr<TarWriter>> TarWriter::create(const std::string& path) {
    auto w = std::unique_ptr<TarWriter>(new TarWriter());
    w->path_ = path;
    w->hasher_ = std::make_unique<Hasher>();
    if (!w->hasher_->ctx || EVP_DigestInit_ex(w->hasher_->ctx, EVP_sha256(), nullptr) != 1) {
        return internal_error("cannot initialise SHA-256");
    }
    w->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd_ < 0) return io_error("cannot create {}: {}", path, os_error());
    w->buffer_.reserve(kWriteBuffer);
    return w;
}

TarWriter::~TarWriter() {
    if (fd_ >= 0) ::close(fd_);
}

Status TarWriter::write_fd(const char* p, size_t left) {
    while (left > 0) {
        ssize_t n = ::write(fd_, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return io_error("cannot write {}: {}", path_, os_error());
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    return Status::ok();
}

Status TarWriter::flush() {
    Status st = write_fd(buffer_.data(), buffer_.size());
    buffer_.clear();
    return st;
}

Status TarWriter::write(std::string_view data) {
    if (fd_ < 0) return internal_error("{}: write after finish", path_);
    EVP_DigestUpdate(hasher_->ctx, data.data(), data.size());
    bytes_ += static_cast<int64_t>(data.size());
    if (buffer_.size() + data.size() > kWriteBuffer) STRATO_RETURN_IF_ERROR(flush());
    if (data.size() >= kWriteBuffer) return write_fd(data.data(), data.size());  // large: straight through
    buffer_.append(data);
    return Status::ok();
}

Result<int64_t> TarWriter::add(std::string_view name, std::string_view data) {
    STRATO_ASSIGN_OR_RETURN(std::string header, tar_header(name, static_cast<int64_t>(data.size())));
    STRATO_RETURN_IF_ERROR(write(header));
    const int64_t offset = bytes_;
    STRATO_RETURN_IF_ERROR(write(data));
    const int64_t pad =
        tar_member_bytes(static_cast<int64_t>(data.size())) - kTarBlock - static_cast<int64_t>(data.size());
    static const std::string kZeros(kTarBlock, '\0');
    STRATO_RETURN_IF_ERROR(write(std::string_view(kZeros).substr(0, static_cast<size_t>(pad))));
    return offset;
}

Status TarWriter::finish() {
    STRATO_RETURN_IF_ERROR(write(std::string(kTarEndBytes, '\0')));
    STRATO_RETURN_IF_ERROR(flush());
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(hasher_->ctx, digest, &len);
    static const char* kHex = "0123456789abcdef";
    sha256_.clear();
    for (unsigned int i = 0; i < len; ++i) {
        sha256_.push_back(kHex[digest[i] >> 4]);
        sha256_.push_back(kHex[digest[i] & 15]);
    }
    Status st = ::fsync(fd_) == 0 ? Status::ok() : io_error("cannot fsync {}: {}", path_, os_error());
    if (::close(fd_) != 0 && st.is_ok()) st = io_error("cannot close {}: {}", path_, os_error());
    fd_ = -1;
    return st;
}

// ---- reader ---------------------------------------------------------------------------------

Result<std::vector<TarMember>> list_tar(const TarReadAt& read_at, int64_t archive_bytes, const std::string& what) {
    std::vector<TarMember> out;
    char block[kTarBlock];
    std::string next_path;   // from a pax or GNU long-name header, for the next entry
    int64_t next_size = -1;  // from a pax header
    int64_t offset = 0;
    while (offset < archive_bytes) {
        if (archive_bytes - offset < kTarBlock) {
            return data_loss("{}: truncated at offset {}: a header needs 512 bytes, {} remain", what, offset,
                             archive_bytes - offset);
        }
        STRATO_RETURN_IF_ERROR(read_at(offset, kTarBlock, block));
        if (all_zero(block)) break;  // end of archive
        int64_t stored = 0;
        if (!parse_number(block, kChksum, 8, &stored)) {
            return data_loss(
                "{}: corrupt tar header at offset {}: the checksum field is not a number (not a tar file?)", what,
                offset);
        }
        int64_t unsigned_sum = 0, signed_sum = 0;
        for (int64_t i = 0; i < kTarBlock; ++i) {
            const bool in_chk = i >= static_cast<int64_t>(kChksum) && i < static_cast<int64_t>(kChksum) + 8;
            unsigned_sum += in_chk ? ' ' : static_cast<unsigned char>(block[i]);
            signed_sum += in_chk ? ' ' : static_cast<signed char>(block[i]);
        }
        if (stored != unsigned_sum && stored != signed_sum) {
            return data_loss("{}: corrupt tar header at offset {}: checksum {} but the header sums to {}", what, offset,
                             stored, unsigned_sum);
        }
        int64_t size = 0;
        if (!parse_number(block, kSize, 12, &size)) {
            return data_loss("{}: corrupt tar header at offset {}: the size field is not a number", what, offset);
        }
        const char type = block[kType];
        if (next_size >= 0 && (type == '0' || type == '\0' || type == '7')) size = next_size;
        int64_t data_offset = offset + kTarBlock;
        if (type == 'S' && block[kGnuIsExtended] != 0) {
            // An old-GNU sparse file (`tar --sparse --format=gnu`) with more than 4 regions: its
            // sparse map goes on in extension blocks between the header and the data, which
            // the size does not count; read as data, they put every later member off.
            char ext[kTarBlock];
            do {
                if (archive_bytes - data_offset < kTarBlock) {
                    return data_loss("{}: truncated at offset {}: the sparse file at offset {} needs another 512-byte "
                                     "sparse map block",
                                     what, data_offset, offset);
                }
                STRATO_RETURN_IF_ERROR(read_at(data_offset, kTarBlock, ext));
                data_offset += kTarBlock;
            } while (ext[kGnuExtIsExtended] != 0);
        }
        if (size > archive_bytes - data_offset) {
            return data_loss("{}: truncated: the entry at offset {} says {} bytes of data, {} remain", what, offset,
                             size, archive_bytes - data_offset);
        }
        const int64_t next = data_offset + (size + kTarBlock - 1) / kTarBlock * kTarBlock;
        if (type == 'x' || type == 'L') {
            if (size > kMaxMetaBytes) {
                return data_loss("{}: the {} header at offset {} is {} bytes, more than the 1 MiB allowed (corrupt?)",
                                 what, type == 'x' ? "pax" : "GNU long-name", offset, size);
            }
            std::string data(static_cast<size_t>(size), '\0');
            STRATO_RETURN_IF_ERROR(read_at(data_offset, size, data.data()));
            if (type == 'x') {
                STRATO_RETURN_IF_ERROR(parse_pax(data, what, offset, &next_path, &next_size));
            } else {
                next_path = std::string(field(data.data(), 0, data.size()));
            }
            offset = next;
            continue;
        }
        if (type == '0' || type == '\0' || type == '7') {
            std::string name;
            if (!next_path.empty()) {
                name = std::move(next_path);
            } else {
                std::string_view magic = field(block, kMagic, 6);
                std::string_view base = field(block, kName, kNameLen);
                std::string_view prefix = magic == "ustar" && std::memcmp(block + kMagic, "ustar\0", 6) == 0
                                              ? field(block, kPrefix, kPrefixLen)
                                              : std::string_view();
                name = prefix.empty() ? std::string(base) : fmt::format("{}/{}", prefix, base);
            }
            const bool is_dir = type == '\0' && !name.empty() && name.back() == '/';
            if (name.empty()) return data_loss("{}: the entry at offset {} has an empty name", what, offset);
            if (!is_dir) out.push_back({std::move(name), offset, data_offset, size});
        }
        // Directories, links, devices, FIFOs, global pax headers, GNU extensions: skipped.
        next_path.clear();
        next_size = -1;
        offset = next;
    }
    return out;
}

Result<std::vector<TarMember>> list_tar_bytes(std::string_view archive, const std::string& what) {
    auto read_at = [archive, &what](int64_t offset, int64_t n, char* dst) -> Status {
        if (offset < 0 || n < 0 || offset + n > static_cast<int64_t>(archive.size())) {
            return data_loss("{}: truncated: needs bytes {}..{}, the archive has {}", what, offset, offset + n,
                             archive.size());
        }
        std::memcpy(dst, archive.data() + offset, static_cast<size_t>(n));
        return Status::ok();
    };
    return list_tar(read_at, static_cast<int64_t>(archive.size()), what);
}

Result<std::vector<TarMember>> list_tar_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return (errno == ENOENT ? not_found("{} does not exist", path)
                                : io_error("cannot open {}: {}", path, os_error()));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        return io_error("cannot stat {}: {}", path, os_error());
    }
    auto read_at = [fd, &path](int64_t offset, int64_t n, char* dst) -> Status {
        int64_t done = 0;
        while (done < n) {
            ssize_t r = ::pread(fd, dst + done, static_cast<size_t>(n - done), offset + done);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return io_error("cannot read {}: {}", path, os_error());
            if (r == 0) return data_loss("{}: truncated at offset {}", path, offset + done);
            done += r;
        }
        return Status::ok();
    };
    auto members = list_tar(read_at, static_cast<int64_t>(st.st_size), path);
    ::close(fd);
    return members;
}

}  // namespace strato::data
