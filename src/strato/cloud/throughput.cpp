#include "strato/cloud/throughput.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "strato/core/csv_table.h"

namespace strato::cloud {

Status Workload::validate() const {
    auto positive = [&](double v, std::string_view what) -> Status {
        if (!(v > 0)) return invalid_argument("workload '{}': {} must be > 0, got {}", name, what, v);
        return Status::ok();
    };
    STRATO_RETURN_IF_ERROR(positive(fwd_flops, "forward FLOPs per sample"));
    STRATO_RETURN_IF_ERROR(positive(activations, "activations per sample"));
    STRATO_RETURN_IF_ERROR(positive(params, "parameters"));
    STRATO_RETURN_IF_ERROR(positive(dataset_samples, "dataset size"));
    STRATO_RETURN_IF_ERROR(positive(epochs, "epochs"));
    STRATO_RETURN_IF_ERROR(positive(batch_per_gpu, "batch per GPU"));
    if (optimizer != "sgd" && optimizer != "adam")
        return invalid_argument("workload '{}': optimizer must be sgd or adam, got '{}'", name, optimizer);
    return Status::ok();
}

Result<std::vector<Workload>> builtin_workloads() {
    STRATO_ASSIGN_OR_RETURN(CsvTable t, CsvTable::parse(detail::kWorkloadsCsv, "data/cloud/workloads.csv"));
    std::vector<Workload> out;
    for (size_t r = 0; r < t.rows(); ++r) {
        auto num = [&](std::string_view col) {
            return parse_number(t.at(r, col), 0, fmt::format("{}:{} {}", t.source(), t.line(r), col));
        };
        Workload w;
        w.name = t.at(r, "name");
        STRATO_ASSIGN_OR_RETURN(double gflops, num("fwd_gflops"));
        STRATO_ASSIGN_OR_RETURN(double acts_m, num("activations_m"));
        STRATO_ASSIGN_OR_RETURN(double params_m, num("params_m"));
        STRATO_ASSIGN_OR_RETURN(w.dataset_samples, num("dataset_samples"));
        STRATO_ASSIGN_OR_RETURN(double input_kb, num("input_kb"));
        STRATO_ASSIGN_OR_RETURN(w.decode_per_vcpu, num("decode_per_vcpu"));
        STRATO_ASSIGN_OR_RETURN(double epochs, num("epochs"));
        STRATO_ASSIGN_OR_RETURN(double batch, num("batch_per_gpu"));
        w.fwd_flops = gflops * 1e9;
        w.activations = acts_m * 1e6;
        w.params = params_m * 1e6;
        w.input_bytes = input_kb * 1e3;
        w.epochs = static_cast<int>(epochs);
        w.batch_per_gpu = static_cast<int>(batch);
        w.optimizer = t.at(r, "optimizer");  // (GPT-2 was planned with SGD's state: its memory understated)
        w.source = t.at(r, "source");
        STRATO_RETURN_IF_ERROR(w.validate());
        out.push_back(std::move(w));
    }
    return out;
}

Result<Workload> find_workload(std::string_view name) {
    STRATO_ASSIGN_OR_RETURN(std::vector<Workload> all, builtin_workloads());
    std::vector<std::string> names;
    for (auto& w : all) {
        if (w.name == name) return w;
        names.push_back(w.name);
    }
    for (auto& w : all)  // then in any case ("ResNet50-ImageNet"), as --gpu and --provider match
        if (detail::equals_any_case(w.name, name)) return w;
    return not_found("unknown workload '{}' (presets: {})", name, fmt::join(names, ", "));
}

double intra_node_efficiency(const GpuSpec& gpu) { return gpu.nvlink_gbs > 0 ? 0.90 : 0.85; }

double inter_node_efficiency(double network_gbps) {
    if (network_gbps <= 10) return 0.50;
    if (network_gbps < 100) return 0.75;
    if (network_gbps < 400) return 0.80;
    return 0.90;
}

double ThroughputModel::single_gpu(const Workload& w, const GpuSpec& gpu, double* compute_s, double* memory_s) const {
    bool amp = w.precision == Precision::kAmp;
    // FP32 math runs as TF32 on tensor cores from Ampere on (the GPUs that have BF16); before
    // that, on the FP32 units.
    double peak = amp ? gpu.tensor_tflops : gpu.bf16 ? gpu.tensor_tflops / 2 : gpu.fp32_tflops;
    double eff = ((amp || gpu.bf16) ? c_.compute_efficiency_tensor : c_.compute_efficiency_fp32) * gpu.compute_efficiency;
    double bytes = amp ? 2.0 : 4.0;
    double k = amp ? c_.traffic_factor_amp : c_.traffic_factor_fp32;
    double tc = 3 * w.fwd_flops / (peak * 1e12 * eff);
    double tm = k * w.activations * bytes / (gpu.memory_bw_gbs * 1e9);
    if (compute_s) *compute_s = tc;
    if (memory_s) *memory_s = tm;
    return 1.0 / (tc + tm);
}

double ThroughputModel::memory_needed_gb(const Workload& w) const {
    bool amp = w.precision == Precision::kAmp;
    double per_param = 4 + 4 + (w.optimizer == "adam" ? 8 : 4) + (amp ? 2 : 0);
    double acts = w.activations * (amp ? 2 : 4) * w.batch_per_gpu * c_.activation_memory_factor;
    return (w.params * per_param + acts) / 1e9 + c_.workspace_gb;
}

Throughput ThroughputModel::estimate(const Workload& w, const Instance& inst, int nodes) const {
    Throughput t;
    const GpuSpec& gpu = *inst.gpu;
    const int g = std::max(inst.gpus, 1);
    // In doubles: a catalog may list up to 1e6 accelerators, times nodes times the batch.
    const double total = static_cast<double>(g) * nodes;
    double tc = 0, tm = 0;
    const double r_roof = single_gpu(w, gpu, &tc, &tm);
    t.compute_s = tc * w.batch_per_gpu;
    t.memory_s = tm * w.batch_per_gpu;
    // One GPU alone runs a step of its batch plus the fixed per-step overhead; scaling is
    // measured against that rate, so one GPU scales at exactly 1.
    const double step_compute = w.batch_per_gpu / r_roof + c_.step_overhead_s;
    const double r1 = w.batch_per_gpu / step_compute;
    t.per_gpu_samples_per_s = r1;
    double backward = step_compute * 2.0 / 3.0;

    // Hierarchical ring all-reduce: within the node over NVLink (one direction of the link) or
    // PCIe, then across nodes over the network, which all GPUs of a node share.
    double grad = w.gradient_bytes();
    double allreduce = 0;
    if (g > 1) {
        double bw = gpu.nvlink_gbs > 0 ? gpu.nvlink_gbs / 2 : c_.pcie_gbs;
        allreduce += 2.0 * (g - 1) / g * grad / (bw * 1e9);
    }
    double net = std::isfinite(inst.network_gbps) && inst.network_gbps > 0 ? inst.network_gbps : c_.unknown_network_gbps;
    if (nodes > 1) t.allreduce_network_s = 2.0 * (nodes - 1) / nodes * grad / (net / 8 * 1e9);
    allreduce += t.allreduce_network_s;
    t.allreduce_s = allreduce;
    t.exposed_comm_s = std::max(0.0, allreduce - c_.backward_overlap * backward);
    t.step_s = step_compute + t.exposed_comm_s;

    // The modelled efficiency (the all-reduce that backward does not hide), capped by the
    // measured efficiencies of each tier: the caps bound what the model may claim; they are not
    // a second charge for the same communication.
    double cap = 1;
    if (g > 1) cap *= intra_node_efficiency(gpu);
    if (nodes > 1) cap *= inter_node_efficiency(net);
    const double eff = std::min(cap, step_compute / t.step_s);
    double rate = total * r1 * eff;
    t.input_limit = w.decode_per_vcpu > 0 ? w.decode_per_vcpu * static_cast<double>(inst.vcpus) * nodes : 0;
    if (t.input_limit > 0 && t.input_limit < rate) {
        rate = t.input_limit;
        t.bound = "input pipeline";
    } else if (t.exposed_comm_s > std::max(t.compute_s, t.memory_s)) {
        t.bound = "all-reduce";
    } else if (c_.step_overhead_s > std::max(t.compute_s, t.memory_s)) {
        t.bound = "step overhead";  // a batch too small to keep the GPU busy between launches
    } else {
        t.bound = tc >= tm ? "compute" : "memory bandwidth";
    }
    t.samples_per_s = rate;
    t.scaling_efficiency = rate / (total * r1);
    t.memory_needed_gb = memory_needed_gb(w);
    t.fits = t.memory_needed_gb <= gpu.memory_gb;
    return t;
}

}  // namespace strato::cloud
