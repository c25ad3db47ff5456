#pragma once
// Files that matter are written atomically (temp file in the same directory, fsync, rename,
// fsync of the directory), so a crash at any instant leaves either the old or the new content.
// SHA-256 checksums let readers detect truncation and bit flips.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "strato/core/status.h"

namespace strato::fs {

namespace stdfs = std::filesystem;

/// Replaces `path` with `data` atomically. The parent directory must exist. A symbolic link at
/// `path` is followed, as `>` would (the file it names is replaced; the link stays). A terminal,
/// /dev/null or a pipe (/dev/stdout, a named pipe) is written to as a stream.
Status atomic_write(const stdfs::path& path, std::string_view data);

/// A terminal, /dev/null or a pipe (`--json /dev/stdout | jq`, a named pipe), or standard output
/// (is_stdout): written as a stream, in place, and never read to see what it holds.
bool is_stream(const stdfs::path& path);

/// "-", /dev/stdout, /dev/fd/1 or /proc/self/fd/1: the process's standard output, whatever it is
/// (a pipe, a terminal, a file the shell opened with `>` or `>>`). atomic_write() writes it through
/// descriptor 1 (replacing the file `>` opened would lose what the command prints beside it, and
/// `>>`'s earlier lines); a command that writes an output there prints its own text to stderr.
bool is_stdout(const stdfs::path& path);

/// `path` with the symbolic links at its end followed (a link to a file not there yet too): the
/// file a write to `path` replaces. An error names a loop or an unreadable link.
Result<stdfs::path> follow_links(const stdfs::path& path);
/// Larger than this, a config, rules, policy, catalog or trace file is a mistake (a dataset or
/// a weights file given where a TOML or CSV was expected), not something to read into memory.
inline constexpr uint64_t kTextFileLimit = 64ull << 20;
/// A pipe or device (`<(cmd)`, /dev/stdin, /dev/zero) is read up to this much when the caller
/// sets no lower limit: it may never end.
inline constexpr uint64_t kStreamReadLimit = 1ull << 30;

/// Reads a whole file; errors name the path and the OS reason. More than `max_bytes` is an error
/// (a regular file is refused by its size before any of it is read).
Result<std::string> read_file(const stdfs::path& path, uint64_t max_bytes = UINT64_MAX);
/// OK when `path` (links followed) is a regular file: a library that opens a path itself (libtorch,
/// OpenCV) would wait in open() for ever on a named pipe without a writer.
Status check_regular_file(const stdfs::path& path);
/// An exclusive lock on a directory, for one process at a time: an flock on
/// "<parent>/.<name>.lock", beside the directory (so that deleting the directory keeps the lock),
/// holding the owner's pid. Released when the object goes, or the process ends however it ends.
class DirLock {
public:
    DirLock() = default;
    explicit DirLock(int fd) : fd_(fd) {}
    DirLock(DirLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    DirLock& operator=(DirLock&& o) noexcept;
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;
    ~DirLock();

private:
    int fd_ = -1;
};
/// Takes `dir`'s lock, creating its parent if needed; symbolic links in `dir` are resolved first,
/// so every name of one directory takes the same lock. Held by another process: kAlreadyExists,
/// "<dir> is in use by another strato process (pid N)".
Result<DirLock> lock_dir(const stdfs::path& dir);
/// The same with the lock file at `lock` (inside the directory it guards, for one that is never
/// deleted whole); `what` names the directory in the error.
Result<DirLock> lock_file(const stdfs::path& lock, const std::string& what);
/// Puts the directory `staged` (complete, fsynced) at `target`, replacing what is there, so that a
/// crash at any instant leaves either the old or the new directory at `target`: an atomic swap
/// (renameat2 RENAME_EXCHANGE) where the file system has one, else the old one moved aside first.
/// Then removes the old directory and fsyncs the parent. Both paths must be in the same directory.
Status replace_dir(const stdfs::path& staged, const stdfs::path& target);
/// Creates `dir` and its parents; errors if something that is not a directory is in the way.
Status ensure_dir(const stdfs::path& dir);
/// Fails with a clear message when files cannot be created in `dir` (creating it if needed).
Status check_writable_dir(const stdfs::path& dir);
/// fsync()s a directory so a rename inside it is durable.
Status fsync_dir(const stdfs::path& dir);
/// fsync()s a regular file.
Status fsync_file(const stdfs::path& path);

std::string sha256_hex(std::string_view data);
Result<std::string> sha256_file(const stdfs::path& path);

/// Deletes `path` and, for a directory, everything under it (symbolic links themselves, never
/// what they point to); a missing path is no error. What std::filesystem::remove_all does, on
/// POSIX calls: a pip-installed libtorch exports its own copy of remove_all, which crashes when
/// it is the one a call binds to (seen with torch 2.11; docs/gpu.md).
Status remove_tree(const stdfs::path& path);

/// `s` single-quoted for a POSIX shell (scripts we write, commands we hand to popen).
std::string shell_quote(std::string_view s);

/// True when `path` is `dir` or lies below it, after resolving symbolic links, "." and ".."
/// (parts that do not exist yet are taken as written). For "this output directory must not hold
/// that input" checks before anything is deleted or replaced.
bool is_within(const stdfs::path& path, const stdfs::path& dir);

/// Removes what atomic_write(path) left when its process was killed mid-write:
/// "<path>.tmp.<pid>.<n>" of processes that no longer run.
void remove_stale_temps(const stdfs::path& path);

/// What an output file of a command (a report, a result, a script) may replace.
enum class OutputKind {
    kHtml,  // an existing file must be an HTML page (an earlier report)
    kText,  // an existing file must be text: no NUL byte in its first 64 KiB
};
/// Checked before a command starts its work: `path` may be written when it does not exist, or
/// holds what the command writes (an earlier run's output); a model's weights, a study database,
/// a run's metrics under an HTML report's name are refused, naming `flag` and the file. The
/// partial copies that killed writes of `path` left (remove_stale_temps) are removed. A terminal,
/// /dev/null or a pipe may always be written.
Status check_output_file(const stdfs::path& path, OutputKind kind, std::string_view flag);

}  // namespace strato::fs
