#include "strato/dist/peers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "strato/core/parse.h"

extern char** environ;

namespace strato::dist {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr char kPing[] = "strato-ping\n";
constexpr char kPong[] = "strato-pong\n";

/// Connects with a timeout; returns the socket or -1 with `err` set.
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
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) {
            *err = fmt::format("no answer within {:.0f} s", timeout_s);
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

bool read_exact(int fd, char* buf, size_t n, double timeout_s) {
    size_t got = 0;
    while (got < n) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
        ssize_t r = ::recv(fd, buf + got, n - got, 0);
        if (r <= 0) return false;
        got += static_cast<size_t>(r);
    }
    return true;
}

}  // namespace

std::vector<PeerProbe> probe_peers(const std::vector<std::string>& targets, int samples, double timeout_s) {
    std::vector<PeerProbe> out;
    for (const auto& t : targets) {
        PeerProbe p;
        p.target = t;
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
        // First: is it strato's echo? Then ping-pong over one connection; else time handshakes.
        int fd = connect_to(addr, timeout_s, &p.error);
        if (fd < 0) {
            out.push_back(p);
            continue;
        }
        p.reachable = true;
        char buf[sizeof kPong - 1];
        auto t0 = Clock::now();
        if (::send(fd, kPing, sizeof kPing - 1, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof kPing - 1) &&
            read_exact(fd, buf, sizeof buf, std::min(timeout_s, 1.0)) && std::memcmp(buf, kPong, sizeof buf) == 0) {
            p.echo = true;
            rtts.push_back(ms_since(t0));
            for (int i = 1; i < samples; ++i) {
                t0 = Clock::now();
                if (::send(fd, kPing, sizeof kPing - 1, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof kPing - 1) ||
                    !read_exact(fd, buf, sizeof buf, timeout_s))
                    break;
                rtts.push_back(ms_since(t0));
            }
            ::close(fd);
        } else {
            ::close(fd);
            for (int i = 0; i < samples; ++i) {
                std::string err;
                t0 = Clock::now();
                int c = connect_to(addr, timeout_s, &err);
                if (c < 0) break;
                rtts.push_back(ms_since(t0));
                ::close(c);
            }
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

Status serve_echo(const std::string& host, int port, const std::function<bool()>& stop,
                  const std::function<void(int)>& bound) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    std::map<int, std::string> clients;
    while (!stop()) {
        std::vector<pollfd> fds{{fd, POLLIN, 0}};
        for (auto& [c, b] : clients) fds.push_back({c, POLLIN, 0});
        ::poll(fds.data(), fds.size(), 200);
        if (fds[0].revents & POLLIN) {
            int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (c >= 0) {
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                clients[c];
            }
        }
        for (size_t i = 1; i < fds.size(); ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[256];
            ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
            if (n <= 0) {
                ::close(fds[i].fd);
                clients.erase(fds[i].fd);
                continue;
            }
            auto& pending = clients[fds[i].fd];
            pending.append(buf, static_cast<size_t>(n));
            size_t nl;
            while ((nl = pending.find('\n')) != std::string::npos) {
                pending.erase(0, nl + 1);
                (void)!::send(fds[i].fd, kPong, sizeof kPong - 1, MSG_NOSIGNAL);
            }
            if (pending.size() > 4096) pending.clear();
        }
    }
    for (auto& [c, b] : clients) ::close(c);
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
