#include "strato/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace strato::data {

Result<MappedFile> MappedFile::open(const std::string& path) {
    // Without blocking: a named pipe in a shard's place would hold open() for ever (and pack, which
    // reads finished shards on a resume, past SIGTERM). It is refused as no regular file below.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) return not_found("{} does not exist", path);
        return io_error("cannot open {}: {}", path, std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        Status s = io_error("cannot stat {}: {}", path, std::strerror(errno));
        ::close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return invalid_argument("{} is not a regular file", path);
    }
    MappedFile m;
    m.path_ = path;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ > 0) {
        void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            Status s = io_error("cannot map {}: {}", path, std::strerror(errno));
            ::close(fd);
            return s;
        }
        ::madvise(p, m.size_, MADV_SEQUENTIAL);
        m.data_ = p;
    }
    ::close(fd);
    return m;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        if (data_) ::munmap(data_, size_);
        path_ = std::move(other.path_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(data_, size_);
}

}  // namespace strato::data
