#include "strato/cloud/manifests.h"

#include <fmt/format.h>

namespace strato::cloud {

namespace {

bool dns_label(const std::string& s) {
    if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    return true;
}

std::string resources(const ManifestOptions& o, int indent) {
    std::string pad(indent, ' ');
    std::string gpu = o.gpus > 0 ? fmt::format("\n{}    nvidia.com/gpu: {}", pad, o.gpus) : "";
    return fmt::format("{0}resources:\n{0}  requests:\n{0}    cpu: \"{1}\"\n{0}    memory: {2}\n{0}  limits:\n"
                       "{0}    memory: {2}{3}\n",
                       pad, o.cpu, o.memory, gpu);
}

std::string container(const ManifestOptions& o, int indent) {
    std::string pad(indent, ' ');
    return fmt::format(
        "{0}- name: strato\n"
        "{0}  image: {1}\n"
        "{0}  args: [\"serve\", \"--model-repository\", \"{2}\", \"--http-port\", \"8000\", \"--metrics-port\", "
        "\"8002\", \"--http-address\", \"0.0.0.0\"]\n"
        "{0}  ports:\n"
        "{0}  - {{name: http, containerPort: 8000}}\n"
        "{0}  - {{name: metrics, containerPort: 8002}}\n"
        "{0}  readinessProbe:\n"
        "{0}    httpGet: {{path: /v2/health/ready, port: http}}\n"
        "{0}    periodSeconds: 2\n"
        "{0}  livenessProbe:\n"
        "{0}    httpGet: {{path: /v2/health/live, port: http}}\n"
        "{0}    periodSeconds: 10\n"
        "{3}",
        pad, o.image, o.model_dir, resources(o, indent + 2));
}

}  // namespace

Result<std::string> kubernetes_manifests(const ManifestOptions& o) {
    if (!dns_label(o.name))
        return invalid_argument("name '{}' is not a valid Kubernetes name (lowercase letters, digits and '-', at most 63)",
                                o.name);
    if (!dns_label(o.namespace_)) return invalid_argument("namespace '{}' is not a valid Kubernetes name", o.namespace_);
    if (o.min_replicas < 0 || o.max_replicas < 1 || o.min_replicas > o.max_replicas)
        return invalid_argument("replicas: need 0 <= min ({}) <= max ({}) and max >= 1", o.min_replicas, o.max_replicas);
    if (o.target_cpu_percent < 1 || o.target_cpu_percent > 100)
        return invalid_argument("--target-cpu must be a percent in [1, 100]");
    if (o.kserve) {
        return fmt::format(
            "apiVersion: serving.kserve.io/v1beta1\n"
            "kind: InferenceService\n"
            "metadata:\n"
            "  name: {0}\n"
            "  namespace: {1}\n"
            "spec:\n"
            "  predictor:\n"
            "    minReplicas: {2}\n"
            "    maxReplicas: {3}\n"
            "    scaleMetric: concurrency\n"
            "    scaleTarget: {4}\n"
            "    containers:\n"
            "{5}"
            "      env:\n"
            "      - {{name: PROTOCOL, value: v2}}\n",
            o.name, o.namespace_, o.min_replicas, o.max_replicas,
            o.pending_per_pod > 0 ? static_cast<int>(o.pending_per_pod) : 4, container(o, 4));
    }
    std::string metric =
        o.pending_per_pod > 0
            ? fmt::format("  - type: Pods\n    pods:\n      metric:\n        name: nv_inference_pending_request_count\n"
                          "      target:\n        type: AverageValue\n        averageValue: \"{:g}\"\n",
                          o.pending_per_pod)
            : fmt::format("  - type: Resource\n    resource:\n      name: cpu\n      target:\n        type: Utilization\n"
                          "        averageUtilization: {}\n",
                          o.target_cpu_percent);
    return fmt::format(
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        "  name: {0}\n"
        "  namespace: {1}\n"
        "  labels: {{app: {0}}}\n"
        "spec:\n"
        "  replicas: {2}\n"
        "  selector:\n"
        "    matchLabels: {{app: {0}}}\n"
        "  template:\n"
        "    metadata:\n"
        "      labels: {{app: {0}}}\n"
        "      annotations:\n"
        "        prometheus.io/scrape: \"true\"\n"
        "        prometheus.io/port: \"8002\"\n"
        "    spec:\n"
        "      terminationGracePeriodSeconds: 30\n"
        "      containers:\n"
        "{4}"
        "---\n"
        "apiVersion: v1\n"
        "kind: Service\n"
        "metadata:\n"
        "  name: {0}\n"
        "  namespace: {1}\n"
        "spec:\n"
        "  selector: {{app: {0}}}\n"
        "  ports:\n"
        "  - {{name: http, port: 8000, targetPort: http}}\n"
        "  - {{name: metrics, port: 8002, targetPort: metrics}}\n"
        "---\n"
        "apiVersion: autoscaling/v2\n"
        "kind: HorizontalPodAutoscaler\n"
        "metadata:\n"
        "  name: {0}\n"
        "  namespace: {1}\n"
        "spec:\n"
        "  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {0}}}\n"
        "  minReplicas: {2}\n"
        "  maxReplicas: {3}\n"
        "  metrics:\n"
        "{5}"
        "  behavior:\n"
        "    scaleDown:\n"
        "      stabilizationWindowSeconds: 300\n",
        o.name, o.namespace_, std::max(o.min_replicas, 1), o.max_replicas, container(o, 6), metric);
}

}  // namespace strato::cloud
