#pragma once
// A model's serving configuration: the common fields of Triton's ModelConfig, read from
// `config.pbtxt` (protobuf text format, as Triton repositories have them), `config.toml` or the
// JSON that Triton's load API and `/config` endpoint use. One mapping serves all three: each
// front-end produces a small field tree, so the rules and messages are the same everywhere.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/serve/protocol/types.h"

namespace strato::serve {

struct TensorSpec {
    std::string name;
    DataType dtype = DataType::kInvalid;
    std::vector<int64_t> dims;  // without the batch dimension; -1 = variable
    bool optional = false;
    std::string label_filename;
};

struct DynamicBatching {
    std::vector<int64_t> preferred_batch_size;
    int64_t max_queue_delay_us = 0;
    bool preserve_ordering = false;
    int64_t max_queue_size = 0;        // default_queue_policy.max_queue_size; 0: the server default
    int64_t default_timeout_us = 0;    // default_queue_policy.default_timeout_microseconds
    bool allow_timeout_override = true;
};

struct InstanceGroup {
    std::string name;
    int64_t count = 1;                // instances (per GPU for KIND_GPU)
    std::string kind = "KIND_CPU";    // KIND_CPU, KIND_GPU, KIND_AUTO (GPU when there is one), KIND_MODEL
    std::vector<int64_t> gpus;        // KIND_GPU: the CUDA devices; empty: all visible ones
};

struct VersionPolicy {
    enum class Kind { kLatest, kAll, kSpecific };
    Kind kind = Kind::kLatest;
    int64_t num_versions = 1;
    std::vector<int64_t> versions;
};

/// One input of a model_warmup sample (Triton's ModelWarmup.Input).
struct WarmupInput {
    DataType dtype = DataType::kInvalid;
    std::vector<int64_t> dims;  // one sample's shape (no batch dimension)
    enum class Fill { kNone, kZero, kRandom, kFile } fill = Fill::kNone;
    std::string input_data_file;  // kFile: one sample's raw bytes, in <model>/warmup/
};

/// A model_warmup entry: `count` requests of `batch_size` samples run on every copy of the model
/// before it is reported ready, so their first-time costs (plans, kernels) are not a client's.
struct WarmupSample {
    std::string name;
    int64_t batch_size = 0;
    std::map<std::string, WarmupInput> inputs;
    int64_t count = 1;
};

struct ModelConfig {
    std::string name;
    std::string platform;
    std::string backend;
    int64_t max_batch_size = 0;
    std::vector<TensorSpec> inputs;
    std::vector<TensorSpec> outputs;
    std::optional<DynamicBatching> dynamic_batching;
    std::vector<InstanceGroup> instance_group;
    VersionPolicy version_policy;
    std::string default_model_filename;
    std::map<std::string, std::string> parameters;  // parameters { key: "x" value: { string_value: "y" } }
    std::vector<WarmupSample> model_warmup;

    /// Instances over all groups: count, times the GPUs of a KIND_GPU group that lists them.
    int64_t instance_count() const;
    /// The shape a client sees: [-1] + dims when the model batches.
    std::vector<int64_t> full_shape(const TensorSpec& t) const;
};

/// Parses config.pbtxt text. `source` names the file in messages ("repo/m/config.pbtxt:12: ...").
Result<ModelConfig> parse_model_config_pbtxt(std::string_view text, const std::string& source);
/// Parses config.toml text (the same fields, TOML tables and arrays of tables).
Result<ModelConfig> parse_model_config_toml(std::string_view text, const std::string& source);
/// Parses the JSON form (Triton's /config output and the load API's "config" parameter).
Result<ModelConfig> parse_model_config_json(const nlohmann::json& j, const std::string& source);

/// Checks a complete config: names, types, shapes, batching against max_batch_size.
Status validate_model_config(const ModelConfig& c, const std::string& source);

/// The config as Triton's `/v2/models/{m}/config` prints it (proto field names, defaults printed).
nlohmann::json model_config_to_json(const ModelConfig& c);

}  // namespace strato::serve
