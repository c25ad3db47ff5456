#pragma once
// An HTTP/1.1 server on Boost.Beast: N I/O threads, keep-alive, bounded request bodies (413),
// header and body read deadlines against slow clients (the connection is closed, as nginx does), `Expect: 100-continue`, detection of
// clients that hang up while their request is in flight, and a graceful drain.
//
// The handler is asynchronous: it gets the request and a Reply that must be called exactly once,
// from any thread (the dynamic batcher answers from its worker threads).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strato/core/status.h"

namespace strato::serve::http {

struct Request {
    std::string method;  // "GET", "POST", ...
    std::string target;  // path and query as sent
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    std::chrono::steady_clock::time_point received;  // when the full request had been read
    /// Set when the client closes its connection before the response is written.
    std::shared_ptr<std::atomic<bool>> cancelled;

    /// The value of a header (case-insensitive name), or nullptr.
    const std::string* header(std::string_view name) const;
};

struct Response {
    unsigned status = 200;
    std::string content_type;  // empty: no Content-Type
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    bool close = false;  // close the connection after this response
};

using Reply = std::function<void(Response)>;
using Handler = std::function<void(Request&&, Reply)>;

struct ServerOptions {
    std::string address = "127.0.0.1";
    uint16_t port = 0;  // 0: an ephemeral port, see Server::port()
    int threads = 8;
    uint64_t body_limit = uint64_t{64} << 20;  // Triton's --http-max-input-size default
    std::string body_limit_flag = "--http-max-input-size";  // named by a 413 ("": the limit is not the user's)
    std::chrono::milliseconds header_timeout{30'000};  // from the first byte of a request to its end of headers
    std::chrono::milliseconds body_timeout{60'000};
    std::chrono::milliseconds idle_timeout{300'000};  // keep-alive connection with no request
    // Open connections at most, so idle clients cannot take every descriptor the process has (and
    // its /proc reads and model files with them). At the cap a new connection is let in and the
    // longest-idle one of each I/O thread closed (as nginx); with none idle, past a margin of
    // 1 + cap/16, a new connection is closed at once. 0: the descriptor limit (RLIMIT_NOFILE)
    // less an eighth and 32 for the rest of the process (1,024 -> 864); no cap when it is unlimited.
    int64_t max_connections = 0;
    // After handling work, an I/O thread polls its sockets without blocking for up to this long
    // before it sleeps in epoll (0: off). Keeps the thread (in a VM, the vCPU) awake between
    // back-to-back requests at the price of that much CPU per idle gap.
    std::chrono::microseconds busy_poll{0};
    std::string server_name = "strato";
    std::string thread_name = "http";  // I/O thread i is named "<thread_name>-<i>"
};

class Server {
public:
    Server(ServerOptions options, Handler handler);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    /// Binds, listens and starts the I/O threads. A port in use is a clear error.
    Status start();
    uint16_t port() const;
    /// Stops accepting, closes idle keep-alive connections, lets requests in flight finish, and
    /// requests partly received be read and answered (their connections close after the
    /// response), and waits up to `timeout` for them. Returns how many were still open at the
    /// deadline.
    int64_t drain(std::chrono::milliseconds timeout);
    /// Stops the I/O threads (after drain() for a graceful stop). Idempotent.
    void stop();

    int64_t in_flight() const;
    uint64_t connections_accepted() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace strato::serve::http
