#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "strato/compress/quantize.h"
#include "strato/core/fs.h"
#include "strato/core/signals.h"
#include "strato/models/package.h"
#include "strato/models/quantized.h"
#include "strato/serve/backend/backend.h"
#include "strato/serve/backend/torch_backends.h"
#include "../models/batch_norm_helpers.h"

namespace strato::compress {
namespace {
namespace stdfs = std::filesystem;
using test_support::randomize_batch_norm;
using models::ModelConfig;
using models::QuantizedNet;

double cosine(const torch::Tensor& a, const torch::Tensor& b) {
    return (a.flatten() * b.flatten()).sum().item<double>() / (a.norm().item<double>() * b.norm().item<double>());
}

struct Built {
    models::Net net;
    std::shared_ptr<QuantizedNet> q;
};

Built build_and_quantize(const ModelConfig& cfg, const data::ImageShape& shape, const torch::Tensor& calib,
                         const models::QuantizeOptions& opts = {}) {
    torch::manual_seed(1);
    Built b;
    b.net = models::create_model(cfg, shape, 10).value();
    randomize_batch_norm(*b.net);
    b.net->eval();
    auto q = QuantizedNet::lower(cfg, *b.net);
    EXPECT_TRUE(q.is_ok()) << q.status().message();
    b.q = *q;
    Status st = b.q->calibrate(
        [&](const QuantizedNet::Feed& feed) {
            for (int64_t i = 0; i < calib.size(0); i += 16) feed(calib.slice(0, i, i + 16));
            return Status::ok();
        },
        opts);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return b;
}

struct Case {
    const char* arch;
    int64_t depth, width;
    data::ImageShape shape;
};

class QuantizedZoo : public ::testing::TestWithParam<Case> {};

// The INT8 graph (BatchNorm folded, ReLU fused, oneDNN kernels) computes what the float network
// computes, up to 8-bit rounding: every zoo architecture, including basic and bottleneck blocks.
TEST_P(QuantizedZoo, Int8OutputsFollowTheFloatNetwork) {
    const Case c = GetParam();
    at::set_num_threads(2);
    ModelConfig cfg;
    cfg.arch = c.arch;
    cfg.depth = c.depth;
    cfg.width = c.width;
    torch::manual_seed(7);
    auto calib = torch::randn({64, c.shape.channels, c.shape.height, c.shape.width});
    auto b = build_and_quantize(cfg, c.shape, calib);
    ASSERT_TRUE(b.q->ready());
    torch::NoGradGuard no_grad;
    auto x = torch::randn({32, c.shape.channels, c.shape.height, c.shape.width});
    auto ref = b.net->forward(x);
    auto got = b.q->forward(x);
    ASSERT_EQ(got.sizes(), ref.sizes());
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    EXPECT_GT(cosine(got, ref), 0.99) << c.arch << c.depth;
    // Channels-last input (what eval and serve feed convolutional nets) gives the same result.
    auto got_cl = b.q->forward(x.contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::allclose(got, got_cl, 1e-4, 1e-4));
    // The INT8 graph on oneDNN primitives (symmetric activations, post-op fusion) and libtorch's
    // quantized ops both follow the float network and each other.
    EXPECT_EQ(b.q->runtime(), "onednn-primitives");
    ASSERT_TRUE(b.q->prepack(/*primitives=*/false).is_ok());
    EXPECT_EQ(b.q->runtime(), "libtorch-quantized");
    auto lib = b.q->forward(x);
    EXPECT_GT(cosine(lib, ref), 0.99) << c.arch << c.depth;
    EXPECT_GT(cosine(got, lib), 0.995) << c.arch << c.depth;
    EXPECT_GT((got.argmax(1) == lib.argmax(1)).to(torch::kFloat).mean().item<double>(), 0.8);
    ASSERT_TRUE(b.q->prepack().is_ok());
    EXPECT_TRUE(torch::allclose(b.q->forward(x), got, 1e-5, 1e-5));
    // The stored weights really are 8-bit.
    int64_t int8_params = 0;
    for (const auto& p : b.q->parameters()) {
        if (p.scalar_type() != torch::kChar) continue;
        ++int8_params;
        EXPECT_LE(p.abs().max().item<int>(), 127);
    }
    EXPECT_GT(int8_params, 1);
}

INSTANTIATE_TEST_SUITE_P(Zoo, QuantizedZoo,
                         ::testing::Values(Case{"cnn", 2, 16, {1, 28, 28}}, Case{"mlp", 2, 64, {1, 28, 28}},
                                           Case{"resnet", 8, 8, {3, 32, 32}}, Case{"resnet", 50, 4, {3, 16, 16}},
                                           Case{"resnet", 18, 8, {3, 72, 72}}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.arch) + std::to_string(param_info.param.depth);
                         });

TEST(Quantize, ObserversClipOutliersDifferently) {
    ModelConfig cfg;
    cfg.arch = "mlp";
    cfg.width = 32;
    auto scale_of_input = [&](const torch::Tensor& calib, const char* observer) {
        models::QuantizeOptions o;
        o.observer = observer;
        o.percentile = 99.9;
        auto b = build_and_quantize(cfg, {1, 32, 32}, calib, o);
        return b.q->describe()[0]["scale"].get<double>();
    };
    torch::manual_seed(3);
    auto calib = torch::randn({256, 1, 32, 32});  // 262144 values, |x| < 5.5
    auto far = calib.clone();
    far[0][0][0][0] = 1000.f;  // one wild outlier
    const double minmax = scale_of_input(far, "minmax"), pct = scale_of_input(far, "percentile");
    EXPECT_GT(minmax, 1000.0 / 255 * 0.99);  // the range covers the outlier
    EXPECT_LT(pct, minmax / 50);             // the 99.9th percentile of N(0, 1) is about 3.1
    // Minimum-MSE clipping: one mild outlier costs less clipped than coarser steps for every value ...
    auto mild = calib.clone();
    mild[0][0][0][0] = 9.f;
    EXPECT_LT(scale_of_input(mild, "histogram"), 0.9 * scale_of_input(mild, "minmax"));
    // ... while a range without outliers is left (nearly) whole.
    auto uniform = torch::rand({256, 1, 32, 32}) * 2 - 1;
    EXPECT_GT(scale_of_input(uniform, "histogram"), 0.95 * scale_of_input(uniform, "minmax"));
}

TEST(Quantize, PerTensorWeightsShareOneScale) {
    ModelConfig cfg;
    cfg.arch = "cnn";
    cfg.width = 8;
    models::QuantizeOptions o;
    o.per_channel = false;
    auto b = build_and_quantize(cfg, {1, 16, 16}, torch::randn({32, 1, 16, 16}), o);
    for (const auto& layer : b.q->describe()) {
        if (!layer.contains("weight_scale_min")) continue;
        EXPECT_DOUBLE_EQ(layer["weight_scale_min"].get<double>(), layer["weight_scale_max"].get<double>());
    }
    auto pc = build_and_quantize(cfg, {1, 16, 16}, torch::randn({32, 1, 16, 16}));
    EXPECT_LT(pc.q->describe()[1]["weight_scale_min"].get<double>(), pc.q->describe()[1]["weight_scale_max"].get<double>());
}

/// A net with a layer the lowering does not know (GELU): the error names its path and type.
class GeluNet final : public models::NetImpl {
public:
    GeluNet() {
        features->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
        features->push_back(torch::nn::GELU());
        classifier->push_back(torch::nn::Flatten());
        classifier->push_back(torch::nn::Linear(4 * 6 * 6, 10));
        register_module("features", features);
        register_module("classifier", classifier);
    }
    torch::Tensor forward(torch::Tensor x) override { return classifier->forward(features->forward(x)); }
    torch::nn::Sequential features, classifier;
};

// Found by review: an INT8 package whose scales were 0, NaN or negative (or zero points off
// 0..255) loaded silently and scored 12 %. Packing refuses them, naming the layer.
TEST(Quantize, BadScalesAndZeroPointsAreRefusedWhenPacked) {
    ModelConfig cfg;
    cfg.arch = "cnn";
    cfg.depth = 2;
    cfg.width = 8;
    const data::ImageShape shape{1, 28, 28};
    auto calib = torch::randn({32, 1, 28, 28});
    for (const auto& [name, value] : std::vector<std::pair<std::string, double>>{
             {"scale", 0}, {"scale", std::nan("")}, {"scale", -1}, {"zero_point", 1000}, {"weight_scale", 0}}) {
        auto b = build_and_quantize(cfg, shape, calib);
        torch::NoGradGuard no_grad;
        bool changed = false;
        for (auto& item : b.q->named_buffers()) {
            const std::string& key = item.key();
            if (!changed && key.size() >= name.size() && key.compare(key.size() - name.size(), name.size(), name) == 0 &&
                (name != "scale" || key.find("weight_scale") == std::string::npos)) {
                item.value().fill_(value);
                changed = true;
            }
        }
        ASSERT_TRUE(changed) << name;
        Status st = b.q->prepack();
        ASSERT_FALSE(st.is_ok()) << name << " = " << value;
        EXPECT_EQ(st.code(), StatusCode::kDataLoss);
        EXPECT_EQ(st.message().rfind("INT8 layer ", 0), 0u) << st.message();
        EXPECT_EQ(st.message().find("[bad quantization parameter]"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find(name == "zero_point" ? "not in 0..255" : "positive finite"), std::string::npos)
            << st.message();
    }
}

TEST(Quantize, UnsupportedLayerIsNamed) {
    ModelConfig cfg;
    cfg.arch = "cnn";
    GeluNet net;
    auto q = QuantizedNet::lower(cfg, net);
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("features.1"), std::string::npos) << q.status().message();
    EXPECT_NE(q.status().message().find("GELU"), std::string::npos) << q.status().message();
    ModelConfig other;
    other.arch = "transformer";
    EXPECT_FALSE(QuantizedNet::lower(other, net).is_ok());
    // The FP32 inference lowering walks the same way and names the same layer.
    auto f = models::FusedNet::lower(cfg, net);
    ASSERT_FALSE(f.is_ok());
    EXPECT_NE(f.status().message().find("features.1 ("), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find("FP32 inference lowering"), std::string::npos) << f.status().message();
}

TEST(Quantize, BadObserverOptionsAreRefused) {
    ModelConfig cfg;
    cfg.arch = "mlp";
    auto net = models::create_model(cfg, {1, 8, 8}, 10).value();
    auto q = QuantizedNet::lower(cfg, *net).value();
    auto none = [](const QuantizedNet::Feed&) { return Status::ok(); };
    models::QuantizeOptions o;
    o.observer = "entropy";
    EXPECT_NE(q->calibrate(none, o).message().find("entropy"), std::string::npos);
    o = {};
    o.percentile = 20;
    EXPECT_FALSE(q->calibrate(none, o).is_ok());
    Status empty = q->calibrate(none, {});
    EXPECT_NE(empty.message().find("no data"), std::string::npos) << empty.message();
}

// ---- packages ----

class QuantizePackage : public ::testing::Test {
protected:
    void SetUp() override {
        at::set_num_threads(2);
        dir_ = stdfs::temp_directory_path() / ("strato-quant-" + std::to_string(::getpid()));
        stdfs::remove_all(dir_);
        stdfs::create_directories(dir_);
        data_.dataset = "synthetic";
        data_.path = "/nonexistent";
        data_.image_size = 16;
        data_.channels = 3;
        data_.classes = 10;
        data_.limit_train = 256;
        data_.workers = 0;
        models::PackageInfo info;
        info.model.arch = "resnet";
        info.model.depth = 8;
        info.model.width = 8;
        info.input_shape = {3, 16, 16};
        info.num_classes = 10;
        for (int i = 0; i < 10; ++i) info.labels.push_back(fmt::format("c{}", i));
        info.mean = {0.5, 0.5, 0.5};
        info.std = {0.25, 0.25, 0.25};
        torch::manual_seed(5);
        auto net = models::create_model(info.model, info.input_shape, 10).value();
        randomize_batch_norm(*net);
        ASSERT_TRUE(models::save_package(float_dir(), info, *net).is_ok());
    }
    void TearDown() override { if (!getenv("KEEP")) stdfs::remove_all(dir_); }
    std::string float_dir() const { return (dir_ / "model").string(); }
    std::string int8_dir() const { return (dir_ / "model-int8").string(); }
    QuantizeRequest request() const {
        QuantizeRequest r;
        r.model = float_dir();
        r.output = int8_dir();
        r.data = data_;
        r.calibration_batches = 4;
        r.calibration_batch_size = 32;
        return r;
    }
    stdfs::path dir_;
    data::DataConfig data_;
};

TEST_F(QuantizePackage, WritesAnInt8PackageThatLoadsAndMatches) {
    auto r = quantize_package(request());
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->calibration_samples, 128);
    ASSERT_TRUE(r->float_accuracy && r->int8_accuracy);
    // int8 weights; the archive's per-tensor records weigh more in a net this small than in real ones.
    EXPECT_GT(r->float_bytes, 2 * r->int8_bytes);
    auto f = models::load_package(float_dir());
    auto q = models::load_package(int8_dir());
    ASSERT_TRUE(q.is_ok()) << q.status().message();
    EXPECT_TRUE(q->info.quantized());
    EXPECT_EQ(q->info.quantization["observer"], "histogram");
    EXPECT_EQ(q->info.labels, f->info.labels);
    EXPECT_DOUBLE_EQ(q->info.metrics["test_acc"].get<double>(), *r->int8_accuracy);
    torch::NoGradGuard no_grad;
    auto x = torch::randn({8, 3, 16, 16});
    auto yf = f->net->forward(x), yq = q->net->forward(x);
    EXPECT_GT(cosine(yq, yf), 0.99);
    // Loading twice gives the same int8 network, bit for bit.
    auto q2 = models::load_package(int8_dir());
    EXPECT_TRUE(torch::equal(q2->net->forward(x), yq));
    auto manifest = nlohmann::json::parse(*fs::read_file(int8_dir() + "/strato-model.json"));
    EXPECT_EQ(manifest["precision"], "int8");
    EXPECT_EQ(manifest["quantization"]["engine"], QuantizedNet::engine());
}

// A package at --output was replaced without asking: an unrelated trained model was lost (found
// by review). It takes --overwrite, as prune's and train's outputs do.
TEST_F(QuantizePackage, APackageAtTheOutputIsReplacedOnlyWithOverwrite) {
    QuantizeRequest r = request();
    r.evaluate = false;
    ASSERT_TRUE(quantize_package(r).is_ok());
    const auto before = fs::sha256_file(int8_dir() + "/strato-model.json").value();
    auto again = quantize_package(r);
    ASSERT_FALSE(again.is_ok());
    EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
    EXPECT_NE(again.status().message().find("pass --overwrite"), std::string::npos) << again.status().message();
    EXPECT_EQ(fs::sha256_file(int8_dir() + "/strato-model.json").value(), before);
    r.overwrite = true;
    r.seed = 9;
    ASSERT_TRUE(quantize_package(r).is_ok());
    EXPECT_TRUE(models::load_package(int8_dir()).is_ok());
}

TEST_F(QuantizePackage, AnInt8PackageIsNotQuantizedAgain) {
    ASSERT_TRUE(quantize_package(request()).is_ok());
    QuantizeRequest again = request();
    again.model = int8_dir();
    again.output = (dir_ / "twice").string();
    auto r = quantize_package(again);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("already quantized"), std::string::npos) << r.status().message();
    EXPECT_FALSE(stdfs::exists(dir_ / "twice"));
}

// strato serve keeps an INT8 package on the CPU (oneDNN) even where GPUs are visible: KIND_AUTO
// resolves to KIND_CPU, and a KIND_GPU instance is refused with the reason.
TEST_F(QuantizePackage, ServeKeepsAnInt8PackageOnTheCpu) {
    ASSERT_TRUE(quantize_package(request()).is_ok());
    serve::register_torch_backends(1);
    serve::ModelConfig cfg;
    cfg.name = "q";
    cfg.backend = "strato";
    const serve::Backend* b = serve::find_backend(cfg);
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(b->autocomplete(&cfg, int8_dir()).is_ok());
    auto devices = serve::place_instances(&cfg, b->gpu, /*gpus_visible=*/2);
    ASSERT_TRUE(devices.is_ok()) << devices.status().message();
    EXPECT_EQ(*devices, (std::vector<serve::Device>{{}}));
    auto on_gpu = b->load(cfg, int8_dir(), serve::Device{0});
    ASSERT_FALSE(on_gpu.is_ok());
    EXPECT_EQ(on_gpu.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(on_gpu.status().message().find("an INT8 package runs on the CPU"), std::string::npos) << on_gpu.status().message();
    EXPECT_TRUE(b->load(cfg, int8_dir(), serve::Device{}).is_ok());
}

int process_threads() {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    return -1;
}

// A model loaded on a thread that ran OpenMP work leaves no OpenMP pool on it: the loading
// thread does not run the model again, and idle pools that outnumber the cores make libgomp stop
// spinning in every other team (Model::intra_op_threads). The model reports its intra-op threads.
TEST_F(QuantizePackage, ServeLoadFreesTheLoadingThreadsOpenMpPool) {
    serve::register_torch_backends(2);
    serve::ModelConfig cfg;
    cfg.name = "m";
    cfg.backend = "strato";
    const serve::Backend* b = serve::find_backend(cfg);
    ASSERT_TRUE(b->autocomplete(&cfg, float_dir()).is_ok());
    const int base = process_threads();
    int with_pool = 0, after = 0;
    std::thread loader([&] {
        // A parallel region (inside libtorch) as a warm-up may run one: this thread now keeps a
        // pool of workers.
        (void)torch::ones({1 << 22}).mul_(2.0f);
        with_pool = process_threads();
        auto m = b->load(cfg, float_dir(), serve::Device{});
        ASSERT_TRUE(m.is_ok()) << m.status().message();
        EXPECT_EQ((*m)->intra_op_threads(), 2);
        for (int i = 0; i < 2000 && (after = process_threads()) > base + 1; ++i)  // workers exit on their own
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
    loader.join();
    ASSERT_GT(with_pool, base + 1) << "the parallel region started no worker: nothing to check";
    EXPECT_EQ(after, base + 1) << "threads: " << base << " before, " << with_pool << " with the loader's pool, " << after
                               << " after the load (the loader is one)";
    serve::register_torch_backends(1);
}

// The strato backend's precision parameter: bf16 runs the float package's network under CPU
// autocast (AMX here) and answers close to FP32; fp16 is for GPUs; INT8 packages take none.
TEST_F(QuantizePackage, ServePrecisionParameter) {
    ASSERT_TRUE(quantize_package(request()).is_ok());
    serve::register_torch_backends(1);
    auto load = [](const std::string& dir, const char* precision, bool fuse = true) {
        serve::ModelConfig cfg;
        cfg.name = "m";
        cfg.backend = "strato";
        if (precision) cfg.parameters["precision"] = precision;
        if (!fuse) cfg.parameters["fuse"] = "false";
        const serve::Backend* b = serve::find_backend(cfg);
        EXPECT_TRUE(b->autocomplete(&cfg, dir).is_ok());
        return b->load(cfg, dir, serve::Device{});
    };
    auto run = [](serve::Model& m, const torch::Tensor& x) {
        serve::Tensor in{"input", serve::DataType::kFp32, {x.size(0), 3, 16, 16}, {}};
        in.data.assign(static_cast<const char*>(x.data_ptr()), static_cast<size_t>(x.numel()) * sizeof(float));
        std::vector<serve::Tensor> out;
        EXPECT_TRUE(m.execute({in}, &out).is_ok());
        return torch::from_blob(out.at(0).data.data(), {x.size(0), 10}).clone();
    };
    auto fp32 = load(float_dir(), nullptr);
    auto bf16 = load(float_dir(), "bf16");
    ASSERT_TRUE(fp32.is_ok()) << fp32.status().message();
    ASSERT_TRUE(bf16.is_ok()) << bf16.status().message();
    torch::manual_seed(9);
    auto x = torch::rand({8, 3, 16, 16});
    auto a = run(**fp32, x), b = run(**bf16, x);
    EXPECT_FALSE(torch::equal(a, b));  // bf16 really ran
    EXPECT_LT((a - b).abs().max().item<float>(), 0.1f * std::max(1.0f, a.abs().max().item<float>()));
    // fuse "false": the eager network under bf16 autocast, as close.
    auto eager = load(float_dir(), "bf16", /*fuse=*/false);
    ASSERT_TRUE(eager.is_ok()) << eager.status().message();
    auto e = run(**eager, x);
    EXPECT_FALSE(torch::equal(a, e));
    EXPECT_LT((a - e).abs().max().item<float>(), 0.1f * std::max(1.0f, a.abs().max().item<float>()));
    auto fp16 = load(float_dir(), "fp16");
    ASSERT_FALSE(fp16.is_ok());
    EXPECT_NE(fp16.status().message().find("for GPU instances"), std::string::npos) << fp16.status().message();
    auto odd = load(float_dir(), "fp8");
    ASSERT_FALSE(odd.is_ok());
    EXPECT_NE(odd.status().message().find("not one of"), std::string::npos) << odd.status().message();
    auto q = load(int8_dir(), "bf16");
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("is for float packages"), std::string::npos) << q.status().message();
}

TEST_F(QuantizePackage, MissingCalibrationDataIsAClearError) {
    QuantizeRequest r = request();
    r.data.dataset = "image-folder";
    r.data.path = (dir_ / "no-such-folder").string();
    auto q = quantize_package(r);
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("calibration data"), std::string::npos) << q.status().message();
    EXPECT_NE(q.status().message().find("no-such-folder"), std::string::npos) << q.status().message();
    r = request();
    r.calibration_batches = 0;
    EXPECT_FALSE(quantize_package(r).is_ok());
    r = request();
    r.output = float_dir();
    EXPECT_NE(quantize_package(r).status().message().find("the source package"), std::string::npos);
}

// Found by review: an --output in a folder that takes no new files (a read-only mount) failed only
// when the package was saved, after the calibration and the evaluation, naming a staging folder.
// It is refused first, before the calibration data is even opened.
TEST_F(QuantizePackage, AnOutputThatCannotBeWrittenIsRefusedBeforeAnyWork) {
    QuantizeRequest r = request();
    r.output = "/proc/strato-quantize-test/model-int8";  // procfs takes no new files, even from root
    r.data.dataset = "image-folder";
    r.data.path = (dir_ / "no-such-folder").string();
    auto q = quantize_package(r);
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("--output /proc/strato-quantize-test/model-int8"), std::string::npos)
        << q.status().message();
    EXPECT_NE(q.status().message().find("cannot write in /proc"), std::string::npos) << q.status().message();
}

/// Every file under `dir` with its SHA-256.
std::map<std::string, std::string> tree_checksums(const stdfs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : stdfs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) {
            auto sum = fs::sha256_file(e.path());
            out[e.path().string()] = sum.is_ok() ? *sum : sum.status().message();
        }
    return out;
}

// Found by review: Ctrl-C killed `strato compress quantize` on the spot (SIGINT's default
// action). With the stop handlers installed, a stop request ends it at the next calibration
// batch with kCancelled (exit 130): the package already at --output is left as it was, and no
// staging folder or probe file is left beside it.
TEST_F(QuantizePackage, AStopRequestEndsTheCalibrationAndWritesNothing) {
    QuantizeRequest r = request();
    r.evaluate = false;
    ASSERT_TRUE(quantize_package(r).is_ok());
    const auto before = tree_checksums(dir_);
    signals::install_stop_handlers();
    std::raise(SIGINT);
    ASSERT_TRUE(signals::stop_requested());
    r.overwrite = true;
    r.evaluate = true;
    r.seed = 3;
    auto q = quantize_package(r);
    signals::reset();
    ASSERT_FALSE(q.is_ok());
    EXPECT_EQ(q.status().code(), StatusCode::kCancelled);
    EXPECT_NE(q.status().message().find("interrupted by signal 2 during the calibration (pass 1 of 2, before batch 1"),
              std::string::npos)
        << q.status().message();
    EXPECT_NE(q.status().message().find("no package written"), std::string::npos) << q.status().message();
    EXPECT_EQ(tree_checksums(dir_), before);  // same files, same bytes: nothing added, nothing replaced
}

// Found by review: a CSV model quantized without --dataset was calibrated on Fashion-MNIST (the
// default) and refused with "the data has 1x28x28 images but the model expects 4x1x1", naming no
// data and no way out.
TEST_F(QuantizePackage, CalibrationDataThatDoesNotFitTheModelIsNamedWithAHint) {
    QuantizeRequest r = request();
    r.data.channels = 1;  // synthetic 1x16x16 images for a model of 3x16x16
    auto q = quantize_package(r);
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("calibration data (synthetic): the data has 1x16x16 images but the model "
                                        "expects 3x16x16"),
              std::string::npos)
        << q.status().message();
    EXPECT_NE(q.status().message().find("hint: calibrate on the data the model was trained on"), std::string::npos)
        << q.status().message();
    EXPECT_FALSE(stdfs::exists(int8_dir()));

    // A table's model (features in its manifest): the hint names the columns and --dataset csv.
    models::PackageInfo info;
    info.model.arch = "mlp";
    info.input_shape = {3, 1, 1};
    info.num_classes = 2;
    info.labels = {"no", "yes"};
    info.features = {"age", "income", "score"};
    info.mean = {0.5, 0.5, 0.5};
    info.std = {0.25, 0.25, 0.25};
    auto net = models::create_model(info.model, info.input_shape, 2).value();
    const std::string table = (dir_ / "table").string();
    ASSERT_TRUE(models::save_package(table, info, *net).is_ok());
    r = request();
    r.model = table;
    r.output = (dir_ / "table-int8").string();
    r.data = data::DataConfig{};  // the default: Fashion-MNIST
    q = quantize_package(r);
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("calibration data (fashion-mnist at "), std::string::npos)
        << q.status().message();
    EXPECT_NE(q.status().message().find("hint: the model reads a table of 3 features (age, income, score): --dataset "
                                        "csv --data DIR"),
              std::string::npos)
        << q.status().message();
    // A table that cannot be read is named by its file and line, with no hint at other data.
    const stdfs::path csv = dir_ / "csv";
    stdfs::create_directories(csv);
    for (const char* split : {"train.csv", "test.csv"})
        ASSERT_TRUE(fs::atomic_write(csv / split, "age,income,score,label\n0.1,0.2,0.3,0\ninf,0.5,0.5,1\n").is_ok());
    r.data.dataset = "csv";
    r.data.path = csv.string();
    q = quantize_package(r);
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("calibration data (csv at " + csv.string() + "): "), std::string::npos)
        << q.status().message();
    EXPECT_NE(q.status().message().find("train.csv:3"), std::string::npos) << q.status().message();
    EXPECT_EQ(q.status().message().find("hint:"), std::string::npos) << q.status().message();
}

TEST_F(QuantizePackage, CorruptInt8WeightsAreReportedNotLoaded) {
    ASSERT_TRUE(quantize_package(request()).is_ok());
    const std::string w = int8_dir() + "/weights.pt";
    std::string bytes = *fs::read_file(w);
    bytes[bytes.size() / 2] ^= 0x5a;
    ASSERT_TRUE(fs::atomic_write(w, bytes).is_ok());
    auto q = models::load_package(int8_dir());
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.status().message().find("corrupt"), std::string::npos) << q.status().message();
}

}  // namespace
}  // namespace strato::compress
