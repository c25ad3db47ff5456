#pragma once
// POSIX ustar archives: a writer for regular files (the members of a shard) and a reader that
// lists members with the offset of their data, so a member can later be read with one pread.
//
//   auto w = TarWriter::create("shard.tar.tmp").value();
//   int64_t offset = w->add("cat/001.jpg", bytes).value();  // where the bytes start in the file
//   w->finish();                                             // end blocks, fsync, close
//   std::string sha = w->sha256();                           // of everything written
//
//   auto members = list_tar_file("shard.tar").value();
//
// Writing is deterministic (mtime 0, uid/gid 0, mode 0644, no user names): the same members in
// the same order give the same bytes. Names up to 255 bytes use the ustar prefix field.
// Reading validates every header checksum, follows pax ("path", "size") and GNU long-name
// headers, skips directories, links and other non-regular entries, and reports a truncated or
// corrupt archive with the byte offset, never allocating more than the archive holds.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"

namespace strato::data {

constexpr int64_t kTarBlock = 512;

/// Bytes a regular-file member of `size` bytes takes in an archive: header plus padded data.
constexpr int64_t tar_member_bytes(int64_t size) { return kTarBlock + (size + kTarBlock - 1) / kTarBlock * kTarBlock; }
/// Bytes of the end-of-archive marker (two zero blocks).
constexpr int64_t kTarEndBytes = 2 * kTarBlock;

/// The 512-byte ustar header of a regular file. Errors: an empty name, a name longer than 255
/// bytes or one that cannot be split into a 155-byte directory prefix and a 100-byte rest, a
/// size that does not fit the 11 octal digits (8 GiB).
Result<std::string> tar_header(std::string_view name, int64_t size);

/// Streams regular files into a new archive file, computing its SHA-256 on the way.
/// Not thread-safe: one writer per thread.
class TarWriter {
  public:
    /// Creates (truncates) `path`.
    static Result<std::unique_ptr<TarWriter>> create(const std::string& path);
    ~TarWriter();
    TarWriter(const TarWriter&) = delete;
    TarWriter& operator=(const TarWriter&) = delete;

    /// Appends a member; returns the offset of its data in the archive.
    Result<int64_t> add(std::string_view name, std::string_view data);
    /// Writes the end-of-archive blocks, fsyncs and closes the file. Nothing may be added after.
    Status finish();

    int64_t bytes() const { return bytes_; }
    /// Hex SHA-256 of the whole archive; valid after finish().
    const std::string& sha256() const { return sha256_; }

  private:
    TarWriter() = default;
    Status write(std::string_view data);
    Status flush();
    Status write_fd(const char* p, size_t n);

    std::string path_;
    int fd_ = -1;
    int64_t bytes_ = 0;
    std::string buffer_;
    struct Hasher;
    std::unique_ptr<Hasher> hasher_;
    std::string sha256_;
};

/// A regular-file member found in an archive.
struct TarMember {
    std::string name;
    int64_t header_offset = 0;  // of its (last) header block
    int64_t data_offset = 0;    // of its first data byte
    int64_t size = 0;
};

/// Reads `n` bytes at `offset` of the archive into `dst`; an error when fewer are available.
using TarReadAt = std::function<Status(int64_t offset, int64_t n, char* dst)>;

/// Lists the regular files of an archive of `archive_bytes` bytes. `what` names the archive in
/// errors ("shards/shard-000003.tar").
Result<std::vector<TarMember>> list_tar(const TarReadAt& read_at, int64_t archive_bytes, const std::string& what);
/// The same over an archive in memory.
Result<std::vector<TarMember>> list_tar_bytes(std::string_view archive, const std::string& what);
/// The same over a file.
Result<std::vector<TarMember>> list_tar_file(const std::string& path);

}  // namespace strato::data
