#pragma once
// Open Inference Protocol v2 inference bodies: JSON tensors and Triton's binary tensor extension
// (a JSON header of `Inference-Header-Content-Length` bytes, then the raw tensors in the order
// the JSON names them). Decoding never trusts the input: every size, shape, datatype and nesting
// depth is checked and a mistake is a kInvalidArgument status that says what and where.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"
#include "strato/serve/protocol/types.h"

namespace strato::serve {

struct RequestedOutput {
    std::string name;
    bool binary = false;          // "parameters": {"binary_data": true}
    int64_t classification = 0;   // "parameters": {"classification": N}: top-N as BYTES
};

struct InferRequest {
    std::string id;
    nlohmann::json parameters = nlohmann::json::object();  // request-level, triton_* rejected
    std::vector<Tensor> inputs;
    std::vector<RequestedOutput> outputs;  // empty: every output, in the model's order
    bool binary_output = false;            // "binary_data_output": the default for outputs
    int64_t timeout_us = 0;                // "timeout" parameter (0: the model's default)
    int64_t priority = 0;                  // "priority" parameter (accepted, single level)
    bool raw = false;  // raw binary body: inputs[0] holds only the bytes; the server names it
};

struct InferResponse {
    std::string model_name;
    std::string model_version;
    std::string id;
    std::vector<Tensor> outputs;
    std::vector<bool> binary;  // per output: send as binary data
};

struct EncodedBody {
    std::string body;
    size_t header_length = 0;  // JSON part; equal to body.size() when nothing is binary
    bool has_binary = false;
};

/// Parses an `Inference-Header-Content-Length` value against the body size.
Result<size_t> parse_header_length(std::string_view value, size_t body_size);

/// Decodes an inference request. `header_length` is the value of Inference-Header-Content-Length
/// (absent: the whole body is JSON; 0: a raw binary body for a single-input model).
Result<InferRequest> decode_infer_request(std::string_view body, std::optional<size_t> header_length);

/// Encodes a response; floats print in their shortest round-trip form.
EncodedBody encode_infer_response(const InferResponse& response);

/// Encodes a request (used by tests, the load generator and fuzz corpora). Inputs are sent as
/// binary data when `binary_inputs`, else as JSON arrays.
EncodedBody encode_infer_request(const InferRequest& request, bool binary_inputs);

/// Decodes a response body (for clients and tests).
Result<InferResponse> decode_infer_response(std::string_view body, std::optional<size_t> header_length);

/// The classification extension: top-`n` of each row of `scores` (FP32/FP64, [batch, classes]
/// when `batched`, else [classes]) as BYTES "value:index[:label]".
Result<Tensor> classify(const Tensor& scores, int64_t n, bool batched,
                        const std::vector<std::string>& labels);

/// JSON string escaping that never throws (invalid UTF-8 is replaced).
std::string json_quote(std::string_view s);

}  // namespace strato::serve
