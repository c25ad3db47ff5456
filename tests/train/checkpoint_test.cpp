#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/data/data_config.h"
#include "strato/data/idx.h"
#include "strato/models/package.h"
#include "strato/models/zoo.h"
#include "strato/train/checkpoint.h"
#include "strato/train/metrics_log.h"
#include "strato/train/trainer.h"

namespace strato::train {
namespace {
namespace stdfs = std::filesystem;

/// A 4-class MLP package of 8x8 grey images and 64 synthetic test samples for it.
struct TinyPackage {
    models::PackageInfo info;
    models::Net net;
    std::string dir;
    data::DataConfig data;
};

class Checkpoints : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = stdfs::temp_directory_path() / ("strato-ckpt-" + std::to_string(::getpid()));
        (void)fs::remove_tree(dir_);
        stdfs::create_directories(dir_);
        torch::manual_seed(0);
        net_ = torch::nn::Linear(4, 3);
        opt_ = std::make_unique<torch::optim::SGD>(net_->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    }
    void TearDown() override { (void)fs::remove_tree(dir_); }

    void train_step() {
        auto loss = net_->forward(torch::randn({8, 4})).pow(2).mean();
        opt_->zero_grad();
        loss.backward();
        opt_->step();
    }
    stdfs::path step_dir(int64_t s) { return dir_ / "checkpoints" / fmt::format("step-{:09d}", s); }
    /// A run of a 16-wide MLP on 64 synthetic 8x8 images of 4 classes (32 to test), under dir_.
    TrainConfig tiny_run(const std::string& name) const {
        TrainConfig c;
        c.run.name = name;
        c.run.dir = dir_.string();
        c.run.threads = 1;
        c.run.deterministic = true;
        c.data.dataset = "synthetic";
        c.data.path = "/nonexistent";
        c.data.image_size = 8;
        c.data.channels = 1;
        c.data.classes = 4;
        c.data.limit_train = 64;
        c.data.limit_test = 32;
        c.data.workers = 0;
        c.model.arch = "mlp";
        c.model.width = 16;
        return c;
    }
    /// tiny_run's model saved as a package under dir_, with its data (all 64 test samples).
    TinyPackage tiny_package() const {
        TinyPackage t;
        t.data = tiny_run("package").data;
        t.data.limit_test = 64;
        t.info.model = tiny_run("package").model;
        t.info.input_shape = {1, 8, 8};
        t.info.num_classes = 4;
        for (int i = 0; i < 4; ++i) t.info.labels.push_back(fmt::format("c{}", i));
        t.info.mean = {0.5};
        t.info.std = {0.25};
        t.net = models::create_model(t.info.model, t.info.input_shape, 4).value();
        t.dir = (dir_ / "model").string();
        EXPECT_TRUE(models::save_package(t.dir, t.info, *t.net).is_ok());
        return t;
    }

    stdfs::path dir_;
    torch::nn::Linear net_{nullptr};
    std::unique_ptr<torch::optim::SGD> opt_;
};

TEST_F(Checkpoints, RestoresWeightsOptimizerRngAndState) {
    CheckpointStore store(dir_.string(), CheckpointConfig{});
    train_step();
    TrainState st;
    st.step = 1;
    st.epoch = 0;
    st.next_batch = 17;
    st.best_acc = 0.5;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    // The future as seen from the checkpoint: one more step and a random draw.
    train_step();
    auto w_after = net_->weight.clone();
    auto r_after = torch::rand({3});

    auto fresh = torch::nn::Linear(4, 3);
    auto fresh_opt = torch::optim::SGD(fresh->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto loaded = store.load_latest(*fresh, fresh_opt);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    ASSERT_TRUE(loaded->has_value());
    EXPECT_EQ((*loaded)->next_batch, 17);
    EXPECT_DOUBLE_EQ((*loaded)->best_acc, 0.5);
    // Replaying the step from the restored state reproduces it bit for bit (momentum + RNG).
    net_ = fresh;
    auto loss = net_->forward(torch::randn({8, 4})).pow(2).mean();
    fresh_opt.zero_grad();
    loss.backward();
    fresh_opt.step();
    EXPECT_TRUE(torch::equal(fresh->weight, w_after));
    EXPECT_TRUE(torch::equal(torch::rand({3}), r_after));
}

TEST_F(Checkpoints, AnotherOptimizerIsTheConfigsChangeNotADamagedCheckpoint) {
    CheckpointStore store(dir_.string(), CheckpointConfig{});
    train_step();
    TrainState st;
    st.step = 1;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    auto fresh = torch::nn::Linear(4, 3);
    auto adamw = torch::optim::AdamW(fresh->parameters(), torch::optim::AdamWOptions(0.1));
    auto loaded = store.load_latest(*fresh, adamw);
    ASSERT_FALSE(loaded.is_ok());
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(loaded.status().message().find("saved with another optimizer (sgd; this run's optim.name is adamw)"),
              std::string::npos)
        << loaded.status().message();
    EXPECT_NE(loaded.status().message().find("resume with the optim.name the run started with"), std::string::npos);
    EXPECT_EQ(loaded.status().message().find("every one failed verification"), std::string::npos);
    // A checkpoint from before the kind was recorded: the load's failure says the same.
    auto manifest = nlohmann::json::parse(*fs::read_file(step_dir(1) / "manifest.json"));
    manifest.erase("optimizer");
    ASSERT_TRUE(fs::atomic_write(step_dir(1) / "manifest.json", manifest.dump()).is_ok());
    loaded = store.load_latest(*fresh, adamw);
    ASSERT_FALSE(loaded.is_ok());
    EXPECT_NE(loaded.status().message().find("saved with another optimizer? optim.pt does not load into this run's adamw"),
              std::string::npos)
        << loaded.status().message();
}

TEST_F(Checkpoints, AResumeByAnotherNumberOfProcessesIsSaid) {
    TrainState st;
    st.step = 3;
    st.next_batch = 3;
    ASSERT_TRUE(CheckpointStore(dir_.string(), CheckpointConfig{}, 1).save(st, *net_, *opt_).is_ok());
    const std::string events = (dir_ / "events.log").string();
    ASSERT_TRUE(log::add_file_sink(events));
    auto loaded = CheckpointStore(dir_.string(), CheckpointConfig{}, 2).load_latest(*net_, *opt_);
    log::remove_file_sinks();
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    auto text = fs::read_file(events);
    ASSERT_TRUE(text.is_ok());
    EXPECT_NE(text->find("was saved by 1 process(es), this run has 2: the epoch goes on from batch 3 of each process, so "
                         "part of this epoch's samples are skipped"),
              std::string::npos)
        << *text;
}

TEST_F(Checkpoints, CorruptLatestFallsBackToThePreviousOne) {
    CheckpointStore store(dir_.string(), CheckpointConfig{.every_steps = 0, .keep_last = 4, .keep_best = false});
    for (int64_t s = 1; s <= 4; ++s) {
        train_step();
        TrainState st;
        st.step = s;
        ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    }
    // A manifest whose checksum is not a string in step 4 (was a JSON type error that stopped the
    // resume), a bit flip in step 3, truncation in step 2: step 1 is the newest usable one.
    auto m4 = step_dir(4) / "manifest.json";
    auto manifest = nlohmann::json::parse(*fs::read_file(m4));
    manifest["files"]["model.pt"]["sha256"] = 12345;
    ASSERT_TRUE(fs::atomic_write(m4, manifest.dump()).is_ok());
    auto p3 = step_dir(3) / "model.pt";
    std::string b = *fs::read_file(p3);
    b[b.size() / 3] ^= 0x01;
    ASSERT_TRUE(fs::atomic_write(p3, b).is_ok());
    auto p2 = step_dir(2) / "optim.pt";
    std::string b2 = *fs::read_file(p2);
    ASSERT_TRUE(fs::atomic_write(p2, b2.substr(0, b2.size() / 2)).is_ok());

    auto loaded = store.load_latest(*net_, *opt_);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    ASSERT_TRUE(loaded->has_value());
    EXPECT_EQ((*loaded)->step, 1);

    // With every checkpoint broken, the error says so and names them.
    auto p1 = step_dir(1) / "state.json";
    ASSERT_TRUE(fs::atomic_write(p1, "{}").is_ok());
    auto none = store.load_latest(*net_, *opt_);
    ASSERT_FALSE(none.is_ok());
    EXPECT_EQ(none.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(none.status().message().find("no usable checkpoint"), std::string::npos);
    EXPECT_NE(none.status().message().find("step-000000003"), std::string::npos);
}

// A state.json edited with its checksum fixed: a step of 1e300 read as an int64 was undefined
// behaviour ("after 1 epochs, -9223372036854775689 steps"); now the checkpoint is refused.
TEST_F(Checkpoints, StateCountsMustBeWholeNumbersInRange) {
    CheckpointStore store(dir_.string(), CheckpointConfig{.every_steps = 0, .keep_last = 2, .keep_best = false});
    TrainState st;
    st.step = 1;
    st.window_seen = 64;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    const std::string saved = *fs::read_file(step_dir(1) / "state.json");
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"step", 1e300}, {"next_batch", -5}, {"window_seen", "many"}}) {
        auto state = nlohmann::json::parse(saved);
        state[key] = value;
        const std::string text = state.dump();
        ASSERT_TRUE(fs::atomic_write(step_dir(1) / "state.json", text).is_ok());
        auto manifest = nlohmann::json::parse(*fs::read_file(step_dir(1) / "manifest.json"));
        manifest["files"]["state.json"]["sha256"] = fs::sha256_hex(text);
        ASSERT_TRUE(fs::atomic_write(step_dir(1) / "manifest.json", manifest.dump()).is_ok());
        auto loaded = store.load_latest(*net_, *opt_);
        ASSERT_FALSE(loaded.is_ok()) << key;
        EXPECT_NE(loaded.status().message().find(key + " must be a whole number"), std::string::npos)
            << loaded.status().message();
    }
}

TEST_F(Checkpoints, KeepsLastKAndTheBest) {
    CheckpointStore store(dir_.string(), CheckpointConfig{.every_steps = 0, .keep_last = 2, .keep_best = true});
    for (int64_t s = 1; s <= 5; ++s) {
        TrainState st;
        st.step = s;
        st.best_step = 2;
        ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    }
    EXPECT_FALSE(stdfs::exists(step_dir(1)));
    EXPECT_TRUE(stdfs::exists(step_dir(2)));  // best
    EXPECT_FALSE(stdfs::exists(step_dir(3)));
    EXPECT_TRUE(stdfs::exists(step_dir(4)));
    EXPECT_TRUE(stdfs::exists(step_dir(5)));
    EXPECT_EQ(*fs::read_file(dir_ / "checkpoints" / "latest"), "step-000000005\n");
}

TEST_F(Checkpoints, SavingTheSameStepAgainReplacesItSafely) {
    CheckpointStore store(dir_.string(), CheckpointConfig{.every_steps = 0, .keep_last = 1, .keep_best = false});
    TrainState st;
    st.step = 4;
    st.next_batch = 1;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    st.next_batch = 2;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    auto loaded = store.load_latest(*net_, *opt_);
    ASSERT_TRUE(loaded.is_ok() && loaded->has_value());
    EXPECT_EQ((*loaded)->next_batch, 2);
    for (auto& e : stdfs::directory_iterator(dir_ / "checkpoints")) {
        EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos) << "left over: " << e.path();
    }
}

TEST_F(Checkpoints, NoCheckpointIsNotAnError) {
    CheckpointStore store(dir_.string(), CheckpointConfig{});
    auto loaded = store.load_latest(*net_, *opt_);
    ASSERT_TRUE(loaded.is_ok());
    EXPECT_FALSE(loaded->has_value());
}

TEST_F(Checkpoints, MetricsLogTruncatesToTheCheckpointAndIgnoresTornLines) {
    auto path = (dir_ / "metrics.jsonl").string();
    {
        auto log = MetricsLog::open(path, 0);
        ASSERT_TRUE(log.is_ok());
        for (int i = 0; i < 5; ++i) ASSERT_TRUE(log->append({{"step", i}}).is_ok());
    }
    std::string text = *fs::read_file(path);
    ASSERT_TRUE(fs::atomic_write(path, text + "{\"step\": 5, \"to").is_ok());  // torn by a kill
    EXPECT_EQ(MetricsLog::read(path)->size(), 5u);
    auto log = MetricsLog::open(path, 3);
    ASSERT_TRUE(log.is_ok());
    EXPECT_EQ(log->lines(), 3);
    ASSERT_TRUE(log->append({{"step", 3}}).is_ok());
    auto lines = *MetricsLog::read(path);
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_EQ(lines[3]["step"], 3);
}

// Found by review: a metrics.jsonl shorter than the checkpoint says (copied off a preempted node
// before its last checkpoint was, or deleted) refused the resume, and --overwrite -- deleting the
// checkpoints too -- was the only way on. Now the missing lines are lost, not the run.
TEST_F(Checkpoints, AMetricsLogShorterThanTheCheckpointLosesLinesNotTheRun) {
    auto path = (dir_ / "metrics.jsonl").string();
    ASSERT_TRUE(fs::atomic_write(path, "{\"step\":1}\n{\"step\":2}\n{\"step\":3, \"to").is_ok());
    {
        auto log = MetricsLog::open(path, 10);  // the checkpoint covers more than the file has
        ASSERT_TRUE(log.is_ok()) << log.status().message();
        EXPECT_EQ(log->lines(), 2);
        ASSERT_TRUE(log->append({{"step", 11}}).is_ok());
    }
    auto lines = *MetricsLog::read(path);
    ASSERT_EQ(lines.size(), 3u);  // the torn line dropped, the new one after the whole ones
    EXPECT_EQ(lines[1]["step"], 2);
    EXPECT_EQ(lines[2]["step"], 11);
    // Gone altogether: a new log.
    ASSERT_TRUE(fs::remove_tree(path).is_ok());
    {
        auto log = MetricsLog::open(path, 10);
        ASSERT_TRUE(log.is_ok()) << log.status().message();
        EXPECT_EQ(log->lines(), 0);
        ASSERT_TRUE(log->append({{"step", 11}}).is_ok());
    }
    EXPECT_EQ(MetricsLog::read(path)->size(), 1u);
    // One that cannot be read is still an error.
    ASSERT_TRUE(fs::remove_tree(path).is_ok());
    stdfs::create_directories(path);
    EXPECT_FALSE(MetricsLog::open(path, 10).is_ok());
}

// Found by review: a diverged run's state.json held null for a NaN loss sum ("type must be number,
// but is null", then "every one failed verification"). Now a non-finite number is written as a
// string and loads back; an old checkpoint's null says the run diverged.
TEST_F(Checkpoints, NonFiniteNumbersRoundTripAndNullSaysTheRunDiverged) {
    CheckpointStore store(dir_.string(), CheckpointConfig{.every_steps = 0, .keep_last = 2, .keep_best = false});
    TrainState st;
    st.step = 1;
    st.epoch_loss_sum = std::nan("");
    st.window_loss_sum = HUGE_VAL;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    auto loaded = store.load_latest(*net_, *opt_);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_TRUE(std::isnan((*loaded)->epoch_loss_sum));
    EXPECT_EQ((*loaded)->window_loss_sum, HUGE_VAL);

    auto state = nlohmann::json::parse(*fs::read_file(step_dir(1) / "state.json"));
    state["epoch_loss_sum"] = nullptr;
    const std::string text = state.dump();
    ASSERT_TRUE(fs::atomic_write(step_dir(1) / "state.json", text).is_ok());
    auto manifest = nlohmann::json::parse(*fs::read_file(step_dir(1) / "manifest.json"));
    manifest["files"]["state.json"]["sha256"] = fs::sha256_hex(text);
    ASSERT_TRUE(fs::atomic_write(step_dir(1) / "manifest.json", manifest.dump()).is_ok());
    auto none = store.load_latest(*net_, *opt_);
    ASSERT_FALSE(none.is_ok());
    EXPECT_NE(none.status().message().find("the run had diverged (NaN or infinite loss or weights)"), std::string::npos)
        << none.status().message();
    EXPECT_NE(none.status().message().find("epoch_loss_sum is null"), std::string::npos) << none.status().message();
    EXPECT_EQ(none.status().message().find("every one failed verification"), std::string::npos);
}

// A checkpoint of NaN weights (saved by a run that diverged between evaluations) is not resumed
// from: the one before it is.
TEST_F(Checkpoints, NanWeightsAreUnusableAndTheOneBeforeIsTaken) {
    CheckpointStore store(dir_.string(), CheckpointConfig{.every_steps = 0, .keep_last = 3, .keep_best = false});
    TrainState st;
    st.step = 1;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    {
        torch::NoGradGuard ng;
        net_->weight.fill_(std::nan(""));
    }
    EXPECT_FALSE(finite_weights(*net_));
    st.step = 2;
    ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    auto loaded = store.load_latest(*net_, *opt_);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ((*loaded)->step, 1);
    EXPECT_TRUE(finite_weights(*net_));
}

// Found by review: a checkpoint copied from elsewhere (step-000000022 renamed step-000000011) was
// trained on from foreign weights, and metrics.jsonl truncated to its count.
TEST_F(Checkpoints, ARenamedOrForeignCheckpointIsUnusable) {
    CheckpointStore store(dir_.string(), CheckpointConfig{.every_steps = 0, .keep_last = 3, .keep_best = false});
    for (int64_t s = 1; s <= 2; ++s) {
        TrainState st;
        st.step = s;
        ASSERT_TRUE(store.save(st, *net_, *opt_).is_ok());
    }
    stdfs::copy(step_dir(2), step_dir(3));
    auto loaded = store.load_latest(*net_, *opt_);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ((*loaded)->step, 2);
    stdfs::remove_all(step_dir(3));

    // Another run's checkpoint at a step this run has not reached.
    const stdfs::path other = dir_ / "other";
    CheckpointStore theirs(other.string(), CheckpointConfig{.every_steps = 0, .keep_last = 3, .keep_best = false});
    TrainState st;
    st.step = 5;
    ASSERT_TRUE(theirs.save(st, *net_, *opt_).is_ok());
    stdfs::copy(other / "checkpoints" / "step-000000005", step_dir(5));
    const std::string events = (dir_ / "events.log").string();
    ASSERT_TRUE(log::add_file_sink(events));
    loaded = CheckpointStore(dir_.string(), CheckpointConfig{}).load_latest(*net_, *opt_);
    log::remove_file_sinks();
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ((*loaded)->step, 2);
    EXPECT_NE(fs::read_file(events)->find("it belongs to another run"), std::string::npos) << *fs::read_file(events);
    // Nor are its weights taken as a best evaluation's (load_weights, early stopping's restore).
    Status st5 = CheckpointStore(dir_.string(), CheckpointConfig{}).load_weights(5, *net_);
    EXPECT_EQ(st5.code(), StatusCode::kDataLoss) << st5.message();
    EXPECT_NE(st5.message().find("it belongs to another run"), std::string::npos) << st5.message();
    EXPECT_TRUE(CheckpointStore(dir_.string(), CheckpointConfig{}).load_weights(2, *net_).is_ok());
}

// Found by review: `strato eval` scored a package of NaN weights (accuracy of a constant guess,
// loss nan) with exit 0.
TEST_F(Checkpoints, EvaluatingAPackageOfNanWeightsIsAnError) {
    auto [info, net, pkg, data] = tiny_package();
    auto good = evaluate_package(pkg, data, false);
    ASSERT_TRUE(good.is_ok()) << good.status().message();
    {
        torch::NoGradGuard ng;
        for (auto& p : net->parameters()) p.fill_(std::nan(""));
    }
    ASSERT_TRUE(models::save_package(pkg, info, *net).is_ok());
    auto bad = evaluate_package(pkg, data, false);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find(pkg + ": the model's loss on the 64 test samples is "), std::string::npos)
        << bad.status().message();
    EXPECT_NE(bad.status().message().find("nan: its outputs are NaN or infinite"), std::string::npos)
        << bad.status().message();
}

// Ctrl-C during `strato compress prune`'s evaluations (and quantize's) stops at the next batch
// instead of scoring the whole test split first.
TEST_F(Checkpoints, AnEvaluationAskedToStopEndsAtTheNextBatch) {
    auto t = tiny_package();
    t.data.eval_batch_size = 16;
    int asked = 0;
    auto stopped = evaluate_package(t.dir, t.data, false, true, [&asked] { return ++asked == 3; });
    ASSERT_FALSE(stopped.is_ok());
    EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled);
    EXPECT_EQ(stopped.status().message(), "interrupted while evaluating, after 32 of the test samples");
    auto whole = evaluate_package(t.dir, t.data, false, true, [] { return false; });
    ASSERT_TRUE(whole.is_ok()) << whole.status().message();
    EXPECT_EQ(whole->result.count, 64);
}

// Found by review: a resnet whose last feature map is 1x1 (a CSV's features, tiny images) with a
// last training batch of one sample failed at the end of the first epoch with libtorch's "Expected
// more than 1 value per channel when training". It is refused before any work, saying what to do.
TEST_F(Checkpoints, ALastBatchOfOneSampleThatBatchNormCannotTrainOnIsRefusedUpFront) {
    TrainConfig c = tiny_run("one");
    c.data.image_size = 4;  // 4 -> 2 -> 1 through the resnet's stages
    c.data.limit_train = 65;
    c.data.batch_size = 32;
    c.model.arch = "resnet";
    c.model.depth = 8;
    c.model.width = 4;
    c.train.epochs = 1;
    auto r = run_training(c, {.overwrite = true, .quiet = true});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("data.batch_size 32 leaves a last training batch of 1 sample (65 samples per "
                                        "process), and the resnet's batch norm cannot train on one"),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("hint: set data.drop_last = true"), std::string::npos) << r.status().message();
    EXPECT_FALSE(stdfs::exists(dir_ / "one" / "metrics.jsonl"));  // before the run began
    // Either remedy trains; a network that takes one sample (the mlp) is not refused.
    c.data.drop_last = true;
    auto dropped = run_training(c, {.overwrite = true, .quiet = true});
    EXPECT_TRUE(dropped.is_ok()) << dropped.status().message();
    c.data.drop_last = false;
    c.data.batch_size = 33;
    auto other = run_training(c, {.overwrite = true, .quiet = true});
    EXPECT_TRUE(other.is_ok()) << other.status().message();
    c.data.batch_size = 32;
    c.model = tiny_run("one").model;
    auto mlp = run_training(c, {.overwrite = true, .quiet = true});
    EXPECT_TRUE(mlp.is_ok()) << mlp.status().message();
}

// Found by review: a package trained on a CSV table scored a test.csv whose columns were in
// another order without a word (they are matched by position). The package names its features.
TEST_F(Checkpoints, ACsvPackageRefusesDataWhoseFeatureColumnsDiffer) {
    models::PackageInfo info;
    info.model.arch = "mlp";
    info.model.width = 8;
    info.input_shape = {3, 1, 1};
    info.num_classes = 2;
    info.labels = {"x", "y"};
    info.features = {"a", "b", "c"};
    info.mean = {0, 0, 0};
    info.std = {1, 1, 1};
    auto net = models::create_model(info.model, info.input_shape, 2).value();
    const std::string pkg = (dir_ / "model").string();
    ASSERT_TRUE(models::save_package(pkg, info, *net).is_ok());
    EXPECT_EQ(models::load_package(pkg)->info.features, info.features);
    // Its manifest does not call the values pixels (found by review).
    const auto manifest = nlohmann::json::parse(*fs::read_file(stdfs::path(pkg) / models::kPackageManifest));
    EXPECT_FALSE(manifest["preprocessing"].contains("pixels")) << manifest["preprocessing"].dump();
    EXPECT_TRUE(manifest["preprocessing"].contains("values")) << manifest["preprocessing"].dump();
    data::DataConfig data;
    data.dataset = "csv";
    data.path = (dir_ / "table").string();
    data.workers = 0;
    stdfs::create_directories(data.path);
    auto eval_with = [&](const std::string& header) {
        EXPECT_TRUE(fs::atomic_write(data.path + "/test.csv", header + "\n1,2,3,x\n4,5,6,y\n").is_ok());
        return evaluate_package(pkg, data, false);
    };
    auto same = eval_with("a,b,c,label");
    EXPECT_TRUE(same.is_ok()) << same.status().message();
    auto swapped = eval_with("b,a,c,label");
    ASSERT_FALSE(swapped.is_ok());
    EXPECT_NE(swapped.status().message().find("the data's feature column 1 is 'b' but the model's is 'a' (the same "
                                              "columns in another order?): the columns must be the model's, in its "
                                              "order (a, b, c)"),
              std::string::npos)
        << swapped.status().message();
    auto other = eval_with("a,b,d,label");
    ASSERT_FALSE(other.is_ok());
    EXPECT_NE(other.status().message().find("feature column 3 is 'd' but the model's is 'c':"), std::string::npos)
        << other.status().message();
    // The data read is named, and for a table model given images (the default is Fashion-MNIST),
    // what would fit (found by review: "label 9 found, but there are only 2 classes", no more).
    data::DataConfig images;
    images.dataset = "synthetic";
    images.image_size = 8;
    images.workers = 0;
    auto wrong = evaluate_package(pkg, images, false);
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_EQ(wrong.status().message().rfind("test data (synthetic): ", 0), 0u) << wrong.status().message();
    EXPECT_NE(wrong.status().message().find("\nhint: the model reads a table of 3 features (a, b, c): --dataset csv "
                                            "--data DIR (DIR/train.csv, DIR/test.csv)"),
              std::string::npos)
        << wrong.status().message();
}

// Found by review: a model whose labels are Fashion-MNIST's classes in another order (trained on
// an image folder of them, sorted) was scored by index on the IDX files. It is scored by name now,
// as an image folder is (and as distill reorders such a teacher); its training data is refused.
TEST_F(Checkpoints, AModelOrderingFashionMnistsClassesOtherwiseIsScoredByName) {
    data::DataConfig data;
    data.dataset = "fashion-mnist";
    data.path = (dir_ / "fm").string();
    data.workers = 0;
    stdfs::create_directories(data.path);
    auto idx = [](std::vector<uint32_t> dims, const std::string& body) {
        std::string h = {0, 0, 8, static_cast<char>(dims.size())};
        for (auto d : dims)
            for (int sh = 24; sh >= 0; sh -= 8) h.push_back(static_cast<char>((d >> sh) & 0xFF));
        return h + body;
    };
    std::string px, y;
    for (int i = 0; i < 40; ++i) {
        y.push_back(static_cast<char>(i % 10));
        for (int p = 0; p < 64; ++p) px.push_back(static_cast<char>((i * 37 + p * 11) % 256));
    }
    for (const auto& [images, labels] : {std::pair{data.train_images, data.train_labels}, {data.test_images, data.test_labels}}) {
        ASSERT_TRUE(fs::atomic_write(data.path + "/" + images, idx({40, 8, 8}, px)).is_ok());
        ASSERT_TRUE(fs::atomic_write(data.path + "/" + labels, idx({40}, y)).is_ok());
    }
    models::PackageInfo info;
    info.model.arch = "mlp";
    info.model.width = 16;
    info.input_shape = {1, 8, 8};
    info.num_classes = 10;
    info.labels = data::fashion_mnist_classes();
    info.mean = {0.5};
    info.std = {0.25};
    auto net = models::create_model(info.model, info.input_shape, 10).value();
    const std::string a = (dir_ / "a").string(), b = (dir_ / "b").string();
    ASSERT_TRUE(models::save_package(a, info, *net).is_ok());
    auto ra = evaluate_package(a, data, false);
    ASSERT_TRUE(ra.is_ok()) << ra.status().message();
    // The same model with its classes sorted by name, as an image folder's ("T-shirt/top" as the
    // folder T-shirt_top): its output rows permuted alike.
    std::vector<int64_t> perm(10);  // the model's class k is Fashion-MNIST's class perm[k]
    for (int64_t k = 0; k < 10; ++k) perm[static_cast<size_t>(k)] = k;
    auto folder = [&](int64_t c) {
        std::string n = info.labels[static_cast<size_t>(c)];
        std::replace(n.begin(), n.end(), '/', '_');
        return n;
    };
    std::sort(perm.begin(), perm.end(), [&](int64_t x, int64_t z) { return folder(x) < folder(z); });
    models::PackageInfo sorted = info;
    sorted.labels.clear();
    for (int64_t c : perm) sorted.labels.push_back(folder(c));
    ASSERT_NE(sorted.labels, info.labels);
    {
        torch::NoGradGuard ng;
        auto params = net->parameters();
        auto rows = torch::tensor(perm, torch::kLong);
        for (size_t i = params.size() - 2; i < params.size(); ++i) params[i].copy_(params[i].index_select(0, rows));
    }
    ASSERT_TRUE(models::save_package(b, sorted, *net).is_ok());
    auto rb = evaluate_package(b, data, false);
    ASSERT_TRUE(rb.is_ok()) << rb.status().message();
    EXPECT_EQ(rb->result.count, 40);
    EXPECT_NEAR(rb->result.loss, ra->result.loss, 1e-5);
    EXPECT_DOUBLE_EQ(rb->result.accuracy, ra->result.accuracy);
    // Data for training it further (prune's fine-tuning) would relabel it: refused.
    auto train = open_package_data(sorted, data);
    ASSERT_FALSE(train.is_ok());
    EXPECT_NE(train.status().message().find("the data's class 0 is 'T-shirt/top' but the model's class 0 is 'Ankle "
                                            "boot': the model orders Fashion-MNIST's classes otherwise"),
              std::string::npos)
        << train.status().message();
    // Data read only through the model (quantize's calibration and scores) is matched by name, as
    // evaluation is (found by review: quantize refused what eval scored).
    auto calibrate = open_package_data(sorted, data, nullptr, PackageData::kCalibrate);
    ASSERT_TRUE(calibrate.is_ok()) << calibrate.status().message();
    auto evaluate = open_package_data(sorted, data, nullptr, PackageData::kEvaluate);
    ASSERT_TRUE(evaluate.is_ok()) << evaluate.status().message();
    EXPECT_EQ(calibrate->test->class_names(), sorted.labels);
    std::vector<uint8_t> pixels(64);
    for (int64_t i = 0; i < 40; ++i) {
        int64_t by_calibrate = -1, by_evaluate = -2, by_train = -3;
        ASSERT_TRUE(calibrate->test->load(i, pixels.data(), &by_calibrate).is_ok());
        ASSERT_TRUE(evaluate->test->load(i, pixels.data(), &by_evaluate).is_ok());
        ASSERT_TRUE(calibrate->train->load(i, pixels.data(), &by_train).is_ok());
        EXPECT_EQ(by_calibrate, by_evaluate) << i;
        EXPECT_EQ(by_train, by_evaluate) << i;  // (the same 40 images and labels in both files)
        EXPECT_EQ(sorted.labels[static_cast<size_t>(by_calibrate)], folder(i % 10)) << i;
    }
}

TEST(Threads, ZeroTakesOmpNumThreadsWhenSetAsPyTorchDoes) {
    // strato launch sets OMP_NUM_THREADS=1 for several workers per node; each took every core.
    const char* old = std::getenv("OMP_NUM_THREADS");
    const std::string saved = old ? old : "";
    setenv("OMP_NUM_THREADS", "1", 1);
    EXPECT_EQ(configure_threads(0), 1);
    EXPECT_EQ(configure_threads(2), 2);  // run.threads wins
    setenv("OMP_NUM_THREADS", "lots", 1);
    EXPECT_EQ(configure_threads(0), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    if (old) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
    else unsetenv("OMP_NUM_THREADS");
    configure_threads(0);
}

}  // namespace
}  // namespace strato::train

namespace strato::train {
namespace {

// Found by review: each loss of an accumulated step was divided by train.grad_accum, also in an
// epoch's last step when fewer batches were left (3 batches at grad_accum 2: the third batch's
// step took half its gradient). 3 batches of 32 accumulated by 2 make the same steps as batches
// of 64 then 32.
TEST_F(Checkpoints, AnEpochsShortLastAccumulatedStepTakesTheMeanGradient) {
    auto run = [&](const std::string& name, int64_t batch, int64_t accum) {
        TrainConfig c = tiny_run(name);
        c.data.limit_train = 96;
        c.data.batch_size = batch;
        c.data.shuffle = false;
        c.optim.lr = 0.5;
        c.optim.momentum = 0;
        c.optim.weight_decay = 0;
        c.schedule.name = "constant";
        c.train.epochs = 1;
        c.train.grad_accum = accum;
        EXPECT_TRUE(c.validate().is_ok());
        auto r = run_training(c, {.overwrite = true, .quiet = true});
        EXPECT_TRUE(r.is_ok()) << r.status().message();
        if (r.is_ok()) {
            EXPECT_EQ(r->steps, 2);
        }
        return models::load_package((dir_ / name / "model").string());
    };
    auto accumulated = run("accum", 32, 2), whole = run("whole", 64, 1);
    ASSERT_TRUE(accumulated.is_ok()) << accumulated.status().message();
    ASSERT_TRUE(whole.is_ok()) << whole.status().message();
    auto a = accumulated->net->named_parameters(), w = whole->net->named_parameters();
    for (const auto& p : a) {
        const double diff = (p.value() - w[p.key()]).abs().max().item<double>();
        EXPECT_LT(diff, 1e-5) << p.key();
    }
}

// Found by review: with early stopping the package held the last weights, `patience` evaluations
// past the best one (Keras' restore_best_weights, HF's load_best_model_at_end): the best
// evaluation's checkpoint is packaged now, and its accuracy is the package's.
TEST_F(Checkpoints, EarlyStoppingPackagesTheBestEvaluationsWeights) {
    auto config = [&](const std::string& name) {
        TrainConfig c = tiny_run(name);
        c.data.batch_size = 32;
        c.optim.lr = 0.5;
        c.train.epochs = 6;
        // Only the first evaluation counts as better: stopped after the third epoch (step 6),
        // the best is the first's (step 2).
        c.train.early_stopping_patience = 2;
        c.train.early_stopping_min_delta = 0.99;
        return c;
    };
    auto weights_of_step = [&](const std::string& name, int64_t step) {
        models::ModelConfig m;
        m.arch = "mlp";
        m.width = 16;
        auto net = models::create_model(m, {1, 8, 8}, 4).value();
        CheckpointStore store((dir_ / name).string(), CheckpointConfig{});
        Status st = store.load_weights(step, *net);
        EXPECT_TRUE(st.is_ok()) << st.message();
        return net;
    };
    auto same = [](models::NetImpl& a, models::NetImpl& b) {
        auto pa = a.named_parameters(), pb = b.named_parameters();
        for (const auto& p : pa)
            if (!torch::equal(p.value(), pb[p.key()])) return false;
        return true;
    };

    auto r = run_training(config("best"), {.overwrite = true, .quiet = true});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_TRUE(r->early_stopped);
    EXPECT_EQ(r->steps, 6);
    EXPECT_EQ(r->weights_step, 2);
    auto pkg = models::load_package((dir_ / "best" / "model").string());
    ASSERT_TRUE(pkg.is_ok()) << pkg.status().message();
    EXPECT_TRUE(same(*pkg->net, *weights_of_step("best", 2)));
    EXPECT_FALSE(same(*pkg->net, *weights_of_step("best", 6)));
    EXPECT_EQ(pkg->info.metrics.value("weights_step", -1), 2);
    EXPECT_DOUBLE_EQ(pkg->info.metrics.value("test_acc", -1.0), r->best_test_acc);
    // A resume of the finished run packages the same weights.
    auto again = run_training(config("best"), {.resume = true, .quiet = true});
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ(again->weights_step, 2);
    EXPECT_TRUE(same(*models::load_package((dir_ / "best" / "model").string())->net, *weights_of_step("best", 2)));

    // Asked not to: the last weights.
    TrainConfig last = config("last");
    last.train.early_stopping_restore_best = false;
    r = run_training(last, {.overwrite = true, .quiet = true});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->weights_step, 6);
    EXPECT_TRUE(same(*models::load_package((dir_ / "last" / "model").string())->net, *weights_of_step("last", 6)));

    // The best checkpoint not kept: the last weights, and the run still succeeds.
    TrainConfig gone = config("gone");
    gone.checkpoint.keep_best = false;
    gone.checkpoint.keep_last = 1;
    r = run_training(gone, {.overwrite = true, .quiet = true});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->weights_step, 6);
    EXPECT_TRUE(same(*models::load_package((dir_ / "gone" / "model").string())->net, *weights_of_step("gone", 6)));
}

// A resumed epoch's epoch_time_s was only the time after the resume (a tune study on
// metric = "epoch_time_s" ranked a preempted trial as the fastest): the checkpoint keeps the
// epoch's training time so far, and the resumed epoch adds it.
TEST_F(Checkpoints, AnEpochResumedMidWayIsTimedWhole) {
    TrainConfig c = tiny_run("timed");
    c.data.batch_size = 16;  // 4 steps an epoch
    c.train.epochs = 1;
    c.train.max_steps = 2;
    ASSERT_TRUE(run_training(c, {.overwrite = true, .quiet = true}).is_ok());
    CheckpointStore store((dir_ / "timed").string(), CheckpointConfig{});
    auto net = models::create_model(c.model, {1, 8, 8}, 4).value();
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
    auto state = store.load_latest(*net, opt);
    ASSERT_TRUE(state.is_ok() && state->has_value()) << state.status().message();
    EXPECT_EQ((*state)->next_batch, 2);
    const double before = (*state)->epoch_elapsed_s;
    EXPECT_GT(before, 0.0);

    c.train.max_steps = 0;
    ASSERT_TRUE(run_training(c, {.resume = true, .quiet = true}).is_ok());
    auto lines = fs::read_file(dir_ / "timed" / "metrics.jsonl");
    ASSERT_TRUE(lines.is_ok());
    nlohmann::json last;
    std::istringstream in(*lines);
    for (std::string line; std::getline(in, line);)
        if (auto j = nlohmann::json::parse(line); j["kind"] == "eval") last = j;
    EXPECT_EQ(last["epoch"], 1);
    EXPECT_FALSE(last.contains("partial")) << last.dump();
    EXPECT_GT(last["epoch_time_s"].get<double>(), before);
}

// Found by review: a resume with another config warned only that "the config differs"; which keys
// changed, and how, is what the user needs to see.
TEST_F(Checkpoints, AResumeWithAnotherConfigNamesTheChangedKeys) {
    TrainConfig c = tiny_run("changed");
    c.train.epochs = 2;
    c.train.stop_after_epochs = 1;
    ASSERT_TRUE(run_training(c, {.quiet = true}).is_ok());
    c.optim.lr = 0.25;
    c.train.stop_after_epochs = 0;
    auto r = run_training(c, {.resume = true, .quiet = true});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const std::string events = *fs::read_file(dir_ / "changed" / "events.log");
    EXPECT_NE(events.find("optim.lr 0.05 -> 0.25"), std::string::npos) << events;
    EXPECT_NE(events.find("train.stop_after_epochs 1 -> 0"), std::string::npos) << events;
}

// Found by review: a package whose strato-model.json claimed outputs of another shape than its
// num_classes logits loaded, and servers advertised that shape.
TEST_F(Checkpoints, APackageWhoseOutputsLieIsRefused) {
    models::PackageInfo info;
    info.model.arch = "mlp";
    info.model.width = 16;
    info.input_shape = {1, 8, 8};
    info.num_classes = 4;
    info.mean = {0.5};
    info.std = {0.25};
    auto net = models::create_model(info.model, info.input_shape, 4).value();
    const std::string pkg = (dir_ / "model").string();
    ASSERT_TRUE(models::save_package(pkg, info, *net).is_ok());
    ASSERT_TRUE(models::load_package(pkg).is_ok());
    const std::string manifest = pkg + "/strato-model.json";
    auto j = nlohmann::json::parse(*fs::read_file(manifest));
    j["outputs"][0]["shape"] = {-1, 7};
    ASSERT_TRUE(fs::atomic_write(manifest, j.dump()).is_ok());
    auto r = models::load_package(pkg);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("/outputs must be one output of shape [-1, 4]"), std::string::npos)
        << r.status().message();
}


// Found by review: a loss that became NaN trained on until the next checkpoint or the epoch's end
// (hours of an image-folder epoch), its "train" lines holding "loss": null. It stops the run at
// the step it appears, naming it, and nothing after it is saved.
TEST_F(Checkpoints, ANonFiniteLossStopsTheRunAtItsStep) {
    TrainConfig c = tiny_run("nan");
    c.data.batch_size = 8;  // 8 steps an epoch
    c.train.epochs = 2;
    c.train.log_every = 1;
    c.checkpoint.every_steps = 2;
    TrainHooks hooks;
    hooks.after_step = [](models::NetImpl& net, int64_t step, int64_t) {
        if (step == 3)
            for (auto& p : net.parameters()) p.fill_(std::nan(""));
    };
    auto r = run_training(c, {.overwrite = true, .quiet = true, .hooks = &hooks});
    ASSERT_FALSE(r.is_ok());
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("training diverged: at step 4 (in epoch 1) the training loss is nan (batch 4 of 8)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("the last good one, step-000000002, is kept"), std::string::npos) << m;
    EXPECT_FALSE(stdfs::exists(dir_ / "nan" / "model"));
    auto lines = MetricsLog::read((dir_ / "nan" / "metrics.jsonl").string());
    ASSERT_TRUE(lines.is_ok());
    EXPECT_EQ(lines->size(), 3u);  // steps 1 to 3
    for (const auto& j : *lines) EXPECT_TRUE(j["loss"].is_number()) << j.dump();
}


// Found by review: an elastic agent (strato launch --max-restarts, torchrun) restarts the same
// command after a failure; with --overwrite each restart deleted the attempt before it, and
// without --resume each one failed at once ("already holds a run"). A restart resumes.
TEST_F(Checkpoints, AnElasticRestartResumesWhateverTheFlagsSay) {
    struct Env {
        Env() {
            ::setenv("RANK", "0", 1);
            ::setenv("WORLD_SIZE", "1", 1);
            ::setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
        }
        ~Env() {
            for (const char* v : {"RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT"}) ::unsetenv(v);
        }
    };
    TrainConfig c = tiny_run("elastic");
    c.data.batch_size = 32;  // 2 steps an epoch
    c.train.epochs = 3;
    c.train.stop_after_epochs = 1;  // the first attempt ends after an epoch (as a failure would)
    ASSERT_TRUE(run_training(c, {.overwrite = true, .quiet = true}).is_ok());
    const auto run_id = *fs::read_file(dir_ / "elastic" / "checkpoints" / "run-id");
    c.train.stop_after_epochs = 2;
    {
        Env restarted;
        auto r = run_training(c, {.overwrite = true, .quiet = true});
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r->steps, 4);
    }
    EXPECT_EQ(*fs::read_file(dir_ / "elastic" / "checkpoints" / "run-id"), run_id);  // not deleted and begun again
    EXPECT_TRUE(stdfs::exists(dir_ / "elastic" / "checkpoints" / "step-000000002"));
    c.train.stop_after_epochs = 0;
    {
        Env restarted;
        auto r = run_training(c, {.quiet = true});  // no --resume
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r->steps, 6);
    }
    // Not restarted: the flags mean what they say.
    auto again = run_training(c, {.quiet = true});
    ASSERT_FALSE(again.is_ok());
    EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status().message();
}


// Found by review: SIGINT/SIGTERM during an epoch's evaluation waited for the whole test split
// (minutes of an image folder: a preempted machine's SIGKILL then lost the epoch). The evaluation
// stops at the next test batch; the checkpoint keeps the epoch's training, and a resume evaluates it.
TEST_F(Checkpoints, AStopSignalDuringTheEvaluationCheckpointsAtOnce) {
    TrainConfig c = tiny_run("evalstop");
    c.train.epochs = 2;  // 1 step an epoch
    // An evaluation of ~13 s on a 2-core VM (a wide CNN), of little data (set up at once).
    c.model.arch = "cnn";
    c.model.width = 64;
    c.model.hidden = 32;
    c.data.image_size = 16;
    c.data.limit_test = 40000;
    c.data.eval_batch_size = 50;
    signals::reset();
    signals::install_stop_handlers();
    std::thread signaller;
    TrainHooks hooks;
    hooks.after_step = [&](models::NetImpl&, int64_t step, int64_t) {
        if (step == 1)  // the epoch's last step: its evaluation begins right after it
            signaller = std::thread([] {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                ::kill(::getpid(), SIGTERM);
            });
    };
    const auto start = std::chrono::steady_clock::now();
    auto r = run_training(c, {.overwrite = true, .quiet = true, .hooks = &hooks});
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(took, 10.0);
    signaller.join();
    signals::reset();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
    EXPECT_NE(r.status().message().find("interrupted by signal 15 while evaluating epoch 1; checkpoint saved"),
              std::string::npos)
        << r.status().message() << " (after " << took << " s)";
    EXPECT_TRUE(stdfs::exists(dir_ / "evalstop" / "checkpoints" / "step-000000001"));
    EXPECT_FALSE(stdfs::exists(dir_ / "evalstop" / "model"));

    c.data.limit_test = 32;
    auto resumed = run_training(c, {.resume = true, .quiet = true});
    ASSERT_TRUE(resumed.is_ok()) << resumed.status().message();
    EXPECT_EQ(resumed->steps, 2);
    auto lines = MetricsLog::read((dir_ / "evalstop" / "metrics.jsonl").string());
    ASSERT_TRUE(lines.is_ok());
    std::vector<nlohmann::json> evals;
    for (const auto& j : *lines)
        if (j["kind"] == "eval") evals.push_back(j);
    ASSERT_EQ(evals.size(), 2u);
    EXPECT_EQ(evals[0]["epoch"], 1);
    EXPECT_EQ(evals[0]["step"], 1);
    EXPECT_FALSE(evals[0].contains("partial")) << evals[0].dump();
}


// Found by review: a resume in the middle of an epoch with another run.seed (or data.shuffle
// switched) drew another order for the rest of the epoch -- samples skipped, others trained twice --
// with only the warning that the config differed. Refused as another batch size is; at an epoch's
// end any seed resumes.
TEST_F(Checkpoints, AResumeMidEpochWithAnotherDataOrderIsRefused) {
    TrainConfig c = tiny_run("order");
    c.data.batch_size = 16;  // 4 steps an epoch
    c.train.epochs = 2;
    c.train.max_steps = 2;
    ASSERT_TRUE(run_training(c, {.overwrite = true, .quiet = true}).is_ok());
    c.train.max_steps = 0;
    TrainConfig seed = c;
    seed.run.seed = 7;
    auto r = run_training(seed, {.resume = true, .quiet = true});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("whose order run.seed 0 drew; resuming it with run.seed 7"), std::string::npos)
        << r.status().message();
    TrainConfig unshuffled = c;
    unshuffled.data.shuffle = false;
    r = run_training(unshuffled, {.resume = true, .quiet = true});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("whose order is shuffled; resuming it with data.shuffle = false"),
              std::string::npos)
        << r.status().message();
    // The same order: resumed (to the epoch's end), then another seed at the epoch's end is fine.
    c.train.max_steps = 4;
    r = run_training(c, {.resume = true, .quiet = true});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->steps, 4);
    seed.train.max_steps = 0;
    r = run_training(seed, {.resume = true, .quiet = true});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->steps, 8);
}

}  // namespace
}  // namespace strato::train
