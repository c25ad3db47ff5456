// strato autoscale simulate|local|capacity|manifests

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "commands.h"
#include "strato/cloud/capacity.h"
#include "strato/cloud/local_provider.h"
#include "strato/cloud/manifests.h"
#include "strato/cloud/planner.h"
#include "strato/cloud/simulator.h"
#include "strato/core/duration.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/parse.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/report/autoscale_report.h"

namespace strato::cli {
namespace {

Result<nlohmann::json> read_json(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path));
    return parse_json_named(text, path);
}

/// "mon 08:00" -> hours since Monday 00:00.
Result<double> parse_week_clock(const std::string& text) {
    size_t sp = text.find(' ');
    if (sp == std::string::npos) return invalid_argument("--start '{}': expected DAY HH:MM, e.g. \"mon 08:00\"", text);
    STRATO_ASSIGN_OR_RETURN(int mask, cloud::parse_days(text.substr(0, sp)));
    STRATO_ASSIGN_OR_RETURN(double h, cloud::parse_clock(text.substr(sp + 1)));
    // One day: the clock at the trace start ("mon-fri" has no one place in the week).
    if ((mask & (mask - 1)) != 0)
        return invalid_argument("--start '{}': expected one day, such as \"mon 08:00\" (a range is no clock)", text);
    int day = 0;
    while (!(mask >> day & 1)) ++day;
    return day * 24 + h;
}

/// Hours since Monday 00:00 -> "tue 09:00".
std::string format_week_clock(double weekday_hour) {
    static constexpr const char* kDays[] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};
    const auto minutes = static_cast<int64_t>(std::floor(weekday_hour * 60)) % (7 * 24 * 60);
    return fmt::format("{} {:02}:{:02}", kDays[minutes / (24 * 60)], minutes / 60 % 24, minutes % 60);
}

// A trace whose first row is at least this (2001-09-09) is taken to be in Unix seconds.
constexpr double kUnixTimeFrom = 1e9;

void add_simulate(CLI::App& parent, int* exit_code) {
    struct Opts {
        std::string policy, trace, instance = "g5.xlarge", region, boot = "3m", tick = "30s", slo = "60s", start = "mon 00:00";
        std::string horizon = "0", json_out, report_out, loadtest, slo_p99 = "100ms";
        double per_gpu = 0, hazard = -1;
        int initial = -1, runs = 1;
        uint64_t seed = 1;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = parent.add_subcommand("simulate", "Replay a load trace against the policies: cost, SLO, utilisation, timelines");
    cmd->add_option("--policy", o->policy, "Autoscaling policy TOML (docs/autoscale.md)")->required();
    cmd->add_option("--trace", o->trace, "Load trace CSV: time_s,rate[,preempt] (seconds; work per second)")
        ->required();
    cmd->add_option("--instance", o->instance, "Node type at the start (default g5.xlarge)");
    cmd->add_option("--region", o->region, "Region of the node type (default: its cheapest)");
    auto* per_gpu = cmd->add_option("--per-gpu-capacity", o->per_gpu, "Work units per second one GPU serves")
                        ->check(finite_range(1e-9, 1e12));
    // One source of capacity: --loadtest quietly won over --per-gpu-capacity.
    auto* loadtest = cmd->add_option("--loadtest", o->loadtest,
                                     "Take the per-replica capacity from a `strato loadtest --json` result")
                         ->excludes(per_gpu);
    cmd->add_option("--slo-p99", o->slo_p99, "With --loadtest: the p99 objective the capacity must meet (default 100ms)")
        ->needs(loadtest)
        ->check(duration_flag("ms", true));
    cmd->add_option("--boot", o->boot, "Node start-up time (default 3m)")->check(duration_flag("s", false));
    cmd->add_option("--tick", o->tick, "Control-loop period (default 30s)")->check(duration_flag("s", true));
    cmd->add_option("--slo", o->slo, "Queueing-delay objective (default 60s)")->check(duration_flag("s", true));
    cmd->add_option("--spot-hazard", o->hazard, "Preemptions per spot node-hour (default: catalog rates)")
        ->check(finite_range(0, 3600));
    // A bad clock is a usage error (exit 2), found before anything is read.
    cmd->add_option("--start", o->start,
                    "Schedule clock at the trace start (default \"mon 00:00\"; a trace in Unix seconds: its first row's "
                    "time, UTC)")
        ->check(status_flag("--start", [](const std::string& t) { return parse_week_clock(t).status(); }, "DAY HH:MM"));
    cmd->add_option("--horizon", o->horizon, "Simulated time (default: the trace end)")->check(duration_flag("s", true));
    cmd->add_option("--initial-nodes", o->initial, "Nodes at the start (default min_nodes)")->check(CLI::Range(0, 1000000));
    cmd->add_option("--runs", o->runs,
                    "Repeat with seeds --seed..--seed+N-1 and report the spread of cost (spot preemptions are random; "
                    "--json and --report describe the first run; --json adds the spread)")
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--seed", o->seed, "Random seed (default 1)");
    cmd->add_option("--json", o->json_out, "Write the full result (timelines, actions) as JSON (- for stdout, the summary then on stderr)");
    cmd->add_option("--report", o->report_out, "Write an HTML report with the timelines (- for stdout)");
    cmd->callback([o, exit_code, cmd] {
        auto fail = [&](const Status& s) { *exit_code = report_error("autoscale simulate", s); };
        for (const auto& [out, kind, flag] : {std::tuple{o->json_out, fs::OutputKind::kText, "--json"},
                                              std::tuple{o->report_out, fs::OutputKind::kHtml, "--report"}})
            if (Status s = fs::check_output_file(out, kind, flag); !out.empty() && !s.is_ok()) return fail(s);
        if (Status s = check_distinct_files({{o->json_out, "--json", true},
                                             {o->report_out, "--report", true},
                                             {o->trace, "--trace", false},
                                             {o->policy, "--policy", false},
                                             {o->loadtest, "--loadtest", false}});
            !s.is_ok())
            return fail(s);
        // With --json or --report on standard output (`--json - | jq`) the summary goes to stderr.
        std::FILE* text_out = text_stream({o->json_out, o->report_out});
        auto cat = cloud::Catalog::builtin();
        if (!cat) return fail(cat.status());
        auto cfg = cloud::AutoscaleConfig::load(o->policy);
        if (!cfg) return fail(cfg.status());
        auto trace = cloud::load_trace(o->trace);
        if (!trace) return fail(trace.status());
        cloud::SimOptions so;
        so.config = *cfg;
        so.instance = o->instance;
        so.region = o->region;
        so.per_gpu_capacity = o->per_gpu;
        if (!o->loadtest.empty()) {
            auto lt = read_json(o->loadtest);
            if (!lt) return fail(lt.status());
            const double slo_ms = *parse_duration_s(o->slo_p99, "ms") * 1000;  // (validated)
            auto cap = cloud::replica_capacity(*lt, slo_ms);
            if (!cap) return fail(cap.status());
            so.per_gpu_capacity = cap->qps;
            // The capacity is in requests per second (what a load test counts): say so, and what a
            // request held, since a trace's rate in samples per second is another unit.
            const double batch = lt->contains("batch_size") && (*lt)["batch_size"].is_number()
                                     ? (*lt)["batch_size"].get<double>()
                                     : 1;
            fmt::print(text_out,
                       "capacity per GPU (one replica each): {:.1f} requests/s, the most {} sustained within p99 {:g} "
                       "ms (p99 {:.1f} ms); the trace's rate is read as requests/s{}\n",
                       cap->qps, o->loadtest, slo_ms, cap->p99_ms,
                       batch > 1 ? fmt::format(" (each request carried {:g} samples: for a trace in samples/s, "
                                               "give --per-gpu-capacity {:.1f} instead)",
                                               batch, cap->qps * batch)
                                 : "");
        }
        if (!(so.per_gpu_capacity > 0)) return fail(invalid_argument("give --per-gpu-capacity or --loadtest"));
        // (Durations were checked by their flags' validators.)
        for (auto [text, out] : {std::pair{&o->boot, &so.boot_s}, {&o->tick, &so.tick_s}, {&o->slo, &so.slo_wait_s},
                                 {&o->horizon, &so.horizon_s}})
            *out = *parse_duration_s(*text);
        so.start_weekday_hour = *parse_week_clock(o->start);  // (validated)
        // A trace in Unix seconds knows its own clock: a schedule follows the first row's day and
        // hour (UTC), not Monday 00:00 (a Tuesday 09:00 trace ran the weekday floor from 9 pm).
        const double t0 = trace->points.front().t_s;
        if (cmd->count("--start") == 0 && t0 >= kUnixTimeFrom) {
            so.start_weekday_hour = std::fmod(t0 / 3600 + 3 * 24, 7 * 24);  // (1970-01-01 was a Thursday)
            fmt::print(text_out, "schedule clock from the trace's Unix time: {} UTC at its first row (--start sets another)\n",
                       format_week_clock(so.start_weekday_hour));
        }
        if (o->hazard >= 0) so.spot_hazard_per_h = o->hazard;
        so.initial_nodes = o->initial;
        if (o->runs < 1) return fail(invalid_argument("--runs must be >= 1"));
        std::vector<double> costs;
        cloud::SimResult first;
        for (int i = 0; i < o->runs; ++i) {
            so.seed = o->seed + static_cast<uint64_t>(i);
            so.timeline = i == 0 && (!o->json_out.empty() || !o->report_out.empty());  // (only outputs show it)
            auto r = cloud::simulate(*trace, *cat, so);
            if (!r) return fail(r.status());
            costs.push_back(r->cost);
            if (i == 0) first = std::move(*r);
        }
        const cloud::SimResult& r = first;
        fmt::print(text_out, "{} on {} in {}: {:.2f} {} for {:.1f} node-hours over {}; max {} nodes, {} scaling actions, {} preemptions\n",
                   o->trace, o->instance, r.region, r.cost, r.currency, r.node_hours, cloud::format_hours(r.duration_s / 3600),
                   r.max_nodes, r.scale_actions, r.preemptions);
        fmt::print(text_out, "SLO (queueing delay <= {:g} s) violated {:.0f} s ({:.2f}% of the time); mean utilisation {:.1f}%\n",
                   so.slo_wait_s, r.slo_violation_s, 100 * r.slo_violation_s / std::max(r.duration_s, 1e-9),
                   r.mean_utilization);
        fmt::print(text_out, "{} events in {:.3f} s: {:.2f} M events/s\n", r.events, r.wall_s, r.events / std::max(r.wall_s, 1e-9) / 1e6);
        nlohmann::json spread;  // (--runs N: the spread of cost, in the JSON too, not only on the terminal)
        if (o->runs > 1) {
            std::sort(costs.begin(), costs.end());
            double mean = 0;
            for (double c : costs) mean += c / costs.size();
            fmt::print(text_out, "cost over {} runs: mean {:.2f}, p10 {:.2f}, p90 {:.2f} {}\n", o->runs, mean,
                       cloud::sample_quantile(costs, 0.1), cloud::sample_quantile(costs, 0.9), r.currency);
            spread = {{"runs", o->runs},
                      {"seeds", {o->seed, o->seed + static_cast<uint64_t>(o->runs - 1)}},
                      {"mean", mean},
                      {"p10", cloud::sample_quantile(costs, 0.1)},
                      {"p90", cloud::sample_quantile(costs, 0.9)}};
        }
        if (o->json_out.empty() && o->report_out.empty()) return void(*exit_code = 0);
        so.seed = o->seed;  // the run the JSON describes is the first (so.seed was the last run's)
        nlohmann::json json = cloud::sim_to_json(r, so);
        if (!spread.is_null()) json["cost_over_runs"] = spread;
        if (!o->json_out.empty()) {
            Status s = fs::atomic_write(o->json_out, json_text(json) + "\n");
            if (!s.is_ok()) return fail(s);
        }
        if (!o->report_out.empty()) {
            auto html = report::render_autoscale_report(json);
            if (!html) return fail(html.status());
            Status s = fs::atomic_write(o->report_out, *html);
            if (!s.is_ok()) return fail(s);
            fmt::print(text_out, "report: {}\n", o->report_out);
        }
        *exit_code = 0;
    });
}

void add_capacity(CLI::App& parent, int* exit_code) {
    struct Opts {
        std::string loadtest, slo_p99 = "100ms";
        double qps = 0, replica_qps = 0, headroom = 0.2;
        int gpus_per_replica = 1, top = 10;
        std::vector<std::string> instances, gpus;
        bool spot = false, json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = parent.add_subcommand("capacity", "Replicas and cost per million requests for a target rate, from a load test");
    auto* loadtest = cmd->add_option("--loadtest", o->loadtest, "`strato loadtest --json` result of one replica");
    cmd->add_option("--slo-p99", o->slo_p99, "p99 objective the replica must meet (default 100ms)")
        ->needs(loadtest)
        ->check(duration_flag("ms", true));
    cmd->add_option("--replica-qps", o->replica_qps, "Requests/s one replica sustains (instead of --loadtest)")
        ->check(finite_range(1e-9, 1e12))
        ->excludes(loadtest);
    cmd->add_option("--qps", o->qps, "Target requests per second")->required()->check(finite_range(1e-9, 1e12));
    cmd->add_option("--headroom", o->headroom, "Fraction of capacity kept free (default 0.2)")->check(finite_range(0, 0.99));
    cmd->add_option("--gpus-per-replica", o->gpus_per_replica, "GPUs one replica uses (default 1)")->check(CLI::Range(1, 1024));
    cmd->add_option("--instance", o->instances, "Only these instance types (repeat or comma-separate)")->delimiter(',');
    cmd->add_option("--gpu", o->gpus, "Only these accelerators (repeat or comma-separate: --gpu A10G,L4)")->delimiter(',');
    cmd->add_flag("--spot", o->spot, "Price with spot instead of on-demand");
    cmd->add_option("--top", o->top, "Rows (default 10)")->check(CLI::Range(1, 1000000));
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o, exit_code] {
        auto fail = [&](const Status& s) { *exit_code = report_error("autoscale capacity", s); };
        if (!o->loadtest.empty() && o->replica_qps > 0)
            return fail(invalid_argument("give --loadtest or --replica-qps, not both"));
        auto cat = cloud::Catalog::builtin();
        if (!cat) return fail(cat.status());
        cloud::CapacityRequest req;
        req.target_qps = o->qps;
        req.replica_qps = o->replica_qps;
        req.headroom = o->headroom;
        req.gpus_per_replica = o->gpus_per_replica;
        req.instance_types = o->instances;
        req.accelerators = o->gpus;
        req.spot = o->spot;
        cloud::ReplicaCapacity cap;
        if (!o->loadtest.empty()) {
            auto lt = read_json(o->loadtest);
            if (!lt) return fail(lt.status());
            auto c = cloud::replica_capacity(*lt, *parse_duration_s(o->slo_p99, "ms") * 1000);  // (validated)
            if (!c) return fail(c.status());
            cap = *c;
            req.replica_qps = cap.qps;
        } else if (!(o->replica_qps > 0)) {
            return fail(invalid_argument("give --loadtest FILE.json or --replica-qps"));
        }
        auto rows = cloud::capacity_plan(*cat, req);
        if (!rows) return fail(rows.status());
        if (rows->size() > static_cast<size_t>(o->top)) rows->resize(o->top);
        const std::string cur = cat->currency().code;
        if (o->json) {
            nlohmann::json out = {{"kind", "strato-capacity"}, {"qps", req.target_qps}, {"replica_qps", req.replica_qps},
                                  // (no load test: no p99 measured, null rather than 0)
                                  {"p99_ms", cap.qps > 0 ? nlohmann::json(cap.p99_ms) : nlohmann::json()},
                                  {"currency", cur},
                                  // (the prices' market and the sizing's assumptions: a row's cost
                                  // could not be told spot from on-demand)
                                  {"spot", req.spot}, {"headroom", req.headroom},
                                  {"gpus_per_replica", req.gpus_per_replica}, {"rows", nlohmann::json::array()}};
            for (const auto& r : *rows)
                out["rows"].push_back({{"provider", r.inst->provider}, {"region", r.inst->region}, {"instance", r.inst->type},
                                       {"instances", r.instances}, {"replicas_per_instance", r.replicas_per_instance},
                                       {"cost_per_hour", r.cost_per_hour}, {"cost_per_million", r.cost_per_million}});
            fmt::print("{}\n", json_text(out, 2));
            return void(*exit_code = 0);
        }
        // (rate_text: 0.4 requests/s, a slow model, printed as "0 requests/s", and --qps 0.5 as "target 0")
        if (cap.qps > 0)
            fmt::print("one replica: {} requests/s within p99 {:.1f} ms (at concurrency/rate {:g}, {})\n",
                       rate_text(cap.qps), cap.p99_ms, cap.level, cap.target);
        fmt::print("target {} requests/s with {:.0f}% headroom, one replica per {} GPU(s); the per-replica rate is\n"
                   "what the load test measured where it ran: load-test on the type you plan for\n\n",
                   rate_text(req.target_qps), 100 * req.headroom, req.gpus_per_replica);
        fmt::print("{:<6} {:<14} {:<26} {:>9} {:>9} {:>12} {:>14}\n", "cloud", "region", "instance", "instances",
                   "replicas", cur + "/hour", cur + "/M requests");
        for (const auto& r : *rows)
            fmt::print("{:<6} {:<14} {:<26} {:>9} {:>9} {:>12.2f} {:>14.4f}\n", r.inst->provider, r.inst->region,
                       r.inst->type, r.instances, r.instances * r.replicas_per_instance, r.cost_per_hour,
                       r.cost_per_million);
        *exit_code = 0;
    });
}

void add_manifests(CLI::App& parent, int* exit_code) {
    auto o = std::make_shared<cloud::ManifestOptions>();
    auto* cmd = parent.add_subcommand("manifests", "Kubernetes manifests: Deployment + Service + HPA, or a KServe InferenceService (v2)");
    cmd->add_option("--name", o->name, "Name of the deployment")->required();
    cmd->add_option("--image", o->image, "Container image with strato (default strato:latest)");
    cmd->add_option("--model-repository", o->model_dir, "Model repository path in the container (default /models)");
    cmd->add_option("--namespace", o->namespace_, "Namespace (default default)");
    // The ranges show in --help; the rest (min <= max, 0 only with --kserve) is checked together.
    cmd->add_option("--min-replicas", o->min_replicas,
                    "Minimum replicas (default 1; at most --max-replicas; 0 only with --kserve, scaling on "
                    "concurrency)")
        ->check(CLI::Range(0, cloud::kReplicasMax));
    cmd->add_option("--max-replicas", o->max_replicas, "Maximum replicas (default 8; at least --min-replicas)")
        ->check(CLI::Range(1, cloud::kReplicasMax));
    auto* target_cpu = cmd->add_option("--target-cpu", o->target_cpu_percent,
                    "Scale on CPU utilisation, this percent per pod (HPA default 70; with --kserve: scaleMetric cpu "
                    "instead of concurrency)")
        ->check(CLI::Range(1, 100));
    cmd->add_option("--pending-per-pod", o->pending_per_pod,
                    "Scale on nv_inference_pending_request_count per pod instead of CPU (needs a metrics adapter; "
                    "with --kserve a whole number)")
        ->check(finite_range(0, cloud::kPendingPerPodMax))
        ->excludes(target_cpu);  // (one scale metric: the other was ignored)
    cmd->add_option("--gpus", o->gpus, "nvidia.com/gpu per pod (default 0)")
        ->check(CLI::Range(0, cloud::kGpusPerPodMax));
    cmd->add_option("--cpu", o->cpu,
                    "CPU request per pod, a Kubernetes quantity: 2, 500m (default 2; above 0 to scale on CPU)");
    cmd->add_option("--memory", o->memory, "Memory request and limit per pod, at least 1Mi: 4Gi, 512Mi (default 4Gi)");
    cmd->add_flag("--kserve", o->kserve, "Emit a KServe InferenceService (v2 protocol) instead");
    cmd->callback([o, exit_code] {
        auto yaml = cloud::kubernetes_manifests(*o);
        // Every value comes from a flag: a bad one is a usage error (exit 2), as CLI11's own.
        if (!yaml)
            return void(*exit_code = yaml.status().code() == StatusCode::kInvalidArgument
                                         ? report_usage_error("autoscale manifests", yaml.status().message())
                                         : report_error("autoscale manifests", yaml.status()));
        fmt::print("{}", *yaml);
        *exit_code = 0;
    });
}

void add_local(CLI::App& parent, int* exit_code) {
    struct Opts {
        std::string policy, address = "127.0.0.1", tick = "1s", log_dir;
        int port = 8000;
        std::vector<std::string> models, repos, serve_args;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = parent.add_subcommand("local", "Run `strato serve` replicas here behind a draining proxy, scaled by the policy");
    cmd->add_option("--policy", o->policy, "Autoscaling policy TOML (backlog per_node = requests in flight per replica)")->required();
    cmd->add_option("--model", o->models, "Model package for every replica: [NAME=]DIR (repeatable)");
    cmd->add_option("--model-repository", o->repos, "Model repository for every replica");
    // The provider sets each replica's address and ports: naming one here is a usage error (the
    // repeated flag made every replica exit at start).
    cmd->add_option("--serve-arg", o->serve_args,
                    "Further `strato serve` flag for the replicas (repeatable; not --http-address, --http-port or "
                    "--metrics-port, which the provider sets)")
        ->check(status_flag("--serve-arg", [](const std::string& a) { return cloud::check_serve_arg(a); }, "ARG"));
    cmd->add_option("--port", o->port, "Front-end port (default 8000; 0: a free port, printed)")->check(CLI::Range(0, 65535));
    cmd->add_option("--address", o->address, "Front-end address (default 127.0.0.1)")->check(listen_address_flag());
    cmd->add_option("--tick", o->tick, "Control-loop period (default 1s, at least 10ms)")->check(duration_flag("s", true, 0.01));
    cmd->add_option("--log-dir", o->log_dir, "Replica logs (default: a new directory under /tmp)");
    cmd->footer("The front end answers the Open Inference Protocol like one server; GET /strato/replicas shows\n"
                "the replicas and every scaling action as JSON.\n\n"
                "Example:\n  strato autoscale local --policy configs/autoscale/local.toml --model "
                "fashion=runs/fashion_mnist_cnn/model --port 8000\n"
                "  strato loadtest http://127.0.0.1:8000 --model fashion --concurrency 16 -d 60s   # (another terminal)");
    cmd->callback([o, exit_code] {
        auto fail = [&](const Status& s) { *exit_code = report_error("autoscale local", s); };
        auto cfg = cloud::AutoscaleConfig::load(o->policy);
        if (!cfg) return fail(cfg.status());
        cloud::LocalOptions lo;
        lo.config = *cfg;
        lo.address = o->address;
        lo.port = o->port;
        lo.log_dir = o->log_dir;
        for (const auto& m : o->models) lo.serve_args.insert(lo.serve_args.end(), {"--model", m});
        for (const auto& r : o->repos) lo.serve_args.insert(lo.serve_args.end(), {"--model-repository", r});
        lo.serve_args.insert(lo.serve_args.end(), o->serve_args.begin(), o->serve_args.end());
        lo.tick_s = *parse_duration_s(o->tick);  // (validated)
        auto p = cloud::LocalProvider::create(lo);
        if (!p) return fail(p.status());
        signals::install_stop_handlers();
        Status s = (*p)->start();
        if (!s.is_ok()) return fail(s);
        log::info("autoscale: front end at http://{}/v2 (replicas: /strato/replicas)", host_port_text(o->address, (*p)->port()));
        s = (*p)->run();
        if (!s.is_ok()) return fail(s);
        *exit_code = 0;
    });
}

}  // namespace

void add_autoscale_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    auto* cmd = app.add_subcommand("autoscale", "Autoscaling: simulate policies on traces, run replicas locally, size capacity, emit Kubernetes manifests");
    cmd->require_subcommand(1);
    add_simulate(*cmd, exit_code);
    add_local(*cmd, exit_code);
    add_capacity(*cmd, exit_code);
    add_manifests(*cmd, exit_code);
    cmd->footer(
        "Examples:\n"
        "  strato autoscale simulate --policy configs/autoscale/seeds.toml --trace bench/cloud/week_trace.csv \\\n"
        "      --per-gpu-capacity 600 --report sim.html\n"
        "  strato autoscale local --policy configs/autoscale/local.toml --model runs/fashion_mnist_cnn/model\n"
        "  strato autoscale capacity --loadtest runs/fashion_mnist_cnn/loadtest.json --qps 20000 --slo-p99 20ms\n"
        "  strato autoscale manifests --name fashion --image registry/strato:0.1 --gpus 1 --kserve");
    // Each subcommand its own examples (CLI11 gives a subcommand its parent's footer otherwise).
    cmd->get_subcommand("simulate")
        ->footer("Example:\n  strato autoscale simulate --policy configs/autoscale/seeds.toml --trace "
                 "bench/cloud/week_trace.csv \\\n      --per-gpu-capacity 600 --report sim.html --json sim.json");
    cmd->get_subcommand("capacity")
        ->footer("Examples:\n  strato autoscale capacity --loadtest lt.json --qps 20000 --slo-p99 20ms\n"
                 "  strato autoscale capacity --replica-qps 900 --qps 20000 --gpu A10G --spot");
    cmd->get_subcommand("manifests")
        ->footer("Example:\n  strato autoscale manifests --name fashion --image registry/strato:0.1 --gpus 1 --kserve");
}

}  // namespace strato::cli
