#include "strato/serve/repository/repository.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <sstream>

#include "strato/core/log.h"

namespace strato::serve {
namespace {

namespace fs = std::filesystem;

// A backend whose model file holds a number that execute() returns; enough to see which
// version answered.
class Echo : public Model {
public:
    explicit Echo(float v) : v_(v) {}
    Status execute(const std::vector<Tensor>& in, std::vector<Tensor>* out) override {
        Tensor t{"y", DataType::kFp32, {in[0].shape[0], 1}, std::string(static_cast<size_t>(in[0].shape[0]) * 4, '\0')};
        auto* f = reinterpret_cast<float*>(t.data.data());
        for (int64_t i = 0; i < in[0].shape[0]; ++i) f[i] = v_;
        out->push_back(std::move(t));
        return Status::ok();
    }

private:
    float v_;
};

void register_fake() {
    register_backend({"fake", {"fake_platform"}, "model.fake",
                      [](ModelConfig* c, const std::string&) {
                          if (c->inputs.empty()) c->inputs.push_back({"x", DataType::kFp32, {1}, false, ""});
                          if (c->outputs.empty()) c->outputs.push_back({"y", DataType::kFp32, {1}, false, ""});
                          if (c->max_batch_size == 0) c->max_batch_size = 8;
                          return Status::ok();
                      },
                      [](const ModelConfig&, const std::string& dir, Device) -> Result<std::shared_ptr<Model>> {
                          std::ifstream f(fs::path(dir) / "model.fake");
                          if (f.peek() == 't') throw std::runtime_error("type must be number, but is string");
                          float v = 0;
                          if (!(f >> v)) return data_loss("{}/model.fake: not a number", dir);
                          return std::shared_ptr<Model>(std::make_shared<Echo>(v));
                      }});
}

class RepositoryTest : public ::testing::Test {
protected:
    void SetUp() override {
        register_fake();
        root = fs::temp_directory_path() / ("strato-repo-" + std::to_string(::getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root);
        fs::create_directories(root);
    }
    void TearDown() override { fs::remove_all(root); }

    void version(const std::string& model, int v, const std::string& value) {
        fs::create_directories(root / model / std::to_string(v));
        std::ofstream(root / model / std::to_string(v) / "model.fake") << value;
    }
    void config(const std::string& model, const std::string& text) { std::ofstream(root / model / "config.pbtxt") << text; }
    RepositoryOptions options(ControlMode mode) {
        RepositoryOptions o;
        o.paths = {root.string()};
        o.mode = mode;
        return o;
    }

    fs::path root;
    metrics::Registry registry;
};

TEST_F(RepositoryTest, VersionPolicyLatestServesTheHighestVersions) {
    for (int v : {1, 2, 3}) version("m", v, std::to_string(v));
    // Every int64 is a version (19 digits were ignored); past it, not a version.
    fs::create_directories(root / "big" / "9223372036854775807");
    std::ofstream(root / "big" / "9223372036854775807" / "model.fake") << 7;
    fs::create_directories(root / "big" / "9223372036854775808");
    fs::create_directories(root / "m" / "07");  // names starting with 0 are not versions
    config("m", "version_policy: { latest: { num_versions: 2 } }");
    Repository repo(options(ControlMode::kNone), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    auto latest = repo.get("m", "");
    ASSERT_TRUE(latest.is_ok()) << latest.status().message();
    EXPECT_EQ((*latest)->version, 3);
    EXPECT_TRUE(repo.get("m", "2").is_ok());
    EXPECT_EQ(repo.get("m", "1").status().code(), StatusCode::kNotFound);  // never served
    EXPECT_EQ(repo.get("m", "x1").status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(repo.get("other", "").status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ((*latest)->config.platform, "fake_platform");  // filled in from the backend
    auto big = repo.get("big", "");
    ASSERT_TRUE(big.is_ok()) << big.status().message();
    EXPECT_EQ((*big)->version, INT64_MAX);
    EXPECT_TRUE(repo.ready());
}

TEST_F(RepositoryTest, BrokenModelIsUnavailableWithItsReasonAndServerNotReady) {
    version("good", 1, "1");
    version("bad", 1, "not-a-number");
    Repository repo(options(ControlMode::kNone), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    EXPECT_TRUE(repo.get("good", "").is_ok());
    EXPECT_FALSE(repo.ready());
    bool found = false;
    for (const auto& e : repo.index(false))
        if (e.name == "bad") {
            found = true;
            EXPECT_EQ(e.state, "UNAVAILABLE");
            EXPECT_NE(e.reason.find("not a number"), std::string::npos) << e.reason;
        }
    EXPECT_TRUE(found);
}

// Found by review: `max_batch_size: 0` with `dynamic_batching { ... }` (Triton loads it: requests
// queue under the queue policy and run one at a time) failed its load with "dynamic_batching needs
// max_batch_size > 0", so a Triton repository with such a model did not come up.
TEST_F(RepositoryTest, AModelWithoutABatchDimensionMayHaveADynamicBatcher) {
    register_backend({"fake_unbatched", {}, "model.fake", nullptr,
                      [](const ModelConfig&, const std::string&, Device) -> Result<std::shared_ptr<Model>> {
                          return std::shared_ptr<Model>(std::make_shared<Echo>(5));
                      }});
    version("m", 1, "5");
    config("m", R"(backend: "fake_unbatched" max_batch_size: 0
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]
        dynamic_batching { max_queue_delay_microseconds: 100 default_queue_policy { max_queue_size: 3 } })");
    Repository repo(options(ControlMode::kNone), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    auto m = repo.get("m", "");
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_EQ((*m)->config.max_batch_size, 0);
    ASSERT_TRUE((*m)->config.dynamic_batching.has_value());
    EXPECT_EQ((*m)->config.dynamic_batching->max_queue_size, 3);
    EXPECT_TRUE(repo.ready());
}

// Found by review: `--model-repository models/m` (a model directory, as Triton users mix up)
// reported models "1" and "2" without versions and nothing about the real mistake.
TEST_F(RepositoryTest, AModelDirectoryGivenAsTheRepositoryIsNamedAsSuch) {
    version("m", 1, "1");
    config("m", "max_batch_size: 4");
    RepositoryOptions o = options(ControlMode::kNone);
    o.paths = {(root / "m").string()};
    Repository repo(o, &registry);
    ASSERT_TRUE(repo.start().is_ok());
    auto index = repo.index(false);
    ASSERT_EQ(index.size(), 1u);
    EXPECT_EQ(index[0].name, "1");
    EXPECT_NE(index[0].reason.find("m looks like a model directory (a config, or version directories holding model files): "
                                   "--model-repository takes"),
              std::string::npos) << index[0].reason;
    // Without a config too: the "model" 1 holds a model file itself.
    fs::remove(root / "m" / "config.pbtxt");
    Repository again(o, &registry);
    ASSERT_TRUE(again.start().is_ok());
    EXPECT_NE(again.index(false).at(0).reason.find("looks like a model directory"), std::string::npos);
    // A real model named 1 without versions gets no such hint.
    fs::remove(root / "m" / "1" / "model.fake");
    Repository plain(o, &registry);
    ASSERT_TRUE(plain.start().is_ok());
    EXPECT_EQ(plain.index(false).at(0).reason.find("looks like"), std::string::npos);
}

// Found by review: a config.pbtxt put beside a --model package (to set instance_group or
// dynamic_batching) was ignored without a word.
TEST_F(RepositoryTest, AConfigBesideAModelPackageIsSaidNotToBeRead) {
    fs::create_directories(root / "pkg");
    std::ofstream(root / "pkg" / "model.fake") << 3;
    std::ofstream(root / "pkg" / "config.pbtxt") << "instance_group [ { count: 4 } ]";
    const std::string log_path = (root / "log.txt").string();
    ASSERT_TRUE(log::add_file_sink(log_path));
    RepositoryOptions o;
    o.packages = {{"p", (root / "pkg").string()}};
    Repository repo(o, &registry);
    const Status started = repo.start();
    log::remove_file_sinks();
    ASSERT_TRUE(started.is_ok()) << started.message();
    EXPECT_TRUE(repo.get("p", "").is_ok());
    std::stringstream text;
    text << std::ifstream(log_path).rdbuf();
    EXPECT_NE(text.str().find("config.pbtxt is not read (a --model package is served with the config filled in from it)"),
              std::string::npos) << text.str();
}

// Found by review: in poll mode a repository model that appeared later under a --model
// package's name was ignored without a word (at start the clash is refused).
TEST_F(RepositoryTest, InPollModeARepositoryModelNamedAsAPackageIsSaidOnce) {
    fs::create_directories(root / "pkg");
    std::ofstream(root / "pkg" / "model.fake") << 3;
    const fs::path repo_dir = root / "repo";
    fs::create_directories(repo_dir);
    RepositoryOptions o;
    o.paths = {repo_dir.string()};
    o.mode = ControlMode::kPoll;
    o.poll_interval = std::chrono::hours(1);  // (the test polls)
    o.packages = {{"p", (root / "pkg").string()}};
    Repository repo(o, &registry);
    ASSERT_TRUE(repo.start().is_ok());
    fs::create_directories(repo_dir / "p" / "1");
    std::ofstream(repo_dir / "p" / "1" / "model.fake") << 9;
    const std::string log_path = (root / "log.txt").string();
    ASSERT_TRUE(log::add_file_sink(log_path));
    repo.poll_once();
    repo.poll_once();
    log::remove_file_sinks();
    std::stringstream text;
    text << std::ifstream(log_path).rdbuf();
    const std::string said = "the repository's 'p' is not loaded (rename one)";
    const size_t at = text.str().find(said);
    ASSERT_NE(at, std::string::npos) << text.str();
    EXPECT_EQ(text.str().find(said, at + 1), std::string::npos) << "said once: " << text.str();
    auto served = repo.get("p", "");
    ASSERT_TRUE(served.is_ok());
    EXPECT_EQ((*served)->dir, (root / "pkg").string());  // the package keeps the name
}

TEST_F(RepositoryTest, ABackendThatThrowsFailsItsLoadNotTheServer) {
    // As a package manifest with a string where a dimension belongs once did (a JSON type error
    // ended `strato serve`).
    version("good", 1, "1");
    version("thrower", 1, "throw");
    Repository repo(options(ControlMode::kExplicit), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    EXPECT_TRUE(repo.load("good").is_ok());
    Status st = repo.load("thrower");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("type must be number, but is string"), std::string::npos) << st.message();
    EXPECT_TRUE(repo.get("good", "").is_ok());
}

TEST_F(RepositoryTest, PollPicksUpNewVersionsAndKeepsServingWhenAReloadFails) {
    version("m", 1, "1");
    Repository repo(options(ControlMode::kPoll), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    version("m", 2, "2");
    repo.poll_once();
    EXPECT_EQ((*repo.get("m", ""))->version, 2);
    // Version 1 left by the default policy (latest 1) is known, not ready: 503 as tritonserver.
    EXPECT_EQ(repo.get("m", "1").status().code(), StatusCode::kUnavailable);
    config("m", "max_batch_size: eight");  // a broken edit
    repo.poll_once();
    ASSERT_TRUE(repo.get("m", "").is_ok());  // the old version keeps serving
    EXPECT_EQ((*repo.get("m", ""))->version, 2);
    // ... and the index says why the reload failed (it said nothing), in words about the reload:
    // the version is READY and serving (as in tritonserver), not failed (found by review).
    for (const auto& e : repo.index(false))
        if (e.name == "m") {
            EXPECT_EQ(e.state, "READY");
            EXPECT_EQ(e.reason.rfind("serving; the last reload failed: ", 0), 0u) << e.reason;
            EXPECT_NE(e.reason.find("max_batch_size"), std::string::npos) << e.reason;
        }
    // A repository that cannot be listed (moved away, an NFS error) is no empty one: nothing is
    // unloaded (everything was, the server still ready with no model).
    fs::rename(root, root.string() + ".moved");
    repo.poll_once();
    fs::rename(root.string() + ".moved", root);
    ASSERT_TRUE(repo.get("m", "").is_ok());
    EXPECT_EQ((*repo.get("m", ""))->version, 2);
    fs::remove_all(root / "m");
    repo.poll_once();
    EXPECT_FALSE(repo.get("m", "").is_ok());
    // A model that never loaded leaves with its directory too; the server is ready again.
    version("good", 1, "1");
    version("bad", 1, "not-a-number");
    repo.poll_once();
    EXPECT_FALSE(repo.ready());
    fs::remove_all(root / "bad");
    repo.poll_once();
    EXPECT_TRUE(repo.ready());
    for (const auto& e : repo.index(false)) EXPECT_NE(e.name, "bad");
}

// `ln -sfn <release> m/1`, the atomic deploy, went unnoticed when the new release's files had
// the old one's times and sizes (copies with normalised mtimes): the poll saw nothing change.
TEST_F(RepositoryTest, PollReloadsAVersionWhoseSymlinkPointsElsewhere) {
    for (const char* rel : {"a", "b"}) {
        fs::create_directories(root / "releases" / rel);
        std::ofstream(root / "releases" / rel / "model.fake") << (rel[0] == 'a' ? "1" : "2");
    }
    const auto t = fs::last_write_time(root / "releases" / "a" / "model.fake");
    for (const char* rel : {"a", "b"}) {
        fs::last_write_time(root / "releases" / rel / "model.fake", t);
        fs::last_write_time(root / "releases" / rel, t);
    }
    fs::create_directories(root / "repo" / "m");
    fs::create_directory_symlink(root / "releases" / "a", root / "repo" / "m" / "1");
    auto opt = options(ControlMode::kPoll);
    opt.paths = {(root / "repo").string()};
    Repository repo(opt, &registry);
    ASSERT_TRUE(repo.start().is_ok());
    auto value = [&] {
        auto mv = repo.get("m", "");
        if (!mv) return -1.0f;
        std::vector<Tensor> out;
        EXPECT_TRUE((*mv)->instances[0]->execute({Tensor{"x", DataType::kFp32, {1, 1}, std::string(4, '\0')}}, &out).is_ok());
        return reinterpret_cast<const float*>(out.at(0).data.data())[0];
    };
    EXPECT_EQ(value(), 1.0f);
    fs::create_directory_symlink(root / "releases" / "b", root / "repo" / "m" / "1.new");
    fs::rename(root / "repo" / "m" / "1.new", root / "repo" / "m" / "1");
    repo.poll_once();
    EXPECT_EQ(value(), 2.0f);
}

// Records every batch it runs (input x as floats); fails on a batch whose first value is 13.
class Recorder : public Model {
public:
    static std::vector<std::vector<float>>& seen() {
        static std::vector<std::vector<float>> s;
        return s;
    }
    Status execute(const std::vector<Tensor>& in, std::vector<Tensor>* out) override {
        const auto* f = reinterpret_cast<const float*>(in[0].data.data());
        seen().emplace_back(f, f + in[0].data.size() / 4);
        if (!seen().back().empty() && seen().back()[0] == 13.0f) return invalid_argument("unlucky input");
        out->push_back({"y", DataType::kFp32, {in[0].shape[0], 1}, std::string(static_cast<size_t>(in[0].shape[0]) * 4, '\0')});
        return Status::ok();
    }
};

// model_warmup (Triton's config field): each sample runs `count` times on the model before it is
// served, with the data asked for — zeros, random numbers, one sample from a file in warmup/
// repeated per row; a failing warm-up fails the load, naming the sample.
TEST_F(RepositoryTest, ModelWarmupRunsBeforeTheModelIsServed) {
    register_backend({"recorder", {"recorder_platform"}, "model.rec", nullptr,
                      [](const ModelConfig&, const std::string&, Device) -> Result<std::shared_ptr<Model>> {
                          return std::shared_ptr<Model>(std::make_shared<Recorder>());
                      }});
    auto model = [&](const std::string& name, const std::vector<float>& file) {
        fs::create_directories(root / name / "1");
        std::ofstream(root / name / "1" / "model.rec") << "";
        fs::create_directories(root / name / "warmup");
        std::ofstream(root / name / "warmup" / "x.raw", std::ios::binary)
            .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size() * 4));
        config(name, R"(backend: "recorder"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
model_warmup [
  { name: "zeros" batch_size: 4 count: 2 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } },
  { name: "random" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 2 ] random_data: true } } },
  { name: "file" batch_size: 3 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 2 ] input_data_file: "x.raw" } } }
])");
    };
    model("w", {0.25f, 0.75f});
    model("unlucky", {13.0f, 1.0f});
    model("short", {1.0f});
    Recorder::seen().clear();
    Repository repo(options(ControlMode::kExplicit), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    ASSERT_TRUE(repo.load("w").is_ok());
    ASSERT_TRUE(repo.get("w", "").is_ok());
    const auto seen = Recorder::seen();
    ASSERT_EQ(seen.size(), 4u);
    EXPECT_EQ(seen[0], std::vector<float>(8, 0.0f));
    EXPECT_EQ(seen[1], std::vector<float>(8, 0.0f));
    ASSERT_EQ(seen[2].size(), 2u);
    for (float v : seen[2]) EXPECT_TRUE(v >= 0.0f && v < 1.0f) << v;
    EXPECT_NE(seen[2], std::vector<float>(2, 0.0f));
    EXPECT_EQ(seen[3], (std::vector<float>{0.25f, 0.75f, 0.25f, 0.75f, 0.25f, 0.75f}));
    auto unlucky = repo.load("unlucky");
    ASSERT_FALSE(unlucky.is_ok());
    EXPECT_EQ(unlucky.code(), StatusCode::kInvalidArgument);  // every failed load, as Triton
    EXPECT_NE(unlucky.message().find("model_warmup 'file'"), std::string::npos) << unlucky.message();
    EXPECT_NE(unlucky.message().find("unlucky input"), std::string::npos) << unlucky.message();
    EXPECT_FALSE(repo.get("unlucky", "").is_ok());
    auto short_file = repo.load("short");
    ASSERT_FALSE(short_file.is_ok());
    EXPECT_NE(short_file.message().find("x.raw: 4 bytes; one sample of [2] FP32 is 8 bytes"), std::string::npos)
        << short_file.message();
}

// A warm-up sample that leaves out an optional input hands the backend its inputs in config order
// with an empty tensor in that place, as a request that leaves it out does (a backend that maps
// inputs by position would otherwise feed the next input to the wrong argument).
class InputNames : public Model {
public:
    static std::vector<std::vector<std::string>>& seen() {
        static std::vector<std::vector<std::string>> s;
        return s;
    }
    Status execute(const std::vector<Tensor>& in, std::vector<Tensor>* out) override {
        std::vector<std::string> names;
        for (const auto& t : in) names.push_back(t.shape.empty() ? "(left out)" : t.name);
        seen().push_back(names);
        out->push_back({"y", DataType::kFp32, {1, 1}, std::string(4, '\0')});
        return Status::ok();
    }
};

TEST_F(RepositoryTest, ModelWarmupKeepsConfigOrderWhenAnOptionalInputIsLeftOut) {
    register_backend({"names", {"names_platform"}, "model.names", nullptr,
                      [](const ModelConfig&, const std::string&, Device) -> Result<std::shared_ptr<Model>> {
                          return std::shared_ptr<Model>(std::make_shared<InputNames>());
                      }});
    fs::create_directories(root / "opt" / "1");
    std::ofstream(root / "opt" / "1" / "model.names") << "";
    config("opt", R"(backend: "names"
max_batch_size: 8
input [ { name: "mask" data_type: TYPE_FP32 dims: [ 2 ] optional: true }, { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
model_warmup [ { name: "x only" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ])");
    InputNames::seen().clear();
    Repository repo(options(ControlMode::kExplicit), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    auto st = repo.load("opt");
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(InputNames::seen().size(), 1u);
    EXPECT_EQ(InputNames::seen()[0], (std::vector<std::string>{"(left out)", "x"}));
}

TEST_F(RepositoryTest, ExplicitModeLoadsAndUnloadsOnRequest) {
    version("a", 1, "1");
    version("b", 1, "2");
    auto opt = options(ControlMode::kExplicit);
    opt.startup_models = {"a"};
    Repository repo(opt, &registry);
    ASSERT_TRUE(repo.start().is_ok());
    EXPECT_TRUE(repo.get("a", "").is_ok());
    EXPECT_FALSE(repo.get("b", "").is_ok());
    ASSERT_TRUE(repo.load("b").is_ok());
    EXPECT_TRUE(repo.get("b", "").is_ok());
    ASSERT_TRUE(repo.unload("a").is_ok());
    EXPECT_FALSE(repo.get("a", "").is_ok());
    EXPECT_TRUE(repo.ready());  // unloading on purpose does not make the server unready
    EXPECT_EQ(repo.load("../etc").code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(repo.load("missing").code(), StatusCode::kInvalidArgument);
    nlohmann::json cfg = {{"max_batch_size", 2}};
    ASSERT_TRUE(repo.load("b", cfg).is_ok());
    EXPECT_EQ((*repo.get("b", ""))->config.max_batch_size, 2);
}

// During a model's first load, after its unload and after a failed load, a request without a
// version got 400 "is not found" or 404 "has no available versions" depending on timing;
// tritonserver answers 404 "has no available versions" in all three (found by review).
TEST_F(RepositoryTest, AKnownModelWithoutAReadyVersionIsA404InEveryState) {
    static std::mutex mu;
    static std::condition_variable cv;
    static bool release = false;
    static bool entered = false;
    register_backend({"gate", {"gate_platform"}, "model.gate",
                      [](ModelConfig* c, const std::string&) {
                          if (c->inputs.empty()) c->inputs.push_back({"x", DataType::kFp32, {1}, false, ""});
                          if (c->outputs.empty()) c->outputs.push_back({"y", DataType::kFp32, {1}, false, ""});
                          return Status::ok();
                      },
                      [](const ModelConfig&, const std::string&, Device) -> Result<std::shared_ptr<Model>> {
                          std::unique_lock lock(mu);
                          entered = true;
                          cv.notify_all();
                          cv.wait(lock, [] { return release; });
                          return std::shared_ptr<Model>(std::make_shared<Echo>(1));
                      }});
    fs::create_directories(root / "g" / "1");
    std::ofstream(root / "g" / "1" / "model.gate") << "";
    version("bad", 1, "not-a-number");
    Repository repo(options(ControlMode::kExplicit), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    EXPECT_EQ(repo.get("g", "").status().code(), StatusCode::kInvalidArgument);  // never loaded: unknown
    std::thread loader([&] { EXPECT_TRUE(repo.load("g").is_ok()); });
    {
        std::unique_lock lock(mu);
        cv.wait(lock, [] { return entered; });
    }
    auto loading = repo.get("g", "");
    EXPECT_EQ(loading.status().code(), StatusCode::kNotFound) << loading.status().message();
    // A named version of a loading model: 503, try again (tritonserver: "is not at ready state").
    auto loading1 = repo.get("g", "1");
    EXPECT_EQ(loading1.status().code(), StatusCode::kUnavailable) << loading1.status().message();
    EXPECT_NE(loading1.status().message().find("'g' version 1 is not at ready state (loading)"), std::string::npos)
        << loading1.status().message();
    EXPECT_NE(loading.status().message().find("'g' has no available versions (loading)"), std::string::npos)
        << loading.status().message();
    {
        std::lock_guard lock(mu);
        release = true;
    }
    cv.notify_all();
    loader.join();
    EXPECT_TRUE(repo.get("g", "").is_ok());
    ASSERT_TRUE(repo.unload("g").is_ok());
    auto unloaded = repo.get("g", "");
    EXPECT_EQ(unloaded.status().code(), StatusCode::kNotFound);
    EXPECT_NE(unloaded.status().message().find("'g' has no available versions (unloaded)"), std::string::npos)
        << unloaded.status().message();
    // The version it served is 503 after the unload (tritonserver keeps it, UNAVAILABLE); one it
    // never had stays 404 (was 404 "is not at ready state" for both: found by review).
    auto unloaded1 = repo.get("g", "1");
    EXPECT_EQ(unloaded1.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(unloaded1.status().message().find("'g' version 1 is not at ready state (unloaded)"), std::string::npos)
        << unloaded1.status().message();
    auto never = repo.get("g", "2");
    EXPECT_EQ(never.status().code(), StatusCode::kNotFound);
    EXPECT_NE(never.status().message().find("'g' version 2 is not found"), std::string::npos) << never.status().message();
    EXPECT_FALSE(repo.load("bad").is_ok());
    EXPECT_EQ(repo.get("bad", "").status().code(), StatusCode::kNotFound);
}

// tritonserver --load-model with a typo came up ready without the model (found by review).
TEST_F(RepositoryTest, AStartupModelThatIsNotInTheRepositoryStopsTheStart) {
    version("a", 1, "1");
    auto opt = options(ControlMode::kExplicit);
    opt.startup_models = {"a", "nope"};
    Repository repo(opt, &registry);
    Status st = repo.start();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("--load-model nope: failed to load 'nope': no model directory 'nope'"), std::string::npos)
        << st.message();
}

TEST_F(RepositoryTest, AModelInTwoRepositoriesIsNotUnique) {
    version("m", 1, "1");
    const fs::path other = root / "other";
    fs::create_directories(other / "m" / "1");
    std::ofstream(other / "m" / "1" / "model.fake") << "2";
    auto opt = options(ControlMode::kExplicit);
    opt.paths.push_back(other.string());
    Repository repo(opt, &registry);
    ASSERT_TRUE(repo.start().is_ok());
    Status st = repo.load("m");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("the model is not unique across the model repositories"), std::string::npos)
        << st.message();
}

// Found by review: a model in two repositories failed to load without an entry, so the server said
// it was ready; in poll mode a copy that appeared later went unnoticed; one directory given twice
// made every model "not unique".
TEST_F(RepositoryTest, ANameInTwoRepositoriesKeepsTheServerUnreadyAndPollNoticesCopies) {
    version("m", 1, "1");
    const fs::path other = root.string() + "-other";
    fs::create_directories(other);
    auto opt = options(ControlMode::kPoll);
    opt.paths.push_back(other.string());
    {
        Repository repo(opt, &registry);
        ASSERT_TRUE(repo.start().is_ok());
        EXPECT_TRUE(repo.ready());
        fs::create_directories(other / "m" / "1");
        std::ofstream(other / "m" / "1" / "model.fake") << "2";
        repo.poll_once();
        ASSERT_TRUE(repo.get("m", "").is_ok());  // serving as after a failed reload ...
        bool said = false;
        for (const auto& e : repo.index(false))
            if (e.name == "m") said = e.reason.find("not unique across the model repositories") != std::string::npos;
        EXPECT_TRUE(said);  // ... and the index says why
        fs::remove_all(root / "m");
        repo.poll_once();
        ASSERT_TRUE(repo.get("m", "").is_ok());
        for (const auto& e : repo.index(false))
            if (e.name == "m") EXPECT_EQ(e.reason, "");
        version("m", 1, "1");  // two copies again, at a start this time
    }
    Repository repo(opt, &registry);
    ASSERT_TRUE(repo.start().is_ok());
    EXPECT_FALSE(repo.ready());
    bool listed = false;
    for (const auto& e : repo.index(false))
        if (e.name == "m") {
            listed = true;
            EXPECT_EQ(e.state, "UNAVAILABLE");
            EXPECT_NE(e.reason.find("not unique"), std::string::npos) << e.reason;
        }
    EXPECT_TRUE(listed);
    fs::remove_all(other / "m");
    repo.poll_once();  // one copy left: it loads
    EXPECT_TRUE(repo.get("m", "").is_ok());
    EXPECT_TRUE(repo.ready());
    fs::remove_all(other);

    // A --model package whose name a repository takes later is left as it is (found by the review
    // of the change: it was reloaded at every poll).
    const fs::path pkg = root.string() + "-pkg";
    fs::create_directories(pkg);
    std::ofstream(pkg / "model.fake") << "5";
    auto with_pkg = options(ControlMode::kPoll);
    with_pkg.packages = {{"p", pkg.string()}};
    {
        Repository prepo(with_pkg, &registry);
        ASSERT_TRUE(prepo.start().is_ok());
        auto before = prepo.get("p", "");
        ASSERT_TRUE(before.is_ok());
        version("p", 1, "1");
        prepo.poll_once();
        prepo.poll_once();
        ASSERT_TRUE(prepo.get("p", "").is_ok());
        EXPECT_EQ(prepo.get("p", "")->get(), before->get());
    }
    fs::remove_all(pkg);
    fs::remove_all(root / "p");

    auto twice = options(ControlMode::kNone);
    twice.paths.push_back(root.string() + "/");
    Status st = Repository(twice, &registry).start();
    EXPECT_NE(st.message().find("are the same directory"), std::string::npos) << st.message();
    auto star = options(ControlMode::kExplicit);
    star.startup_models = {"*", "typo"};
    st = Repository(star, &registry).start();
    EXPECT_NE(st.message().find("cannot be given with other --load-model names"), std::string::npos) << st.message();
}

// Found by review (checked against tritonserver's version selection): a specific policy naming a
// version without a directory loads the others; in poll mode a model whose version directories
// are all removed is unloaded (a failed reload kept it serving); a config that is a dangling link,
// or two config files, are errors rather than silently ignored.
TEST_F(RepositoryTest, VersionsFollowTheDirectoriesAndConfigFilesAreNotSkippedSilently) {
    version("spec", 1, "1");
    config("spec", "version_policy: { specific: { versions: [1, 3] } }");
    version("gone", 1, "1");
    version("both", 1, "1");
    config("both", "max_batch_size: 2");
    std::ofstream(root / "both" / "config.toml") << "max_batch_size = 4\n";
    version("dangling", 1, "1");
    fs::create_symlink(root / "nowhere.pbtxt", root / "dangling" / "config.pbtxt");
    Repository repo(options(ControlMode::kPoll), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    ASSERT_TRUE(repo.get("spec", "").is_ok());
    EXPECT_EQ((*repo.get("spec", ""))->version, 1);
    std::map<std::string, std::string> reasons;
    for (const auto& e : repo.index(false)) reasons[e.name] = e.reason;
    EXPECT_NE(reasons["both"].find("both"), std::string::npos) << reasons["both"];
    EXPECT_NE(reasons["both"].find("keep one"), std::string::npos) << reasons["both"];
    EXPECT_NE(reasons["dangling"].find("dangling/config.pbtxt does not exist"), std::string::npos) << reasons["dangling"];
    EXPECT_FALSE(repo.get("both", "").is_ok());
    EXPECT_FALSE(repo.get("dangling", "").is_ok());
    ASSERT_TRUE(repo.get("gone", "").is_ok());
    fs::remove_all(root / "gone" / "1");
    repo.poll_once();
    EXPECT_FALSE(repo.get("gone", "").is_ok());
    for (const auto& e : repo.index(false))
        if (e.name == "gone") EXPECT_NE(e.reason.find("no version directories"), std::string::npos) << e.reason;
    version("gone", 2, "2");
    repo.poll_once();
    ASSERT_TRUE(repo.get("gone", "").is_ok());
    EXPECT_EQ((*repo.get("gone", ""))->version, 2);
}

// SIGTERM while a long model_warmup ran was ignored until every model had loaded.
TEST_F(RepositoryTest, AnInterruptStopsTheStartupLoads) {
    version("a", 1, "1");
    version("b", 1, "2");
    auto opt = options(ControlMode::kNone);
    int asked = 0;
    opt.interrupted = [&] { return ++asked > 1; };  // after the first model
    Repository repo(opt, &registry);
    Status st = repo.start();
    EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.message();
    EXPECT_EQ(asked, 2);
}

TEST_F(RepositoryTest, LoadAndUnloadAreRefusedOutsideExplicitMode) {
    version("a", 1, "1");
    Repository repo(options(ControlMode::kNone), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    EXPECT_EQ(repo.load("a").code(), StatusCode::kUnavailable);
    EXPECT_EQ(repo.unload("a").code(), StatusCode::kUnavailable);
}

TEST(ModelName, RejectsPathsAndControlCharacters) {
    EXPECT_TRUE(valid_model_name("resnet-18_v2.onnx"));
    for (const char* bad : {"", "..", ".hidden", "a/b", "a\\b", "x\ny"}) EXPECT_FALSE(valid_model_name(bad)) << bad;
}

// ---- instance placement (Triton's instance_group kinds) ----

ModelConfig with_groups(std::vector<InstanceGroup> groups) {
    ModelConfig c;
    c.name = "m";
    c.backend = "fake";
    c.instance_group = std::move(groups);
    return c;
}

TEST(PlaceInstances, NoGroupIsOneInstancePerGpuOrOneOnTheCpu) {
    ModelConfig c = with_groups({});
    auto d = place_instances(&c, /*backend_gpu=*/true, /*gpus_visible=*/0);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(*d, (std::vector<Device>{{}}));
    ASSERT_EQ(c.instance_group.size(), 1u);
    EXPECT_EQ(c.instance_group[0].kind, "KIND_CPU");

    c = with_groups({});
    d = place_instances(&c, true, 2);
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(*d, (std::vector<Device>{{0}, {1}}));
    EXPECT_EQ(c.instance_group[0].kind, "KIND_GPU");
    EXPECT_EQ(c.instance_group[0].gpus, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(c.instance_count(), 2);

    c = with_groups({});  // a CPU-only backend stays on the CPU even where there are GPUs
    d = place_instances(&c, false, 2);
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(*d, (std::vector<Device>{{}}));
}

TEST(PlaceInstances, CountIsPerListedGpuAndGroupsAddUp) {
    ModelConfig c = with_groups({{.count = 2, .kind = "KIND_GPU", .gpus = {1}},
                                 {.count = 1, .kind = "KIND_CPU"},
                                 {.count = 1, .kind = "KIND_GPU", .gpus = {0, 1}}});
    auto d = place_instances(&c, true, 2);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(*d, (std::vector<Device>{{1}, {1}, {}, {0}, {1}}));
    EXPECT_EQ(c.instance_count(), 5);
    EXPECT_EQ(Device{1}.name(), "cuda:1");
    EXPECT_EQ(Device{}.name(), "cpu");
}

TEST(PlaceInstances, ImpossiblePlacementsAreClearErrors) {
    auto fails = [](std::vector<InstanceGroup> g, bool backend_gpu, int visible, StatusCode code, const std::string& text) {
        ModelConfig c = with_groups(std::move(g));
        auto d = place_instances(&c, backend_gpu, visible);
        ASSERT_FALSE(d.is_ok());
        EXPECT_EQ(d.status().code(), code) << d.status().message();
        EXPECT_NE(d.status().message().find(text), std::string::npos) << d.status().message();
    };
    fails({{.kind = "KIND_GPU"}}, true, 0, StatusCode::kUnavailable, "no CUDA GPU is visible");
    fails({{.kind = "KIND_GPU"}}, false, 1, StatusCode::kUnimplemented, "the fake backend runs on the CPU only");
    fails({{.kind = "KIND_GPU", .gpus = {2}}}, true, 2, StatusCode::kInvalidArgument, "GPU 2 does not exist (strato sees 2 GPUs: 0..1)");
    fails({{.name = "g", .kind = "KIND_CPU", .gpus = {0}}}, true, 1, StatusCode::kInvalidArgument,
          "instance_group 0 ('g'): 'gpus' 0 is for kind KIND_GPU, not KIND_CPU");
}

// A backend that runs on (pretend) GPUs: its load records the device, so the repository's copies
// per device can be seen without a GPU.
TEST_F(RepositoryTest, GpuInstancesGetACopyPerDeviceAndConfigShowsWhere) {
    register_backend({"fakegpu", {"fakegpu_platform"}, "model.fakegpu",
                      [](ModelConfig* c, const std::string&) {
                          c->inputs = {{"x", DataType::kFp32, {1}, false, ""}};
                          c->outputs = {{"y", DataType::kFp32, {1}, false, ""}};
                          c->max_batch_size = 8;
                          return Status::ok();
                      },
                      [](const ModelConfig&, const std::string&, Device d) -> Result<std::shared_ptr<Model>> {
                          return std::shared_ptr<Model>(std::make_shared<Echo>(static_cast<float>(d.gpu)));
                      },
                      /*gpu=*/true});
    set_gpu_probe([] { return 2; });
    fs::create_directories(root / "g" / "1");
    std::ofstream(root / "g" / "1" / "model.fakegpu") << "";
    config("g", "backend: \"fakegpu\"\ninstance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]");
    version("c", 1, "5");  // the CPU-only fake backend: KIND_AUTO stays on the CPU
    Repository repo(options(ControlMode::kNone), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    set_gpu_probe(nullptr);
    auto g = repo.get("g", "");
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ((*g)->instances.size(), 4u);
    ASSERT_EQ((*g)->copies.size(), 2u);
    EXPECT_TRUE((*g)->copies.count(Device{0}) && (*g)->copies.count(Device{1}));
    EXPECT_EQ((*g)->instances[0], (*g)->instances[1]);  // two instances on cuda:0 share its copy
    EXPECT_NE((*g)->instances[0], (*g)->instances[2]);
    auto j = model_config_to_json((*g)->config);
    EXPECT_EQ(j["instance_group"][0]["kind"], "KIND_GPU");
    EXPECT_EQ(j["instance_group"][0]["gpus"], nlohmann::json::array({0, 1}));
    EXPECT_EQ(j["instance_group"][0]["count"], 2);
    auto c = repo.get("c", "");
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ((*c)->copies.size(), 1u);
    EXPECT_TRUE((*c)->copies.count(Device{}));
    EXPECT_EQ(model_config_to_json((*c)->config)["instance_group"][0]["kind"], "KIND_CPU");
}

TEST_F(RepositoryTest, KindGpuWithoutAGpuLeavesTheModelUnavailableWithTheReason) {
    version("m", 1, "1");
    config("m", "instance_group [ { kind: KIND_GPU } ]");
    Repository repo(options(ControlMode::kNone), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    EXPECT_FALSE(repo.get("m", "").is_ok());
    for (const auto& e : repo.index(false)) {
        if (e.name == "m") {
            EXPECT_NE(e.reason.find("runs on the CPU only"), std::string::npos) << e.reason;
        }
    }
}

}  // namespace
}  // namespace strato::serve
