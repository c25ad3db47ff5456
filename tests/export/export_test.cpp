// ONNX export checked by a runtime nobody here wrote: every zoo architecture (also channel-pruned,
// with uneven widths) is exported, the file passes libonnx's checker and shape inference, and
// OpenCV DNN runs it to the same logits as libtorch's eval-mode forward pass (batch 1 and 5, max
// abs difference <= 1e-4).

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/dnn.hpp>

#include "strato/core/fs.h"
#include "strato/core/signals.h"
#include "strato/export/onnx_export.h"
#include "strato/models/package.h"

namespace strato::exporter {
namespace {
namespace stdfs = std::filesystem;
namespace nn = torch::nn;

constexpr double kTolerance = 1e-4;

struct Case {
    std::string name;
    models::ModelConfig cfg;
    data::ImageShape shape;
    int64_t classes;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }  // readable ctest names

models::ModelConfig config(const std::string& arch, int64_t depth, int64_t width, bool bn, double dropout,
                           int64_t hidden = 16) {
    models::ModelConfig c;
    c.arch = arch;
    c.depth = depth;
    c.width = width;
    c.batch_norm = bn;
    c.dropout = dropout;
    c.hidden = hidden;
    return c;
}

/// A channel-pruned network: `cfg` with explicit, uneven widths of its prunable layers (what
/// `strato compress prune --method channels` writes into model.channels).
models::ModelConfig pruned(models::ModelConfig c, std::vector<int64_t> channels) {
    c.channels = std::move(channels);
    return c;
}
std::vector<int64_t> uneven(size_t n) {
    std::vector<int64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(1 + (i * 7) % 5);
    return v;
}

/// Random weights, non-trivial BatchNorm affine parameters and running statistics (training-mode
/// passes over shifted, scaled inputs), then eval mode.
models::Net make_net(const Case& c, uint64_t seed) {
    torch::manual_seed(static_cast<int64_t>(seed));
    auto net = models::create_model(c.cfg, c.shape, c.classes);
    EXPECT_TRUE(net.is_ok()) << net.status().message();
    models::Net n = *net;
    torch::NoGradGuard no_grad;
    for (auto& m : n->modules(/*include_self=*/false)) {
        if (auto* bn = m->as<nn::BatchNorm2d>()) {
            bn->weight.uniform_(0.5, 1.5);
            bn->bias.normal_(0, 0.2);
        }
    }
    n->train();
    for (int i = 0; i < 4; ++i)
        n->forward(torch::randn({6, c.shape.channels, c.shape.height, c.shape.width}) * 1.7 + 0.3);
    n->eval();
    return n;
}

OnnxSpec spec_for(const Case& c) {
    OnnxSpec s;
    s.arch = c.cfg.arch;
    s.input_shape = c.shape;
    s.classes = c.classes;
    return s;
}

std::string dims(const onnx::TypeProto& t) {
    std::string s;
    for (const auto& d : t.tensor_type().shape().dim()) {
        s += (s.empty() ? "" : ",") + (d.has_dim_value()   ? std::to_string(d.dim_value())
                                       : d.has_dim_param() ? d.dim_param()
                                                           : "?");
    }
    return s;
}

/// Runs `onnx_net` (OpenCV DNN) and `net` (libtorch, eval) on the same random batch; returns the
/// max abs difference of the logits.
double max_diff_vs_opencv(cv::dnn::Net& onnx_net, models::NetImpl& net, const Case& c, int batch,
                          const std::string& in = "input", const std::string& out = "logits") {
    torch::Tensor x = torch::randn({batch, c.shape.channels, c.shape.height, c.shape.width}).contiguous();
    torch::Tensor want;
    {
        torch::NoGradGuard no_grad;
        want = net.forward(x).contiguous();
    }
    std::vector<int> sz(x.sizes().begin(), x.sizes().end());
    cv::Mat blob(static_cast<int>(sz.size()), sz.data(), CV_32F, x.data_ptr<float>());
    onnx_net.setInput(blob, in);
    cv::Mat got = onnx_net.forward(out);
    EXPECT_EQ(got.dims, 2);
    EXPECT_EQ(got.size[0], batch);
    EXPECT_EQ(got.size[1], c.classes);
    if (got.dims != 2 || got.size[0] != batch || got.size[1] != c.classes) return 1e9;
    cv::Mat g = got.isContinuous() ? got : got.clone();
    torch::Tensor got_t = torch::from_blob(g.ptr<float>(), {batch, c.classes}, torch::kFloat).clone();
    return (got_t - want).abs().max().item<double>();
}

class ZooExport : public ::testing::TestWithParam<Case> {};

TEST_P(ZooExport, CheckedAndMatchesLibtorchInOpenCv) {
    const Case& c = GetParam();
    models::Net net = make_net(c, 7);
    auto onnx_model = net_to_onnx(*net, spec_for(c));
    ASSERT_TRUE(onnx_model.is_ok()) << onnx_model.status().message();

    // Checker and shape inference again, here, on the parsed bytes.
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(onnx_model->bytes));
    EXPECT_GE(proto.opset_import(0).version(), 13);
    EXPECT_NO_THROW(onnx::checker::check_model(proto));
    EXPECT_EQ(proto.graph().input_size(), 1);
    EXPECT_EQ(proto.graph().input(0).name(), "input");
    EXPECT_EQ(dims(proto.graph().input(0).type()),
              fmt::format("batch,{},{},{}", c.shape.channels, c.shape.height, c.shape.width));
    proto.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    EXPECT_NO_THROW(onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(),
                                                       onnx::ShapeInferenceOptions(true, 1)));
    const std::string inferred = dims(proto.graph().output(0).type());
    EXPECT_TRUE(inferred == fmt::format("batch,{}", c.classes) || inferred == fmt::format("?,{}", c.classes))
        << inferred;
    for (const auto& n : proto.graph().node()) EXPECT_NE(n.op_type(), "Dropout");

    cv::dnn::Net cv_net = cv::dnn::readNetFromONNX(onnx_model->bytes.data(), onnx_model->bytes.size());
    ASSERT_FALSE(cv_net.empty());
    cv_net.setPreferableBackend(cv::dnn::DNN_BACKEND_OPENCV);
    cv_net.setPreferableTarget(cv::dnn::DNN_TARGET_CPU);
    double worst = 0;
    for (int batch : {1, 5, 1}) {
        double d = max_diff_vs_opencv(cv_net, *net, c, batch);
        worst = std::max(worst, d);
        EXPECT_LE(d, kTolerance) << c.name << " at batch " << batch;
    }
    std::cout << "[ export   ] " << c.name << ": " << onnx_model->nodes << " nodes, max |onnx - torch| = " << worst
              << "\n";
    RecordProperty("max_abs_diff", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ZooExport,
    ::testing::Values(Case{"mlp", config("mlp", 2, 32, false, 0.3), {1, 8, 8}, 5},
                      Case{"cnn_bn", config("cnn", 2, 4, true, 0.25), {3, 16, 12}, 7},
                      Case{"cnn_no_bn", config("cnn", 2, 4, false, 0.25), {1, 16, 16}, 4},
                      Case{"resnet8", config("resnet", 8, 4, true, 0.2), {3, 16, 16}, 6},
                      Case{"resnet18_imagenet_stem", config("resnet", 18, 4, true, 0), {3, 72, 72}, 3},
                      Case{"resnet50_bottleneck", config("resnet", 50, 2, true, 0), {1, 16, 16}, 10},
                      // channel-pruned: uneven widths per layer, the cnn's flatten over fewer channels
                      Case{"cnn_pruned", pruned(config("cnn", 2, 4, true, 0.25), {3, 4, 5, 2}), {3, 16, 12}, 7},
                      Case{"cnn_no_bn_pruned", pruned(config("cnn", 2, 4, false, 0), {2, 3, 1, 6}), {1, 16, 16}, 4},
                      Case{"resnet8_pruned", pruned(config("resnet", 8, 4, true, 0.2), {3, 5, 2}), {3, 16, 16}, 6},
                      Case{"resnet50_pruned", pruned(config("resnet", 50, 2, true, 0), uneven(32)), {1, 16, 16}, 10},
                      Case{"mlp_pruned", pruned(config("mlp", 2, 32, false, 0.3), {11, 5}), {1, 8, 8}, 5}),
    [](const auto& p) { return p.param.name; });

class TempDir {
  public:
    TempDir() : path_(stdfs::temp_directory_path() / fmt::format("strato_export_test_{}_{}", ::getpid(), counter_++)) {
        stdfs::remove_all(path_);
        stdfs::create_directories(path_);
    }
    ~TempDir() { stdfs::remove_all(path_); }
    const stdfs::path& path() const { return path_; }

  private:
    static inline int counter_ = 0;
    stdfs::path path_;
};

/// A package of case `c`'s network (weights from `seed`), three labelled classes, at `dir`.
Status save_test_package(const Case& c, uint64_t seed, const std::string& dir) {
    models::Net net = make_net(c, seed);
    models::PackageInfo info;
    info.model = c.cfg;
    info.input_shape = c.shape;
    info.num_classes = c.classes;
    info.labels = {"a", "b", "c"};
    info.mean = {0.5};
    info.std = {0.25};
    return models::save_package(dir, info, *net);
}

TEST(PackageExport, WritesModelOnnxIntoTheManifestAndStaysLoadable) {
    TempDir tmp;
    const Case c{"cnn", config("cnn", 1, 4, true, 0.1), {1, 12, 12}, 3};
    const std::string dir = (tmp.path() / "model").string();
    ASSERT_TRUE(save_test_package(c, 11, dir).is_ok());

    for (int round = 0; round < 2; ++round) {  // the second export replaces a listed model.onnx
        auto r = export_package_onnx(dir, {});
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r->path, (stdfs::path(dir) / kOnnxFile).string());
        EXPECT_TRUE(r->in_manifest);
        EXPECT_EQ(r->opset, 13);
        EXPECT_EQ(r->input_shape, (std::vector<int64_t>{-1, 1, 12, 12}));
        EXPECT_EQ(r->output_shape, (std::vector<int64_t>{-1, 3}));
        auto text = fs::read_file(stdfs::path(dir) / models::kPackageManifest);
        ASSERT_TRUE(text.is_ok());
        auto m = nlohmann::json::parse(*text);
        ASSERT_TRUE(m["files"].contains(kOnnxFile));
        EXPECT_EQ(m["files"][kOnnxFile]["sha256"], r->sha256);
        EXPECT_EQ(fs::sha256_file(r->path).value(), r->sha256);
    }
    EXPECT_NO_THROW(onnx::checker::check_model((stdfs::path(dir) / kOnnxFile).string()));

    auto loaded = models::load_package(dir);  // still verifies, model.onnx included
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    cv::dnn::Net cv_net = cv::dnn::readNetFromONNX((stdfs::path(dir) / kOnnxFile).string());
    EXPECT_LE(max_diff_vs_opencv(cv_net, *loaded->net, c, 4), kTolerance);

    // A corrupted model.onnx is now caught by the package's own verification.
    ASSERT_TRUE(fs::atomic_write(stdfs::path(dir) / kOnnxFile, "not onnx").is_ok());
    auto broken = models::load_package(dir);
    ASSERT_FALSE(broken.is_ok());
    EXPECT_NE(broken.status().message().find(kOnnxFile), std::string::npos) << broken.status().message();

    // --output outside the package: written there, manifest untouched; --output over the weights refused.
    auto repaired = export_package_onnx(dir, {});  // replaces (and relists) the corrupt file
    ASSERT_TRUE(repaired.is_ok()) << repaired.status().message();
    ASSERT_TRUE(models::load_package(dir).is_ok());
    const std::string elsewhere = (tmp.path() / "cnn.onnx").string();
    auto r = export_package_onnx(dir, {.output = elsewhere, .opset = 17});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_FALSE(r->in_manifest);
    EXPECT_TRUE(stdfs::exists(elsewhere));
    auto clobber = export_package_onnx(dir, {.output = (stdfs::path(dir) / models::kPackageWeights).string()});
    ASSERT_FALSE(clobber.is_ok());
    EXPECT_NE(clobber.status().message().find("weights.pt"), std::string::npos) << clobber.status().message();
    EXPECT_TRUE(models::load_package(dir).is_ok());

    // What is not an ONNX model is not written over: a text file, a FIFO, another package's weights.
    const stdfs::path victim = tmp.path() / "notes.txt";
    ASSERT_TRUE(fs::atomic_write(victim, "precious\n").is_ok());
    const stdfs::path fifo = tmp.path() / "f.onnx";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const stdfs::path other = tmp.path() / "other";
    stdfs::copy(dir, other);
    for (const stdfs::path& p : {victim, fifo}) {
        auto refused = export_package_onnx(dir, {.output = p.string()});
        ASSERT_FALSE(refused.is_ok()) << p;
        EXPECT_NE(refused.status().message().find("not writing over it"), std::string::npos)
            << refused.status().message();
    }
    // Found by review: another package's own model.onnx was overwritten (an ONNX file) and that
    // package then failed its checksum. Nothing is written into another package.
    for (const char* name : {models::kPackageWeights, kOnnxFile, "new.onnx"}) {
        auto refused = export_package_onnx(dir, {.output = (other / name).string()});
        ASSERT_FALSE(refused.is_ok()) << name;
        EXPECT_NE(refused.status().message().find("is another model package; not writing into it"), std::string::npos)
            << refused.status().message();
    }
    EXPECT_TRUE(models::load_package(other.string()).is_ok());
    EXPECT_EQ(fs::read_file(victim).value(), "precious\n");
    EXPECT_TRUE(stdfs::is_fifo(fifo));
    // A symbolic link is followed: the ONNX file lands where it points and the link stays.
    const stdfs::path link = tmp.path() / "latest.onnx";
    stdfs::create_symlink(elsewhere, link);
    auto via_link = export_package_onnx(dir, {.output = link.string()});
    ASSERT_TRUE(via_link.is_ok()) << via_link.status().message();
    EXPECT_TRUE(stdfs::is_symlink(link));
    EXPECT_EQ(fs::sha256_file(elsewhere).value(), via_link->sha256);
    // ... also a link to a file not there yet (it was replaced by a file; found by review).
    stdfs::create_directories(tmp.path() / "sub");
    const stdfs::path dangling = tmp.path() / "next.onnx";
    stdfs::create_symlink("sub/target.onnx", dangling);
    auto via_dangling = export_package_onnx(dir, {.output = dangling.string()});
    ASSERT_TRUE(via_dangling.is_ok()) << via_dangling.status().message();
    EXPECT_TRUE(stdfs::is_symlink(dangling));
    EXPECT_TRUE(stdfs::is_regular_file(tmp.path() / "sub" / "target.onnx"));

    // Exports of one package at once take turns: the manifest lists the file that is there.
    for (int round = 0; round < 4; ++round) {
        std::thread a([&] { EXPECT_TRUE(export_package_onnx(dir, {.opset = 13}).is_ok()); });
        std::thread b([&] { EXPECT_TRUE(export_package_onnx(dir, {.opset = 17}).is_ok()); });
        a.join();
        b.join();
        auto after = models::load_package(dir);
        ASSERT_TRUE(after.is_ok()) << after.status().message();
    }

    // An export that fails leaves the package's manifest as it was, a stale model.onnx entry included.
    ASSERT_TRUE(fs::atomic_write(stdfs::path(dir) / kOnnxFile, "\x08stale").is_ok());
    auto weights = fs::read_file(stdfs::path(dir) / models::kPackageWeights).value();
    weights[weights.size() / 2] ^= 1;
    ASSERT_TRUE(fs::atomic_write(stdfs::path(dir) / models::kPackageWeights, weights).is_ok());
    const std::string manifest_before = fs::read_file(stdfs::path(dir) / models::kPackageManifest).value();
    auto failed = export_package_onnx(dir, {});
    ASSERT_FALSE(failed.is_ok());
    EXPECT_NE(failed.status().message().find("weights.pt"), std::string::npos) << failed.status().message();
    EXPECT_EQ(fs::read_file(stdfs::path(dir) / models::kPackageManifest).value(), manifest_before);
}

// Found by review: an export killed while it rewrote the manifest left
// strato-model.json.tmp.<pid>.<n> in the package, and no later export removed it (only the
// ONNX file's own temp files went).
TEST(PackageExport, TempFilesOfAKilledExportAreRemoved) {
    TempDir tmp;
    const stdfs::path dir = tmp.path() / "model";
    ASSERT_TRUE(save_test_package({"mlp", config("mlp", 1, 8, false, 0), {1, 6, 6}, 3}, 3, dir.string()).is_ok());
    const std::string manifest_temp = std::string(models::kPackageManifest) + ".tmp.99999999.0";  // no such process
    const std::string onnx_temp = std::string(kOnnxFile) + ".tmp.99999999.1";
    ASSERT_TRUE(fs::atomic_write(dir / manifest_temp, "{}").is_ok());
    ASSERT_TRUE(fs::atomic_write(dir / onnx_temp, "\x08half").is_ok());
    auto r = export_package_onnx(dir.string(), {});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_FALSE(stdfs::exists(dir / manifest_temp));
    EXPECT_FALSE(stdfs::exists(dir / onnx_temp));
    EXPECT_TRUE(models::load_package(dir.string()).is_ok());
}

// The OpenCV check above runs opset 13; --opset takes 13..17, so each is run too.
TEST(ZooExport, EveryOpsetIsCheckedAndRunsInOpenCv) {
    for (const Case& c : {Case{"mlp", config("mlp", 2, 16, false, 0.3), {1, 6, 6}, 4},
                          Case{"cnn_bn", config("cnn", 2, 4, true, 0.25), {3, 16, 12}, 5},
                          Case{"resnet8", config("resnet", 8, 4, true, 0), {3, 16, 16}, 6}}) {
        models::Net net = make_net(c, 5);
        for (int64_t opset = kOnnxOpsetMin; opset <= kOnnxOpsetMax; ++opset) {
            OnnxSpec spec = spec_for(c);
            spec.opset = opset;
            auto m = net_to_onnx(*net, spec);
            ASSERT_TRUE(m.is_ok()) << c.name << " opset " << opset << ": " << m.status().message();
            onnx::ModelProto proto;
            ASSERT_TRUE(proto.ParseFromString(m->bytes));
            EXPECT_EQ(proto.opset_import(0).version(), opset);
            EXPECT_NO_THROW(onnx::checker::check_model(proto)) << c.name << " opset " << opset;
            cv::dnn::Net cv_net = cv::dnn::readNetFromONNX(m->bytes.data(), m->bytes.size());
            ASSERT_FALSE(cv_net.empty()) << c.name << " opset " << opset;
            for (int batch : {1, 3})
                EXPECT_LE(max_diff_vs_opencv(cv_net, *net, c, batch), kTolerance) << c.name << " opset " << opset;
        }
    }
}

/// Every file under `dir` with its bytes' SHA-256.
std::map<std::string, std::string> tree_checksums(const stdfs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : stdfs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        auto sum = fs::sha256_file(e.path());
        out[e.path().string()] = sum.is_ok() ? *sum : sum.status().message();
    }
    return out;
}

// Found by review: Ctrl-C killed `strato export` on the spot (SIGINT's default action). With the
// stop handlers installed, a stop request ends it between its steps with kCancelled (exit 130):
// an existing model.onnx, the manifest (put back after a stale entry was unlisted) and a file at
// --output stay as they were, and no temp file is left.
TEST(PackageExport, AStopRequestEndsTheExportAndWritesNothing) {
    TempDir tmp;
    const Case c{"cnn", config("cnn", 1, 4, true, 0.1), {1, 12, 12}, 3};
    const stdfs::path dir = tmp.path() / "model";
    ASSERT_TRUE(save_test_package(c, 11, dir.string()).is_ok());
    ASSERT_TRUE(export_package_onnx(dir.string(), {}).is_ok());
    const stdfs::path elsewhere = tmp.path() / "other.onnx";
    ASSERT_TRUE(fs::atomic_write(elsewhere, "\x08" "an older export").is_ok());
    auto before = tree_checksums(tmp.path());

    signals::install_stop_handlers();
    std::raise(SIGINT);
    ASSERT_TRUE(signals::stop_requested());
    auto in_package = export_package_onnx(dir.string(), {.opset = 17});
    auto outside = export_package_onnx(dir.string(), {.output = elsewhere.string()});
    auto fresh = export_package_onnx(dir.string(), {.output = (tmp.path() / "new.onnx").string()});
    auto after = tree_checksums(tmp.path());
    // A listed model.onnx that no longer matches its checksum is unlisted before the package is
    // loaded: the manifest comes back as it was.
    ASSERT_TRUE(fs::atomic_write(dir / kOnnxFile, "\x08stale").is_ok());
    auto stale_before = tree_checksums(tmp.path());
    auto stale = export_package_onnx(dir.string(), {});
    auto stale_after = tree_checksums(tmp.path());
    signals::reset();

    for (const auto* r : {&in_package, &outside, &fresh, &stale}) {
        ASSERT_FALSE(r->is_ok());
        EXPECT_EQ(r->status().code(), StatusCode::kCancelled) << r->status().message();
        EXPECT_NE(r->status().message().find("interrupted by signal 2 after loading the package; nothing written"),
                  std::string::npos)
            << r->status().message();
    }
    EXPECT_EQ(after, before);  // same files, same bytes: nothing added, nothing replaced
    EXPECT_EQ(stale_after, stale_before);
}

// Found by review: an --output in a folder that takes no new files failed only after the package
// was loaded and the graph built, naming the temp file ("cannot create /proc/x.onnx.tmp.<pid>.0").
// It is refused first, before the package is even read.
TEST(ExportErrors, AnOutputThatCannotBeWrittenIsRefusedBeforeTheWork) {
    TempDir tmp;
    const stdfs::path dir = tmp.path() / "model";
    ASSERT_TRUE(save_test_package({"mlp", config("mlp", 1, 8, false, 0), {1, 6, 6}, 3}, 3, dir.string()).is_ok());
    auto weights = fs::read_file(dir / models::kPackageWeights).value();
    weights[weights.size() / 2] ^= 1;  // loading it would fail: the output is refused before
    ASSERT_TRUE(fs::atomic_write(dir / models::kPackageWeights, weights).is_ok());
    auto r = export_package_onnx(dir.string(), {.output = "/proc/strato-export-test.onnx"});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("/proc/strato-export-test.onnx: cannot write in /proc"), std::string::npos)
        << r.status().message();
    EXPECT_EQ(r.status().message().find(".tmp."), std::string::npos) << r.status().message();
}

// Found by review: `strato export --model runs/x/model/weights.pt` said "does not exist or is not
// a directory" of a file that exists, and a run directory got no hint at its package.
TEST(ExportErrors, WhatIsNotAPackageIsSaidAsLoadingSaysIt) {
    TempDir tmp;
    const stdfs::path dir = tmp.path() / "model";
    ASSERT_TRUE(save_test_package({"mlp", config("mlp", 1, 8, false, 0), {1, 6, 6}, 3}, 3, dir.string()).is_ok());
    auto file = export_package_onnx((dir / models::kPackageWeights).string(), {});
    ASSERT_FALSE(file.is_ok());
    EXPECT_NE(file.status().message().find("is a file of a package; give the package's directory"), std::string::npos)
        << file.status().message();
    auto run = export_package_onnx(tmp.path().string(), {});
    ASSERT_FALSE(run.is_ok());
    EXPECT_NE(run.status().message().find("a run directory? its package is " + dir.string()), std::string::npos)
        << run.status().message();
    EXPECT_FALSE(stdfs::exists(tmp.path() / kOnnxFile));
}

// Found by review: the ONNX file of a model trained on a CSV table did not say which column goes
// where in its [batch, features, 1, 1] input; the package's feature names are in its metadata.
TEST(PackageExport, ATableModelNamesItsFeatureColumns) {
    TempDir tmp;
    const Case c{"mlp", config("mlp", 1, 8, false, 0), {3, 1, 1}, 2};
    models::Net net = make_net(c, 4);
    models::PackageInfo info;
    info.model = c.cfg;
    info.input_shape = c.shape;
    info.num_classes = 2;
    info.labels = {"no", "yes"};
    info.features = {"age", "income", "score"};
    info.mean = {0.5, 0.5, 0.5};
    info.std = {0.25, 0.25, 0.25};
    const stdfs::path dir = tmp.path() / "model";
    ASSERT_TRUE(models::save_package(dir.string(), info, *net).is_ok());
    auto r = export_package_onnx(dir.string(), {});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(fs::read_file(r->path).value()));
    std::map<std::string, std::string> meta;
    for (const auto& p : proto.metadata_props()) meta[p.key()] = p.value();
    EXPECT_EQ(meta["strato.features"], R"(["age","income","score"])");
    // An image model has none.
    const std::string img_dir = (tmp.path() / "img").string();
    ASSERT_TRUE(save_test_package({"mlp", config("mlp", 1, 8, false, 0), {1, 6, 6}, 3}, 3, img_dir).is_ok());
    auto img = export_package_onnx(img_dir, {});
    ASSERT_TRUE(img.is_ok()) << img.status().message();
    ASSERT_TRUE(proto.ParseFromString(fs::read_file(img->path).value()));
    for (const auto& p : proto.metadata_props()) EXPECT_NE(p.key(), "strato.features");
}

TEST(ExportErrors, UnsupportedModuleIsNamedWithItsPathAndType) {
    const Case c{"mlp", config("mlp", 1, 16, false, 0), {1, 4, 4}, 3};  // body: 0 Linear, 1 ReLU, 2 Linear
    models::Net net = make_net(c, 3);
    auto body = std::dynamic_pointer_cast<nn::SequentialImpl>(net->named_children()["body"]);
    ASSERT_TRUE(body);
    body->push_back(nn::Tanh());
    auto r = net_to_onnx(*net, spec_for(c));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(r.status().message().find("'body.3'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("Tanh"), std::string::npos) << r.status().message();
}

TEST(ExportErrors, FunctionalThatIsNotReluIsRefused) {
    const Case c{"mlp", config("mlp", 1, 16, false, 0), {1, 4, 4}, 3};
    models::Net net = make_net(c, 3);
    auto body = std::dynamic_pointer_cast<nn::SequentialImpl>(net->named_children()["body"]);
    body->push_back(nn::Functional(torch::sigmoid));
    auto r = net_to_onnx(*net, spec_for(c));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("'body.3'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("ReLU"), std::string::npos) << r.status().message();
}

TEST(ExportErrors, WrongArchitectureAndOpset) {
    const Case c{"mlp", config("mlp", 1, 16, false, 0), {1, 4, 4}, 3};
    models::Net net = make_net(c, 3);
    OnnxSpec s = spec_for(c);
    s.arch = "cnn";  // an mlp is not laid out like the zoo's cnn
    auto r = net_to_onnx(*net, s);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("cnn"), std::string::npos) << r.status().message();
    s = spec_for(c);
    s.opset = 12;
    r = net_to_onnx(*net, s);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("opset 12"), std::string::npos) << r.status().message();
}

TEST(ExportErrors, MissingPackageDirectory) {
    auto r = export_package_onnx("/nonexistent/strato/model", {});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("/nonexistent/strato/model"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace strato::exporter
