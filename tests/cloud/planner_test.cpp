// The throughput model against NVIDIA's published ResNet-50 throughput, the spot model, the
// planner against a brute-force search, and the errors for plans nothing can meet.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "strato/cloud/planner.h"

namespace strato::cloud {
namespace {

const char* kInstanceHeader =
    "provider,region,instance_type,accelerator,accelerator_count,vcpus,memory_gib,network_gbps,"
    "ondemand_usd_per_hour,spot_usd_per_hour,source\n";

// A catalog of `rows` under the instance header, with the built-in GPU and spot tables.
Catalog catalog_of(const std::string& rows) {
    return Catalog::parse(std::string(kInstanceHeader) + rows, "t.csv", detail::kGpusCsv, "g.csv", detail::kSpotCsv, "s.csv").value();
}

Workload resnet50(Precision p = Precision::kAmp) {
    Workload w = find_workload("resnet50-imagenet").value();
    w.precision = p;
    return w;
}

// NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 (container 21.03, DGX A100 80GB / DGX-1 V100
// 16GB), training images/s; and the TensorFlow1 README for A100 40GB.
struct Published {
    const char* gpu;
    Precision precision;
    int gpus;
    double images_per_s;
};

TEST(Throughput, CalibratedAgainstNvidiaResNet50) {
    const Catalog cat = Catalog::builtin().value();
    ThroughputModel model;
    const Published table[] = {
        {"A100-80GB", Precision::kAmp, 1, 2470}, {"A100-80GB", Precision::kFp32, 1, 938},
        {"V100", Precision::kAmp, 1, 1200},      {"V100", Precision::kFp32, 1, 367},
        {"A100", Precision::kAmp, 1, 2375},      {"A100", Precision::kFp32, 1, 909},
    };
    for (const auto& p : table) {
        double est = model.single_gpu(resnet50(p.precision), *cat.gpu(p.gpu));
        EXPECT_NEAR(est / p.images_per_s, 1.0, 0.25) << p.gpu << " est " << est << " published " << p.images_per_s;
    }
}

TEST(Throughput, HopperScalesAsLambdaMeasured) {
    // Lambda's ResNet-50 training (FP16 / TF32): H100 SXM is 1.65x / 1.64x an A100 80GB SXM.
    const Catalog cat = Catalog::builtin().value();
    ThroughputModel model;
    for (auto [p, measured] : {std::pair{Precision::kAmp, 2616.0 / 1582}, {Precision::kFp32, 1753.0 / 1066}}) {
        double ratio = model.single_gpu(resnet50(p), *cat.gpu("H100")) / model.single_gpu(resnet50(p), *cat.gpu("A100-80GB"));
        EXPECT_NEAR(ratio / measured, 1.0, 0.1) << ratio;
    }
}

TEST(Throughput, ImageNet90EpochsOn8xA100WithinQuarterOfNvidia) {
    const Catalog cat = Catalog::builtin().value();
    ThroughputModel model;
    Workload w = resnet50();
    // DGX A100 80GB, 8 GPUs AMP: 16621 img/s; A100 40GB (TF1 + XLA): 17400 img/s.
    const std::pair<const char*, double> cases[] = {{"p4de.24xlarge", 16621}, {"p4d.24xlarge", 17400}};
    for (const auto& [type, published] : cases) {
        const Instance& inst = *cat.find(type).value();
        Throughput t = model.estimate(w, inst, 1);
        double hours = w.total_samples() / t.samples_per_s / 3600;
        double nvidia_hours = w.total_samples() / published / 3600;
        EXPECT_NEAR(hours / nvidia_hours, 1.0, 0.25) << type << ": " << hours << " h vs " << nvidia_hours << " h";
        EXPECT_TRUE(t.fits);
        EXPECT_GT(t.scaling_efficiency, 0.8);
    }
}

TEST(Throughput, AllReduceDominatesOnSlowNetworks) {
    const Catalog cat = Catalog::builtin().value();
    ThroughputModel model;
    Workload w = find_workload("vgg16-imagenet").value();  // 138 M parameters: 553 MB of gradients
    w.batch_per_gpu = 16;  // a small batch per GPU leaves little backward pass to hide them behind
    Throughput one = model.estimate(w, *cat.find("g4dn.xlarge").value(), 1);
    Throughput eight = model.estimate(w, *cat.find("g4dn.xlarge").value(), 16);
    EXPECT_EQ(eight.bound, "all-reduce");
    EXPECT_LT(eight.scaling_efficiency, 0.5);
    EXPECT_GT(eight.samples_per_s, one.samples_per_s);
    // The input pipeline caps a 4-vCPU node: ResNet-18 on a g5.xlarge.
    Throughput in = model.estimate(find_workload("resnet18-imagenet").value(), *cat.find("g5.xlarge").value(), 1);
    EXPECT_EQ(in.bound, "input pipeline");
    EXPECT_DOUBLE_EQ(in.samples_per_s, 4 * 400);
}

// Found by review: scaling efficiency was measured against one GPU without the 2 ms step
// overhead, so one GPU "scaled" at 0.62 on a small model; and the measured efficiencies, which
// docs/plan.md calls a cap, were multiplied on top of the modelled all-reduce time (the
// communication counted twice).
TEST(Throughput, OneGpuScalesAtOneAndMeasuredEfficienciesAreACap) {
    const Catalog cat = Catalog::builtin().value();
    ThroughputModel model;
    // A small CNN (38 MFLOPs forward, batch 128): a step's work is far below the overhead.
    Workload tiny = resnet50();
    tiny.fwd_flops = 3.8e7;
    tiny.activations = 2e5;
    tiny.params = 8.7e5;
    tiny.batch_per_gpu = 128;
    tiny.decode_per_vcpu = 0;  // (tensors in memory: no input pipeline)
    for (const char* type : {"g5.xlarge", "p3.2xlarge"}) {
        Throughput one = model.estimate(tiny, *cat.find(type).value(), 1);
        EXPECT_DOUBLE_EQ(one.scaling_efficiency, 1.0) << type;
        EXPECT_DOUBLE_EQ(one.samples_per_s, one.per_gpu_samples_per_s) << type;
        EXPECT_EQ(one.bound, "step overhead") << type;
    }
    Throughput one = model.estimate(resnet50(), *cat.find("g5.xlarge").value(), 1);
    EXPECT_DOUBLE_EQ(one.scaling_efficiency, 1.0);
    EXPECT_EQ(one.bound, "compute");
    // 8 x A100 on NVLink hide the all-reduce behind backward: the measured 0.90 binds.
    Throughput p4d = model.estimate(resnet50(), *cat.find("p4d.24xlarge").value(), 1);
    EXPECT_EQ(p4d.exposed_comm_s, 0);
    EXPECT_DOUBLE_EQ(p4d.scaling_efficiency, 0.90);
    // 16 single-T4 nodes on a 25 Gb/s network: the modelled all-reduce binds, not 0.75 x it.
    Workload vgg = find_workload("vgg16-imagenet").value();
    vgg.batch_per_gpu = 16;
    Throughput net = model.estimate(vgg, *cat.find("g4dn.xlarge").value(), 16);
    const double modelled = (net.step_s - net.exposed_comm_s) / net.step_s;
    ASSERT_LT(modelled, inter_node_efficiency(25));
    EXPECT_NEAR(net.scaling_efficiency, modelled, 1e-12);
    EXPECT_NEAR(net.samples_per_s, 16 * net.per_gpu_samples_per_s * modelled, 1e-9 * net.samples_per_s);
}

TEST(Throughput, MemoryFit) {
    ThroughputModel model;
    Workload w = resnet50();  // NVIDIA trains 256 per V100 16GB with AMP, 112 in FP32
    EXPECT_LT(model.memory_needed_gb(w), 16);
    w.precision = Precision::kFp32;
    EXPECT_GT(model.memory_needed_gb(w), 16);
    w.batch_per_gpu = 112;
    EXPECT_LT(model.memory_needed_gb(w), 16);
}

TEST(Spot, NoHazardIsJustTheWork) {
    SpotEstimate e = estimate_spot({.work_s = 3600, .hazard_per_s = 0, .checkpoint_s = 10, .restart_s = 60});
    EXPECT_DOUBLE_EQ(e.expected_wall_s, 3600);
    EXPECT_DOUBLE_EQ(e.expected_interruptions, 0);
    EXPECT_DOUBLE_EQ(e.interval_s, 3600);
}

TEST(Spot, YoungIntervalAndExpectation) {
    // One preemption per 10 h on average, 60 s checkpoints: Young's interval sqrt(2 x 60 x 36000) s.
    double lambda = 1.0 / 36000;
    EXPECT_NEAR(young_interval(60, lambda, 1e9), std::sqrt(2 * 60 * 36000.0), 1e-6);
    SpotEstimate e = estimate_spot({.work_s = 100 * 3600, .hazard_per_s = lambda, .checkpoint_s = 60, .restart_s = 300});
    // First order: work (1 + C/tau) + interruptions x (R + tau/2), interruptions ~ wall x lambda.
    double tau = e.interval_s;
    double first_order = 100 * 3600 * (1 + 60 / tau) / (1 - lambda * (300 + (tau + 60) / 2));
    EXPECT_NEAR(e.expected_wall_s / first_order, 1.0, 0.02);
    EXPECT_NEAR(e.expected_interruptions, e.expected_wall_s * lambda, 0.05 * e.expected_interruptions);
    EXPECT_LT(e.p10_wall_s, e.expected_wall_s);
    EXPECT_GT(e.p90_wall_s, e.expected_wall_s);
    // The Young interval is (close to) the minimum over intervals.
    for (double f : {0.5, 2.0}) {
        SpotEstimate other =
            estimate_spot({.work_s = 100 * 3600, .hazard_per_s = lambda, .checkpoint_s = 60, .restart_s = 300,
                           .interval_s = tau * f});
        EXPECT_GT(other.expected_wall_s, e.expected_wall_s * 0.999);
    }
}

TEST(Spot, WorkThatIsAWholeNumberOfIntervalsCheckpointsBetweenThemOnly) {
    // Found by review (with the capacity rounding): 3 x 2764.8 / 2764.8 is 3.0000000000000004 in
    // doubles, so a job of exactly three intervals was cut into four segments and paid a third
    // checkpoint after its last step.
    const double tau = 1.35 * 2048;
    ASSERT_GT(3 * tau / tau, 3.0);  // (the case this test is about)
    SpotEstimate e = estimate_spot({.work_s = 3 * tau, .hazard_per_s = 0, .checkpoint_s = 10, .restart_s = 60,
                                    .interval_s = tau});
    EXPECT_DOUBLE_EQ(e.expected_wall_s, 3 * tau + 2 * 10);
}

TEST(Spot, PoissonQuantiles) {
    EXPECT_EQ(poisson_quantile(0, 0.9), 0);
    EXPECT_EQ(poisson_quantile(1, 0.5), 1);
    EXPECT_EQ(poisson_quantile(4, 0.9), 7);
    EXPECT_NEAR(poisson_quantile(10000, 0.9), 10000 + 1.2816 * 100, 2);
    // Found by review: a mean past int64 (1e21 interruptions) was cast to an integer (UB): the
    // 10-90 % range came out below the mean.
    EXPECT_NEAR(poisson_quantile(1e21, 0.1), 1e21 - 1.2816 * std::sqrt(1e21), 1e11);
    EXPECT_GT(poisson_quantile(1e21, 0.9), 1e21);
    EXPECT_EQ(poisson_quantile(INFINITY, 0.5), INFINITY);
}

PlanRequest random_request(std::mt19937_64& rng, const std::vector<Workload>& presets) {
    PlanRequest r;
    r.workload = presets[rng() % presets.size()];
    std::uniform_real_distribution<double> u(0, 1);
    r.workload.epochs = 1 + static_cast<int>(rng() % 120);
    r.workload.batch_per_gpu = 8 << (rng() % 6);
    r.workload.precision = rng() % 2 ? Precision::kAmp : Precision::kFp32;
    r.workload.optimizer = rng() % 2 ? "sgd" : "adam";
    r.workload.dataset_samples *= 0.05 + u(rng);
    r.objective = rng() % 2 ? Objective::kCost : Objective::kTime;
    if (rng() % 2) r.deadline_h = std::exp(std::log(0.5) + u(rng) * std::log(400.0));
    if (rng() % 3 == 0) r.budget = std::exp(std::log(5.0) + u(rng) * std::log(2000.0));
    r.max_nodes = 1 + static_cast<int>(rng() % 12);
    int m = static_cast<int>(rng() % 4);
    r.ondemand = m != 1;
    r.spot = m != 2;
    if (rng() % 4 == 0) r.providers = {rng() % 2 ? "aws" : "gcp"};
    r.top = 1 + static_cast<int>(rng() % 10);
    return r;
}

TEST(Planner, EqualsBruteForceOn200RandomJobs) {
    const Catalog cat = Catalog::builtin().value();
    const std::vector<Workload> presets = builtin_workloads().value();
    std::mt19937_64 rng(20261203);
    int feasible = 0;
    size_t evaluated = 0, candidates = 0;
    for (int i = 0; i < 200; ++i) {
        PlanRequest req = random_request(rng, presets);
        Plan fast = make_plan(cat, req).value();
        Plan slow = plan_brute_force(cat, req).value();
        ASSERT_EQ(fast.ranked.size(), slow.ranked.size()) << "job " << i;
        for (size_t k = 0; k < fast.ranked.size(); ++k) {
            EXPECT_EQ(fast.ranked[k].inst, slow.ranked[k].inst) << "job " << i << " rank " << k;
            EXPECT_EQ(fast.ranked[k].nodes, slow.ranked[k].nodes) << "job " << i << " rank " << k;
            EXPECT_EQ(fast.ranked[k].spot, slow.ranked[k].spot) << "job " << i << " rank " << k;
            EXPECT_EQ(fast.ranked[k].cost, slow.ranked[k].cost);
        }
        EXPECT_EQ(fast.binding, slow.binding) << "job " << i;
        feasible += !fast.ranked.empty();
        evaluated += fast.evaluated;
        candidates += fast.candidates;
    }
    // The random specs must exercise both outcomes, and the bound must actually prune.
    EXPECT_GT(feasible, 50);
    EXPECT_LT(feasible, 200);
    EXPECT_LT(evaluated, candidates);
}

TEST(Planner, RanksWithReasonsAndSpotDetails) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.deadline_h = 8;
    Plan p = make_plan(cat, req).value();
    ASSERT_FALSE(p.ranked.empty());
    EXPECT_EQ(p.ranked[0].reason.rfind("cheapest that meets the deadline", 0), 0u) << p.ranked[0].reason;
    for (size_t i = 1; i < p.ranked.size(); ++i) EXPECT_LE(p.ranked[i - 1].cost, p.ranked[i].cost);
    for (const auto& c : p.ranked) {
        EXPECT_LE(c.expected_h, 8);
        if (c.spot) {
            EXPECT_GT(c.interruptions, 0);
            EXPECT_LE(c.checkpoint_interval_h, c.work_h);
            EXPECT_LE(c.p10_h, c.expected_h);
            EXPECT_GE(c.p90_h, c.expected_h);
        }
    }
    req.objective = Objective::kTime;
    Plan t = make_plan(cat, req).value();
    ASSERT_FALSE(t.ranked.empty());
    EXPECT_EQ(t.ranked[0].reason.rfind("fastest", 0), 0u);
    EXPECT_LT(t.ranked[0].expected_h, p.ranked[0].expected_h);
}

TEST(Planner, SaysWhichConstraintBinds) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.deadline_h = 0.01;
    Plan p = make_plan(cat, req).value();
    EXPECT_TRUE(p.ranked.empty());
    EXPECT_EQ(p.binding.rfind("deadline 36 s: the fastest candidate, ", 0), 0u) << p.binding;

    // Found by review: a deadline inside the 5 min start-up said only what the fastest needs.
    EXPECT_NE(p.binding.find("; the start-up alone (--startup) takes 5 min"), std::string::npos) << p.binding;
    req.deadline_h = 6.0 / 60;
    p = make_plan(cat, req).value();
    EXPECT_EQ(p.binding.rfind("deadline 6 min: the fastest candidate, ", 0), 0u) << p.binding;
    EXPECT_EQ(p.binding.find("start-up"), std::string::npos) << p.binding;

    req.deadline_h = 1e9;
    req.budget = 1;
    p = make_plan(cat, req).value();
    EXPECT_EQ(p.binding.rfind("budget 1.00 USD: the cheapest candidate", 0), 0u) << p.binding;

    req.budget = 1e9;
    req.workload.batch_per_gpu = 4096;
    p = make_plan(cat, req).value();
    EXPECT_EQ(p.binding.rfind("GPU memory: one replica needs", 0), 0u) << p.binding;
}

// Found by review: a multi-node row of an instance whose network the catalog leaves blank (the
// shipped p4de.24xlarge, 400 Gb/s of EFA) was priced with an assumed 25 Gb/s and did not say so.
TEST(Planner, MultiNodeRowsSayWhenTheNetworkIsAssumed) {
    const std::string header =
        "provider,region,instance_type,accelerator,accelerator_count,vcpus,memory_gib,network_gbps,"
        "ondemand_usd_per_hour,spot_usd_per_hour,source\n";
    for (const char* net : {"", "0", "100"}) {
        const Catalog cat = Catalog::parse(header + "aws,r,x,T4,1,4,16," + net + ",0.5,0,s\n", "test.csv",
                                           detail::kGpusCsv, "gpus.csv", detail::kSpotCsv, "spot.csv")
                                .value();
        PlanRequest req;
        req.workload = resnet50();
        req.objective = Objective::kTime;
        req.max_nodes = 4;
        Plan p = make_plan(cat, req).value();
        ASSERT_EQ(p.ranked.size(), 1u);
        ASSERT_EQ(p.ranked[0].nodes, 4);
        const bool said = p.ranked[0].reason.find("network unknown: 25 Gb/s assumed") != std::string::npos;
        EXPECT_EQ(said, std::string(net) != "100") << net << ": " << p.ranked[0].reason;
        req.max_nodes = 1;  // one node: no network in the model
        EXPECT_EQ(make_plan(cat, req).value().ranked[0].reason.find("network"), std::string::npos);
    }
}

// Found by review: every plan that failed on GPU memory said "lower --batch-per-gpu", also for a
// 20B model with Adam, whose weights, gradients and optimizer state (360 GB) fit no GPU at any
// batch; and it never said how far to lower it.
TEST(Planner, MemoryBindingSaysWhichBatchFitsOrThatNoneDoes) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.workload.batch_per_gpu = 4096;
    Plan p = make_plan(cat, req).value();
    ASSERT_TRUE(p.ranked.empty());
    const std::string lower = "lower --batch-per-gpu to ";
    const size_t at = p.binding.find(lower);
    ASSERT_NE(at, std::string::npos) << p.binding;
    const int batch_max = std::stoi(p.binding.substr(at + lower.size()));
    ASSERT_GT(batch_max, 256) << p.binding;  // (256 fits a 16 GB V100 with AMP)
    ASSERT_LT(batch_max, 4096) << p.binding;
    req.workload.batch_per_gpu = batch_max;  // fits the largest GPU
    EXPECT_FALSE(make_plan(cat, req).value().ranked.empty());
    req.workload.batch_per_gpu = batch_max + 1;  // does not
    EXPECT_TRUE(make_plan(cat, req).value().ranked.empty());

    req.workload.params = 20e9;
    req.workload.optimizer = "adam";
    req.workload.batch_per_gpu = 1;
    p = make_plan(cat, req).value();
    ASSERT_TRUE(p.ranked.empty());
    EXPECT_EQ(p.binding.find("lower --batch-per-gpu"), std::string::npos) << p.binding;
    EXPECT_NE(p.binding.find("optimizer state alone need 360.0 GB (and 1.5 GB of CUDA context), at any batch"),
              std::string::npos)
        << p.binding;
    EXPECT_EQ(plan_brute_force(cat, req).value().binding, p.binding);
}

// Found by review: a global batch could exceed the dataset (8,192 H200s at 256 images a GPU
// against ImageNet's 1.28 M: under one step an epoch, planned as full steps).
TEST(Planner, AGlobalBatchLargerThanTheDatasetIsNoCandidate) {
    const Catalog cat = catalog_of("aws,r,x8,A100,8,96,1152,400,32,0,s\n");
    PlanRequest req;
    req.workload = resnet50();
    req.workload.batch_per_gpu = 32;
    req.workload.dataset_samples = 1000;  // 3 nodes take 768 a step, 4 take 1,024
    req.workload.epochs = 100000;
    req.objective = Objective::kTime;
    req.max_nodes = 8;
    Plan p = make_plan(cat, req).value();
    ASSERT_EQ(p.ranked.size(), 1u) << p.binding;
    EXPECT_EQ(p.ranked[0].nodes, 3);
    Candidate four = evaluate(req, ThroughputModel(), cat.currency(), cat.instances()[0], 4, false);
    EXPECT_FALSE(four.feasible);
    EXPECT_EQ(four.why_not, "a global batch of 1024 (32 x 32 GPUs) is larger than the dataset (1000 samples)");
    EXPECT_EQ(plan_brute_force(cat, req).value().ranked[0].nodes, 3);

    req.workload.dataset_samples = 100;  // fewer than one node's 256
    p = make_plan(cat, req).value();
    ASSERT_TRUE(p.ranked.empty());
    EXPECT_EQ(p.binding, "dataset size: 100 samples are fewer than one global batch on any candidate that fits (the "
                         "smallest, aws x8 x1 (on-demand), takes 32 x 8 = 256 a step); lower --batch-per-gpu or give "
                         "the real --dataset-size");
    EXPECT_EQ(plan_brute_force(cat, req).value().binding, p.binding);
}

// Found by review: a spot row "met the deadline" on its mean while its 90th percentile missed
// it (`plan --deadline 2.1h --spot-hazard 0.5`: p4d.24xlarge on spot, 2 h 06 min expected,
// 2 h 17 min at p90), and the budget was judged on the expected cost likewise.
TEST(Planner, SpotRowsMeetTheDeadlineAndTheBudgetAtTheir90thPercentile) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.spot_hazard_per_h = 0.5;
    req.deadline_h = 2.1;
    const Instance& p4d = *cat.find("p4d.24xlarge", "us-east-1").value();
    Candidate c = evaluate(req, ThroughputModel(), cat.currency(), p4d, 1, true);
    ASSERT_LE(c.expected_h, req.deadline_h);  // (the case: on the mean it meets the deadline)
    ASSERT_GT(c.p90_h, req.deadline_h);
    EXPECT_FALSE(c.feasible);
    EXPECT_NE(c.why_not.find("at the 90th percentile"), std::string::npos) << c.why_not;
    Plan p = make_plan(cat, req).value();
    ASSERT_FALSE(p.ranked.empty());
    for (const auto& r : p.ranked) EXPECT_LE(r.p90_h, req.deadline_h) << r.inst->key() << " x" << r.nodes;

    req.deadline_h = INFINITY;
    req.budget = (c.cost + c.cost_p90) / 2;
    EXPECT_FALSE(evaluate(req, ThroughputModel(), cat.currency(), p4d, 1, true).feasible);
    p = make_plan(cat, req).value();
    for (const auto& r : p.ranked) EXPECT_LE(r.cost_p90, req.budget) << r.inst->key() << " x" << r.nodes;
    EXPECT_EQ(p.binding, plan_brute_force(cat, req).value().binding);
}

// Found by review: durations rounded under an hour and truncated over it ("--deadline 33.17m":
// "deadline 33 min: the fastest candidate ... needs 33 min"); 59.7 min printed "60 min" and
// 0.9999 min "60 s".
TEST(Planner, DurationsRoundWithCarryAndComparedOnesDiffer) {
    EXPECT_EQ(format_hours(59.4 / 3600), "59 s");
    EXPECT_EQ(format_hours(0.9999 / 60), "1 min");
    EXPECT_EQ(format_hours(59.7 / 60), "1 h 00 min");
    EXPECT_EQ(format_hours(1.9999), "2 h 00 min");
    EXPECT_EQ(format_hours(1.5), "1 h 30 min");
    EXPECT_EQ(format_hours(47.999), "2.0 d");
    EXPECT_EQ(format_hours(72), "3.0 d");
    EXPECT_EQ(format_hours(999 * 24), "999.0 d");
    EXPECT_EQ(format_hours(540305.9 * 24), "1479 years");
    EXPECT_EQ(format_hours(3 * 365.25 * 24), "3.0 years");
    EXPECT_EQ(format_hours(2e7 * 365.25 * 24), "2.0e+07 years");
    EXPECT_EQ(format_hours_exact(33.17 / 60), "33 min 10 s");
    EXPECT_EQ(format_hours_exact(2.1, 1), "2 h 06 min 00.0 s");
    EXPECT_EQ(format_hours_exact(59.96 / 3600, 1), "1 min 00.0 s");  // rounded, then carried
    EXPECT_EQ(format_hours_exact(59.99 / 3600), "1 min 00 s");
    auto [a, b] = format_hours_apart(33.17 / 60, 33.4 / 60);
    EXPECT_EQ(a, "33 min 10 s");
    EXPECT_EQ(b, "33 min 24 s");
    std::tie(a, b) = format_hours_apart(1, 3);
    EXPECT_EQ(a, "1 h 00 min");
    EXPECT_EQ(b, "3 h 00 min");
    // A deadline just short of the fastest candidate names two different times.
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.objective = Objective::kTime;
    req.ondemand = true;
    req.spot = false;
    const double fastest = make_plan(cat, req).value().ranked.front().p90_h;
    req.deadline_h = fastest * 0.999;
    Plan p = make_plan(cat, req).value();
    ASSERT_TRUE(p.ranked.empty());
    const std::string deadline = p.binding.substr(9, p.binding.find(':') - 9);
    const std::string needs = p.binding.substr(p.binding.rfind("needs ") + 6);
    EXPECT_NE(deadline, needs) << p.binding;
}

TEST(Planner, ARowWithoutVcpusIsPricedAsTheThroughputModelPricesIt) {
    // Found by review: the pruning bound took a blank vcpus as no input pipeline at all (infinite
    // cost) while the throughput model took it as no limit, so the cheapest row showed only with a
    // larger --top.
    const Catalog cat = catalog_of("aws,us-east-1,a.x,A100,8,,1000,400,1.0,,x\n"
                                   "aws,us-east-1,b.x,A100,8,96,1000,400,2.0,,x\n"
                                   "aws,us-east-1,c.x,A100,8,96,1000,400,3.0,,x\n");
    PlanRequest req;
    req.workload = resnet50();
    for (int top : {1, 3}) {
        req.top = top;
        Plan p = make_plan(cat, req).value();
        ASSERT_FALSE(p.ranked.empty());
        EXPECT_EQ(p.ranked[0].inst->type, "a.x") << "--top " << top;
        EXPECT_EQ(p.ranked[0].cost, plan_brute_force(cat, req).value().ranked[0].cost);
    }
    // A filter that matches only rows without a price in the market asked for says so.
    req.ondemand = false;
    Plan none = make_plan(cat, req).value();
    EXPECT_TRUE(none.ranked.empty());
    EXPECT_EQ(none.binding, "no instance that matches the filters has a spot price in the catalog");
}

// Found by review: GPUs x nodes x batch multiplied as ints overflowed (a catalog may list 1e6
// accelerators): negative samples/s, time and cost, ranked first.
TEST(Planner, HugeCountsNeverOverflowIntoNegativeTimes) {
    const Catalog cat = catalog_of("aws,us-east-1,big,T4,1000000,1000000,16,25,0.5,0.2,x\n");
    PlanRequest req;
    req.workload = resnet50();
    req.workload.batch_per_gpu = 1 << 20;
    req.workload.activations = 1;
    req.objective = Objective::kTime;
    req.max_nodes = 1024;
    Plan p = make_plan(cat, req).value();
    for (const auto& c : p.ranked) {
        EXPECT_GT(c.tp.samples_per_s, 0) << c.inst->type << " x" << c.nodes;
        EXPECT_GT(c.expected_h, 0) << c.inst->type << " x" << c.nodes;
        EXPECT_GT(c.cost, 0) << c.inst->type << " x" << c.nodes;
    }
}

// Found by review: an empty plan whose instances all lack a GPU-table entry said "no instance
// matches the filters" when no filter was given.
TEST(Planner, InstancesTheGpuTableLacksAreNamedAsTheReason) {
    const Catalog cat = catalog_of("gcp,us-central1,tpu-v4,TPUv4,4,240,400,100,12,4,x\n");
    PlanRequest req;
    req.workload = resnet50();
    Plan p = make_plan(cat, req).value();
    EXPECT_TRUE(p.ranked.empty());
    EXPECT_EQ(p.binding, "the instances that match the filters have accelerators the GPU table does not know (TPUv4; "
                         "see strato plan --list and --gpu-table)");
    const Catalog cpus = catalog_of("aws,us-east-1,c1,,0,4,16,25,1,,x\naws,us-east-1,c2,,0,8,32,25,2,,x\n"
                                    "aws,us-east-1,c3,T4,0,8,32,25,2,,x\n");
    EXPECT_EQ(make_plan(cpus, req).value().binding, "the instances that match the filters have no accelerators");
}

TEST(Planner, SpotThatCannotCheckpointIsNamedAsTheBindingConstraint) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.ondemand = false;
    req.spot_hazard_per_h = 100;
    req.restart_s = 3600;
    Plan p = make_plan(cat, req).value();
    EXPECT_TRUE(p.ranked.empty());
    EXPECT_EQ(p.binding.rfind("spot: on every candidate preemptions arrive faster", 0), 0u) << p.binding;
    EXPECT_EQ(plan_brute_force(cat, req).value().binding, p.binding);
}

// Found by review: `--provider AWS`, `--region US-EAST-1` and `--gpu a100` (SkyPilot takes
// `--cloud AWS --gpus a100`) were "not in the catalog" although it listed them in another case;
// SkyPilot's `--gpus A100:8` got the same bare list.
TEST(Planner, ProviderRegionAndGpuFiltersMatchInAnyCase) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest exact;
    exact.workload = resnet50();
    exact.max_nodes = 2;
    exact.providers = {"aws"};
    exact.regions = {"us-east-1"};
    exact.accelerators = {"A100"};
    PlanRequest any_case = exact;
    any_case.providers = {"AWS"};
    any_case.regions = {"US-East-1"};
    any_case.accelerators = {"a100"};
    const Plan a = make_plan(cat, exact).value();
    auto b = make_plan(cat, any_case);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    ASSERT_FALSE(a.ranked.empty());
    ASSERT_EQ(a.ranked.size(), b->ranked.size());
    for (size_t i = 0; i < a.ranked.size(); ++i) {
        EXPECT_EQ(a.ranked[i].inst, b->ranked[i].inst);
        EXPECT_EQ(a.ranked[i].spot, b->ranked[i].spot);
        EXPECT_EQ(a.ranked[i].cost, b->ranked[i].cost);
    }
    EXPECT_EQ(plan_brute_force(cat, any_case).value().ranked.size(), a.ranked.size());
    // Instance types stay exact (a near miss is suggested).
    any_case.instance_types = {"P4D.24XLARGE"};
    EXPECT_NE(make_plan(cat, any_case).status().message().find("did you mean 'p4d.24xlarge'"), std::string::npos);
    any_case.instance_types = {};
    any_case.accelerators = {"A100:8"};
    auto count = make_plan(cat, any_case);
    EXPECT_EQ(count.status().message().rfind("--gpu 'A100:8': give the accelerator's name alone ('A100')", 0), 0u)
        << count.status().message();
    // A catalog that spells a GPU in lower case plans on it, and --gpu finds it in either case.
    const Catalog lower = catalog_of("aws,us-east-1,g4dn.xlarge,t4,1,4,16,25,0.526,0.2,x\n");
    PlanRequest t4;
    t4.workload = resnet50();
    t4.accelerators = {"T4"};
    auto p = make_plan(lower, t4);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->ranked.size(), 2u);
}

// Found by review: one 8-GPU node whose NVLink all-reduce outlasted the backward pass was
// "all-reduce dominates: 68% of a step on the network" — one node uses no network.
TEST(Planner, AnAllReduceOnOneNodeIsOnNvlink) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.workload.fwd_flops = 2e12;
    req.workload.params = 7e9;
    req.workload.activations = 1e8;
    req.workload.batch_per_gpu = 1;
    req.workload.optimizer = "adam";
    req.instance_types = {"p5en.48xlarge"};
    req.max_nodes = 1;
    Plan p = make_plan(cat, req).value();
    ASSERT_FALSE(p.ranked.empty());
    for (const auto& c : p.ranked) {
        ASSERT_EQ(c.tp.bound, "all-reduce");
        EXPECT_NE(c.reason.find("% of a step on NVLink"), std::string::npos) << c.reason;
    }
}

// Found by review: 16 nodes of 4 PCIe T4s waiting on their 50 Gb/s network were told "needs NVLink:
// gradient all-reduce dominates on PCIe" (one such node is compute-bound: the network was the
// wait). The reason names the tier that takes longer.
TEST(Planner, AnAllReduceIsNamedByTheTierThatTakesLonger) {
    const Catalog cat = catalog_of("aws,r,slow-net,T4,4,48,192,50,3.9,,x\naws,r,fast-net,T4,4,48,192,100000,3.9,,x\n");
    PlanRequest req;
    req.workload = find_workload("gpt2-124m-openwebtext").value();
    req.workload.batch_per_gpu = 1;
    req.objective = Objective::kTime;
    req.ondemand = true;
    req.spot = false;
    req.max_nodes = 16;
    req.instance_types = {"slow-net"};
    Plan p = make_plan(cat, req).value();
    ASSERT_EQ(p.ranked.size(), 1u);
    ASSERT_GT(p.ranked[0].nodes, 1);
    ASSERT_EQ(p.ranked[0].tp.bound, "all-reduce");
    EXPECT_GT(p.ranked[0].tp.allreduce_network_s, p.ranked[0].tp.allreduce_s / 2);
    EXPECT_NE(p.ranked[0].reason.find("% of a step on the network"), std::string::npos) << p.ranked[0].reason;
    // Where the network is far faster than PCIe, PCIe is what the step waits on (a model whose
    // 2 GB of gradients outlast any backward pass of a batch of 1).
    req.instance_types = {"fast-net"};
    req.workload.params = 5e8;
    req.workload.fwd_flops = 1e9;
    p = make_plan(cat, req).value();
    ASSERT_EQ(p.ranked.size(), 1u);
    ASSERT_EQ(p.ranked[0].tp.bound, "all-reduce");
    EXPECT_NE(p.ranked[0].reason.find("needs NVLink: gradient all-reduce dominates on PCIe"), std::string::npos)
        << p.ranked[0].reason;
}

// Found by review: `--instance p5.4xlarge --region us-west-2` (each in the catalog, never
// together) said only "no instance matches the filters", not where p5.4xlarge is offered.
TEST(Planner, FiltersThatMatchNoRowTogetherSayWhatEachCouldBe) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.instance_types = {"p5.4xlarge"};
    req.regions = {"us-west-2"};
    Plan p = make_plan(cat, req).value();
    ASSERT_TRUE(p.ranked.empty());
    EXPECT_EQ(p.binding.rfind("no instance matches the filters (provider, region, GPU, instance type) at once; "
                              "keeping the other filters, --region could be us-east-1; keeping the other filters, "
                              "--instance could be ",
                              0),
              0u)
        << p.binding;
    EXPECT_EQ(plan_brute_force(cat, req).value().binding, p.binding);
    req.instance_types = {};
    req.regions = {};
    req.accelerators = {"H200"};
    req.providers = {"azure"};
    p = make_plan(cat, req).value();
    EXPECT_NE(p.binding.find("keeping the other filters, --provider could be aws, gcp;"), std::string::npos) << p.binding;
}

// Found by review: a row with 8 accelerators and no accelerator name was left out of plans without
// a warning, and the binding constraint said it had "no accelerators"; `--region ''` matched the
// one row without a region and was "no price" instead of an unknown region.
TEST(Planner, UnnamedAcceleratorsAndEmptyFilterNamesAreSaidAsSuch) {
    const Catalog cat = catalog_of("aws,us-east-1,y,,8,4,16,25,0.5,0.2,s\n");
    ASSERT_EQ(cat.warnings().size(), 1u);
    EXPECT_EQ(cat.warnings()[0], "t.csv:2: aws/us-east-1/y has 8 accelerators but no accelerator name; left out of plans");
    PlanRequest req;
    req.workload = resnet50();
    EXPECT_EQ(make_plan(cat, req).value().binding,
              "the instances that match the filters have an accelerator count without an accelerator name (see "
              "strato plan --list)");
    const Catalog builtin = Catalog::builtin().value();
    req.regions = {""};
    auto empty = make_plan(builtin, req);
    ASSERT_FALSE(empty.is_ok());
    EXPECT_EQ(empty.status().message().rfind("--region '' is not in the catalog (known: ", 0), 0u)
        << empty.status().message();
    req.regions = {};
    req.accelerators = {""};
    EXPECT_EQ(make_plan(builtin, req).status().message().rfind("--gpu '' is not in the catalog (known: ", 0), 0u);
    // check_filters alone (what `strato plan` reports as a usage error) says the same.
    EXPECT_EQ(req.check_filters(builtin).message(), make_plan(builtin, req).status().message());
    req.accelerators = {"a100"};
    EXPECT_TRUE(req.check_filters(builtin).is_ok());
}

// Found by review: a spot row without preemptions (--spot-hazard 0) or whose checkpoint outlasts
// the job (--checkpoint-gbs 1e-6) was "too short to checkpoint", which blamed the job.
TEST(Planner, SpotRowsSayWhyTheyDoNotCheckpoint) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.ondemand = false;
    req.instance_types = {"p4d.24xlarge"};
    req.regions = {"us-east-1"};
    req.max_nodes = 1;
    req.spot_hazard_per_h = 0;
    Plan p = make_plan(cat, req).value();
    ASSERT_EQ(p.ranked.size(), 1u);
    EXPECT_NE(p.ranked[0].reason.find("no preemptions expected (--spot-hazard 0), no checkpoints"), std::string::npos)
        << p.ranked[0].reason;
    req.spot_hazard_per_h = 1;
    req.storage_gbs = 1e-6;  // 205 MB of state at 1 kB/s: 57 h a checkpoint, the job 2 h
    p = make_plan(cat, req).value();
    ASSERT_EQ(p.ranked.size(), 1u);
    EXPECT_NE(p.ranked[0].reason.find("no checkpoints: one takes 2.4 d at --checkpoint-gbs, longer than the job"),
              std::string::npos)
        << p.ranked[0].reason;
    req.storage_gbs = 1;
    req.spot_hazard_per_h = 1e-6;  // Young's interval (10 h) past the job (2 h)
    p = make_plan(cat, req).value();
    ASSERT_EQ(p.ranked.size(), 1u);
    EXPECT_NE(p.ranked[0].reason.find("too short to checkpoint"), std::string::npos) << p.ranked[0].reason;
}

TEST(Planner, RejectsBadRequests) {
    const Catalog cat = Catalog::builtin().value();
    PlanRequest req;
    req.workload = resnet50();
    req.deadline_h = -1;
    EXPECT_NE(make_plan(cat, req).status().message().find("--deadline must be > 0"), std::string::npos);
    req.deadline_h = 10;
    req.regions = {"us-east-9"};
    EXPECT_NE(make_plan(cat, req).status().message().find("--region 'us-east-9' is not in the catalog"),
              std::string::npos);
    req.regions = {};
    req.accelerators = {"tpu-v6e"};  // in the instance table, not in the GPU table
    auto tpu = make_plan(cat, req);
    EXPECT_NE(tpu.status().message().find("the GPU table has no entry for it"), std::string::npos) << tpu.status().message();
    req.accelerators = {"Z9000"};
    auto z = make_plan(cat, req);
    EXPECT_EQ(z.status().message().find("tpu-v6e"), std::string::npos) << z.status().message();
    req.accelerators = {};
    req.instance_types = {"p4d.24xlarg"};
    EXPECT_NE(make_plan(cat, req).status().message().find("did you mean"), std::string::npos);
    req.instance_types = {};
    req.ondemand = req.spot = false;
    EXPECT_FALSE(make_plan(cat, req).is_ok());
    req.spot = true;
    req.workload.epochs = 0;
    EXPECT_NE(make_plan(cat, req).status().message().find("epochs must be > 0"), std::string::npos);
}

}  // namespace
}  // namespace strato::cloud
