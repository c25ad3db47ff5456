#pragma once
// The load engine: worker threads, each with its own event loop and a pool of keep-alive
// connections, sending pre-serialised HTTP/1.1 requests in a closed loop (N outstanding) or an
// open loop (a request rate, constant or Poisson, each latency timed from the request's
// intended send time so a stalled server shows up in the tail: the wrk2 correction).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/loadgen/histogram.h"
#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/schedule.h"

namespace strato::loadgen {

/// What to hit: a URL and the request bytes to send there. `requests` are complete HTTP/1.1
/// requests (head and body); they are sent in turn, so several bodies (different inputs) rotate.
struct Target {
    Url url;
    std::vector<std::string> requests;
    std::string description;  // one line for the console: method, path, body
    bool head = false;        // HEAD requests: the answers carry no body, whatever their Content-Length
    int64_t batch = 1;        // inferences per request (an inference target's batch)
};

/// Builds one request: `method target HTTP/1.1`, Host (unless `headers` has one of its own: a
/// second Host is a 400 by RFC 9112), the extra `headers` ("Name: value"), Content-Length when
/// there is a body (unless `headers` has one).
std::string build_request(const Url& url, std::string_view method, const std::vector<std::string>& headers,
                          std::string_view body);

/// Checks an extra header (-H): "Name: value", the name a token (RFC 9110 5.1), the value without
/// control characters (a CR or LF would end the header early and start another, or the body).
Status check_header(std::string_view header);
/// True when a 'Name: value' header is named `name` (letters compared without case).
bool header_is(std::string_view header, std::string_view name);

/// The counts of one measurement window.
struct Measurement {
    LatencyHistogram latency;       // requests answered 2xx, in ns
    int64_t ok = 0;                 // 2xx responses
    std::map<int, int64_t> http;    // other statuses: status -> count
    int64_t connect_errors = 0;     // refused, unreachable, connect timed out
    int64_t reset_errors = 0;       // reset, or closed before a byte of the answer, while a request was outstanding
    int64_t timeouts = 0;           // no full response within the timeout
    // A bad response: not HTTP/1.x, truncated (closed before the end its framing promised), or
    // followed by bytes no request asked for (a Content-Length shorter than the body)
    int64_t protocol_errors = 0;
    std::string protocol_example;   // the first bad response's reason, for the output
    int64_t delayed = 0;            // open loop: sent more than 1 ms after the intended time
    int64_t unfinished = 0;         // still outstanding (or never sent) when the run stopped
    int64_t late = 0;               // answered in the grace after the window ended (not in latency or throughput)
    int64_t bytes_received = 0;
    double seconds = 0;             // length of the window

    int64_t errors() const;
    double throughput() const { return seconds > 0 ? static_cast<double>(ok) / seconds : 0.0; }
    void merge(const Measurement& other);  // adds the counts; `seconds` is the caller's to set
    /// Adds what ended after this window had closed: its answers as `late` (in neither the
    /// latencies nor the throughput), its failures as errors, its unfinished as unfinished.
    void merge_after_window(Measurement after);
};

/// The monotonic clock every load-generator timestamp uses, in ns.
int64_t now_ns();

/// The open loop's request rates, per second: below the least, the gap between requests (ns) leaves
/// the int64 clock's range.
constexpr double kMinRate = 1e-6;
constexpr double kMaxRate = 1e7;

struct LoadOptions {
    enum class Mode { kClosed, kOpen };
    Mode mode = Mode::kClosed;
    int concurrency = 1;            // closed loop: connections, one request outstanding on each
    double rate = 0;                // open loop: requests per second, all threads together
    bool poisson = false;           // open loop: exponential gaps instead of constant ones
    // Open loop: send times from a recording (intervals file, rate trace) instead of `rate`,
    // which then only labels the level. Threads take its requests in turn.
    std::shared_ptr<const Schedule> schedule;
    int max_connections = 256;      // open loop: connections opened as needed up to this
    int threads = 1;                // event-loop threads; connections are spread over them
    double spawn_rate = 0;          // closed loop: connections started per second (0: all at once)
    int64_t timeout_ns = 30'000'000'000;
    int64_t request_budget = -1;    // stop sending after this many requests (-1: no limit)
    // Before sleeping in epoll, poll without blocking for up to this long (0: never). Against a
    // fast server, a thread that is awake when a response lands saves the server's side the
    // wake-up it pays otherwise (~2 us of its CPU per request on a VM); costs client CPU.
    int64_t busy_poll_ns = 0;
    uint64_t seed = 1;
};

/// A running load. Starts sending on `start`; `snapshot` returns what completed since the last
/// snapshot; `stop` stops sending, waits up to `grace_ns` for outstanding requests (less once
/// `interrupted` says so: Ctrl-C), closes every connection and returns the last window, what is
/// still outstanding counted unfinished. The destructor stops it too.
///
///     auto s = LoadSession::start(target, {.concurrency = 8, .threads = 2});
///     sleep(1s); s.value()->snapshot();            // warm-up, discarded
///     sleep(5s); Measurement m = s.value()->stop(2'000'000'000);
///
/// snapshot/stop/requests_done are for one controlling thread.
class LoadSession {
public:
    static Result<std::unique_ptr<LoadSession>> start(const Target& target, const LoadOptions& options);
    ~LoadSession();

    Measurement snapshot();
    Measurement stop(int64_t grace_ns, const std::function<bool()>& interrupted = {});
    /// Requests finished so far (any outcome), for --requests.
    int64_t requests_done() const;
    /// When the latest of them finished (now_ns() clock; 0 before the first), and when the current
    /// window began: a --requests window ends with its last answer, not when a poll sees it.
    int64_t last_done_ns() const;
    int64_t window_start_ns() const;
    /// From now on, send `n` more requests (--requests after a warm-up).
    void set_budget(int64_t n);
    /// True once a budget is set, spent, and nothing is outstanding.
    bool idle_after_budget() const;

    LoadSession(const LoadSession&) = delete;
    LoadSession& operator=(const LoadSession&) = delete;

    struct Impl;

private:
    explicit LoadSession(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

/// True when every address `host` resolves to is a loopback address (127.0.0.0/8, ::1).
Result<bool> is_loopback_host(const std::string& host);

}  // namespace strato::loadgen
