#include "strato/serve/backend/backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

namespace strato::serve {
namespace {

std::mutex g_mu;
std::vector<Backend>& registry() {
    static std::vector<Backend> r;
    return r;
}
std::function<int()>& gpu_probe() {
    static std::function<int()> p;
    return p;
}

}  // namespace

Status check_output_shape(const ModelConfig& config, const TensorSpec& spec, const std::vector<int64_t>& got,
                          int64_t rows) {
    std::vector<int64_t> want = config.full_shape(spec);
    if (rows >= 0 && !want.empty()) want[0] = rows;
    bool fits = got.size() == want.size();
    for (size_t d = 0; fits && d < want.size(); ++d) fits = want[d] < 0 || got[d] == want[d];
    if (fits) return Status::ok();
    return internal_error("unexpected shape for output '{}': the model returned {}, the config says {}{}", spec.name,
                          shape_string(got), shape_string(config.full_shape(spec)),
                          rows >= 0 ? fmt::format(" for a batch of {}", rows) : "");
}

std::string Device::name() const { return is_gpu() ? fmt::format("cuda:{}", gpu) : "cpu"; }

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

void set_gpu_probe(std::function<int()> probe) {
    std::lock_guard lock(g_mu);
    gpu_probe() = std::move(probe);
}

int visible_gpus() {
    std::function<int()> probe;
    {
        std::lock_guard lock(g_mu);
        probe = gpu_probe();
    }
    return probe ? std::max(0, probe()) : 0;
}

Result<std::vector<Device>> place_instances(ModelConfig* c, bool backend_gpu, int gpus_visible) {
    if (c->instance_group.empty()) c->instance_group.push_back({.kind = "KIND_AUTO"});
    std::vector<Device> out;
    for (size_t i = 0; i < c->instance_group.size(); ++i) {
        InstanceGroup& g = c->instance_group[i];
        std::string what = fmt::format("model '{}': instance_group {}{}", c->name, i,
                                       g.name.empty() ? std::string() : fmt::format(" ('{}')", g.name));
        if (g.kind == "KIND_AUTO") g.kind = backend_gpu && (gpus_visible > 0 || !g.gpus.empty()) ? "KIND_GPU" : "KIND_CPU";
        if (g.kind != "KIND_GPU") {
            if (!g.gpus.empty())
                return invalid_argument("{}: 'gpus' {} is for kind KIND_GPU, not {}", what, fmt::join(g.gpus, ","), g.kind);
            for (int64_t k = 0; k < g.count; ++k) out.push_back(Device{});
            continue;
        }
        if (!backend_gpu)
            return Status{StatusCode::kUnimplemented,
                    fmt::format("{}: kind KIND_GPU, but the {} backend runs on the CPU only (use KIND_CPU)", what,
                                c->backend.empty() ? c->platform : c->backend)};
        if (gpus_visible <= 0)
            return Status{StatusCode::kUnavailable,
                    fmt::format("{}: kind KIND_GPU, but no CUDA GPU is visible to strato (a CPU-only libtorch, no driver, "
                                "or CUDA_VISIBLE_DEVICES empty; use KIND_CPU or KIND_AUTO)", what)};
        if (g.gpus.empty())
            for (int d = 0; d < gpus_visible; ++d) g.gpus.push_back(d);
        for (int64_t d : g.gpus)
            if (d < 0 || d >= gpus_visible)
                return invalid_argument("{}: GPU {} does not exist (strato sees {} GPU{}: 0..{})", what, d, gpus_visible,
                                        gpus_visible == 1 ? "" : "s", gpus_visible - 1);
        for (int64_t d : g.gpus)
            for (int64_t k = 0; k < g.count; ++k) out.push_back(Device{static_cast<int>(d)});
    }
    return out;
}

}  // namespace strato::serve
