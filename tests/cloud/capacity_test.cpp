// The capacity loop (load test -> replicas -> cost per million requests) and the Kubernetes
// manifests' validation.

#include <gtest/gtest.h>

#include <cmath>

#include <limits>

#include "strato/cloud/capacity.h"
#include "strato/cloud/manifests.h"

namespace strato::cloud {
namespace {

nlohmann::json loadtest() {
    // Three levels: 400 req/s at p99 8 ms, 900 at 30 ms, 1000 at 120 ms; the last with errors.
    return nlohmann::json::parse(R"({"kind": "strato-loadtest", "target": "http://127.0.0.1:8000", "points": [
        {"concurrency": 1, "throughput": 400, "latency_us": {"p99": 8000}, "errors": {"total": 0}},
        {"concurrency": 4, "throughput": 900, "latency_us": {"p99": 30000}, "errors": {"total": 0}},
        {"concurrency": 16, "throughput": 1000, "latency_us": {"p99": 12000}, "errors": {"total": 3}}]})");
}

TEST(Capacity, HighestThroughputWithinTheObjective) {
    auto c = replica_capacity(loadtest(), 50);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->qps, 900);  // 1000 req/s had errors
    EXPECT_EQ(c->level, 4);
    EXPECT_EQ(replica_capacity(loadtest(), 10)->qps, 400);
    auto none = replica_capacity(loadtest(), 5);
    ASSERT_FALSE(none.is_ok());
    EXPECT_NE(none.status().message().find("the best p99 was 8.0 ms"), std::string::npos) << none.status().message();
    EXPECT_FALSE(replica_capacity(nlohmann::json::parse(R"({"kind": "strato-plan"})"), 50).is_ok());
    EXPECT_FALSE(replica_capacity(nlohmann::json::parse(R"({"kind": "strato-loadtest", "points": []})"), 50).is_ok());
    // Fields of the wrong type are not a result (nlohmann's value() threw type_error.302 here).
    auto kind = replica_capacity(nlohmann::json::parse(R"({"kind": 5, "points": []})"), 50);
    EXPECT_NE(kind.status().message().find("not a load-test result"), std::string::npos) << kind.status().message();
    auto target = loadtest();
    target["target"] = 5;
    EXPECT_EQ(replica_capacity(target, 50)->qps, 900);
    // Points no load test measures (a negative p99, 1e308 req/s) are not counted.
    auto odd = loadtest();
    odd["points"][0]["latency_us"]["p99"] = -5;
    odd["points"][1]["throughput"] = 1e308;
    EXPECT_FALSE(replica_capacity(odd, 50).is_ok());
}

// Levels that met the objective but failed requests: the error said "the best p99 was 2.0 ms"
// under a 20 ms objective and told the user to relax it.
TEST(Capacity, LevelsWithinTheObjectiveThatHadErrorsSaySo) {
    auto lt = nlohmann::json::parse(R"({"kind": "strato-loadtest", "mode": "concurrency", "points": [
        {"concurrency": 1, "throughput": 100, "latency_us": {"p99": 2000}, "errors": {"total": 3}},
        {"concurrency": 4, "throughput": 300, "latency_us": {"p99": 5000}, "errors": {"total": 10}}]})");
    auto c = replica_capacity(lt, 20);
    ASSERT_FALSE(c.is_ok());
    EXPECT_NE(c.status().message().find("the levels within the objective failed requests (concurrency 1: 3 errors)"),
              std::string::npos)
        << c.status().message();
    EXPECT_EQ(c.status().message().find("relax"), std::string::npos) << c.status().message();
    // Too slow everywhere: relax the objective, or a lower rate for an open-loop test.
    lt["mode"] = "request_rate";
    for (auto& p : lt["points"]) p["errors"]["total"] = 0, p["latency_us"]["p99"] = 90000;
    c = replica_capacity(lt, 20);
    ASSERT_FALSE(c.is_ok());
    EXPECT_NE(c.status().message().find("the best p99 was 90.0 ms); relax the objective or load-test at a lower "
                                        "request rate"),
              std::string::npos)
        << c.status().message();
    // Not one answer at any level (the server was down): said so, not "no measured point".
    auto down = nlohmann::json::parse(R"({"kind": "strato-loadtest", "points": [
        {"concurrency": 4, "throughput": 0, "latency_us": {"p99": 0}, "errors": {"total": 812}}]})");
    c = replica_capacity(down, 20);
    ASSERT_FALSE(c.is_ok());
    EXPECT_EQ(c.status().message(),
              "no load level of the load test answered a request (concurrency 4: 812 errors): was the server up?");
}

TEST(Capacity, ReplicasAndCostPerMillion) {
    const Catalog cat = Catalog::builtin().value();
    CapacityRequest req;
    req.target_qps = 10000;
    req.replica_qps = 900;
    req.instance_types = {"g5.xlarge", "g5.12xlarge"};
    auto rows = capacity_plan(cat, req);
    ASSERT_TRUE(rows.is_ok()) << rows.status().message();
    for (const auto& r : *rows) {
        // 10,000 / (900 x 0.8) = 13.9 replicas: 14 single-GPU instances or 4 four-GPU ones.
        EXPECT_EQ(r.instances, r.inst->gpus == 1 ? 14 : 4) << r.inst->key();
        EXPECT_NEAR(r.cost_per_million, r.inst->ondemand_usd_h * r.instances / (10000 * 3600.0) * 1e6, 1e-9);
    }
    for (size_t i = 1; i < rows->size(); ++i) EXPECT_LE((*rows)[i - 1].cost_per_million, (*rows)[i].cost_per_million);
    req.gpus_per_replica = 2;
    auto pairs = capacity_plan(cat, req);
    ASSERT_TRUE(pairs.is_ok());
    for (const auto& r : *pairs) EXPECT_NE(r.inst->gpus, 1);  // a 1-GPU type cannot hold one
    req.gpus_per_replica = 1024;  // ("no priced instance matches the filters" blamed filters not given)
    auto none = capacity_plan(cat, req);
    ASSERT_FALSE(none.is_ok());
    EXPECT_NE(none.status().message().find("no priced instance has 1024 GPUs for a replica (--gpus-per-replica)"),
              std::string::npos)
        << none.status().message();
    req.gpus_per_replica = 2;
    req.target_qps = 0;
    EXPECT_FALSE(capacity_plan(cat, req).is_ok());
    // A fleet past a million instances was an int overflow: -2147483648 instances, cheapest first.
    req.gpus_per_replica = 1;
    req.target_qps = 1e12;
    auto huge = capacity_plan(cat, req);
    ASSERT_FALSE(huge.is_ok());
    EXPECT_NE(huge.status().message().find("needs more than 1e+06 instances of every matching type"), std::string::npos)
        << huge.status().message();
    req.target_qps = std::numeric_limits<double>::infinity();
    EXPECT_EQ(capacity_plan(cat, req).status().message(), "--qps must be a number > 0");
    // Found by review: a TPU row was offered as a host of strato serve replicas.
    req.target_qps = 20000;
    req.instance_types.clear();
    auto all = capacity_plan(cat, req);
    ASSERT_TRUE(all.is_ok()) << all.status().message();
    for (const auto& r : *all) EXPECT_TRUE(r.inst->accelerator.empty() || r.inst->gpu) << r.inst->key();
    req.accelerators = {"tpu-v6e"};
    EXPECT_NE(capacity_plan(cat, req).status().message().find("--gpu 'tpu-v6e': not in the GPU table"),
              std::string::npos)
        << capacity_plan(cat, req).status().message();
}

TEST(Capacity, AnExactFitIsNotRoundedUpByFloatingPoint) {
    // Found by review: 700 req/s per replica x (1 - 0.3) headroom is 489.99999999999994 in
    // doubles, so a target of exactly 490 req/s was given two instances instead of one.
    const Catalog cat = Catalog::builtin().value();
    CapacityRequest req;
    req.target_qps = 490;
    req.replica_qps = 700;
    req.headroom = 0.3;
    req.instance_types = {"g4dn.xlarge"};
    auto rows = capacity_plan(cat, req);
    ASSERT_TRUE(rows.is_ok()) << rows.status().message();
    for (const auto& r : *rows) EXPECT_EQ(r.instances, 1) << r.inst->key();
    // Just above the fit still takes a second instance.
    req.target_qps = 490.001;
    rows = capacity_plan(cat, req);
    ASSERT_TRUE(rows.is_ok());
    for (const auto& r : *rows) EXPECT_EQ(r.instances, 2) << r.inst->key();
}

// Found by review: `--gpu a10g` was "no instance of the catalog has it" here while `strato plan`
// takes accelerators in any case.
TEST(Capacity, AcceleratorsMatchInAnyCase) {
    const Catalog cat = Catalog::builtin().value();
    CapacityRequest req;
    req.target_qps = 1000;
    req.replica_qps = 300;
    req.accelerators = {"A10G"};
    auto exact = capacity_plan(cat, req);
    req.accelerators = {"a10g"};
    auto lower = capacity_plan(cat, req);
    ASSERT_TRUE(exact.is_ok()) << exact.status().message();
    ASSERT_TRUE(lower.is_ok()) << lower.status().message();
    ASSERT_EQ(exact->size(), lower->size());
    for (size_t i = 0; i < exact->size(); ++i) EXPECT_EQ((*exact)[i].inst, (*lower)[i].inst);
}

TEST(Manifests, ValidatesNamesAndRanges) {
    ManifestOptions o;
    o.name = "fashion";
    auto y = kubernetes_manifests(o);
    ASSERT_TRUE(y.is_ok());
    EXPECT_NE(y->find("kind: HorizontalPodAutoscaler"), std::string::npos);
    EXPECT_NE(y->find("averageUtilization: 70"), std::string::npos);
    o.kserve = true;
    EXPECT_NE(kubernetes_manifests(o)->find("kind: InferenceService"), std::string::npos);
    o.name = "Fashion";
    EXPECT_FALSE(kubernetes_manifests(o).is_ok());
    o.name = "fashion";
    o.min_replicas = 9;
    EXPECT_FALSE(kubernetes_manifests(o).is_ok());
}

TEST(Manifests, ValuesAreQuotedOrRefusedNeverYamlOfTheirOwn) {
    ManifestOptions o;
    o.name = "fashion";
    o.image = "registry.example/strato:0.1";
    o.model_dir = "/m \"x\": y";
    auto y = kubernetes_manifests(o);
    ASSERT_TRUE(y.is_ok()) << y.status().message();
    EXPECT_NE(y->find("name: \"fashion\""), std::string::npos) << *y;       // a string in YAML 1.1 too
    EXPECT_NE(y->find("\"/m \\\"x\\\": y\""), std::string::npos) << *y;   // escaped, one scalar
    EXPECT_NE(y->find("memory: \"4Gi\""), std::string::npos) << *y;
    const auto refused = [&](auto set, const std::string& said) {
        ManifestOptions b = o;
        set(b);
        auto r = kubernetes_manifests(b);
        ASSERT_FALSE(r.is_ok()) << said;
        EXPECT_NE(r.status().message().find(said), std::string::npos) << r.status().message();
    };
    refused([](ManifestOptions& b) { b.name = "123"; }, "not a valid Kubernetes name");  // DNS-1035: a letter first
    refused([](ManifestOptions& b) { b.image = "x\nkind: Pod"; }, "--image");
    refused([](ManifestOptions& b) { b.image = "repo/x #tag"; }, "--image");
    refused([](ManifestOptions& b) { b.memory = "{a"; }, "--memory");
    refused([](ManifestOptions& b) { b.cpu = ""; }, "--cpu");
    refused([](ManifestOptions& b) { b.gpus = -2; }, "--gpus");
    refused([](ManifestOptions& b) { b.min_replicas = 0; }, "needs --kserve");
    refused([](ManifestOptions& b) { b.pending_per_pod = std::nan(""); }, "--pending-per-pod");
    refused([](ManifestOptions& b) { b.pending_per_pod = 1e300; }, "--pending-per-pod");
    refused([](ManifestOptions& b) { b.pending_per_pod = -3; }, "--pending-per-pod");
    refused([](ManifestOptions& b) { b.kserve = true, b.pending_per_pod = 2.7; }, "whole number");
    // Found by review: DEL and U+FFFE made YAML that parsers refuse, NEL (U+0085) a line break, and
    // bytes that are not UTF-8 became U+FFFD: another path.
    for (const char* dir : {"/m\x7fx", "/m\xef\xbf\xbex", "/m\xc2\x85x", "/m\xffx", "/m\tx"})
        refused([&](ManifestOptions& b) { b.model_dir = dir; }, "only printable ASCII");
    {
        ManifestOptions b = o;
        b.pending_per_pod = 123456.7;  // {:g} wrote 123457
        EXPECT_NE(kubernetes_manifests(b)->find("averageValue: \"123456.7\""), std::string::npos);
    }
    for (const char* cpu : {"2", "500m", "1.5", "1e3"}) {
        ManifestOptions b = o;
        b.cpu = cpu;
        EXPECT_TRUE(kubernetes_manifests(b).is_ok()) << cpu;
    }
}

// Found by review: `--memory 512m` (Docker's megabytes) is 0.512 bytes in Kubernetes and a bare
// `--memory 4` four bytes; the manifests were written and every pod died at start.
TEST(Manifests, MemoryIsAtLeastOneMebibyte) {
    ManifestOptions o;
    o.name = "fashion";
    for (const char* tiny : {"512m", "4", "1000k", "1e3", "0", "1023Ki"}) {
        o.memory = tiny;
        auto r = kubernetes_manifests(o);
        ASSERT_FALSE(r.is_ok()) << tiny;
        EXPECT_NE(r.status().message().find("--memory '" + std::string(tiny) + "'"), std::string::npos)
            << r.status().message();
    }
    o.memory = "512m";
    EXPECT_NE(kubernetes_manifests(o).status().message().find("for megabytes write '512Mi'"), std::string::npos)
        << kubernetes_manifests(o).status().message();
    for (const char* fine : {"1Mi", "512Mi", "4Gi", "1.5Gi", "2G", "1e9", "1048576", "1E", "1Ei"}) {
        o.memory = fine;
        EXPECT_TRUE(kubernetes_manifests(o).is_ok()) << fine << ": " << kubernetes_manifests(o).status().message();
    }
    o.memory = std::string(400, '9');  // (a quantity of 400 digits: no exception on the way)
    EXPECT_TRUE(kubernetes_manifests(o).is_ok());
}

// Found by review: the Deployment carried `replicas: <min>` beside its HPA, so every `kubectl
// apply` of the same file (a new image tag) scaled a loaded service down to min_replicas; the
// Kubernetes HPA documentation says to leave spec.replicas out.
TEST(Manifests, DeploymentLeavesTheReplicaCountToTheHpa) {
    ManifestOptions o;
    o.name = "fashion";
    o.min_replicas = 3;
    const std::string y = kubernetes_manifests(o).value();
    const std::string deployment = y.substr(0, y.find("---"));
    EXPECT_NE(deployment.find("kind: Deployment"), std::string::npos);
    EXPECT_EQ(deployment.find("replicas"), std::string::npos) << deployment;
    EXPECT_NE(y.find("  minReplicas: 3\n  maxReplicas: 8\n"), std::string::npos) << y;
}

// Found by review: the InferenceService's container was "strato", which KServe's webhook renames
// to kserve-container (its storage and agent injection find the container by that name): the
// applied manifest never matched the live object.
TEST(Manifests, KServeContainerIsNamedAsKServeNamesIt) {
    ManifestOptions o;
    o.name = "fashion";
    o.kserve = true;
    EXPECT_NE(kubernetes_manifests(o)->find("    - name: kserve-container\n"), std::string::npos)
        << kubernetes_manifests(o).value();
    o.kserve = false;
    EXPECT_NE(kubernetes_manifests(o)->find("      - name: strato\n"), std::string::npos);
}

// The ranges --help shows are the ones the library checks; a message names the flags.
TEST(Manifests, ReplicaRangeNamesTheFlags) {
    ManifestOptions o;
    o.name = "fashion";
    o.max_replicas = kReplicasMax;
    EXPECT_TRUE(kubernetes_manifests(o).is_ok());
    o.max_replicas = kReplicasMax + 1;
    auto r = kubernetes_manifests(o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("--max-replicas 150001"), std::string::npos) << r.status().message();
    o.max_replicas = 8;
    o.min_replicas = -3;
    EXPECT_NE(kubernetes_manifests(o).status().message().find("--min-replicas -3"), std::string::npos);
    o.min_replicas = 1;
    o.gpus = kGpusPerPodMax + 1;
    EXPECT_NE(kubernetes_manifests(o).status().message().find("--gpus 65 must be 0..64"), std::string::npos);
}


// KServe's predictor host is NAME-predictor-NAMESPACE.DOMAIN: its first label is at most 63
// characters, so the name that fits is shorter than 63 (a 50-character name in "default" was
// written, applied, and never became ready).
TEST(Manifests, KServeNamesLeaveRoomForThePredictorHost) {
    ManifestOptions o;
    o.kserve = true;
    o.name = std::string(45, 'a');  // 45 + "-predictor-" + "default" = 63
    EXPECT_TRUE(kubernetes_manifests(o).is_ok()) << kubernetes_manifests(o).status().message();
    o.name = std::string(46, 'a');
    auto r = kubernetes_manifests(o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("would be 64 characters"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("at most 45 characters"), std::string::npos) << r.status().message();
    o.name = "fashion";
    o.namespace_ = std::string(60, 'n');  // a valid namespace that leaves no room at all
    r = kubernetes_manifests(o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("leaves no room for a name"), std::string::npos) << r.status().message();
    // A Deployment has no such host: the whole 63 characters are the name's.
    o.kserve = false;
    o.namespace_ = "default";
    o.name = std::string(63, 'a');
    EXPECT_TRUE(kubernetes_manifests(o).is_ok());
}

}  // namespace
}  // namespace strato::cloud
