// Search spaces, samplers and the study store; the executor is tested end to end
// (tests/e2e/tune_e2e.py) with real trial processes.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "strato/tune/sampler.h"
#include "strato/tune/space.h"
#include "strato/tune/store.h"

namespace strato::tune {
namespace {

const char* kStudy = R"(
[study]
name = "t"
base = "configs/fashion_mnist_mlp.toml"
trials = 30
sampler = "tpe"
[params]
"optim.lr" = { type = "loguniform", low = 1e-4, high = 1e-1 }
"model.width" = { type = "int", low = 32, high = 512, q = 32 }
"optim.name" = { type = "choice", values = ["adamw", "sgd"] }
"optim.momentum" = { type = "uniform", low = 0.5, high = 0.99, when = "optim.name == sgd" }
)";

StudyConfig study(const std::string& text = kStudy) {
    auto s = StudyConfig::parse(text, "study.toml", STRATO_SOURCE_DIR);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    return s.is_ok() ? *s : StudyConfig{};
}

TEST(Space, ParsesAndValidatesAgainstTheTrainConfig) {
    StudyConfig s = study();
    ASSERT_EQ(s.params.size(), 4u);
    EXPECT_EQ(s.milestones(), (std::vector<int>{1, 3, 9}));
    EXPECT_TRUE(validate_against_train_config(s).is_ok()) << validate_against_train_config(s).message();
    const std::pair<const char*, const char*> bad[] = {
        {"\"optim.lr\" = { type = \"uniform\", low = 1, high = 0.1 }", "low 1 must be below high 0.1"},
        {"\"optim.lr\" = { type = \"gaussian\", low = 0, high = 1 }", "unknown distribution 'gaussian'"},
        {"\"optim.name\" = { type = \"choice\", values = [] }", "non-empty values"},
        {"\"optim.lr\" = { type = \"loguniform\", low = 0, high = 1 }", "loguniform needs low > 0"},
        {"\"optim.lr\" = { type = \"uniform\", low = 0, hgh = 1 }", "unknown key 'hgh'"},
        {"\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1, when = \"model.width == 3\" }", "not a choice"},
    };
    for (const auto& [param, needle] : bad) {
        auto r = StudyConfig::parse(std::string("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n") + param,
                                    "study.toml", STRATO_SOURCE_DIR);
        ASSERT_FALSE(r.is_ok()) << param;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    }
    // A parameter the train config does not have fails before any trial.
    StudyConfig typo = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                             "\"optim.learning_rate\" = { type = \"uniform\", low = 0.1, high = 1 }\n");
    Status v = validate_against_train_config(typo);
    ASSERT_FALSE(v.is_ok());
    EXPECT_NE(v.message().find("optim.learning_rate"), std::string::npos) << v.message();
    EXPECT_FALSE(StudyConfig::parse("[study]\nbase = \"x.toml\"\n", "s.toml", ".").is_ok());  // no params
    EXPECT_FALSE(StudyConfig::parse("[study]\nbase = \"x.toml\"\nsampler = \"bayes\"\n[params]\n\"a.b\" = { type = "
                                    "\"uniform\", low = 0, high = 1 }\n",
                                    "s.toml", ".")
                     .is_ok());
}

TEST(Sampler, RandomIsSeededInRangeAndConditional) {
    StudyConfig s = study();
    s.sampler = "random";
    std::mt19937_64 a(7), b(7);
    for (int i = 0; i < 50; ++i) {
        Assignment x = sample(s, i, {}, a), y = sample(s, i, {}, b);
        EXPECT_EQ(x, y);
        double lr = std::stod(x["optim.lr"]);
        EXPECT_GE(lr, 1e-4);
        EXPECT_LE(lr, 1e-1);
        int w = std::stoi(x["model.width"]);
        EXPECT_EQ(w % 32, 0);
        EXPECT_EQ(x.count("optim.momentum"), x["optim.name"] == "\"sgd\"" ? 1u : 0u);
    }
}

TEST(Sampler, GridEnumeratesTheProduct) {
    StudyConfig s = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nsampler = \"grid\"\n[params]\n"
                          "\"data.batch_size\" = { type = \"grid\", values = [32, 64, 128] }\n"
                          "\"optim.name\" = { type = \"grid\", values = [\"adamw\", \"sgd\"] }\n");
    EXPECT_EQ(grid_size(s), 6);
    std::set<Assignment> seen;
    std::mt19937_64 rng(1);
    for (int i = 0; i < 6; ++i) seen.insert(sample(s, i, {}, rng));
    EXPECT_EQ(seen.size(), 6u);
}

TEST(Sampler, TpeConcentratesWhereTheObjectiveIsGood) {
    // Objective: -(log10(lr) + 2)^2, best at lr = 1e-2. After 10 random trials, TPE's proposals
    // must land nearer 1e-2 than random ones do (over 5 seeds: 0.58x the squared error here).
    StudyConfig s = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                          "\"optim.lr\" = { type = \"loguniform\", low = 1e-5, high = 1 }\n");
    auto objective = [](const Assignment& a) { return -std::pow(std::log10(std::stod(a.at("optim.lr"))) + 2, 2); };
    double tpe_err = 0, random_err = 0;
    for (uint64_t seed = 1; seed <= 5; ++seed) {
        for (const char* sampler : {"tpe", "random"}) {
            s.sampler = sampler;
            std::vector<Observation> history;
            double err = 0;
            for (int i = 0; i < 40; ++i) {
                std::mt19937_64 rng(seed * 1000 + i);
                Assignment a = sample(s, i, history, rng);
                history.push_back({a, objective(a)});
                if (i >= 20) err += -objective(a);
            }
            (std::string(sampler) == "tpe" ? tpe_err : random_err) += err;
        }
    }
    EXPECT_LT(tpe_err, 0.75 * random_err) << tpe_err << " vs " << random_err;
}

TEST(Store, TrialsResultsRungsAndFingerprint) {
    std::string dir = testing::TempDir() + "/tune_store";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
        auto st = Store::open(dir + "/study.db");
        ASSERT_TRUE(st.is_ok()) << st.status().message();
        ASSERT_TRUE((*st)->bind_study("A").is_ok());
        int id = *(*st)->add_trial({{"optim.lr", "0.01"}}, 1);
        ASSERT_TRUE((*st)->add_result(id, 1, 0.80, true).is_ok());
        ASSERT_TRUE((*st)->add_result(id, 1, 0.10, true).is_ok());  // the same epoch again: ignored
        ASSERT_TRUE((*st)->add_result(id, 2, 0.85, true).is_ok());
        ASSERT_TRUE((*st)->add_rung(0, id, 0.80).is_ok());
        ASSERT_TRUE((*st)->set_state(id, TrialState::kPaused).is_ok());
        ASSERT_TRUE((*st)->promote(0, id, 3).is_ok());
    }
    auto st = Store::open(dir + "/study.db");
    ASSERT_TRUE(st.is_ok());
    EXPECT_FALSE((*st)->bind_study("B").is_ok());
    EXPECT_TRUE((*st)->bind_study("A").is_ok());
    auto trials = *(*st)->trials();
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].params.at("optim.lr"), "0.01");
    EXPECT_EQ(trials[0].state, TrialState::kRunning);
    EXPECT_EQ(trials[0].target, 3);
    EXPECT_DOUBLE_EQ(*trials[0].best, 0.85);
    EXPECT_EQ(trials[0].epochs, 2);
    EXPECT_EQ((*st)->results(trials[0].id)->size(), 2u);
    EXPECT_TRUE((*(*st)->rung(0))[0].promoted);
}

}  // namespace
}  // namespace strato::tune
