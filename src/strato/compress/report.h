#pragma once
// The comparison report (`strato compress report`): one row per model package variant —
// accuracy on the test split, size on disk, parameters (and how many are non-zero, for pruned
// packages), latency at batch 1 and throughput at batch 64 — with ratios against the first row.
//
//   std::vector<Variant> v = {parse_variant("fp32=runs/cnn/model").value(),
//                             parse_variant("bf16=runs/cnn/model@bf16").value(),
//                             parse_variant("int8=runs/cnn-int8/model").value()};
//   CompareOptions o;  o.data.limit_test = 2000;
//   Result<CompareReport> r = compare(v, o);
//   fmt::print("{}", format_table(*r));
//
// Timing runs the package's forward pass the way `strato serve` does (PackageModel): the
// network serving runs (models::inference_net: the fused FP32 graph for a float package, the
// INT8 graph on channels-last inputs for a quantized one), under c10::InferenceMode, on the CPU,
// with `threads` intra-op threads; a bf16 variant runs the fused graph in bf16 like `strato eval
// --bf16` and serve's precision "bf16" (the eager network under bf16 autocast where the CPU has no
// oneDNN bf16 kernels, or for @bf16-eager). Inputs are already normalised (the
// normalisation and the protocol codec are not timed). The rows are timed interleaved: `rounds`
// rounds each time every row for its share of the passes, so a machine that slows down for a
// while slows every row alike and the ratios stay fair. Not thread-safe: sets the process's
// libtorch thread count.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/data/data_config.h"

namespace strato::compress {

/// One row: a label and a package directory, optionally in bf16 and/or as the eager network (not
/// the fused inference graph the server runs; to show what fusing gains; under autocast in bf16).
struct Variant {
    std::string label;
    std::string dir;
    bool bf16 = false;
    bool eager = false;
};

/// Parses `LABEL=DIR`, `LABEL=DIR@bf16`, `LABEL=DIR@eager` or `LABEL=DIR@bf16-eager` (also `@fp32`, the default). An `@` followed by a
/// path (with a `/`) belongs to DIR. Errors name the spec and the expected form.
Result<Variant> parse_variant(const std::string& spec);

struct CompareOptions {
    data::DataConfig data;         // the test split to measure accuracy on
    int64_t threads = 0;           // intra-op threads for everything (0 = the cores)
    int64_t latency_runs = 200;    // timed batch-1 forward passes (after warm-up)
    int64_t throughput_runs = 20;  // timed forward passes at throughput_batch
    int64_t throughput_batch = 64;
    int64_t warmup_runs = 20;  // untimed batch-1 passes first (and a tenth, at least 2, at throughput_batch)
    int64_t rounds = 10;       // the passes of every row are spread over this many interleaved rounds
};

struct VariantReport {
    Variant variant;
    std::string arch;
    bool quantized = false;                         // an INT8 package
    nlohmann::json compression = nlohmann::json();  // metrics.json's "compression" (what made it), or null
    double accuracy = 0;                            // on the test split, in [0, 1]
    double loss = 0;
    int64_t samples = 0;
    int64_t size_bytes = 0;  // every file under the package directory
    int64_t files = 0;
    int64_t parameters = 0;
    int64_t nonzero_parameters = 0;
    double latency_ms_p50 = 0, latency_ms_p90 = 0;  // batch 1
    double throughput = 0;                          // images/s at throughput_batch (median pass)
    // Against the first row (1 / 0 on the first row itself):
    double accuracy_delta_pt = 0;   // (accuracy - first's) in percentage points
    double size_ratio = 1;          // first's size / this size: how many times smaller
    double latency_speedup = 1;     // first's p50 / this p50
    double throughput_speedup = 1;  // this throughput / first's
};

struct CompareReport {
    std::vector<VariantReport> rows;
    int threads = 0;
    int64_t latency_runs = 0, throughput_runs = 0, throughput_batch = 0;
    int64_t rounds = 0;  // interleaved timing rounds
    std::string dataset;  // what the accuracy was measured on, e.g. "fashion-mnist test (10000 samples)"
};

/// Measures every variant, in order (the first is the baseline of the ratios). A variant that
/// cannot be loaded or evaluated is an error naming its label and directory.
/// After signals::install_stop_handlers(), a SIGINT/SIGTERM stops it between evaluation batches
/// or timed passes with kCancelled ("interrupted by signal N while ...; accuracy measured so far:
/// ..."): a partial timing is never returned.
Result<CompareReport> compare(const std::vector<Variant>& variants, const CompareOptions& opts);

/// Sum of the sizes of the regular files at the top of `dir` (a package is flat: what sits in a
/// folder inside it is not the model's), and how many there are.
Result<std::pair<int64_t, int64_t>> directory_size(const std::string& dir);

nlohmann::json to_json(const CompareReport& r);
/// A console table (fixed-width columns, one line per variant, then a line on how it was measured).
std::string format_table(const CompareReport& r);
/// A GitHub-flavoured Markdown table with a line on how it was measured, for bench/RESULTS.md.
std::string format_markdown(const CompareReport& r);

}  // namespace strato::compress
