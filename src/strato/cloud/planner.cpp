#include "strato/cloud/planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

namespace strato::cloud {

namespace {

// Providers, regions and accelerators match in any case, as SkyPilot's `--cloud AWS --gpus a100`
// do; instance types exactly (a near miss gets a "did you mean").
bool same_name(std::string_view a, std::string_view b, bool any_case) {
    return any_case ? detail::equals_any_case(a, b) : a == b;
}

bool listed(const std::vector<std::string>& filter, const std::string& v, bool any_case = true) {
    return filter.empty() ||
           std::any_of(filter.begin(), filter.end(), [&](const std::string& f) { return same_name(f, v, any_case); });
}

/// The filters alone (not whether the row can be planned).
bool matches_filters(const PlanRequest& req, const Instance& in) {
    return listed(req.providers, in.provider) && listed(req.regions, in.region) &&
           listed(req.accelerators, in.accelerator) && listed(req.instance_types, in.type, false);
}

bool in_space(const PlanRequest& req, const Instance& in) { return in.gpu && in.gpus > 0 && matches_filters(req, in); }

Status check_filter(const Catalog& cat, const std::vector<std::string>& values, std::string_view flag,
                    std::string Instance::*field) {
    // An accelerator counts as known only where it can be planned: with a GPU table entry.
    const bool gpus = field == &Instance::accelerator;
    const bool any_case = field != &Instance::type;
    for (const auto& v : values) {
        // (not an empty name: `--region ''` matched the one row without a region, and was "no price")
        bool known = !v.empty() && std::any_of(cat.instances().begin(), cat.instances().end(), [&](const Instance& in) {
            return same_name(in.*field, v, any_case) && (!gpus || in.gpu);
        });
        if (known) continue;
        if (field == &Instance::type) return cat.unknown_type(v).with_context(std::string(flag));
        if (gpus && !v.empty() && std::any_of(cat.instances().begin(), cat.instances().end(), [&](const Instance& in) {
                return same_name(in.accelerator, v, true);
            }))
            return invalid_argument("{} '{}': the catalog lists it, but the GPU table has no entry for it, so it is "
                                    "left out of plans (see strato plan --list)",
                                    flag, v);
        std::vector<std::string> all;
        for (const auto& in : cat.instances())
            if (std::find(all.begin(), all.end(), in.*field) == all.end() && !(in.*field).empty() && (!gpus || in.gpu))
                all.push_back(in.*field);
        // SkyPilot's `--gpus A100:8` names a count too; here the count is what the planner chooses.
        const size_t colon = gpus ? v.find(':') : std::string::npos;
        if (colon != std::string::npos)
            return invalid_argument(
                "{} '{}': give the accelerator's name alone ('{}'); the planner chooses the GPUs "
                "per node (the instance) and the node count (up to --max-nodes)",
                flag, v, v.substr(0, colon));
        return invalid_argument("{} '{}' is not in the catalog (known: {})", flag, v, fmt::join(all, ", "));
    }
    return Status::ok();
}

double spot_hazard_per_h(const PlanRequest& req, const Instance& in) {
    if (std::isfinite(req.spot_hazard_per_h)) return req.spot_hazard_per_h;
    double month = std::isfinite(in.spot_interruptions_per_month) ? in.spot_interruptions_per_month : 0.2;
    return hazard_per_hour(month);
}

/// Lower bound of the objective over every node count of (inst, market): perfect scaling, no
/// communication, no checkpoints or preemptions.
double lower_bound(const PlanRequest& req, const ThroughputModel& model, const Currency& cur, const Instance& in,
                   bool spot) {
    double r1 = model.single_gpu(req.workload, *in.gpu);
    double per_node = r1 * in.gpus;
    // (as the throughput model: a row without vCPUs has no input-pipeline limit)
    if (req.workload.decode_per_vcpu > 0 && in.vcpus > 0)
        per_node = std::min(per_node, req.workload.decode_per_vcpu * in.vcpus);
    double node_hours = req.workload.total_samples() / per_node / 3600;  // n nodes take node_hours / n each
    double startup_h = req.startup_s / 3600;
    if (req.objective == Objective::kCost)
        return cur.convert(spot ? in.spot_usd_h : in.ondemand_usd_h) * (node_hours + startup_h);
    return node_hours / req.max_nodes + startup_h;
}

std::string count(double v) { return v < 0.01 ? "<0.01" : fmt::format("{:.2f}", v); }

std::string market(bool spot) { return spot ? "spot" : "on-demand"; }

/// Samples a data-parallel step takes: the batch per GPU on every GPU.
int64_t global_batch(const PlanRequest& req, const Candidate& c) {
    return static_cast<int64_t>(req.workload.batch_per_gpu) * c.gpus();
}

std::string describe(const Candidate& c) {
    return fmt::format("{} {} x{} ({})", c.inst->provider, c.inst->type, c.nodes, market(c.spot));
}

/// Where each filter is known but no row has them all (`--instance p5.4xlarge --region us-west-2`):
/// what each filter could be with the others kept ("; keeping the other filters, --region could be
/// us-east-1").
std::string filters_apart(const PlanRequest& req, const Catalog& catalog) {
    struct Filter {
        const char* flag;
        std::vector<std::string> PlanRequest::*values;
        std::string Instance::*field;
    };
    std::string out;
    for (const Filter& f : {Filter{"--provider", &PlanRequest::providers, &Instance::provider},
                            Filter{"--region", &PlanRequest::regions, &Instance::region},
                            Filter{"--gpu", &PlanRequest::accelerators, &Instance::accelerator},
                            Filter{"--instance", &PlanRequest::instance_types, &Instance::type}}) {
        if ((req.*f.values).empty()) continue;
        PlanRequest others = req;
        (others.*f.values).clear();
        std::vector<std::string> could;
        for (const auto& in : catalog.instances())
            if (in_space(others, in) && std::find(could.begin(), could.end(), in.*f.field) == could.end())
                could.push_back(in.*f.field);
        if (could.empty()) continue;
        constexpr size_t kShown = 8;
        const size_t more = could.size() > kShown ? could.size() - kShown : 0;
        could.resize(could.size() - more);
        out += fmt::format("; keeping the other filters, {} could be {}{}", f.flag, fmt::join(could, ", "),
                           more ? fmt::format(" (and {} more)", more) : "");
    }
    return out;
}

void explain(Plan& plan, const PlanRequest& req, const std::vector<Candidate>& all, const Catalog& catalog,
             const ThroughputModel& model) {
    const Currency& cur = catalog.currency();
    if (all.empty()) {
        const bool matches = std::any_of(catalog.instances().begin(), catalog.instances().end(),
                                         [&](const Instance& in) { return in_space(req, in); });
        const char* price = req.spot && req.ondemand ? "a price" : req.spot ? "a spot price" : "an on-demand price";
        // Listed, but not plannable: no accelerators, or an accelerator the GPU table lacks.
        std::vector<std::string> unknown;  // accelerators the GPU table lacks
        bool none = false;                 // rows without accelerators
        bool unnamed = false;              // rows with a count of accelerators but no name for them
        for (const auto& in : catalog.instances()) {
            if (!matches_filters(req, in)) continue;
            if (in.gpus == 0) none = true;
            else if (in.accelerator.empty()) unnamed = true;
            else if (!in.gpu && std::find(unknown.begin(), unknown.end(), in.accelerator) == unknown.end())
                unknown.push_back(in.accelerator);
        }
        if (matches) {
            plan.binding = fmt::format("no instance that matches the filters has {} in the catalog", price);
        } else if (!unknown.empty() || none || unnamed) {
            std::vector<std::string> why;
            if (!unknown.empty())
                why.push_back(fmt::format("accelerators the GPU table does not know ({}; see strato plan --list and "
                                          "--gpu-table)",
                                          fmt::join(unknown, ", ")));
            if (unnamed) why.push_back("an accelerator count without an accelerator name (see strato plan --list)");
            if (none) why.push_back("no accelerators");
            plan.binding = fmt::format("the instances that match the filters have {}", fmt::join(why, " or "));
        } else {
            plan.binding = fmt::format("no instance matches the filters (provider, region, GPU, instance type) at once{}",
                                       filters_apart(req, catalog));
        }
        return;
    }
    const Candidate* fits_best = nullptr;
    double need = all.front().tp.memory_needed_gb, largest = 0;
    for (const auto& c : all) largest = std::max(largest, c.inst->gpu->memory_gb);
    const Candidate* fastest = nullptr;
    const Candidate* cheapest_in_time = nullptr;
    bool outrun = false;
    bool oversized = false;  // some fit, but their global batch is larger than the dataset
    for (const auto& c : all) {
        if (!c.tp.fits) continue;
        if (global_batch(req, c) > req.workload.dataset_samples) {
            oversized = true;
            continue;
        }
        fits_best = &c;
        if (c.spot_outrun) {
            outrun = true;
            continue;
        }
        // (judged as evaluate judges: on the 90th percentile)
        if (!fastest || c.p90_h < fastest->p90_h) fastest = &c;
        if (c.p90_h <= req.deadline_h && (!cheapest_in_time || c.cost_p90 < cheapest_in_time->cost_p90))
            cheapest_in_time = &c;
    }
    if (!fits_best && oversized) {
        const Candidate* least = nullptr;  // the fewest GPUs that fit
        for (const auto& c : all)
            if (c.tp.fits && (!least || c.gpus() < least->gpus())) least = &c;
        plan.binding = fmt::format(
            "dataset size: {:.0f} samples are fewer than one global batch on any candidate that fits (the smallest, "
            "{}, takes {} x {} = {} a step); lower --batch-per-gpu or give the real --dataset-size",
            req.workload.dataset_samples, describe(*least), req.workload.batch_per_gpu, least->gpus(),
            global_batch(req, *least));
    } else if (!fits_best) {
        // The largest batch that fits the largest GPU; none when the model's own state does not
        // (a 20B model with Adam: 360 GB at any batch) — "lower --batch-per-gpu"
        // could not help there, and this planner has each GPU hold the whole model.
        Workload w = req.workload;
        w.batch_per_gpu = 0;
        const double fixed = model.memory_needed_gb(w);
        w.batch_per_gpu = 1;
        const double per_sample = model.memory_needed_gb(w) - fixed;
        const double batch_max = per_sample > 0 ? std::floor((largest - fixed) / per_sample) : 0;
        const std::string hint =
            batch_max >= 1
                ? fmt::format("lower --batch-per-gpu to {:.0f} or less", batch_max)
                : fmt::format("the model's weights, gradients and optimizer state alone need {:.1f} GB (and {:g} GB "
                              "of CUDA context), at any batch: strato plan models data-parallel training, each GPU "
                              "holding the whole model (no sharding)",
                              fixed - model.constants().workspace_gb, model.constants().workspace_gb);
        plan.binding = fmt::format(
            "GPU memory: one replica needs {:.1f} GB per GPU (weights, gradients, optimizer state, activations of "
            "a batch of {}), the largest GPU considered has {:.0f} GB; {}",
            need, req.workload.batch_per_gpu, largest, hint);
    } else if (!fastest && outrun) {
        plan.binding = "spot: on every candidate preemptions arrive faster than checkpoints can save progress; allow "
                       "on-demand (--market), or lower --restart or --spot-hazard";
    } else if (!cheapest_in_time) {
        auto [deadline, needs] = format_hours_apart(req.deadline_h, fastest->p90_h);
        // (a deadline inside the start-up every run pays: no node count helps, --startup does)
        const double startup_h = req.startup_s / 3600;
        plan.binding = fmt::format("deadline {}: the fastest candidate, {}, needs {}{}{}", deadline, describe(*fastest),
                                   needs, fastest->spot ? " at the 90th percentile" : "",
                                   startup_h >= req.deadline_h
                                       ? fmt::format("; the start-up alone (--startup) takes {}",
                                                     format_hours_apart(startup_h, req.deadline_h).first)
                                       : "");
    } else {
        plan.binding = fmt::format("budget {:.2f} {}: the cheapest candidate that meets the other constraints, {}, "
                                   "costs {:.2f} {}{}",
                                   req.budget, cur.code, describe(*cheapest_in_time), cheapest_in_time->cost_p90,
                                   cur.code, cheapest_in_time->spot ? " at the 90th percentile" : "");
    }
}

void annotate(Plan& plan, const PlanRequest& req, const ThroughputModel& model) {
    if (plan.ranked.empty()) return;
    const Candidate* fastest = &plan.ranked.front();
    for (const auto& c : plan.ranked)
        if (c.expected_h < fastest->expected_h) fastest = &c;
    bool deadline = std::isfinite(req.deadline_h), budget = std::isfinite(req.budget);
    for (size_t i = 0; i < plan.ranked.size(); ++i) {
        Candidate& c = plan.ranked[i];
        std::vector<std::string> parts;
        if (i == 0) {
            if (req.objective == Objective::kCost)
                parts.push_back(deadline ? "cheapest that meets the deadline" : "cheapest");
            else
                parts.push_back(budget ? "fastest within the budget" : "fastest");
        } else if (&c == fastest) {
            parts.push_back("fastest listed");
        }
        const GpuSpec& g = *c.inst->gpu;
        // Named by the tier that takes longer: 16 nodes of 4 PCIe T4s waiting on 50 Gb/s were told
        // "needs NVLink", where one such node was compute-bound.
        const bool network = c.tp.allreduce_network_s >= c.tp.allreduce_s - c.tp.allreduce_network_s;
        if (c.tp.bound == "all-reduce")
            parts.push_back(network || g.nvlink_gbs > 0
                                ? fmt::format("all-reduce dominates: {:.0f}% of a step {}",
                                              100 * c.tp.exposed_comm_s / c.tp.step_s,
                                              network ? "on the network" : "on NVLink")
                                : "needs NVLink: gradient all-reduce dominates on PCIe");
        else if (c.tp.bound == "input pipeline")
            parts.push_back(fmt::format("input-bound: {} vCPUs feed {:.0f} samples/s", c.inst->vcpus * c.nodes,
                                        c.tp.input_limit));
        else
            parts.push_back(c.tp.bound + "-bound");
        if (c.spot) {
            // (without preemptions, or with a checkpoint longer than the job, "too short to
            // checkpoint" blamed the job)
            const SpotJob job = spot_job(req, c);
            if (!(job.hazard_per_s > 0))
                parts.push_back("no preemptions expected (--spot-hazard 0), no checkpoints");
            else if (c.checkpoint_interval_h < c.work_h)
                parts.push_back(fmt::format("{} preemptions expected, checkpoint every {}", count(c.interruptions),
                                            format_hours(c.checkpoint_interval_h)));
            else if (job.checkpoint_s >= job.work_s)
                parts.push_back(fmt::format("{} preemptions expected, no checkpoints: one takes {} at --checkpoint-gbs, "
                                            "longer than the job",
                                            count(c.interruptions), format_hours(job.checkpoint_s / 3600)));
            else
                parts.push_back(fmt::format("{} preemptions expected, too short to checkpoint", count(c.interruptions)));
        }
        if (c.tp.scaling_efficiency < 0.7 && c.gpus() > 1)
            parts.push_back(fmt::format("scales at {:.0f}%", 100 * c.tp.scaling_efficiency));
        // Nodes talk over the catalog's network; where it is blank (p4de.24xlarge has 400 Gb/s of
        // EFA, the catalog nothing) the model assumes a figure, and the row must say so.
        if (c.nodes > 1 && !(std::isfinite(c.inst->network_gbps) && c.inst->network_gbps > 0))
            parts.push_back(fmt::format("network unknown: {:g} Gb/s assumed", model.constants().unknown_network_gbps));
        c.reason = fmt::format("{}", fmt::join(parts, "; "));
    }
}

}  // namespace

std::string format_hours(double h) {
    if (!std::isfinite(h)) return "unbounded";
    // Rounded to the unit shown, then the unit chosen by the rounded value, so 59.7 s is
    // "1 min" and 59.7 min "1 h 00 min" (never "60 s" or "60 min").
    if (std::round(h * 3600) < 60) return fmt::format("{:.0f} s", h * 3600);
    const double min = std::round(h * 60);
    if (min < 60) return fmt::format("{:.0f} min", min);
    if (min < 48 * 60) return fmt::format("{:.0f} h {:02.0f} min", std::floor(min / 60), std::fmod(min, 60));
    const double days = h / 24, years = days / 365.25;
    if (days < 1000) return fmt::format("{:.1f} d", days);
    // (an absurd job read "540305.9 d")
    if (years < 100) return fmt::format("{:.1f} years", years);
    if (years < 1e6) return fmt::format("{:.0f} years", years);
    return fmt::format("{:.1e} years", years);
}

std::string format_hours_exact(double h, int decimals) {
    if (!std::isfinite(h)) return "unbounded";
    const double scale = std::pow(10.0, decimals);
    const double s = std::round(h * 3600 * scale) / scale;  // carried before it is split
    const double hours = std::floor(s / 3600), mins = std::floor((s - hours * 3600) / 60);
    const double secs = s - hours * 3600 - mins * 60;
    const std::string sec = fmt::format("{:0{}.{}f} s", secs, decimals > 0 ? decimals + 3 : 2, decimals);
    if (hours > 0) return fmt::format("{:.0f} h {:02.0f} min {}", hours, mins, sec);
    if (mins > 0) return fmt::format("{:.0f} min {}", mins, sec);
    return fmt::format("{:.{}f} s", secs, decimals);
}

std::pair<std::string, std::string> format_hours_apart(double a, double b) {
    std::string fa = format_hours(a), fb = format_hours(b);
    for (int decimals = 0; fa == fb && a != b && decimals <= 6; ++decimals)
        fa = format_hours_exact(a, decimals), fb = format_hours_exact(b, decimals);
    return {fa, fb};
}

Status PlanRequest::validate(const Catalog& catalog) const {
    STRATO_RETURN_IF_ERROR(workload.validate());
    if (!(deadline_h > 0)) return invalid_argument("--deadline must be > 0 hours, got {}", deadline_h);
    if (!(budget > 0)) return invalid_argument("--budget must be > 0, got {}", budget);
    if (max_nodes < 1 || max_nodes > 1024) return invalid_argument("--max-nodes must be in [1, 1024], got {}", max_nodes);
    if (!ondemand && !spot) return invalid_argument("both on-demand and spot are excluded: nothing to plan");
    if (!(storage_gbs > 0)) return invalid_argument("--checkpoint-gbs must be > 0");
    if (!(restart_s >= 0)) return invalid_argument("--restart must be >= 0");
    if (!(startup_s >= 0)) return invalid_argument("--startup must be >= 0");
    if (top < 1) return invalid_argument("--top must be >= 1");
    return check_filters(catalog);
}

Status PlanRequest::check_filters(const Catalog& catalog) const {
    STRATO_RETURN_IF_ERROR(check_filter(catalog, providers, "--provider", &Instance::provider));
    STRATO_RETURN_IF_ERROR(check_filter(catalog, regions, "--region", &Instance::region));
    STRATO_RETURN_IF_ERROR(check_filter(catalog, accelerators, "--gpu", &Instance::accelerator));
    STRATO_RETURN_IF_ERROR(check_filter(catalog, instance_types, "--instance", &Instance::type));
    return Status::ok();
}

SpotJob spot_job(const PlanRequest& req, const Candidate& c) {
    const Workload& w = req.workload;
    double state_bytes = w.params * (4 + (w.optimizer == "adam" ? 8 : 4));  // weights + optimizer state
    SpotJob job;
    job.work_s = c.work_h * 3600;
    job.hazard_per_s = spot_hazard_per_h(req, *c.inst) * c.nodes / 3600;
    job.checkpoint_s = state_bytes / (req.storage_gbs * 1e9);
    job.restart_s = req.restart_s;
    return job;
}

Candidate evaluate(const PlanRequest& req, const ThroughputModel& model, const Currency& cur, const Instance& inst,
                   int nodes, bool spot) {
    Candidate c;
    c.inst = &inst;
    c.nodes = nodes;
    c.spot = spot;
    c.tp = model.estimate(req.workload, inst, nodes);
    c.work_h = req.workload.total_samples() / c.tp.samples_per_s / 3600;
    c.price_per_h = cur.convert(spot ? inst.spot_usd_h : inst.ondemand_usd_h) * nodes;
    c.expected_h = c.p10_h = c.p90_h = c.work_h;
    c.checkpoint_interval_h = c.work_h;
    if (spot) {
        SpotEstimate e = estimate_spot(spot_job(req, c));
        c.expected_h = e.expected_wall_s / 3600;
        c.p10_h = e.p10_wall_s / 3600;
        c.p90_h = e.p90_wall_s / 3600;
        c.interruptions = e.expected_interruptions;
        c.checkpoint_interval_h = e.interval_s / 3600;
        c.spot_outrun = !e.feasible;
        if (c.spot_outrun) c.why_not = "spot: preemptions arrive faster than checkpoints can save progress";
    }
    // Every run first provisions its nodes and starts up (billed, not counted as work).
    const double startup_h = req.startup_s / 3600;
    c.expected_h += startup_h;
    c.p10_h += startup_h;
    c.p90_h += startup_h;
    c.cost = c.price_per_h * c.expected_h;
    c.cost_p90 = c.price_per_h * c.p90_h;
    if (!(std::isfinite(c.cost) && std::isfinite(c.expected_h) && c.tp.samples_per_s > 0))
        c.why_not = "its time or cost is beyond any number (a catalog value far out of range?)";
    else if (!c.tp.fits)
        c.why_not = fmt::format("needs {:.1f} GB per GPU, {} has {:.0f} GB", c.tp.memory_needed_gb, inst.accelerator,
                                inst.gpu->memory_gb);
    // Data parallel: every step takes a batch per GPU. A global batch larger than the dataset is
    // under one step an epoch (8,192 H200s at 256 a GPU against ImageNet's 1.28 M images), where
    // the throughput model's full steps do not exist.
    else if (global_batch(req, c) > req.workload.dataset_samples)
        c.why_not = fmt::format("a global batch of {} ({} x {} GPUs) is larger than the dataset ({:.0f} samples)",
                                global_batch(req, c), req.workload.batch_per_gpu, c.gpus(), req.workload.dataset_samples);
    // The deadline and the budget are judged on the 90th percentile (for on-demand rows the
    // same as the expectation): a spot row that meets a deadline only on average misses it in
    // almost half of its runs.
    else if (c.p90_h > req.deadline_h) {
        auto [takes, deadline] = format_hours_apart(c.p90_h, req.deadline_h);
        c.why_not = fmt::format("takes {}{} (deadline {})", takes, c.spot ? " at the 90th percentile" : "", deadline);
    } else if (c.cost_p90 > req.budget)
        c.why_not = fmt::format("costs {:.2f}{} (budget {:.2f})", c.cost_p90, c.spot ? " at the 90th percentile" : "",
                                req.budget);
    c.feasible = c.why_not.empty();
    return c;
}

bool ranks_before(const Candidate& a, const Candidate& b, Objective o) {
    double ao = a.objective_value(o), bo = b.objective_value(o);
    if (ao != bo) return ao < bo;
    double as = o == Objective::kCost ? a.expected_h : a.cost, bs = o == Objective::kCost ? b.expected_h : b.cost;
    if (as != bs) return as < bs;
    if (a.inst != b.inst) return a.inst->key() < b.inst->key() || (a.inst->key() == b.inst->key() && a.inst < b.inst);
    if (a.nodes != b.nodes) return a.nodes < b.nodes;
    return a.spot < b.spot;
}

Result<Plan> plan_brute_force(const Catalog& catalog, const PlanRequest& req, const ThroughputModel& model) {
    STRATO_RETURN_IF_ERROR(req.validate(catalog));
    Plan plan;
    std::vector<Candidate> all;
    for (const auto& in : catalog.instances()) {
        if (!in_space(req, in)) continue;
        for (int spot = 0; spot < 2; ++spot) {
            if ((spot && (!req.spot || !in.has_spot())) || (!spot && (!req.ondemand || !in.has_ondemand()))) continue;
            for (int n = 1; n <= req.max_nodes; ++n) all.push_back(evaluate(req, model, catalog.currency(), in, n, spot));
        }
    }
    plan.candidates = plan.evaluated = all.size();
    // One row per (instance row, market): its best node count.
    std::vector<Candidate> ok;
    for (const auto& c : all) {
        if (!c.feasible) continue;
        auto same = std::find_if(ok.begin(), ok.end(), [&](const Candidate& o) { return o.inst == c.inst && o.spot == c.spot; });
        if (same == ok.end()) ok.push_back(c);
        else if (ranks_before(c, *same, req.objective)) *same = c;
    }
    std::sort(ok.begin(), ok.end(), [&](const Candidate& a, const Candidate& b) { return ranks_before(a, b, req.objective); });
    if (ok.size() > static_cast<size_t>(req.top)) ok.resize(req.top);
    plan.ranked = std::move(ok);
    if (plan.ranked.empty()) explain(plan, req, all, catalog, model);
    annotate(plan, req, model);
    return plan;
}

Result<Plan> make_plan(const Catalog& catalog, const PlanRequest& req, const ThroughputModel& model) {
    STRATO_RETURN_IF_ERROR(req.validate(catalog));
    const Currency& cur = catalog.currency();
    struct Group {
        const Instance* inst;
        bool spot;
        double bound;
    };
    std::vector<Group> groups;
    for (const auto& in : catalog.instances()) {
        if (!in_space(req, in)) continue;
        if (req.ondemand && in.has_ondemand()) groups.push_back({&in, false, lower_bound(req, model, cur, in, false)});
        if (req.spot && in.has_spot()) groups.push_back({&in, true, lower_bound(req, model, cur, in, true)});
    }
    std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.bound < b.bound; });
    Plan plan;
    plan.candidates = groups.size() * req.max_nodes;
    // The best `top` feasible candidates so far, kept sorted; a group whose bound is above the
    // worst of them cannot place anything (every later group is bounded higher still).
    std::vector<Candidate> best;
    std::vector<Candidate> rejected;  // only needed to explain an empty plan
    auto worst = [&] { return best.size() < static_cast<size_t>(req.top) ? INFINITY : best.back().objective_value(req.objective); };
    for (const Group& g : groups) {
        // The bound can be attained exactly (an input-bound job), so allow for rounding.
        if (g.bound > worst() * (1 + 1e-9)) break;
        std::optional<Candidate> group_best;
        for (int n = 1; n <= req.max_nodes; ++n) {
            Candidate c = evaluate(req, model, cur, *g.inst, n, g.spot);
            ++plan.evaluated;
            if (!c.feasible) {
                if (best.empty()) rejected.push_back(std::move(c));
                continue;
            }
            if (!group_best || ranks_before(c, *group_best, req.objective)) group_best = std::move(c);
        }
        if (!group_best || group_best->objective_value(req.objective) > worst()) continue;
        auto pos = std::upper_bound(best.begin(), best.end(), *group_best, [&](const Candidate& a, const Candidate& b) {
            return ranks_before(a, b, req.objective);
        });
        best.insert(pos, std::move(*group_best));
        if (best.size() > static_cast<size_t>(req.top)) best.pop_back();
    }
    plan.ranked = std::move(best);
    if (plan.ranked.empty()) explain(plan, req, rejected, catalog, model);
    annotate(plan, req, model);
    return plan;
}

}  // namespace strato::cloud
