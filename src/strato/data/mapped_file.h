#pragma once
// A read-only memory map of a whole file: shards are hashed and parsed in place, without a copy.

#include <string>
#include <string_view>

#include "strato/core/status.h"

namespace strato::data {

/// Owns a read-only mapping of a file. Movable, not copyable.
class MappedFile {
  public:
    static Result<MappedFile> open(const std::string& path);
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }
    const std::string& path() const { return path_; }

  private:
    MappedFile() = default;
    std::string path_;
    void* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace strato::data
