#pragma once
// The instance catalog the planner and the autoscaler price against: cloud instances (provider,
// region, type, GPUs, vCPUs, network, on-demand and spot USD/hour, provenance), a GPU table
// (memory, bandwidth, FP32/tensor/INT8 throughput, NVLink) and spot interruption rates. strato
// ships all three (data/cloud/*.csv, compiled into the binary); users may pass their own files
// in the same format, and price overrides (reserved/committed discounts, negotiated prices,
// CNY) in TOML:
//
//     currency = "CNY"            # USD (default) or CNY
//     usd_to_cny = 7.2            # exchange rate used for CNY output
//     discount = 0.10             # fraction off every on-demand price
//     [discounts]                 # per provider or instance type (the most specific wins)
//     aws = 0.30
//     "p4d.24xlarge" = 0.45
//     [prices."aws/us-east-1/p4d.24xlarge"]   # or just "p4d.24xlarge" for every region;
//     ondemand = 137.0                         # in `currency` (here CNY per hour)
//     spot = 54.0
//
//     Catalog cat = Catalog::builtin().value();
//     const Instance* p4d = cat.find("p4d.24xlarge", "us-east-1").value();
//
// A Catalog is immutable after loading; share it freely between threads.

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"

namespace strato::cloud {

inline constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

/// One accelerator model. Throughputs are dense (non-sparse) peak figures.
struct GpuSpec {
    std::string name;
    double memory_gb = 0;
    double memory_bw_gbs = 0;   // GB/s
    double fp32_tflops = 0;     // non-tensor FP32
    double tensor_tflops = 0;   // FP16 (and BF16 where `bf16`) tensor-core throughput
    bool bf16 = false;
    double int8_tops = 0;
    double tdp_w = 0;
    double nvlink_gbs = 0;      // total NVLink bandwidth per GPU (both directions); 0: PCIe only
    double compute_efficiency = 1;  // achieved fraction of peak relative to the A100/V100 fit (Hopper: 0.52)
    bool estimate = false;      // some figure is an estimate, not a published number
    std::string source;
};

/// One purchasable machine in one region.
struct Instance {
    std::string provider, region, type, accelerator;
    int gpus = 0;
    int vcpus = 0;
    double memory_gib = 0;
    double network_gbps = kUnknown;     // node-to-node bandwidth; unknown when the catalog is blank
    double ondemand_usd_h = kUnknown;   // after overrides and discounts
    double spot_usd_h = kUnknown;       // unknown: no spot market for this row
    double list_ondemand_usd_h = kUnknown;  // the catalog price before overrides and discounts
    double spot_interruptions_per_month = kUnknown;
    bool spot_rate_estimated = true;
    std::string source;
    int line = 0;                       // line in the instance CSV
    const GpuSpec* gpu = nullptr;       // nullptr when the accelerator is not a GPU strato models

    bool has_ondemand() const { return std::isfinite(ondemand_usd_h) && ondemand_usd_h > 0; }
    bool has_spot() const { return std::isfinite(spot_usd_h) && spot_usd_h > 0; }
    /// "aws/us-east-1/p4d.24xlarge"
    std::string key() const;
};

struct Currency {
    std::string code = "USD";
    double per_usd = 1.0;
    double convert(double usd) const { return usd * per_usd; }
};

class Catalog {
public:
    /// The catalog shipped with strato (data/cloud/*.csv as of the build).
    static Result<Catalog> builtin();
    /// Reads catalog files; an empty `gpus_csv`/`spot_csv` uses the shipped tables.
    static Result<Catalog> load(const std::string& instances_csv, const std::string& gpus_csv = {},
                                const std::string& spot_csv = {});
    /// Builds from in-memory CSV text (`*_source` names them in errors).
    static Result<Catalog> parse(std::string_view instances, std::string_view instances_source,
                                 std::string_view gpus, std::string_view gpus_source, std::string_view spot,
                                 std::string_view spot_source);

    /// Applies a TOML overrides file (see the header comment). Unknown instance types in
    /// [prices] / [discounts] are errors with a suggestion.
    Status apply_overrides_file(const std::string& path);
    Status apply_overrides(std::string_view toml_text, const std::string& source);

    const std::vector<Instance>& instances() const { return instances_; }
    const std::vector<GpuSpec>& gpus() const { return gpus_; }
    /// The GPU table's entry for `name` (an exact match first, then one in any case); nullptr if none.
    const GpuSpec* gpu(std::string_view name) const;
    const Currency& currency() const { return currency_; }
    /// Data problems found while loading (a row with spot above on-demand, a row with no price,
    /// an accelerator missing from the GPU table), one line each, for `strato plan --list`.
    const std::vector<std::string>& warnings() const { return warnings_; }

    /// The instance of `type` in `region` (any region when empty: the cheapest on-demand; a region
    /// in any case).
    /// Unknown names are errors with the closest known type.
    Result<const Instance*> find(std::string_view type, std::string_view region = {}) const;
    /// Error for an unknown type, with a "did you mean" hint.
    Status unknown_type(std::string_view type) const;

private:
    void link_gpus();
    std::vector<Instance> instances_;
    std::vector<GpuSpec> gpus_;
    Currency currency_;
    std::vector<std::string> warnings_;
};

/// Probability that one instance is interrupted during a month (the AWS Spot Advisor bucket)
/// converted to a constant hazard rate per hour: -ln(1 - p) / 730.
double hazard_per_hour(double interruptions_per_month);

namespace detail {
/// ASCII letters compared in any case ("a100" is "A100").
bool equals_any_case(std::string_view a, std::string_view b);
/// The CSV text compiled into the binary (generated from data/cloud/ at build time).
extern const char* const kInstancesCsv;
extern const char* const kGpusCsv;
extern const char* const kSpotCsv;
extern const char* const kWorkloadsCsv;
}  // namespace detail

}  // namespace strato::cloud
