#pragma once
// Logging facade: strato code logs through these calls, never by writing to stderr itself, so the
// sink (stderr, a run's events.log) and the format are decided in one place. Thread-safe.

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace strato::log {

enum class Level { kDebug, kInfo, kWarn, kError, kOff };

void set_level(Level level);
Level level();
/// Also append every message to `path` (e.g. runs/x/events.log). Returns false if it cannot be opened.
bool add_file_sink(const std::string& path);
void remove_file_sinks();
/// Keeps the info-and-above lines written from now on (up to 10,000) until add_file_sink opens a
/// file, which receives them first: a run's events.log also records what was said before its
/// directory existed (the data opening).
void hold_for_file_sink();

void write(Level level, std::string_view message);
/// True when a message of `level` goes anywhere: the console level, or info and above while a
/// file sink is open or held for (events.log records the run even with --quiet).
bool enabled(Level level);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(Level::kDebug)) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(Level::kError)) write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace strato::log
