#include "strato/dist/emit.h"

#include <fmt/format.h>

#include "strato/core/fs.h"

namespace strato::dist {

namespace {

Status check(const EmitOptions& o) {
    if (o.launch.command.empty()) return invalid_argument("launch --emit: no command for the workers");
    if (o.launch.nproc_per_node < 1) return invalid_argument("launch --emit: --nproc-per-node must be >= 1");
    if (o.job_name.empty() || o.job_name.find_first_of(" \t\n'\"") != std::string::npos)
        return invalid_argument("launch --emit: --job-name '{}' must be one word", o.job_name);
    return Status::ok();
}

std::string nnodes(const LaunchOptions& l) {
    return l.min_nodes == l.max_nodes ? std::to_string(l.max_nodes) : fmt::format("{}:{}", l.min_nodes, l.max_nodes);
}

/// A YAML double-quoted scalar.
std::string yq(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

}  // namespace

Result<std::string> emit_slurm(const EmitOptions& o) {
    STRATO_RETURN_IF_ERROR(check(o));
    const auto& l = o.launch;
    std::string cmd;
    for (const auto& a : l.command) cmd.append(" ").append(fs::shell_quote(a));
    std::string s = fmt::format(
        "#!/bin/bash\n"
        "# {name}: {nodes} node(s) x {nproc} process(es), written by `strato launch --emit slurm`.\n"
        "# One `strato launch` per node (srun, one task per node); they meet at a rendezvous on the first\n"
        "# node of the allocation and restart together (up to {restarts} times) when a worker fails.\n"
        "#SBATCH --job-name={name}\n"
        "#SBATCH --nodes={slurm_nodes}\n"
        "#SBATCH --ntasks-per-node=1\n"
        "#SBATCH --output={name}-%j.out\n",
        fmt::arg("name", o.job_name), fmt::arg("nodes", nnodes(l)), fmt::arg("nproc", l.nproc_per_node),
        fmt::arg("restarts", l.max_restarts),
        fmt::arg("slurm_nodes", l.min_nodes == l.max_nodes ? std::to_string(l.max_nodes)
                                                           : fmt::format("{}-{}", l.min_nodes, l.max_nodes)));
    if (o.cpus_per_node > 0) s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus_per_node);
    if (o.gpus_per_node > 0) s += fmt::format("#SBATCH --gpus-per-node={}\n", o.gpus_per_node);
    if (!o.partition.empty()) s += "#SBATCH --partition=" + o.partition + "\n";
    if (!o.time.empty()) s += "#SBATCH --time=" + o.time + "\n";
    s += fmt::format(
        "set -euo pipefail\n"
        "# The rendezvous host: the first node's address as Slurm knows it (never a silent localhost).\n"
        "command -v scontrol >/dev/null || {{ echo \"scontrol not found: cannot find the first node\" >&2; exit 1; }}\n"
        "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n"
        "head_addr=$(scontrol show node \"$head\" -o | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
        "port=${{STRATO_RDZV_PORT:-{port}}}\n"
        "srun --kill-on-bad-exit=1 {strato} launch --nnodes {nnodes} --nproc-per-node {nproc} --rdzv-backend c10d \\\n"
        "    --rdzv-endpoint \"${{head_addr:-$head}}:$port\" --rdzv-id \"$SLURM_JOB_ID\" --max-restarts {restarts} \\\n"
        "    --stop-timeout {stop:.0f}{no_python} --log-dir \"${{STRATO_LAUNCH_LOGS:-runs/launch}}/$SLURM_JOB_ID\" \\\n"
        "   {cmd}\n",
        fmt::arg("port", o.rdzv_port), fmt::arg("strato", fs::shell_quote(o.strato.empty() ? "strato" : o.strato)), fmt::arg("nnodes", nnodes(l)),
        fmt::arg("nproc", l.nproc_per_node), fmt::arg("restarts", l.max_restarts), fmt::arg("stop", l.stop_timeout_s),
        fmt::arg("cmd", cmd), fmt::arg("no_python", l.no_python ? " --no-python" : ""));
    return s;
}

Result<std::string> emit_pytorchjob(const EmitOptions& o) {
    STRATO_RETURN_IF_ERROR(check(o));
    const auto& l = o.launch;
    std::string command = fmt::format("[{}, \"launch\", \"--nproc-per-node\", \"{}\", \"--stop-timeout\", \"{:.0f}\"",
                                      yq(o.strato.empty() ? "strato" : o.strato),
                                      l.nproc_per_node, l.stop_timeout_s);
    if (l.no_python) command += ", \"--no-python\"";
    for (const auto& a : l.command) command += ", " + yq(a);
    command += "]";
    std::string resources;
    if (o.gpus_per_node > 0 || o.cpus_per_node > 0) {
        resources = "              resources:\n                limits:\n";
        if (o.gpus_per_node > 0) resources += fmt::format("                  nvidia.com/gpu: {}\n", o.gpus_per_node);
        if (o.cpus_per_node > 0) resources += fmt::format("                  cpu: {}\n", o.cpus_per_node);
    }
    return fmt::format(
        "# {name}: {min}..{max} node(s) x {nproc} process(es), written by `strato launch --emit kubernetes`.\n"
        "# A Kubeflow PyTorchJob with an elastic policy: the operator gives each pod PET_NNODES,\n"
        "# PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_MAX_RESTARTS, ..., which strato launch reads.\n"
        "apiVersion: kubeflow.org/v1\n"
        "kind: PyTorchJob\n"
        "metadata:\n"
        "  name: {name}\n"
        "spec:\n"
        "  nprocPerNode: \"{nproc}\"\n"
        "  runPolicy:\n"
        "    cleanPodPolicy: None\n"
        "    backoffLimit: {restarts}\n"
        "  elasticPolicy:\n"
        "    rdzvBackend: c10d\n"
        "    rdzvPort: {port}\n"
        "    minReplicas: {min}\n"
        "    maxReplicas: {max}\n"
        "    maxRestarts: {restarts}\n"
        "  pytorchReplicaSpecs:\n"
        "    Worker:\n"
        "      replicas: {max}\n"
        "      restartPolicy: OnFailure\n"
        "      template:\n"
        "        spec:\n"
        "          containers:\n"
        "            - name: pytorch\n"
        "              image: {image}\n"
        "              command: {command}\n"
        "{resources}",
        fmt::arg("name", o.job_name), fmt::arg("min", l.min_nodes), fmt::arg("max", l.max_nodes),
        fmt::arg("nproc", l.nproc_per_node), fmt::arg("restarts", l.max_restarts), fmt::arg("port", o.rdzv_port),
        fmt::arg("image", yq(o.image)), fmt::arg("command", command), fmt::arg("resources", resources));
}

}  // namespace strato::dist
