#pragma once
// Open Inference Protocol targets: reads a model's metadata and configuration from the server
// (as perf_analyzer does), generates input tensors (zeros, random, a perf_analyzer JSON data
// file, or images from an IDX file such as Fashion-MNIST) and serialises inference requests in
// JSON or binary tensor form. Also reads the statistics extension for the server-side breakdown.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/load.h"

namespace strato::loadgen {

/// A blocking GET or POST for control requests (metadata, stats); not for load.
struct HttpReply {
    int status = 0;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};
/// `headers` are "Name: value" lines; without a Content-Type one, a body is sent as JSON.
/// `cancelled`, polled every 50 ms, ends the wait early with kCancelled (a Ctrl-C need not sit
/// out the timeout of a server that does not answer).
Result<HttpReply> http_request(const Url& base, std::string_view method, const std::string& target,
                               std::string_view body = {}, int64_t timeout_ms = 5000,
                               const std::vector<std::string>& headers = {},
                               const std::function<bool()>& cancelled = {});

struct InferTargetOptions {
    std::string model;
    std::string version;                               // empty: the server's choice
    int64_t batch_size = 1;
    std::map<std::string, std::vector<int64_t>> shapes;  // --shape name:d1,d2 for variable dims
    std::string input_data = "random";                 // zero | random | FILE.json | FILE.idx[.gz]
    bool binary = true;                                // binary tensor extension, else JSON
    int64_t string_length = 128;                       // BYTES elements with random/zero data
    int variants = 16;                                 // distinct request bodies to rotate
    uint64_t seed = 1;
    // -H: extra "Name: value" headers on every request, the metadata's too (an Authorization for
    // a server behind a gateway); fetch_server_stats takes them as well.
    std::vector<std::string> headers;
    std::function<bool()> interrupted;  // ends a metadata fetch early (Ctrl-C)
};

/// Builds the inference target for `options.model` on the server at `base` (its path is
/// ignored). Errors name the model, the input and what was expected (an unknown model, a
/// variable dimension without --shape, a data file that does not match the inputs).
Result<Target> build_infer_target(const Url& base, const InferTargetOptions& options);

/// The cumulative statistics of one model version (the statistics extension), in ns.
struct ServerStats {
    int64_t success = 0, inference_count = 0, execution_count = 0;
    int64_t request_ns = 0, queue_ns = 0, compute_input_ns = 0, compute_infer_ns = 0, compute_output_ns = 0;
};
Result<ServerStats> fetch_server_stats(const Url& base, const std::string& model, const std::string& version,
                                       const std::vector<std::string>& headers = {});

/// Per-request averages between two readings, in µs (perf_analyzer's server columns).
struct ServerBreakdown {
    int64_t requests = 0;
    double request_us = 0, queue_us = 0, compute_input_us = 0, compute_infer_us = 0, compute_output_us = 0;
    double overhead_us() const {
        double o = request_us - queue_us - compute_input_us - compute_infer_us - compute_output_us;
        return o > 0 ? o : 0;
    }
    double avg_batch = 0;  // inferences per execution
};
ServerBreakdown server_breakdown(const ServerStats& before, const ServerStats& after);

}  // namespace strato::loadgen
