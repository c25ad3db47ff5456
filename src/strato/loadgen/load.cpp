#include "strato/loadgen/load.h"

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "strato/core/thread_name.h"

namespace strato::loadgen {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

namespace {

constexpr int64_t kDelayedNs = 1'000'000;
// Open loop: due requests waiting for a connection, per worker, and due times taken per tick.
// Past the first, a due request is dropped (counted unfinished: never sent): a rate far beyond
// what the connections carry grew this queue by millions a second (1.3 GB, the loop starved).
// Past the second, the rest waits for the next tick (intervals of 0 asked for a request every ns).
constexpr size_t kMaxPending = 65536;
constexpr int kMaxDuePerTick = 65536;
constexpr int64_t kBackoffMinNs = 1'000'000;
constexpr int64_t kBackoffMaxNs = 100'000'000;
constexpr size_t kReadBuffer = 64 * 1024;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

}  // namespace

std::string build_request(const Url& url, std::string_view method, const std::vector<std::string>& headers,
                          std::string_view body) {
    const bool has_host =
        std::any_of(headers.begin(), headers.end(), [](const std::string& h) { return header_is(h, "host"); });
    std::string r = fmt::format("{} {} HTTP/1.1\r\n", method, url.target);
    if (!has_host) r += fmt::format("Host: {}\r\n", url.host_header);
    bool has_length = false;
    for (const auto& h : headers) {
        r += h;
        r += "\r\n";
        if (header_is(h, "content-length")) has_length = true;
    }
    if (!has_length && (!body.empty() || method == "POST" || method == "PUT"))
        r += fmt::format("Content-Length: {}\r\n", body.size());
    r += "\r\n";
    r += body;
    return r;
}

bool header_is(std::string_view header, std::string_view name) {
    return header.size() > name.size() && header[name.size()] == ':' &&
           strncasecmp(header.data(), name.data(), name.size()) == 0;
}

Status check_header(std::string_view h) {
    const size_t colon = h.find(':');
    // tchar (RFC 9110 5.6.2)
    const auto token_char = [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) ||
               std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    };
    if (colon == std::string_view::npos || colon == 0 ||
        !std::all_of(h.begin(), h.begin() + static_cast<long>(colon), token_char))
        return invalid_argument("header '{}': expected 'Name: value', the name letters, digits or !#$%&'*+-.^_`|~", h);
    for (size_t i = colon + 1; i < h.size(); ++i)
        if (const auto c = static_cast<unsigned char>(h[i]); (c < 0x20 && c != '\t') || c == 0x7f)
            return invalid_argument("header '{}': a control character (byte {}) in its value", h.substr(0, colon), c);
    return Status::ok();
}

int64_t Measurement::errors() const {
    int64_t n = connect_errors + reset_errors + timeouts + protocol_errors;
    for (const auto& [code, count] : http) n += count;
    return n;
}

void Measurement::merge(const Measurement& o) {
    latency.merge(o.latency);
    ok += o.ok;
    for (const auto& [code, count] : o.http) http[code] += count;
    connect_errors += o.connect_errors;
    reset_errors += o.reset_errors;
    timeouts += o.timeouts;
    protocol_errors += o.protocol_errors;
    if (protocol_example.empty()) protocol_example = o.protocol_example;
    delayed += o.delayed;
    unfinished += o.unfinished;
    late += o.late;
    bytes_received += o.bytes_received;
}

void Measurement::merge_after_window(Measurement after) {
    after.late += after.ok;
    after.ok = after.delayed = after.bytes_received = 0;
    after.latency = LatencyHistogram();
    merge(after);
}

Result<bool> is_loopback_host(const std::string& host) {
    asio::io_context io;
    tcp::resolver resolver(io);
    boost::system::error_code ec;
    auto results = resolver.resolve(host, "80", ec);
    if (ec) return invalid_argument("cannot resolve host '{}': {}", host, ec.message());
    for (const auto& entry : results)
        if (!entry.endpoint().address().is_loopback()) return false;
    return true;
}

// The engine is a plain epoll loop per worker thread, as wrk's is: non-blocking sockets
// registered once, one epoll_pwait2 per batch of ready connections, timers (open-loop schedule,
// timeout sweep, reconnect backoff) folded into the wait's timeout. asio would re-arm its epoll
// registration (an epoll_ctl) or try a speculative recv for every request; here a request costs
// one send and one recv. Commands from the controlling thread arrive through an eventfd.

namespace {

enum class ConnState { kNew, kConnecting, kIdle, kBusy, kBackoff, kClosed };
enum FailKind { kConnectFail, kResetFail, kTimeoutFail, kProtocolFail };

struct Conn {
    Conn() : buf(new char[kReadBuffer]) {}
    int fd = -1;
    uint32_t index = 0;             // position in the worker's list (epoll tags)
    uint32_t gen = 0;               // bumped on close: events of an older socket are ignored
    ConnState state = ConnState::kNew;
    size_t endpoint = 0;            // endpoint being tried (a name can resolve to several)
    std::unique_ptr<char[]> buf;
    ResponseParser parser;
    const std::string* request = nullptr;
    size_t sent = 0;                // bytes of *request written
    bool want_write = false;        // EPOLLOUT registered (a request did not fit the socket buffer)
    int64_t intended_ns = 0;        // when the outstanding request should have gone out
    int64_t sent_ns = 0;            // when it did (or when the connect started)
    int64_t backoff_ns = 0;
    int64_t wake_ns = 0;            // kBackoff: when to connect
    uint32_t answered = 0;          // responses on this socket (a reused keep-alive connection when > 0)
    bool resend = false;            // connecting to send *request again (its reused socket closed first)
};

uint64_t tag_of(const Conn& c) { return (uint64_t{c.index} << 32) | c.gen; }

}  // namespace

struct Worker {
    Worker(LoadSession::Impl* session, int index)
        : owner(session),
          id(index),
          epoll_fd(::epoll_create1(EPOLL_CLOEXEC)),
          wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
    ~Worker() {
        for (auto& c : conns)
            if (c->fd >= 0) ::close(c->fd);
        if (epoll_fd >= 0) ::close(epoll_fd);
        if (wake_fd >= 0) ::close(wake_fd);
    }

    static constexpr uint64_t kWakeTag = ~uint64_t{0};

    LoadSession::Impl* owner;
    int id;
    int epoll_fd;
    int wake_fd;
    std::array<epoll_event, 256> events{};
    std::vector<std::unique_ptr<Conn>> conns;
    std::deque<int64_t> pending;    // open loop: intended times waiting for a connection
    int64_t next_intended = kNever;
    int64_t next_sweep = kNever;
    int64_t next_backoff = kNever;
    double gap_ns = 0;
    double schedule_u = 0;          // with a schedule: the count coordinate of the next request
    std::mt19937_64 rng;
    size_t next_request = 0;
    int max_conns = 0;
    bool stopping = false;
    bool exiting = false;
    std::atomic<int> busy{0};
    std::atomic<bool> stop_cmd{false}, close_cmd{false};
    std::mutex mu;                  // guards counts
    Measurement counts;
    std::thread thread;

    void run();
    Conn& add_conn();
    void start_conn(Conn& c, int64_t delay_ns);
    void connect(Conn& c);
    void on_connected(Conn& c);
    void on_event(Conn& c, uint32_t ev);
    bool reserve();  // one request of the budget, counted busy; false when the budget is spent
    void send(Conn& c, int64_t intended);
    void write_some(Conn& c);
    void on_readable(Conn& c);
    void on_response(Conn& c);
    void fail(Conn& c, FailKind kind, std::string_view why = {});
    void close(Conn& c);
    void after_failure(Conn& c);
    void next_or_idle(Conn& c);
    void tick(int64_t now);
    void dispatch();
    void sweep(int64_t now);
    void wake_backoffs(int64_t now);
    void begin_stop();
    void close_all();
    void wait(int64_t deadline);
    void notify() {
        uint64_t one = 1;
        [[maybe_unused]] ssize_t r = ::write(wake_fd, &one, sizeof one);
    }
    template <class F>
    void count(F&& f) {
        std::lock_guard lock(mu);
        f(counts);
    }
};

struct LoadSession::Impl {
    Target target;
    LoadOptions options;
    std::vector<asio::ip::tcp::endpoint> endpoints;
    std::vector<std::unique_ptr<Worker>> workers;
    std::atomic<bool> limited{false};  // sends are counted against `budget`
    std::atomic<int64_t> budget{-1};   // requests that may still be sent
    std::atomic<int64_t> done{0};
    std::atomic<int64_t> last_done_ns{0};  // when the latest request finished (any outcome)
    int64_t window_start = 0;
    int64_t start_ns = 0;             // a schedule's time zero
    bool stopped = false;

    void finished(int64_t at) {
        done.fetch_add(1, std::memory_order_relaxed);
        for (int64_t seen = last_done_ns.load(std::memory_order_relaxed);
             seen < at && !last_done_ns.compare_exchange_weak(seen, at, std::memory_order_relaxed);) {
        }
    }
    bool take_budget() {
        if (!limited.load(std::memory_order_acquire)) return true;
        return budget.fetch_sub(1) > 0;
    }
    /// Up to `n` requests of the budget at once: how many it had (all `n` without one).
    int64_t take_budget(int64_t n) {
        if (n <= 0) return 0;
        if (!limited.load(std::memory_order_acquire)) return n;
        return std::clamp<int64_t>(budget.fetch_sub(n), 0, n);
    }
};

void Worker::run() {
    const auto& o = owner->options;
    rng.seed(o.seed * 1000003 + static_cast<uint64_t>(id));
    epoll_event wake{};
    wake.events = EPOLLIN;
    wake.data.u64 = kWakeTag;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &wake);
    int n_threads = static_cast<int>(owner->workers.size());
    int64_t now = now_ns();
    if (o.mode == LoadOptions::Mode::kClosed) {
        for (int k = id; k < o.concurrency; k += n_threads) {
            int64_t delay = o.spawn_rate > 0 ? static_cast<int64_t>(k / o.spawn_rate * 1e9) : 0;
            start_conn(add_conn(), delay);
        }
    } else {
        max_conns = std::max(1, (o.max_connections + n_threads - 1 - id) / n_threads);
        if (o.schedule) {
            // Threads take the recording's requests in turn: this one k = id, id + n, ... (or
            // Poisson arrivals of 1/n of its intensity each).
            schedule_u = o.poisson ? std::exponential_distribution<double>(1.0 / n_threads)(rng) : id;
            next_intended = owner->start_ns + o.schedule->offset_ns(schedule_u);
        } else {
            gap_ns = 1e9 * n_threads / o.rate;
            next_intended = now + static_cast<int64_t>(1e9 * id / o.rate);  // threads interleave
        }
        start_conn(add_conn(), 0);
    }
    int64_t sweep_period = std::clamp<int64_t>(o.timeout_ns / 8, 1'000'000, 50'000'000);
    next_sweep = now + sweep_period;
    while (!exiting) {
        wait(std::min({next_intended, next_sweep, next_backoff}));
        now = now_ns();
        if (now >= next_sweep) {
            sweep(now);
            next_sweep = now + sweep_period;
        }
        if (now >= next_backoff) wake_backoffs(now);
        if (!stopping && now >= next_intended) tick(now);
    }
}

// One wait for socket events, commands or the next timer, and the handling of what it returned.
void Worker::wait(int64_t deadline) {
    auto time_left = [&] { return deadline == kNever ? 1'000'000'000 : std::max<int64_t>(0, deadline - now_ns()); };
    int64_t left = time_left();
    int n = 0;
    if (const int64_t spin = owner->options.busy_poll_ns; spin > 0 && left > 0) {
        timespec zero{0, 0};
        const int64_t until = std::min(now_ns() + spin, deadline);
        do {
            n = ::epoll_pwait2(epoll_fd, events.data(), static_cast<int>(events.size()), &zero, nullptr);
        } while (n == 0 && now_ns() < until);
        left = time_left();
    }
    timespec ts{static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
    if (n == 0) n = ::epoll_pwait2(epoll_fd, events.data(), static_cast<int>(events.size()), &ts, nullptr);
    if (n < 0 && errno == ENOSYS)  // kernels before 5.11: millisecond timeouts, rounded up
        n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()),
                         static_cast<int>((left + 999'999) / 1'000'000));
    for (int i = 0; i < n; ++i) {
        const epoll_event& e = events[static_cast<size_t>(i)];
        if (e.data.u64 == kWakeTag) {
            uint64_t v;
            [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
            if (stop_cmd.exchange(false)) begin_stop();
            if (close_cmd.exchange(false)) close_all();
            continue;
        }
        size_t index = e.data.u64 >> 32;
        if (index >= conns.size()) continue;
        Conn& c = *conns[index];
        if (static_cast<uint32_t>(e.data.u64) != c.gen || c.fd < 0) continue;  // closed since
        on_event(c, e.events);
    }
}

Conn& Worker::add_conn() {
    conns.push_back(std::make_unique<Conn>());
    conns.back()->index = static_cast<uint32_t>(conns.size() - 1);
    return *conns.back();
}

void Worker::start_conn(Conn& c, int64_t delay_ns) {
    if (delay_ns <= 0) return connect(c);
    c.state = ConnState::kBackoff;
    c.wake_ns = now_ns() + delay_ns;
    next_backoff = std::min(next_backoff, c.wake_ns);
}

void Worker::wake_backoffs(int64_t now) {
    next_backoff = kNever;
    for (auto& c : conns) {
        if (c->state != ConnState::kBackoff) continue;
        if (c->wake_ns <= now && !stopping) {
            connect(*c);
        } else {
            next_backoff = std::min(next_backoff, c->wake_ns);
        }
    }
}

void Worker::connect(Conn& c) {
    const auto& eps = owner->endpoints;
    const auto& ep = eps[c.endpoint % eps.size()];
    c.fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) return fail(c, kConnectFail);
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c.state = ConnState::kConnecting;
    c.sent_ns = now_ns();
    int r = ::connect(c.fd, ep.data(), static_cast<socklen_t>(ep.size()));
    if (r != 0 && errno != EINPROGRESS) return fail(c, kConnectFail);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    ev.data.u64 = tag_of(c);
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.fd, &ev) != 0) return fail(c, kConnectFail);
    c.want_write = true;
    if (r == 0) on_connected(c);
}

void Worker::on_connected(Conn& c) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = tag_of(c);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_write = false;
    c.backoff_ns = 0;
    c.state = ConnState::kIdle;
    if (c.resend) {  // a request whose reused socket closed first (reserved and counted busy)
        c.resend = false;
        c.state = ConnState::kBusy;
        c.parser.reset();
        c.parser.answers_head(owner->target.head);
        c.sent = 0;
        return write_some(c);
    }
    next_or_idle(c);
}

void Worker::on_event(Conn& c, uint32_t ev) {
    if (c.state == ConnState::kConnecting) {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err != 0) return fail(c, kConnectFail);
        if (ev & (EPOLLOUT | EPOLLIN)) on_connected(c);
        return;
    }
    const uint32_t gen = c.gen;
    if ((ev & EPOLLOUT) && c.want_write) write_some(c);
    // (not when the write ended this socket: `c` may be connecting a new one that `ev` is not about)
    if (c.gen == gen && c.fd >= 0 && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) on_readable(c);
}

void Worker::next_or_idle(Conn& c) {
    c.state = ConnState::kIdle;
    if (stopping) return;
    if (owner->options.mode == LoadOptions::Mode::kClosed) {
        if (reserve()) send(c, now_ns());
        return;
    }
    dispatch();
}

bool Worker::reserve() {
    // Busy before the budget is taken: the runner, seeing the budget spent and no worker busy,
    // ends the point, and must not do so between the two.
    busy.fetch_add(1);  // (sequentially consistent with the budget: see idle_after_budget)
    if (owner->take_budget()) return true;
    busy.fetch_sub(1, std::memory_order_relaxed);
    return false;
}

void Worker::send(Conn& c, int64_t intended) {
    c.state = ConnState::kBusy;
    c.intended_ns = intended;
    c.sent_ns = now_ns();
    c.parser.reset();
    c.parser.answers_head(owner->target.head);
    const auto& reqs = owner->target.requests;
    c.request = &reqs[next_request++ % reqs.size()];
    c.sent = 0;
    write_some(c);
}

void Worker::write_some(Conn& c) {
    while (c.sent < c.request->size()) {
        ssize_t n = ::send(c.fd, c.request->data() + c.sent, c.request->size() - c.sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0) {
            // A server that answers before it has read the whole request and closes (a 413 for a
            // large body) resets the rest of the write: its answer waits to be read. It was counted
            // a reset (41 of 50 413s were "reset/closed").
            const uint32_t gen = c.gen;
            if (c.state == ConnState::kBusy) on_readable(c);
            if (c.gen != gen) return;  // answered, failed or sent again on a new connection
            return fail(c, kResetFail);
        }
        c.sent += static_cast<size_t>(n);
    }
    bool want = c.sent < c.request->size();
    if (want != c.want_write) {  // the rest goes when the socket has room
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
        ev.data.u64 = tag_of(c);
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
        c.want_write = want;
    }
}

void Worker::on_readable(Conn& c) {
    for (;;) {
        ssize_t n = ::recv(c.fd, c.buf.get(), kReadBuffer, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // level-triggered: epoll says when
        if (c.state != ConnState::kBusy) {  // nothing outstanding: the server closed an idle connection
            // ... or sent bytes no request asked for (unsolicited data, a stray second response).
            // They were dropped with the connection and counted nowhere: a bad response, though no
            // request waited for it (not in `done`), and the connection, out of step, is not reused.
            // A 408 is a server's word that it closes an idle connection (RFC 9110 15.5.9): no error.
            const std::string_view got(c.buf.get(), n > 0 ? static_cast<size_t>(n) : 0);
            if (n > 0 && !(got.starts_with("HTTP/1.1 408") || got.starts_with("HTTP/1.0 408")))
                count([&](Measurement& m) {
                    ++m.protocol_errors;
                    m.bytes_received += n;
                    if (m.protocol_example.empty())
                        m.protocol_example = fmt::format(
                            "{} bytes on an idle keep-alive connection, with no request outstanding (unsolicited "
                            "data, or a second response to one request?)",
                            n);
                });
            close(c);
            if (!stopping && owner->options.mode == LoadOptions::Mode::kClosed) start_conn(c, kBackoffMinNs);
            return;
        }
        // A reused keep-alive connection that ends before a byte of the answer: the server closed it
        // as the request went out (one that closes after each response without saying so). Sent
        // once more on a new connection, as curl does; a failure there counts.
        if (n <= 0 && c.answered > 0 && !c.parser.started()) {
            close(c);
            c.resend = true;
            return connect(c);
        }
        if (n < 0) return fail(c, kResetFail);
        if (n == 0) {
            // A close before a byte of the answer is a reset; after some, the response is
            // truncated: a bad response (it was counted as a reset, which hid a server that cut
            // its bodies short behind "the network").
            const bool started = c.parser.started();
            c.parser.finish_on_eof();
            if (c.parser.done()) return on_response(c);
            return fail(c, started ? kProtocolFail : kResetFail, c.parser.error());
        }
        const size_t used = c.parser.feed(c.buf.get(), static_cast<size_t>(n));
        if (c.parser.failed()) return fail(c, kProtocolFail, c.parser.error());
        if (c.parser.done()) {
            // Nothing is pipelined: bytes after the end of the answer belong to no request. The
            // answer's framing is wrong (a Content-Length shorter than the body), so it is a bad
            // response, and the connection, out of step, is not reused (they were dropped and the
            // rest read as the next request's answer).
            if (used < static_cast<size_t>(n))
                return fail(c, kProtocolFail,
                            fmt::format("{} bytes after the end of a complete response ({})",
                                        static_cast<size_t>(n) - used,
                                        owner->target.head ? "a body sent in answer to HEAD?"
                                                           : "a Content-Length shorter than the body?"));
            return on_response(c);
        }
    }
}

void Worker::on_response(Conn& c) {
    int64_t end = now_ns();
    int status = c.parser.status();
    bool delayed = owner->options.mode == LoadOptions::Mode::kOpen && c.sent_ns - c.intended_ns > kDelayedNs;
    count([&](Measurement& m) {
        if (status >= 200 && status < 300) {
            ++m.ok;
            m.latency.record(end - c.intended_ns);
        } else {
            ++m.http[status];
        }
        if (delayed) ++m.delayed;
        m.bytes_received += c.parser.bytes();
    });
    ++c.answered;
    busy.fetch_sub(1, std::memory_order_relaxed);
    owner->finished(end);
    // An answer before the whole request was written (a 413 or 401 as soon as the head is read):
    // the rest of the body is not sent, and the server, still reading it, would take the next
    // request's bytes for it (a 32 MB body answered 413 at once read as 125 resets and 43 400s).
    // The connection is out of step: a new one, as after "Connection: close".
    if (!c.parser.keep_alive() || c.sent < c.request->size()) {
        close(c);
        if (!stopping) connect(c);
        return;
    }
    next_or_idle(c);
}

void Worker::fail(Conn& c, FailKind kind, std::string_view why) {
    if (kind == kConnectFail && c.endpoint + 1 < owner->endpoints.size() && c.state == ConnState::kConnecting) {
        // a name with several addresses (localhost: ::1 and 127.0.0.1): try the next one first
        close(c);
        ++c.endpoint;
        return connect(c);
    }
    c.endpoint = 0;
    const bool resending = c.resend;  // a connect for a request already reserved (see on_readable())
    c.resend = false;
    bool outstanding = c.state == ConnState::kBusy || resending;
    // A failed connect fails a request only when one waits for it: in the closed loop the
    // connection's own next request; in the open loop the oldest due one. A connect made ahead of
    // demand (a thread's first, a retry after the queue drained) fails none: counted, a dead port
    // had more errors than requests were due (2995 + 78 unfinished for 3000).
    // It takes its share of a request budget (-n) as a sent one does: without, -n 1 at 5 req/s
    // against a dead port counted 257 connect errors over 51 s, until the runner's stall rule.
    bool failed_waiting = false;
    if (kind == kConnectFail && !outstanding) {
        if (owner->options.mode == LoadOptions::Mode::kClosed) {
            failed_waiting = owner->take_budget();
        } else if (!pending.empty()) {
            if (owner->take_budget()) {
                pending.pop_front();
                failed_waiting = true;
            } else {
                pending.clear();  // (what dispatch() does once the budget is spent)
            }
        }
    }
    bool counted = outstanding || failed_waiting;
    if (outstanding) busy.fetch_sub(1, std::memory_order_relaxed);
    if (counted) {
        count([&](Measurement& m) {
            switch (kind) {
                case kConnectFail: ++m.connect_errors; break;
                case kTimeoutFail: ++m.timeouts; break;
                case kProtocolFail:
                    ++m.protocol_errors;
                    if (m.protocol_example.empty()) m.protocol_example = why;
                    break;
                default: ++m.reset_errors; break;
            }
        });
        owner->finished(now_ns());
    }
    close(c);
    after_failure(c);
}

void Worker::close(Conn& c) {
    ++c.gen;
    c.answered = 0;
    if (c.fd >= 0) ::close(c.fd);  // also leaves the epoll set
    c.fd = -1;
    c.want_write = false;
    c.state = ConnState::kClosed;
}

void Worker::after_failure(Conn& c) {
    if (stopping) return;
    c.backoff_ns = c.backoff_ns ? std::min(c.backoff_ns * 2, kBackoffMaxNs) : kBackoffMinNs;
    if (owner->options.mode == LoadOptions::Mode::kOpen && pending.empty()) return;  // reopened on demand
    start_conn(c, c.backoff_ns);
}

void Worker::tick(int64_t now) {
    const auto& o = owner->options;
    int64_t dropped = 0;
    for (int taken = 0; next_intended <= now; ++taken) {
        if (taken == kMaxDuePerTick) {
            // A fixed rate skips to now, the requests skipped counted as dropped; a schedule (a
            // trace, intervals) goes on next tick, each request keeping its own intended time.
            if (!o.schedule) {
                const double gap = std::max(1.0, gap_ns);
                dropped += 1 + static_cast<int64_t>(static_cast<double>(now - next_intended) / gap);
                next_intended = now + std::max<int64_t>(1, static_cast<int64_t>(gap));
            }
            break;
        }
        if (pending.size() < kMaxPending) pending.push_back(next_intended);
        else ++dropped;
        if (o.schedule) {
            const double n = static_cast<double>(owner->workers.size());
            schedule_u += o.poisson ? std::exponential_distribution<double>(1.0 / n)(rng) : n;
            next_intended = std::max(next_intended + 1, owner->start_ns + o.schedule->offset_ns(schedule_u));
            continue;
        }
        double gap = o.poisson ? std::exponential_distribution<double>(1.0 / gap_ns)(rng) : gap_ns;
        next_intended += std::max<int64_t>(1, static_cast<int64_t>(gap));
    }
    // (each takes its share of a budget, as a sent one does: past it, a request is no part of the run)
    if (dropped > 0) dropped = owner->take_budget(dropped);
    if (dropped > 0) count([&](Measurement& m) { m.unfinished += dropped; });
    dispatch();
}

void Worker::dispatch() {
    if (stopping) return;
    int connecting = 0;
    for (auto& c : conns) {
        if (pending.empty()) return;
        if (c->state == ConnState::kIdle) {
            if (!reserve()) {
                pending.clear();
                return;
            }
            int64_t intended = pending.front();
            pending.pop_front();
            send(*c, intended);
        } else if ((c->state == ConnState::kConnecting || c->state == ConnState::kBackoff) && !c->resend) {
            ++connecting;
        }
    }
    // Still waiting: reopen closed connections, then open new ones, up to the cap.
    auto want = static_cast<int64_t>(pending.size()) - connecting;
    for (size_t i = 0; i < conns.size() && want > 0; ++i) {
        Conn& c = *conns[i];
        if (c.state == ConnState::kClosed || c.state == ConnState::kNew) {
            start_conn(c, c.backoff_ns);
            --want;
        }
    }
    while (want-- > 0 && static_cast<int>(conns.size()) < max_conns) connect(add_conn());
}

void Worker::sweep(int64_t now) {
    int64_t timeout = owner->options.timeout_ns;
    for (size_t i = 0; i < conns.size(); ++i) {
        Conn& c = *conns[i];
        if (c.state == ConnState::kBusy && now - c.sent_ns > timeout) fail(c, kTimeoutFail);
        else if (c.state == ConnState::kConnecting && now - c.sent_ns > timeout) fail(c, kConnectFail);
    }
}

void Worker::begin_stop() {
    stopping = true;
    // Due and never sent: unfinished, each taking its share of a budget as a sent one does. Past it,
    // a request is no part of the run (a recording's next pass, due just as it ended, was counted:
    // 20 connect errors + 1 unfinished for a trace of 20 requests).
    int64_t never_sent = owner->take_budget(static_cast<int64_t>(pending.size()));
    // A recording that asks for more than a tick takes (intervals of 0: one request a nanosecond)
    // falls behind, and what fell due but was never taken is never sent either: counted nowhere, a
    // 0.5 s run of 5e8 due requests added up to 2.6e7.
    if (const auto& sched = owner->options.schedule; sched && next_intended <= now_ns()) {
        const double due = sched->count_at(now_ns() - owner->start_ns);  // of every thread
        const double n = static_cast<double>(owner->workers.size());
        if (due > schedule_u) never_sent += owner->take_budget(static_cast<int64_t>(std::ceil((due - schedule_u) / n)));
    }
    next_intended = kNever;
    count([&](Measurement& m) { m.unfinished += never_sent; });
    pending.clear();
    // (A connection connecting to send a request again is outstanding, as a busy one: it finishes in
    // the grace period or counts unfinished; closed here it held the busy count for the whole grace.)
    for (auto& c : conns)
        if ((c->state == ConnState::kBackoff || c->state == ConnState::kConnecting) && !c->resend) close(*c);
    next_backoff = kNever;
}

void Worker::close_all() {
    int outstanding = 0;
    for (auto& c : conns) {
        if (c->state == ConnState::kBusy || c->resend) ++outstanding;
        c->resend = false;
        close(*c);
    }
    busy = 0;
    count([&](Measurement& m) { m.unfinished += outstanding; });
    exiting = true;
}

LoadSession::LoadSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

/// One socket per connection, an epoll and an eventfd per thread, and some to spare: raises the
/// soft RLIMIT_NOFILE up to the hard one if that is needed, or says what to do. Without this a
/// run past `ulimit -n` reported thousands of "connect errors" as the server's.
Status ensure_descriptors(int64_t connections, int threads) {
    const rlim_t need = static_cast<rlim_t>(connections + 2 * threads + 64);
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= need)
        return Status::ok();
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? need : std::min(need, lim.rlim_max);
    if (raised.rlim_cur > lim.rlim_cur) (void)::setrlimit(RLIMIT_NOFILE, &raised);
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur >= need) return Status::ok();
    return invalid_argument("{} connections need about {} file descriptors, and this process may open {} (ulimit -n, "
                            "hard limit {}); raise the limit or lower the concurrency",
                            connections, static_cast<uint64_t>(need), static_cast<uint64_t>(lim.rlim_cur),
                            lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max));
}

}  // namespace

Result<std::unique_ptr<LoadSession>> LoadSession::start(const Target& target, const LoadOptions& options) {
    if (target.requests.empty()) return invalid_argument("load target has no request to send");
    if (options.threads < 1) return invalid_argument("threads must be >= 1, got {}", options.threads);
    if (options.mode == LoadOptions::Mode::kClosed && options.concurrency < 1)
        return invalid_argument("concurrency must be >= 1, got {}", options.concurrency);
    if (options.schedule && options.poisson && options.schedule->exact())
        return invalid_argument("an intervals file gives every request its time: drop the Poisson distribution");
    if (options.mode == LoadOptions::Mode::kOpen && !options.schedule &&
        !(options.rate >= kMinRate && options.rate <= kMaxRate))
        return invalid_argument("request rate must be in [{:g}, {:g}] per second, got {:g}", kMinRate, kMaxRate,
                                options.rate);
    if (options.timeout_ns <= 0) return invalid_argument("timeout must be > 0");
    STRATO_RETURN_IF_ERROR(ensure_descriptors(
        options.mode == LoadOptions::Mode::kClosed ? options.concurrency : options.max_connections, options.threads));
    auto impl = std::make_unique<Impl>();
    impl->target = target;
    impl->options = options;
    impl->budget = options.request_budget;
    impl->limited = options.request_budget >= 0;
    {
        asio::io_context io;
        asio::ip::tcp::resolver resolver(io);
        boost::system::error_code ec;
        auto results = resolver.resolve(target.url.host, std::to_string(target.url.port), ec);
        if (ec)
            return Status(StatusCode::kUnavailable,
                          fmt::format("cannot resolve '{}': {}", target.url.host, ec.message()));
        for (const auto& e : results) impl->endpoints.push_back(e.endpoint());
        if (impl->endpoints.empty()) return Status(StatusCode::kUnavailable, fmt::format("'{}' has no address", target.url.host));
    }
    // (an open loop's thread holds a connection from the start: more threads than --max-connections
    // opened one each)
    int threads = std::min(options.threads, options.mode == LoadOptions::Mode::kClosed ? options.concurrency
                                                                                         : options.max_connections);
    for (int i = 0; i < threads; ++i) {
        impl->workers.push_back(std::make_unique<Worker>(impl.get(), i));
        const Worker& w = *impl->workers.back();
        if (w.epoll_fd < 0 || w.wake_fd < 0) return io_error("epoll/eventfd: {}", std::strerror(errno));
    }
    impl->window_start = impl->start_ns = now_ns();
    for (auto& w : impl->workers)
        w->thread = std::thread([w = w.get()] {
            set_thread_name(fmt::format("loadgen-{}", w->id));
            w->run();
        });
    return std::unique_ptr<LoadSession>(new LoadSession(std::move(impl)));
}

Measurement LoadSession::snapshot() {
    Measurement total;
    int64_t now = now_ns();
    for (auto& w : impl_->workers) {
        Measurement m;
        {
            std::lock_guard lock(w->mu);
            std::swap(m, w->counts);
        }
        total.merge(m);
    }
    total.seconds = static_cast<double>(now - impl_->window_start) / 1e9;
    impl_->window_start = now;
    return total;
}

int64_t LoadSession::requests_done() const { return impl_->done.load(std::memory_order_relaxed); }

int64_t LoadSession::last_done_ns() const { return impl_->last_done_ns.load(std::memory_order_relaxed); }

int64_t LoadSession::window_start_ns() const { return impl_->window_start; }

Measurement LoadSession::stop(int64_t grace_ns, const std::function<bool()>& interrupted) {
    if (impl_->stopped) return {};
    impl_->stopped = true;
    Measurement last = snapshot();  // the window ends now; late completions are not in it
    for (auto& w : impl_->workers) {
        w->stop_cmd = true;
        w->notify();
    }
    int64_t deadline = now_ns() + std::max<int64_t>(grace_ns, 0);
    auto outstanding = [&] {
        int n = 0;
        for (auto& w : impl_->workers) n += w->busy.load();
        return n;
    };
    // (Ctrl-C cuts the grace short: it was 8 s of waiting on a server that never answers, and a
    // second Ctrl-C in it lost everything measured)
    while (outstanding() > 0 && now_ns() < deadline && !(interrupted && interrupted()))
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (auto& w : impl_->workers) {
        w->close_cmd = true;
        w->notify();
    }
    for (auto& w : impl_->workers)
        if (w->thread.joinable()) w->thread.join();
    // What ended in the grace was counted nowhere, and a run's counts did not add up to what was
    // sent: answers are `late` (in neither the latencies nor the throughput of the window, which
    // had ended), failures are errors, the rest unfinished.
    last.merge_after_window(snapshot());
    return last;
}

void LoadSession::set_budget(int64_t n) {
    impl_->budget.store(n, std::memory_order_relaxed);
    impl_->limited.store(true, std::memory_order_release);
}

bool LoadSession::idle_after_budget() const {
    if (!impl_->limited.load() || impl_->budget.load() > 0) return false;
    for (const auto& w : impl_->workers)
        if (w->busy.load() > 0) return false;
    return true;
}

LoadSession::~LoadSession() {
    if (impl_ && !impl_->stopped) stop(0);
}

}  // namespace strato::loadgen
