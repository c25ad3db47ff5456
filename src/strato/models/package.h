#pragma once
// The model package: a directory that holds everything needed to run a trained model, with no
// training config:
//   strato-model.json  architecture + hyper-parameters, input/output signature, preprocessing,
//                      class labels, and the SHA-256 of every other file
//   weights.pt         the parameters and buffers (a libtorch archive)
//   metrics.json       evaluation results (optional)
// The directory is written next to its final place and renamed into it, so readers see the
// old package or the new one, never half of one.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "strato/data/dataset.h"
#include "strato/models/zoo.h"

namespace strato::models {

inline constexpr const char* kPackageManifest = "strato-model.json";
inline constexpr const char* kPackageWeights = "weights.pt";

struct PackageInfo {
    ModelConfig model;
    data::ImageShape input_shape;
    int64_t num_classes = 0;
    std::vector<std::string> labels;
    std::vector<double> mean;  // input normalisation on pixels scaled to [0, 1]
    std::vector<double> std;
    // A model trained on a CSV table: its feature columns, in the order it takes them (scikit-learn's
    // feature_names_in_); data evaluated with it must have them, in that order. Empty otherwise.
    std::vector<std::string> features;
    // A model trained on images: the test split's transforms it was evaluated with (data.test.transforms,
    // e.g. ["resize size=256", "center-crop size=224"]); `strato eval` and compress apply them when
    // their data config names none. Empty: images are resized to the input size.
    std::vector<std::string> test_transforms;
    nlohmann::json metrics = nlohmann::json::object();  // written to metrics.json
    // Set (an object) for an INT8 package made by `strato compress quantize`: its weights.pt
    // holds a models::QuantizedNet, not the float network of `model`.
    nlohmann::json quantization;
    bool quantized() const { return quantization.is_object(); }
};

struct LoadedPackage {
    PackageInfo info;
    Net net;  // in eval mode
};

/// Writes `net` and `info` as a package at `dir` (replacing one that is there).
Status save_package(const std::string& dir, const PackageInfo& info, NetImpl& net);
/// What save_package checks first, for commands to check before their work: `dir` is named, and
/// is absent, empty or an earlier package -- never a run or a user's directory to be replaced.
Status check_package_destination(const std::string& dir);
/// Loads and verifies a package; a missing file, a checksum mismatch or an unreadable archive
/// is an error naming the file.
Result<LoadedPackage> load_package(const std::string& dir);

/// The network `strato serve`, `strato eval` and `strato compress report` run for a package, and
/// the input layout it wants.
struct InferenceNet {
    Net net;
    bool fused = false;          // the FusedNet lowering of a float package
    bool bf16 = false;           // that lowering runs in bf16 (no autocast needed)
    bool bf16_autocast = false;  // bf16 was asked and this is the eager network: run it under bf16 autocast
    bool channels_last = false;  // give it NHWC input (see channels_last_copy)
};
/// For a float package, its FusedNet lowering (BatchNorm folded, oneDNN-prepacked weights; what
/// TorchScript's optimize_for_inference does), in bf16 when `bf16` is set; with `fuse` false, a
/// network the lowering does not know or (bf16) a CPU without bf16 kernels, the eager network in
/// channels-last (to run under autocast where bf16 is wanted). An INT8 package runs as loaded.
/// Converts `pkg.net` in place where it returns it.
InferenceNet inference_net(LoadedPackage& pkg, bool fuse = true, bool bf16 = false);

/// Module <-> bytes (a libtorch archive), for packages and checkpoints.
std::string module_to_bytes(torch::nn::Module& m);
/// Loads `m`'s parameters and buffers from `bytes`. A tensor of another shape than `m` has is an
/// invalid_argument error whose message contains kOtherModelConfig; a damaged archive is data_loss.
Status module_from_bytes(torch::nn::Module& m, const std::string& bytes, const std::string& what);
inline constexpr const char* kOtherModelConfig = "the weights were saved with another model config";
/// Any libtorch archive <-> bytes: `fill` writes into the archive / `read` reads from it. A
/// malformed archive is a kDataLoss status naming `what`.
std::string archive_to_bytes(const std::function<void(torch::serialize::OutputArchive&)>& fill);
Status archive_from_bytes(const std::string& bytes, const std::string& what,
                          const std::function<void(torch::serialize::InputArchive&)>& read);


}  // namespace strato::models
