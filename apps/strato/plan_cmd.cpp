// strato plan [--workload NAME | --run DIR] [--deadline 8h] [--budget 500] [--objective cost|time] ...

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/cloud/planner.h"
#include "strato/cloud/simulator.h"
#include "strato/core/duration.h"
#include "strato/core/fs.h"
#include "strato/core/parse.h"
#include "strato/core/json.h"
#include "strato/models/package.h"
#include "strato/report/run_report.h"
#include "strato/train/train_config.h"

namespace strato::cli {
namespace {

struct PlanFlags {
    std::string workload, run, precision, optimizer, objective = "cost", market = "both";
    std::string deadline, restart = "10m", startup = "5m", catalog, gpus_csv, spot_csv, prices;
    std::vector<std::string> providers, regions, gpus, instances;
    double budget = 0, dataset_size = 0, gflops = 0, params_m = 0, activations_m = 0, decode_rate = -1;
    double checkpoint_gbs = 1.0, spot_hazard = -1;
    int epochs = 0, batch = 0, max_nodes = 16, top = 10, simulate = 0;
    bool json = false, list = false;
};

/// What the run's newest checkpoint records (checkpoints/latest → state.json, manifest.json):
/// the size of the training split and the world size; 0 where it has none.
struct RunRecord {
    double train_samples = 0;
    double world_size = 0;
};

RunRecord read_run_record(const std::string& dir) {
    RunRecord rec;
    const std::string ckpt = dir + "/checkpoints";
    auto latest = fs::read_file(ckpt + "/latest", 4096);
    if (!latest) return rec;
    std::string name(trim_blanks(*latest));
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
    if (name.empty() || name.find('/') != std::string::npos) return rec;
    auto number = [](const std::string& path, const char* key) {
        auto text = fs::read_file(path, fs::kTextFileLimit);
        if (!text) return 0.0;
        nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
        return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
    };
    rec.train_samples = number(ckpt + "/" + name + "/state.json", "train_samples");
    rec.world_size = number(ckpt + "/" + name + "/manifest.json", "world_size");
    return rec;
}

/// A strato run directory as a workload: FLOPs and activations counted from its model package,
/// batch from its config, the training-set size its checkpoint records, and the speed it
/// measured here. `dataset_size` (--dataset-size; 0: none) replaces the size the run records.
Result<cloud::Workload> workload_from_run(const std::string& dir, double dataset_size) {
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage pkg, models::load_package(dir + "/model"));
    STRATO_ASSIGN_OR_RETURN(train::TrainConfig cfg, train::load_train_config(dir + "/config.toml", {}));
    STRATO_ASSIGN_OR_RETURN(report::RunSpeed speed, report::read_run_speed(dir));
    models::ForwardCost cost = models::count_forward(*pkg.net, pkg.info.input_shape);
    cloud::Workload w;
    w.name = dir;
    w.fwd_flops = cost.flops;
    w.activations = cost.activation_elements;
    w.params = static_cast<double>(models::parameter_count(*pkg.net));
    w.batch_per_gpu = static_cast<int>(cfg.data.batch_size);
    w.epochs = static_cast<int>(cfg.train.epochs);
    // The size of the training split, as the trainer records it with each checkpoint. Without a
    // checkpoint, from the steps of an epoch: a step is grad_accum batches on each of the ranks.
    const RunRecord rec = read_run_record(dir);
    double own = rec.train_samples;
    std::string size_from = "its checkpoint";
    if (!(own > 0)) {
        const double world = rec.world_size >= 1 ? rec.world_size : 1;
        own = speed.steps_per_epoch * static_cast<double>(cfg.data.batch_size) *
              static_cast<double>(cfg.train.grad_accum) * world;
        size_from = fmt::format("steps per epoch x batch {} x grad_accum {}{}", cfg.data.batch_size,
                                cfg.train.grad_accum, world > 1 ? fmt::format(" x {:.0f} ranks", world) : "");
    }
    // --dataset-size replaces it (the error below told to pass --dataset-size, which was applied only
    // after it); the speed the run measured stays the run's own.
    w.dataset_samples = dataset_size > 0 ? dataset_size : own;
    if (dataset_size > 0) size_from = "--dataset-size";
    w.precision = cfg.train.precision == "fp32" ? cloud::Precision::kFp32 : cloud::Precision::kAmp;
    w.optimizer = cfg.optim.name == "adam" || cfg.optim.name == "adamw" ? "adam" : "sgd";
    w.measured_samples_per_s = std::isfinite(speed.samples_per_s) ? speed.samples_per_s : own / speed.epoch_time_s;
    if (!(w.dataset_samples > 0))
        return not_found("{}: neither a checkpoint (checkpoints/latest) nor metrics.jsonl gives the dataset size; pass "
                         "--dataset-size",
                         dir);
    w.source = fmt::format("FLOPs and activations counted from {}/model, dataset size from {}{}", dir, size_from,
                           std::isfinite(w.measured_samples_per_s) && w.measured_samples_per_s > 0
                               ? fmt::format("; it trained at {:.0f} samples/s on this machine", w.measured_samples_per_s)
                               : "");
    return w;
}

/// The request the flags describe. `*usage` is set when the error is a flag's value (a preset or
/// a provider, region, GPU or instance type that is not there): a usage error, exit 2.
Result<cloud::PlanRequest> build_request(const PlanFlags& f, const cloud::Catalog& cat, bool* usage) {
    cloud::PlanRequest r;
    if (!f.run.empty()) {
        STRATO_ASSIGN_OR_RETURN(r.workload, workload_from_run(f.run, f.dataset_size));
    } else {
        auto preset = cloud::find_workload(f.workload.empty() ? "resnet50-imagenet" : f.workload);
        if (!preset) {
            *usage = preset.status().code() == StatusCode::kNotFound;  // (not a broken built-in table)
            return preset.status().with_context("--workload");
        }
        r.workload = std::move(*preset);
    }
    cloud::Workload& w = r.workload;
    if (f.epochs > 0) w.epochs = f.epochs;
    if (f.batch > 0) w.batch_per_gpu = f.batch;
    if (f.dataset_size > 0) w.dataset_samples = f.dataset_size;
    if (f.gflops > 0) w.fwd_flops = f.gflops * 1e9;
    if (f.params_m > 0) w.params = f.params_m * 1e6;
    if (f.activations_m > 0) w.activations = f.activations_m * 1e6;
    if (f.decode_rate >= 0) w.decode_per_vcpu = f.decode_rate;
    if (!f.precision.empty()) w.precision = f.precision == "fp32" ? cloud::Precision::kFp32 : cloud::Precision::kAmp;
    if (!f.optimizer.empty()) w.optimizer = f.optimizer;
    r.objective = f.objective == "time" ? cloud::Objective::kTime : cloud::Objective::kCost;
    // (Durations were checked by their flags' validators.)
    if (!f.deadline.empty()) r.deadline_h = *parse_duration_s(f.deadline, "h") / 3600;
    if (f.budget != 0) r.budget = f.budget;
    r.providers = f.providers;
    r.regions = f.regions;
    r.accelerators = f.gpus;
    r.instance_types = f.instances;
    r.max_nodes = f.max_nodes;
    r.ondemand = f.market != "spot";
    r.spot = f.market != "ondemand";
    r.storage_gbs = f.checkpoint_gbs;
    r.restart_s = *parse_duration_s(f.restart);
    r.startup_s = *parse_duration_s(f.startup);
    if (f.spot_hazard >= 0) r.spot_hazard_per_h = f.spot_hazard;
    r.top = f.top;
    if (Status s = r.check_filters(cat); !s.is_ok()) {
        *usage = true;
        return s;
    }
    STRATO_RETURN_IF_ERROR(r.validate(cat));
    return r;
}

/// What --simulate may cost: about 10 s of stepping (some 3 M segments and preemptions a second).
constexpr double kMaxSimulatedEvents = 3e7;

/// Monte Carlo of a spot row: the simulated spread of its cost next to the analytical one.
struct Simulated {
    double mean_h = 0, p10_h = 0, p90_h = 0, mean_cost = 0;
    double stderr_h = 0;  // standard error of mean_h: the sampling error of `runs` runs
    int runs = 0;
};

Simulated simulate_row(const cloud::PlanRequest& r, const cloud::Candidate& c, int runs) {
    cloud::SpotJob job = cloud::spot_job(r, c);
    std::vector<double> walls;
    for (int i = 0; i < runs; ++i) walls.push_back(cloud::simulate_spot_job(job, static_cast<uint64_t>(i) + 1).wall_s / 3600);
    std::sort(walls.begin(), walls.end());
    Simulated s;
    s.runs = runs;
    for (double w : walls) s.mean_h += w / runs;
    double var = 0;
    for (double w : walls) var += (w - s.mean_h) * (w - s.mean_h) / std::max(1, runs - 1);
    s.stderr_h = std::sqrt(var / runs);
    const double startup_h = r.startup_s / 3600;
    s.mean_h += startup_h;
    s.p10_h = cloud::sample_quantile(walls, 0.1) + startup_h;
    s.p90_h = cloud::sample_quantile(walls, 0.9) + startup_h;
    s.mean_cost = s.mean_h * c.price_per_h;
    return s;
}

std::string si(double v) {
    if (v >= 1e12) return fmt::format("{:.3g} T", v / 1e12);
    if (v >= 1e9) return fmt::format("{:.3g} G", v / 1e9);
    if (v >= 1e6) return fmt::format("{:.3g} M", v / 1e6);
    if (v >= 1e3) return fmt::format("{:.3g} k", v / 1e3);
    return fmt::format("{:.3g}", v);
}

/// An amount of money to the cent, "<0.01" for a positive one that rounds to 0.00.
std::string money_text(double v) { return v > 0 && v < 0.005 ? "<0.01" : fmt::format("{:.2f}", v); }

std::string print_table(const cloud::Plan& p, const cloud::PlanRequest& r, const cloud::Catalog& cat, double ms,
                        int simulate) {
    const cloud::Workload& w = r.workload;
    cloud::ThroughputModel model;
    std::string out = fmt::format(
        "{}: {} samples x {} epochs, batch {} per GPU, {}, {}\n"
        "  {}FLOPs forward per sample, {} parameters, {} activations; needs {:.1f} GB per GPU\n",
        w.name, si(w.dataset_samples), w.epochs, w.batch_per_gpu,
        w.precision == cloud::Precision::kAmp ? "AMP" : "FP32/TF32", w.optimizer, si(w.fwd_flops), si(w.params),
        si(w.activations), model.memory_needed_gb(w));
    if (w.measured_samples_per_s > 0)
        out += fmt::format("  {}\n", w.source);
    std::vector<std::string> cons;
    if (std::isfinite(r.deadline_h)) cons.push_back("deadline " + cloud::format_hours(r.deadline_h));
    if (std::isfinite(r.budget)) cons.push_back(fmt::format("budget {:.2f} {}", r.budget, cat.currency().code));
    out += fmt::format("objective: {}{}{}; {} candidates, {} priced in {:.1f} ms\n\n",
                       r.objective == cloud::Objective::kCost ? "cost" : "time", cons.empty() ? "" : "; ",
                       fmt::join(cons, ", "), p.candidates, p.evaluated, ms);
    if (p.ranked.empty()) return out;
    // Columns as wide as their widest cell (at least the usual width): "Standard_ND96amsr_A100_v4 x16"
    // or "128xH100-MEGA" pushed the rest of their row out of line.
    using Row = std::array<std::string, 11>;
    std::vector<Row> rows = {{"#", "cloud", "region", "instance", "GPUs", "market", "samples/s", "time", "range 10-90%",
                              "cost " + cat.currency().code, "why"}};
    for (const auto& c : p.ranked)
        rows.push_back({std::to_string(rows.size()), c.inst->provider, c.inst->region,
                        c.nodes > 1 ? fmt::format("{} x{}", c.inst->type, c.nodes) : c.inst->type,
                        fmt::format("{}x{}", c.gpus(), c.inst->accelerator), c.spot ? "spot" : "on-demand",
                        rate_text(c.tp.samples_per_s), cloud::format_hours(c.expected_h),
                        c.spot ? fmt::format("{} - {}", cloud::format_hours(c.p10_h), cloud::format_hours(c.p90_h)) : "",
                        money_text(c.cost), c.reason});
    std::array<size_t, 11> width = {2, 6, 14, 26, 12, 9, 10, 13, 19, 10, 0};
    for (const Row& row : rows)
        for (size_t k = 0; k + 1 < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
    constexpr std::array<bool, 11> kRight = {true, false, false, false, true, false, true, true, true, true, false};
    for (const Row& row : rows) {
        for (size_t k = 0; k + 1 < row.size(); ++k)
            out += (kRight[k] ? fmt::format("{:>{}}", row[k], width[k]) : fmt::format("{:<{}}", row[k], width[k])) +
                   (k == 0 || k + 2 == row.size() ? "  " : " ");
        out += row.back() + "\n";
    }
    const bool any_spot =
        std::any_of(p.ranked.begin(), p.ranked.end(), [](const cloud::Candidate& c) { return c.spot; });
    if (simulate > 0 && !any_spot) out += "\n--simulate: no spot row in the plan, nothing to simulate\n";
    if (simulate > 0 && any_spot) {
        out += fmt::format("\nspot rows simulated {} times each (preemptions at the same rates):\n", simulate);
        int k = 0;
        for (const auto& c : p.ranked) {
            ++k;
            if (!c.spot) continue;
            Simulated sim = simulate_row(r, c, simulate);
            out += fmt::format("{:>2}  expected {} / {:.2f} {}; simulated mean {} / {:.2f} {} (10-90%: {} - {}); ratio {:.3f} "
                               "(sampling error of {} runs: {:.2f} %)\n",
                               k, cloud::format_hours(c.expected_h), c.cost, cat.currency().code,
                               cloud::format_hours(sim.mean_h), sim.mean_cost, cat.currency().code,
                               cloud::format_hours(sim.p10_h), cloud::format_hours(sim.p90_h), sim.mean_cost / c.cost,
                               simulate, 100 * sim.stderr_h / sim.mean_h);
        }
    }
    return out;
}

nlohmann::json to_json(const cloud::Plan& p, const cloud::PlanRequest& r, const cloud::Catalog& cat, double ms,
                       int simulate) {
    using nlohmann::json;
    const cloud::Workload& w = r.workload;
    auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
    json j = {{"kind", "strato-plan"},
              {"currency", cat.currency().code},
              {"workload",
               {{"name", w.name},
                {"fwd_flops", w.fwd_flops},
                {"activations", w.activations},
                {"params", w.params},
                {"dataset_samples", w.dataset_samples},
                {"epochs", w.epochs},
                {"batch_per_gpu", w.batch_per_gpu},
                {"precision", w.precision == cloud::Precision::kAmp ? "amp" : "fp32"},
                {"optimizer", w.optimizer},
                {"decode_per_vcpu", w.decode_per_vcpu},
                {"measured_samples_per_s", num(w.measured_samples_per_s)},
                {"source", w.source}}},
              {"objective", r.objective == cloud::Objective::kCost ? "cost" : "time"},
              {"deadline_h", num(r.deadline_h)},
              {"budget", num(r.budget)},
              // What was searched (a plan read later says which filters, markets and nodes it had).
              {"request",
               {{"providers", r.providers},
                {"regions", r.regions},
                {"gpus", r.accelerators},
                {"instances", r.instance_types},
                {"market", r.ondemand && r.spot ? "both" : r.spot ? "spot" : "ondemand"},
                {"max_nodes", r.max_nodes},
                {"startup_s", r.startup_s},
                {"restart_s", r.restart_s},
                {"checkpoint_gbs", r.storage_gbs},
                {"spot_hazard_per_h", num(r.spot_hazard_per_h)},  // null: the catalog's rates
                {"top", r.top}}},
              {"candidates", p.candidates},
              {"evaluated", p.evaluated},
              {"plan_ms", ms},
              {"binding", p.binding}};
    json ranked = json::array();
    for (const auto& c : p.ranked) {
        ranked.push_back({{"provider", c.inst->provider},
                          {"region", c.inst->region},
                          {"instance", c.inst->type},
                          {"accelerator", c.inst->accelerator},
                          {"nodes", c.nodes},
                          {"gpus", c.gpus()},
                          {"market", c.spot ? "spot" : "ondemand"},
                          {"samples_per_s", c.tp.samples_per_s},
                          {"per_gpu_samples_per_s", c.tp.per_gpu_samples_per_s},
                          {"scaling_efficiency", c.tp.scaling_efficiency},
                          {"bound", c.tp.bound},
                          {"input_limit_samples_per_s", c.tp.input_limit > 0 ? json(c.tp.input_limit) : json(nullptr)},
                          {"memory_needed_gb", c.tp.memory_needed_gb},
                          {"work_h", c.work_h},
                          {"expected_h", c.expected_h},
                          {"p10_h", c.p10_h},
                          {"p90_h", c.p90_h},
                          {"price_per_h", c.price_per_h},
                          {"cost", c.cost},
                          {"cost_p90", c.cost_p90},
                          {"interruptions", c.interruptions},
                          {"checkpoint_interval_h", c.checkpoint_interval_h},
                          {"reason", c.reason},
                          {"source", c.inst->source}});
        if (c.spot && simulate > 0) {
            Simulated sim = simulate_row(r, c, simulate);
            ranked.back()["simulated"] = {{"runs", sim.runs}, {"mean_h", sim.mean_h}, {"p10_h", sim.p10_h},
                                          {"p90_h", sim.p90_h}, {"mean_cost", sim.mean_cost},
                                          {"mean_h_stderr", sim.stderr_h}};
        }
    }
    j["ranked"] = ranked;
    return j;
}

std::string list_catalog(const cloud::Catalog& cat) {
    std::string out = "Workload presets (--workload):\n";
    auto presets = cloud::builtin_workloads();
    if (presets)
        for (const auto& w : *presets)
            out += fmt::format("  {:<26} {:>8} FLOPs fwd {:>8} params {:>7} samples x {:>3} epochs  {}\n", w.name,
                               si(w.fwd_flops), si(w.params), si(w.dataset_samples), w.epochs, w.source.substr(0, 60));
    out += "\nGPUs (--gpu):\n";
    for (const auto& g : cat.gpus())
        out += fmt::format("  {:<10} {:>4.0f} GB {:>5.0f} GB/s {:>6.1f} FP32 {:>6.0f} tensor TFLOPS{}{}\n", g.name,
                           g.memory_gb, g.memory_bw_gbs, g.fp32_tflops, g.tensor_tflops,
                           g.nvlink_gbs > 0 ? fmt::format(", NVLink {:.0f} GB/s", g.nvlink_gbs) : "",
                           g.estimate ? " (estimate)" : "");
    out += fmt::format("\nInstances: {} rows (--instance, --provider, --region); catalog warnings:\n", cat.instances().size());
    for (const auto& w : cat.warnings()) out += "  " + w + "\n";
    return out;
}

nlohmann::json list_catalog_json(const cloud::Catalog& cat) {
    using nlohmann::json;
    json presets = json::array();
    auto all = cloud::builtin_workloads();
    if (all)
        for (const auto& w : *all)
            presets.push_back({{"name", w.name},
                               {"fwd_flops", w.fwd_flops},
                               {"activations", w.activations},
                               {"params", w.params},
                               {"dataset_samples", w.dataset_samples},
                               {"epochs", w.epochs},
                               {"batch_per_gpu", w.batch_per_gpu},
                               {"decode_per_vcpu", w.decode_per_vcpu},
                               {"source", w.source}});
    json gpus = json::array();
    for (const auto& g : cat.gpus())
        gpus.push_back({{"name", g.name},
                        {"memory_gb", g.memory_gb},
                        {"memory_bw_gbs", g.memory_bw_gbs},
                        {"fp32_tflops", g.fp32_tflops},
                        {"tensor_tflops", g.tensor_tflops},
                        {"bf16", g.bf16},
                        {"int8_tops", g.int8_tops},
                        {"nvlink_gbs", g.nvlink_gbs},
                        {"compute_efficiency", g.compute_efficiency},
                        {"estimate", g.estimate},
                        {"source", g.source}});
    return {{"kind", "strato-plan-list"},
            {"currency", cat.currency().code},
            {"presets", presets},
            {"gpus", gpus},
            {"instances", cat.instances().size()},
            {"warnings", cat.warnings()}};
}

}  // namespace

void add_plan_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    auto f = std::make_shared<PlanFlags>();
    auto* cmd = app.add_subcommand(
        "plan", "Rank cloud instances (provider, region, type, count, on-demand or spot) for a training job by cost or time");
    auto* workload =
        cmd->add_option("--workload", f->workload, "A built-in job (see --list); default resnet50-imagenet")
            ->check(CLI::Validator(  // (an empty one, an unset variable in a script, planned the default)
                [](std::string& v) { return v.empty() ? "expected a preset name (see --list), got an empty one" : ""; },
                "NAME"));
    cmd->add_option("--run", f->run,
                    "A strato run directory: FLOPs counted from its model, batch/epochs from its config, dataset "
                    "size from its checkpoint")
        ->excludes(workload)
        ->check(file_path_flag("a run directory; an empty one planned the default preset"));
    cmd->add_option("--epochs", f->epochs, "Epochs (overrides the workload's)")->check(CLI::Range(1, 1000000));
    cmd->add_option("--batch-per-gpu", f->batch, "Batch size on each GPU")->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--dataset-size", f->dataset_size, "Training samples per epoch")->check(finite_range(1, 1e13));
    cmd->add_option("--gflops", f->gflops, "Forward GFLOPs per sample")->check(finite_range(1e-9, 1e9));
    cmd->add_option("--params-m", f->params_m, "Parameters, in millions")->check(finite_range(1e-6, 1e7));
    cmd->add_option("--activations-m", f->activations_m, "Activation elements per sample, in millions")
        ->check(finite_range(1e-6, 1e7));
    cmd->add_option("--decode-rate", f->decode_rate, "Samples/s one vCPU can load and augment (0: no input limit)")
        ->check(finite_range(0, 1e9));
    cmd->add_option("--precision", f->precision, "amp (fp16/bf16 autocast) or fp32")->check(CLI::IsMember({"amp", "fp32"}));
    cmd->add_option("--optimizer", f->optimizer, "sgd or adam (optimizer state in GPU memory)")
        ->check(CLI::IsMember({"sgd", "adam"}));
    cmd->add_option("--objective", f->objective, "cost (default) or time")->check(CLI::IsMember({"cost", "time"}));
    cmd->add_option("--deadline", f->deadline,
                    "Finish within this time: 8h, 90m, 2d (a bare number is hours); spot rows must meet it at their "
                    "90th percentile")
        ->check(duration_flag("h", true));
    cmd->add_option("--budget", f->budget,
                    "Spend at most this much (USD, or the currency of --prices); spot rows must meet it at their 90th "
                    "percentile")
        ->check(finite_range(1e-9, 1e15));
    // (repeatable, or comma-separated as SkyPilot's lists: --gpu A100,H100 was one unknown name)
    cmd->add_option("--provider", f->providers, "Only these clouds (aws, gcp, azure, ...; any case; repeat or comma-separate)")
        ->delimiter(',');
    cmd->add_option("--region", f->regions, "Only these regions (any case; repeat or comma-separate)")->delimiter(',');
    cmd->add_option("--gpu", f->gpus,
                    "Only these accelerators (T4, A10G, A100, H100, ...; any case; a name, not A100:8; repeat or "
                    "comma-separate: --gpu A100,H100)")
        ->delimiter(',');
    cmd->add_option("--instance", f->instances, "Only these instance types (exact names; repeat or comma-separate)")
        ->delimiter(',');
    cmd->add_option("--max-nodes", f->max_nodes, "Largest node count to consider (default 16)")->check(CLI::Range(1, 1024));
    cmd->add_option("--market", f->market, "ondemand, spot or both (default)")
        ->check(CLI::IsMember({"ondemand", "spot", "both"}));
    cmd->add_option("--checkpoint-gbs", f->checkpoint_gbs, "Checkpoint write bandwidth in GB/s (default 1)")
        ->check(finite_range(1e-6, 1e6));
    cmd->add_option("--restart", f->restart, "Time from a preemption to training again (default 10m)")
        ->check(duration_flag("s", false));
    cmd->add_option("--startup", f->startup, "Provisioning and start-up before the first step, billed (default 5m)")
        ->check(duration_flag("s", false));
    cmd->add_option("--spot-hazard", f->spot_hazard, "Preemptions per node-hour (default: catalog rates)")
        ->check(finite_range(0, 100));
    auto* catalog =
        cmd->add_option("--catalog", f->catalog,
                        "Instance CSV with the columns of data/cloud/instances.csv (convert a SkyPilot vms.csv with "
                        "scripts/cloud/refresh_catalog.py)")
            ->check(file_path_flag("an empty one planned on the built-in catalog"));
    cmd->add_option("--gpu-table", f->gpus_csv, "GPU table CSV (format of data/cloud/gpus.csv; with --catalog)")
        ->needs(catalog)
        ->check(file_path_flag());
    cmd->add_option("--spot-rates", f->spot_csv,
                    "Spot interruption CSV (format of data/cloud/spot_interruptions.csv; with --catalog)")
        ->needs(catalog)
        ->check(file_path_flag());
    cmd->add_option("--prices", f->prices, "TOML price overrides: discounts, negotiated prices, currency (docs/plan.md)")
        ->check(file_path_flag("an empty one planned at the catalog's prices"));
    cmd->add_option("--top", f->top, "Rows to show (default 10)")->check(CLI::Range(1, 1000000));
    cmd->add_option(
           "--simulate", f->simulate,
           "Check each spot row by simulating its preemptions N times (mean time and cost, 10-90 % of the time)")
        ->check(CLI::Range(0, 100000));
    cmd->add_flag("--json", f->json, "Print the plan (or --list) as JSON");
    cmd->add_flag("--list", f->list, "List workload presets, GPUs and catalog warnings");
    cmd->footer(
        "Examples:\n"
        "  strato plan --workload resnet50-imagenet --deadline 4h\n"
        "  strato plan --workload yolov8m-coco --gpu A10G --objective time --budget 200\n"
        "  strato plan --run runs/fashion_mnist_cnn --epochs 100 --dataset-size 6e6\n"
        "  strato plan --workload resnet50-imagenet --market spot --prices configs/plan/prices.toml --json\n"
        "A spot row meets --deadline and --budget when its 90th percentile (p90_h, cost_p90) does; it is\n"
        "ranked by its expected time and cost.\n"
        "Exit status: 0 with a plan, 1 when nothing meets the constraints (the binding one is named), 2 on a\n"
        "usage error (a --workload, --provider, --region, --gpu or --instance the presets or catalog lack too).");
    cmd->callback([f, exit_code] {
        auto cat = f->catalog.empty() && f->gpus_csv.empty() && f->spot_csv.empty()
                       ? cloud::Catalog::builtin()
                       : f->catalog.empty() ? Result<cloud::Catalog>(invalid_argument("--gpu-table and --spot-rates need --catalog"))
                                            : cloud::Catalog::load(f->catalog, f->gpus_csv, f->spot_csv);
        if (!cat) return void(*exit_code = report_error("plan", cat.status()));
        if (!f->prices.empty()) {
            Status s = cat->apply_overrides_file(f->prices);
            if (!s.is_ok()) return void(*exit_code = report_error("plan", s));
        }
        if (f->list) {
            if (f->json) fmt::print("{}\n", json_text(list_catalog_json(*cat), 2));
            else fmt::print("{}", list_catalog(*cat));
            return void(*exit_code = 0);
        }
        bool usage = false;
        auto req = build_request(*f, *cat, &usage);
        if (!req)
            return void(*exit_code = usage ? report_usage_error("plan", req.status().message())
                                            : report_error("plan", req.status()));
        auto t0 = std::chrono::steady_clock::now();
        auto plan = cloud::make_plan(*cat, *req);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!plan) return void(*exit_code = report_error("plan", plan.status()));
        // --simulate's work: each run steps through its checkpoint segments and preemptions (a
        // high hazard at the flag's top made it hours).
        double events = 0;
        for (const auto& c : plan->ranked)
            if (c.spot)
                events += f->simulate * (c.interruptions + c.work_h / std::max(c.checkpoint_interval_h, 1e-9) + 1);
        if (events > kMaxSimulatedEvents)
            return void(*exit_code = report_error(
                            "plan", invalid_argument("--simulate {}: the spot rows would take about {:.2g} simulated "
                                                     "segments and preemptions, more than {:.0g}; simulate fewer runs",
                                                     f->simulate, events, kMaxSimulatedEvents)));
        if (f->json)
            fmt::print("{}\n", json_text(to_json(*plan, *req, *cat, ms, f->simulate), 2));
        else
            fmt::print("{}", print_table(*plan, *req, *cat, ms, f->simulate));
        if (plan->ranked.empty()) {
            // (with --json too: stdout holds the JSON, and the exit status 1 needs its one line)
            std::fflush(stdout);
            fmt::print(stderr, "strato plan: error: no plan meets the constraints: {}\n", plan->binding);
            return void(*exit_code = 1);
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
