#pragma once
// ONNX export of the model zoo: a network's eval-mode forward pass written as an ONNX graph from
// its weights, with a dynamic batch axis, then checked by libonnx's checker and shape inference.
//
//   OnnxSpec spec;  spec.arch = "cnn";  spec.input_shape = {1, 28, 28};  spec.classes = 10;
//   Result<OnnxModelBytes> m = net_to_onnx(*net, spec);      // bytes of a checked ModelProto
//   Result<OnnxExportResult> r = export_package_onnx("runs/x/model", {});  // -> runs/x/model/model.onnx
//
// NOTE: the namespace is `exporter` because `export` is a C++ keyword.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/data/dataset.h"

namespace strato::models {
class NetImpl;  // zoo.h; declared here so the command line need not parse libtorch's headers
}

namespace strato::exporter {

inline constexpr const char* kOnnxFile = "model.onnx";
inline constexpr int64_t kOnnxOpsetMin = 13;
inline constexpr int64_t kOnnxOpsetMax = 17;  // the newest opset libonnx 1.12 knows

/// What to write: the architecture (as in the package's `model.arch`), the input and output
/// signature and the opset. The batch axis is the symbolic dimension `batch_dim`.
struct OnnxSpec {
    std::string arch;              // mlp | cnn | resnet
    data::ImageShape input_shape;  // [C, H, W] of one sample
    int64_t classes = 0;
    std::string input_name = "input";
    std::string output_name = "logits";
    std::string batch_dim = "batch";
    int64_t opset = kOnnxOpsetMin;
    std::map<std::string, std::string> metadata;  // written as the model's metadata_props
};

/// A serialized, checked ONNX model and what it holds.
struct OnnxModelBytes {
    std::string bytes;
    int64_t nodes = 0;
    int64_t initializers = 0;
    std::vector<std::string> ops;  // distinct operator types, in first-use order
};

/// Writes the eval-mode forward pass of `net` (built by models::create_model for `spec.arch`):
/// Linear -> Gemm, Conv2d -> Conv, BatchNorm2d -> BatchNormalization (running statistics),
/// ReLU -> Relu, MaxPool2d -> MaxPool, Flatten -> Flatten, the global average pool ->
/// GlobalAveragePool, residual sums -> Add; Dropout is the identity and is left out. A module the
/// writer does not know is an error naming its path and type. The result passed
/// onnx::checker::check_model and shape inference, which found the output [batch, classes].
/// Reads `net` only (a forward pass of a 3-element probe through nn::Functional modules).
Result<OnnxModelBytes> net_to_onnx(models::NetImpl& net, const OnnxSpec& spec);

struct OnnxExportOptions {
    std::string output;  // empty: <package>/model.onnx
    int64_t opset = kOnnxOpsetMin;
};

struct OnnxExportResult {
    std::string path;
    int64_t bytes = 0;
    std::string sha256;
    int64_t opset = 0;
    int64_t nodes = 0;
    std::vector<std::string> ops;
    std::string arch;
    std::string input_name, output_name;
    std::vector<int64_t> input_shape, output_shape;  // -1 = the dynamic batch axis
    bool in_manifest = false;                        // recorded in the package's file list with its checksum
};

/// Loads (and verifies) the package at `dir`, exports its network with the package signature's
/// input/output names and writes the file atomically. A file written into the package directory
/// is added to strato-model.json's `files` with its SHA-256, so the package stays verifiable;
/// a crash at any point leaves a loadable package. After signals::install_stop_handlers(), a
/// SIGINT/SIGTERM stops it between its steps with kCancelled, the file and the manifest untouched.
Result<OnnxExportResult> export_package_onnx(const std::string& dir, const OnnxExportOptions& options);

}  // namespace strato::exporter
