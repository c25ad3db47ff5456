#include "strato/monitor/jsonl_sink.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "strato/core/log.h"

namespace strato::monitor {

namespace {

// SIGPIPE held off this thread while it writes (the default action ended the whole monitor when a
// FIFO's reader went away); one raised by the write is taken back, one pending before is left.
class NoSigpipe {
public:
    NoSigpipe() {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        sigset_t pending;
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    }
    ~NoSigpipe() {
        if (raised_ && !was_pending_) {
            const timespec zero{};
            while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    void raised() { raised_ = true; }

private:
    sigset_t pipe_, old_;
    bool was_pending_ = false, raised_ = false;
};

}  // namespace

Result<std::unique_ptr<JsonlSink>> JsonlSink::open(const std::string& path) {
    std::unique_ptr<JsonlSink> s(new JsonlSink);
    s->path_ = path;
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return invalid_argument("--jsonl {} is a directory; name a file to append to", path);
    if (exists && S_ISSOCK(st.st_mode)) {
        // open() cannot open a socket, but standard output or error may be one (a systemd
        // service's journal, a socketpair a supervisor set up): `--jsonl -` then failed with "is a
        // socket". That descriptor is written, each line without waiting (MSG_DONTWAIT).
        for (int std_fd : {STDOUT_FILENO, STDERR_FILENO}) {
            struct stat fst {};
            if (::fstat(std_fd, &fst) == 0 && fst.st_dev == st.st_dev && fst.st_ino == st.st_ino) {
                s->socket_fd_ = std_fd;
                break;
            }
        }
        if (s->socket_fd_ < 0)
            return invalid_argument("--jsonl {} is a socket; expected a file, a FIFO or a device to append to", path);
        STRATO_RETURN_IF_ERROR(s->try_open());
        return s;
    }
    s->regular_ = !exists || S_ISREG(st.st_mode);
    s->fifo_ = exists && S_ISFIFO(st.st_mode);
    if (!s->regular_) {
        STRATO_RETURN_IF_ERROR(s->try_open());
        return s;
    }
    // A log whose last line was cut off (a run killed mid-write) gets a line end first, so the
    // next record starts a line of its own instead of joining the broken one.
    bool torn = false;
    if (exists && st.st_size > 0) {
        const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        char last = '\n';
        if (in >= 0) {
            torn = ::pread(in, &last, 1, st.st_size - 1) == 1 && last != '\n';
            ::close(in);
        }
    }
    s->fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (s->fd_ < 0) return io_error("cannot append to {}: {}", path, std::strerror(errno));
    if (torn) {
        log::warn("monitor: {} ends in a cut-off line; the new samples start on a line of their own", path);
        STRATO_RETURN_IF_ERROR(s->append("\n"));
    }
    return s;
}

JsonlSink::~JsonlSink() {
    if (fd_ >= 0) ::close(fd_);
}

// logrotate (without copytruncate) renames the log and expects the writer to start a new one at
// the path: writing on to the renamed file, samples went into the old one, and after its
// compression into a deleted file. As Python's WatchedFileHandler does, a path that is no longer
// the open file (moved, removed, replaced) is opened anew.
Status JsonlSink::follow_rotation() {
    struct stat at {};
    struct stat open_st {};
    const bool there = ::stat(path_.c_str(), &at) == 0;
    if (there && ::fstat(fd_, &open_st) == 0 && at.st_dev == open_st.st_dev && at.st_ino == open_st.st_ino)
        return Status::ok();
    // (a FIFO put there would block open() until a reader came)
    if (there && !S_ISREG(at.st_mode))
        return io_error("cannot append to {}: it was replaced by something that is not a regular file", path_);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return io_error("cannot append to {} (it was moved or removed): {}", path_, std::strerror(errno));
    ::close(fd_);
    fd_ = fd;
    log::info("monitor: --jsonl {} was moved or removed (log rotation?); samples go to a new {}", path_, path_);
    return Status::ok();
}

Status JsonlSink::try_open() {
    if (socket_fd_ >= 0) {
        if (socket_gone_) return Status::ok();  // its reader closed it: no other comes
        fd_ = ::fcntl(socket_fd_, F_DUPFD_CLOEXEC, 3);
        if (fd_ < 0) return io_error("cannot append to {}: {}", path_, std::strerror(errno));
        return Status::ok();
    }
    // Non-blocking: opening a FIFO to write waits for a reader otherwise, and no signal ends the
    // wait (the stop handlers restart system calls).
    fd_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ >= 0) {
        if (said_waiting_) log::info("monitor: --jsonl {}: a reader opened it; samples go out again", path_);
        said_waiting_ = false;
        return Status::ok();
    }
    if (errno == ENXIO && fifo_) {
        if (!said_waiting_)
            log::warn("monitor: --jsonl {}: no process has the FIFO open to read; samples are dropped until one does",
                      path_);
        said_waiting_ = true;
        return Status::ok();
    }
    return io_error("cannot open {} to append: {}", path_, std::strerror(errno));
}

Result<bool> JsonlSink::write_some() {
    NoSigpipe hold;
    while (!pending_.empty()) {
        // (a socket: this write alone without waiting, and no SIGPIPE; the descriptor is shared)
        const ssize_t n = socket_fd_ >= 0 ? ::send(fd_, pending_.data(), pending_.size(), MSG_DONTWAIT | MSG_NOSIGNAL)
                                          : ::write(fd_, pending_.data(), pending_.size());
        if (n > 0) {
            pending_.erase(0, static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // full: the rest later
        if (n < 0 && (errno == EPIPE || (socket_fd_ >= 0 && errno == ECONNRESET))) {
            if (socket_fd_ < 0) hold.raised();
            return false;
        }
        return io_error("cannot write to {} (a full disk?): {}", path_, n < 0 ? std::strerror(errno) : "wrote nothing");
    }
    return true;
}

Status JsonlSink::append(const std::string& line) {
    if (regular_) {
        STRATO_RETURN_IF_ERROR(follow_rotation());
        for (size_t done = 0; done < line.size();) {
            const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0)
                return io_error("cannot write to {} (a full disk?): {}", path_,
                                n < 0 ? std::strerror(errno) : "wrote nothing");
            done += static_cast<size_t>(n);
        }
        return Status::ok();
    }
    if (fd_ < 0) STRATO_RETURN_IF_ERROR(try_open());
    if (fd_ < 0) {  // no reader yet
        ++dropped_;
        return Status::ok();
    }
    bool reader = true;
    if (!pending_.empty()) {
        STRATO_ASSIGN_OR_RETURN(reader, write_some());
    }
    if (reader && !pending_.empty()) {
        // The previous line has waited a whole interval: this one goes (a line is never torn).
        if (!said_slow_)
            log::warn("monitor: --jsonl {}: the reader does not keep up; samples it has no room for are dropped "
                      "(counted at the end)",
                      path_);
        said_slow_ = true;
        ++dropped_;
        return Status::ok();
    }
    if (reader) {
        pending_ = line;
        STRATO_ASSIGN_OR_RETURN(reader, write_some());
    }
    if (!reader) {
        // The reader went away: what it did not take is lost with it; wait for the next one.
        if (!pending_.empty()) ++dropped_;
        pending_.clear();
        ::close(fd_);
        fd_ = -1;
        socket_gone_ = socket_fd_ >= 0;
        log::warn("monitor: --jsonl {}: the reader closed it; {}", path_,
                  socket_gone_ ? "the samples are dropped from now on" : "waiting for another");
        said_waiting_ = true;
    }
    return Status::ok();
}

void JsonlSink::finish(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (fd_ >= 0 && !pending_.empty()) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd_, POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50))) < 0 && errno != EINTR) break;
        auto more = write_some();
        if (!more.is_ok() || !*more) break;
    }
    if (!pending_.empty()) ++dropped_;  // (a line begun is cut off there: a replay skips it)
    pending_.clear();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

}  // namespace strato::monitor
