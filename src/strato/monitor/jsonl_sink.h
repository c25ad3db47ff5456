#pragma once
// Where `strato monitor --jsonl` appends its samples: a regular file, or a FIFO, pipe or device
// (/dev/stdout, a log shipper's FIFO) that must never stall the sampling loop or its shutdown.
//
// A regular file is opened to append and written as usual (a failed write, a full disk, is an
// error); when its path names another file or none (logrotate moved it) a new one is started
// there. Anything else is opened non-blocking: a FIFO without a reader (open() fails with ENXIO)
// is retried at each line, with one note that the sink waits for a reader; lines are written
// without waiting, and a line the reader has not taken room for by the next one is dropped and
// counted, never torn (the rest of a partly written line goes first). A reader that goes away
// (EPIPE, with SIGPIPE held off) is waited for again. A path that names standard output or error
// when that is a socket (`--jsonl -` in a systemd service, whose stdout is the journal's socket)
// writes the process's own descriptor, the same way.
//
//     auto sink = JsonlSink::open("ship.fifo").value();
//     STRATO_RETURN_IF_ERROR(sink->append(line));   // once per sample; never blocks on a pipe
//     sink->finish(std::chrono::milliseconds(500));  // at the end: the last line gets this long
//
// Not thread-safe: one sink per sampling loop.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "strato/core/status.h"

namespace strato::monitor {

class JsonlSink {
public:
    /// A regular file (or a path that does not exist yet) is opened to append now; a FIFO or a
    /// device at the first append(). A directory is an error, as is a socket other than the
    /// process's standard output or error.
    static Result<std::unique_ptr<JsonlSink>> open(const std::string& path);
    ~JsonlSink();
    JsonlSink(const JsonlSink&) = delete;
    JsonlSink& operator=(const JsonlSink&) = delete;

    /// Writes `line` (ending in '\n'), or drops it as the class comment says. Errors: the file
    /// cannot be opened or written (not "no reader yet", not a slow reader).
    Status append(const std::string& line);
    /// Gives what is still unwritten at most `limit` to go out (poll()), then closes.
    void finish(std::chrono::milliseconds limit);

    bool regular() const { return regular_; }
    /// Whether the sink is open (a FIFO: a reader had it open).
    bool is_open() const { return fd_ >= 0; }
    /// Lines dropped so far: no reader, or the reader did not keep up.
    int64_t dropped() const { return dropped_; }

private:
    JsonlSink() = default;
    Status try_open();
    /// A regular file's path that no longer names the open file (rotated, removed) is reopened.
    Status follow_rotation();
    /// Writes what it can of pending_ without blocking; false once the reader went away.
    Result<bool> write_some();

    std::string path_;
    int fd_ = -1;
    bool regular_ = false;
    bool fifo_ = false;
    bool said_waiting_ = false;
    bool said_slow_ = false;
    int socket_fd_ = -1;        // standard output or error, when the path names it and it is a socket
    bool socket_gone_ = false;  // that socket's reader closed it
    std::string pending_;  // a line (or the rest of one) not yet written
    int64_t dropped_ = 0;
};

}  // namespace strato::monitor
