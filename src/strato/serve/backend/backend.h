#pragma once
// What the server needs from a backend: load a model version from its directory, fill in a
// config the user left out, and run a batch. Backends register themselves by name so that the
// serving core never links libtorch or OpenCV; the strato binary registers the ones it has.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/serve/protocol/types.h"
#include "strato/serve/repository/model_config.h"

namespace strato::serve {

/// A loaded model version. execute() may be called from several instance threads at once.
class Model {
public:
    virtual ~Model() = default;
    /// Runs one batch: `inputs` in config order (batch dimension first when the model batches);
    /// fills `outputs` with every config output, in config order, with the same batch size.
    virtual Status execute(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) = 0;
    /// Class labels for the classification extension (may be empty).
    virtual std::vector<std::string> labels() const { return {}; }
    /// Bytes of weights held (for /stats memory_usage).
    virtual int64_t memory_bytes() const { return 0; }
    /// The CPU threads one execution runs on (OpenMP's intra-op team). Above 1 the batcher runs
    /// it only on its instance threads, never inline on an HTTP thread: every thread that starts
    /// OpenMP work keeps a pool of workers for its lifetime, and once the pools hold more threads
    /// than there are cores, libgomp stops spinning between parallel regions and every region
    /// waits on a futex (a batch-1 forward pass 2.6x slower on a 2-core VM).
    virtual int intra_op_threads() const { return 1; }
    /// How it runs, for the load log line, e.g. "oneDNN graph, bf16, 2 threads" (may be empty).
    virtual std::string describe() const { return {}; }
};

/// Where a model instance runs: the CPU, or CUDA device `gpu`.
struct Device {
    int gpu = -1;  // -1: the CPU
    bool is_gpu() const { return gpu >= 0; }
    std::string name() const;  // "cpu", "cuda:0"
    bool operator==(const Device&) const = default;
    auto operator<=>(const Device&) const = default;
};

struct Backend {
    std::string name;                    // config "backend"
    std::vector<std::string> platforms;  // config "platform" values it serves (the first is reported)
    std::string default_filename;        // the model file inside a version directory (config default_model_filename overrides)
    /// Fills what the config leaves out (inputs, outputs, max_batch_size) from the model itself;
    /// an error when the backend cannot know and the config must say.
    std::function<Status(ModelConfig*, const std::string& version_dir)> autocomplete;
    /// Loads one copy of the model on `device` (the repository loads one per device its instances use).
    std::function<Result<std::shared_ptr<Model>>(const ModelConfig&, const std::string& version_dir, Device)> load;
    bool gpu = false;  // can run on GPUs (instance_group KIND_GPU)
};

void register_backend(Backend backend);
/// The backend a config names (backend or platform); nullptr when none does.
const Backend* find_backend(const ModelConfig& config);
/// The backend whose default file is in `version_dir`; nullptr when there is none.
const Backend* detect_backend(const std::string& version_dir);
/// "pytorch (pytorch_libtorch), strato (strato_package), ..." for messages.
std::string backend_list();

/// The GPUs this process can use: what the probe set by the torch backends reports (CUDA's
/// device count), 0 without one.
void set_gpu_probe(std::function<int()> probe);
int visible_gpus();

/// Resolves `c`'s instance groups as Triton does and returns the device of every instance, in
/// order. No instance_group means one group of kind KIND_AUTO. KIND_GPU places `count` instances on
/// each GPU in `gpus` (all visible GPUs when empty); KIND_AUTO is KIND_GPU when the backend runs on
/// GPUs and `gpus_visible` > 0, else KIND_CPU; KIND_CPU and KIND_MODEL place `count` instances on
/// the CPU. Rewrites every group to the kind it resolved to, with its GPU list filled in, so that
/// /config shows where the instances are. Errors name the group and what was expected.
Result<std::vector<Device>> place_instances(ModelConfig* c, bool backend_gpu, int gpus_visible);

/// Whether an output a backend's model returned (`got`) fits its config's shape for a batch of
/// `rows` (-1: the model does not batch); -1 dims of the config take any size. The error is
/// Triton's PyTorch backend's "unexpected shape for output": a reply of another shape than the
/// config says (dims [5] for a graph of 10 logits) is no answer to send.
Status check_output_shape(const ModelConfig& config, const TensorSpec& spec, const std::vector<int64_t>& got,
                          int64_t rows);

}  // namespace strato::serve
