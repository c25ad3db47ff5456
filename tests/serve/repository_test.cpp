#include "strato/serve/repository/repository.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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
                      [](const ModelConfig&, const std::string& dir) -> Result<std::shared_ptr<Model>> {
                          std::ifstream f(fs::path(dir) / "model.fake");
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
    fs::create_directories(root / "m" / "07");  // names starting with 0 are not versions
    config("m", "version_policy: { latest: { num_versions: 2 } }");
    Repository repo(options(ControlMode::kNone), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    auto latest = repo.get("m", "");
    ASSERT_TRUE(latest.is_ok()) << latest.status().message();
    EXPECT_EQ((*latest)->version, 3);
    EXPECT_TRUE(repo.get("m", "2").is_ok());
    EXPECT_EQ(repo.get("m", "1").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(repo.get("other", "").status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ((*latest)->config.platform, "fake_platform");  // filled in from the backend
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

TEST_F(RepositoryTest, PollPicksUpNewVersionsAndKeepsServingWhenAReloadFails) {
    version("m", 1, "1");
    Repository repo(options(ControlMode::kPoll), &registry);
    ASSERT_TRUE(repo.start().is_ok());
    version("m", 2, "2");
    repo.poll_once();
    EXPECT_EQ((*repo.get("m", ""))->version, 2);
    config("m", "max_batch_size: eight");  // a broken edit
    repo.poll_once();
    ASSERT_TRUE(repo.get("m", "").is_ok());  // the old version keeps serving
    EXPECT_EQ((*repo.get("m", ""))->version, 2);
    fs::remove_all(root / "m");
    repo.poll_once();
    EXPECT_FALSE(repo.get("m", "").is_ok());
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

}  // namespace
}  // namespace strato::serve
