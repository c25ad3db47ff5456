// The comparison report: variant specs, and compare() on real packages over a few hundred
// Fashion-MNIST test samples — accuracy as `strato eval` computes it, size as the files add up,
// parameters and non-zero parameters, positive timings, the bf16 row, the renderers. No timing
// assertions beyond "positive" (the machine is shared).

#include "strato/compress/quantize.h"
#include "strato/compress/report.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "strato/core/signals.h"
#include "strato/models/package.h"
#include "strato/train/trainer.h"

namespace strato::compress {
namespace {
namespace stdfs = std::filesystem;

struct SpecCase {
    const char* name;  // of the ctest entry
    const char* spec;
    const char* label;  // nullptr: an error containing `error`
    const char* dir;
    bool bf16;
    const char* error;
};

class VariantSpecs : public ::testing::TestWithParam<SpecCase> {};

TEST_P(VariantSpecs, Parse) {
    const SpecCase& c = GetParam();
    auto v = parse_variant(c.spec);
    if (c.label) {
        ASSERT_TRUE(v.is_ok()) << c.spec << ": " << v.status().message();
        EXPECT_EQ(v->label, c.label);
        EXPECT_EQ(v->dir, c.dir);
        EXPECT_EQ(v->bf16, c.bf16);
        EXPECT_EQ(v->eager, std::string(c.spec).ends_with("eager"));
    } else {
        ASSERT_FALSE(v.is_ok()) << c.spec;
        EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(v.status().message().find(c.error), std::string::npos) << v.status().message();
        EXPECT_NE(v.status().message().find(c.spec), std::string::npos) << v.status().message();
    }
}

INSTANTIATE_TEST_SUITE_P(
    Report, VariantSpecs,
    ::testing::Values(
        SpecCase{"Plain", "teacher=runs/cnn/model", "teacher", "runs/cnn/model", false, ""},
        SpecCase{"Bf16", "teacher bf16=runs/cnn/model@bf16", "teacher bf16", "runs/cnn/model", true, ""},
        SpecCase{"Fp32", "t=runs/cnn/model@fp32", "t", "runs/cnn/model", false, ""},
        SpecCase{"Eager", "t=runs/cnn/model@eager", "t", "runs/cnn/model", false, ""},
        SpecCase{"Bf16Eager", "t=runs/cnn/model@bf16-eager", "t", "runs/cnn/model", true, ""},
        SpecCase{"AtInsideThePath", "t=/tmp/a@b/model", "t", "/tmp/a@b/model", false, ""},
        SpecCase{"EqualsInsideThePath", "t=x=y", "t", "x=y", false, ""},
        SpecCase{"NoEquals", "runs/cnn/model", nullptr, nullptr, false, "no '='"},
        SpecCase{"EmptyLabel", "=runs/cnn/model", nullptr, nullptr, false, "label before '=' is empty"},
        SpecCase{"EmptyDir", "t=", nullptr, nullptr, false, "package directory after '=' is empty"},
        SpecCase{"OnlyPrecision", "t=@bf16", nullptr, nullptr, false, "package directory after '=' is empty"},
        SpecCase{"UnknownPrecision", "t=runs/cnn/model@fp16", nullptr, nullptr, false, "unknown precision '@fp16'"}),
    [](const ::testing::TestParamInfo<SpecCase>& p) { return std::string(p.param.name); });

std::string make_package(const std::string& dir, int64_t width, bool prune_half) {
    torch::manual_seed(3);
    models::ModelConfig m;
    m.arch = "cnn";
    m.width = width;
    m.hidden = 16;
    auto net = models::create_model(m, {1, 28, 28}, 10);
    EXPECT_TRUE(net.is_ok()) << net.status().message();
    if (prune_half) {  // every other weight of every layer to 0, as unstructured pruning leaves them
        torch::NoGradGuard no_grad;
        for (auto& p : (*net)->parameters()) p.view(-1).slice(0, 0, p.numel(), 2).zero_();
    }
    models::PackageInfo info;
    info.model = m;
    info.input_shape = {1, 28, 28};
    info.num_classes = 10;
    info.mean = {0.2860};
    info.std = {0.3530};
    info.metrics = {{"compression", {{"method", "prune"}}}};
    EXPECT_TRUE(models::save_package(dir, info, **net).is_ok());
    return dir;
}

class Compare : public ::testing::Test {
protected:
    void SetUp() override {
        if (!stdfs::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"))
            GTEST_SKIP() << "needs dataset-fashion-mnist";
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = (stdfs::temp_directory_path() / fmt::format("strato-report-{}-{}", info->name(), ::getpid())).string();
        stdfs::remove_all(dir_);
        stdfs::create_directories(dir_);
        opts_.data.limit_train = 64;
        opts_.data.limit_test = 300;
        opts_.threads = 2;
        opts_.latency_runs = 30;
        opts_.throughput_runs = 3;
        opts_.throughput_batch = 16;
        opts_.warmup_runs = 3;
    }
    void TearDown() override {
        if (!dir_.empty()) stdfs::remove_all(dir_);
    }
    std::string dir_;
    CompareOptions opts_;
};

TEST_F(Compare, MeasuresEveryRowAsEvalAndTheFilesSay) {
    const std::string big = make_package(dir_ + "/big", 8, false);
    const std::string pruned = make_package(dir_ + "/pruned", 8, true);
    const std::string small = make_package(dir_ + "/small", 4, false);
    // An extra file in the package directory counts towards its size.
    { std::ofstream(big + "/model.onnx") << std::string(1000, 'x'); }
    auto r = compare({{"big", big}, {"big-bf16", big, true}, {"pruned", pruned}, {"small", small}, {"big-eager", big, false, true},
                      {"big-bf16-eager", big, true, true}},
                     opts_);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->rows.size(), 6u);
    EXPECT_EQ(r->threads, 2);

    for (const auto& row : r->rows) {
        SCOPED_TRACE(row.variant.label);
        auto ev = train::evaluate_package(row.variant.dir, opts_.data, row.variant.bf16, !row.variant.eager);
        ASSERT_TRUE(ev.is_ok()) << ev.status().message();
        EXPECT_EQ(row.accuracy, ev->result.accuracy);
        EXPECT_EQ(row.loss, ev->result.loss);
        EXPECT_EQ(row.samples, 300);
        EXPECT_EQ(row.parameters, ev->parameters);
        int64_t bytes = 0, files = 0;
        for (const auto& e : stdfs::directory_iterator(row.variant.dir)) {
            bytes += static_cast<int64_t>(e.file_size());
            ++files;
        }
        EXPECT_EQ(row.size_bytes, bytes);
        EXPECT_EQ(row.files, files);
        EXPECT_GT(row.latency_ms_p50, 0);
        EXPECT_GE(row.latency_ms_p90, row.latency_ms_p50);
        EXPECT_GT(row.throughput, 0);
        EXPECT_EQ(row.arch, "cnn");
        EXPECT_FALSE(row.quantized);
        EXPECT_EQ(row.compression["method"], "prune");
    }
    const auto& base = r->rows[0];
    EXPECT_EQ(base.accuracy_delta_pt, 0);
    EXPECT_EQ(base.size_ratio, 1);
    EXPECT_EQ(base.latency_speedup, 1);
    EXPECT_EQ(base.throughput_speedup, 1);
    int64_t nonzero = 0;  // counted here independently (some initial values, e.g. BatchNorm's biases, are 0)
    {
        auto pkg = models::load_package(big);
        ASSERT_TRUE(pkg.is_ok());
        for (const auto& p : pkg->net->parameters()) nonzero += (p != 0).sum().item<int64_t>();
    }
    EXPECT_EQ(base.nonzero_parameters, nonzero);
    EXPECT_LT(base.nonzero_parameters, base.parameters);
    // bf16 (the graph, and the eager network under autocast): the same package, the same size,
    // the accuracy of `strato eval --bf16`, predictions within bf16 rounding of FP32's.
    for (int i : {1, 5}) {
        EXPECT_TRUE(r->rows[i].variant.bf16);
        EXPECT_EQ(r->rows[i].size_bytes, base.size_bytes);
        EXPECT_NEAR(r->rows[i].accuracy, base.accuracy, 3.0 / 300);
        EXPECT_NEAR(r->rows[i].loss, base.loss, 0.02 * std::max(1.0, base.loss));
    }
    // Pruned: half of the weights are zero (odd-sized tensors keep one more non-zero).
    const auto& pr = r->rows[2];
    EXPECT_EQ(pr.parameters, base.parameters);
    EXPECT_LE(pr.nonzero_parameters, pr.parameters / 2 + 16);
    EXPECT_GE(pr.nonzero_parameters, pr.parameters / 2 - 64);
    // Ratios against the first row.
    const auto& sm = r->rows[3];
    EXPECT_LT(sm.parameters, base.parameters);
    EXPECT_DOUBLE_EQ(sm.size_ratio, static_cast<double>(base.size_bytes) / static_cast<double>(sm.size_bytes));
    EXPECT_GT(sm.size_ratio, 1);
    EXPECT_DOUBLE_EQ(sm.accuracy_delta_pt, 100 * (sm.accuracy - base.accuracy));
    EXPECT_DOUBLE_EQ(sm.latency_speedup, base.latency_ms_p50 / sm.latency_ms_p50);
    EXPECT_DOUBLE_EQ(sm.throughput_speedup, sm.throughput / base.throughput);
    // Eager: the same network unfused; the same predictions but for float rounding.
    EXPECT_TRUE(r->rows[4].variant.eager);
    EXPECT_NEAR(r->rows[4].accuracy, base.accuracy, 2.0 / 300);
    EXPECT_NEAR(r->rows[4].loss, base.loss, 1e-4);

    // The renderers carry every row.
    const std::string table = format_table(*r), md = format_markdown(*r);
    const nlohmann::json j = to_json(*r);
    for (const char* label : {"big", "big-bf16", "pruned", "small", "big-eager", "big-bf16-eager"}) {
        EXPECT_NE(table.find(label), std::string::npos) << table;
        EXPECT_NE(md.find(std::string("| ") + label + " |"), std::string::npos) << md;
    }
    const std::string header = table.substr(0, table.find('\n'));
    EXPECT_NE(header.find("faster"), header.rfind("faster")) << header;  // latency's and throughput's
    EXPECT_EQ(md.rfind("| model | precision | accuracy", 0), 0u) << md;
    EXPECT_NE(md.find("| big-bf16 | bf16 |"), std::string::npos) << md;
    ASSERT_EQ(j["rows"].size(), 6u);
    EXPECT_EQ(j["rows"][1]["precision"], "bf16");
    EXPECT_EQ(j["rows"][4]["precision"], "fp32 eager");
    EXPECT_EQ(j["rows"][5]["precision"], "bf16 eager");
    EXPECT_EQ(j["rows"][2]["nonzero_parameters"], pr.nonzero_parameters);
    EXPECT_EQ(j["rows"][0]["size_bytes"], base.size_bytes);
    EXPECT_EQ(j["threads"], 2);
    EXPECT_NE(j["dataset"].get<std::string>().find("300 samples"), std::string::npos);
}

TEST_F(Compare, ErrorsNameTheVariant) {
    const std::string good = make_package(dir_ + "/good", 4, false);
    auto r = compare({{"good", good}, {"gone", dir_ + "/gone"}}, opts_);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("gone (" + dir_ + "/gone)"), std::string::npos) << r.status().message();

    r = compare({{"a", good}, {"a", good, true}}, opts_);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("'a' is given twice"), std::string::npos) << r.status().message();

    r = compare({}, opts_);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("no variants"), std::string::npos) << r.status().message();

    // A package the data does not fit: the error names the row and both shapes.
    CompareOptions other = opts_;
    other.data.dataset = "synthetic";
    other.data.image_size = 32;
    other.data.channels = 3;
    other.data.limit_test = 8;
    r = compare({{"good", good}}, other);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("good ("), std::string::npos) << r.status().message();

    opts_.latency_runs = 0;
    r = compare({{"good", good}}, opts_);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("must be positive"), std::string::npos) << r.status().message();
    opts_.latency_runs = 30;
    opts_.rounds = 0;
    r = compare({{"good", good}}, opts_);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("rounds 0"), std::string::npos) << r.status().message();
}

TEST_F(Compare, AnInt8PackageIsARowLikeAnyOther) {
    const std::string fp32 = make_package(dir_ + "/fp32", 4, false);
    QuantizeRequest q;
    q.model = fp32;
    q.output = dir_ + "/int8";
    q.data = opts_.data;
    q.calibration_batches = 2;
    q.calibration_batch_size = 32;
    q.evaluate = false;
    auto made = quantize_package(q);
    ASSERT_TRUE(made.is_ok()) << made.status().message();

    auto r = compare({{"fp32", fp32}, {"int8", q.output}}, opts_);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const auto& row = r->rows[1];
    EXPECT_TRUE(row.quantized);
    auto ev = train::evaluate_package(q.output, opts_.data, false);
    ASSERT_TRUE(ev.is_ok()) << ev.status().message();
    EXPECT_EQ(row.accuracy, ev->result.accuracy);
    auto size = directory_size(q.output);
    ASSERT_TRUE(size.is_ok());
    EXPECT_EQ(row.size_bytes, size->first);
    EXPECT_GT(row.size_ratio, 1);  // int8 weights
    EXPECT_GT(row.parameters, 0);
    EXPECT_GT(row.nonzero_parameters, 0);
    EXPECT_LE(row.nonzero_parameters, row.parameters);
    EXPECT_GT(row.latency_ms_p50, 0);
    EXPECT_GT(row.throughput, 0);
    EXPECT_EQ(to_json(*r)["rows"][1]["precision"], "int8");

    // bf16 autocast is for float packages.
    r = compare({{"int8", q.output, true}}, opts_);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("this one is INT8"), std::string::npos) << r.status().message();
}

// Ctrl-C during `strato compress report` (found by review: SIGINT's default action killed it
// with no word): kCancelled (exit 130) naming where it stopped, and no partial report.
TEST_F(Compare, AStopSignalCancelsWithoutAPartialReport) {
    const std::string good = make_package(dir_ + "/good", 4, false);
    signals::install_stop_handlers();
    std::raise(SIGINT);
    ASSERT_TRUE(signals::stop_requested());
    auto r = compare({{"good", good}, {"again", good}}, opts_);
    signals::reset();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().message();
    EXPECT_NE(r.status().message().find("interrupted by signal 2 while measuring row 1 of 2 (good)"),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("accuracy measured so far: none"), std::string::npos) << r.status().message();
}

// A label is one Markdown cell (found by review: `--model 'a|b=DIR'` gave a row of 12 cells under
// the 11-column header).
TEST(FormatMarkdown, ALabelStaysInItsCell) {
    CompareReport rep;
    rep.throughput_batch = 64;
    VariantReport row;
    row.variant = {"a|b\nc", "dir"};
    rep.rows.push_back(row);
    const std::string md = format_markdown(rep);
    const size_t begin = md.find("\n|---");  // the row follows the header's separator line
    ASSERT_NE(begin, std::string::npos) << md;
    const size_t at = md.find('\n', begin + 1) + 1;
    const std::string line = md.substr(at, md.find('\n', at) - at);
    EXPECT_NE(line.find("| a\\|b c |"), std::string::npos) << md;
    // Unescaped '|' separate the cells: as many as in the header row.
    auto cells = [](const std::string& l) {
        int n = 0;
        for (size_t i = 0; i < l.size(); ++i) n += l[i] == '|' && (i == 0 || l[i - 1] != '\\');
        return n;
    };
    EXPECT_EQ(cells(line), cells(md.substr(0, md.find('\n')))) << md;
}

// A package's files lie at its top: a folder inside it (a run someone put there, found by review:
// the same model was reported 4x larger) is not the model's size.
TEST(DirectorySize, CountsThePackagesOwnFiles) {
    const auto d = stdfs::temp_directory_path() / fmt::format("strato-dirsize-{}", ::getpid());
    stdfs::remove_all(d);
    stdfs::create_directories(d / "sub");
    { std::ofstream(d / "a") << std::string(10, 'a'); }
    { std::ofstream(d / "sub" / "b") << std::string(32, 'b'); }
    auto s = directory_size(d.string());
    ASSERT_TRUE(s.is_ok());
    EXPECT_EQ(s->first, 10);
    EXPECT_EQ(s->second, 1);
    stdfs::remove_all(d);
    EXPECT_FALSE(directory_size(d.string()).is_ok());
}

}  // namespace
}  // namespace strato::compress
