// A stand-in for `strato serve` in the local provider's tests (this tests the provider, not the
// server): listens on --http-port (0: one the kernel picks), prints serve's ready line naming it, and answers every request with what the process inherited,
// "pid=P pgid=G fds=3,4" (descriptors above stderr open at start). /sleep answers after 500 ms.
// SIGTERM stops it at once. With FAKE_REPLICA_LAZY=DIR, only the first replica (the one that
// creates DIR/first) is ready at once; the others answer 503 on /v2/health/ready until SIGTERM,
// then 200 for one more second before they exit (a replica that turns ready while draining).
// With FAKE_REPLICA_CRASHY=DIR every replica after the first exits with status 3 at once; with
// FAKE_REPLICA_FAIL=WHY every one prints "strato serve: error: WHY" and exits with status 1.

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

volatile sig_atomic_t g_stop = 0;

void on_term_lazy(int) { g_stop = 1; }
void on_term(int) { _exit(0); }

std::string inherited_fds() {
    std::string out;
    DIR* d = opendir("/proc/self/fd");
    if (!d) return "?";
    while (dirent* e = readdir(d)) {
        int fd = std::atoi(e->d_name);
        if (e->d_name[0] == '.' || fd <= 2 || fd == dirfd(d)) continue;
        if (!out.empty()) out += ',';
        out += e->d_name;
    }
    closedir(d);
    return out;
}

void answer(int fd, int code, const std::string& body) {
    std::string r = "HTTP/1.1 " + std::to_string(code) + (code == 200 ? " OK" : " Unavailable") +
                    "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n\r\n" + body;
    for (size_t off = 0; off < r.size();) {
        ssize_t n = write(fd, r.data() + off, r.size() - off);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string who =
        "pid=" + std::to_string(getpid()) + " pgid=" + std::to_string(getpgrp()) + " fds=" + inherited_fds();
    int port = 0;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], "--http-port") == 0) port = std::atoi(argv[i + 1]);
    bool lazy = false;
    if (const char* why = std::getenv("FAKE_REPLICA_FAIL")) {  // as serve with a missing model
        std::fprintf(stderr, "strato serve: error: %s\n", why);
        return 1;
    }
    if (const char* dir = std::getenv("FAKE_REPLICA_CRASHY")) {  // every replica but the first dies at start
        int fd = open((std::string(dir) + "/first").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0) return 3;
        close(fd);
    }
    if (const char* dir = std::getenv("FAKE_REPLICA_LAZY")) {
        int fd = open((std::string(dir) + "/first").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
        lazy = fd < 0;
        if (fd >= 0) close(fd);
    }
    signal(SIGTERM, lazy ? on_term_lazy : on_term);

    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(ls, 64) != 0) {
        std::fprintf(stderr, "fake_replica: cannot listen on port %d\n", port);
        return 1;
    }
    socklen_t len = sizeof a;
    getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
    std::printf("strato serve: ready http://127.0.0.1:%d metrics=off models: fake\n", ntohs(a.sin_port));
    std::fflush(stdout);
    auto stop_at = std::chrono::steady_clock::time_point::max();
    for (;;) {
        if (g_stop && stop_at == std::chrono::steady_clock::time_point::max())
            stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        if (std::chrono::steady_clock::now() >= stop_at) return 0;
        pollfd p{ls, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        int c = accept(ls, nullptr, nullptr);
        if (c < 0) continue;
        std::string req;
        char buf[4096];
        while (req.find("\r\n\r\n") == std::string::npos) {
            ssize_t n = read(c, buf, sizeof buf);
            if (n <= 0) break;
            req.append(buf, static_cast<size_t>(n));
        }
        std::string target = req.substr(0, req.find("\r\n"));
        if (target.find(" /v2/health/ready ") != std::string::npos) {
            answer(c, lazy && !g_stop ? 503 : 200, "");
        } else {
            if (target.find(" /sleep ") != std::string::npos)
                std::this_thread::sleep_for(std::chrono::milliseconds(500));
            answer(c, 200, who);
        }
        close(c);
    }
}
