#include "strato/loadgen/load.h"

#include <boost/asio.hpp>
#include <sys/epoll.h>
#include <unistd.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

namespace strato::loadgen {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

asio::steady_timer::time_point at_ns(int64_t ns) {
    return asio::steady_timer::time_point(std::chrono::nanoseconds(ns));
}

constexpr int64_t kDelayedNs = 1'000'000;
constexpr int64_t kBackoffMinNs = 1'000'000;
constexpr int64_t kBackoffMaxNs = 100'000'000;
constexpr size_t kReadBuffer = 64 * 1024;

}  // namespace

std::string build_request(const Url& url, std::string_view method, const std::vector<std::string>& headers,
                          std::string_view body) {
    std::string r = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\n", method, url.target, url.host_header);
    bool has_length = false;
    for (const auto& h : headers) {
        r += h;
        r += "\r\n";
        if (h.size() >= 15 && strncasecmp(h.c_str(), "content-length:", 15) == 0) has_length = true;
    }
    if (!has_length && (!body.empty() || method == "POST" || method == "PUT"))
        r += fmt::format("Content-Length: {}\r\n", body.size());
    r += "\r\n";
    r += body;
    return r;
}

int64_t Measurement::errors() const {
    int64_t n = connect_errors + reset_errors + timeouts + protocol_errors;
    for (const auto& [code, count] : http) n += count;
    return n;
}

int64_t Measurement::responses() const {
    int64_t n = ok;
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
    delayed += o.delayed;
    unfinished += o.unfinished;
    bytes_received += o.bytes_received;
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

namespace {

enum class ConnState { kNew, kConnecting, kIdle, kBusy, kBackoff, kClosed };

struct Conn {
    explicit Conn(asio::io_context& io) : sock(io), timer(io), buf(new char[kReadBuffer]) {}
    tcp::socket sock;
    asio::steady_timer timer;  // backoff and delayed start
    std::unique_ptr<char[]> buf;
    ResponseParser parser;
    ConnState state = ConnState::kNew;
    uint64_t gen = 0;          // bumped on close: handlers of an older generation return at once
    int64_t intended_ns = 0;   // when the outstanding request should have gone out
    int64_t sent_ns = 0;
    int64_t backoff_ns = 0;
};

}  // namespace

struct Worker {
    Worker(LoadSession::Impl* session, int index)
        : owner(session), id(index), epoll_fd(::epoll_create1(EPOLL_CLOEXEC)), ready(io), schedule(io), sweep(io) {
        if (epoll_fd >= 0) ready.assign(epoll_fd);
    }

    LoadSession::Impl* owner;
    int id;
    asio::io_context io{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
    // Responses are read through an epoll set of our own, registered once per connection, that
    // asio watches as one descriptor: a response costs one recv() and no per-request epoll_ctl
    // (asio re-arms its epoll on every async_wait and makes a speculative recv on every
    // async_read_some). Level-triggered; the data pointer is the Conn.
    int epoll_fd;
    asio::posix::stream_descriptor ready;
    std::array<epoll_event, 256> events{};
    std::vector<std::unique_ptr<Conn>> conns;
    asio::steady_timer schedule;  // open loop: next intended send
    asio::steady_timer sweep;     // timeouts
    std::deque<int64_t> pending;  // open loop: intended times waiting for a connection
    int64_t next_intended = 0;
    double gap_ns = 0;
    std::mt19937_64 rng;
    size_t next_request = 0;
    int max_conns = 0;
    std::atomic<int> busy{0};
    std::atomic<bool> stopping{false};
    std::mutex mu;          // guards counts
    Measurement counts;
    std::thread thread;

    void run();
    void start_conn(Conn& c, int64_t delay_ns);
    void connect(Conn& c);
    void send(Conn& c, int64_t intended);
    void watch_ready();
    void on_readable(Conn& c);
    void on_response(Conn& c);
    void fail(Conn& c, int kind);
    void close(Conn& c);
    void after_failure(Conn& c);
    void next_or_idle(Conn& c);
    void tick();
    void dispatch();
    void arm_sweep();
    void begin_stop();
    void close_all();
    template <class F>
    void count(F&& f) {
        std::lock_guard lock(mu);
        f(counts);
    }
};

struct LoadSession::Impl {
    Target target;
    LoadOptions options;
    std::vector<tcp::endpoint> endpoints;
    std::vector<std::unique_ptr<Worker>> workers;
    std::atomic<int64_t> budget{-1};  // requests that may still be sent; < 0 without a limit
    std::atomic<int64_t> done{0};
    int64_t window_start = 0;
    bool stopped = false;

    bool take_budget() {
        if (options.request_budget < 0) return true;
        return budget.fetch_sub(1, std::memory_order_relaxed) > 0;
    }
};

namespace {
enum FailKind { kConnectFail, kResetFail, kTimeoutFail, kProtocolFail };
}

void Worker::run() {
    const auto& o = owner->options;
    rng.seed(o.seed * 1000003 + static_cast<uint64_t>(id));
    int n_threads = static_cast<int>(owner->workers.size());
    if (o.mode == LoadOptions::Mode::kClosed) {
        for (int k = id; k < o.concurrency; k += n_threads) {
            conns.push_back(std::make_unique<Conn>(io));
            int64_t delay = o.spawn_rate > 0 ? static_cast<int64_t>(k / o.spawn_rate * 1e9) : 0;
            start_conn(*conns.back(), delay);
        }
    } else {
        max_conns = std::max(1, (o.max_connections + n_threads - 1 - id) / n_threads);
        gap_ns = 1e9 * n_threads / o.rate;
        // threads interleave: thread i starts i/rate seconds in
        next_intended = now_ns() + static_cast<int64_t>(1e9 * id / o.rate);
        conns.push_back(std::make_unique<Conn>(io));
        start_conn(*conns.back(), 0);
        tick();
    }
    arm_sweep();
    watch_ready();
    io.run();
}

void Worker::start_conn(Conn& c, int64_t delay_ns) {
    if (delay_ns <= 0) return connect(c);
    c.state = ConnState::kBackoff;
    c.timer.expires_after(std::chrono::nanoseconds(delay_ns));
    c.timer.async_wait([this, &c, g = c.gen](boost::system::error_code ec) {
        if (ec || g != c.gen || stopping) return;
        connect(c);
    });
}

void Worker::connect(Conn& c) {
    c.state = ConnState::kConnecting;
    asio::async_connect(c.sock, owner->endpoints, [this, &c, g = c.gen](boost::system::error_code ec, const tcp::endpoint&) {
        if (g != c.gen) return;
        if (ec) return fail(c, kConnectFail);
        c.backoff_ns = 0;
        c.sock.set_option(tcp::no_delay(true), ec);
        c.sock.non_blocking(true, ec);
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.ptr = &c;
        if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.sock.native_handle(), &ev) != 0) return fail(c, kConnectFail);
        c.state = ConnState::kIdle;
        next_or_idle(c);
    });
}

void Worker::next_or_idle(Conn& c) {
    if (stopping) {
        c.state = ConnState::kIdle;
        return;
    }
    if (owner->options.mode == LoadOptions::Mode::kClosed) {
        if (owner->take_budget()) return send(c, now_ns());
        c.state = ConnState::kIdle;
        return;
    }
    c.state = ConnState::kIdle;
    dispatch();
}

void Worker::send(Conn& c, int64_t intended) {
    c.state = ConnState::kBusy;
    busy.fetch_add(1, std::memory_order_relaxed);
    c.intended_ns = intended;
    c.sent_ns = now_ns();
    c.parser.reset();
    const auto& reqs = owner->target.requests;
    const std::string& r = reqs[next_request++ % reqs.size()];
    // The socket is non-blocking: a request that fits the send buffer goes out in one call; only
    // the rest of a large one needs an asynchronous write.
    boost::system::error_code ec;
    size_t n = c.sock.write_some(asio::buffer(r), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) n = 0, ec = {};
    if (ec) return fail(c, kResetFail);
    if (n < r.size())
        asio::async_write(c.sock, asio::buffer(r.data() + n, r.size() - n),
                          [this, &c, g = c.gen](boost::system::error_code wec, size_t) {
                              if (g != c.gen) return;
                              if (wec) return fail(c, kResetFail);
                          });
}

void Worker::watch_ready() {
    ready.async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
        if (ec) return;
        // Under load more answers arrive while a batch is handled: take them too before going
        // back to asio (a few rounds, so timers still run on time).
        for (int round = 0; round < 4; ++round) {
            int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 0);
            for (int i = 0; i < n; ++i) {
                auto* c = static_cast<Conn*>(events[static_cast<size_t>(i)].data.ptr);
                // A connection closed earlier in this batch is no longer registered; skip its event.
                if (c->state == ConnState::kBusy || c->state == ConnState::kIdle) on_readable(*c);
            }
            if (n <= 0) break;
        }
        watch_ready();
    });
}

void Worker::on_readable(Conn& c) {
    for (;;) {
        boost::system::error_code ec;
        size_t n = c.sock.read_some(asio::buffer(c.buf.get(), kReadBuffer), ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) return;  // epoll says when
        if (c.state != ConnState::kBusy) {  // nothing outstanding: the server closed an idle connection
            close(c);
            if (!stopping && owner->options.mode == LoadOptions::Mode::kClosed) start_conn(c, kBackoffMinNs);
            return;
        }
        if (n) c.parser.feed(c.buf.get(), n);
        if (ec) {
            if (ec == asio::error::eof) c.parser.finish_on_eof();
            if (c.parser.done()) return on_response(c);
            return fail(c, kResetFail);
        }
        if (c.parser.failed()) return fail(c, kProtocolFail);
        if (c.parser.done()) return on_response(c);
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
    busy.fetch_sub(1, std::memory_order_relaxed);
    owner->done.fetch_add(1, std::memory_order_relaxed);
    if (!c.parser.keep_alive()) {
        close(c);
        if (!stopping) connect(c);
        return;
    }
    next_or_idle(c);
}

void Worker::fail(Conn& c, int kind) {
    bool outstanding = c.state == ConnState::kBusy;
    bool counted = outstanding || kind == kConnectFail;
    if (outstanding) busy.fetch_sub(1, std::memory_order_relaxed);
    if (counted) {
        count([&](Measurement& m) {
            switch (kind) {
                case kConnectFail: ++m.connect_errors; break;
                case kTimeoutFail: ++m.timeouts; break;
                case kProtocolFail: ++m.protocol_errors; break;
                default: ++m.reset_errors; break;
            }
        });
        owner->done.fetch_add(1, std::memory_order_relaxed);
    }
    // An open-loop connect failure fails the request that was waiting for it.
    if (kind == kConnectFail && owner->options.mode == LoadOptions::Mode::kOpen && !pending.empty())
        pending.pop_front();
    close(c);
    after_failure(c);
}

void Worker::close(Conn& c) {
    ++c.gen;
    if (c.sock.is_open()) ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.sock.native_handle(), nullptr);
    boost::system::error_code ignored;
    c.sock.shutdown(tcp::socket::shutdown_both, ignored);
    c.sock.close(ignored);
    c.timer.cancel();
    c.state = ConnState::kClosed;
}

void Worker::after_failure(Conn& c) {
    if (stopping) return;
    c.backoff_ns = c.backoff_ns ? std::min(c.backoff_ns * 2, kBackoffMaxNs) : kBackoffMinNs;
    if (owner->options.mode == LoadOptions::Mode::kOpen && pending.empty()) return;  // reopened on demand
    start_conn(c, c.backoff_ns);
}

void Worker::tick() {
    if (stopping) return;
    int64_t now = now_ns();
    while (next_intended <= now) {
        pending.push_back(next_intended);
        double gap = owner->options.poisson ? std::exponential_distribution<double>(1.0 / gap_ns)(rng) : gap_ns;
        next_intended += std::max<int64_t>(1, static_cast<int64_t>(gap));
    }
    dispatch();
    schedule.expires_at(at_ns(next_intended));
    schedule.async_wait([this](boost::system::error_code ec) {
        if (!ec) tick();
    });
}

void Worker::dispatch() {
    if (stopping) return;
    int connecting = 0;
    for (auto& c : conns) {
        if (pending.empty()) return;
        if (c->state == ConnState::kIdle) {
            if (!owner->take_budget()) {
                pending.clear();
                return;
            }
            int64_t intended = pending.front();
            pending.pop_front();
            send(*c, intended);
        } else if (c->state == ConnState::kConnecting || c->state == ConnState::kBackoff) {
            ++connecting;
        }
    }
    // Still waiting: reopen closed connections, then open new ones, up to the cap.
    auto want = static_cast<int64_t>(pending.size()) - connecting;
    for (auto& c : conns) {
        if (want <= 0) return;
        if (c->state == ConnState::kClosed || c->state == ConnState::kNew) {
            start_conn(*c, c->backoff_ns);
            --want;
        }
    }
    while (want-- > 0 && static_cast<int>(conns.size()) < max_conns) {
        conns.push_back(std::make_unique<Conn>(io));
        connect(*conns.back());
    }
}

void Worker::arm_sweep() {
    int64_t timeout = owner->options.timeout_ns;
    int64_t period = std::clamp<int64_t>(timeout / 8, 1'000'000, 50'000'000);
    sweep.expires_after(std::chrono::nanoseconds(period));
    sweep.async_wait([this, timeout](boost::system::error_code ec) {
        if (ec) return;
        int64_t now = now_ns();
        for (auto& c : conns)
            if (c->state == ConnState::kBusy && now - c->sent_ns > timeout) fail(*c, kTimeoutFail);
        arm_sweep();
    });
}

void Worker::begin_stop() {
    stopping = true;
    schedule.cancel();
    count([&](Measurement& m) { m.unfinished += static_cast<int64_t>(pending.size()); });
    pending.clear();
    for (auto& c : conns)
        if (c->state == ConnState::kBackoff || c->state == ConnState::kConnecting) close(*c);
}

void Worker::close_all() {
    int outstanding = 0;
    for (auto& c : conns) {
        if (c->state == ConnState::kBusy) ++outstanding;
        close(*c);
    }
    busy = 0;
    count([&](Measurement& m) { m.unfinished += outstanding; });
    sweep.cancel();
    boost::system::error_code ignored;
    ready.close(ignored);  // closes epoll_fd
    io.stop();
}

LoadSession::LoadSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<LoadSession>> LoadSession::start(const Target& target, const LoadOptions& options) {
    if (target.requests.empty()) return invalid_argument("load target has no request to send");
    if (options.threads < 1) return invalid_argument("threads must be >= 1, got {}", options.threads);
    if (options.mode == LoadOptions::Mode::kClosed && options.concurrency < 1)
        return invalid_argument("concurrency must be >= 1, got {}", options.concurrency);
    if (options.mode == LoadOptions::Mode::kOpen && !(options.rate > 0))
        return invalid_argument("request rate must be > 0, got {}", options.rate);
    if (options.timeout_ns <= 0) return invalid_argument("timeout must be > 0");
    auto impl = std::make_unique<Impl>();
    impl->target = target;
    impl->options = options;
    impl->budget = options.request_budget;
    {
        asio::io_context io;
        tcp::resolver resolver(io);
        boost::system::error_code ec;
        auto results = resolver.resolve(target.url.host, std::to_string(target.url.port), ec);
        if (ec)
            return Status(StatusCode::kUnavailable,
                          fmt::format("cannot resolve '{}': {}", target.url.host, ec.message()));
        for (const auto& e : results) impl->endpoints.push_back(e.endpoint());
    }
    int threads = options.mode == LoadOptions::Mode::kClosed ? std::min(options.threads, options.concurrency)
                                                             : options.threads;
    for (int i = 0; i < threads; ++i) {
        impl->workers.push_back(std::make_unique<Worker>(impl.get(), i));
        if (impl->workers.back()->epoll_fd < 0) return io_error("epoll_create1: {}", std::strerror(errno));
    }
    impl->window_start = now_ns();
    for (auto& w : impl->workers) w->thread = std::thread([w = w.get()] { w->run(); });
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

Measurement LoadSession::stop(int64_t grace_ns) {
    if (impl_->stopped) return {};
    impl_->stopped = true;
    Measurement last = snapshot();  // the window ends now; late completions are not in it
    for (auto& w : impl_->workers) asio::post(w->io, [w = w.get()] { w->begin_stop(); });
    int64_t deadline = now_ns() + std::max<int64_t>(grace_ns, 0);
    auto outstanding = [&] {
        int n = 0;
        for (auto& w : impl_->workers) n += w->busy.load();
        return n;
    };
    while (outstanding() > 0 && now_ns() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (auto& w : impl_->workers) asio::post(w->io, [w = w.get()] { w->close_all(); });
    for (auto& w : impl_->workers)
        if (w->thread.joinable()) w->thread.join();
    Measurement tail = snapshot();  // only the unfinished count matters here
    last.unfinished += tail.unfinished;
    return last;
}

LoadSession::~LoadSession() {
    if (impl_ && !impl_->stopped) stop(0);
}

}  // namespace strato::loadgen
