#include "strato/monitor/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>

namespace strato::monitor {

namespace {

// The parts of NVML's C ABI used here (nvml.h, stable since the _v2 entry points).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
    unsigned int gpu, memory;
};
struct nvmlMemory_t {
    unsigned long long total, free, used;
};
constexpr int kTemperatureGpu = 0;
constexpr int kClockSm = 1, kClockMem = 2;

}  // namespace

struct Nvml::Api {
    void* lib = nullptr;
    nvmlReturn_t (*init)() = nullptr;
    nvmlReturn_t (*shutdown)() = nullptr;
    const char* (*error_string)(nvmlReturn_t) = nullptr;
    nvmlReturn_t (*count)(unsigned int*) = nullptr;
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
    nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
    nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
    nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
    nvmlReturn_t (*driver)(char*, unsigned int) = nullptr;

    std::string error(nvmlReturn_t r) const {
        return error_string ? error_string(r) : fmt::format("NVML error {}", r);
    }
};

Result<std::shared_ptr<Nvml>> Nvml::open(const std::string& library) {
    std::string path = library;
    if (path.empty()) {
        const char* env = std::getenv("STRATO_NVML_LIBRARY");
        path = env && *env ? env : "libnvidia-ml.so.1";
    }
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) return not_found("no GPU: cannot load NVML ({}): {}", path, dlerror());
    std::shared_ptr<Nvml> n(new Nvml);
    n->api_ = std::make_unique<Api>();
    Api& a = *n->api_;
    a.lib = lib;
    auto sym = [&](auto& fn, const char* s) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, s));
        return fn != nullptr;
    };
    if (!sym(a.init, "nvmlInit_v2") || !sym(a.shutdown, "nvmlShutdown") || !sym(a.count, "nvmlDeviceGetCount_v2") ||
        !sym(a.handle, "nvmlDeviceGetHandleByIndex_v2") || !sym(a.name, "nvmlDeviceGetName"))
        return not_found("no GPU: {} lacks the NVML entry points (nvmlInit_v2, nvmlDeviceGetCount_v2, ...)", path);
    sym(a.error_string, "nvmlErrorString");
    sym(a.uuid, "nvmlDeviceGetUUID");
    sym(a.utilization, "nvmlDeviceGetUtilizationRates");
    sym(a.memory, "nvmlDeviceGetMemoryInfo");
    sym(a.power, "nvmlDeviceGetPowerUsage");
    sym(a.temperature, "nvmlDeviceGetTemperature");
    sym(a.clock, "nvmlDeviceGetClockInfo");
    sym(a.driver, "nvmlSystemGetDriverVersion");
    if (nvmlReturn_t r = a.init(); r != 0) return not_found("no GPU: nvmlInit failed: {}", a.error(r));
    unsigned int count = 0;
    if (nvmlReturn_t r = a.count(&count); r != 0) return not_found("no GPU: nvmlDeviceGetCount failed: {}", a.error(r));
    if (count == 0) return not_found("no GPU: NVML reports 0 devices");
    char buf[256];
    if (a.driver && a.driver(buf, sizeof buf) == 0) n->driver_ = buf;
    nvmlReturn_t handle_error = 0;
    for (unsigned int i = 0; i < count; ++i) {
        nvmlDevice_t h = nullptr;
        // A GPU NVML counts but gives no handle to (off the bus before the start: "GPU is lost")
        // was left out without a word, and with all of them so, the monitor said "0 GPUs: ".
        if (nvmlReturn_t r = a.handle(i, &h); r != 0) {
            handle_error = r;
            n->unreachable_.push_back(fmt::format("GPU {}: NVML gives no handle to it: {}", i, a.error(r)));
            continue;
        }
        GpuInfo g;
        g.index = static_cast<int>(i);
        if (a.name(h, buf, sizeof buf) == 0) g.name = buf;
        if (a.uuid && a.uuid(h, buf, sizeof buf) == 0) g.uuid = buf;
        nvmlMemory_t mem{};
        if (a.memory && a.memory(h, &mem) == 0) g.memory_total_mib = static_cast<double>(mem.total) / (1 << 20);
        n->gpus_.push_back(g);
        n->handles_.push_back(h);
    }
    if (n->gpus_.empty())
        return not_found("no GPU: NVML counts {} device{} but gives a handle to none: {}", count, count == 1 ? "" : "s",
                         a.error(handle_error));
    return n;
}

Nvml::~Nvml() {
    if (api_ && api_->shutdown) api_->shutdown();
    // NOTE: the library stays loaded: NVML's own threads may outlive shutdown on some drivers.
}

void Nvml::sample(Snapshot& out) const {
    const Api& a = *api_;
    out.notes.insert(out.notes.end(), unreachable_.begin(), unreachable_.end());
    for (size_t i = 0; i < gpus_.size(); ++i) {
        const GpuInfo& g = gpus_[i];
        nvmlDevice_t h = handles_[i];
        Labels l = {{"gpu", std::to_string(g.index)}, {dcgm_labels_ ? "UUID" : "uuid", g.uuid},
                    {"device", fmt::format("nvidia{}", g.index)}, {dcgm_labels_ ? "modelName" : "model_name", g.name}};
        // A GPU that answers nothing (off the bus: NVML_ERROR_GPU_IS_LOST, a driver reset) only lost
        // its series without a word; it gets a note naming it and NVML's error.
        nvmlReturn_t failed = 0;
        bool answered = false;
        auto ok = [&](nvmlReturn_t r) {
            if (r == 0) answered = true;
            else if (failed == 0) failed = r;
            return r == 0;
        };
        nvmlUtilization_t u{};
        if (a.utilization && ok(a.utilization(h, &u))) {
            out.add("DCGM_FI_DEV_GPU_UTIL", "gpu_util", "GPU utilization (in %).", u.gpu, l);
            out.add("DCGM_FI_DEV_MEM_COPY_UTIL", "gpu_mem_util", "Memory utilization (in %).", u.memory, l);
        }
        nvmlMemory_t m{};
        if (a.memory && ok(a.memory(h, &m))) {
            out.add("DCGM_FI_DEV_FB_USED", "gpu_mem_used_mib", "Framebuffer memory used (in MiB).",
                    static_cast<double>(m.used) / (1 << 20), l);
            out.add("DCGM_FI_DEV_FB_FREE", "gpu_mem_free_mib", "Framebuffer memory free (in MiB).",
                    static_cast<double>(m.free) / (1 << 20), l);
        }
        unsigned int v = 0;
        if (a.power && ok(a.power(h, &v)))
            out.add("DCGM_FI_DEV_POWER_USAGE", "gpu_power_w", "Power draw (in W).", v / 1000.0, l);
        if (a.temperature && ok(a.temperature(h, kTemperatureGpu, &v)))
            out.add("DCGM_FI_DEV_GPU_TEMP", "gpu_temp_c", "GPU temperature (in C).", v, l);
        if (a.clock && ok(a.clock(h, kClockSm, &v)))
            out.add("DCGM_FI_DEV_SM_CLOCK", "gpu_sm_clock_mhz", "SM clock frequency (in MHz).", v, l);
        if (a.clock && ok(a.clock(h, kClockMem, &v)))
            out.add("DCGM_FI_DEV_MEM_CLOCK", "gpu_mem_clock_mhz", "Memory clock frequency (in MHz).", v, l);
        if (!answered && failed != 0)
            out.notes.push_back(fmt::format("GPU {} ({}): NVML answers no query: {}", g.index,
                                            g.uuid.empty() ? g.name : g.uuid, a.error(failed)));
    }
}

}  // namespace strato::monitor
