#include "strato/dist/rendezvous.h"

#include "strato/core/parse.h"
#include "strato/core/signals.h"
#include "strato/core/thread_name.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace strato::dist {

namespace {

template <typename... Args>
Status unavailable(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kUnavailable, fmt::format(f, std::forward<Args>(args)...));
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<std::string> words(const std::string& line, size_t max_words = 64) {
    std::vector<std::string> out;
    std::istringstream in(line);
    std::string w;
    while (out.size() + 1 < max_words && in >> w) out.push_back(w);
    std::string rest;
    std::getline(in, rest);
    if (size_t p = rest.find_first_not_of(' '); p != std::string::npos) out.push_back(rest.substr(p));
    return out;
}

/// `text` as an int in [lo, hi], all of it; nullopt otherwise.
std::optional<int> int_in(std::string_view text, int lo, int hi) {
    auto v = parse_int(text, lo, hi);
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

/// Protocol lines are short; a peer that sends more than this without a newline is dropped.
constexpr size_t kMaxLine = 64 * 1024;

Result<sockaddr_in> resolve(const std::string& host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0 || !res) return invalid_argument("cannot resolve rendezvous host '{}': {}", host, gai_strerror(rc));
    sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
    freeaddrinfo(res);
    a.sin_port = htons(static_cast<uint16_t>(port));
    return a;
}

bool send_all(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
        ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                pollfd p{fd, POLLOUT, 0};
                ::poll(&p, 1, 1000);
                continue;
            }
            return false;
        }
        off += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

// ---- server ----

struct RendezvousServer::Impl {
    struct Peer {
        int fd = -1;
        std::string buffer;
        double last_seen = 0;
        bool joined = false, member = false, done = false;  // member: of the running round
        std::string node_id, addr;
        int node_rank = -1, local_world = 1, master_port = 0;
    };
    RdzvSettings s;
    int listen_fd = -1, port = 0;
    std::atomic<bool> stop{false};
    std::thread thread;
    std::map<int, Peer> peers;  // by fd
    int round = 0, failures = 0;
    bool running = false;       // the round formed and its workers run
    double first_join = 0, min_reached = 0;
    std::string last_word;  // EXIT or ABORT <why>, once the job has ended

    void broadcast(const std::string& line) {
        for (auto& [fd, p] : peers) send_all(fd, line + "\n");
    }
    /// The job is over: everyone connected (and, as the server stops, anyone still connecting)
    /// hears `word`, EXIT or ABORT <why>.
    void end_job(std::string word) {
        last_word = std::move(word);
        broadcast(last_word);
        stop = true;
    }
    void abort_all(const std::string& why) { end_job("ABORT " + why); }
    int joined() const {
        return static_cast<int>(std::count_if(peers.begin(), peers.end(), [](const auto& kv) { return kv.second.joined; }));
    }
    /// A node failed or left (`failure`), or one arrived, while the round ran: the next round, or
    /// the end. Members JOIN again after RESTART; nodes that were waiting stay joined.
    void restart(const std::string& why, bool failure) {
        running = false;
        ++round;
        failures += failure;
        for (auto& [fd, p] : peers)
            if (p.member) p.joined = p.member = p.done = false;
        first_join = min_reached = 0;
        for (auto& [fd, p] : peers)
            if (p.joined && first_join == 0) first_join = now_s();
        if (failures > s.max_restarts) {
            abort_all(fmt::format("{}; no restarts left (max_restarts = {})", why, s.max_restarts));
            return;
        }
        broadcast(fmt::format("RESTART {} {}", round, why));
    }
    void form() {
        std::vector<Peer*> members;
        for (auto& [fd, p] : peers)
            if (p.joined) members.push_back(&p);
        std::sort(members.begin(), members.end(), [](const Peer* a, const Peer* b) {
            int ra = a->node_rank < 0 ? 1 << 30 : a->node_rank, rb = b->node_rank < 0 ? 1 << 30 : b->node_rank;
            return ra != rb ? ra < rb : a->node_id < b->node_id;
        });
        if (static_cast<int>(members.size()) > s.max_nodes) members.resize(static_cast<size_t>(s.max_nodes));
        int world = 0;
        for (auto* m : members) world += m->local_world;
        int offset = 0;
        for (size_t g = 0; g < members.size(); ++g) {
            members[g]->member = true;
            send_all(members[g]->fd, fmt::format("ROUND {} {} {} {} {} {} {} {}\n", round, g, members.size(), world,
                                                 offset, members[0]->addr, members[0]->master_port, failures));
            offset += members[g]->local_world;
        }
        // Nodes beyond max_nodes stay joined and wait for a later round.
        running = true;
    }
    void on_line(int fd, Peer& p, const std::string& line) {
        auto w = words(line, 8);
        if (w.empty()) return;
        if (w[0] == "PING") return;
        if (w[0] == "JOIN" && w.size() >= 7) {
            if (w[1] != s.run_id) {
                send_all(fd, fmt::format("ABORT this rendezvous serves run '{}', not '{}'\n", s.run_id, w[1]));
                return;
            }
            // Numbers are checked, not atoi'd: a peer's typo or garbage must not become a world
            // size or a port.
            auto node_rank = int_in(w[3], -1, 1 << 20), local_world = int_in(w[4], 1, 1 << 16),
                 master_port = int_in(w[6], 1, 65535);
            if (!node_rank || !local_world || !master_port) {
                send_all(fd, fmt::format("ABORT malformed JOIN from {} (expected JOIN <run_id> <node_id> <node_rank "
                                         "-1..{}> <local_world_size 1..{}> <addr> <master_port 1..65535>)\n",
                                         w[2], 1 << 20, 1 << 16));
                return;
            }
            p.node_id = w[2];
            p.node_rank = *node_rank;
            p.local_world = *local_world;
            p.addr = w[5];
            p.master_port = *master_port;
            if (running) {
                // A node arriving while a round runs: grow the group at the next round if there
                // is room (scale-up, not a failure), else it waits.
                p.joined = true;
                int members = 0;
                for (auto& [f, q] : peers) members += q.member;
                if (members < s.max_nodes) {
                    restart(fmt::format("node {} joined (scale-up)", p.node_id), false);
                } else {
                    // It waits for a place as long as the job runs: no join timeout (found by
                    // review: it gave up after the client's timeout while the job ran on).
                    send_all(fd, fmt::format("WAIT the group is full ({} of at most {} nodes)\n", members,
                                             s.max_nodes));
                }
                return;
            }
            p.joined = true;
            if (first_join == 0) first_join = now_s();
            return;
        }
        if (w[0] == "FAIL" && w.size() >= 2) {
            auto f = words(line, 3);  // FAIL <round> <message with spaces>
            if (running && int_in(f[1], 0, INT32_MAX) == round)
                restart(fmt::format("node {} failed: {}", p.node_id, f.size() > 2 ? f[2] : "?"), true);
            return;
        }
        if (w[0] == "DONE" && w.size() >= 2) {
            if (!running || int_in(w[1], 0, INT32_MAX) != round) return;
            p.done = true;
            bool all = true;
            for (auto& [f, q] : peers)
                if (q.member && !q.done) all = false;
            if (all) end_job("EXIT");
        }
    }
    void drop(int fd) {
        Peer p = peers[fd];
        ::close(fd);
        peers.erase(fd);
        if (running && p.member)
            restart(fmt::format("lost node {} (its agent exited or the network failed)", p.node_id), true);
    }
    void tick() {
        const double now = now_s();
        for (auto it = peers.begin(); it != peers.end();) {
            if (now - it->second.last_seen > s.peer_timeout_s) {
                int fd = it->first;
                ++it;
                drop(fd);
                continue;
            }
            ++it;
        }
        if (running || stop) return;
        int n = joined();
        if (n == 0) return;
        if (first_join == 0) first_join = now;
        if (n >= s.max_nodes) return form();
        if (n >= s.min_nodes) {
            if (min_reached == 0) min_reached = now;
            if (now - min_reached >= s.last_call_s) form();
            return;
        }
        if (now - first_join > s.join_timeout_s)
            abort_all(fmt::format("only {} of at least {} nodes joined within the join timeout of {:.0f} s", n,
                                  s.min_nodes, s.join_timeout_s));
    }
    void serve() {
        double last_ping = now_s();
        while (!stop) {
            std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
            for (auto& [fd, p] : peers) fds.push_back({fd, POLLIN, 0});
            ::poll(fds.data(), fds.size(), 100);
            if (fds[0].revents & POLLIN) {
                int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
                if (c >= 0) {
                    int one = 1;
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    peers[c].fd = c;
                    peers[c].last_seen = now_s();
                }
            }
            for (size_t i = 1; i < fds.size(); ++i) {
                if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                int fd = fds[i].fd;
                auto it = peers.find(fd);
                if (it == peers.end()) continue;
                char buf[4096];
                ssize_t n = ::recv(fd, buf, sizeof buf, 0);
                if (n <= 0) {
                    drop(fd);
                    continue;
                }
                it->second.last_seen = now_s();
                it->second.buffer.append(buf, static_cast<size_t>(n));
                size_t nl;
                while (!stop && peers.count(fd) && (nl = peers[fd].buffer.find('\n')) != std::string::npos) {
                    std::string line = peers[fd].buffer.substr(0, nl);
                    peers[fd].buffer.erase(0, nl + 1);
                    on_line(fd, peers[fd], line);
                }
                if (peers.count(fd) && peers[fd].buffer.size() > kMaxLine) drop(fd);
            }
            tick();
            if (now_s() - last_ping > 2) {
                broadcast("PING");
                last_ping = now_s();
            }
        }
        // A node that connected as the job ended (still in the accept queue) hears the end too,
        // rather than a reset.
        pollfd pending{listen_fd, POLLIN, 0};
        while (!last_word.empty() && ::poll(&pending, 1, 0) == 1 && (pending.revents & POLLIN)) {
            int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) break;
            peers[c].fd = c;
            send_all(c, last_word + "\n");
        }
        // Let the last words (EXIT, ABORT) reach the clients before closing.
        for (auto& [fd, p] : peers) ::shutdown(fd, SHUT_WR);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        for (auto& [fd, p] : peers) ::close(fd);
        peers.clear();
    }
};

bool loopback_alias(const std::string& host) {
    in_addr literal{};
    if (inet_pton(AF_INET, host.c_str(), &literal) == 1) return false;  // an address: as given
    std::string lower = host;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower == "localhost" || lower.ends_with(".localhost") || lower == "localhost.localdomain") return false;
    auto a = resolve(host, 0);
    return a.is_ok() && (ntohl(a->sin_addr.s_addr) >> 24) == 127;
}

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::start(const std::string& host, int port, const RdzvSettings& s) {
    STRATO_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(host, port));
    // A name this machine's /etc/hosts maps to a loopback address (Debian's "127.0.1.1 node1",
    // many cloud images' "127.0.0.1 node1") while the other nodes reach it by its network address:
    // served on every interface, as torchrun's store is, not on loopback where no other node can
    // reach it (found by review: the other nodes were refused until the join timeout).
    if (loopback_alias(host)) addr.sin_addr.s_addr = htonl(INADDR_ANY);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return io_error("socket: {}", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
        int err = errno;
        ::close(fd);
        return unavailable("cannot listen on {}:{}: {}", host, port, strerror(err));
    }
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    std::unique_ptr<RendezvousServer> srv(new RendezvousServer());
    srv->impl_ = std::make_unique<Impl>();
    srv->impl_->s = s;
    srv->impl_->listen_fd = fd;
    srv->impl_->port = ntohs(addr.sin_port);
    // Started with the stop signals blocked: the kernel gives a process's signal to any thread that
    // does not block it, and the launcher waits for them in ppoll() on its main thread (a signal
    // handled here woke it up to a second late).
    sigset_t stops, before;
    sigemptyset(&stops);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
    pthread_sigmask(SIG_BLOCK, &stops, &before);
    srv->impl_->thread = std::thread([impl = srv->impl_.get()] {
        set_thread_name("rendezvous");
        impl->serve();
    });
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    return srv;
}

RendezvousServer::~RendezvousServer() {
    if (!impl_) return;
    impl_->stop = true;
    if (impl_->thread.joinable()) impl_->thread.join();
    ::close(impl_->listen_fd);
}

int RendezvousServer::port() const { return impl_->port; }

// ---- client ----

Result<std::unique_ptr<RendezvousClient>> RendezvousClient::connect(const std::string& host, int port, double timeout_s) {
    STRATO_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(host, port));
    const double deadline = now_s() + timeout_s;
    std::string last_error;
    while (true) {
        // Connected without blocking, the handshake awaited in slices: a host that drops the SYNs
        // (a firewall, a hung agent whose listen queue is full) held a blocking connect() for the
        // kernel's SYN retries, about 2 minutes, past --join-timeout and deaf to Ctrl-C (the stop
        // handlers restart an interrupted connect).
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return io_error("socket: {}", strerror(errno));
        int err = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : errno;
        bool unanswered = false;
        while (err == EINPROGRESS || err == EINTR || err == EALREADY) {
            if (signals::stop_requested()) {
                ::close(fd);
                return Status(StatusCode::kCancelled, "interrupted");
            }
            const double left = deadline - now_s();
            if (left <= 0) {
                unanswered = true;
                break;
            }
            pollfd p{fd, POLLOUT, 0};
            const int rc = ::poll(&p, 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1);
            if (rc < 0 && errno != EINTR) {
                err = errno;
            } else if (rc > 0) {
                socklen_t len = sizeof err;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            }
        }
        if (err == 0) {
            // The rest of the client reads after poll() and writes small lines: blocking again.
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            std::unique_ptr<RendezvousClient> c(new RendezvousClient());
            c->fd_ = fd;
            c->last_ping_ = c->last_heard_ = now_s();
            return c;
        }
        last_error = unanswered ? "no answer to the connection request (a firewall dropping it, or a hung host)"
                                : strerror(err);
        ::close(fd);
        if (signals::stop_requested()) return Status(StatusCode::kCancelled, "interrupted");
        if (unanswered || now_s() >= deadline)
            return unavailable("cannot reach the rendezvous at {}:{} within {:g} s: {}", host, port, timeout_s, last_error);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

RendezvousClient::~RendezvousClient() {
    if (fd_ >= 0) ::close(fd_);
}

Status RendezvousClient::send(const std::string& line) {
    if (!send_all(fd_, line + "\n")) return unavailable("lost the rendezvous connection: {}", strerror(errno));
    return Status::ok();
}

Result<std::optional<std::string>> RendezvousClient::read_line(double timeout_s) {
    const double deadline = now_s() + timeout_s;
    while (true) {
        if (size_t nl = buffer_.find('\n'); nl != std::string::npos) {
            std::string line = buffer_.substr(0, nl);
            buffer_.erase(0, nl + 1);
            return std::optional<std::string>(line);
        }
        if (buffer_.size() > kMaxLine)
            return data_loss("the rendezvous server sent {} bytes without a newline (not a strato rendezvous?)",
                             buffer_.size());
        if (signals::stop_requested()) return Status(StatusCode::kCancelled, "interrupted");
        if (now_s() - last_heard_ > 30)
            return unavailable("the rendezvous host has been silent for 30 s (it lost power or the network, or what "
                               "listens at --rdzv-endpoint is not a strato rendezvous)");
        const double left = deadline - now_s();
        pollfd p{fd_, POLLIN, 0};
        int rc = ::poll(&p, 1, left > 0 ? static_cast<int>(std::min(left, 0.5) * 1000) + 1 : 0);
        if (rc < 0 && errno != EINTR) return io_error("poll: {}", strerror(errno));
        if (rc <= 0) {
            if (now_s() - last_ping_ > 2) {
                STRATO_RETURN_IF_ERROR(send("PING"));
                last_ping_ = now_s();
            }
            if (now_s() >= deadline) return std::optional<std::string>();
            continue;
        }
        char buf[4096];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) return unavailable("the rendezvous server closed the connection (its agent exited?)");
        last_heard_ = now_s();
        buffer_.append(buf, static_cast<size_t>(n));
    }
}

Result<RoundAssignment> RendezvousClient::join(const Join& j, double timeout_s) {
    STRATO_RETURN_IF_ERROR(send(fmt::format("JOIN {} {} {} {} {} {}", j.run_id, j.node_id, j.node_rank, j.local_world_size,
                                            j.addr, j.master_port)));
    double deadline = now_s() + timeout_s;
    while (true) {
        STRATO_ASSIGN_OR_RETURN(auto line, read_line(std::max(0.0, deadline - now_s())));
        if (!line) return unavailable("the rendezvous did not form a round within {:.0f} s", timeout_s);
        auto w = words(*line, 9);
        if (w.empty() || w[0] == "PING" || w[0] == "RESTART") continue;  // a RESTART racing our JOIN
        if (w[0] == "WAIT") {  // the group is full: a place comes when a round ends (the server pings meanwhile)
            deadline = std::numeric_limits<double>::infinity();
            continue;
        }
        if (w[0] == "ABORT") return Status(StatusCode::kCancelled, line->size() > 6 ? line->substr(6) : "aborted");
        if (w[0] == "EXIT") return Status(StatusCode::kCancelled, "EXIT");
        if (w[0] == "ROUND" && w.size() >= 8) {
            auto round = int_in(w[1], 0, INT32_MAX), group_rank = int_in(w[2], 0, INT32_MAX),
                 group_world = int_in(w[3], 1, INT32_MAX), world = int_in(w[4], 1, INT32_MAX),
                 offset = int_in(w[5], 0, INT32_MAX), port = int_in(w[7], 1, 65535);
            // The restarts after failures so far (scale-ups are rounds too, not restarts); a
            // server without the field counts rounds.
            auto restarts = w.size() >= 9 ? int_in(w[8], 0, INT32_MAX) : round;
            if (!round || !group_rank || !group_world || !world || !offset || !port || !restarts ||
                *group_rank >= *group_world || *offset >= *world)
                return data_loss("malformed ROUND from the rendezvous server: '{}'", *line);
            RoundAssignment a;
            a.round = *round;
            a.restarts = *restarts;
            a.group_rank = *group_rank;
            a.group_world_size = *group_world;
            a.world_size = *world;
            a.rank_offset = *offset;
            a.master_addr = w[6];
            a.master_port = *port;
            return a;
        }
    }
}

Status RendezvousClient::fail(int round, const std::string& message) {
    std::string m = message;
    std::replace(m.begin(), m.end(), '\n', ' ');
    return send(fmt::format("FAIL {} {}", round, m));
}

Status RendezvousClient::done(int round) { return send(fmt::format("DONE {}", round)); }

Result<RendezvousClient::Event> RendezvousClient::poll(std::string* message) {
    if (now_s() - last_ping_ > 2) {
        STRATO_RETURN_IF_ERROR(send("PING"));
        last_ping_ = now_s();
    }
    while (true) {
        STRATO_ASSIGN_OR_RETURN(auto line, read_line(0.0));
        if (!line) return Event::kNone;
        auto w = words(*line, 3);
        if (w.empty() || w[0] == "PING") continue;
        if (w[0] == "RESTART") {
            if (message) *message = w.size() > 2 ? w[2] : "";
            return Event::kRestart;
        }
        if (w[0] == "EXIT") return Event::kExit;
        if (w[0] == "ABORT") {
            if (message) *message = line->size() > 6 ? line->substr(6) : "";
            return Event::kAbort;
        }
    }
}

void RendezvousClient::keepalive() {
    if (now_s() - last_ping_ > 2) {
        (void)send("PING");
        last_ping_ = now_s();
    }
}

std::string RendezvousClient::local_address() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "127.0.0.1";
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
    return buf;
}

}  // namespace strato::dist
