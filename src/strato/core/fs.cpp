#include "strato/core/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <poll.h>
#include <sys/stat.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <limits>
#include <memory>

#include "strato/core/parse.h"
#include "strato/core/signals.h"

namespace strato::fs {
namespace {

// How long a named pipe may wait for its writer to begin (`<(cmd)` is a pipe already written to).
constexpr int kPipeWriterWaitMs = 5000;

std::string os_error() { return std::strerror(errno); }

Status write_all(int fd, std::string_view data, const stdfs::path& path) {
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return io_error("cannot write {}: {}", path.string(), os_error());
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    return Status::ok();
}

}  // namespace

Status fsync_dir(const stdfs::path& dir) {
    int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open directory {}: {}", dir.string(), os_error());
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) return io_error("cannot fsync directory {}: {}", dir.string(), os_error());
    return Status::ok();
}

Status fsync_file(const stdfs::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open {}: {}", path.string(), os_error());
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) return io_error("cannot fsync {}: {}", path.string(), os_error());
    return Status::ok();
}

Result<stdfs::path> follow_links(const stdfs::path& path) {
    std::error_code ec;
    stdfs::path out = path;
    for (int hops = 0; stdfs::is_symlink(out, ec); ++hops) {
        const stdfs::path to = stdfs::read_symlink(out, ec);
        if (ec || hops == 40)
            return invalid_argument("{}: cannot follow the symbolic link{}", path.string(), ec ? ": " + ec.message() : " (a loop)");
        // As the kernel's fs.protected_symlinks (which a readlink-and-open bypasses): in a sticky,
        // world-writable directory (/tmp) a link of another user is not followed -- planted there,
        // it would turn a write to /tmp/out.json into one over the caller's own files.
        struct stat link {}, dir {};
        const stdfs::path parent = out.parent_path().empty() ? stdfs::path(".") : out.parent_path();
        if (::lstat(out.c_str(), &link) == 0 && ::stat(parent.c_str(), &dir) == 0 && (dir.st_mode & S_ISVTX) &&
            (dir.st_mode & S_IWOTH) && link.st_uid != ::geteuid() && link.st_uid != dir.st_uid)
            return invalid_argument("{}: not following the symbolic link {}: another user's link in the shared "
                                    "directory {}", path.string(), out.string(), parent.string());
        out = to.is_absolute() ? to : out.parent_path() / to;
    }
    return out;
}

bool is_stdout(const stdfs::path& path) {
    const std::string& p = path.native();
    return p == "-" || p == "/dev/stdout" || p == "/dev/fd/1" || p == "/proc/self/fd/1";
}

bool is_stream(const stdfs::path& path) {
    if (is_stdout(path)) return true;
    struct stat sb {};
    return ::stat(path.c_str(), &sb) == 0 && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode));
}

Status atomic_write(const stdfs::path& link, std::string_view data) {
    if (is_stdout(link)) {
        // (found by review: `--json -` made a file named "-"; `--json /dev/stdout > out.json`
        // renamed a new file over the one the shell opened, and `>>` lost the earlier lines)
        std::fflush(stdout);
        return write_all(STDOUT_FILENO, data, "standard output");
    }
    if (is_stream(link)) {
        // (found by review: a temporary file beside /proc/self/fd/pipe:[...] could not be made, and
        // a load test's results piped to jq were lost after the run)
        const int fd = ::open(link.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) return io_error("cannot open {}: {}", link.string(), os_error());
        Status st = write_all(fd, data, link);
        if (::close(fd) != 0 && st.is_ok()) st = io_error("cannot close {}: {}", link.string(), os_error());
        return st;
    }
    // (renamed over, a link became a file of its own and the file it named kept the old data)
    STRATO_ASSIGN_OR_RETURN(const stdfs::path path, follow_links(link));
    stdfs::path dir = path.parent_path();
    stdfs::path tmp = path;
    // Unique per call, not only per process: two writers of one path in one process (two data
    // stores sharing a cache) must not rename each other's file away.
    static std::atomic<uint64_t> counter{0};
    tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error("cannot create {}: {}", tmp.string(), os_error());
    Status st = write_all(fd, data, tmp);
    if (st.is_ok() && ::fsync(fd) != 0) st = io_error("cannot fsync {}: {}", tmp.string(), os_error());
    if (::close(fd) != 0 && st.is_ok()) st = io_error("cannot close {}: {}", tmp.string(), os_error());
    if (st.is_ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
        st = io_error("cannot rename {} to {}: {}", tmp.string(), path.string(), os_error());
    }
    if (!st.is_ok()) {
        ::unlink(tmp.c_str());
        return st;
    }
    return fsync_dir(dir);
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
}

DirLock::~DirLock() {
    if (fd_ >= 0) ::close(fd_);
}

Result<DirLock> lock_dir(const stdfs::path& dir) {
    std::error_code ec;
    stdfs::path d = stdfs::absolute(dir, ec).lexically_normal();  // "out/" and "./out" lock "out"
    if (d.filename().empty()) d = d.parent_path();
    // Links resolved: a symlink to the directory (or to a folder above it) is another name for the
    // same directory, and its lock must be the same file (two runs wrote one directory at once).
    if (stdfs::path real = stdfs::weakly_canonical(d, ec); !ec && !real.empty()) d = real.lexically_normal();
    if (d.filename().empty()) d = d.parent_path();
    // A file where the directory belongs fails whatever would use it: before its lock file is
    // made beside it (a `.name.lock` was left behind).
    if (stdfs::exists(d, ec) && !stdfs::is_directory(d, ec))
        return invalid_argument("{} is not a directory (a file of that name is in the way)", dir.string());
    const stdfs::path parent = d.parent_path();
    STRATO_RETURN_IF_ERROR(ensure_dir(parent));
    return lock_file(parent / fmt::format(".{}.lock", d.filename().string()), dir.string());
}

Result<DirLock> lock_file(const stdfs::path& lock, const std::string& what) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return io_error("cannot create the lock file {}: {}", lock.string(), os_error());
    DirLock held(fd);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char buf[24] = {};
        const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
        std::string_view text(buf, n > 0 ? static_cast<size_t>(n) : 0);
        text = trim_blanks(text.substr(0, text.find('\n')));
        return Status(StatusCode::kAlreadyExists, fmt::format("{} is in use by another strato process (pid {})", what,
                                                              text.empty() ? "?" : std::string(text)));
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
        // (the lock holds without it; a refused process then names no pid)
    }
    return held;
}

Status check_regular_file(const stdfs::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return not_found("{} does not exist", path.string());
        return io_error("cannot stat {}: {}", path.string(), os_error());
    }
    if (S_ISDIR(st.st_mode)) return invalid_argument("{} is a directory, expected a file", path.string());
    if (!S_ISREG(st.st_mode))
        return invalid_argument("{} is a {}, expected a regular file", path.string(),
                                S_ISFIFO(st.st_mode) ? "named pipe" : S_ISSOCK(st.st_mode) ? "socket" : "device");
    return Status::ok();
}

Result<std::string> read_file(const stdfs::path& path, uint64_t max_bytes) {
    // Opened without blocking: a named pipe with no writer would hold open() forever (a FIFO left
    // in a run directory hung `strato report`).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) return not_found("{} does not exist", path.string());
        return io_error("cannot open {}: {}", path.string(), os_error());
    }
    auto closer = std::unique_ptr<const int, void (*)(const int*)>(&fd, [](const int* f) { ::close(*f); });
    struct stat st {};
    if (::fstat(fd, &st) != 0) return io_error("cannot stat {}: {}", path.string(), os_error());
    if (S_ISDIR(st.st_mode)) return invalid_argument("{} is a directory, expected a file", path.string());
    std::string head;  // what a pipe's first read brought
    if (S_ISFIFO(st.st_mode)) {
        // A read that does not block tells a pipe with a writer (bytes, or "try again": it is
        // still working, however long) from one without (end of file at once): only that one
        // waits, kPipeWriterWaitMs at most, for a writer to begin.
        char buf[4096];
        ssize_t n = 0;
        do n = ::read(fd, buf, sizeof buf);
        while (n < 0 && errno == EINTR);
        if (n > 0) {
            head.assign(buf, static_cast<size_t>(n));
        } else if (n == 0) {
            pollfd p{fd, POLLIN, 0};
            int ready = 0;
            do ready = ::poll(&p, 1, kPipeWriterWaitMs);
            while (ready < 0 && errno == EINTR);
            if (ready == 0)
                return io_error("{} is a named pipe and nothing wrote to it within {} s", path.string(),
                                kPipeWriterWaitMs / 1000);
        } else if (errno != EAGAIN) {
            return io_error("cannot read {}: {}", path.string(), os_error());
        }
    }
    if (const int flags = ::fcntl(fd, F_GETFL); flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    const bool regular = S_ISREG(st.st_mode);
    const uint64_t limit = regular ? max_bytes : std::min(max_bytes, kStreamReadLimit);
    auto too_big = [&] {
        return invalid_argument("{} is larger than {}, more than such a file can be (is it the right file?)",
                                path.string(),
                                limit >= (1u << 20) ? fmt::format("{} MiB", limit >> 20) : fmt::format("{} bytes", limit));
    };
    if (regular && static_cast<uint64_t>(st.st_size) > limit) return too_big();
    std::string data = std::move(head);
    try {
        // st_size is a hint only: /proc files say 0, a growing log says less than it holds, a
        // sparse file says more than memory holds (then the read fails at the allocation below).
        if (regular && st.st_size > 0) data.reserve(static_cast<size_t>(std::min<uint64_t>(st.st_size, 1ull << 30)));
        char buf[1 << 16];
        for (;;) {
            const ssize_t n = ::read(fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return io_error("cannot read {}: {}", path.string(), os_error());
            if (n == 0) return data;
            if (data.size() + static_cast<uint64_t>(n) > limit) return too_big();
            data.append(buf, static_cast<size_t>(n));
        }
    } catch (const std::bad_alloc&) {
        return io_error("cannot read {}: out of memory after {} MiB", path.string(), data.size() >> 20);
    }
}

Status replace_dir(const stdfs::path& staged, const stdfs::path& target) {
    const stdfs::path parent = target.parent_path().empty() ? stdfs::path(".") : target.parent_path();
    if (::rename(staged.c_str(), target.c_str()) != 0) {  // fails when `target` is a non-empty directory
        if (errno != ENOTEMPTY && errno != EEXIST)
            return io_error("cannot move {} to {}: {}", staged.string(), target.string(), os_error());
        if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
            if (errno != EINVAL && errno != ENOSYS)
                return io_error("cannot swap {} into {}: {}", staged.string(), target.string(), os_error());
            // No exchange here (an old kernel, some network file systems): the old one aside
            // first. A crash between the two renames leaves both beside `target`, not at it.
            const stdfs::path aside = parent / (".old-" + target.filename().string() + "." + std::to_string(::getpid()));
            STRATO_RETURN_IF_ERROR(remove_tree(aside));
            if (::rename(target.c_str(), aside.c_str()) != 0)
                return io_error("cannot move {} aside: {}", target.string(), os_error());
            if (::rename(staged.c_str(), target.c_str()) != 0)
                return io_error("cannot move {} to {}: {}", staged.string(), target.string(), os_error());
            STRATO_RETURN_IF_ERROR(fsync_dir(parent));
            return remove_tree(aside);
        }
        // `staged` now holds the old directory.
        STRATO_RETURN_IF_ERROR(fsync_dir(parent));
        return remove_tree(staged);
    }
    return fsync_dir(parent);
}

Status ensure_dir(const stdfs::path& dir) {
    // Create first, then look: another process (a second launcher on a shared log directory)
    // may create the same path between a check and the mkdir, which is not an error.
    std::error_code ec;
    stdfs::create_directories(dir, ec);
    std::error_code ec2;
    if (stdfs::is_directory(dir, ec2)) return Status::ok();
    if (stdfs::exists(dir, ec2)) return invalid_argument("{} exists and is not a directory", dir.string());
    return io_error("cannot create directory {}: {}", dir.string(), ec ? ec.message() : "unknown error");
}

Status check_writable_dir(const stdfs::path& dir) {
    STRATO_RETURN_IF_ERROR(ensure_dir(dir));
    stdfs::path probe = dir / (".strato-write-test." + std::to_string(::getpid()));
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return {StatusCode::kPermissionDenied, fmt::format("cannot write in {}: {}", dir.string(), os_error())};
    ::close(fd);
    ::unlink(probe.c_str());
    return Status::ok();
}

std::string sha256_hex(std::string_view data) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
    static const char* kHex = "0123456789abcdef";
    std::string out;
    out.reserve(len * 2);
    for (unsigned int i = 0; i < len; ++i) {
        out.push_back(kHex[digest[i] >> 4]);
        out.push_back(kHex[digest[i] & 15]);
    }
    return out;
}

Result<std::string> sha256_file(const stdfs::path& path) {
    STRATO_ASSIGN_OR_RETURN(std::string data, read_file(path));
    return sha256_hex(data);
}

std::string shell_quote(std::string_view s) {
    std::string out = "'";
    for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return out + "'";
}

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path) == 0 ? 0 : errno; }
}  // namespace

Status remove_tree(const stdfs::path& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return Status::ok();
        return io_error("cannot delete {}: {}", path.string(), std::strerror(errno));
    }
    // Depth first (contents before their directory), not following links, staying on this file system.
    const int rc = ::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    if (rc != 0) return io_error("cannot delete {}: {}", path.string(), std::strerror(rc > 0 ? rc : errno));
    return Status::ok();
}

bool is_within(const stdfs::path& path, const stdfs::path& dir) {
    std::error_code ec;
    const stdfs::path p = stdfs::weakly_canonical(stdfs::absolute(path, ec), ec).lexically_normal();
    const stdfs::path d = stdfs::weakly_canonical(stdfs::absolute(dir, ec), ec).lexically_normal();
    auto pi = p.begin(), di = d.begin();
    for (; di != d.end(); ++di, ++pi) {
        if (di->empty()) continue;  // the trailing "" of "a/b/"
        if (pi == p.end() || *pi != *di) return false;
    }
    return true;
}

Status check_output_file(const stdfs::path& link, OutputKind kind, std::string_view flag) {
    if (is_stream(link)) return Status::ok();  // (/dev/stdout, a named pipe: nothing there to lose)
    std::error_code ec;
    auto followed = follow_links(link);  // (judged where the write goes)
    if (!followed) return invalid_argument("{} {}", flag, followed.status().message());
    const stdfs::path& path = *followed;
    // A model package's files (its manifest is text too) are never a report's or a table's, and
    // what it holds is listed in its manifest.
    const stdfs::path parent = path.parent_path().empty() ? stdfs::path(".") : path.parent_path();
    if (stdfs::exists(parent / "strato-model.json", ec))
        return invalid_argument("{} {}: the place belongs to the model package {}; not writing there (choose a "
                                "path outside it)",
                                flag, path.string(), parent.string());
    // A folder that is not there failed the write only after the whole run (a load test's results lost).
    if (!stdfs::is_directory(parent, ec))
        return stdfs::exists(parent, ec)
                   ? invalid_argument("{} {}: {} is a file, not a directory", flag, path.string(), parent.string())
                   : invalid_argument("{} {}: the directory {} does not exist", flag, path.string(), parent.string());
    remove_stale_temps(path);  // a report or table write killed half way left its partial copy
    const auto st = stdfs::status(path, ec);
    if (ec || st.type() == stdfs::file_type::not_found) {
        // (a new file is created in the directory; an existing one the write itself judges:
        // replaced or appended to, its own permissions count)
        if (::access(parent.c_str(), W_OK) != 0)
            return invalid_argument("{} {}: cannot create it in {}: {}", flag, path.string(), parent.string(), os_error());
        return Status::ok();
    }
    if (stdfs::is_directory(st)) return invalid_argument("{} {}: is a directory; expected a file name", flag, path.string());
    if (!stdfs::is_regular_file(st))
        return invalid_argument("{} {}: exists and is not a regular file; not writing over it", flag, path.string());
    std::string head(64 << 10, '\0');
    {
        std::FILE* f = std::fopen(path.c_str(), "rb");
        if (!f) return Status::ok();  // unreadable: the write reports what is wrong
        head.resize(std::fread(head.data(), 1, head.size(), f));
        std::fclose(f);
    }
    if (head.empty()) return Status::ok();
    bool ours = head.find('\0') == std::string::npos;
    if (ours && kind == OutputKind::kHtml) {
        size_t i = head.find_first_not_of(" \t\r\n");
        std::string start = i == std::string::npos ? "" : head.substr(i, 14);
        for (auto& c : start) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        ours = start.starts_with("<!doctype html") || start.starts_with("<html");
    }
    if (!ours)
        return invalid_argument("{} {}: the file exists and is not {}; not writing over it (remove it or choose another "
                                "name)",
                                flag, path.string(), kind == OutputKind::kHtml ? "an HTML report" : "a text file");
    return Status::ok();
}

void remove_stale_temps(const stdfs::path& path) {
    const stdfs::path dir = path.parent_path().empty() ? stdfs::path(".") : path.parent_path();
    const std::string prefix = path.filename().string() + ".tmp.";
    std::error_code ec;
    for (const auto& e : stdfs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(prefix, 0) != 0) continue;
        const std::string rest = name.substr(prefix.size());  // "<pid>.<n>"
        const size_t dot = rest.find('.');
        const auto pid = parse_int(std::string_view(rest).substr(0, dot), 1, std::numeric_limits<pid_t>::max());
        if (!pid || dot == std::string::npos || !parse_int(std::string_view(rest).substr(dot + 1), 0)) continue;
        if (*pid != ::getpid() && signals::process_gone(*pid)) stdfs::remove(e.path(), ec);
    }
}

}  // namespace strato::fs
