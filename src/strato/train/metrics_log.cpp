#include "strato/train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"

namespace strato::train {

Result<MetricsLog> MetricsLog::open(const std::string& path, int64_t keep_lines) {
    std::string kept;
    int64_t count = 0;
    if (keep_lines > 0) {
        // A log shorter than the checkpoint says (deleted, or copied off a node before the
        // checkpoint was: a preempted machine's run directory) loses its missing lines, not the
        // run: the run goes on after what is there. (It was an error, and --overwrite, which
        // deletes the checkpoints too, the only way on.)
        auto text = fs::read_file(path);
        if (!text && text.status().code() != StatusCode::kNotFound)
            return text.status().with_context("resuming metrics");
        const std::string all = text ? std::move(*text) : std::string();
        size_t pos = 0;
        while (count < keep_lines) {
            size_t nl = all.find('\n', pos);
            if (nl == std::string::npos) break;
            pos = nl + 1;
            ++count;
        }
        if (count < keep_lines)
            log::warn("{} {} complete lines but the checkpoint covers {}: the missing ones are lost; the run's new "
                      "lines follow {}",
                      path, text ? fmt::format("has {}", count) : std::string("is gone: 0"), keep_lines,
                      count > 0 ? "those there" : "from here");
        kept = all.substr(0, pos);
    }
    STRATO_RETURN_IF_ERROR(fs::atomic_write(path, kept));
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open {}: {}", path, std::strerror(errno));
    return MetricsLog(path, fd, count);
}

MetricsLog::MetricsLog(MetricsLog&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_), lines_(o.lines_) { o.fd_ = -1; }

MetricsLog::~MetricsLog() {
    if (fd_ >= 0) ::close(fd_);
}

Status MetricsLog::append(const nlohmann::json& entry) {
    std::string line = json_text(entry) + "\n";
    // One write() per line: with O_APPEND a kill leaves at most one torn last line.
    ssize_t n = ::write(fd_, line.data(), line.size());
    if (n != static_cast<ssize_t>(line.size())) return io_error("cannot append to {}: {}", path_, std::strerror(errno));
    ++lines_;
    return Status::ok();
}

Status MetricsLog::sync() {
    if (::fsync(fd_) != 0) return io_error("cannot fsync {}: {}", path_, std::strerror(errno));
    return Status::ok();
}

Result<std::vector<nlohmann::json>> MetricsLog::read(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path));
    std::vector<nlohmann::json> out;
    std::istringstream in(text);
    std::string line;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
        ++lineno;
        if (in.eof()) break;  // no trailing newline: a torn last line
        if (line.empty()) continue;
        auto j = parse_json_bounded(line);
        if (j.is_discarded()) return data_loss("{}:{}: not valid JSON", path, lineno);
        out.push_back(std::move(j));
    }
    return out;
}

}  // namespace strato::train
