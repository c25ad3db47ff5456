#pragma once
// The capacity loop: from a `strato loadtest --json` result, the highest throughput one replica
// sustained within a p99 latency objective; from that, the replicas a target request rate needs
// and the cost per million requests on each instance type of the catalog (one replica per GPU,
// or per instance for CPU-only types).
//
// NOTE: the throughput is what the load test measured where it ran. Load-test on the instance
// type you plan for, or pass the per-replica rate you know (`replica_qps`).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strato/cloud/catalog.h"

namespace strato::cloud {

struct ReplicaCapacity {
    double qps = 0;          // highest throughput within the objective
    double p99_ms = 0;       // its p99
    double level = 0;        // the concurrency or rate that reached it
    int points = 0, within = 0;
    std::string target;
};

/// Reads the points of a strato-loadtest JSON object; kNotFound when no point meets `slo_p99_ms`
/// (says the best p99 seen), kInvalidArgument when it is not a load-test result.
Result<ReplicaCapacity> replica_capacity(const nlohmann::json& loadtest, double slo_p99_ms);

struct CapacityRow {
    const Instance* inst = nullptr;
    int replicas_per_instance = 1;
    int instances = 0;          // for the target rate, with headroom
    double cost_per_hour = 0;   // all instances, on-demand (catalog currency)
    double cost_per_million = 0;
};

struct CapacityRequest {
    double target_qps = 0;
    double replica_qps = 0;     // from replica_capacity or given
    double headroom = 0.2;      // keep this fraction of capacity free
    int gpus_per_replica = 1;
    std::vector<std::string> instance_types, accelerators;  // filters; empty: every priced type
    bool spot = false;
};

/// One row per instance row of the catalog, cheapest per million requests first.
Result<std::vector<CapacityRow>> capacity_plan(const Catalog& catalog, const CapacityRequest& req);

}  // namespace strato::cloud
