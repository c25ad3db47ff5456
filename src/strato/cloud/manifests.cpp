#include "strato/cloud/manifests.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <regex>
#include <string_view>

#include "strato/core/json.h"

namespace strato::cloud {

namespace {

// What KServe puts between the InferenceService's name and its namespace in the predictor's host.
constexpr std::string_view kKServeHostInfix = "-predictor-";

bool dns_label(const std::string& s) {
    if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    return true;
}

// Every string goes out double-quoted: a JSON string is a YAML double-quoted scalar, so a name
// like `123`, `yes` or `null` stays a string (YAML 1.1 reads them as int, bool, null) and a value
// with `: `, `#`, quotes or a newline cannot end the scalar or add keys of its own.
std::string q(const std::string& s) { return json_text(s); }

// A Kubernetes resource quantity: 2, 500m, 1.5, 4Gi, 512Mi, 1e3.
bool quantity(const std::string& s) {
    static const std::regex kQuantity(R"(^[0-9]+(\.[0-9]+)?([eE][0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$)");
    return std::regex_match(s, kQuantity);
}

// The value of a quantity that `quantity` accepted, in its base unit (bytes for memory).
double quantity_value(const std::string& s) {
    size_t end = s.find_first_not_of("0123456789.");
    const double number = std::strtod(s.substr(0, end).c_str(), nullptr);  // (no throw: 400 digits are inf)
    const std::string suffix = end == std::string::npos ? "" : s.substr(end);
    if (suffix.empty()) return number;
    static const std::pair<const char*, double> kSuffixes[] = {
        {"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
        {"Ki", 0x1p10}, {"Mi", 0x1p20}, {"Gi", 0x1p30}, {"Ti", 0x1p40}, {"Pi", 0x1p50}, {"Ei", 0x1p60}};
    for (const auto& [name, scale] : kSuffixes)
        if (suffix == name) return number * scale;
    // 1e3 (`quantity` admits no other suffix)
    return number * std::pow(10.0, std::strtod(suffix.c_str() + 1, nullptr));
}

// An image reference has no blanks or control characters (registry/name:tag@digest).
bool image_reference(const std::string& s) {
    if (s.empty() || s.size() > 4096) return false;
    for (unsigned char c : s)
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\') return false;
    return true;
}

std::string resources(const ManifestOptions& o, int indent) {
    std::string pad(indent, ' ');
    std::string gpu = o.gpus > 0 ? fmt::format("\n{}    nvidia.com/gpu: {}", pad, o.gpus) : "";
    return fmt::format("{0}resources:\n{0}  requests:\n{0}    cpu: {1}\n{0}    memory: {2}\n{0}  limits:\n"
                       "{0}    memory: {2}{3}\n",
                       pad, q(o.cpu), q(o.memory), gpu);
}

// KServe's default (Serverless) mode runs the predictor as a Knative service, which allows one
// container port, named http1 or h2c, and probes on that port only (Knative's validation refuses
// anything else): the metrics port is announced by annotation instead, and the probes name no port.
std::string container(const ManifestOptions& o, int indent) {
    std::string pad(indent, ' ');
    const std::string ports = o.kserve ? fmt::format("{0}  - {{name: http1, containerPort: 8000}}\n", pad)
                                       : fmt::format("{0}  - {{name: http, containerPort: 8000}}\n"
                                                     "{0}  - {{name: metrics, containerPort: 8002}}\n",
                                                     pad);
    const char* port = o.kserve ? "" : ", port: http";
    // KServe's defaulting webhook renames a custom predictor's one container to kserve-container
    // (the name its storage, agent and CA-bundle injection look for): named so here, what is
    // applied is what runs, and `kubectl diff` or a GitOps tool shows no drift.
    return fmt::format(
        "{0}- name: {6}\n"
        "{0}  image: {1}\n"
        "{0}  args: [\"serve\", \"--model-repository\", {2}, \"--http-port\", \"8000\", \"--metrics-port\", "
        "\"8002\", \"--http-address\", \"0.0.0.0\"]\n"
        "{0}  ports:\n"
        "{4}"
        "{0}  readinessProbe:\n"
        "{0}    httpGet: {{path: /v2/health/ready{5}}}\n"
        "{0}    periodSeconds: 2\n"
        "{0}  livenessProbe:\n"
        "{0}    httpGet: {{path: /v2/health/live{5}}}\n"
        "{0}    periodSeconds: 10\n"
        "{3}",
        pad, q(o.image), q(o.model_dir), resources(o, indent + 2), ports, port,
        o.kserve ? "kserve-container" : "strato");
}

}  // namespace

Result<std::string> kubernetes_manifests(const ManifestOptions& o) {
    // The Service's name is a DNS-1035 label: it starts with a letter.
    if (!dns_label(o.name) || !(o.name[0] >= 'a' && o.name[0] <= 'z'))
        return invalid_argument("name '{}' is not a valid Kubernetes name (a lowercase letter, then lowercase letters, "
                                "digits and '-', at most 63)",
                                o.name);
    if (!dns_label(o.namespace_)) return invalid_argument("namespace '{}' is not a valid Kubernetes name", o.namespace_);
    if (!image_reference(o.image))
        return invalid_argument("--image '{}' is not an image reference (registry/name:tag, no blanks or quotes)", o.image);
    if (o.model_dir.empty() || o.model_dir[0] != '/')
        return invalid_argument("--model-repository '{}' must be an absolute path inside the container", o.model_dir);
    // YAML refuses some characters even quoted (DEL, U+FFFE) and reads others as line breaks
    // (NEL): a path of printable ASCII means in the manifest what it meant here.
    for (char c : o.model_dir)
        if (c < 0x20 || c > 0x7e)
            return invalid_argument("--model-repository '{}': only printable ASCII characters, please (a path inside "
                                    "the container)",
                                    o.model_dir);
    if (!quantity(o.cpu)) return invalid_argument("--cpu '{}' is not a Kubernetes quantity (2, 500m, 1.5)", o.cpu);
    if (!quantity(o.memory)) return invalid_argument("--memory '{}' is not a Kubernetes quantity (4Gi, 512Mi)", o.memory);
    // Memory is in bytes: Docker's `-m 512m` is 0.512 bytes here ("m" is milli), and a bare `4`
    // four bytes; either limit kills the container before it starts.
    if (quantity_value(o.memory) < 0x1p20)
        return invalid_argument("--memory '{}' is {:g} bytes; a pod needs at least 1Mi{}", o.memory,
                                quantity_value(o.memory),
                                o.memory.back() == 'm' ? fmt::format(" (\"m\" is milli: for megabytes write '{}Mi')",
                                                                     o.memory.substr(0, o.memory.size() - 1))
                                                       : " (give a unit: 4Gi, 512Mi)");
    // CPU utilisation is usage over the request: with a request of 0 the HPA has no utilisation
    // ("missing request for cpu") and never scales.
    const bool on_cpu = o.kserve ? o.target_cpu_percent > 0 : !(o.pending_per_pod > 0);
    if (on_cpu && o.cpu.find_first_of("123456789") >= o.cpu.find_first_not_of("0123456789."))
        return invalid_argument("--cpu {}: scaling on CPU utilisation needs a CPU request above 0 (utilisation is usage "
                                "over the request)",
                                o.cpu);
    if (o.gpus < 0 || o.gpus > kGpusPerPodMax)
        return invalid_argument("--gpus {} must be 0..{}", o.gpus, kGpusPerPodMax);
    if (o.min_replicas < 0 || o.max_replicas < 1 || o.min_replicas > o.max_replicas || o.max_replicas > kReplicasMax)
        return invalid_argument(
            "--min-replicas {}, --max-replicas {}: need 0 <= min ({}) <= max ({}) and 1 <= max <= {}", o.min_replicas,
            o.max_replicas, o.min_replicas, o.max_replicas, kReplicasMax);
    if (o.min_replicas == 0 && !o.kserve)
        return invalid_argument("--min-replicas 0 needs --kserve (a HorizontalPodAutoscaler keeps at least one replica)");
    if (o.target_cpu_percent != 0 && (o.target_cpu_percent < 1 || o.target_cpu_percent > 100))
        return invalid_argument("--target-cpu {} must be a percent in [1, 100]", o.target_cpu_percent);
    if (!(o.pending_per_pod >= 0 && o.pending_per_pod <= kPendingPerPodMax))  // (NaN fails too)
        return invalid_argument("--pending-per-pod {} must be between 0 (scale on CPU) and {:g}", o.pending_per_pod,
                                kPendingPerPodMax);
    if (o.kserve && o.pending_per_pod > 0 && o.pending_per_pod != std::floor(o.pending_per_pod))
        return invalid_argument("--pending-per-pod {} with --kserve: KServe's scaleTarget is a whole number of requests",
                                o.pending_per_pod);
    // One scale metric: the one not written was silently ignored.
    if (o.target_cpu_percent > 0 && o.pending_per_pod > 0)
        return invalid_argument("--target-cpu {} and --pending-per-pod {}: give one scale metric, not both",
                                o.target_cpu_percent, o.pending_per_pod);
    if (o.kserve) {
        // KServe names the predictor `NAME-predictor` and gives it the host
        // `NAME-predictor-NAMESPACE.DOMAIN` (its ingress config's default domainTemplate,
        // "{{ .Name }}-{{ .Namespace }}.{{ .IngressDomain }}"): that first label is a DNS label of
        // at most 63 characters, so a name that is valid alone is applied and then never becomes
        // ready ("invalid domain name ... must be no more than 63 characters" in the controller's
        // log). Refused here, with the length that fits.
        const size_t host_label = o.name.size() + kKServeHostInfix.size() + o.namespace_.size();
        if (host_label > 63) {
            const int room = 63 - static_cast<int>(kKServeHostInfix.size() + o.namespace_.size());
            return invalid_argument(
                "--name '{}' with --kserve in namespace '{}': KServe's predictor host label '{}{}{}' would be {} "
                "characters, more than DNS's 63 (KServe adds '{}' and the namespace); {}",
                o.name, o.namespace_, o.name, kKServeHostInfix, o.namespace_, host_label, kKServeHostInfix,
                room >= 1 ? fmt::format("in this namespace the name can have at most {} characters", room)
                          : fmt::format("this namespace leaves no room for a name: use one of at most {} characters",
                                        63 - 1 - static_cast<int>(kKServeHostInfix.size())));
        }
        // Scaling on CPU: Knative's HPA class (its KPA scales on concurrency or rps only), which
        // keeps at least one replica. (KServe's Standard mode runs its own HPA and ignores the class.)
        const bool cpu = o.target_cpu_percent > 0;
        if (cpu && o.min_replicas == 0)
            return invalid_argument("--min-replicas 0 with --target-cpu: CPU scaling runs on a HorizontalPodAutoscaler, "
                                    "which keeps at least one replica (scale to zero scales on concurrency)");
        return fmt::format(
            "apiVersion: serving.kserve.io/v1beta1\n"
            "kind: InferenceService\n"
            "metadata:\n"
            "  name: {0}\n"
            "  namespace: {1}\n"
            "  annotations:\n"
            "    serving.kserve.io/enable-prometheus-scraping: \"true\"\n"
            "    prometheus.kserve.io/port: \"8002\"\n"
            "    prometheus.kserve.io/path: /metrics\n"
            "{6}"
            "spec:\n"
            "  predictor:\n"
            "    minReplicas: {2}\n"
            "    maxReplicas: {3}\n"
            "    scaleMetric: {7}\n"
            "    scaleTarget: {4}\n"
            "    containers:\n"
            "{5}"
            "      env:\n"
            "      - {{name: PROTOCOL, value: v2}}\n",
            q(o.name), q(o.namespace_), o.min_replicas, o.max_replicas,
            cpu                    ? static_cast<int64_t>(o.target_cpu_percent)
            : o.pending_per_pod > 0 ? static_cast<int64_t>(o.pending_per_pod)
                                    : 4,
            container(o, 4), cpu ? "    autoscaling.knative.dev/class: hpa.autoscaling.knative.dev\n" : "",
            cpu ? "cpu" : "concurrency");
    }
    std::string metric =
        o.pending_per_pod > 0
            ? fmt::format("  - type: Pods\n    pods:\n      metric:\n        name: nv_inference_pending_request_count\n"
                          "      target:\n        type: AverageValue\n        averageValue: \"{}\"\n",
                          o.pending_per_pod)  // (every digit: {:g} rounded 123456.7 to 123457)
            : fmt::format("  - type: Resource\n    resource:\n      name: cpu\n      target:\n        type: Utilization\n"
                          "        averageUtilization: {}\n",
                          o.target_cpu_percent > 0 ? o.target_cpu_percent : 70);
    // The Deployment has no `replicas`: the HPA owns the count, and Kubernetes' HPA page says to
    // leave it out, since every `kubectl apply` of a manifest that has it resets the running
    // Deployment to that number (a scaled-up service dropped to min_replicas until the HPA's next
    // sync). Created without it, the Deployment starts at 1 and the HPA raises it to minReplicas.
    return fmt::format(
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        "  name: {0}\n"
        "  namespace: {1}\n"
        "  labels: {{app: {0}}}\n"
        "spec:\n"
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
        q(o.name), q(o.namespace_), o.min_replicas, o.max_replicas, container(o, 6), metric);
}

}  // namespace strato::cloud
