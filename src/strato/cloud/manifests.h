#pragma once
// Kubernetes manifests for serving a model with `strato serve`: a Deployment (readiness on
// /v2/health/ready, liveness on /v2/health/live, SIGTERM drain), a Service, and a
// HorizontalPodAutoscaler (autoscaling/v2) on CPU utilisation or on a per-pod metric exported by
// strato (nv_inference_pending_request_count through a Prometheus adapter); or a KServe
// InferenceService speaking the v2 (Open Inference) protocol with strato as the container.

#include <string>

#include "strato/core/status.h"

namespace strato::cloud {

struct ManifestOptions {
    std::string name;                 // DNS-1123: lowercase letters, digits, '-'
    std::string image = "strato:latest";
    std::string model_dir = "/models";  // the model repository inside the image or volume
    std::string namespace_ = "default";
    int min_replicas = 1, max_replicas = 8;
    int target_cpu_percent = 0;       // scale on CPU utilisation; 0: not given (HPA: 70 %, KServe: concurrency)
    double pending_per_pod = 0;       // HPA on nv_inference_pending_request_count per pod
    int gpus = 0;                     // nvidia.com/gpu per pod
    std::string cpu = "2", memory = "4Gi";
    bool kserve = false;
};

// The ranges kubernetes_manifests checks; `strato autoscale manifests --help` shows them.
inline constexpr int kReplicasMax = 150000;  // Kubernetes' documented limit: 150,000 pods in a cluster
inline constexpr int kGpusPerPodMax = 64;
inline constexpr double kPendingPerPodMax = 1e6;

/// YAML documents separated by "---". Invalid names and ranges are errors.
Result<std::string> kubernetes_manifests(const ManifestOptions& o);

}  // namespace strato::cloud
