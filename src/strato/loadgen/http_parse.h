#pragma once
// The pieces of HTTP/1.1 the load generator needs on its hot path, without allocation per
// request: an incremental response parser (Content-Length, chunked, or read-until-close bodies)
// and a URL splitter. Requests are serialised once, up front (see Target in load.h).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include <string_view>

#include "strato/core/status.h"

namespace strato::loadgen {

/// "http://host:port/path?query" split into parts. IPv6 literals are written "[::1]".
struct Url {
    std::string host;  // without brackets
    uint16_t port = 80;
    std::string target = "/";  // path and query
    std::string host_header;   // "host:port" as sent in Host:
};

/// Parses an http:// URL; https and other schemes are kInvalidArgument with a hint.
Result<Url> parse_url(std::string_view url);

/// Incremental HTTP/1.1 response parser. Feed it the bytes read from the socket; `feed` returns
/// how many it consumed (it stops at the end of one response, leaving anything after it).
///
///     ResponseParser p;
///     size_t used = p.feed(buf, n);
///     if (p.failed()) ... else if (p.done()) record(p.status());
///
/// A response without Content-Length or chunked coding ends when the peer closes: call
/// `finish_on_eof()` then. 1xx interim responses are skipped. With `keep_body(true)` the body is
/// collected (chunked coding removed); otherwise only counted. Not thread-safe.
class ResponseParser {
public:
    void reset();
    void keep_body(bool keep) { keep_body_ = keep; }
    /// The request was a HEAD: the response ends with its head (RFC 9110 9.3.2). Set after reset().
    void answers_head(bool head) { head_request_ = head; }

    size_t feed(const char* data, size_t size);
    /// The peer closed: a body delimited by the close is complete; anything else failed.
    void finish_on_eof();

    bool done() const { return state_ == State::kDone; }
    bool failed() const { return state_ == State::kFailed; }
    /// Bytes were received for this response (a close before that is a plain reconnect).
    bool started() const { return started_; }
    int status() const { return status_; }
    bool keep_alive() const { return keep_alive_; }
    int64_t body_size() const { return body_size_; }
    /// Bytes consumed for this response, head included.
    int64_t bytes() const { return bytes_; }
    const std::string& body() const { return body_; }
    /// The response's headers, kept only with keep_body(true) (control requests, proxies).
    const std::vector<std::pair<std::string, std::string>>& headers() const { return headers_; }
    const std::string& error() const { return error_; }

private:
    enum class State { kHead, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailer, kUntilClose, kDone, kFailed };

    bool parse_head();
    size_t fail(std::string message);

    State state_ = State::kHead;
    std::string head_;  // status line and headers being collected
    std::string line_;  // chunk-size / trailer line being collected
    std::string body_;
    std::vector<std::pair<std::string, std::string>> headers_;
    bool keep_body_ = false;
    bool head_request_ = false;
    bool started_ = false;
    bool keep_alive_ = true;
    int status_ = 0;
    int64_t remaining_ = 0;  // body or chunk bytes still to come
    int64_t body_size_ = 0;
    int64_t bytes_ = 0;
    std::string error_;
};

}  // namespace strato::loadgen
