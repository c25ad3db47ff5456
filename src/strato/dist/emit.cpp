#include "strato/dist/emit.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/parse.h"

namespace strato::dist {

namespace {

/// A YAML double-quoted scalar (control characters escaped: a raw newline would fold into a blank).
/// Characters YAML takes no raw -- C1 controls U+0080..U+009F, U+FFFE, U+FFFF: a parser refused
/// the whole manifest -- are escaped too; a byte that is not UTF-8 shows as \xNN (for messages:
/// a manifest refuses such values first, see not_utf8()).
std::string yq(const std::string& s) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size();) {
        const char c = s[i];
        const auto u = static_cast<unsigned char>(c);
        size_t n = 1;
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20 || u == 0x7f) {
            out += fmt::format("\\x{:02x}", u);
        } else if (u < 0x80) {
            out += c;
        } else if (n = utf8_length_at(s, i); n == 0) {
            n = 1;
            out += fmt::format("\\x{:02x}", u);
        } else {
            const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
            const uint32_t cp = n == 2   ? ((b(0) & 0x1F) << 6) | (b(1) & 0x3F)
                                : n == 3 ? ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F)
                                         : 0x10000;
            if (cp <= 0x9f || cp == 0xfffe || cp == 0xffff)
                out += fmt::format("\\u{:04x}", cp);
            else
                out.append(s, i, n);
        }
        i += n;
    }
    return out + "\"";
}

/// The first of `values` that is not UTF-8 (a YAML manifest cannot carry it), or nullptr.
const std::string* not_utf8(const std::vector<const std::string*>& values) {
    for (const std::string* v : values)
        if (!is_utf8(*v)) return v;
    return nullptr;
}

/// An entry of a container's command: Kubernetes expands `$(VAR)` in it and reads `$$` as `$`
/// (`sh -c 'echo $$'` ran `echo $`), so every `$` is doubled to come through as written.
std::string kq(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '$') out += '$';
        out += c;
    }
    return yq(out);
}

Status check(const EmitOptions& o) {
    const auto& l = o.launch;
    if (l.command.empty()) return invalid_argument("launch --emit: no command for the workers");
    if (l.nproc_per_node < 1) return invalid_argument("launch --emit: --nproc-per-node must be >= 1");
    if (!o.nproc_per_node.empty() && o.nproc_per_node != "cpu" && o.nproc_per_node != "auto" &&
        o.nproc_per_node != "gpu")
        return invalid_argument("launch --emit: --nproc-per-node '{}': expected a number, gpu, cpu or auto",
                                o.nproc_per_node);
    STRATO_RETURN_IF_ERROR(check_timing(l));
    if (o.rdzv_port < 1 || o.rdzv_port > 65535)
        return invalid_argument("launch --emit: --rdzv-port {} is not a TCP port (expected 1..65535)", o.rdzv_port);
    // Values written into #SBATCH lines and Kubernetes names: a newline would end the #SBATCH
    // block and run the rest as a command (found by review).
    const struct {
        const char* flag;
        const std::string& value;
        bool optional;
    } words[] = {{"--job-name", o.job_name, false},
                 {"--image", o.image, false},
                 {"--partition", o.partition, true},
                 {"--time", o.time, true}};
    for (const auto& w : words) {
        if (w.optional && w.value.empty()) continue;
        if (std::string why = why_not_script_text(w.value, /*one_word=*/true); !why.empty())
            return invalid_argument("launch --emit: {} {} {}", w.flag, yq(w.value), why);
    }
    return Status::ok();
}

/// The launcher flags changed from their defaults that every node's launcher gets as well.
std::vector<std::string> passed_flags(const LaunchOptions& l) {
    const LaunchOptions d;
    std::vector<std::string> out;
    auto seconds = [&](const char* flag, double value, double fallback) {
        if (value != fallback) out.insert(out.end(), {flag, fmt::format("{}", value)});  // (shortest exact form)
    };
    seconds("--join-timeout", l.join_timeout_s, d.join_timeout_s);
    seconds("--last-call", l.last_call_s, d.last_call_s);
    seconds("--monitor-interval", l.monitor_interval_s, d.monitor_interval_s);
    if (!l.tee) out.emplace_back("--quiet-workers");
    if (l.no_python) out.emplace_back("--no-python");
    return out;
}

bool rdzv_id_given(const LaunchOptions& l) { return !l.rdzv_id.empty() && l.rdzv_id != LaunchOptions{}.rdzv_id; }

std::string nproc_text(const EmitOptions& o) {
    return o.nproc_per_node.empty() ? std::to_string(o.launch.nproc_per_node) : o.nproc_per_node;
}

std::string nnodes(const LaunchOptions& l) {
    return l.min_nodes == l.max_nodes ? std::to_string(l.max_nodes) : fmt::format("{}:{}", l.min_nodes, l.max_nodes);
}

/// " --" before a worker command that starts with '-' (given after `--`): each node's launcher
/// would take it for one of its own options.
std::string dashes(const LaunchOptions& l) {
    return !l.command.empty() && !l.command.front().empty() && l.command.front()[0] == '-' ? " --" : "";
}

}  // namespace

Result<std::string> emit_slurm(const EmitOptions& o) {
    STRATO_RETURN_IF_ERROR(check(o));
    const auto& l = o.launch;
    std::string cmd = dashes(l);
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
        fmt::arg("name", o.job_name), fmt::arg("nodes", nnodes(l)), fmt::arg("nproc", nproc_text(o)),
        fmt::arg("restarts", l.max_restarts),
        fmt::arg("slurm_nodes", l.min_nodes == l.max_nodes ? std::to_string(l.max_nodes)
                                                           : fmt::format("{}-{}", l.min_nodes, l.max_nodes)));
    if (o.cpus_per_node > 0) s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus_per_node);
    if (o.gpus_per_node > 0) s += fmt::format("#SBATCH --gpus-per-node={}\n", o.gpus_per_node);
    if (!o.partition.empty()) s += "#SBATCH --partition=" + o.partition + "\n";
    if (!o.time.empty()) s += "#SBATCH --time=" + o.time + "\n";
    // The log directory on the cluster: --log-dir (default runs/launch, relative to the directory
    // sbatch was called from), STRATO_LAUNCH_LOGS at submission instead, then the job id.
    const std::string log_base = fs::shell_quote(l.log_dir.empty() ? "runs/launch" : l.log_dir);
    std::string flags = fmt::format(" --stop-timeout {}", l.stop_timeout_s);  // exactly: 0 means SIGKILL at once
    for (const auto& f : passed_flags(l)) flags += " " + f;  // (flags and numbers: nothing to quote)
    s += fmt::format(
        "set -euo pipefail\n"
        "# The rendezvous host: the first node's address as Slurm knows it (never a silent localhost).\n"
        "command -v scontrol >/dev/null || {{ echo \"scontrol not found: cannot find the first node\" >&2; exit 1; }}\n"
        "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n"
        "head_addr=$(scontrol show node \"$head\" -o | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
        "port=${{STRATO_RDZV_PORT:-{port}}}\n"
        "logs=${{STRATO_LAUNCH_LOGS:-{logs}}}\n"
        "srun --kill-on-bad-exit=1 {strato} launch --nnodes {nnodes} --nproc-per-node {nproc} --rdzv-backend c10d \\\n"
        "    --rdzv-endpoint \"${{head_addr:-$head}}:$port\" --rdzv-id {id} --max-restarts {restarts} \\\n"
        "   {flags} --log-dir \"$logs/$SLURM_JOB_ID\" \\\n"
        "   {cmd}\n",
        fmt::arg("port", o.rdzv_port), fmt::arg("strato", fs::shell_quote(o.strato.empty() ? "strato" : o.strato)),
        fmt::arg("nnodes", nnodes(l)), fmt::arg("nproc", nproc_text(o)), fmt::arg("logs", log_base),
        fmt::arg("id", rdzv_id_given(l) ? fs::shell_quote(l.rdzv_id) : "\"$SLURM_JOB_ID\""),
        fmt::arg("restarts", l.max_restarts), fmt::arg("flags", flags), fmt::arg("cmd", cmd));
    return s;
}

Result<std::string> emit_pytorchjob(const EmitOptions& o) {
    STRATO_RETURN_IF_ERROR(check(o));
    // The training operator refuses a PyTorchJob whose name is no DNS-1035 label (it names the
    // job's Services and pods after it): `--job-name ddp_run` was written, then refused by the
    // cluster at submission.
    const std::string& n = o.job_name;
    const auto lower_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (n.size() > 63 || !(n.front() >= 'a' && n.front() <= 'z') || n.back() == '-' ||
        !std::all_of(n.begin(), n.end(), [&](char c) { return lower_or_digit(c) || c == '-'; }))
        return invalid_argument(
            "launch --emit kubernetes: --job-name {} is not a Kubernetes name (expected at most 63 "
            "lowercase letters, digits and '-', starting with a letter and not ending with '-', "
            "such as strato-job)",
            yq(n));
    const auto& l = o.launch;
    std::vector<const std::string*> values = {&o.strato, &o.image, &o.job_name, &l.rdzv_id, &l.log_dir};
    for (const auto& a : l.command) values.push_back(&a);
    if (const std::string* bad = not_utf8(values))
        return invalid_argument(
            "launch --emit kubernetes: {} is not UTF-8 text: a Kubernetes manifest (YAML) cannot carry "
            "it as it is",
            yq(*bad));
    std::string command = fmt::format("[{}, \"launch\", \"--nproc-per-node\", {}, \"--stop-timeout\", \"{}\"",
                                      kq(o.strato.empty() ? "strato" : o.strato), yq(nproc_text(o)), l.stop_timeout_s);
    std::vector<std::string> flags = passed_flags(l);
    if (rdzv_id_given(l)) flags.insert(flags.end(), {"--rdzv-id", l.rdzv_id});
    if (!l.log_dir.empty()) flags.insert(flags.end(), {"--log-dir", l.log_dir});  // in the pod (a volume, say)
    for (const auto& f : flags) command += ", " + kq(f);
    if (!dashes(l).empty()) command += ", \"--\"";
    for (const auto& a : l.command) command += ", " + kq(a);
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
        "  name: {yname}\n"
        "spec:\n"
        "  nprocPerNode: {ynproc}\n"
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
        fmt::arg("name", o.job_name), fmt::arg("yname", yq(o.job_name)), fmt::arg("min", l.min_nodes),
        fmt::arg("max", l.max_nodes), fmt::arg("nproc", nproc_text(o)), fmt::arg("ynproc", yq(nproc_text(o))), fmt::arg("restarts", l.max_restarts), fmt::arg("port", o.rdzv_port),
        fmt::arg("image", yq(o.image)), fmt::arg("command", command), fmt::arg("resources", resources));
}

}  // namespace strato::dist
