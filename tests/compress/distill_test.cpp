// Distillation: the loss against a hand computation, the teacher checks, the re-normalising
// wrapper, and real (tiny) training runs on a few hundred Fashion-MNIST samples: alpha = 0 leaves
// training bitwise unchanged, an interrupted run resumes bitwise, the package records the teacher.

#include "strato/compress/distill.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>

#include "strato/core/config.h"
#include "strato/core/fs.h"
#include "strato/core/signals.h"
#include "strato/data/idx.h"
#include "strato/models/package.h"

namespace strato::compress {
namespace {
namespace stdfs = std::filesystem;

const char* kFashionMnist = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

/// A tiny deterministic student run: 256 training samples, 2 epochs of 8 steps.
train::TrainConfig tiny_config(const std::string& runs, const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> sets = {"run.dir=\"" + runs + "\"",
                                     "run.name=\"" + name + "\"",
                                     "run.deterministic=true",
                                     "run.threads=2",
                                     "data.limit_train=256",
                                     "data.limit_test=128",
                                     "data.batch_size=32",
                                     "data.eval_batch_size=64",
                                     "data.augment=[\"random-crop\", \"hflip\"]",
                                     "model.arch=\"cnn\"",
                                     "model.width=4",
                                     "model.hidden=16",
                                     "model.dropout=0.25",
                                     "train.epochs=2",
                                     "train.precision=\"fp32\"",
                                     "train.log_every=2",
                                     "checkpoint.every_steps=3"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    auto cfg = config::load_string<train::TrainConfig>("", sets);
    EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
    EXPECT_TRUE(cfg->validate().is_ok());
    return *cfg;
}

/// An untrained package (its predictions are as good a target as any for these tests).
std::string make_package(const std::string& dir, const models::ModelConfig& m, data::ImageShape shape, int64_t classes,
                         std::vector<double> mean, std::vector<double> std, uint64_t seed = 7,
                         std::vector<std::string> labels = {}) {
    torch::manual_seed(seed);
    auto net = models::create_model(m, shape, classes);
    EXPECT_TRUE(net.is_ok()) << net.status().message();
    models::PackageInfo info;
    info.model = m;
    info.input_shape = shape;
    info.num_classes = classes;
    info.mean = std::move(mean);
    info.std = std::move(std);
    info.metrics = {{"test_acc", 0.5}};
    info.labels = std::move(labels);
    EXPECT_TRUE(models::save_package(dir, info, **net).is_ok());
    return dir;
}

models::ModelConfig cnn(int64_t width, int64_t hidden) {
    models::ModelConfig m;
    m.arch = "cnn";
    m.width = width;
    m.hidden = hidden;
    return m;
}

void expect_same_weights(const std::string& a, const std::string& b) {
    auto pa = models::load_package(a), pb = models::load_package(b);
    ASSERT_TRUE(pa.is_ok()) << pa.status().message();
    ASSERT_TRUE(pb.is_ok()) << pb.status().message();
    auto na = pa->net->named_parameters(), nb = pb->net->named_parameters();
    ASSERT_EQ(na.size(), nb.size());
    for (const auto& p : na) {
        EXPECT_TRUE(torch::equal(p.value(), nb[p.key()]))
            << p.key() << " max diff " << (p.value() - nb[p.key()]).abs().max().item<float>();
    }
    auto ba = pa->net->named_buffers(), bb = pb->net->named_buffers();
    for (const auto& p : ba) EXPECT_TRUE(torch::equal(p.value(), bb[p.key()])) << p.key();
}

class Distill : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = (stdfs::temp_directory_path() / fmt::format("strato-distill-{}-{}", info->name(), ::getpid())).string();
        stdfs::remove_all(dir_);
        stdfs::create_directories(dir_);
        runs_ = dir_ + "/runs";
    }
    void TearDown() override { stdfs::remove_all(dir_); }
    void need_data() {
        if (!stdfs::exists(kFashionMnist)) GTEST_SKIP() << "needs dataset-fashion-mnist";
    }
    std::string dir_, runs_;
};

TEST(DistillLoss, MatchesAHandComputation) {
    // Two samples, three classes; T = 2, alpha = 0.75.
    const double s[2][3] = {{1.0, 2.0, 0.5}, {-1.0, 0.0, 3.0}};
    const double t[2][3] = {{2.0, 0.0, -2.0}, {0.5, 0.5, 4.0}};
    const double T = 2.0, alpha = 0.75, hard = 1.25;
    double kl = 0;
    double grad[2][3];
    for (int b = 0; b < 2; ++b) {
        double zs = 0, zt = 0;
        for (int k = 0; k < 3; ++k) {
            zs += std::exp(s[b][k] / T);
            zt += std::exp(t[b][k] / T);
        }
        for (int k = 0; k < 3; ++k) {
            const double ps = std::exp(s[b][k] / T) / zs, pt = std::exp(t[b][k] / T) / zt;
            kl += pt * (std::log(pt) - std::log(ps));
            // d(T^2 KL / B)/ds = T (p_s - p_t) / B
            grad[b][k] = alpha * T * (ps - pt) / 2.0;
        }
    }
    kl /= 2.0;  // batch mean
    const double expect = (1 - alpha) * hard + alpha * T * T * kl;

    auto student = torch::tensor({s[0][0], s[0][1], s[0][2], s[1][0], s[1][1], s[1][2]}, torch::kDouble)
                       .view({2, 3})
                       .requires_grad_();
    auto teacher = torch::tensor({t[0][0], t[0][1], t[0][2], t[1][0], t[1][1], t[1][2]}, torch::kDouble).view({2, 3});
    auto loss = train::distillation_loss(student, teacher, torch::tensor(hard, torch::kDouble), T, alpha);
    EXPECT_NEAR(loss.item<double>(), expect, 1e-12);
    loss.backward();
    for (int b = 0; b < 2; ++b)
        for (int k = 0; k < 3; ++k)
            EXPECT_NEAR(student.grad()[b][k].item<double>(), grad[b][k], 1e-12) << b << "," << k;

    // alpha = 0: the cross-entropy alone; identical logits: no soft term.
    EXPECT_EQ(train::distillation_loss(student, teacher, torch::tensor(hard, torch::kDouble), T, 0.0).item<double>(),
              hard);
    EXPECT_NEAR(
        train::distillation_loss(student, student.detach(), torch::tensor(0.0, torch::kDouble), T, 1.0).item<double>(),
        0.0, 1e-12);
    // A teacher so sure that its other probabilities underflow to 0 still gives a finite loss.
    auto sure = torch::tensor({{0.0f, 0.0f, 1e4f}});
    auto l = train::distillation_loss(torch::zeros({1, 3}), sure, torch::tensor(0.0f), 1.0, 1.0);
    EXPECT_TRUE(std::isfinite(l.item<float>()));
    EXPECT_NEAR(l.item<float>(), std::log(3.0f), 1e-5);
}

/// A "teacher" that returns its input, to see what the wrapper feeds it.
class Echo final : public models::NetImpl {
public:
    torch::Tensor forward(torch::Tensor x) override {
        seen = x;
        return x.flatten(1);
    }
    torch::Tensor seen;
};

TEST(Renormalize, GivesTheTeacherTheInputItExpects) {
    auto echo = std::make_shared<Echo>();
    const std::vector<double> sm = {0.5, 0.4, 0.3}, ss = {0.25, 0.2, 0.1}, tm = {0.2, 0.3, 0.6}, ts = {0.4, 0.5, 0.2};
    auto wrapped = renormalize_input(echo, 3, sm, ss, tm, ts);
    ASSERT_TRUE(wrapped.is_ok()) << wrapped.status().message();
    ASSERT_NE(wrapped->get(), echo.get());
    EXPECT_EQ(models::parameter_count(**wrapped), 0);

    // Pixels p in [0, 1]: the student's x_s = (p - mean_s) / std_s must reach the teacher as (p - mean_t) / std_t.
    torch::manual_seed(1);
    auto p = torch::rand({2, 3, 4, 5});
    auto view = [](const std::vector<double>& v) { return torch::tensor(v, torch::kFloat).view({1, 3, 1, 1}); };
    auto x_s = (p - view(sm)) / view(ss);
    auto want = (p - view(tm)) / view(ts);
    (*wrapped)->forward(x_s);
    EXPECT_TRUE(torch::allclose(echo->seen, want, 1e-5, 1e-5)) << (echo->seen - want).abs().max().item<float>();

    // Channels-last in, channels-last to the teacher (the layout the trainer gives conv nets).
    auto x_cl = torch::empty(x_s.sizes(), x_s.options().memory_format(at::MemoryFormat::ChannelsLast)).copy_(x_s);
    models::to_channels_last(**wrapped);
    (*wrapped)->forward(x_cl);
    EXPECT_TRUE(echo->seen.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::allclose(echo->seen, want, 1e-5, 1e-5));

    // The same normalisation: the teacher itself, no wrapper. Missing lists mean 0 and 1.
    auto same = renormalize_input(echo, 3, sm, ss, sm, ss);
    ASSERT_TRUE(same.is_ok());
    EXPECT_EQ(same->get(), echo.get());
    auto none = renormalize_input(echo, 1, {}, {}, {0.0}, {1.0});
    ASSERT_TRUE(none.is_ok());
    EXPECT_EQ(none->get(), echo.get());
    // Lists of the wrong length and a zero std are errors.
    auto bad = renormalize_input(echo, 3, {0.5}, {0.2}, tm, ts);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("1 values for 3 channels"), std::string::npos) << bad.status().message();
    EXPECT_FALSE(renormalize_input(echo, 1, {0.5}, {0.0}, {0.5}, {0.3}).is_ok());
}

TEST_F(Distill, RefusesATeacherOfAnotherShapeOrClassCount) {
    need_data();
    const auto cfg = tiny_config(runs_, "student");
    const std::string color =
        make_package(dir_ + "/color", cnn(4, 16), {3, 32, 32}, 10, {0.5, 0.5, 0.5}, {0.2, 0.2, 0.2});
    auto r = prepare_distillation(cfg, {.teacher = color});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("takes 3x32x32 images"), std::string::npos) << m;
    EXPECT_NE(m.find("has 1x28x28 images"), std::string::npos) << m;
    EXPECT_NE(m.find(color), std::string::npos) << m;

    const std::string five = make_package(dir_ + "/five", cnn(4, 16), {1, 28, 28}, 5, {0.286}, {0.353});
    r = prepare_distillation(cfg, {.teacher = five});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("predicts 5 classes"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("in 10 classes"), std::string::npos) << r.status().message();

    // Found by review: a teacher with a NaN weight failed the student's first step, "training
    // diverged ... lower optim.lr".
    const std::string nan = make_package(dir_ + "/nan", cnn(4, 16), {1, 28, 28}, 10, {0.286}, {0.353});
    {
        auto pkg = models::load_package(nan);
        ASSERT_TRUE(pkg.is_ok());
        torch::NoGradGuard no_grad;
        pkg->net->parameters().back().view(-1)[0] = std::nan("");
        ASSERT_TRUE(models::save_package(dir_ + "/nan2", pkg->info, *pkg->net).is_ok());
    }
    r = prepare_distillation(cfg, {.teacher = dir_ + "/nan2"});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("has NaN or infinite weights"), std::string::npos) << r.status().message();

    r = prepare_distillation(cfg, {.teacher = dir_ + "/missing"});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("teacher: "), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("/missing"), std::string::npos) << r.status().message();

    const std::string good = make_package(dir_ + "/good", cnn(4, 16), {1, 28, 28}, 10, {0.286}, {0.353});
    r = prepare_distillation(cfg, {.teacher = good, .temperature = 0});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("temperature must be in [0.05, 100]"), std::string::npos) << r.status().message();
    // Found by review: 1e-300 passed and the loss became NaN ("lower optim.lr").
    r = prepare_distillation(cfg, {.teacher = good, .temperature = 1e-300});
    EXPECT_NE(r.status().message().find("temperature must be in [0.05, 100]"), std::string::npos) << r.status().message();
    r = prepare_distillation(cfg, {.teacher = good, .alpha = 1.5});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("alpha must be in [0, 1]"), std::string::npos) << r.status().message();
    EXPECT_FALSE(prepare_distillation(cfg, {}).is_ok());
}

TEST_F(Distill, FeedsATeacherWithOtherNormalisationItsOwnInput) {
    need_data();
    const auto cfg = tiny_config(runs_, "student");  // fashion-mnist: mean 0.2860, std 0.3530
    const std::string dir = make_package(dir_ + "/teacher", cnn(4, 16), {1, 28, 28}, 10, {0.5}, {0.5});
    auto d = prepare_distillation(cfg, {.teacher = dir, .temperature = 3, .alpha = 0.6});
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_TRUE(d->renormalized);
    EXPECT_FALSE(d->hooks.teacher->is_training());
    auto pkg = models::load_package(dir);
    ASSERT_TRUE(pkg.is_ok());
    EXPECT_EQ(d->teacher_parameters, models::parameter_count(*pkg->net));

    // The wrapped teacher on student-normalised pixels = the teacher on its own normalisation.
    torch::NoGradGuard no_grad;
    torch::manual_seed(2);
    auto p = torch::rand({4, 1, 28, 28});
    auto got = d->hooks.teacher->forward((p - 0.2860) / 0.3530);
    auto want = pkg->net->forward((p - 0.5) / 0.5);
    EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4)) << (got - want).abs().max().item<float>();

    const auto& c = d->hooks.package_metrics["compression"];
    EXPECT_EQ(c["method"], "distill");
    EXPECT_EQ(c["teacher_parameters"], d->teacher_parameters);
    EXPECT_DOUBLE_EQ(c["temperature"].get<double>(), 3.0);
    EXPECT_DOUBLE_EQ(c["alpha"].get<double>(), 0.6);
    EXPECT_EQ(c["renormalized"], true);
    EXPECT_DOUBLE_EQ(c["teacher_test_acc"].get<double>(), 0.5);

    // The same normalisation: the teacher unwrapped.
    const std::string same = make_package(dir_ + "/same", cnn(4, 16), {1, 28, 28}, 10, {0.2860}, {0.3530});
    d = prepare_distillation(cfg, {.teacher = same});
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_FALSE(d->renormalized);
}

// Found by review: a teacher naming the student's classes in another order was only a warning
// ("distilling by class index"): the student learnt the teacher's class k as its own class k.
TEST(ClassOrder, MapsEachStudentClassToTheTeachersOfTheSameName) {
    EXPECT_EQ(class_order({"b", "a", "c"}, {"a", "b", "c"}), (std::vector<int64_t>{1, 0, 2}));
    EXPECT_EQ(class_order({"0", "1", "10", "2"}, {"0", "1", "2", "10"}), (std::vector<int64_t>{0, 1, 3, 2}));
    EXPECT_TRUE(class_order({"a", "b"}, {"a", "b"}).empty());  // the same order
    EXPECT_TRUE(class_order({}, {"a", "b"}).empty());          // a teacher without labels
    EXPECT_TRUE(class_order({"a", "b"}, {}).empty());
    EXPECT_TRUE(class_order({"a", "b"}, {"a", "c"}).empty());  // other names: by index
    EXPECT_TRUE(class_order({"a", "a"}, {"a", "b"}).empty());  // a name twice
    EXPECT_TRUE(class_order({"b", "a"}, {"a", "a"}).empty());
    EXPECT_TRUE(class_order({"a", "b", "c"}, {"a", "b"}).empty());  // (refused earlier: class counts)
}

TEST_F(Distill, ReordersATeacherThatNamesTheClassesInAnotherOrder) {
    need_data();
    const auto cfg = tiny_config(runs_, "student");
    std::vector<std::string> reversed = data::fashion_mnist_classes();
    std::reverse(reversed.begin(), reversed.end());
    const std::string dir =
        make_package(dir_ + "/teacher", cnn(4, 16), {1, 28, 28}, 10, {0.2860}, {0.3530}, 7, reversed);
    auto d = prepare_distillation(cfg, {.teacher = dir});
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_TRUE(d->reordered);
    EXPECT_FALSE(d->renormalized);
    EXPECT_EQ(d->hooks.package_metrics["compression"].value("reordered", false), true);
    EXPECT_EQ(models::parameter_count(*d->hooks.teacher), d->teacher_parameters);
    auto pkg = models::load_package(dir);
    ASSERT_TRUE(pkg.is_ok());
    torch::NoGradGuard no_grad;
    pkg->net->eval();
    torch::manual_seed(3);
    auto x = torch::randn({4, 1, 28, 28});
    auto got = d->hooks.teacher->forward(x);
    auto want = pkg->net->forward(x).flip({1});  // the student's class k is the teacher's 9 - k
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<float>();

    // The same names in the same order, or no labels at all: the teacher as it is.
    d = prepare_distillation(cfg, {.teacher = make_package(dir_ + "/same", cnn(4, 16), {1, 28, 28}, 10, {0.2860},
                                                           {0.3530}, 7, data::fashion_mnist_classes())});
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_FALSE(d->reordered);
    EXPECT_FALSE(d->hooks.package_metrics["compression"].contains("reordered"));
}

TEST_F(Distill, AlphaZeroTrainsBitwiseLikeAPlainRun) {
    need_data();
    // A wider teacher with its own normalisation (the wrapper and the channels-last teacher both run).
    const std::string teacher = make_package(dir_ + "/teacher", cnn(8, 32), {1, 28, 28}, 10, {0.5}, {0.5});
    auto plain = train::run_training(tiny_config(runs_, "plain"), {.quiet = true});
    ASSERT_TRUE(plain.is_ok()) << plain.status().message();
    auto kd = distill(tiny_config(runs_, "kd"), {.teacher = teacher, .temperature = 4, .alpha = 0}, {.quiet = true});
    ASSERT_TRUE(kd.is_ok()) << kd.status().message();
    expect_same_weights(plain->package_dir, kd->package_dir);
    EXPECT_EQ(plain->test_acc, kd->test_acc);
    EXPECT_EQ(plain->test_loss, kd->test_loss);

    // With alpha > 0 the teacher does change training.
    auto kd2 =
        distill(tiny_config(runs_, "kd2"), {.teacher = teacher, .temperature = 4, .alpha = 0.9}, {.quiet = true});
    ASSERT_TRUE(kd2.is_ok()) << kd2.status().message();
    auto a = models::load_package(plain->package_dir), b = models::load_package(kd2->package_dir);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_FALSE(torch::equal(a->net->parameters().front(), b->net->parameters().front()));
}

// Found by review: --resume of a run `strato train` made (finished or not) went on with the
// teacher's loss, and a finished one had its package re-labelled "distilled from" the teacher,
// not one step of it distilled (exit 0).
TEST_F(Distill, ResumeRefusesARunStartedWithoutATeacher) {
    need_data();
    const std::string teacher = make_package(dir_ + "/teacher", cnn(8, 32), {1, 28, 28}, 10, {0.2860}, {0.3530});
    const auto cfg = tiny_config(runs_, "plain");
    auto plain = train::run_training(cfg, {.quiet = true});
    ASSERT_TRUE(plain.is_ok()) << plain.status().message();
    const std::string metrics = *fs::read_file(plain->package_dir + "/metrics.json");
    auto r = distill(cfg, {.teacher = teacher}, {.resume = true, .quiet = true});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
    EXPECT_NE(r.status().message().find("started without a teacher"), std::string::npos) << r.status().message();
    EXPECT_EQ(*fs::read_file(plain->package_dir + "/metrics.json"), metrics);
    EXPECT_FALSE(stdfs::exists(runs_ + "/plain/distill.json"));
    // --overwrite distils it from the start; --resume of a run directory not there yet starts one.
    auto over = distill(cfg, {.teacher = teacher}, {.overwrite = true, .quiet = true});
    ASSERT_TRUE(over.is_ok()) << over.status().message();
    auto fresh = distill(tiny_config(runs_, "fresh"), {.teacher = teacher}, {.resume = true, .quiet = true});
    ASSERT_TRUE(fresh.is_ok()) << fresh.status().message();
}

TEST_F(Distill, ResumesAfterAnInterruptionBitwise) {
    need_data();
    const std::string teacher = make_package(dir_ + "/teacher", cnn(8, 32), {1, 28, 28}, 10, {0.2860}, {0.3530});
    const DistillOptions opts{.teacher = teacher, .temperature = 2, .alpha = 0.5};
    auto ref = distill(tiny_config(runs_, "reference"), opts, {.quiet = true});
    ASSERT_TRUE(ref.is_ok()) << ref.status().message();

    // The same run, stopped by SIGTERM after step 5 of 16 (mid-epoch, between checkpoints) through
    // the trainer's own stop mechanism, then resumed with the same command.
    const auto cfg = tiny_config(runs_, "cut");
    auto d = prepare_distillation(cfg, opts);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    bool raised = false;
    d->hooks.after_step = [&](models::NetImpl&, int64_t step, int64_t) {
        if (step == 5 && !raised) {
            raised = true;
            std::raise(SIGTERM);
        }
    };
    signals::install_stop_handlers();
    auto cut = train::run_training(cfg, {.quiet = true, .hooks = &d->hooks});
    signals::reset();
    ASSERT_TRUE(raised);
    ASSERT_FALSE(cut.is_ok());
    EXPECT_EQ(cut.status().code(), StatusCode::kCancelled) << cut.status().message();
    EXPECT_FALSE(stdfs::exists(runs_ + "/cut/model"));

    auto resumed = distill(cfg, opts, {.resume = true, .quiet = true});
    ASSERT_TRUE(resumed.is_ok()) << resumed.status().message();
    EXPECT_EQ(resumed->steps, ref->steps);
    expect_same_weights(ref->package_dir, resumed->package_dir);
    EXPECT_EQ(resumed->test_acc, ref->test_acc);

    // What the package says about its making.
    auto pkg = models::load_package(resumed->package_dir);
    ASSERT_TRUE(pkg.is_ok());
    const auto& c = pkg->info.metrics["compression"];
    EXPECT_EQ(c["method"], "distill");
    EXPECT_EQ(c["teacher"], stdfs::absolute(teacher).lexically_normal().string());
    EXPECT_EQ(c["teacher_arch"], "cnn");
    EXPECT_DOUBLE_EQ(c["temperature"].get<double>(), 2.0);
    EXPECT_DOUBLE_EQ(c["alpha"].get<double>(), 0.5);
    EXPECT_EQ(c["renormalized"], false);
    EXPECT_GT(c["teacher_parameters"].get<int64_t>(), models::parameter_count(*pkg->net));

    // --resume of a finished run: nothing more to train, the same package again.
    auto again = distill(cfg, opts, {.resume = true, .quiet = true});
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ(again->steps, ref->steps);
    expect_same_weights(ref->package_dir, again->package_dir);
}

}  // namespace
}  // namespace strato::compress
