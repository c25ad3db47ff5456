#include "strato/core/cgroup.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace strato::cgroup {

namespace {

constexpr const char* kRoot = "/sys/fs/cgroup";
constexpr int64_t kPeriodUs = 100000;

std::string read_small(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// Writes `value` to a cgroup control file; the kernel answers errors on write().
Status write_control(const std::string& path, const std::string& value) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open {}: {}", path, strerror(errno));
    ssize_t n = ::write(fd, value.data(), value.size());
    int err = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(value.size())) return io_error("cannot write '{}' to {}: {}", value, path, strerror(err));
    return Status::ok();
}

/// Our own cgroup path in a hierarchy, from /proc/self/cgroup: v2 is the "0::" line, v1 the line
/// whose controller list names `controller`.
std::string own_path(const std::string& controller) {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        size_t a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        std::string list = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (controller.empty()) {
            if (line.compare(0, a, "0") == 0 && list.empty()) return path;
            continue;
        }
        std::stringstream ss(list);
        for (std::string c; std::getline(ss, c, ',');)
            if (c == controller) return path;
    }
    return "/";
}

Status make_dir(const std::string& dir) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return io_error("cannot create {}: {}", dir, strerror(errno));
    return Status::ok();
}

std::string join(const std::string& root, const std::string& own, const std::string& name) {
    std::string p = root + own;
    if (p.back() != '/') p += '/';
    return p + name;
}

// Whole cores of a quota "QUOTA PERIOD" (v2 cpu.max) or of v1's two files; 0: no limit.
int quota_cores(double quota, double period) {
    if (!(quota > 0) || !(period > 0)) return 0;
    return static_cast<int>(std::max(1.0, std::ceil(quota / period - 1e-9)));
}

/// Calls fn(dir + "/") for our cgroup in the hierarchy at `root` and each group above it. (In a
/// container without a cgroup namespace /proc/self/cgroup names a path the container cannot see;
/// its own group is mounted at the root, which the walk reaches.)
template <class Fn>
void each_level(const std::string& root, std::string own, const Fn& fn) {
    for (;; own = own.substr(0, own.rfind('/'))) {
        fn(join(root, own, ""));
        if (own.empty() || own == "/") break;
    }
}

/// A number in a cgroup file; -1 when absent, "max" or not a number.
double control_number(const std::string& path) {
    const std::string text = read_small(path);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    return end != text.c_str() && v >= 0 ? v : -1;
}

/// A "key value" line of a memory.stat; 0 when absent.
double memory_stat(const std::string& dir, const std::string& key) {
    std::istringstream in(read_small(dir + "memory.stat"));
    std::string k;
    double v = 0;
    while (in >> k >> v)
        if (k == key) return v;
    return 0;
}

}  // namespace

MemoryRoom memory_room() {
    MemoryRoom out;
    auto level = [&out](const char* limit_file, const char* usage_file, const char* inactive_key) {
        return [&out, limit_file, usage_file, inactive_key](const std::string& dir) {
            const double limit = control_number(dir + limit_file);
            // (v1 writes "no limit" as the largest page-aligned int64, 9223372036854771712)
            if (!(limit >= 0 && limit < 0x1p60)) return;
            const double usage = std::max(0.0, control_number(dir + usage_file));
            const double room = std::clamp(limit - usage + memory_stat(dir, inactive_key), 0.0, limit);
            if (out.room_bytes < 0 || room < out.room_bytes) out.room_bytes = room, out.limit_bytes = limit;
        };
    };
    each_level(kRoot, own_path(""), level("memory.max", "memory.current", "inactive_file"));
    each_level(std::string(kRoot) + "/memory", own_path("memory"),
               level("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"));
    return out;
}

int usable_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
    auto limit = [&n](int cores) {
        if (cores > 0) n = std::min(n, cores);
    };
    // The tightest quota from our cgroup up to the hierarchy's root.
    each_level(kRoot, own_path(""), [&](const std::string& dir) {  // v2: "QUOTA PERIOD" or "max PERIOD"
        std::istringstream max(read_small(dir + "cpu.max"));
        std::string quota;
        double period = 0;
        if (max >> quota >> period && quota != "max") limit(quota_cores(std::atof(quota.c_str()), period));
    });
    each_level(std::string(kRoot) + "/cpu", own_path("cpu"), [&](const std::string& dir) {  // v1 (-1: none)
        limit(quota_cores(std::atof(read_small(dir + "cpu.cfs_quota_us").c_str()),
                          std::atof(read_small(dir + "cpu.cfs_period_us").c_str())));
    });
    return std::max(1, n);
}

Group& Group::operator=(Group&& o) noexcept {
    if (this != &o) {
        remove();
        dirs_ = std::move(o.dirs_);
        procs_ = std::move(o.procs_);
        events_ = std::move(o.events_);
        describe_ = std::move(o.describe_);
        o.dirs_.clear();
    }
    return *this;
}

Group::~Group() { remove(); }

void Group::remove() {
    for (const auto& d : dirs_) ::rmdir(d.c_str());
    dirs_.clear();
    procs_.clear();
}

Result<Group> Group::create(const std::string& name, const Limits& limits) {
    if (limits.memory_bytes <= 0 && limits.cpus <= 0) return invalid_argument("cgroup {}: no limit to set", name);
    if (name.empty() || name.find('/') != std::string::npos) return invalid_argument("bad cgroup name '{}'", name);
    Group g;
    auto fail = [&g](Status s) {
        g.remove();
        return s;
    };
    std::string what;
    if (limits.memory_bytes > 0) what += fmt::format("memory {:.4g} GiB", limits.memory_bytes / double(1ull << 30));
    if (limits.cpus > 0) what += fmt::format("{}cpu {:.2f} core(s)", what.empty() ? "" : ", ", limits.cpus);
    const int64_t quota = static_cast<int64_t>(limits.cpus * kPeriodUs + 0.5);
    const std::string bytes = fmt::format("{}", static_cast<int64_t>(limits.memory_bytes));

    if (::access((std::string(kRoot) + "/cgroup.controllers").c_str(), F_OK) == 0) {
        const std::string parent = join(kRoot, own_path(""), "");
        std::string need = std::string(limits.memory_bytes > 0 ? "+memory " : "") + (limits.cpus > 0 ? "+cpu" : "");
        std::stringstream enabled(read_small(parent + "cgroup.subtree_control"));
        bool has_mem = false, has_cpu = false;  // whole words: "cpuset" is not "cpu"
        for (std::string c; enabled >> c;) has_mem |= c == "memory", has_cpu |= c == "cpu";
        if ((limits.memory_bytes > 0 && !has_mem) || (limits.cpus > 0 && !has_cpu)) {
            Status s = write_control(parent + "cgroup.subtree_control", need);
            if (!s.is_ok())
                return io_error("cgroup v2: the memory/cpu controllers are not enabled for children of {} ({}); a "
                                "delegated subtree is needed",
                                parent, s.message());
        }
        std::string dir = parent + name;
        STRATO_RETURN_IF_ERROR(make_dir(dir));
        g.dirs_.push_back(dir);
        g.procs_.push_back(dir + "/cgroup.procs");
        if (limits.memory_bytes > 0) {
            if (Status s = write_control(dir + "/memory.max", bytes); !s.is_ok()) return fail(s);
            (void)write_control(dir + "/memory.swap.max", "0");  // absent without swap accounting
        }
        if (limits.cpus > 0)
            if (Status s = write_control(dir + "/cpu.max", fmt::format("{} {}", quota, kPeriodUs)); !s.is_ok())
                return fail(s);
        g.events_ = dir + "/memory.events";
        g.describe_ = "cgroup v2: " + what;
        return g;
    }

    auto make_v1 = [&](const char* controller) -> Result<std::string> {
        std::string root = std::string(kRoot) + "/" + controller;
        if (::access((root + "/cgroup.procs").c_str(), F_OK) != 0)
            return not_found("no cgroup hierarchy at {} (neither v2 nor a v1 {} controller)", root, controller);
        std::string dir = join(root, own_path(controller), name);
        STRATO_RETURN_IF_ERROR(make_dir(dir));
        g.dirs_.push_back(dir);
        g.procs_.push_back(dir + "/cgroup.procs");
        return dir;
    };
    if (limits.memory_bytes > 0) {
        auto dir = make_v1("memory");
        if (!dir) return fail(dir.status());
        if (Status s = write_control(*dir + "/memory.limit_in_bytes", bytes); !s.is_ok()) return fail(s);
        (void)write_control(*dir + "/memory.memsw.limit_in_bytes", bytes);  // no swapping around the limit
        g.events_ = *dir + "/memory.oom_control";
    }
    if (limits.cpus > 0) {
        auto dir = make_v1("cpu");
        if (!dir) return fail(dir.status());
        if (Status s = write_control(*dir + "/cpu.cfs_period_us", std::to_string(kPeriodUs)); !s.is_ok()) return fail(s);
        if (Status s = write_control(*dir + "/cpu.cfs_quota_us", std::to_string(quota)); !s.is_ok()) return fail(s);
    }
    g.describe_ = "cgroup v1: " + what;
    return g;
}

Status Group::available() {
    auto g = create(fmt::format("strato-probe-{}", getpid()), Limits{double(1ull << 30), 1.0});
    return g.status();
}

bool Group::join_self() const {
    char pid[24];
    int len = 0;
    for (long v = static_cast<long>(getpid()); v > 0; v /= 10) pid[len++] = static_cast<char>('0' + v % 10);
    for (int i = 0; i < len / 2; ++i) std::swap(pid[i], pid[len - 1 - i]);
    bool ok = !procs_.empty();
    for (const auto& p : procs_) {
        int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0 || ::write(fd, pid, static_cast<size_t>(len)) != len) ok = false;
        if (fd >= 0) ::close(fd);
    }
    return ok;
}

int Group::oom_kills() const {
    if (events_.empty()) return 0;
    std::stringstream ss(read_small(events_));
    std::string key;
    int64_t value = 0;
    while (ss >> key >> value)
        if (key == "oom_kill") return static_cast<int>(value);
    return 0;
}

}  // namespace strato::cgroup
