#include "strato/core/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <vector>

namespace strato::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};
std::atomic<bool> g_file_open{false};

std::string_view name(Level l) {
    switch (l) {
        case Level::kDebug: return "debug";
        case Level::kInfo: return "info";
        case Level::kWarn: return "warning";
        case Level::kError: return "error";
        case Level::kOff: return "off";
    }
    return "info";
}

/// ANSI colour of a level's name on a terminal.
std::string_view colour(Level l) {
    switch (l) {
        case Level::kDebug: return "\033[36m";        // cyan
        case Level::kInfo: return "\033[32m";         // green
        case Level::kWarn: return "\033[33m\033[1m";  // bold yellow
        case Level::kError: return "\033[31m\033[1m"; // bold red
        case Level::kOff: return "";
    }
    return "";
}

/// Console lines are "LEVEL: message" on stderr (the level coloured on a terminal); the file
/// sink's lines are "2026-12-04T17:13:19.123 LEVEL message", flushed one by one.
struct Sinks {
    std::mutex mu;
    bool tty = isatty(STDERR_FILENO) == 1;
    std::FILE* file = nullptr;
    bool holding = false;
    std::vector<std::string> held;  // file-sink lines written while holding
    ~Sinks() {
        if (file) std::fclose(file);
    }
};

Sinks& sinks() {
    static Sinks s;
    return s;
}

std::string timestamp() {
    timeval tv{};
    gettimeofday(&tv, nullptr);
    std::tm tm{};
    localtime_r(&tv.tv_sec, &tm);
    char buf[32];
    const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    return fmt::format("{}.{:03d}", std::string_view(buf, n), static_cast<int>(tv.tv_usec / 1000));
}

}  // namespace

void set_level(Level level) { g_level = level; }
Level level() { return g_level; }

bool add_file_sink(const std::string& path) {
    auto& s = sinks();
    std::lock_guard lock(s.mu);
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (!f) return false;
    if (s.file) std::fclose(s.file);
    s.file = f;
    for (const auto& line : s.held) std::fwrite(line.data(), 1, line.size(), f);
    std::fflush(f);
    s.held.clear();
    s.holding = false;
    g_file_open = true;
    return true;
}

void hold_for_file_sink() {
    auto& s = sinks();
    std::lock_guard lock(s.mu);
    s.holding = true;
    s.held.clear();
    g_file_open = true;
}

void remove_file_sinks() {
    auto& s = sinks();
    std::lock_guard lock(s.mu);
    if (s.file) std::fclose(s.file);
    s.file = nullptr;
    s.holding = false;
    s.held.clear();
    g_file_open = false;
}

bool enabled(Level level) { return level >= g_level.load() || (g_file_open && level >= Level::kInfo); }

void write(Level level, std::string_view message) {
    auto& s = sinks();
    std::lock_guard lock(s.mu);
    if (level >= g_level.load()) {
        const std::string line = s.tty ? fmt::format("{}{}\033[m: {}\n", colour(level), name(level), message)
                                       : fmt::format("{}: {}\n", name(level), message);
        std::fwrite(line.data(), 1, line.size(), stderr);
        std::fflush(stderr);
    }
    if ((s.file || s.holding) && level >= Level::kInfo) {
        std::string line = fmt::format("{} {} {}\n", timestamp(), name(level), message);
        if (s.file) {
            std::fwrite(line.data(), 1, line.size(), s.file);
            std::fflush(s.file);
        } else if (s.held.size() < 10'000) {
            s.held.push_back(std::move(line));
        }
    }
}

}  // namespace strato::log
