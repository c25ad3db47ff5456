#include "strato/dist/peers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "strato/core/parse.h"

extern char** environ;

namespace strato::dist {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
Clock::time_point plus(Clock::time_point t, double s) {
    return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
Clock::time_point after(double s) { return plus(Clock::now(), s); }

constexpr char kPing[] = "strato-ping\n";
constexpr char kPong[] = "strato-pong\n";
constexpr size_t kPingSize = sizeof kPing - 1, kPongSize = sizeof kPong - 1;

// The echo server's limits. A client whose unsent pongs pass kOutMax sends and never reads; a
// line past kLineMax is no ping. Either is dropped rather than hold memory (or, with a blocking
// send, the whole loop) for the other clients.
constexpr size_t kOutMax = 64 * 1024;
constexpr size_t kLineMax = 1024;

/// poll() on one socket until `deadline`: > 0 ready, 0 timed out, < 0 error (errno set).
int wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        const double left = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
        if (left <= 0) return 0;
        pollfd p{fd, events, 0};
        // Rounded up: poll(0) just before the deadline would spin.
        int r = ::poll(&p, 1, static_cast<int>(std::ceil(left)));
        if (r < 0 && errno == EINTR) continue;
        return r;
    }
}

/// Connects with a timeout; returns a non-blocking socket or -1 with `err` set.
int connect_to(const sockaddr_in& a, double timeout_s, std::string* err) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return *err = strerror(errno), -1;
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    if (rc != 0 && errno != EINPROGRESS) {
        *err = strerror(errno);
        ::close(fd);
        return -1;
    }
    if (rc != 0) {
        int ready = wait_for(fd, POLLOUT, after(timeout_s));
        if (ready <= 0) {
            *err = ready == 0 ? fmt::format("connect timed out after {:g} s", timeout_s) : strerror(errno);
            ::close(fd);
            return -1;
        }
        int so = 0;
        socklen_t len = sizeof so;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
        if (so != 0) {
            *err = strerror(so);
            ::close(fd);
            return -1;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

enum class Read { kOk, kTimeout, kClosed, kError };

/// Reads buf[*got, n) by `deadline`. The deadline covers the whole message, not each byte: a
/// peer that trickles its answer a byte at a time must not stretch one round trip past the
/// timeout. `*err_no` is errno for kError.
Read read_by(int fd, char* buf, size_t n, size_t* got, Clock::time_point deadline, int* err_no) {
    while (*got < n) {
        int ready = wait_for(fd, POLLIN, deadline);
        if (ready == 0) return Read::kTimeout;
        if (ready < 0) return *err_no = errno, Read::kError;
        ssize_t r = ::recv(fd, buf + *got, n - *got, 0);
        if (r == 0) return Read::kClosed;
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return *err_no = errno, Read::kError;
        }
        *got += static_cast<size_t>(r);
    }
    return Read::kOk;
}

/// Sends the ping; empty, or why not.
std::string send_ping(int fd) {
    ssize_t n = ::send(fd, kPing, kPingSize, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(kPingSize)) return {};
    return fmt::format("cannot send the ping: {}", n < 0 ? strerror(errno) : "the socket buffer is full");
}

/// Why a round trip that ended with `r` after `got` bytes failed.
std::string read_failure(Read r, size_t got, int err_no, double timeout_s) {
    switch (r) {
        case Read::kOk:
            return "an answer that is not strato's pong";
        case Read::kTimeout:
            return got == 0 ? fmt::format("no pong within {:g} s", timeout_s)
                            : fmt::format("only {} of the pong's {} bytes within {:g} s", got, kPongSize, timeout_s);
        case Read::kClosed:
            return "the peer closed the connection";
        case Read::kError:
            break;
    }
    return strerror(err_no);
}

}  // namespace

constexpr int kMaxFailedInARow = 3;

std::vector<PeerProbe> probe_peers(const std::vector<std::string>& targets, int samples, double timeout_s) {
    samples = std::max(1, samples);
    std::vector<PeerProbe> out;
    for (const auto& t : targets) {
        PeerProbe p;
        p.target = t;
        p.requested = samples;
        auto target = parse_host_port(t, "peer");
        if (!target) {
            p.error = "expected HOST:PORT with a port in 1..65535";
            out.push_back(p);
            continue;
        }
        const std::string& host = target->host;
        const int port = target->port;
        addrinfo hints{}, *res = nullptr;
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || !res) {
            p.error = fmt::format("cannot resolve {}: {}", host, gai_strerror(rc));
            out.push_back(p);
            continue;
        }
        sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
        freeaddrinfo(res);
        addr.sin_port = htons(static_cast<uint16_t>(port));
        std::vector<double> rtts;
        // A failed sample is counted and the probe goes on (over a new connection: a late pong
        // on the old one would be taken for the next sample's), until kMaxFailedInARow fail in a
        // row: one lost round trip does not fail a peer, and a silent one costs a few timeouts.
        int tried = 0, failures = 0, in_a_row = 0, first_failed = -1;
        std::string first_why;
        auto fail = [&](int sample, std::string why) {
            if (first_failed < 0) first_failed = sample, first_why = std::move(why);
            ++failures;
            ++in_a_row;
        };
        // First: is it strato's echo? Then ping-pong over one connection; else time handshakes.
        int fd = connect_to(addr, timeout_s, &p.error);
        if (fd < 0) {
            out.push_back(p);
            continue;
        }
        p.reachable = true;
        char buf[kPongSize];
        size_t got = 0;
        int err_no = 0;
        auto t0 = Clock::now();
        std::string why = send_ping(fd);
        Read r = Read::kError;
        if (why.empty()) {
            // Another service gets 1 s to show it is no echo; an answer that starts like a pong
            // is strato's echo however slow, and gets the whole timeout.
            r = read_by(fd, buf, kPongSize, &got, plus(t0, std::min(timeout_s, 1.0)), &err_no);
            if (r == Read::kTimeout && got > 0 && std::memcmp(buf, kPong, got) == 0)
                r = read_by(fd, buf, kPongSize, &got, plus(t0, timeout_s), &err_no);
        }
        p.echo = got > 0 && std::memcmp(buf, kPong, got) == 0;
        if (p.echo) {
            tried = 1;
            if (r == Read::kOk) {
                rtts.push_back(ms_since(t0));
            } else {
                fail(0, read_failure(r, got, err_no, timeout_s));
                ::close(fd);
                fd = -1;
            }
            for (int i = 1; i < samples && in_a_row < kMaxFailedInARow; ++i, ++tried) {
                if (fd < 0) {
                    std::string err;
                    fd = connect_to(addr, timeout_s, &err);
                    if (fd < 0) {
                        fail(i, "cannot connect again: " + err);
                        continue;
                    }
                }
                got = 0;
                t0 = Clock::now();
                why = send_ping(fd);
                if (why.empty()) {
                    r = read_by(fd, buf, kPongSize, &got, plus(t0, timeout_s), &err_no);
                    if (r == Read::kOk && std::memcmp(buf, kPong, kPongSize) == 0) {
                        rtts.push_back(ms_since(t0));
                        in_a_row = 0;
                        continue;
                    }
                    why = read_failure(r, got, err_no, timeout_s);
                }
                fail(i, why);
                ::close(fd);
                fd = -1;
            }
            if (fd >= 0) ::close(fd);
        } else {
            ::close(fd);
            for (int i = 0; i < samples && in_a_row < kMaxFailedInARow; ++i, ++tried) {
                std::string err;
                t0 = Clock::now();
                int c = connect_to(addr, timeout_s, &err);
                if (c < 0) {
                    fail(i, err);
                    continue;
                }
                rtts.push_back(ms_since(t0));
                in_a_row = 0;
                ::close(c);
            }
        }
        if (failures > 0) {
            p.failed = failures + (samples - tried);
            // A peer that took the probe's first connection, then stopped accepting (a full
            // backlog, a hung process), is reachable yet measures nothing: say so.
            std::vector<std::string> notes;
            if (!p.echo && rtts.empty()) notes.push_back("the first connect succeeded");
            if (failures > 1) notes.push_back(fmt::format("{} samples failed", failures));
            if (tried < samples)
                notes.push_back(fmt::format("{} failed in a row: {} not tried", kMaxFailedInARow,
                                            tried + 1 == samples ? fmt::format("sample {}", samples)
                                                                 : fmt::format("samples {}..{}", tried + 1, samples)));
            p.error = fmt::format("{} on sample {}{}", first_why, first_failed + 1,
                                  notes.empty() ? "" : fmt::format(" ({})", fmt::join(notes, "; ")));
        }
        if (!rtts.empty()) {
            std::sort(rtts.begin(), rtts.end());
            p.samples = static_cast<int>(rtts.size());
            p.min_ms = rtts.front();
            p.max_ms = rtts.back();
            p.median_ms = rtts[rtts.size() / 2];
        }
        out.push_back(p);
    }
    return out;
}

std::string describe(const PeerProbe& p) {
    if (!p.reachable) return "unreachable: " + p.error;
    const std::string rtt =
        p.samples == 0 ? std::string()
                       : fmt::format("round trip median {:.3f} ms (min {:.3f}, max {:.3f}; {} samples, {})",
                                     p.median_ms, p.min_ms, p.max_ms, p.samples, p.echo ? "echo" : "TCP handshake");
    if (p.failed == 0) return rtt;
    // (measured, not "failed": probing stops at the first failure, the rest are not tried)
    return fmt::format("{} of {} samples measured: {}{}", p.samples, p.requested, p.error, rtt.empty() ? "" : "; " + rtt);
}

Result<HostPort> parse_listen_address(std::string_view text) {
    if (text.find('[') != std::string_view::npos || text.find(':') != text.rfind(':'))
        return invalid_argument("'{}': IPv6 addresses are not supported; give an IPv4 address", text);
    HostPort hp{"0.0.0.0", 0};
    std::string_view port = text;
    if (size_t c = text.rfind(':'); c != std::string_view::npos) {
        hp.host = std::string(text.substr(0, c));
        port = text.substr(c + 1);
    }
    in_addr a{};
    auto number = parse_int(port, 0, 65535);  // 0: any free port, printed
    if (!number || inet_pton(AF_INET, hp.host.c_str(), &a) != 1)
        return invalid_argument("'{}': expected [HOST:]PORT with HOST an IPv4 address and a port in 0..65535", text);
    hp.port = static_cast<int>(*number);
    return hp;
}

Status serve_echo(const std::string& host, int port, const std::function<bool()>& stop,
                  const std::function<void(int)>& bound) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return io_error("socket: {}", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
        ::close(fd);
        return invalid_argument("--listen: '{}' is not an IPv4 address", host);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
        int err = errno;
        ::close(fd);
        return io_error("cannot listen on {}:{}: {}", host, port, strerror(err));
    }
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    if (bound) bound(ntohs(a.sin_port));
    struct Client {
        size_t line = 0;  // bytes of the line not yet ended
        std::string out;  // pongs the client has not taken yet
    };
    std::map<int, Client> clients;
    std::vector<pollfd> fds;
    while (!stop()) {
        fds.assign(1, {fd, POLLIN, 0});
        for (auto& [c, cl] : clients)
            fds.push_back({c, static_cast<short>(POLLIN | (cl.out.empty() ? 0 : POLLOUT)), 0});
        ::poll(fds.data(), fds.size(), 200);
        if (fds[0].revents & POLLIN) {
            // Non-blocking, so that no send or recv to one client can hold up the others.
            for (int c; (c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                clients[c];
            }
        }
        for (size_t i = 1; i < fds.size(); ++i) {
            const int c = fds[i].fd;
            Client& cl = clients[c];
            bool drop = false;
            if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                char buf[4096];
                ssize_t n = ::recv(c, buf, sizeof buf, 0);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) drop = true;
                for (ssize_t k = 0; k < n; ++k) {
                    if (buf[k] != '\n') {
                        ++cl.line;
                        continue;
                    }
                    cl.line = 0;
                    cl.out += kPong;
                }
                drop |= cl.line > kLineMax;
            }
            if (!drop && !cl.out.empty()) {
                ssize_t n = ::send(c, cl.out.data(), cl.out.size(), MSG_NOSIGNAL);
                if (n > 0) cl.out.erase(0, static_cast<size_t>(n));
                if (n < 0 && errno != EAGAIN && errno != EINTR) drop = true;
            }
            if (drop || cl.out.size() > kOutMax) {
                ::close(c);
                clients.erase(c);
            }
        }
    }
    for (auto& [c, cl] : clients) ::close(c);
    ::close(fd);
    return Status::ok();
}

std::vector<std::pair<std::string, std::string>> dist_environment() {
    static const char* kPrefixes[] = {"MASTER_", "NCCL_", "TORCH_NCCL_", "GLOO_", "TP_SOCKET_IFNAME", "SLURM_PROCID",
                                      "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_NODELIST",
                                      "SLURM_JOB_ID", "OMPI_COMM_WORLD_", "PET_", "TORCHELASTIC_"};
    static const char* kExact[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                   "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"};
    std::vector<std::pair<std::string, std::string>> out;
    for (char** e = environ; *e; ++e) {
        std::string kv = *e;
        size_t eq = kv.find('=');
        if (eq == std::string::npos) continue;
        std::string k = kv.substr(0, eq);
        bool want = std::any_of(std::begin(kExact), std::end(kExact), [&](const char* x) { return k == x; }) ||
                    std::any_of(std::begin(kPrefixes), std::end(kPrefixes), [&](const char* x) { return k.rfind(x, 0) == 0; });
        if (want) out.emplace_back(k, kv.substr(eq + 1));
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::pair<std::string, std::string>> interfaces() {
    std::vector<std::pair<std::string, std::string>> out;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return out;
    for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        char buf[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
        out.emplace_back(i->ifa_name, buf);
    }
    freeifaddrs(list);
    return out;
}

}  // namespace strato::dist
