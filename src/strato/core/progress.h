#pragma once
// A one-line progress bar on stdout. Silent when stdout is not a terminal or when quiet is set,
// so logs and pipes stay clean. Not thread-safe: drive it from one thread.

#include <chrono>
#include <cstdint>
#include <string>

namespace strato {

class ProgressBar {
public:
    /// `total` units of work; `label` is printed in front ("epoch 3/10").
    ProgressBar(int64_t total, std::string label, bool quiet = false);
    ~ProgressBar();

    /// Sets the done count and a free-form suffix ("loss 0.31  4200 samples/s").
    void update(int64_t done, const std::string& suffix = "");
    void finish();
    bool enabled() const { return enabled_; }

    /// True when stdout is a terminal (and so progress bars draw).
    static bool stdout_is_terminal();

private:
    int64_t total_;
    std::string label_;
    bool enabled_;
    bool finished_ = false;
    std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace strato
