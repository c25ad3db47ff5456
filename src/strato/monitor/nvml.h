#pragma once
// NVIDIA GPUs through NVML, loaded at run time with dlopen so strato builds and runs on machines
// without a driver. The library is libnvidia-ml.so.1 (the driver's), or the file named by
// STRATO_NVML_LIBRARY. Metric names follow NVIDIA's DCGM exporter (DCGM_FI_DEV_GPU_UTIL, ...) with
// its labels (gpu, uuid, device, model_name: snake_case so `promtool check metrics` is clean; with
// set_dcgm_labels(true) exactly DCGM's UUID and modelName, for dashboards that group by them).
//
//     auto nvml = Nvml::open();          // kNotFound "no GPU: ..." without a driver
//     if (nvml) (*nvml)->sample(snapshot);
//
// Thread-safe after open() (NVML is); the library stays loaded for the process lifetime.

#include <memory>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/monitor/snapshot.h"

namespace strato::monitor {

struct GpuInfo {
    int index = 0;
    std::string name, uuid;
    double memory_total_mib = 0;
};

class Nvml {
public:
    /// Loads and initialises NVML; kNotFound (with the reason) when there is no driver or no GPU.
    static Result<std::shared_ptr<Nvml>> open(const std::string& library = {});
    ~Nvml();

    const std::vector<GpuInfo>& gpus() const { return gpus_; }
    const std::string& driver_version() const { return driver_; }
    /// Appends utilisation, memory, power, temperature and clocks of every GPU. A query a GPU does
    /// not support is left out (as DCGM does), never an error; a GPU that answers no query, or
    /// that NVML gave no handle to, is a note naming it.
    void sample(Snapshot& out) const;
    void set_dcgm_labels(bool on) { dcgm_labels_ = on; }

    struct Api;

private:
    Nvml() = default;
    std::unique_ptr<Api> api_;
    std::vector<GpuInfo> gpus_;
    std::vector<void*> handles_;
    std::vector<std::string> unreachable_;  // GPUs NVML counts but gives no handle to: a note each sample
    std::string driver_;
    bool dcgm_labels_ = false;
};

}  // namespace strato::monitor
