#pragma once
// metrics.jsonl: one JSON object per line, appended as training goes. A checkpoint records how
// many lines it covers; resuming from it truncates the file to those lines, so a killed and
// resumed run has neither lost nor duplicated entries.

#include <nlohmann/json.hpp>

#include <string>

#include "strato/core/status.h"

namespace strato::train {

class MetricsLog {
public:
    /// Opens `path` keeping its first `keep_lines` complete lines (0 starts an empty file).
    static Result<MetricsLog> open(const std::string& path, int64_t keep_lines);
    MetricsLog(MetricsLog&& o) noexcept;
    MetricsLog& operator=(MetricsLog&&) = delete;
    ~MetricsLog();

    Status append(const nlohmann::json& entry);
    /// Makes every appended line durable (called before a checkpoint records the count).
    Status sync();
    int64_t lines() const { return lines_; }

    /// Reads the complete lines of a metrics file (a torn last line is ignored).
    static Result<std::vector<nlohmann::json>> read(const std::string& path);

private:
    MetricsLog(std::string path, int fd, int64_t lines) : path_(std::move(path)), fd_(fd), lines_(lines) {}
    std::string path_;
    int fd_ = -1;
    int64_t lines_ = 0;
};

}  // namespace strato::train
