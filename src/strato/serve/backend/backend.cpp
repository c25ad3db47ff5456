#include "strato/serve/backend/backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <mutex>

namespace strato::serve {
namespace {

std::mutex g_mu;
std::vector<Backend>& registry() {
    static std::vector<Backend> r;
    return r;
}

}  // namespace

void register_backend(Backend backend) {
    std::lock_guard lock(g_mu);
    for (auto& b : registry())
        if (b.name == backend.name) {
            b = std::move(backend);
            return;
        }
    registry().push_back(std::move(backend));
}

const Backend* find_backend(const ModelConfig& c) {
    std::lock_guard lock(g_mu);
    for (const auto& b : registry()) {
        if (!c.backend.empty() && b.name == c.backend) return &b;
        for (const auto& p : b.platforms)
            if (!c.platform.empty() && p == c.platform) return &b;
    }
    return nullptr;
}

const Backend* detect_backend(const std::string& version_dir) {
    std::lock_guard lock(g_mu);
    std::error_code ec;
    for (const auto& b : registry())
        if (std::filesystem::exists(std::filesystem::path(version_dir) / b.default_filename, ec)) return &b;
    return nullptr;
}

std::string backend_list() {
    std::lock_guard lock(g_mu);
    std::string out;
    for (const auto& b : registry()) {
        if (!out.empty()) out += ", ";
        out += fmt::format("{} ({}, file '{}')", b.name, fmt::join(b.platforms, "/"), b.default_filename);
    }
    return out.empty() ? "none" : out;
}

}  // namespace strato::serve
