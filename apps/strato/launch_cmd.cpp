// strato launch [OPTIONS] COMMAND [ARGS...]: torchrun's flags (both --x-y and --x_y spellings,
// and PET_* variables), for any command.

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string_view>

#include "commands.h"
#include "strato/core/cgroup.h"
#include "strato/core/fs.h"
#include "strato/core/parse.h"
#include "strato/dist/agent.h"
#include "strato/dist/emit.h"
#include "strato/monitor/nvml.h"

namespace strato::cli {

namespace {
std::vector<std::string> g_worker_command;  // set by split_launch_command before parsing

/// The GPUs a worker here would see (torch.cuda.device_count(): NVML's, as CUDA_VISIBLE_DEVICES
/// narrows them); `why` says why there are none.
int count_gpus(std::string* why) {
    auto nvml = monitor::Nvml::open();
    if (!nvml) {
        *why = std::string(nvml.status().message());
        return 0;
    }
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const int n = dist::visible_gpus(static_cast<int>((*nvml)->gpus().size()), visible);
    if (n == 0)
        *why = fmt::format("CUDA_VISIBLE_DEVICES='{}' hides the {} GPU(s)", visible ? visible : "",
                           (*nvml)->gpus().size());
    return n;
}
}  // namespace

int split_launch_command(int argc, char** argv) {
    int i = 1;
    while (i < argc && argv[i][0] == '-') ++i;  // global flags (-q, -v) take no values
    if (i >= argc || std::string_view(argv[i]) != "launch") return argc;
    static const std::set<std::string_view> kFlags = {"--standalone", "--no-python", "--no_python", "--quiet-workers",
                                                      "-h", "--help", "-q", "--quiet", "-v", "--verbose"};
    for (int j = i + 1; j < argc; ++j) {
        std::string_view a(argv[j]);
        if (a == "--") {
            g_worker_command.assign(argv + j + 1, argv + argc);
            return j;
        }
        if (a.empty() || a[0] != '-') {
            g_worker_command.assign(argv + j, argv + argc);
            return j;
        }
        if (!kFlags.count(a) && a.find('=') == std::string_view::npos) ++j;  // the option's value
    }
    return argc;
}

void add_launch_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        dist::LaunchOptions l;
        std::string nnodes = "1", nproc = "1";
        std::string emit, out;
        dist::EmitOptions e;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("launch", "Start worker processes for distributed training on this node (torchrun's "
                                             "flags and environment), restart the group when a worker fails");
    // COMMAND [ARGS...] is split off before parsing (split_launch_command): its flags are the workers'.
    auto opt = [&](const std::string& names, auto& var, const std::string& help, const char* env) {
        return cmd->add_option(names, var, help)->envname(env);
    };
    opt("--nproc-per-node,--nproc_per_node", o->nproc,
        "Worker processes on this node: a number (1..65536); gpu (one per GPU it sees, as torchrun); cpu (one per "
        "CPU this process may use: its affinity mask and cgroup CPU quota); auto (gpu when there is a GPU, else cpu)",
        "PET_NPROC_PER_NODE")
        ->check(CLI::Validator(
            [](std::string& v) {
                return v == "cpu" || v == "auto" || v == "gpu" || parse_int(v, 1, 1 << 16)
                           ? std::string()
                           : fmt::format("'{}': expected a number in 1..65536, gpu, cpu or auto", v);
            },
            "N|gpu|cpu|auto"));
    opt("--nnodes", o->nnodes, "Nodes: N, or MIN:MAX for an elastic job (needs --rdzv-backend c10d)", "PET_NNODES");
    opt("--node-rank,--node_rank", o->l.node_rank,
        "This node's rank, 0..nodes-1 (static backend, where every node needs the same --nproc-per-node; a "
        "preference under c10d)",
        "PET_NODE_RANK");
    opt("--rdzv-backend,--rdzv_backend", o->l.rdzv_backend,
        "static (fixed nodes, --master-addr/--master-port) or c10d (strato's rendezvous at --rdzv-endpoint)",
        "PET_RDZV_BACKEND");
    opt("--rdzv-endpoint,--rdzv_endpoint", o->l.rdzv_endpoint,
        "HOST[:PORT] of the rendezvous (default port 29400); the agent that can bind it hosts it", "PET_RDZV_ENDPOINT");
    opt("--rdzv-id,--rdzv_id", o->l.rdzv_id, "Job id shared by all nodes", "PET_RDZV_ID");
    opt("--join-timeout,--join_timeout", o->l.join_timeout_s, "Seconds to wait for at least MIN nodes (default 600)",
        "PET_JOIN_TIMEOUT");
    opt("--last-call,--last_call", o->l.last_call_s, "Seconds to wait for more nodes once MIN have joined (default 30)",
        "PET_LAST_CALL");
    auto* master_addr = opt("--master-addr,--master_addr", o->l.master_addr,
                            "Host of rank 0 (static backend; default 127.0.0.1)", "PET_MASTER_ADDR");
    auto* master_port = opt("--master-port,--master_port", o->l.master_port,
                            "Port of rank 0's store, 1..65535 (static backend; default 29500; on one node without "
                            "it or --master-addr: a free port)",
                            "PET_MASTER_PORT");
    opt("--max-restarts,--max_restarts", o->l.max_restarts, "Group restarts after a failure before giving up (default 0)",
        "PET_MAX_RESTARTS");
    opt("--monitor-interval,--monitor_interval", o->l.monitor_interval_s, "Seconds between worker checks (default 0.1)",
        "PET_MONITOR_INTERVAL");
    opt("--stop-timeout,--stop_timeout", o->l.stop_timeout_s,
        "Seconds between SIGTERM and SIGKILL when stopping workers (default 30)", "PET_STOP_TIMEOUT");
    opt("--log-dir,--log_dir", o->l.log_dir, "Worker logs per attempt and error.json (default runs/launch/<rdzv-id>)",
        "PET_LOG_DIR");
    cmd->add_flag("--standalone", o->l.standalone, "One node: a local rendezvous, a free port, no rdzv flags needed")
        ->envname("PET_STANDALONE");
    cmd->add_flag("--no-python,--no_python", o->l.no_python,
                  "Run the command as given, also a .py script (its #! line); without it a .py script runs with "
                  "python3 -u (the first on PATH, an activated virtualenv's; else /usr/bin/python3)");
    cmd->add_option("--emit", o->emit, "Do not run: write the job for a cluster engine (slurm: an sbatch script with "
                                       "srun + strato launch per node; kubernetes: a Kubeflow PyTorchJob)")
        ->check(CLI::IsMember({"slurm", "kubernetes"}));
    cmd->add_option("-o,--out", o->out, "With --emit: the file to write (default: stdout)");
    // Written into #SBATCH lines and Kubernetes names: one word (a newline would end the #SBATCH
    // block and run the rest as a command).
    const CLI::Validator one_word([](std::string& v) { return why_not_script_text(v, /*one_word=*/true); }, "WORD", "one word");
    cmd->add_option("--job-name", o->e.job_name, "With --emit: the job's name (default strato-job)")->check(one_word);
    cmd->add_option("--image", o->e.image, "With --emit kubernetes: the container image (default strato:latest)")
        ->check(one_word);
    cmd->add_option("--partition", o->e.partition, "With --emit slurm: sbatch --partition")->check(one_word);
    cmd->add_option("--time", o->e.time, "With --emit slurm: sbatch --time")->check(one_word);
    // (a negative count was written as none: a typo gave a job without GPUs)
    cmd->add_option("--gpus-per-node", o->e.gpus_per_node, "With --emit: GPUs to request per node")
        ->check(CLI::Range(0, 1024));
    cmd->add_option("--cpus-per-node", o->e.cpus_per_node, "With --emit: CPUs to request per node")
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--strato-path", o->e.strato,
                    "With --emit: strato on the nodes (default: this executable for slurm, strato for kubernetes)");
    cmd->add_option("--rdzv-port", o->e.rdzv_port, "With --emit: the rendezvous port on the first node (default 29400)")
        ->check(CLI::Range(1, 65535));
    cmd->add_flag("--quiet-workers", [o](int64_t) { o->l.tee = false; }, "Do not echo worker output (logs still kept)");
    cmd->callback([o, exit_code, master_addr, master_port] {
        dist::LaunchOptions l = o->l;
        l.master_given = master_addr->count() > 0 || master_port->count() > 0;
        l.command = g_worker_command;
        if (l.command.empty())  // a usage error, as a missing argument is
            return void(*exit_code = report_usage_error(
                            "launch", "no command to run (strato launch [OPTIONS] COMMAND [ARGS...])"));
        const bool nproc_word = o->nproc == "cpu" || o->nproc == "auto" || o->nproc == "gpu";
        // gpu and auto as torchrun: one worker per GPU (found by review: auto counted CPUs on a GPU
        // node, 96 workers for 8 GPUs; gpu, which PyTorch's DDP tutorial uses, was refused).
        // Counted on each node, not here, for --emit.
        int gpus = 0;
        std::string no_gpu;
        if (o->emit.empty() && (o->nproc == "gpu" || o->nproc == "auto")) gpus = count_gpus(&no_gpu);
        if (o->emit.empty() && o->nproc == "gpu" && gpus == 0)
            return void(*exit_code = report_usage_error(
                            "launch", fmt::format("--nproc-per-node gpu: no GPU visible here ({}); give a number or cpu",
                                                  no_gpu)));
        if (gpus > 0) {
            l.nproc_per_node = gpus;
        } else if (nproc_word) {
            // The CPUs this launcher may use (taskset, a Slurm step's or a container's cpuset, at
            // most the whole cores of a cgroup CPU quota), not every online CPU as torchrun's
            // os.cpu_count(): one worker per usable core, not 64 workers on a 4-core share.
            l.nproc_per_node = cgroup::usable_cpus();
        } else {
            l.nproc_per_node = static_cast<int>(*parse_int(o->nproc, 1, 1 << 16));  // (validated)
        }
        // Bad flag values are usage errors (exit 2), as CLI11's own are. (The library's messages
        // start with "launch: ", which report_error says already.)
        const auto report = [](const Status& s) {
            const std::string_view m = s.message();
            return report_error("launch", m.starts_with("launch: ") ? Status(s.code(), std::string(m.substr(8))) : s);
        };
        const auto usage_or_error = [report](const Status& s) {
            const int code = report(s);
            return s.code() == StatusCode::kInvalidArgument ? 2 : code;  // (as report_usage_error)
        };
        if (Status s = dist::parse_nnodes(o->nnodes, &l); !s.is_ok()) return void(*exit_code = usage_or_error(s));
        if (!o->emit.empty()) {
            dist::EmitOptions e = o->e;
            e.launch = l;
            // gpu|cpu|auto: each node counts its own GPUs or cores, not this machine's.
            if (nproc_word) e.nproc_per_node = o->nproc;
            if (e.strato.empty()) {
                // Slurm nodes share this installation; a container image has strato on its PATH.
                std::error_code ec;
                auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
                e.strato = o->emit == "slurm" && !ec ? self.string() : "strato";
            }
            auto text = o->emit == "slurm" ? dist::emit_slurm(e) : dist::emit_pytorchjob(e);
            if (!text) return void(*exit_code = usage_or_error(text.status()));
            if (o->out.empty()) {
                fmt::print("{}", *text);
            } else if (Status s = fs::check_output_file(o->out, fs::OutputKind::kText, "--out"); !s.is_ok()) {
                return void(*exit_code = report_error("launch", s));
            } else if (Status w = fs::atomic_write(o->out, *text); !w.is_ok()) {
                return void(*exit_code = report_error("launch", w));
            }
            return void(*exit_code = 0);
        }
        if (Status s = dist::check_options(l); !s.is_ok()) return void(*exit_code = usage_or_error(s));
        auto rc = dist::run_launch(l);
        if (!rc) return void(*exit_code = report(rc.status()));
        *exit_code = *rc;
    });
    cmd->footer("strato launch [OPTIONS] COMMAND [ARGS...]: everything from the first argument that is not an option\n"
                "(or after --) is the workers' command.\n"
                "Examples:\n"
                "  strato launch --standalone --nproc-per-node 2 strato train configs/fashion_mnist_cnn.toml\n"
                "  strato launch --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint node1:29400 \\\n"
                "      --rdzv-id job42 --max-restarts 3 strato train cfg.toml\n"
                "  strato launch --nnodes 2 --node-rank 1 --master-addr node1 --nproc-per-node 8 python3 train.py\n"
                "  strato launch --emit slurm --nnodes 4 --nproc-per-node 8 --gpus-per-node 8 strato train cfg.toml --resume\n"
                "  strato launch --emit kubernetes --nnodes 2:4 --nproc-per-node 1 --image me/strato strato train cfg.toml\n"
                "Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT\n"
                "and TORCHELASTIC_RESTART_COUNT, as under torchrun. When a worker fails the others get SIGTERM\n"
                "(SIGKILL after --stop-timeout), <log-dir>/error.json names the failing rank, its exit code or signal\n"
                "and its last lines, and the group restarts (on every node) until --max-restarts is used up.");
}

}  // namespace strato::cli
