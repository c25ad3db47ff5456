#pragma once
// The throughput model: how fast a training job runs on a given GPU, node and node count.
//
// Per GPU, a roofline per kind of layer, summed: convolutions and matrix products run at the
// compute roof (3 x forward FLOPs per sample for forward + backward), normalisation, activation
// and pointwise layers at the memory-bandwidth roof (activations read and written through forward
// and backward). A training step alternates between the two, so their times add:
//     t_sample = 3 F / (P x e_compute) + k x A x b / BW
// with F forward FLOPs, P peak TFLOPS for the precision, A activation elements per sample, b bytes
// per element (2 with AMP, 4 in FP32/TF32), BW memory bandwidth. The efficiencies and traffic
// factors are fitted once to NVIDIA's published ResNet-50 training throughput (DeepLearningExamples:
// A100 80GB, A100 40GB and V100, AMP and FP32/TF32; all six within 8.2 %); docs/plan.md shows the
// fit and the error against Lambda's independent table.
//
// Across GPUs: data parallel with a ring all-reduce of the gradients per step, overlapped with
// the backward pass; what does not overlap adds to the step. Intra-node the ring runs on NVLink
// (or PCIe), inter-node on the instance's network. Measured scaling efficiencies (NVIDIA, Lambda,
// Horovod tables) cap the result per tier: efficiency = min(product of the caps, modelled
// efficiency), relative to one GPU with the same per-step overhead. The input pipeline caps the
// rate at vCPUs x decode rate.

#include <string>
#include <vector>

#include "strato/cloud/catalog.h"
#include "strato/core/status.h"

namespace strato::cloud {

enum class Precision { kFp32, kAmp };

/// What the job computes. Built from a preset (workloads.csv), a strato run directory, or flags.
struct Workload {
    std::string name;
    double fwd_flops = 0;           // forward FLOPs per sample
    double activations = 0;         // activation elements kept for backward, per sample
    double params = 0;              // trainable parameters
    double dataset_samples = 0;
    double decode_per_vcpu = 0;     // samples/s one vCPU can load and augment; 0: no input limit
    double input_bytes = 0;         // bytes per sample on storage
    int epochs = 1;
    int batch_per_gpu = 32;
    Precision precision = Precision::kAmp;
    std::string optimizer = "sgd";  // sgd (momentum) or adam: optimizer state per parameter
    std::string source;             // where the numbers come from
    /// Measured on this machine (strato run): samples/s and the machine it ran on, for the report.
    double measured_samples_per_s = 0;

    double total_samples() const { return dataset_samples * epochs; }
    double gradient_bytes() const { return params * 4; }  // DDP reduces FP32 gradients
    Status validate() const;
};

/// The built-in workload presets (data/cloud/workloads.csv).
Result<std::vector<Workload>> builtin_workloads();
Result<Workload> find_workload(std::string_view name);

/// Constants of the model, calibrated against published figures (docs/plan.md).
struct ModelConstants {
    double compute_efficiency_tensor = 0.30;
    double compute_efficiency_fp32 = 0.90;
    double traffic_factor_amp = 3.5;     // activation bytes moved per stored activation byte, AMP
    double traffic_factor_fp32 = 7.5;    // TF32/FP32
    double activation_memory_factor = 0.8;  // stored activations / leaf outputs (in-place ops share)
    double step_overhead_s = 0.002;      // per optimizer step: kernel launches, Python-free but not free
    double workspace_gb = 1.5;           // CUDA context, cuDNN workspace, allocator slack
    double pcie_gbs = 24;                // effective PCIe 4.0 x16 for GPU-GPU rings without NVLink
    double backward_overlap = 0.8;       // fraction of the backward pass all-reduce can hide behind
    double unknown_network_gbps = 25;    // when the catalog leaves the network blank
};

/// Throughput of one configuration and where its time goes.
struct Throughput {
    double samples_per_s = 0;      // whole job (all GPUs, all nodes)
    double per_gpu_samples_per_s = 0;  // one GPU alone at this batch, per-step overhead included
    double step_s = 0;             // one optimizer step on one GPU's batch, with exposed comm
    double compute_s = 0, memory_s = 0, allreduce_s = 0, exposed_comm_s = 0;
    double allreduce_network_s = 0;  // the part of allreduce_s between nodes (the rest is NVLink or PCIe)
    double scaling_efficiency = 1;  // samples_per_s / (gpus x per_gpu): 1 on one GPU
    double input_limit = 0;        // samples/s the vCPUs can feed (0: none)
    std::string bound;             // "compute", "memory bandwidth", "all-reduce", "input pipeline",
                                   // "step overhead" (the fixed per-step cost exceeds the batch's work)
    double memory_needed_gb = 0;   // per GPU
    bool fits = true;
};

class ThroughputModel {
public:
    explicit ThroughputModel(ModelConstants c = {}) : c_(c) {}
    /// Samples/s of one GPU of `gpu` on `w`, alone.
    double single_gpu(const Workload& w, const GpuSpec& gpu, double* compute_s = nullptr,
                      double* memory_s = nullptr) const;
    /// GPU memory one replica needs: weights, gradients, optimizer state, AMP copies, activations.
    double memory_needed_gb(const Workload& w) const;
    /// The job on `nodes` instances of `inst` (all GPUs data parallel).
    Throughput estimate(const Workload& w, const Instance& inst, int nodes) const;
    const ModelConstants& constants() const { return c_; }

private:
    ModelConstants c_;
};

/// Scaling-efficiency caps per interconnect tier (docs/plan.md §scaling): NVLink 0.90 (AMP-era
/// DGX measurements) / PCIe 0.85 within a node; across nodes by network bandwidth.
double intra_node_efficiency(const GpuSpec& gpu);
double inter_node_efficiency(double network_gbps);

}  // namespace strato::cloud
