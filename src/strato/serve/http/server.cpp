#include "strato/serve/http/server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <optional>
#include <strings.h>
#include <thread>
#include <vector>

#include "strato/core/log.h"
#include "strato/core/thread_name.h"

namespace strato::serve::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

const std::string* Request::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return &v;
    return nullptr;
}

namespace {

class Session;

// One event loop: an io_context run by one I/O thread, and the sessions living on it. Deadlines
// are checked by a periodic sweep rather than a timer per read and write: a request then costs no
// timer system calls (with beast's per-operation expiry, two timerfd_settime per request).
struct Loop {
    net::io_context ctx{1};
    net::steady_timer sweep{ctx};
    std::vector<std::weak_ptr<Session>> sessions;  // touched on this loop's thread only

    /// The I/O thread's body: io_context::run(), or with `busy` > 0 a run that, after each piece
    /// of work, keeps polling (epoll with a zero timeout) until `busy` passes with nothing to do.
    void run(std::chrono::microseconds busy) {
        if (busy.count() <= 0) {
            ctx.run();
            return;
        }
        using Clock = std::chrono::steady_clock;
        while (ctx.run_one() > 0) {
            auto until = Clock::now() + busy;
            while (!ctx.stopped() && Clock::now() < until)
                if (ctx.poll() > 0) until = Clock::now() + busy;
        }
    }
};

struct Shared {
    ServerOptions opts;
    Handler handler;
    std::atomic<int64_t> in_flight{0};
    std::atomic<int64_t> receiving{0};  // requests whose first bytes have arrived, not yet whole
    std::atomic<uint64_t> accepted{0};
    std::atomic<int64_t> open{0};  // sessions alive
    std::atomic<int64_t> lingering{0};  // sessions answered and closing (see Session::linger())
    std::atomic<bool> draining{false};
};

// A request target in absolute form (`GET http://host:8002/metrics`, as a client sends through a
// proxy) names the same resource as its path (RFC 9112 3.2.2: a server must accept it); it was
// a 404. Other targets are kept as they are.
std::string origin_form(std::string_view target) {
    for (std::string_view scheme : {"http://", "https://"})
        if (target.size() >= scheme.size() && strncasecmp(target.data(), scheme.data(), scheme.size()) == 0) {
            std::string_view rest = target.substr(scheme.size());
            const size_t path = rest.find_first_of("/?");
            if (path == std::string_view::npos) return "/";
            return (rest[path] == '?' ? "/" : "") + std::string(rest.substr(path));
        }
    return std::string(target);
}

std::string error_json(std::string_view msg) { return fmt::format(R"({{"error":"{}"}})", msg); }

class Session : public std::enable_shared_from_this<Session> {
public:
    using Clock = std::chrono::steady_clock;

    Session(tcp::socket&& socket, std::shared_ptr<Shared> shared, Loop* loop)
        : stream_(std::move(socket)), shared_(std::move(shared)), loop_(loop) {
        shared_->open.fetch_add(1);
    }
    ~Session() {
        set_receiving(false);  // a loop stopped with the request half read
        if (lingering_) shared_->lingering.fetch_sub(1);
        uncount();
    }

    void start() {
        net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
            self->loop_->sessions.push_back(self);
            self->wait_request();
        });
    }

    /// On drain, from the loop's thread: an idle connection closes now; a busy one after its
    /// response (write() sees `draining`), and so does one whose request is still arriving (it
    /// was accepted: its bytes are on the wire; the body deadline bounds the wait); one not
    /// started yet closes in wait_request().
    void close_if_idle() {
        if (!busy_ && !receiving_ && !lingering_) close();
    }

    /// Waiting for a request, none of it read (a keep-alive connection between requests, or one
    /// that has sent nothing yet), since idle_since().
    bool idle() const { return !busy_ && !receiving_ && !lingering_ && !started_; }
    Clock::time_point idle_since() const { return idle_since_; }
    void close_now() { close(); }

    /// From the loop's sweep: a read or write past its deadline closes the connection, as nginx's
    /// client_header_timeout / client_body_timeout / send_timeout do.
    void check_deadline(Clock::time_point now) {
        if (now >= deadline_) close();
    }

private:
    void set_deadline(std::chrono::milliseconds d) { deadline_ = Clock::now() + d; }

    // Waits for the next request: the idle deadline until its first byte, then the header deadline
    // until its end of headers, then the body deadline.
    void wait_request() {
        // Draining: requests already read (pipelined bytes here) are still answered, no new ones:
        // what is buffered must hold whole requests; nothing more is read for them.
        if (shared_->draining && buffer_.size() == 0) return close();
        buffered_only_ = shared_->draining;
        parser_.emplace();
        parser_->body_limit(shared_->opts.body_limit);
        parser_->header_limit(kHeaderLimit);
        parser_->eager(true);
        header_seen_ = false;
        started_ = buffer_.size() > 0;  // pipelined bytes of the next request
        if (started_) set_receiving(true);
        set_deadline(first_ || started_ ? shared_->opts.header_timeout : shared_->opts.idle_timeout);
        idle_since_ = Clock::now();
        first_ = false;
        parse();
    }

    // Feeds what is buffered to the parser, synchronously (a request that arrived whole costs no
    // further trip through the event loop), then reads more or handles the request.
    void parse() {
        beast::error_code ec;
        // RFC 9112 2.2: empty lines before a request line are ignored (a client that sent a CRLF
        // after a POST body got a 400 for its next request).
        while (!header_seen_ && buffer_.size() >= 2 &&
               std::string_view(static_cast<const char*>(buffer_.data().data()), 2) == "\r\n")
            buffer_.consume(2);
        while (buffer_.size() > 0 && !parser_->is_done()) {
            const bool had_header = parser_->is_header_done();
            size_t n = parser_->put(buffer_.data(), ec);
            // The header was parsed whole from the start of the buffer (beast takes none of it
            // before its end has arrived): refuse obs-fold there, as RFC 9112 5.2 allows. Beast
            // unfolds it, so `Transfer-Encoding:\r\n chunked` was read as chunked, which a proxy in
            // front that does not unfold reads as no body at all (request smuggling).
            if (!ec && !had_header && parser_->is_header_done() && has_obs_fold()) {
                return fail(
                    400, "a header line is folded onto the next (obs-fold, RFC 9112 5.2): send each field on one line");
            }
            buffer_.consume(n);
            if (ec == bhttp::error::need_more) {
                ec = {};
                break;
            }
            if (ec) return on_error(ec);
            if (n == 0) break;
        }
        if (parser_->is_header_done() && !header_seen_) {
            header_seen_ = true;
            if (!on_header()) return;
        }
        if (parser_->is_done()) return on_request();
        // In the body, what beast leaves in the buffer is an unfinished chunk-size line (with its
        // extensions) or trailer section, which it takes only whole and without a limit of its
        // own: `2;aaaa...` grew the buffer by every byte sent until the body deadline (200 MiB in
        // 4 s on one connection). Held to the header's limit (RFC 9112 7.1.1: a server ought to
        // limit chunk extensions and answer 4xx).
        if (header_seen_ && buffer_.size() > kHeaderLimit)
            return fail(
                400, fmt::format("a chunk-size line (with its extensions) or the trailer section of the chunked body "
                                 "is longer than {} bytes",
                                 kHeaderLimit));
        if (buffered_only_) return linger();  // (a client pipelining on through a drain kept it open)
        read_more();
    }

    // The buffer starts with the request line, its header complete: is a line of it folded
    // (CRLF followed by a blank or tab before the empty line that ends the header)?
    bool has_obs_fold() const {
        const std::string_view b(static_cast<const char*>(buffer_.data().data()), buffer_.size());
        const size_t end = b.find("\r\n\r\n");
        const std::string_view head = b.substr(0, end == std::string_view::npos ? b.size() : end);
        for (size_t at = head.find("\r\n"); at != std::string_view::npos; at = head.find("\r\n", at + 2))
            if (at + 2 < head.size() && (head[at + 2] == ' ' || head[at + 2] == '\t')) return true;
        return false;
    }

    void read_more() {
        stream_.async_read_some(buffer_.prepare(16384), [self = shared_from_this()](beast::error_code ec, size_t n) {
            if (ec) return self->close();  // EOF, reset, or closed at a deadline
            self->buffer_.commit(n);
            if (!self->started_) {
                self->started_ = true;
                self->set_receiving(true);
                self->set_deadline(self->shared_->opts.header_timeout);
            }
            self->parse();
        });
    }

    std::string limit_flag() const {
        const std::string& f = shared_->opts.body_limit_flag;
        return f.empty() ? "" : " (" + f + ")";
    }

    void on_error(beast::error_code ec) {
        if (ec == bhttp::error::body_limit)
            return fail(413, fmt::format("request body exceeds the limit of {} bytes{}", shared_->opts.body_limit,
                                         limit_flag()));
        if (ec == bhttp::error::header_limit) {
            // (RFC 9110 15.5.15: a target too long is 414; it was said to be a header field)
            if (std::string_view(static_cast<const char*>(buffer_.data().data()), buffer_.size()).find('\n') ==
                std::string_view::npos)
                return fail(414, fmt::format("request line (method, target and version) is longer than {} bytes",
                                             kHeaderLimit));
            return fail(431, fmt::format("request header is larger than {} bytes", kHeaderLimit));
        }
        fail(400, fmt::format("malformed HTTP request: {}", ec.message()));
    }

    // The header is complete: refuse an oversized body before reading it, answer
    // `Expect: 100-continue`, and start the body deadline. False when the request ends here.
    bool on_header() {
        // Transfer-Encoding: only "chunked". Not last, the body's length is unknown and the rest
        // would be read as another request (RFC 9112 6.3: 400 and close; a smuggling vector behind
        // a proxy that reads it otherwise); gzip and other codings before it are not implemented.
        const auto& fields = parser_->get();
        if (auto [first, last] = fields.equal_range(bhttp::field::transfer_encoding); first != last) {
            std::string te;  // every Transfer-Encoding line, in order, is one list (RFC 9110 5.3)
            for (auto it = first; it != last; ++it) te += (te.empty() ? "" : ", ") + std::string(it->value());
            std::vector<std::string> codings;
            for (auto part : bhttp::token_list{te}) codings.emplace_back(part);
            if (codings.empty() || !beast::iequals(codings.back(), "chunked")) {
                fail(400, fmt::format("Transfer-Encoding '{}' does not end in chunked: the body's length is unknown", te));
                return false;
            }
            if (codings.size() > 1) {
                fail(501, fmt::format("Transfer-Encoding '{}' is not implemented (only chunked; Content-Encoding gzip or "
                                      "deflate is)", te));
                return false;
            }
        }
        auto cl = parser_->content_length();
        if (cl && *cl > shared_->opts.body_limit) {
            fail(413, fmt::format("request body of {} bytes exceeds the limit of {} bytes{}", *cl,
                                  shared_->opts.body_limit, limit_flag()));
            return false;
        }
        set_deadline(shared_->opts.body_timeout);
        if (parser_->is_done()) return true;
        auto expect = parser_->get()[bhttp::field::expect];
        // (RFC 9110 10.1.1: an HTTP/1.0 client's 100-continue is ignored; it cannot read a 100)
        if (!expect.empty() && beast::iequals(expect, "100-continue") && parser_->get().version() >= 11) {
            auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, 11);
            bhttp::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                if (wec) return self->close();
                self->read_more();
            });
            return false;
        }
        return true;
    }

    void on_request() {
        set_receiving(false);
        deadline_ = Clock::time_point::max();
        auto msg = parser_->release();
        parser_.reset();
        http10_ = msg.version() == 10;
        // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 request means faulty framing: answered,
        // then the connection closes (what follows may be the rest of its body).
        keep_alive_ = msg.keep_alive() && !(http10_ && msg.count(bhttp::field::transfer_encoding) > 0);
        head_ = msg.method() == bhttp::verb::head;
        Request r;
        r.method = std::string(msg.method_string());
        r.target = origin_form(std::string_view(msg.target().data(), msg.target().size()));
        r.headers.reserve(8);
        for (const auto& f : msg) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
        r.body = std::move(msg.body());
        r.received = Clock::now();
        cancelled_ = std::make_shared<std::atomic<bool>>(false);
        r.cancelled = cancelled_;
        busy_ = true;
        replied_ = false;
        shared_->in_flight.fetch_add(1);

        auto once = std::make_shared<std::atomic<bool>>(false);
        Reply reply = [self = shared_from_this(), once](Response resp) {
            if (once->exchange(true)) return;
            // dispatch: a reply made inside the handler (inline execution) writes at once.
            net::dispatch(self->stream_.get_executor(),
                          [self, resp = std::move(resp)]() mutable { self->write(std::move(resp)); });
        };
        try {
            shared_->handler(std::move(r), reply);
        } catch (const std::exception& e) {
            log::error("http handler threw: {}", e.what());
            Response resp;
            resp.status = 500;
            resp.content_type = "application/json";
            resp.body = error_json("internal error");
            reply(std::move(resp));
        }
        // A request answered inside the handler needs no watch: this thread ran it to the end.
        if (!replied_) watch_client();
    }

    // While a request is in flight, notices the client hanging up (EOF or reset) so the work
    // for it can be dropped. Pipelined bytes end the watch without consuming them.
    void watch_client() {
        watching_ = true;
        stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
            self->watching_ = false;
            if (ec || !self->busy_) return;
            char c;
            ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) self->cancelled_->store(true);
        });
    }

    void write(Response resp) {
        replied_ = true;
        if (watching_) {
            beast::error_code ignored;
            stream_.socket().cancel(ignored);  // ends watch_client()
        }
        auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(resp.status), 11);
        res->set(bhttp::field::server, shared_->opts.server_name);
        if (!resp.content_type.empty()) res->set(bhttp::field::content_type, resp.content_type);
        for (auto& [k, v] : resp.headers) res->set(k, v);
        res->body() = std::move(resp.body);
        // Draining: bytes of pipelined requests the client sent before this answer may still be in
        // the socket, unread (the request in flight only peeks): taken once, with what is buffered.
        if (shared_->draining && !topped_up_) {
            topped_up_ = true;
            beast::error_code aec;
            const size_t n = std::min<size_t>(stream_.socket().available(aec), shared_->opts.body_limit + 64 * 1024);
            if (!aec && n > 0) {
                const size_t got = stream_.socket().read_some(buffer_.prepare(n), aec);
                if (!aec) buffer_.commit(got);
            }
        }
        bool keep = keep_alive_ && !resp.close && (!shared_->draining || buffer_.size() > 0);
        res->keep_alive(keep);
        // An HTTP/1.0 client closes unless told otherwise (`ab -k` read to EOF: a 300 s stall).
        if (keep && http10_) res->set(bhttp::field::connection, "keep-alive");
        res->prepare_payload();
        if (head_) res->body().clear();  // the header says what a GET would send; no body follows (RFC 9110 9.3.2)
        set_deadline(shared_->opts.body_timeout);
        bhttp::async_write(stream_, *res, [self = shared_from_this(), res, keep](beast::error_code ec, size_t) {
            self->busy_ = false;
            // A pipelined request is counted as arriving before this one stops counting, so a
            // drain never sees the connection idle between the two.
            if (!ec && keep && self->buffer_.size() > 0) self->set_receiving(true);
            self->shared_->in_flight.fetch_sub(1);
            if (ec) return self->close();
            if (!keep) return self->linger();
            self->wait_request();
        });
    }

    // An error found while reading: answer it (the connection closes after).
    void fail(unsigned status, const std::string& message) {
        auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(status), 11);
        res->set(bhttp::field::server, shared_->opts.server_name);
        res->set(bhttp::field::content_type, "application/json");
        res->body() = fmt::format("{{\"error\":{}}}", nlohmann_quote(message));
        res->keep_alive(false);
        res->prepare_payload();
        set_deadline(std::chrono::seconds(5));
        bhttp::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
            if (ec) return self->close();
            self->linger();
        });
    }

    static std::string nlohmann_quote(const std::string& s) {
        std::string out = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') {
                out += '\\';
                out += c;
            } else if (static_cast<unsigned char>(c) < 0x20) {
                out += fmt::format("\\u{:04x}", static_cast<int>(c));
            } else {
                out += c;
            }
        }
        return out + "\"";
    }

    void set_receiving(bool on) {
        if (on == receiving_) return;
        receiving_ = on;
        shared_->receiving.fetch_add(on ? 1 : -1);
    }

    // Leaves Shared::open when the socket closes, not when the last handler holding the session
    // has run: evictions posted for a burst of connections at the cap see the room already made
    // (else they went on closing idle connections, down to one just accepted).
    void uncount() {
        if (std::exchange(counted_, false)) shared_->open.fetch_sub(1);
    }

    void close() {
        set_receiving(false);
        uncount();
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream_.close();
    }

    // Closes after an answer that the client may still be sending to (an error found before the
    // body was read, a close while requests are pipelined): closing with unread bytes makes the
    // kernel send a reset, and a client still writing its body gets "Connection reset by peer"
    // instead of the answer. As nginx's lingering close: stop sending (the client reads the
    // answer, then EOF), read and drop what still comes until the client closes, for at most
    // kLingerTime, then close.
    void linger() {
        set_receiving(false);
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        if (ec) return close();
        if (!lingering_) {
            lingering_ = true;
            shared_->lingering.fetch_add(1);
        }
        deadline_ = Clock::now() + kLingerTime;  // (the sweep closes it there)
        buffer_.clear();
        drop_input();
    }

    void drop_input() {
        stream_.async_read_some(buffer_.prepare(16384), [self = shared_from_this()](beast::error_code ec, size_t) {
            if (ec) return self->close();  // EOF: the client read the answer and closed; or the deadline
            self->drop_input();
        });
    }

    static constexpr std::chrono::seconds kLingerTime{5};
    static constexpr size_t kHeaderLimit = 64 * 1024;  // request line and header; a chunk-size line; the trailer

    beast::tcp_stream stream_;  // no expiry set: deadlines are swept (Loop)
    beast::flat_buffer buffer_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    std::shared_ptr<Shared> shared_;
    Loop* loop_;
    std::shared_ptr<std::atomic<bool>> cancelled_;
    Clock::time_point deadline_ = Clock::time_point::max();
    Clock::time_point idle_since_ = Clock::now();
    bool header_seen_ = false;
    bool started_ = false;   // a byte of the current request has arrived
    bool receiving_ = false;  // counted in Shared::receiving
    bool http10_ = false;     // the request in hand is HTTP/1.0
    bool buffered_only_ = false;  // draining: the request must be whole in buffer_
    bool topped_up_ = false;      // draining: the socket's unread bytes were taken once
    bool head_ = false;       // the request being answered is a HEAD
    bool replied_ = false;   // the current request's response has been started
    bool watching_ = false;  // watch_client() is pending
    bool busy_ = false;
    bool lingering_ = false;  // answered; dropping input until the client closes (linger())
    bool keep_alive_ = true;
    bool first_ = true;
    bool counted_ = true;  // counted in Shared::open
};

}  // namespace

// One io_context per I/O thread, as nginx runs one event loop per worker: a connection lives on
// one thread from accept to close, so its handlers need no strand and a request at concurrency 1
// costs no cross-thread wake-ups (one shared io_context run by two threads: 73 µs per health
// check round trip vs 50 µs, `wrk -c1`). Connections are dealt to the threads round-robin.
struct Server::Impl {
    std::shared_ptr<Shared> shared = std::make_shared<Shared>();
    std::vector<std::unique_ptr<Loop>> loops;
    std::vector<net::executor_work_guard<net::io_context::executor_type>> work;
    std::chrono::milliseconds tick{1000};  // how often each loop checks its sessions' deadlines
    std::optional<tcp::acceptor> acceptor;
    std::vector<std::thread> threads;
    size_t next = 0;  // the loop the next connection goes to (used on the acceptor's thread only)
    int64_t connection_cap = 0;               // max_connections, or the one the descriptor limit gives (0: none)
    uint64_t refused = 0;                     // connections closed at the cap or for lack of descriptors
    std::optional<net::steady_timer> pause;   // accept paused while out of descriptors
    uint16_t port = 0;
    bool stopped = false;

    void accept() {
        Loop* target = loops[next++ % loops.size()].get();
        acceptor->async_accept(target->ctx, [this, target](beast::error_code ec, tcp::socket socket) {
            if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
            if (!ec) {
                const int64_t cap = connection_cap;
                if (cap > 0 && shared->open.load() >= cap) {
                    // As nginx when its connections run out: the longest-idle keep-alive connection
                    // of each loop is closed to make room (256 idle clients locked a Prometheus
                    // scraper out of strato monitor until their 75 s idle timeout). The new one is
                    // let in while that happens, up to a margin; past it (every connection busy) it
                    // is closed at once.
                    if (shared->open.load() >= cap + 1 + cap / 16) {
                        if (refused++ % 1000 == 0)
                            log::warn("http: {} connections open (the most allowed), none idle; closing new ones "
                                      "({} so far)", cap, refused);
                        beast::error_code ignored;
                        socket.close(ignored);
                        return accept();
                    }
                    for (auto& l : loops)
                        net::post(l->ctx, [loop = l.get(), sh = shared.get(), cap, asked = Session::Clock::now()] {
                            close_longest_idle(loop, *sh, cap, asked);
                        });
                }
                shared->accepted.fetch_add(1);
                beast::error_code ignored;
                socket.set_option(tcp::no_delay(true), ignored);
                std::make_shared<Session>(std::move(socket), shared, target)->start();
            } else if (ec == net::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system) {
                // Wait on a timer, not in a sleep: this thread also runs the first loop's connections.
                // Meanwhile the longest-idle connection of each loop makes room, as at the cap (with
                // only a pause, 1,010 idle clients under a limit of 1,024 locked every other client
                // out until the header deadline, and came back).
                if (refused++ % 1000 == 0)
                    log::warn(
                        "http: out of file descriptors with {} connections open; closing the longest idle and "
                        "pausing accept for 50 ms",
                        shared->open.load());
                for (auto& l : loops)
                    net::post(l->ctx, [loop = l.get(), sh = shared.get(), asked = Session::Clock::now()] {
                        close_longest_idle(loop, *sh, 0, asked);
                    });
                pause.emplace(loops[0]->ctx);
                pause->expires_after(std::chrono::milliseconds(50));
                pause->async_wait([this](beast::error_code wec) {
                    if (!wec && acceptor->is_open()) accept();
                });
                return;
            }
            accept();
        });
    }

    // From the loop's thread: unless fewer than `at_least` connections are open by now. Only one
    // idle since before `asked`: the connection that asked for room, if dealt to this loop and not
    // read from yet, is idle too (and was closed when the loop had no older one left).
    static void close_longest_idle(Loop* loop, const Shared& shared, int64_t at_least,
                                   Session::Clock::time_point asked) {
        if (shared.open.load() < at_least) return;
        std::shared_ptr<Session> oldest;
        for (const auto& w : loop->sessions)
            if (auto sp = w.lock();
                sp && sp->idle() && sp->idle_since() < asked && (!oldest || sp->idle_since() < oldest->idle_since()))
                oldest = std::move(sp);
        if (oldest) oldest->close_now();
    }

    void sweep(Loop* loop) {
        loop->sweep.expires_after(tick);
        loop->sweep.async_wait([this, loop](beast::error_code ec) {
            if (ec) return;
            auto now = Session::Clock::now();
            auto& v = loop->sessions;
            for (size_t i = 0; i < v.size();) {
                if (auto s = v[i].lock()) {
                    s->check_deadline(now);
                    ++i;
                } else {
                    v[i] = std::move(v.back());
                    v.pop_back();
                }
            }
            sweep(loop);
        });
    }
};

Server::Server(ServerOptions options, Handler handler) : impl_(std::make_unique<Impl>()) {
    impl_->shared->opts = std::move(options);
    impl_->shared->handler = std::move(handler);
}

Server::~Server() { stop(); }

Status Server::start() {
    const ServerOptions& o = impl_->shared->opts;
    beast::error_code ec;
    // ("localhost" is the loopback address, as strato monitor's --address took it)
    auto addr = net::ip::make_address(o.address == "localhost" ? "127.0.0.1" : o.address, ec);
    if (ec) return invalid_argument("'{}' is not an IP address to listen on", o.address);
    tcp::endpoint ep(addr, o.port);
    const int n = std::max(1, o.threads);
    for (int i = 0; i < n; ++i) {
        impl_->loops.push_back(std::make_unique<Loop>());
        impl_->work.push_back(net::make_work_guard(impl_->loops.back()->ctx));
    }
    // Deadlines are enforced to within an eighth of the shortest one (at most 1 s late).
    auto shortest = std::min({o.header_timeout, o.body_timeout, o.idle_timeout});
    impl_->tick = std::clamp(shortest / 8, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
    impl_->acceptor.emplace(impl_->loops[0]->ctx);
    auto& acc = *impl_->acceptor;
    std::string where = fmt::format("{}:{}", o.address, o.port);
    if (acc.open(ep.protocol(), ec); ec) return Status{StatusCode::kUnavailable, fmt::format("cannot open a socket for {}: {}", where, ec.message())};
    acc.set_option(net::socket_base::reuse_address(true), ec);
    if (acc.bind(ep, ec); ec)
        return Status{StatusCode::kUnavailable, fmt::format("cannot listen on {}: {}", where, ec.message())};
    if (acc.listen(net::socket_base::max_listen_connections, ec); ec)
        return Status{StatusCode::kUnavailable, fmt::format("cannot listen on {}: {}", where, ec.message())};
    impl_->port = acc.local_endpoint().port();
    impl_->connection_cap = o.max_connections;
    if (rlimit lim{};
        impl_->connection_cap == 0 && ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
        const auto soft = static_cast<int64_t>(lim.rlim_cur);
        impl_->connection_cap = std::max<int64_t>(16, soft - soft / 8 - 32);
    }
    impl_->accept();
    for (auto& l : impl_->loops) {
        impl_->sweep(l.get());
        impl_->threads.emplace_back([loop = l.get(), busy = o.busy_poll, name = fmt::format("{}-{}", o.thread_name, impl_->threads.size())] {
            set_thread_name(name);
            loop->run(busy);
        });
    }
    return Status::ok();
}

uint16_t Server::port() const { return impl_->port; }

int64_t Server::drain(std::chrono::milliseconds timeout) {
    auto& s = *impl_->shared;
    s.draining = true;
    if (impl_->acceptor) {
        std::promise<void> closed;
        net::post(impl_->acceptor->get_executor(), [this, &closed] {
            beast::error_code ec;
            impl_->acceptor->close(ec);
            closed.set_value();
        });
        if (!impl_->threads.empty()) closed.get_future().wait();
    }
    for (auto& l : impl_->loops)
        net::post(l->ctx, [loop = l.get()] {
            for (auto& w : loop->sessions)
                if (auto sp = w.lock()) sp->close_if_idle();
        });
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto open = [&] { return s.in_flight.load() + s.receiving.load(); };
    // Answered connections still closing (linger()) are waited for too, within the timeout: a
    // stop() cutting them short resets them, and an answer not yet read by its client is lost.
    while ((open() > 0 || s.lingering.load() > 0) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return open();
}

void Server::stop() {
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (auto& w : impl_->work) w.reset();
    for (auto& l : impl_->loops) l->ctx.stop();
    for (auto& t : impl_->threads) t.join();
    impl_->threads.clear();
}

int64_t Server::in_flight() const { return impl_->shared->in_flight.load(); }
uint64_t Server::connections_accepted() const { return impl_->shared->accepted.load(); }

}  // namespace strato::serve::http
