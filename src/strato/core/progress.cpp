#include "strato/core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace strato {

bool ProgressBar::stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

ProgressBar::ProgressBar(int64_t total, std::string label, bool quiet)
    : total_(total), label_(std::move(label)), enabled_(!quiet && stdout_is_terminal()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, const std::string& suffix) {
    if (!enabled_ || finished_) return;
    auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    fmt::print("\r\033[K{} [{}] {}/{} {}", label_, bar, done, total_, suffix);
    std::fflush(stdout);
}

void ProgressBar::finish() {
    if (!enabled_ || finished_) return;
    finished_ = true;
    fmt::print("\r\033[K");
    std::fflush(stdout);
}

}  // namespace strato
