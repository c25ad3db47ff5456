#include "strato/monitor/procfs.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

namespace strato::monitor {

namespace {

bool read_text(const std::string& path, std::string* out) {
    std::ifstream in(path);
    if (!in) return false;
    std::ostringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return true;
}

// /proc/stat's first line: "cpu  user nice system idle iowait irq softirq steal ..." -> (busy, total)
std::pair<uint64_t, uint64_t> cpu_times(const std::string& stat) {
    std::istringstream ss(stat);
    std::string cpu;
    uint64_t v[8] = {};
    ss >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7];
    uint64_t total = 0;
    for (uint64_t x : v) total += x;
    return {total - v[3] - v[4], total};
}

// A device of /proc/diskstats that is a disk of its own: listed in /sys/block (partitions are
// not: sda1 is under sda), not a memory or loop device (loop, ram, zram) or a floppy, and not
// stacked on other disks (device-mapper, md RAID: their slaves/ lists them). Counting partitions
// and stacked devices as well counted each byte two or three times in sum().
bool whole_disk(const std::string& sys_root, std::string dev) {
    for (const char* virt : {"loop", "ram", "zram", "fd"})
        if (dev.rfind(virt, 0) == 0) return false;
    std::replace(dev.begin(), dev.end(), '/', '!');  // (cciss/c0d0 is /sys/block/cciss!c0d0)
    std::error_code ec;
    const std::filesystem::path block = std::filesystem::path(sys_root) / "block" / dev;
    // (no /sys/block at all, as in some sandboxes: every device counts rather than none)
    if (!std::filesystem::exists(std::filesystem::path(sys_root) / "block", ec)) return true;
    if (!std::filesystem::exists(block, ec)) return false;
    const std::filesystem::path slaves = block / "slaves";
    if (!std::filesystem::is_directory(slaves, ec)) return true;
    const bool alone = std::filesystem::is_empty(slaves, ec);
    return alone || ec;  // (unreadable: counted, as before)
}

}  // namespace

// The CPU times now: the first sample's utilisation is since the sampler was made, not since boot.
ProcSampler::ProcSampler(ProcOptions options) : options_(std::move(options)) {
    std::string text;
    if (read_text(options_.root + "/stat", &text)) std::tie(last_cpu_.busy, last_cpu_.total) = cpu_times(text);
}

void ProcSampler::sample(Snapshot& out) {
    const std::string& root = options_.root;
    std::string text;
    // /proc/stat: "cpu  user nice system idle iowait irq softirq steal ..."
    if (read_text(root + "/stat", &text)) {
        CpuTimes now;
        std::tie(now.busy, now.total) = cpu_times(text);
        // Samples closer than a clock tick see no CPU time pass: that is no reading, not 0 % (a
        // burst of them read as an idle machine and fired "cpu_util < X" rules).
        // Counters that went back (a container's virtualised /proc/stat after its CPU set shrank)
        // or an idle count that did (a known kernel quirk) are no reading either: the unsigned
        // differences wrapped and read as ~100 % or 200 %. The next sample measures from here.
        if (now.total < last_cpu_.total || now.busy < last_cpu_.busy) {
            last_cpu_ = now;
        } else if (const uint64_t dt = now.total - last_cpu_.total; dt > 0) {
            last_util_ = std::clamp(100.0 * static_cast<double>(now.busy - last_cpu_.busy) / static_cast<double>(dt),
                                    0.0, 100.0);
            last_cpu_ = now;
        }
        const double util = last_util_;
        out.add("strato_cpu_utilization_percent", "cpu_util", "Busy CPU time since the previous sample, percent of all cores",
                util);
        const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
        out.add("strato_cpu_busy_seconds_total", "", "CPU time spent busy, all cores", static_cast<double>(now.busy) / tick,
                {}, true);
    } else {
        out.notes.push_back("cannot read " + root + "/stat");
    }
    out.add("strato_cpu_cores", "cpu_cores", "Online CPU cores", static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN)));
    if (read_text(root + "/loadavg", &text)) {
        double l1 = 0;
        std::istringstream(text) >> l1;
        out.add("strato_load1", "load1", "One-minute load average", l1);
    }
    // /proc/meminfo: "MemTotal:  16330000 kB"
    if (read_text(root + "/meminfo", &text)) {
        std::istringstream ss(text);
        std::string key;
        double kb = 0, total = 0, avail = 0;
        std::string unit;
        while (ss >> key >> kb) {
            std::getline(ss, unit);
            if (key == "MemTotal:") total = kb * 1024;
            if (key == "MemAvailable:") avail = kb * 1024;
        }
        out.add("strato_memory_total_bytes", "mem_total_bytes", "Physical memory", total);
        out.add("strato_memory_used_bytes", "mem_used_bytes", "Physical memory not available to new processes",
                total - avail);
        out.add("strato_memory_used_percent", "mem_used_pct", "Memory in use, percent", total > 0 ? 100 * (total - avail) / total : 0);
    }
    // /proc/diskstats: major minor name reads merged sectors ms writes merged sectors ms ...
    if (read_text(root + "/diskstats", &text)) {
        std::istringstream ss(text);
        std::string line;
        while (std::getline(ss, line)) {
            std::istringstream ls(line);
            unsigned major = 0, minor = 0;
            std::string dev;
            uint64_t f[7] = {};
            ls >> major >> minor >> dev >> f[0] >> f[1] >> f[2] >> f[3] >> f[4] >> f[5] >> f[6];
            if (!ls || !whole_disk(options_.sys_root, dev)) continue;
            out.add("strato_disk_read_bytes_total", "disk_read_bytes", "Bytes read from the device", f[2] * 512.0,
                    {{"device", dev}}, true);
            out.add("strato_disk_written_bytes_total", "disk_written_bytes", "Bytes written to the device", f[6] * 512.0,
                    {{"device", dev}}, true);
        }
    }
    // /proc/net/dev: "  eth0: rxbytes rxpackets ... (8 rx fields) txbytes ..."
    if (read_text(root + "/net/dev", &text)) {
        std::istringstream ss(text);
        std::string line;
        while (std::getline(ss, line)) {
            size_t colon = line.find(':');
            if (colon == std::string::npos) continue;
            std::string dev = line.substr(0, colon);
            dev.erase(0, dev.find_first_not_of(' '));
            std::istringstream ls(line.substr(colon + 1));
            uint64_t f[9] = {};
            for (auto& x : f) ls >> x;
            if (!ls) continue;
            out.add("strato_network_receive_bytes_total", "net_rx_bytes", "Bytes received on the interface",
                    static_cast<double>(f[0]), {{"device", dev}}, true);
            out.add("strato_network_transmit_bytes_total", "net_tx_bytes", "Bytes sent on the interface",
                    static_cast<double>(f[8]), {{"device", dev}}, true);
        }
    }
    // Processes: strato itself and --pid ones.
    std::vector<pid_t> pids = options_.pids;
    pids.insert(pids.begin(), getpid());
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    for (pid_t pid : pids) {
        std::string dir = fmt::format("{}/{}", root, pid);
        std::string stat, statm;
        if (!read_text(dir + "/stat", &stat) || !read_text(dir + "/statm", &statm)) {
            out.notes.push_back(fmt::format("process {} is gone", pid));
            continue;
        }
        // "pid (comm) state ppid ..." — comm may contain spaces and parentheses; fields follow the last ')'.
        size_t open = stat.find('('), close = stat.rfind(')');
        if (open == std::string::npos || close == std::string::npos) continue;
        std::string comm = stat.substr(open + 1, close - open - 1);
        std::istringstream ls(stat.substr(close + 2));
        std::vector<std::string> f;
        std::string tok;
        while (ls >> tok) f.push_back(tok);
        if (f.size() < 20) continue;
        // A process that exited and whose id the kernel gave to another: the start time (field 22)
        // tells them apart, or the new process's numbers went on under the watched one's pid.
        if (auto [it, first] = start_times_.emplace(pid, f[19]); !first && it->second != f[19]) {
            out.notes.push_back(fmt::format("process {} is gone (its id now names another process)", pid));
            continue;
        }
        double resident = 0, size = 0;
        std::istringstream(statm) >> size >> resident;
        // A process that exited and that its parent has not reaped yet keeps its /proc entry as a
        // zombie (state Z, no memory): it went on being reported, with 0 bytes resident. (A
        // leader thread that exited while others run is Z too, but still has its memory.)
        if ((f[0] == "Z" || f[0] == "X") && size == 0) {
            out.notes.push_back(fmt::format("process {} is gone", pid));
            continue;
        }
        double utime = std::stod(f[11]), stime = std::stod(f[12]), threads = std::stod(f[17]);
        Labels l = {{"pid", std::to_string(pid)}, {"comm", comm}};
        out.add("strato_process_cpu_seconds_total", "proc_cpu_seconds", "User and system CPU time of the process",
                (utime + stime) / tick, l, true);
        out.add("strato_process_resident_memory_bytes", "proc_rss_bytes", "Resident memory of the process",
                resident * page, l);
        out.add("strato_process_threads", "proc_threads", "Threads of the process", threads, l);
    }
}

}  // namespace strato::monitor
