#include <gtest/gtest.h>
#include <torch/torch.h>
#include <sys/resource.h>
#include <unistd.h>
#include <csignal>

#include <filesystem>
#include <functional>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "strato/core/fs.h"
#include "strato/models/package.h"
#include "strato/models/quantized.h"
#include "strato/models/torch_compat.h"
#include "strato/models/zoo.h"
#include "batch_norm_helpers.h"

namespace strato::models {
namespace {
namespace stdfs = std::filesystem;
using test_support::randomize_batch_norm;

struct ZooCase {
    std::string arch;
    int64_t depth;
    data::ImageShape shape;
};

class Zoo : public ::testing::TestWithParam<ZooCase> {};

/// The case's network config: slim ImageNet-style ResNets (width 8) for speed.
ModelConfig zoo_config(const ZooCase& c) {
    ModelConfig cfg;
    cfg.arch = c.arch;
    cfg.depth = c.depth;
    cfg.width = c.arch == "resnet" && c.depth < 60 && c.depth % 6 != 2 ? 8 : 0;
    return cfg;
}

TEST_P(Zoo, ForwardGivesLogitsPerClass) {
    const auto& c = GetParam();
    ModelConfig cfg = zoo_config(c);
    auto net = create_model(cfg, c.shape, 7);
    ASSERT_TRUE(net.is_ok()) << net.status().message();
    (*net)->eval();
    torch::NoGradGuard ng;
    auto y = (*net)->forward(torch::randn({2, c.shape.channels, c.shape.height, c.shape.width}));
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 7}));
    EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
}

// count_parameters (what refuses a corrupt manifest or a typo before anything is allocated) counts
// exactly what create_model builds.
TEST_P(Zoo, CountedParametersAreTheBuiltOnes) {
    const auto& c = GetParam();
    ModelConfig cfg = zoo_config(c);
    for (bool bn : {true, false}) {
        cfg.batch_norm = bn;
        auto net = create_model(cfg, c.shape, 7);
        auto counted = count_parameters(cfg, c.shape, 7);
        ASSERT_TRUE(net.is_ok() && counted.is_ok());
        EXPECT_EQ(*counted, static_cast<double>(parameter_count(**net))) << c.arch << c.depth << " bn " << bn;
    }
}

INSTANTIATE_TEST_SUITE_P(All, Zoo,
                         ::testing::Values(ZooCase{"mlp", 0, {1, 28, 28}}, ZooCase{"mlp", 3, {3, 8, 8}},
                                           ZooCase{"cnn", 0, {1, 28, 28}}, ZooCase{"cnn", 3, {3, 32, 32}},
                                           ZooCase{"resnet", 20, {1, 28, 28}}, ZooCase{"resnet", 32, {3, 32, 32}},
                                           ZooCase{"resnet", 18, {1, 28, 28}}, ZooCase{"resnet", 34, {3, 32, 32}},
                                           ZooCase{"resnet", 50, {3, 96, 96}}),
                         [](const auto& param_info) {
                             return param_info.param.arch + std::to_string(param_info.param.depth) + "_" +
                                    std::to_string(param_info.param.shape.height);
                         });

// The fused FP32 inference graph (BatchNorm folded, dropout gone, ReLU and the residual add as
// convolution post-ops) computes what the eager network computes, for every architecture, batch
// size and input layout, on oneDNN primitives and through libtorch's oneDNN ops; the eager network
// and the input are left as they were.
TEST_P(Zoo, FusedNetEqualsTheEagerNetwork) {
    const auto& c = GetParam();
    at::set_num_threads(2);
    ModelConfig cfg = zoo_config(c);
    cfg.dropout = 0.3;  // at inference dropout is the identity; the lowering drops it
    torch::manual_seed(5);
    auto net = create_model(cfg, c.shape, 7).value();
    randomize_batch_norm(*net);
    net->eval();
    for (bool primitives : {true, false}) {
        SCOPED_TRACE(primitives ? "oneDNN primitives" : "libtorch oneDNN ops");
        auto fused = FusedNet::lower(cfg, *net, {.primitives = primitives, .input = {c.shape.channels, c.shape.height, c.shape.width}});
        ASSERT_TRUE(fused.is_ok()) << fused.status().message();
        EXPECT_EQ((*fused)->engine(), primitives ? "onednn-primitives" : "aten-onednn");
        EXPECT_FALSE((*fused)->describe().empty());
        const auto impls = (*fused)->implementations({1, c.shape.channels, c.shape.height, c.shape.width});
        EXPECT_EQ(impls.empty(), !primitives);
        if (__builtin_cpu_supports("avx512f")) {
            for (const auto& impl : impls) EXPECT_EQ(impl.find("ref:"), std::string::npos) << impl << ": oneDNN's slow reference kernel";
        }
        torch::NoGradGuard ng;
        for (int64_t batch : {1, 5, 1}) {
            auto x = torch::randn({batch, c.shape.channels, c.shape.height, c.shape.width});
            const auto before = x.clone();
            auto ref = net->forward(x);
            auto got = (*fused)->forward(x);
            ASSERT_EQ(got.sizes(), ref.sizes());
            EXPECT_FALSE(got.is_mkldnn());
            const double tol = 1e-4 * std::max(1.0, ref.abs().max().item<double>());
            EXPECT_LE((got - ref).abs().max().item<double>(), tol) << c.arch << c.depth << " batch " << batch;
            EXPECT_TRUE(torch::equal(x, before));
            auto got_cl = (*fused)->forward(channels_last_copy(x));
            EXPECT_LE((got_cl - ref).abs().max().item<double>(), tol);
            auto got_strided = (*fused)->forward(torch::randn({batch, c.shape.channels, c.shape.height, 2 * c.shape.width}).slice(3, 0, c.shape.width, 1).copy_(x));
            EXPECT_LE((got_strided - ref).abs().max().item<double>(), tol);
        }
    }
}

/// The CPU flags of /proc/cpuinfo include `flag` (a whole word).
bool cpu_has(const std::string& flag) {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
    return false;
}

// The bf16 graph (weights and activations bfloat16, FP32 accumulation) is as close to the FP32
// network as PyTorch's bf16 autocast of the eager network is, for every architecture, batch size
// and input layout; on a CPU with bf16 instructions it runs oneDNN's bf16 kernels.
TEST_P(Zoo, Bf16GraphIsAsCloseToFp32AsAutocast) {
    const auto& c = GetParam();
    at::set_num_threads(2);
    ModelConfig cfg = zoo_config(c);
    torch::manual_seed(5);
    auto net = create_model(cfg, c.shape, 7).value();
    randomize_batch_norm(*net);
    net->eval();
    auto fused = FusedNet::lower(cfg, *net, {.input = {c.shape.channels, c.shape.height, c.shape.width}, .bf16 = true});
    const bool native = cpu_has("avx512_bf16") || cpu_has("amx_bf16");
    if (!fused.is_ok()) {
        ASSERT_FALSE(native) << "this CPU has bf16 instructions: " << fused.status().message();
        EXPECT_EQ(fused.status().code(), StatusCode::kUnimplemented);
        EXPECT_NE(fused.status().message().find("bf16"), std::string::npos) << fused.status().message();
        GTEST_SKIP() << "no oneDNN bf16 kernels on this CPU: " << fused.status().message();
    }
    EXPECT_EQ((*fused)->engine(), "onednn-primitives-bf16");
    auto fp32 = FusedNet::lower(cfg, *net, {.input = {c.shape.channels, c.shape.height, c.shape.width}});
    ASSERT_TRUE(fp32.is_ok()) << fp32.status().message();
    if (native) {  // (oneDNN may emulate bf16 elsewhere, slowly)
        for (const auto& impl : (*fused)->implementations({1, c.shape.channels, c.shape.height, c.shape.width})) {
            EXPECT_EQ(impl.find("ref:"), std::string::npos) << impl << ": oneDNN's slow reference kernel";
            if (impl.rfind("conv", 0) == 0) {
                EXPECT_NE(impl.find("bf16"), std::string::npos) << impl;
            }
        }
    }
    torch::NoGradGuard ng;
    for (int64_t batch : {1, 5}) {
        auto x = torch::randn({batch, c.shape.channels, c.shape.height, c.shape.width});
        auto ref = net->forward(x);
        torch::Tensor autocast;
        {
            compat::AutocastGuard guard(c10::DeviceType::CPU, at::kBFloat16, true);
            autocast = net->forward(x).to(torch::kFloat);
        }
        const double scale = std::max(1.0, ref.abs().max().item<double>());
        const double autocast_err = (autocast - ref).abs().max().item<double>();
        const double fp32_err = ((*fp32)->forward(x) - ref).abs().max().item<double>();
        for (const auto& in : {x, channels_last_copy(x)}) {
            auto got = (*fused)->forward(in);
            ASSERT_EQ(got.sizes(), ref.sizes());
            ASSERT_EQ(got.scalar_type(), torch::kFloat);
            const double err = (got - ref).abs().max().item<double>();
            EXPECT_GT(err, 5 * fp32_err) << "no more than the FP32 graph's rounding: did the graph run in FP32?";
            EXPECT_LE(err, std::max(2.0 * autocast_err, 1e-2 * scale))
                << c.arch << c.depth << " batch " << batch << ": autocast's error " << autocast_err;
        }
    }
}

TEST(ZooErrors, BadArchitectureOrDepth) {
    ModelConfig cfg;
    cfg.arch = "transformer9000";
    auto r = create_model(cfg, {1, 28, 28}, 10);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("transformer9000"), std::string::npos);
    cfg.arch = "resnet";
    cfg.depth = 21;
    r = create_model(cfg, {1, 28, 28}, 10);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("model.depth"), std::string::npos);
    cfg.arch = "cnn";
    cfg.depth = 6;
    r = create_model(cfg, {1, 28, 28}, 10);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("shrink"), std::string::npos);
}

// Found by review: an unknown name did not say which names there are, and a config built in code
// (the TOML parser checks the ranges, create_model did not) with a negative width, a hidden layer
// of 0 units, a channel of 0 or a dropout of 1.5 built a silent mlp of 8 units, a network that
// answers every image alike, or failed deep in libtorch ("Trying to create tensor with negative
// dimension"); each is now an error naming the key.
TEST(ZooErrors, UnknownNamesAndBadHyperParametersNameTheKey) {
    ModelConfig cfg;
    cfg.arch = "vit";
    auto r = count_parameters(cfg, {1, 28, 28}, 10);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), "model.arch: unknown model 'vit' (expected one of: cnn, mlp, resnet)");
    struct Case {
        const char* arch;
        std::function<void(ModelConfig&)> set;
        const char* want;
    };
    const Case cases[] = {
        {"mlp", [](ModelConfig& c) { c.width = -1; }, "model.width: expected 0 (the default) or more, got -1"},
        {"cnn", [](ModelConfig& c) { c.width = -8; }, "model.width: expected 0 (the default) or more, got -8"},
        {"resnet", [](ModelConfig& c) { c.width = -4; }, "model.width: expected 0 (the default) or more, got -4"},
        {"mlp", [](ModelConfig& c) { c.depth = -1; }, "model.depth: expected 0 (the default) or more, got -1"},
        {"cnn", [](ModelConfig& c) { c.hidden = 0; }, "model.hidden: expected at least 1, got 0"},
        {"cnn", [](ModelConfig& c) { c.dropout = 1.5; }, "model.dropout: expected a probability in [0, 1), got 1.5"},
        {"mlp", [](ModelConfig& c) { c.dropout = std::nan(""); }, "model.dropout: expected a probability in [0, 1)"},
        {"mlp", [](ModelConfig& c) { c.channels = {64, 0}; }, "model.channels[1]: expected at least 1, got 0"},
    };
    for (const auto& c : cases) {
        ModelConfig bad;
        bad.arch = c.arch;
        c.set(bad);
        auto net = create_model(bad, {1, 28, 28}, 10);
        ASSERT_FALSE(net.is_ok()) << c.want;
        EXPECT_EQ(net.status().code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(net.status().message().rfind(c.want, 0), 0u) << net.status().message();
    }
    cfg.arch = "mlp";
    r = count_parameters(cfg, {1, 28, 28}, 0);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), "model.mlp: expected at least 1 class, got 0");
}

// Found by review: `strato plan --run`'s forward count ran one image in training mode, and a
// network whose last feature map is 1x1 (a resnet on a CSV's features) failed in batch norm
// with libtorch's "Expected more than 1 value per channel when training". Two images, counted
// as one: the FLOPs of an mlp are still exactly its multiply-adds, twice.
TEST(ZooCount, ForwardCostOfOneImageEvenWhereTheLastFeatureMapIs1x1) {
    ModelConfig cfg;
    cfg.arch = "resnet";
    cfg.width = 4;
    Net net = create_model(cfg, {16, 1, 1}, 3).value();
    ForwardCost cost;
    ASSERT_NO_THROW(cost = count_forward(*net, {16, 1, 1}));
    EXPECT_GT(cost.flops, 0);
    EXPECT_FALSE(net->is_training());
    cfg = ModelConfig{};
    cfg.arch = "mlp";  // 784-256-128-10
    net = create_model(cfg, {1, 28, 28}, 10).value();
    cost = count_forward(*net, {1, 28, 28});
    EXPECT_EQ(cost.flops, 2.0 * (784 * 256 + 256 * 128 + 128 * 10));
    EXPECT_GT(cost.activation_elements, 256 + 128 + 10);
}

// Found by review: depth 65 passed the "pooling shrinks the image to nothing" check for 28x28
// (28 >> 65 is undefined; x86 shifts by 1), then failed on a width of 32 << 64 ("7.66e+38
// parameters") or, with model.channels set, deep in libtorch ("from is out of bounds for float").
// And a CSV's 1x1 features were told "use at most 0" blocks, which means the default, 2.
TEST(ZooErrors, CnnDepthBeyondTheImageIsRefusedForEveryDepth) {
    ModelConfig cfg;
    cfg.arch = "cnn";
    for (int64_t depth : {5, 63, 64, 65, 70, 1000}) {
        cfg.depth = depth;
        auto r = count_parameters(cfg, {1, 28, 28}, 10);
        ASSERT_FALSE(r.is_ok()) << depth;
        const std::string want =
            fmt::format("model.depth: {} pooling blocks shrink a 28x28 image to nothing; use at most 4", depth);
        EXPECT_NE(r.status().message().find(want), std::string::npos)
            << r.status().message();
        cfg.channels.assign(static_cast<size_t>(2 * depth), 1);
        EXPECT_FALSE(create_model(cfg, {1, 28, 28}, 10).is_ok()) << depth;
        cfg.channels.clear();
    }
    cfg.depth = 1;
    auto r = create_model(cfg, {4, 1, 1}, 3);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), "model.cnn: a 1x1 input is too small for the cnn (each block max-pools by 2, so it "
                                    "needs at least 2x2); use arch \"mlp\" for it");
    cfg.depth = 4;
    EXPECT_TRUE(create_model(cfg, {1, 28, 28}, 10).is_ok());
}

TEST(ZooCount, PrunedWidthsAreCountedToo) {
    std::vector<std::pair<ModelConfig, data::ImageShape>> cases(4);
    cases[0].first.arch = "mlp", cases[0].first.channels = {100, 37, 12}, cases[0].first.depth = 3;
    cases[1].first.arch = "cnn", cases[1].first.channels = {3, 5, 7, 9}, cases[1].first.hidden = 11;
    cases[2].first.arch = "resnet", cases[2].first.depth = 20, cases[2].first.channels.assign(9, 5);
    cases[3].first.arch = "resnet", cases[3].first.depth = 50, cases[3].first.width = 4;
    cases[3].first.channels.assign(32, 3);
    const data::ImageShape shapes[] = {{1, 28, 28}, {3, 33, 17}, {3, 32, 32}, {3, 100, 70}};
    for (size_t i = 0; i < cases.size(); ++i) {
        auto net = create_model(cases[i].first, shapes[i], 5);
        ASSERT_TRUE(net.is_ok()) << net.status().message();
        EXPECT_EQ(*count_parameters(cases[i].first, shapes[i], 5), static_cast<double>(parameter_count(**net))) << i;
    }
}

TEST(ZooErrors, NetworksLargerThanTheMachineAreRefusedBeforeAllocating) {
    ModelConfig cfg;
    cfg.arch = "mlp";
    cfg.width = int64_t{1} << 40;  // a typo: 1e12 units
    auto r = create_model(cfg, {1, 28, 28}, 10);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("GiB for the weights alone, more than this machine's"), std::string::npos)
        << r.status().message();
    EXPECT_GT(*count_parameters(cfg, {1, 28, 28}, 10), 0x1p79);  // 2^40 x 2^39 between the hidden layers: no int64 wrap
}

class Package : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = stdfs::temp_directory_path() / ("strato-pkg-" + std::to_string(::getpid()));
        stdfs::remove_all(dir_);
        info_.model.arch = "cnn";
        info_.model.width = 4;
        info_.model.hidden = 16;
        info_.input_shape = {1, 28, 28};
        info_.num_classes = 10;
        info_.labels = std::vector<std::string>(10, "x");
        info_.mean = {0.5};
        info_.std = {0.25};
        info_.metrics = {{"test_acc", 0.5}};
        torch::manual_seed(1);
        net_ = create_model(info_.model, info_.input_shape, 10).value();
        net_->eval();
        ASSERT_TRUE(save_package((dir_ / "model").string(), info_, *net_).is_ok());
    }
    void TearDown() override { stdfs::remove_all(dir_); }
    stdfs::path dir_;
    PackageInfo info_;
    Net net_;
};

TEST_F(Package, RoundTripGivesIdenticalOutputs) {
    auto loaded = load_package((dir_ / "model").string());
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ(loaded->info.model.width, 4);
    EXPECT_EQ(loaded->info.mean, info_.mean);
    EXPECT_EQ(loaded->info.metrics["test_acc"], 0.5);
    torch::NoGradGuard ng;
    auto x = torch::randn({3, 1, 28, 28});
    EXPECT_TRUE(torch::equal(net_->forward(x), loaded->net->forward(x)));
    // Saving again over an existing package replaces it and leaves no temporary directories.
    ASSERT_TRUE(save_package((dir_ / "model").string(), info_, *net_).is_ok());
    int entries = 0;
    for (auto& e : stdfs::directory_iterator(dir_)) entries += 1 + 0 * e.is_directory();
    EXPECT_EQ(entries, 1);
}

// Found by review: the test transforms a model was evaluated with were not kept, so `strato eval`
// without a config scored an image model on differently prepared images.
TEST_F(Package, TheTestTransformsAreKept) {
    EXPECT_TRUE(load_package((dir_ / "model").string())->info.test_transforms.empty());
    info_.test_transforms = {"resize size=32", "center-crop size=28"};
    ASSERT_TRUE(save_package((dir_ / "model").string(), info_, *net_).is_ok());
    auto loaded = load_package((dir_ / "model").string());
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ(loaded->info.test_transforms, info_.test_transforms);
}

// What serve, eval and report run: the fused graph for a float package, the eager network in
// channels-last when fusing is off (bf16 autocast); the same logits either way.
TEST_F(Package, InferenceNetIsTheFusedGraphUnlessTurnedOff) {
    auto a = load_package((dir_ / "model").string());
    auto b = load_package((dir_ / "model").string());
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    InferenceNet fused = inference_net(*a);
    InferenceNet eager = inference_net(*b, /*fuse=*/false);
    EXPECT_TRUE(fused.fused);
    EXPECT_FALSE(fused.channels_last);
    EXPECT_NE(dynamic_cast<FusedNet*>(fused.net.get()), nullptr);
    EXPECT_FALSE(eager.fused);
    EXPECT_TRUE(eager.channels_last);
    EXPECT_EQ(eager.net.get(), b->net.get());
    torch::NoGradGuard ng;
    auto x = torch::randn({4, 1, 28, 28});
    auto ref = net_->forward(x);
    EXPECT_TRUE(torch::allclose(fused.net->forward(x), ref, 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(eager.net->forward(channels_last_copy(x)), ref, 1e-4, 1e-5));
}

TEST_F(Package, FlippedBitInWeightsIsDetected) {
    auto p = dir_ / "model" / kPackageWeights;
    std::string bytes = *fs::read_file(p);
    bytes[bytes.size() / 2] ^= 0x10;
    ASSERT_TRUE(fs::atomic_write(p, bytes).is_ok());
    auto r = load_package((dir_ / "model").string());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("weights.pt is corrupt"), std::string::npos) << r.status().message();
}

// The manifest has no checksum of its own: a shape that does not belong to the weights (a
// corrupt or hand-edited manifest) is refused by the parameter count, before building a network
// of tens of GB.
TEST_F(Package, ManifestShapeWhoseSizeWrapsAroundIsRefused) {
    auto m = dir_ / "model" / kPackageManifest;
    auto manifest = nlohmann::json::parse(*fs::read_file(m));
    manifest["inputs"][0]["shape"] = {-1, 16, (int64_t{1} << 60) + 49, 1};
    ASSERT_TRUE(fs::atomic_write(m, manifest.dump(2)).is_ok());
    auto r = load_package((dir_ / "model").string());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("is no image shape"), std::string::npos) << r.status().message();
}

TEST_F(Package, ManifestShapeThatTheWeightsCannotHoldIsDataLoss) {
    auto m = dir_ / "model" / kPackageManifest;
    auto manifest = nlohmann::json::parse(*fs::read_file(m));
    manifest["inputs"][0]["shape"] = {-1, 1, 28000, 28000};
    ASSERT_TRUE(fs::atomic_write(m, manifest.dump(2)).is_ok());
    auto r = load_package((dir_ / "model").string());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("fewer than one per parameter: the manifest does not belong to these weights"),
              std::string::npos)
        << r.status().message();
}

// libtorch's Module::load adopts the saved shapes: a resume with another model.width silently
// trained the old network while recording the new config (found by review).
TEST_F(Package, WeightsOfAnotherShapeAreRefusedNotAdopted) {
    ModelConfig wider = info_.model;
    wider.width = 8;
    Net other = create_model(wider, info_.input_shape, 10).value();
    const auto before = other->named_parameters()["features.0.weight"].sizes().vec();
    Status st = module_from_bytes(*other, module_to_bytes(*net_), "model.pt");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message(), "model.pt: 'features.0.weight' is [4, 1, 3, 3] in the file but [8, 1, 3, 3] in the network "
                            "the model config describes (the weights were saved with another model config)");
    EXPECT_EQ(before, (std::vector<int64_t>{8, 1, 3, 3}));
    EXPECT_TRUE(module_from_bytes(*create_model(info_.model, info_.input_shape, 10).value(), module_to_bytes(*net_), "m")
                    .is_ok());
    // Another architecture altogether (a resume after changing model.arch): libtorch's "No such
    // serialized submodule" is that, not a damaged file.
    ModelConfig mlp;
    mlp.arch = "mlp";
    Net other_arch = create_model(mlp, info_.input_shape, 10).value();
    Status arch = module_from_bytes(*other_arch, module_to_bytes(*net_), "model.pt");
    EXPECT_EQ(arch.code(), StatusCode::kInvalidArgument) << arch.message();
    EXPECT_NE(arch.message().find(kOtherModelConfig), std::string::npos) << arch.message();
}

// float64 weights (re-saved by hand) loaded "fine" into the float32 network and read their bytes
// as float32: 9 % accuracy, loss 3.9e18, and an ONNX export of garbage (found by review).
TEST_F(Package, WeightsOfAnotherDataTypeAreRefused) {
    Net f64 = create_model(info_.model, info_.input_shape, 10).value();
    f64->to(torch::kFloat64);
    Net fresh = create_model(info_.model, info_.input_shape, 10).value();
    Status st = module_from_bytes(*fresh, module_to_bytes(*f64), "weights.pt");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find("saved with another data type"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("Float values"), std::string::npos) << st.message();
}

TEST_F(Package, BrokenManifestIsAClearError) {
    auto m = dir_ / "model" / kPackageManifest;
    ASSERT_TRUE(fs::atomic_write(m, "{\"format\": \"strato-model\", \"model\": {\"arch\": 3}}").is_ok());
    auto r = load_package((dir_ / "model").string());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("strato-model.json /model: arch: expected a string"), std::string::npos) << r.status().message();
    ASSERT_TRUE(fs::atomic_write(m, "{not json").is_ok());
    r = load_package((dir_ / "model").string());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("not valid JSON"), std::string::npos);
    r = load_package((dir_ / "nothing").string());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// Found by review: manifests that load but describe another package (an empty normalisation
// scored 51 % instead of 94 %), or name files outside it.
TEST_F(Package, ManifestFieldsThatDoNotFitAreRefused) {
    const auto m = dir_ / "model" / kPackageManifest;
    const auto good = nlohmann::json::parse(*fs::read_file(m));
    const struct {
        const char* pointer;
        nlohmann::json value;
        const char* expected;
    } cases[] = {
        {"/preprocessing/mean", nlohmann::json::array(), "/preprocessing/mean and /std need 1 values"},
        {"/preprocessing/std", {0.0}, "std must be > 0"},
        {"/format_version", 2, "/format_version is 2, and this strato reads version 1"},
        {"/labels", {"a", "b", "c"}, "/labels has 3 names for 10 classes"},
        {"/num_classes", 0, "/num_classes must be in 1..10000000, got 0"},
        // Found by review: 10.5 read as 10, and a fixed batch dimension passed for [-1, C, H, W].
        {"/num_classes", 10.5, "/num_classes must be an integer, got 10.5"},
        {"/inputs/0/shape", {-1, 1, 28.5, 28}, "/shape must hold integers, got [-1,1,28.5,28]"},
        {"/inputs/0/shape", {1, 1, 28, 28}, "/inputs/0/shape must be [-1, C, H, W]"},
        {"/precision", "int8", "/precision is \"int8\" but the package has no /quantization"},
        {"/files/..~1..~1..~1etc~1hostname", {{"sha256", "x"}}, "expected the name of a file in the package"},
        {"/preprocessing/transforms", "resize size=28", "/preprocessing"},
        {"/preprocessing/transforms", {"resize size=28", 7}, "/preprocessing"},
    };
    for (const auto& c : cases) {
        nlohmann::json j = good;
        j[nlohmann::json::json_pointer(c.pointer)] = c.value;
        ASSERT_TRUE(fs::atomic_write(m, j.dump()).is_ok());
        auto r = load_package((dir_ / "model").string());
        ASSERT_FALSE(r.is_ok()) << c.pointer;
        EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << c.pointer << ": " << r.status().message();
    }
    ASSERT_TRUE(fs::atomic_write(m, "[]").is_ok());
    EXPECT_NE(load_package((dir_ / "model").string()).status().message().find("expected a JSON object, got array"),
              std::string::npos);
}

// Found by review: quantize --output RUN_DIR replaced a whole run with the INT8 package, and the
// cleanup of killed saves deleted a user's "model.old.2024-11" and other live saves' copies.
TEST_F(Package, SavesReplaceOnlyPackagesAndTheirOwnLeftovers) {
    stdfs::create_directories(dir_ / "run" / "checkpoints");
    ASSERT_TRUE(fs::atomic_write(dir_ / "run" / "metrics.jsonl", "{}\n").is_ok());
    Status st = save_package((dir_ / "run").string(), info_, *net_);
    EXPECT_NE(st.message().find("is not a model package (no strato-model.json); not replacing it"), std::string::npos)
        << st.message();
    EXPECT_TRUE(stdfs::exists(dir_ / "run" / "metrics.jsonl"));
    EXPECT_FALSE(save_package((dir_ / "run" / "metrics.jsonl").string(), info_, *net_).is_ok());
    EXPECT_FALSE(save_package((dir_ / ".").string(), info_, *net_).is_ok());
    // A file above the destination, or a dangling link at it: refused with what is in the way.
    st = save_package((dir_ / "run" / "metrics.jsonl" / "x" / "model").string(), info_, *net_);
    EXPECT_NE(st.message().find("metrics.jsonl is a file, not a directory"), std::string::npos) << st.message();
    stdfs::create_symlink(dir_ / "nowhere", dir_ / "dangling");
    st = save_package((dir_ / "dangling").string(), info_, *net_);
    EXPECT_NE(st.message().find("which does not exist"), std::string::npos) << st.message();
    EXPECT_FALSE(stdfs::exists(dir_ / "nowhere"));

    // Next to the package: a user's backup, a live process's staging copy (pid 1 is alive), and a
    // dead process's leftovers (a pid above the kernel's limit is no process).
    for (const char* d : {"model.old.2024-11", "model.tmp.1", "model.tmp.99999999", ".old-model.99999999"})
        stdfs::create_directories(dir_ / d);
    ASSERT_TRUE(save_package((dir_ / "model").string(), info_, *net_).is_ok());
    EXPECT_TRUE(stdfs::exists(dir_ / "model.old.2024-11"));
    EXPECT_TRUE(stdfs::exists(dir_ / "model.tmp.1"));
    EXPECT_FALSE(stdfs::exists(dir_ / "model.tmp.99999999"));
    EXPECT_FALSE(stdfs::exists(dir_ / ".old-model.99999999"));
    EXPECT_TRUE(load_package((dir_ / "model").string()).is_ok());
}

// A save whose write fails half way (here the file size limit, as a full disk would) left an empty
// "model.tmp.<pid>" next to the package until the next save there.
TEST_F(Package, AFailedWriteLeavesNoStagingCopy) {
    struct rlimit old {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 512;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    Status st = save_package((dir_ / "next").string(), info_, *net_);
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_FALSE(st.is_ok());
    EXPECT_FALSE(stdfs::exists(dir_ / "next"));
    for (const auto& e : stdfs::directory_iterator(dir_))
        EXPECT_EQ(e.path().filename().string().find("next.tmp."), std::string::npos) << e.path();
    EXPECT_TRUE(load_package((dir_ / "model").string()).is_ok());
}

// Found by review: a save to a link to a package (models/current -> v3), as `strato compress
// quantize --output current --overwrite` does after calibrating, failed at the very end with
// "cannot move ./current.tmp.N to current: Not a directory". It is saved through the link now.
TEST_F(Package, SaveThroughALinkReplacesThePackageItPointsTo) {
    stdfs::create_directories(dir_ / "models");
    stdfs::create_directory_symlink("../model", dir_ / "models" / "current");
    ModelConfig wider = info_.model;
    wider.width = 8;
    PackageInfo info = info_;
    info.model = wider;
    Net net = create_model(wider, info.input_shape, 10).value();
    Status st = save_package((dir_ / "models" / "current").string(), info, *net);
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_TRUE(stdfs::is_symlink(dir_ / "models" / "current"));
    auto through = load_package((dir_ / "models" / "current").string());
    ASSERT_TRUE(through.is_ok()) << through.status().message();
    EXPECT_EQ(through->info.model.width, 8);
    EXPECT_EQ(load_package((dir_ / "model").string())->info.model.width, 8);
    for (const auto& e : stdfs::directory_iterator(dir_))  // no staging copy left beside either
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
    for (const auto& e : stdfs::directory_iterator(dir_ / "models"))
        EXPECT_EQ(e.path().filename().string(), "current");
    // A link to a directory that is no package is still refused, and what it points to kept.
    stdfs::create_directories(dir_ / "mine");
    ASSERT_TRUE(fs::atomic_write(dir_ / "mine" / "notes.txt", "x").is_ok());
    stdfs::create_directory_symlink(dir_ / "mine", dir_ / "mine-link");
    st = save_package((dir_ / "mine-link").string(), info, *net);
    EXPECT_NE(st.message().find("is not a model package"), std::string::npos) << st.message();
    EXPECT_TRUE(stdfs::exists(dir_ / "mine" / "notes.txt"));
}

// torch.load takes the weights file; a package is its directory. Found by review: "model package
// runs/x/model/weights.pt does not exist or is not a directory" for a file that exists, and no
// word about model/ for a run directory.
TEST_F(Package, AFileOrARunDirectoryForAPackageSaysWhatToGive) {
    auto r = load_package((dir_ / "model" / kPackageWeights).string());
    ASSERT_FALSE(r.is_ok());
    const auto weights = (dir_ / "model" / kPackageWeights).string();
    EXPECT_EQ(r.status().message(),
              fmt::format("model package {} is a file of a package; give the package's directory: {}", weights,
                          (dir_ / "model").string()));
    ASSERT_TRUE(fs::atomic_write(dir_ / "notes.txt", "x").is_ok());
    r = load_package((dir_ / "notes.txt").string());
    EXPECT_NE(r.status().message().find("notes.txt is a file; expected a package directory (holding "
                                        "strato-model.json and weights.pt)"),
              std::string::npos)
        << r.status().message();
    r = load_package(dir_.string());  // the package is dir_/model, as in runs/NAME/model
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("a run directory? its package is " + (dir_ / "model").string()),
              std::string::npos)
        << r.status().message();
    r = load_package((dir_ / "gone").string());
    EXPECT_EQ(r.status().message(), fmt::format("model package {} does not exist", (dir_ / "gone").string()));
}

// Found by review: "a newer strato wrote it?" for /format_version 0 or -1, and a correct SHA-256
// written in uppercase (PowerShell's Get-FileHash, hand-made manifests) reported as corruption.
TEST_F(Package, VersionsAndChecksumsAreReadAsWritten) {
    const auto m = dir_ / "model" / kPackageManifest;
    const auto good = nlohmann::json::parse(*fs::read_file(m));
    auto with = [&](const char* pointer, const nlohmann::json& value) {
        nlohmann::json j = good;
        j[nlohmann::json::json_pointer(pointer)] = value;
        EXPECT_TRUE(fs::atomic_write(m, j.dump()).is_ok());
        return load_package((dir_ / "model").string());
    };
    auto r = with("/format_version", 0);
    EXPECT_NE(r.status().message().find("/format_version is 0, and this strato reads version 1"), std::string::npos);
    EXPECT_EQ(r.status().message().find("newer"), std::string::npos) << r.status().message();
    r = with("/format_version", 2);
    EXPECT_NE(r.status().message().find("(a newer strato wrote it?)"), std::string::npos) << r.status().message();
    std::string upper = good["files"][kPackageWeights]["sha256"].get<std::string>();
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    r = with("/files/weights.pt/sha256", upper);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    upper[0] = upper[0] == 'A' ? 'B' : 'A';  // and a wrong one is still wrong
    r = with("/files/weights.pt/sha256", upper);
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().message();
}

}  // namespace
}  // namespace strato::models
