#pragma once
// The one place that knows which libtorch it is built against: Debian's 1.13 (CPU) or a 2.x
// (CUDA, e.g. the one inside a PyTorch wheel). Nothing else checks versions.
//   - autocast: 1.13 has per-device calls (set_cpu_enabled, set_autocast_gpu_dtype, ...); 2.4
//     made them device-generic (set_autocast_enabled(device, on), set_autocast_dtype(device, t)).
//   - c10d: from 2.0, ProcessGroupGloo/NCCL derive from c10d::Backend rather than ProcessGroup;
//     collectives can be called on either, so strato holds whichever the constructor returns.

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#define STRATO_TORCH_AT_LEAST(major, minor) \
    (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace strato::compat {

inline bool autocast_enabled(c10::DeviceType device) {
#if STRATO_TORCH_AT_LEAST(2, 4)
    return at::autocast::is_autocast_enabled(device);
#else
    return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device, bool on) {
#if STRATO_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(device, on);
#else
    if (device == c10::DeviceType::CPU)
        at::autocast::set_cpu_enabled(on);
    else
        at::autocast::set_enabled(on);
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if STRATO_TORCH_AT_LEAST(2, 4)
    return at::autocast::get_autocast_dtype(device);
#else
    return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device, at::ScalarType t) {
#if STRATO_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_dtype(device, t);
#else
    if (device == c10::DeviceType::CPU)
        at::autocast::set_autocast_cpu_dtype(t);
    else
        at::autocast::set_autocast_gpu_dtype(t);
#endif
}

/// Python's `with torch.autocast(device, dtype)`: ops inside run in `dtype` where autocast says
/// so. Keep backward() outside (it replays the dtypes chosen in forward). Thread-local.
class AutocastGuard {
public:
    AutocastGuard(c10::DeviceType device, at::ScalarType dtype, bool enabled) : device_(device), enabled_(enabled) {
        if (!enabled_) return;
        prev_ = autocast_enabled(device_);
        prev_dtype_ = autocast_dtype(device_);
        set_autocast_enabled(device_, true);
        set_autocast_dtype(device_, dtype);
        at::autocast::increment_nesting();
    }
    ~AutocastGuard() {
        if (!enabled_) return;
        if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
        set_autocast_enabled(device_, prev_);
        set_autocast_dtype(device_, prev_dtype_);
    }
    AutocastGuard(const AutocastGuard&) = delete;
    AutocastGuard& operator=(const AutocastGuard&) = delete;

private:
    c10::DeviceType device_;
    bool enabled_;
    bool prev_ = false;
    at::ScalarType prev_dtype_ = at::kBFloat16;
};

}  // namespace strato::compat

#if defined(USE_C10D_GLOO) || defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#if STRATO_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif
namespace strato::compat {
#if STRATO_TORCH_AT_LEAST(2, 0)
using CollectiveGroup = c10d::Backend;  // ProcessGroupGloo/NCCL : Backend
#else
using CollectiveGroup = c10d::ProcessGroup;  // ProcessGroupGloo/NCCL : ProcessGroup
#endif
}  // namespace strato::compat
#endif
