#include "strato/core/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>

namespace strato::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};
std::atomic<bool> g_file_open{false};

spdlog::level::level_enum to_spdlog(Level l) {
    switch (l) {
        case Level::kDebug: return spdlog::level::debug;
        case Level::kInfo: return spdlog::level::info;
        case Level::kWarn: return spdlog::level::warn;
        case Level::kError: return spdlog::level::err;
        case Level::kOff: return spdlog::level::off;
    }
    return spdlog::level::info;
}

struct Loggers {
    std::mutex mu;
    std::shared_ptr<spdlog::logger> console;
    std::shared_ptr<spdlog::logger> file;

    Loggers() {
        console = std::make_shared<spdlog::logger>("strato", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
        console->set_pattern("%^%l%$: %v");
        console->set_level(spdlog::level::trace);
    }
};

Loggers& loggers() {
    static Loggers l;
    return l;
}

}  // namespace

void set_level(Level level) { g_level = level; }
Level level() { return g_level; }

bool add_file_sink(const std::string& path) {
    auto& l = loggers();
    std::lock_guard lock(l.mu);
    try {
        auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
        l.file = std::make_shared<spdlog::logger>("strato-file", sink);
        l.file->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
        l.file->set_level(spdlog::level::trace);
        l.file->flush_on(spdlog::level::trace);
        g_file_open = true;
        return true;
    } catch (const spdlog::spdlog_ex&) {
        return false;
    }
}

void remove_file_sinks() {
    auto& l = loggers();
    std::lock_guard lock(l.mu);
    l.file.reset();
    g_file_open = false;
}

bool enabled(Level level) { return level >= g_level.load() || (g_file_open && level >= Level::kInfo); }

void write(Level level, std::string_view message) {
    auto& l = loggers();
    std::lock_guard lock(l.mu);
    if (level >= g_level.load()) l.console->log(to_spdlog(level), message);
    if (l.file && level >= Level::kInfo) l.file->log(to_spdlog(level), message);
}

}  // namespace strato::log
