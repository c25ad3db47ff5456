#include "strato/cloud/capacity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strato::cloud {

Result<ReplicaCapacity> replica_capacity(const nlohmann::json& lt, double slo_p99_ms) {
    if (!lt.is_object() || !lt.contains("kind") || lt["kind"] != "strato-loadtest" || !lt.contains("points") ||
        !lt["points"].is_array())
        return invalid_argument("not a load-test result (expected \"kind\": \"strato-loadtest\" with points, as "
                                "`strato loadtest --json` writes)");
    ReplicaCapacity c;
    if (lt.contains("target") && lt["target"].is_string()) c.target = lt["target"].get<std::string>();
    double best_p99 = INFINITY;
    std::string failed_fast;  // a level within the objective that had errors
    std::string failed_all;   // a level that answered nothing, only errors
    const bool rate_mode = lt.contains("mode") && lt["mode"] == "request_rate";
    for (const auto& p : lt["points"]) {
        if (!p.is_object()) continue;
        double tput = p.contains("throughput") && p["throughput"].is_number() ? p["throughput"].get<double>() : 0;
        const auto* lat = p.contains("latency_us") && p["latency_us"].is_object() ? &p["latency_us"] : nullptr;
        double p99 = lat && lat->contains("p99") && (*lat)["p99"].is_number() ? (*lat)["p99"].get<double>() / 1e3 : NAN;
        double errors = 0;
        if (p.contains("errors") && p["errors"].is_object() && p["errors"].contains("total") &&
            p["errors"]["total"].is_number())
            errors = p["errors"]["total"].get<double>();
        std::string level;
        for (const char* k : {"concurrency", "request_rate"})
            if (p.contains(k) && p[k].is_number()) level = fmt::format("{} {:g}", k, p[k].get<double>());
        const std::string failed = fmt::format("{}{}{:g} errors", level, level.empty() ? "" : ": ", errors);
        // Not one answer, only errors (a server that was down): a failed level, not a point to skip
        // ("the load-test result has no measured point" hid why).
        if (tput == 0 && errors > 0 && failed_all.empty()) failed_all = failed;
        // A point a load test could have measured: a rate below 1e9/s, a p99 of 0 or more.
        if (!(tput > 0 && tput < 1e9) || !(p99 >= 0 && p99 < 1e9)) continue;
        ++c.points;
        best_p99 = std::min(best_p99, p99);
        // The first level that met the objective yet failed requests: the error to report ("the
        // best p99 was 2.0 ms" under a 20 ms objective said nothing of why).
        if (p99 <= slo_p99_ms && errors > 0 && failed_fast.empty()) failed_fast = failed;
        if (p99 > slo_p99_ms || errors > 0) continue;
        ++c.within;
        if (tput > c.qps) {
            c.qps = tput;
            c.p99_ms = p99;
            for (const char* k : {"concurrency", "request_rate"})
                if (p.contains(k) && p[k].is_number()) c.level = p[k].get<double>();
        }
    }
    if (c.points == 0 && !failed_all.empty())
        return not_found("no load level of the load test answered a request ({}): was the server up?", failed_all);
    if (c.points == 0) return invalid_argument("the load-test result has no measured point");
    if (c.within == 0 && !failed_fast.empty())
        return not_found("no load level met p99 <= {:g} ms without errors: the levels within the objective failed "
                         "requests ({}); a capacity with errors is no capacity: find their cause (the load test's "
                         "error breakdown) and load-test again",
                         slo_p99_ms, failed_fast);
    if (c.within == 0)
        return not_found("no load level met p99 <= {:g} ms without errors (the best p99 was {:.1f} ms); relax the "
                         "objective or load-test at a lower {}",
                         slo_p99_ms, best_p99, rate_mode ? "request rate" : "concurrency");
    return c;
}

Result<std::vector<CapacityRow>> capacity_plan(const Catalog& catalog, const CapacityRequest& req) {
    if (!(req.target_qps > 0) || !std::isfinite(req.target_qps)) return invalid_argument("--qps must be a number > 0");
    if (!(req.replica_qps > 0) || !std::isfinite(req.replica_qps))
        return invalid_argument("the per-replica rate must be a number > 0");
    if (!(req.headroom >= 0 && req.headroom < 1)) return invalid_argument("--headroom must be in [0, 1)");
    if (req.gpus_per_replica < 1) return invalid_argument("--gpus-per-replica must be >= 1");
    for (const auto& t : req.instance_types) STRATO_RETURN_IF_ERROR(catalog.find(t).status());
    // A replica is strato serve: on a GPU of the GPU table, or on CPUs; not on another accelerator
    // (a TPU).
    const auto servable = [](const Instance& in) { return in.accelerator.empty() || in.gpu; };
    for (const auto& a : req.accelerators) {
        // In any case, as `strato plan --gpu` takes them ("a10g" is the A10G).
        const bool listed = std::any_of(catalog.instances().begin(), catalog.instances().end(),
                                        [&](const Instance& in) { return detail::equals_any_case(in.accelerator, a); });
        const bool usable =
            std::any_of(catalog.instances().begin(), catalog.instances().end(),
                        [&](const Instance& in) { return detail::equals_any_case(in.accelerator, a) && in.gpu; });
        if (!usable)
            return invalid_argument("--gpu '{}': {}", a,
                                    listed ? "not in the GPU table (data/cloud/gpus.csv); replicas are placed on the "
                                             "GPUs listed there"
                                           : "no instance of the catalog has it");
    }
    constexpr double kMaxInstances = 1e6;
    std::vector<CapacityRow> rows;
    int too_many = 0, too_few_gpus = 0;
    for (const auto& in : catalog.instances()) {
        if (!req.instance_types.empty() &&
            std::find(req.instance_types.begin(), req.instance_types.end(), in.type) == req.instance_types.end())
            continue;
        if (!req.accelerators.empty() &&
            std::none_of(req.accelerators.begin(), req.accelerators.end(),
                         [&](const std::string& a) { return detail::equals_any_case(in.accelerator, a); }))
            continue;
        double price = req.spot ? in.spot_usd_h : in.ondemand_usd_h;
        if (!(price > 0) || !std::isfinite(price) || !servable(in)) continue;
        CapacityRow r;
        r.inst = &in;
        r.replicas_per_instance = in.gpus > 0 ? std::max(1, in.gpus / req.gpus_per_replica) : 1;
        if (in.gpus > 0 && in.gpus < req.gpus_per_replica) {
            ++too_few_gpus;
            continue;
        }
        double per_instance = r.replicas_per_instance * req.replica_qps * (1 - req.headroom);
        // A relative tolerance for the rounding of the products above: 490 req/s at 700 x (1 - 0.3)
        // = 489.99999999999994 per instance is one instance, not two.
        const double needed = std::ceil(req.target_qps / per_instance * (1 - 1e-12));
        if (needed > kMaxInstances) {  // no fleet: say so below rather than wrap into a negative count
            ++too_many;
            continue;
        }
        r.instances = static_cast<int>(needed);
        r.cost_per_hour = catalog.currency().convert(price) * r.instances;
        r.cost_per_million = r.cost_per_hour / (req.target_qps * 3600) * 1e6;
        rows.push_back(r);
    }
    if (rows.empty() && too_many > 0)
        return invalid_argument("{:g} req/s at {:g} req/s per replica needs more than {:g} instances of every matching "
                                "type",
                                req.target_qps, req.replica_qps, kMaxInstances);
    if (rows.empty() && too_few_gpus > 0)
        return not_found("no priced instance has {} GPUs for a replica (--gpus-per-replica){}", req.gpus_per_replica,
                         req.instance_types.empty() && req.accelerators.empty() ? "" : " among those the filters keep");
    if (rows.empty()) return not_found("no priced instance matches the filters");
    std::sort(rows.begin(), rows.end(), [](const CapacityRow& a, const CapacityRow& b) {
        return a.cost_per_million != b.cost_per_million ? a.cost_per_million < b.cost_per_million
                                                        : a.inst->key() < b.inst->key();
    });
    return rows;
}

}  // namespace strato::cloud
