#pragma once
// `strato compress quantize`: INT8 post-training quantization of a model package.
//
//   QuantizeRequest r{.model = "runs/x/model", .output = "runs/x/model-int8"};
//   Result<QuantizeResult> q = quantize_package(r);   // calibrates on the train split, then
//                                                      // evaluates both on the test split
// The output is a model package (strato-model.json with a "quantization" section, int8 weights)
// that strato eval, strato serve and strato compress report load like any other.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "strato/core/status.h"
#include "strato/data/data_config.h"
#include "strato/models/quantized.h"

namespace strato::compress {

struct QuantizeRequest {
    std::string model;   // the float package
    std::string output;  // where the INT8 package goes (must differ from model)
    data::DataConfig data;             // calibration reads its train split, evaluation its test split
    int64_t calibration_batches = 32;  // of calibration_batch_size samples, drawn at random (seeded)
    int64_t calibration_batch_size = 64;
    uint64_t seed = 0;
    models::QuantizeOptions quant;
    bool evaluate = true;  // accuracy of the float and the INT8 model on the test split
    bool overwrite = false;  // replace an existing package at `output` (otherwise refused)
};

struct QuantizeResult {
    std::string output;
    std::string engine;
    int64_t calibration_samples = 0;
    double calibration_s = 0;
    std::optional<double> float_accuracy, int8_accuracy;  // with evaluate
    int64_t test_samples = 0;
    int64_t float_bytes = 0, int8_bytes = 0;  // weights.pt of each package
    nlohmann::json layers;                    // QuantizedNet::describe()
};

/// After signals::install_stop_handlers(), a SIGINT/SIGTERM stops it before the next calibration
/// or evaluation batch with kCancelled: nothing is written, a package at `output` stays as it was.
Result<QuantizeResult> quantize_package(const QuantizeRequest& request);

}  // namespace strato::compress
