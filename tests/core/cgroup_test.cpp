// Child cgroups for trial processes: a memory limit that really kills, a CPU quota that really
// throttles. Skipped (with the reason) where this machine gives no writable cgroup hierarchy.

#include "strato/core/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace strato::cgroup {
namespace {

#define SKIP_WITHOUT_CGROUPS()                                              \
    if (Status s = Group::available(); !s.is_ok()) GTEST_SKIP() << s.message()

/// What `fn()` returns in a child process that joined `g` (a trivially copyable value, sent back
/// through a pipe); nullopt when the child could not join or answer.
template <class Fn>
auto in_group(const Group& g, const Fn& fn) -> std::optional<decltype(fn())> {
    using T = decltype(fn());
    int pipefd[2];
    if (pipe(pipefd) != 0) return std::nullopt;
    const pid_t pid = fork();
    if (pid == 0) {
        if (!g.join_self()) _exit(3);
        const T v = fn();
        _exit(write(pipefd[1], &v, sizeof v) == sizeof v ? 0 : 4);
    }
    close(pipefd[1]);
    std::optional<T> out;
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        T v{};
        if (read(pipefd[0], &v, sizeof v) == static_cast<ssize_t>(sizeof v)) out = v;
    }
    close(pipefd[0]);
    return out;
}

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(Cgroup, MemoryLimitKillsTheProcessAndIsCounted) {
    SKIP_WITHOUT_CGROUPS();
    auto g = Group::create(fmt::format("strato-test-mem-{}", getpid()), Limits{64.0 * (1 << 20), 0});
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_NE(g->describe().find("memory 0.0625 GiB"), std::string::npos) << g->describe();
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (!g->join_self()) _exit(3);
        std::string mine = slurp("/proc/self/cgroup");
        char ok = mine.find("strato-test-mem-") != std::string::npos ? 'y' : 'n';
        (void)!write(pipefd[1], &ok, 1);
        std::vector<char*> blocks;
        for (int i = 0; i < 64; ++i) {  // 256 MiB, touched
            char* b = static_cast<char*>(malloc(4 << 20));
            memset(b, i, 4 << 20);
            blocks.push_back(b);
        }
        _exit(0);
    }
    char ok = 0;
    ASSERT_EQ(read(pipefd[0], &ok, 1), 1);
    EXPECT_EQ(ok, 'y') << "the child is not in the group";
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child survived 256 MiB under a 64 MiB limit";
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    EXPECT_GE(g->oom_kills(), 1);
    close(pipefd[0]);
    close(pipefd[1]);
}

TEST(Cgroup, CpuQuotaThrottles) {
    SKIP_WITHOUT_CGROUPS();
    auto g = Group::create(fmt::format("strato-test-cpu-{}", getpid()), Limits{0, 0.2});
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (!g->join_self()) _exit(3);
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
        volatile uint64_t x = 0;
        while (std::chrono::steady_clock::now() < end) x = x + 1;
        _exit(0);
    }
    int status = 0;
    rusage ru{};
    ASSERT_EQ(wait4(pid, &status, 0, &ru), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    // 1.5 s of spinning at 0.2 core is about 0.3 s of CPU; unthrottled it would be 1.5 s. A busy
    // machine can only lower it.
    double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    EXPECT_LT(cpu, 0.75) << "CPU seconds used under a 0.2-core quota";
}

// The default thread counts follow a CPU quota (a container's --cpus, a Slurm step's cgroup):
// a process in a group of half a core may use 1 CPU (on this 2-CPU machine: not 2).
TEST(Cgroup, UsableCpusFollowTheQuota) {
    SKIP_WITHOUT_CGROUPS();
    const int everything = usable_cpus();
    EXPECT_GE(everything, 1);
    auto g = Group::create(fmt::format("strato-test-usable-{}", getpid()), Limits{0, 0.5});
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    const auto n = in_group(*g, [] { return usable_cpus(); });
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, 1) << "of " << everything << " CPUs";
}

// Found by review: doctor's "memory available" read /proc/meminfo alone, and inside a 1 GiB
// container said the host's 21 GiB were free. memory_room() follows the cgroup's limit.
TEST(Cgroup, MemoryRoomFollowsTheLimit) {
    SKIP_WITHOUT_CGROUPS();
    constexpr double kLimit = 256.0 * 1024 * 1024;
    auto g = Group::create(fmt::format("strato-test-room-{}", getpid()), Limits{kLimit, 0});
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    const auto r = in_group(*g, [] { return memory_room(); });
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->limit_bytes, kLimit);
    EXPECT_GT(r->room_bytes, 0);
    EXPECT_LE(r->room_bytes, kLimit);
}

TEST(Cgroup, BadRequestsAreErrors) {
    EXPECT_FALSE(Group::create("x", Limits{}).is_ok());
    EXPECT_FALSE(Group::create("a/b", Limits{1e9, 0}).is_ok());
    EXPECT_FALSE(Group().valid());
}

}  // namespace
}  // namespace strato::cgroup
