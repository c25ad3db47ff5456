// Search spaces, samplers, the study store, and the executor with a stand-in trainer
// (fake_train.py: the same command line, files and signal behaviour as `strato train`, in
// milliseconds). tests/e2e/tune_e2e.py runs real studies with the real trainer.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "strato/core/cgroup.h"
#include "strato/core/fs.h"
#include "strato/core/signals.h"
#include "strato/core/toml_guard.h"

#include "strato/tune/sampler.h"
#include "strato/tune/space.h"
#include "strato/tune/store.h"
#include "strato/tune/study.h"

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
        {"\"model.width\" = { type = \"int\", low = 64, high = 64 }",
         "low and high are both 64: nothing to tune\nhint: a fixed value goes in the study's set = [\"model.width=64\"]"},
        {"\"optim.name\" = { type = \"choice\", values = [] }", "non-empty values"},
        {"\"optim.lr\" = { type = \"loguniform\", low = 0, high = 1 }", "loguniform needs low > 0"},
        {"\"optim.lr\" = { type = \"uniform\", low = 0, hgh = 1 }", "unknown key 'hgh'"},
        {"\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1, when = \"model.width == 3\" }", "not a choice"},
        {"\"optim.lr\" = { type = \"uniform\", low = 0.1, high = inf }", "must be finite numbers"},
        {"\"model.width\" = { type = \"int\", low = 32.5, high = 64 }", "whole-number low and high"},
        {"\"optim.name\" = { type = \"choice\", values = [\"sgd\"], when = \"optim.name == sgd\" }", "the parameter itself"},
        // Found by review: these were accepted and then ignored or never sampled.
        {"\"optim.name\" = { type = \"choice\", values = [\"adamw\", \"sgd\"] }\n"
         "\"optim.momentum\" = { type = \"uniform\", low = 0.5, high = 0.9, when = \"optim.name == SGD\" }",
         "which is not one of its values"},
        {"\"train.epochs\" = { type = \"int\", low = 3, high = 4 }", "the executor sets it"},
        {"\"run.dir\" = { type = \"choice\", values = [\"a\", \"b\"] }", "the executor sets it"},
        {"\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1, q = \"x\" }", "q must be a number"},
        {"\"optim.lr\" = { type = \"loguniform\", low = 0.1, high = 1, q = 0.1 }", "not loguniform"},
        {"\"model.width\" = { type = \"int\", low = 16, high = 20, q = 16 }", "q 16 is larger than high - low (4)"},
        {"\"optim.name\" = { type = \"choice\", values = [\"sgd\"], when = 5 }", "when must be a string"},
        {"\"optim.name\" = { type = \"choice\", values = [\"a\", \"b\"], when = \"model.norm == x\" }\n"
         "\"model.norm\" = { type = \"choice\", values = [\"x\", \"y\"], when = \"optim.name == a\" }",
         "go round in a loop"},
    };
    for (const auto& [param, needle] : bad) {
        auto r = StudyConfig::parse(std::string("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n") + param,
                                    "study.toml", STRATO_SOURCE_DIR);
        ASSERT_FALSE(r.is_ok()) << param;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    }
    // Integer settings: the wrong type is an error, not the default; a value an int cannot hold
    // is refused, not wrapped (4294967297 trials used to run 1).
    const std::pair<const char*, const char*> bad_settings[] = {
        {"trials = \"20\"", "study.toml [study]: trials must be an integer"},
        {"trials = 4294967297", "study.toml [study]: trials = 4294967297 is out of range"},
        {"parallel = 1.5", "parallel must be an integer"},
        // Another type is an error, not the default (found by review: each ran with the default).
        {"set = \"model.width=abc\"", "set must be an array of \"key=value\" strings"},
        {"set = [1, 2]", "set must be an array"},
        {"set = [\"train.epochs=40\"]", "the executor sets train.epochs"},
        {"name = 5", "name must be a string"},
        {"name = \"a b\\ntouch /tmp/x #\"", "name must be 1 to 100 letters, digits"},
        {"name = \"../../escaped\"", "not starting with '.'"},
        {"name = \"my study%j\"", "letters, digits, '.', '_' or '-'"},
        {"sampler = 5", "sampler must be a string"},
        {"scheduler = [\"fifo\"]", "scheduler must be a string"},
        {"mode = 1", "mode must be a string"},
        {"metric = 7", "metric must be a string"},
        {"metric = \"test_accuracy\"", "metric 'test_accuracy' is not in strato train's eval lines"},
        {"seed = \"abc\"", "seed must be a whole number"},
        {"memory_limit_gb = \"4\"", "memory_limit_gb must be a number"},
        {"cpus_per_trial = true", "cpus_per_trial must be a number"},
    };
    for (const auto& [setting, needle] : bad_settings) {
        auto r = StudyConfig::parse(std::string("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n") + setting +
                                        "\n[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n",
                                    "study.toml", STRATO_SOURCE_DIR);
        ASSERT_FALSE(r.is_ok()) << setting;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    }
    // [tpe]: a typo or no candidates were accepted (every TPE trial then took a choice's first value).
    for (const auto& [tpe, needle] : std::vector<std::pair<std::string, std::string>>{
             {"typo_key = 5", "study.toml [tpe]: unknown key 'typo_key'"},
             {"candidates = 0", "candidates in 1..100000"},
             {"startup_trials = -3", "startup_trials >= 1"}}) {
        auto r = StudyConfig::parse("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[tpe]\n" + tpe +
                                        "\n[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n",
                                    "study.toml", STRATO_SOURCE_DIR);
        ASSERT_FALSE(r.is_ok()) << tpe;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    }
    // A high off the q lattice comes down to it: 60 was drawn (clamped), no multiple of 16 from 16.
    StudyConfig lattice = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                                "\"model.width\" = { type = \"int\", low = 16, high = 60, q = 16 }\n");
    ASSERT_EQ(lattice.params.size(), 1u);
    EXPECT_EQ(lattice.params[0].high, 48);
    for (double x : {lattice.params[0].internal_low(), 47.0, 60.0, lattice.params[0].internal_high()})
        EXPECT_EQ(std::stoi(lattice.params[0].from_internal(x)) % 16, 0) << x;
    // Found by review: uniform values were written with 6 digits, so every draw of [1e6, 1e6 + 10]
    // was "1e+06". They are exact now; on a q lattice, without the sum's rounding.
    StudyConfig narrow = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                               "\"optim.lr\" = { type = \"uniform\", low = 1e6, high = 1000010 }\n"
                               "\"optim.weight_decay\" = { type = \"uniform\", low = 0, high = 1, q = 0.1 }\n");
    ASSERT_EQ(narrow.params.size(), 2u);
    EXPECT_EQ(narrow.params[0].from_internal(1000003.25), "1000003.25");
    EXPECT_EQ(std::stod(narrow.params[0].from_internal(1000003.0000001)), 1000003.0000001);
    EXPECT_EQ(narrow.params[1].from_internal(0.31), "0.3");
    auto sched = StudyConfig::parse("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[scheduler]\nmax_t = 1e3\n"
                                    "[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n",
                                    "study.toml", STRATO_SOURCE_DIR);
    EXPECT_NE(sched.status().message().find("study.toml [scheduler]: max_t must be an integer"), std::string::npos)
        << sched.status().message();
    // A parameter the train config does not have fails before any trial.
    StudyConfig typo = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                             "\"optim.learning_rate\" = { type = \"uniform\", low = 0.1, high = 1 }\n");
    Status v = validate_against_train_config(typo);
    ASSERT_FALSE(v.is_ok());
    EXPECT_NE(v.message().find("optim.learning_rate"), std::string::npos) << v.message();
    // ... blamed on itself, not on the parameter probed first ("data.batch_size" sorts before it).
    StudyConfig typo2 = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                              "\"data.batch_size\" = { type = \"choice\", values = [32, 64] }\n"
                              "\"optim.learning_rate\" = { type = \"uniform\", low = 0.1, high = 1 }\n");
    v = validate_against_train_config(typo2);
    EXPECT_NE(v.message().find("study.toml: parameter optim.learning_rate: "), std::string::npos) << v.message();
    // Both ends and every value are checked, not only the low end (found by review: trials failed
    // one by one on the values they drew).
    StudyConfig high = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                             "\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 5000 }\n");
    v = validate_against_train_config(high);
    EXPECT_NE(v.message().find("parameter optim.lr = 5"), std::string::npos) << v.message();
    StudyConfig mixed = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                              "\"optim.name\" = { type = \"choice\", values = [\"adamw\", 3] }\n");
    v = validate_against_train_config(mixed);
    EXPECT_NE(v.message().find("parameter optim.name = 3"), std::string::npos) << v.message();
    EXPECT_FALSE(StudyConfig::parse("[study]\nbase = \"x.toml\"\n", "s.toml", ".").is_ok());  // no params
    EXPECT_FALSE(StudyConfig::parse("[study]\nbase = \"x.toml\"\nsampler = \"bayes\"\n[params]\n\"a.b\" = { type = "
                                    "\"uniform\", low = 0, high = 1 }\n",
                                    "s.toml", ".")
                     .is_ok());
}

// Found by review: each of these passed the study check and then failed every trial, crashed
// or ran out of memory, or was silently accepted.
TEST(Space, StudySettingsOutOfReachAreRefusedAtLoad) {
    const std::string head = "[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n";
    const std::string lr = "\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n";
    const std::pair<std::string, const char*> bad[] = {
        // 1e30 GB wrote memory.max -9223372036854775808, and #SBATCH --mem=-9223372036854775807G.
        {"memory_limit_gb = 1e30\n[params]\n" + lr, "study.toml [study]: memory_limit_gb = 1e+30 is more than 1e+06"},
        {"cpus_per_trial = 1e300\n[params]\n" + lr, "study.toml [study]: cpus_per_trial = 1e+300 is more than 100000"},
        // tune run --parallel stops at 4096; the file's value did not.
        {"parallel = 20000\n[params]\n" + lr, "study.toml [study]: parallel = 20000 is more than 4096 trial processes"},
        // A milestone list per bracket: 1e9 of them ran out of memory.
        {"[scheduler]\nbrackets = 1000000000\n[params]\n" + lr,
         "study.toml [scheduler]: brackets = 1000000000 is more than the 3 distinct brackets of grace 1, max_t 9 and "
         "reduction 3"},
        {"[scheduler]\nbrackets = 4\n[params]\n" + lr, "more than the 3 distinct brackets"},
        {"[scheduler]\ngrace = 9\nmax_t = 9\nbrackets = 2\n[params]\n" + lr, "more than the 1 distinct brackets"},
        // Valid TOML for a table "optim" holding "lr": it read as a distribution ''.
        {"[params]\noptim.lr = { type = \"uniform\", low = 0.1, high = 1 }\n",
         "study.toml [params] \"optim\": a table, not a distribution: quote a dotted key, \"optim.lr\" = { type = ... }"},
        {"[params]\n[params.optim]\nlr = { type = \"uniform\", low = 0.1, high = 1 }\n", "quote a dotted key, \"optim.lr\""},
        // q = 5e-324 made high inf ("the highest value drawn is inf").
        {"[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1, q = 5e-324 }\n",
         "study.toml [params] \"optim.lr\": q 4.94066e-324 is too small for the range [0.1, 1]"},
        {"[params]\n\"optim.lr\" = { type = \"uniform\", low = 0, high = 1, q = 1e-17 }\n", "too small"},
        {"[params]\n\"model.width\" = { type = \"int\", low = 8, high = 32, q = 0.5 }\n", "int needs a whole-number q, got 0.5"},
        // Two identical trials.
        {"[params]\n\"model.width\" = { type = \"grid\", values = [64, 64] }\n",
         "study.toml [params] \"model.width\": values holds 64 twice"},
        {"[params]\n\"model.width\" = { type = \"grid\", values = [64, 128, 64.0] }\n", "values holds 64 twice"},
        {"[params]\n\"optim.name\" = { type = \"choice\", values = [\"sgd\", \"adamw\", \"sgd\"] }\n",
         "values holds \"sgd\" twice"},
        // One key given twice: the last silently won (the set entry never reached a trial).
        {"set = [\"optim.lr=0.5\"]\n[params]\n" + lr,
         "study.toml [params] \"optim.lr\": [study] set also gives it (\"optim.lr=0.5\")"},
        {"set = [\"data.limit_train=100\", \"data.limit_train = 200\"]\n[params]\n" + lr,
         "study.toml [study]: set gives data.limit_train twice (\"data.limit_train=100\" and \"data.limit_train = 200\")"},
    };
    for (const auto& [text, needle] : bad) {
        auto r = StudyConfig::parse(head + text, "study.toml", STRATO_SOURCE_DIR);
        ASSERT_FALSE(r.is_ok()) << text;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    }
    // The bounds themselves are fine, and so is every distinct bracket.
    for (const std::string& ok : std::vector<std::string>{"memory_limit_gb = 1e6\ncpus_per_trial = 1e5\n[params]\n" + lr,
                                 "[scheduler]\nbrackets = 3\n[params]\n" + lr, "parallel = 4096\n[params]\n" + lr,
                                 "[params]\n\"model.width\" = { type = \"grid\", values = [64, 128] }\n"})
        EXPECT_TRUE(StudyConfig::parse(head + ok, "study.toml", STRATO_SOURCE_DIR).is_ok()) << ok;
}

// Found by review: each of these was accepted and then ignored, so the study searched what the
// file did not say (or drew nothing but its high end).
TEST(Space, WhatAStudyFileSaysIsNeverIgnored) {
    const std::string head = "[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n";
    const std::string lr = "\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n";
    const std::pair<std::string, const char*> bad[] = {
        // Above [study], a top-level key: the study ran ASHA.
        {"scheduler = \"fifo\"\n" + head + "[params]\n" + lr,
         "study.toml:1: 'scheduler' is a top-level key, not a section (settings such as sampler and scheduler go "
         "under [study]"},
        {"tpe = 5\n" + head + "[params]\n" + lr, "'tpe' is a top-level key"},
        // A key that is no section's name was an "unknown section".
        {"sampler = \"grid\"\n" + head + "[params]\n" + lr,
         "study.toml:1: 'sampler' is a top-level key; keys go under a section (study settings such as sampler under "
         "[study]"},
        {"[sampler]\nx = 1\n" + head + "[params]\n" + lr, "study.toml: unknown section 'sampler' (expected [study]"},
        // An empty key before "==": the parameter was drawn for every trial.
        {head + "[params]\n\"optim.name\" = { type = \"choice\", values = [\"adamw\", \"sgd\"] }\n"
                "\"optim.momentum\" = { type = \"uniform\", low = 0.5, high = 0.9, when = \" == sgd\" }\n",
         "study.toml [params] \"optim.momentum\": when \" == sgd\" names no parameter"},
        // Keys of the other kind of distribution.
        {head + "[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1, values = [0.1, 0.5] }\n",
         "study.toml [params] \"optim.lr\": uniform takes no 'values' (expected type, low, high, q, when)"},
        {head + "[params]\n\"model.width\" = { type = \"choice\", values = [32, 64], low = 16 }\n",
         "choice takes no 'low' (expected type, values, when)"},
        {head + "[params]\n\"model.width\" = { type = \"grid\", values = [32, 64], q = 16 }\n", "grid takes no 'q'"},
        // high - low past the largest double: every draw was high (inf, clamped).
        {head + "[params]\n\"optim.lr\" = { type = \"uniform\", low = -1e308, high = 1e308 }\n",
         "the range [-1e+308, 1e+308] is wider than a double can hold"},
        {head + "[scheduler]\ngrace = 10\nmax_t = 5\n[params]\n" + lr,
         "need 1 <= grace <= max_t and reduction >= 2, got grace 10, max_t 5 and reduction 3"},
        {head + "[scheduler]\nreduction = 1\n[params]\n" + lr, "got grace 1, max_t 9 and reduction 1"},
        // A base of another type was "missing".
        {"[study]\nbase = 5\n[params]\n" + lr, "study.toml [study]: base must be a string"},
    };
    for (const auto& [text, needle] : bad) {
        auto r = StudyConfig::parse(text, "study.toml", STRATO_SOURCE_DIR);
        ASSERT_FALSE(r.is_ok()) << text;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    }
    // A choice of numbers reaches the trial as written: 10 digits made 0.123456789012 "0.123456789"
    // (and 0.123456789013 beside it "twice"). Values that 10 digits hold keep their literal, so the
    // fingerprint of a study recorded before stays.
    StudyConfig c = study(head + "[params]\n\"optim.lr\" = { type = \"choice\", values = [0.123456789012, "
                                 "0.123456789013, 0.1, 1e-05, 3.0, 0.30000000000000004] }\n");
    ASSERT_EQ(c.params.size(), 1u);
    EXPECT_EQ(c.params[0].values,
              (std::vector<std::string>{"0.123456789012", "0.123456789013", "0.1", "1e-05", "3",
                                        "0.30000000000000004"}));
}

TEST(Space, TheCheckCoversWhatTheExecutorSetsAndDrawsInsideTheRange) {
    const std::string head = "[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n";
    const std::string lr = "[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n";
    const auto refused = [&](const std::string& text) {
        StudyConfig s = study(head + text);
        Status v = validate_against_train_config(s);
        EXPECT_FALSE(v.is_ok()) << text;
        return v.message();
    };
    // Settings the executor adds to every trial (train.epochs, run.threads), named by the study key.
    std::string m = refused("[scheduler]\nmax_t = 200000\n" + lr);
    EXPECT_NE(m.find("study.toml [scheduler] max_t = 200000 (the tuner passes it to every trial): --set train.epochs=200000: "),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("[1, 100000]"), std::string::npos) << m;
    m = refused("threads_per_trial = 2000\n" + lr);
    EXPECT_NE(m.find("study.toml [study] threads_per_trial = 2000 (the tuner passes it to every trial): --set run.threads=2000"),
              std::string::npos)
        << m;
    // A fractional draw for an integer setting: both ends (8, 32) were accepted, then every
    // trial's 23.8049 refused.
    for (const char* param : {"\"model.width\" = { type = \"uniform\", low = 8, high = 32 }",
                              "\"data.batch_size\" = { type = \"loguniform\", low = 16, high = 256 }",
                              "\"model.width\" = { type = \"uniform\", low = 8, high = 32, q = 0.5 }"}) {
        m = refused(std::string("[params]\n") + param + "\n");
        EXPECT_NE(m.find("a value drawn inside ["), std::string::npos) << m;
        EXPECT_NE(m.find("is an integer setting: use type = \"int\""), std::string::npos) << m;
    }
    // Whole-number draws are fine on an integer setting, fractional ones on a float one.
    for (const char* param : {"\"model.width\" = { type = \"uniform\", low = 8, high = 32, q = 8 }",
                              "\"model.width\" = { type = \"int\", low = 8, high = 32 }",
                              "\"optim.lr\" = { type = \"uniform\", low = 1, high = 3 }"}) {
        StudyConfig s = study(head + "[params]\n" + param + "\n");
        EXPECT_TRUE(validate_against_train_config(s).is_ok()) << param << ": " << validate_against_train_config(s).message();
    }
    // A bad `set` entry is blamed on it, not on a parameter.
    m = refused("set = [\"optim.lrr=3\"]\n" + lr);
    EXPECT_EQ(m.rfind("study.toml [study] set: ", 0), 0u) << m;
    EXPECT_NE(m.find("unknown key 'optim.lrr'"), std::string::npos) << m;
    EXPECT_EQ(m.find("parameter"), std::string::npos) << m;
}

// Found by review: the stopping variant judges a trial at a rung by its result at exactly that
// epoch; with train.eval_every = 2 the rungs at 1 and 3 epochs never got one and ASHA stopped no
// trial, silently. Refused before any trial starts; the promotion variant (whose trials stop at
// their rung, an epoch the trainer always evaluates) and rungs on multiples of it are fine.
TEST(Space, TheStoppingVariantNeedsAnEvaluationAtEveryRung) {
    const auto with = [](const std::string& variant, const std::string& set, int grace) {
        return study(
            fmt::format("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nscheduler = \"asha\"\nset = [{}]\n"
                        "[scheduler]\ngrace = {}\nmax_t = 9\nreduction = 3\nvariant = \"{}\"\n[params]\n"
                        "\"optim.lr\" = {{ type = \"loguniform\", low = 1e-4, high = 1e-1 }}\n",
                        set, grace, variant));
    };
    Status bad = validate_against_train_config(with("stopping", "\"train.eval_every=2\"", 1));
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.message().find("judges trials at rungs of 1, 3 epochs, but train.eval_every = 2"), std::string::npos)
        << bad.message();
    EXPECT_NE(bad.message().find("evaluates no epoch 1,"), std::string::npos) << bad.message();
    EXPECT_TRUE(validate_against_train_config(with("stopping", "", 1)).is_ok());
    EXPECT_TRUE(validate_against_train_config(with("promotion", "\"train.eval_every=2\"", 1)).is_ok());
    EXPECT_TRUE(validate_against_train_config(with("stopping", "\"train.eval_every=3\"", 3)).is_ok());
}

// Found by review: a choice or grid string went to the trial as "value" without escaping, so
// "C:\\new" (a backslash) arrived as C, colon, newline and "ew", and a quote broke the --set.
// Found by review: train.max_steps (base config, set entry or parameter) made the trainer end
// trials inside an epoch, whose evaluation ("partial": true, a fractional epoch) the tuner cannot
// use; trials ended "completed" with no result. Refused before any trial starts.
TEST(Space, TrainMaxStepsIsRefused) {
    const std::string head = "[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n";
    const std::string params = "\n[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n";
    for (const char* lines : {"set = [\"train.max_steps=50\"]", ""}) {
        std::string text = head + lines + params;
        if (!*lines) text += "\"train.max_steps\" = { type = \"int\", low = 10, high = 100 }\n";
        StudyConfig s = study(text);
        Status st = validate_against_train_config(s);
        ASSERT_FALSE(st.is_ok()) << text;
        EXPECT_NE(st.message().find(*lines ? "train.max_steps = 50" : "train.max_steps = 10"),
                  std::string::npos)
            << st.message();
        EXPECT_NE(st.message().find("would end trials inside an epoch"), std::string::npos) << st.message();
    }
    StudyConfig ok = study(head + "set = [\"train.max_steps=0\"]" + params);
    EXPECT_TRUE(validate_against_train_config(ok).is_ok()) << validate_against_train_config(ok).message();
}

TEST(Space, StringValuesReachTheTrialAsWritten) {
    StudyConfig s = study(
        "[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
        "\"optim.name\" = { type = \"choice\", values = [\"C:\\\\new\", \"say \\\"hi\\\"\", \"sgd\"] }\n");
    ASSERT_EQ(s.params.size(), 1u);
    const std::vector<std::string> want = {"C:\\new", "say \"hi\"", "sgd"};
    ASSERT_EQ(s.params[0].values.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        auto parsed = parse_toml_named("v = " + s.params[0].values[i], "literal");  // as `train --set` reads it
        ASSERT_TRUE(parsed.is_ok()) << s.params[0].values[i] << ": " << parsed.status().message();
        EXPECT_EQ((*parsed)["v"].value<std::string>(), std::optional<std::string>(want[i])) << s.params[0].values[i];
    }
    EXPECT_EQ(s.params[0].values[2], "\"sgd\"");  // (plain values as before: a study's fingerprint stays)
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

// TOML tables read back sorted: "model.depth" comes before the "optim.name" its condition names.
// It used to be looked at first and never drawn (found by review).
TEST(Sampler, AConditionOnAParameterListedLaterHolds) {
    StudyConfig s = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nsampler = \"random\"\n[params]\n"
                          "\"model.depth\" = { type = \"choice\", values = [1, 2], when = \"optim.name == sgd\" }\n"
                          "\"optim.name\" = { type = \"choice\", values = [\"adamw\", \"sgd\"] }\n"
                          "\"optim.momentum\" = { type = \"uniform\", low = 0.8, high = 0.99, when = \"optim.name == sgd\" }\n");
    std::mt19937_64 rng(3);
    int sgd = 0;
    for (int i = 0; i < 40; ++i) {
        Assignment a = sample(s, i, {}, rng);
        const bool is_sgd = a["optim.name"] == "\"sgd\"";
        sgd += is_sgd;
        EXPECT_EQ(a.count("model.depth"), is_sgd ? 1u : 0u);
        EXPECT_EQ(a.count("optim.momentum"), is_sgd ? 1u : 0u);
    }
    EXPECT_GT(sgd, 0);
}

// A grid parameter left out by its condition is one point, not one per value (found by review:
// (sgd, 0.1) was never run while adamw ran twice).
TEST(Sampler, AGridWithAConditionRunsEachDistinctPointOnce) {
    StudyConfig s = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nsampler = \"grid\"\n[params]\n"
                          "\"optim.name\" = { type = \"grid\", values = [\"adamw\", \"sgd\"] }\n"
                          "\"optim.weight_decay\" = { type = \"grid\", values = [0.0, 0.1], when = \"optim.name == sgd\" }\n");
    EXPECT_EQ(grid_size(s), 3);
    std::set<Assignment> seen;
    std::mt19937_64 rng(1);
    for (int i = 0; i < 3; ++i) seen.insert(sample(s, i, {}, rng));
    EXPECT_EQ(seen.size(), 3u);
    EXPECT_TRUE(seen.count({{"optim.name", "\"sgd\""}, {"optim.weight_decay", "0.1"}}));
    EXPECT_EQ(sample(s, 3, {}, rng), sample(s, 0, {}, rng));  // then round again
}

// The ends of an int range are as likely as the values between (they came up half as often).
TEST(Sampler, IntEndsAreAsLikelyAsTheMiddle) {
    StudyConfig s = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nsampler = \"random\"\n[params]\n"
                          "\"model.depth\" = { type = \"int\", low = 1, high = 3 }\n");
    std::mt19937_64 rng(11);
    std::map<std::string, int> counts;
    for (int i = 0; i < 3000; ++i) ++counts[sample(s, i, {}, rng)["model.depth"]];
    ASSERT_EQ(counts.size(), 3u);
    for (const auto& [v, n] : counts) EXPECT_NEAR(n, 1000, 120) << v;  // (was 750 / 1500 / 750)
    auto huge = StudyConfig::parse("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n[params]\n"
                                   "\"model.width\" = { type = \"int\", low = 0, high = 1e19 }\n",
                                   "study.toml", STRATO_SOURCE_DIR);
    ASSERT_FALSE(huge.is_ok());
    EXPECT_NE(huge.status().message().find("within +-2^53"), std::string::npos) << huge.status().message();
}

TEST(Sampler, GridEnumeratesTheProduct) {
    StudyConfig s = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nsampler = \"grid\"\n[params]\n"
                          "\"data.batch_size\" = { type = \"grid\", values = [32, 64, 128] }\n"
                          "\"optim.name\" = { type = \"grid\", values = [\"adamw\", \"sgd\"] }\n");
    EXPECT_EQ(grid_size(s), 6);
    // Found by review: without `trials` a grid study ran 20 trials, this grid 3 times over (a
    // grid of 60 only its first 20 points); it runs the grid once, as Ray Tune and Optuna do.
    EXPECT_EQ(s.trials, 6);
    StudyConfig two = study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nsampler = \"grid\"\ntrials = 2\n"
                            "[params]\n\"optim.name\" = { type = \"grid\", values = [\"adamw\", \"sgd\"] }\n"
                            "\"optim.lr\" = { type = \"loguniform\", low = 1e-4, high = 1e-1 }\n");
    EXPECT_EQ(two.trials, 2) << "a trials setting is kept";
    EXPECT_EQ(study("[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\nsampler = \"random\"\n[params]\n"
                    "\"optim.name\" = { type = \"grid\", values = [\"adamw\", \"sgd\"] }\n")
                  .trials,
              20) << "other samplers keep the default";
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

// Found by review: TPE learnt from failed trials' partial results (a trial that crashed or
// diverged after a good epoch counted as that good), and from a paused or stopped trial's best
// epoch. As Optuna: failed trials are left out, pruned ones count with their last value.
TEST(Sampler, HistoryLeavesFailedTrialsOutAndCountsPrunedOnesByTheirLastValue) {
    StudyConfig s = study();
    s.maximize = false;  // (values are signed: larger is better)
    const auto trial = [](int id, TrialState st, std::optional<double> best, std::optional<double> last) {
        Trial t;
        t.id = id;
        t.params = {{"optim.lr", fmt::format("0.0{}", id)}};
        t.state = st;
        t.best = best;
        t.last = last;
        return t;
    };
    const std::vector<Trial> trials = {
        trial(1, TrialState::kCompleted, 0.2, 0.3),
        trial(2, TrialState::kFailed, 0.01, 0.01),  // crashed after a great first epoch
        trial(3, TrialState::kStopped, 0.4, 0.5),
        trial(4, TrialState::kPaused, 0.6, 0.6),
        trial(5, TrialState::kRunning, std::nullopt, std::nullopt),  // no result yet: the worst so far
        trial(6, TrialState::kFailed, std::nullopt, std::nullopt),
    };
    const auto history = sampler_history(s, trials);
    std::map<std::string, double> got;
    for (const auto& o : history) got[o.params.at("optim.lr")] = o.value;
    const std::map<std::string, double> want = {{"0.01", -0.2}, {"0.03", -0.5}, {"0.04", -0.6}, {"0.05", -0.6}};
    EXPECT_EQ(got, want);
    EXPECT_EQ(history.size(), 4u);
}

TEST(Store, TrialsResultsRungsAndFingerprint) {
    std::string dir = testing::TempDir() + "/tune_store";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
        auto st = Store::open(dir + "/study.db");
        ASSERT_TRUE(st.is_ok()) << st.status().message();
        ASSERT_TRUE((*st)->add_meta("study", "A").is_ok());
        EXPECT_EQ(*(*st)->journal(), "wal");
        int id = *(*st)->add_trial({{"optim.lr", "0.01"}}, 1, 0, "host:1:2");
        EXPECT_TRUE(*(*st)->add_result(id, 1, 0.80, true));
        EXPECT_FALSE(*(*st)->add_result(id, 1, 0.10, true));  // the same epoch again: ignored, and said so
        EXPECT_TRUE(*(*st)->add_result(id, 2, 0.85, true));
        ASSERT_TRUE((*st)->add_rung(0, 0, id, 0.80).is_ok());
        ASSERT_TRUE((*st)->set_state(id, TrialState::kPaused).is_ok());
        EXPECT_EQ((*(*st)->trials())[0].owner, "");  // pausing gives the trial up
        ASSERT_TRUE((*st)->promote(0, 0, id, 3, "host:7:8").is_ok());
        // A failing transaction leaves nothing behind and the store usable.
        Status failed = (*st)->transaction([&]() -> Status {
            EXPECT_TRUE((*st)->add_trial({{"optim.lr", "0.5"}}, 1, 0, "x").is_ok());
            return invalid_argument("no");
        });
        EXPECT_FALSE(failed.is_ok());
        ASSERT_TRUE((*st)->set_journal("delete").is_ok());
    }
    auto st = Store::open(dir + "/study.db");
    ASSERT_TRUE(st.is_ok());
    ASSERT_TRUE((*st)->add_meta("study", "B").is_ok());  // something recorded already: kept
    EXPECT_EQ(*(*st)->meta("study"), std::optional<std::string>("A"));
    EXPECT_EQ(*(*st)->meta("tpe"), std::nullopt);
    auto trials = *(*st)->trials();
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].params.at("optim.lr"), "0.01");
    EXPECT_EQ(trials[0].state, TrialState::kRunning);
    EXPECT_EQ(trials[0].target, 3);
    EXPECT_DOUBLE_EQ(*trials[0].best, 0.85);
    EXPECT_EQ(trials[0].epochs, 2);
    EXPECT_EQ(trials[0].owner, "host:7:8");
    EXPECT_EQ((*st)->results(trials[0].id)->size(), 2u);
    EXPECT_TRUE((*(*st)->rung(0, 0))[0].promoted);
    EXPECT_TRUE((*st)->rung(1, 0)->empty());
    EXPECT_EQ(*(*st)->journal(), "delete");  // kept in the file

    // Damaged parameters are an error naming the trial (export-best wrote the base config's values).
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/study.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE trials SET params = '{\"optim.lr\": null}'", nullptr, nullptr, nullptr), SQLITE_OK);
    auto damaged = (*st)->trials();
    ASSERT_FALSE(damaged.is_ok());
    EXPECT_NE(damaged.status().message().find("trial 1's parameter optim.lr is null"), std::string::npos)
        << damaged.status().message();
    ASSERT_EQ(sqlite3_exec(db, "UPDATE trials SET params = '[1, 2]'", nullptr, nullptr, nullptr), SQLITE_OK);
    EXPECT_NE((*st)->trials().status().message().find("not a JSON object"), std::string::npos);
    sqlite3_close(db);
}

// status/best/report on a study they may not write (a read-only disk, another user's run):
// `attempt to write a readonly database` before (found by review). Root ignores permission bits,
// so the test shows the opening writes nothing and can write nothing.
// Found by review: `tune run --dir` on a directory holding another program's study.db (Optuna's
// has a `trials` table too) added strato's tables and columns to it, then failed on "no such
// column: id"; one without a `trials` table was switched to WAL and filled with strato's tables.
TEST(Store, AnotherProgramsDatabaseIsRefusedAndLeftAsItIs) {
    const std::string dir = testing::TempDir() + "/tune_store_foreign";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::pair<const char*, const char*> foreign[] = {
        {"CREATE TABLE studies(study_id INTEGER PRIMARY KEY, study_name TEXT);"
         "CREATE TABLE trials(trial_id INTEGER PRIMARY KEY, number INTEGER, study_id INTEGER, state TEXT);"
         "INSERT INTO studies VALUES(1, 'x'); INSERT INTO trials VALUES(1, 0, 1, 'COMPLETE');",
         "is not a strato study store: it holds table(s) studies that no strato study has"},
        {"CREATE TABLE notes(body TEXT); INSERT INTO notes VALUES('mine');", "it holds table(s) notes"},
        {"CREATE TABLE trials(trial_id INTEGER PRIMARY KEY, state TEXT);", "its table trials has no column id"},
    };
    for (const auto& [sql, needle] : foreign) {
        const std::string db_path = dir + "/study.db";
        std::filesystem::remove(db_path);
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
        sqlite3_close(db);
        const std::string bytes = *fs::read_file(db_path);
        auto st = Store::open(db_path);
        ASSERT_FALSE(st.is_ok()) << sql;
        EXPECT_NE(st.status().message().find(needle), std::string::npos) << st.status().message();
        EXPECT_NE(st.status().message().find("it was left as it is"), std::string::npos) << st.status().message();
        auto ro = Store::open_read_only(db_path);
        ASSERT_FALSE(ro.is_ok()) << sql;
        EXPECT_NE(ro.status().message().find(needle), std::string::npos) << ro.status().message();
        EXPECT_EQ(*fs::read_file(db_path), bytes) << "the other program's database was changed: " << sql;
        EXPECT_FALSE(std::filesystem::exists(db_path + "-wal")) << sql;
    }
    // An empty file, and a study cut short after its first table, are a study's.
    for (const char* sql : {"", "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"}) {
        const std::string db_path = dir + "/study.db";
        std::filesystem::remove(db_path);
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
        auto st = Store::open(db_path);
        ASSERT_TRUE(st.is_ok()) << st.status().message();
        EXPECT_TRUE((*st)->trials()->empty());
    }
}

// Found by review: a state no strato writes ('COMPLETE', edited by hand) read as "failed", which
// hid the trial from best and export-best without a word.
TEST(Store, AnUnknownTrialStateIsAnError) {
    const std::string dir = testing::TempDir() + "/tune_store_state";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    auto st = Store::open(dir + "/study.db");
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    ASSERT_TRUE((*st)->add_trial({{"optim.lr", "0.01"}}, 1, 0, "").is_ok());
    ASSERT_TRUE((*st)->set_state(1, TrialState::kCompleted).is_ok());
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/study.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE trials SET state = 'COMPLETE'", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto trials = (*st)->trials();
    ASSERT_FALSE(trials.is_ok());
    EXPECT_EQ(trials.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(trials.status().message().find("trial 1's state is 'COMPLETE', not running, paused, completed, "
                                             "stopped or failed"),
              std::string::npos)
        << trials.status().message();
}

// Found by review: `tune best` gave a trial's parameters only as --set literals ("\"adamw\"",
// "0.001"), which a JSON reader had to parse as TOML again; "values" holds them as JSON values.
TEST(Store, TheStudyJsonGivesParameterValuesAsJson) {
    const std::string dir = testing::TempDir() + "/tune_store_values";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
        auto st = Store::open(dir + "/study.db");
        ASSERT_TRUE(st.is_ok()) << st.status().message();
        const Assignment a = {{"optim.lr", "0.001"}, {"model.width", "64"}, {"optim.name", "\"adamw\""}};
        ASSERT_TRUE((*st)->add_trial(a, 1, 0, "").is_ok());
    }
    auto j = study_json(study(), dir);
    ASSERT_TRUE(j.is_ok()) << j.status().message();
    const nlohmann::json& t = (*j)["trials"][0];
    EXPECT_EQ(t["params"]["optim.name"], "\"adamw\"");
    EXPECT_EQ(t["values"], nlohmann::json::parse(R"({"optim.lr": 0.001, "model.width": 64, "optim.name": "adamw"})"))
        << t.dump();
    EXPECT_TRUE(t["values"]["model.width"].is_number_integer());
}

TEST(Store, ReadOnlyOpenReadsAWalStudyAndWritesNothing) {
    std::string dir = testing::TempDir() + "/tune_store_ro";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
        auto st = Store::open(dir + "/study.db");
        ASSERT_TRUE(st.is_ok());
        ASSERT_TRUE((*st)->add_meta("study", "A").is_ok());
        ASSERT_TRUE((*st)->add_trial({{"optim.lr", "0.01"}}, 1, 0, "").is_ok());
    }
    const auto before = std::filesystem::last_write_time(dir + "/study.db");
    auto ro = Store::open_read_only(dir + "/study.db");
    ASSERT_TRUE(ro.is_ok()) << ro.status().message();
    EXPECT_EQ(*(*ro)->meta("study"), std::optional<std::string>("A"));
    EXPECT_EQ((*ro)->trials()->size(), 1u);
    EXPECT_FALSE((*ro)->add_trial({{"optim.lr", "0.5"}}, 1, 0, "").is_ok());
    EXPECT_EQ(std::filesystem::last_write_time(dir + "/study.db"), before);
    EXPECT_FALSE(Store::open_read_only(dir + "/missing.db").is_ok());
}

// A study.db from before brackets and owners (no such columns) as status, best and report read
// it: "no such column: bracket" before (found by review), since only `tune run` migrates.
void write_old_schema_study(const std::string& db_path) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE trials(id INTEGER PRIMARY KEY, params TEXT NOT NULL, state TEXT NOT NULL,"
                           " target INTEGER NOT NULL, epochs INTEGER NOT NULL DEFAULT 0, best REAL, last REAL, error TEXT);"
                           "CREATE TABLE results(trial INTEGER, epoch INTEGER, value REAL, PRIMARY KEY(trial, epoch));"
                           "CREATE TABLE rungs(rung INTEGER, trial INTEGER, value REAL, promoted INTEGER DEFAULT 0,"
                           " PRIMARY KEY(rung, trial));"
                           "INSERT INTO trials VALUES(1, '{\"optim.lr\": \"0.01\"}', 'completed', 3, 3, 0.8, 0.8, '');"
                           "INSERT INTO trials VALUES(2, '{\"optim.lr\": \"0.5\"}', 'paused', 1, 1, 0.4, 0.4, '');"
                           "INSERT INTO results VALUES(1, 1, 0.7), (1, 2, 0.75), (1, 3, 0.8), (2, 1, 0.4);"
                           "INSERT INTO rungs VALUES(0, 1, 0.7, 1), (0, 2, 0.4, 0);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
}

TEST(Store, ReadOnlyOpenReadsAStudyFromBeforeBracketsAndOwners) {
    const std::string dir = testing::TempDir() + "/tune_store_old";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    write_old_schema_study(dir + "/study.db");
    const std::string bytes = *fs::read_file(dir + "/study.db");
    auto ro = Store::open_read_only(dir + "/study.db");
    ASSERT_TRUE(ro.is_ok()) << ro.status().message();
    auto trials = (*ro)->trials();
    ASSERT_TRUE(trials.is_ok()) << trials.status().message();
    ASSERT_EQ(trials->size(), 2u);
    EXPECT_EQ((*trials)[0].bracket, 0);
    EXPECT_EQ((*trials)[0].owner, "");
    EXPECT_DOUBLE_EQ(*(*trials)[0].best, 0.8);
    auto rung = (*ro)->rung(0, 0);
    ASSERT_TRUE(rung.is_ok()) << rung.status().message();
    ASSERT_EQ(rung->size(), 2u);
    EXPECT_TRUE((*rung)[0].promoted);
    EXPECT_EQ((*ro)->meta("study")->has_value(), false);  // (no meta table in this one)
    ro->reset();
    EXPECT_EQ(*fs::read_file(dir + "/study.db"), bytes) << "reading it changed the file";
    EXPECT_FALSE(std::filesystem::exists(dir + "/study.db-wal"));

    // status, best and report, through the study's functions.
    StudyConfig cfg = study(R"([study]
name = "old"
base = "configs/fashion_mnist_mlp.toml"
trials = 2
scheduler = "asha"
sampler = "random"
[scheduler]
grace = 1
max_t = 3
reduction = 3
[params]
"optim.lr" = { type = "loguniform", low = 1e-4, high = 1 }
)");
    auto board = leaderboard(cfg, dir, 10);
    ASSERT_TRUE(board.is_ok()) << board.status().message();
    EXPECT_NE(board->find("trial-0001"), std::string::npos) << *board;
    auto j = study_json(cfg, dir);
    ASSERT_TRUE(j.is_ok()) << j.status().message();
    EXPECT_EQ((*j)["trials"].size(), 2u);
    EXPECT_EQ((*j)["rungs"][0]["entries"], 2);
    EXPECT_EQ(*fs::read_file(dir + "/study.db"), bytes);
    // `tune run` (a writable open) migrates it for good.
    {
        auto st = Store::open(dir + "/study.db");
        ASSERT_TRUE(st.is_ok()) << st.status().message();
        EXPECT_EQ((*st)->trials()->size(), 2u);
    }
    auto again = Store::open_read_only(dir + "/study.db");
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ((*again)->rung(0, 0)->size(), 2u);
}

TEST(Store, ExecutorsOpenANewStudyTogether) {
    // Executors started at once on a new study directory: each opens the same fresh study.db and
    // switches it to WAL. SQLite fails that switch at once ("database is locked", not waiting on
    // the busy timeout) while another process reads the file; about 1 round in 50 failed so.
    const std::string dir = testing::TempDir() + "/tune_store_together";
    for (int round = 0; round < 40; ++round) {
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        int go[2];
        ASSERT_EQ(pipe(go), 0);
        std::vector<pid_t> kids;
        for (int k = 0; k < 3; ++k) {
            pid_t pid = fork();
            ASSERT_GE(pid, 0);
            if (pid == 0) {
                char c;
                if (read(go[0], &c, 1) != 1) _exit(2);
                auto st = Store::open(dir + "/study.db");
                Status s = st.is_ok() ? (*st)->transaction([&] { return (*st)->add_meta("study", "A"); }) : st.status();
                if (!s.is_ok()) fmt::print(stderr, "round {}, executor {}: {}\n", round, k, s.message());
                _exit(s.is_ok() ? 0 : 1);
            }
            kids.push_back(pid);
        }
        ASSERT_EQ(write(go[1], "abc", 3), 3);  // all at once
        close(go[0]);
        close(go[1]);
        for (pid_t k : kids) {
            int status = 0;
            ASSERT_EQ(waitpid(k, &status, 0), k);
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
        }
        auto st = Store::open(dir + "/study.db");
        ASSERT_TRUE(st.is_ok()) << st.status().message();
        EXPECT_EQ(*(*st)->journal(), "wal");
    }
}

// ---- the executor, with fake_train.py as the trainer ----

struct StudyRun {
    std::string dir;
    StudyConfig cfg;
};

StudyRun fake_study(const std::string& name, const std::string& scheduler_lines, const std::string& study_lines = "") {
    StudyRun r;
    r.dir = testing::TempDir() + "/tune_exec_" + name;
    std::filesystem::remove_all(r.dir);
    r.cfg = study(fmt::format(R"([study]
name = "{}"
base = "configs/fashion_mnist_mlp.toml"
seed = 3
{}
[scheduler]
{}
[params]
"optim.lr" = {{ type = "loguniform", low = 1e-4, high = 1 }}
)",
                              name, study_lines.find("sampler") == std::string::npos ? study_lines + "\nsampler = \"random\"" : study_lines,
                              scheduler_lines));
    return r;
}

std::unique_ptr<Store> open_db(const StudyRun& r) {
    auto s = Store::open(r.dir + "/study.db");
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    return s.is_ok() ? std::move(*s) : nullptr;
}

Result<RunSummary> run_fake(const StudyRun& r) {
    RunOptions o;
    o.dir = r.dir;
    o.strato_binary = FAKE_TRAIN;
    o.quiet = true;
    return run_study(r.cfg, o);
}

/// Every trial's epochs 1..n recorded exactly once, n = its epochs.
void expect_contiguous_results(const StudyRun& r) {
    auto st = open_db(r);
    auto trials = *st->trials();
    for (const auto& t : trials) {
        auto res = *st->results(t.id);
        ASSERT_EQ(static_cast<int>(res.size()), t.epochs) << "trial " << t.id;
        for (size_t i = 0; i < res.size(); ++i) EXPECT_EQ(res[i].first, static_cast<int>(i) + 1);
    }
}

/// Every trial's metrics.jsonl lists epochs 1..n once each: no trial ran twice at once (two
/// executors promoting or taking the same trial would both append to it).
void expect_each_epoch_trained_once(const StudyRun& r) {
    auto st = open_db(r);
    auto trials = *st->trials();
    for (const auto& t : trials) {
        auto text = fs::read_file(r.dir + fmt::format("/trials/trial-{:04d}/metrics.jsonl", t.id));
        ASSERT_TRUE(text) << "trial " << t.id;
        std::vector<int> epochs;
        std::istringstream in(*text);
        for (std::string line; std::getline(in, line);) {
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_object() && j.value("kind", "") == "eval") epochs.push_back(j.value("epoch", 0));
        }
        std::vector<int> want(static_cast<size_t>(t.epochs));
        for (int e = 1; e <= t.epochs; ++e) want[static_cast<size_t>(e) - 1] = e;
        EXPECT_EQ(epochs, want) << "trial " << t.id << ":\n" << *text;
    }
}

struct Arrival {
    int trial = 0;
    double value = 0;
    bool promoted = false;
};

/// Rung `rung` of bracket 0 in the order its entries were committed (SQLite's rowid).
std::vector<Arrival> rung_in_arrival_order(const StudyRun& r, int rung) {
    std::vector<Arrival> out;
    sqlite3* db = nullptr;
    if (sqlite3_open_v2((r.dir + "/study.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
        ADD_FAILURE() << "cannot open " << r.dir << "/study.db";
        sqlite3_close(db);
        return out;
    }
    sqlite3_stmt* q = nullptr;
    sqlite3_prepare_v2(db, "SELECT trial, value, promoted FROM rungs WHERE bracket = 0 AND rung = ? ORDER BY rowid", -1, &q,
                       nullptr);
    sqlite3_bind_int(q, 1, rung);
    while (sqlite3_step(q) == SQLITE_ROW)
        out.push_back({sqlite3_column_int(q, 0), sqlite3_column_double(q, 1), sqlite3_column_int(q, 2) != 0});
    sqlite3_finalize(q);
    sqlite3_close(db);
    return out;
}

TEST(Executor, AshaStoppingVariantTrainsEveryTrialTowardsMaxT) {
    auto r = fake_study("stopping", "grace = 1\nmax_t = 9\nreduction = 3\nvariant = \"stopping\"",
                        "trials = 9\nparallel = 3\nscheduler = \"asha\"");
    auto s = run_fake(r);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->trials, 9);
    EXPECT_EQ(s->failed, 0);
    EXPECT_GT(s->completed, 0);
    EXPECT_GT(s->stopped, 0) << "the stopping variant stopped nobody";
    auto st = open_db(r);
    auto trials = *st->trials();
    for (const auto& t : trials) {
        EXPECT_EQ(t.target, 9) << "stopping-variant trials run to max_t unless stopped";
        EXPECT_NE(t.state, TrialState::kPaused);
        if (t.state == TrialState::kCompleted) {
            EXPECT_EQ(t.epochs, 9);
        }
    }
    expect_contiguous_results(r);
}

// A trial's metrics.jsonl with lines of other shapes (a user's own training script): skipped,
// the study goes on with the real results.
TEST(Executor, OddMetricsLinesAreSkipped) {
    setenv("FAKE_TRAIN_ODD_LINES", "1", 1);
    auto r = fake_study("odd", "grace = 1\nmax_t = 3\nreduction = 3", "trials = 3\nparallel = 1\nscheduler = \"asha\"");
    auto s = run_fake(r);
    unsetenv("FAKE_TRAIN_ODD_LINES");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->trials, 3);
    EXPECT_EQ(s->failed, 0);
    EXPECT_TRUE(s->best.has_value());
    expect_contiguous_results(r);
    // NaN, Infinity and 1e999 before each real line are no results: every value recorded is the
    // trainer's (below 1).
    auto st = open_db(r);
    const std::vector<Trial> trials = *st->trials();
    for (const auto& t : trials) {
        const auto results = *st->results(t.id);
        for (const auto& [epoch, value] : results)
            EXPECT_TRUE(std::isfinite(value) && value < 1) << "trial " << t.id << " epoch " << epoch << ": " << value;
    }
}

// study.db removed (as Optuna users reset a study) and the study run again: every new trial
// resumed the old trial's checkpoint and reported its old results (found by review).
TEST(Executor, TrialDirectoriesOfAnotherStudyAreRefused) {
    auto r = fake_study("stale", "max_t = 2", "trials = 2\nparallel = 1\nscheduler = \"fifo\"");
    ASSERT_TRUE(run_fake(r).is_ok());
    std::filesystem::remove(r.dir + "/study.db");
    auto again = run_fake(r);
    ASSERT_FALSE(again.is_ok());
    EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
    EXPECT_NE(again.status().message().find("belongs to no trial of this study"), std::string::npos)
        << again.status().message();
    auto db = open_db(r);
    EXPECT_TRUE(db->trials()->empty()) << "no trial was started";
}

// Found by review: a study resumed while the trainer of an interrupted trial still held its run
// directory (the trial process of an executor killed a moment before, still exiting, or one whose
// executor elsewhere lost its lease) started the trial at once; its trainer found the directory
// in use and exited 1, and the trial was marked failed for good. It waits for the directory.
TEST(Executor, AnInterruptedTrialWaitsWhileItsDirectoryIsInUse) {
    auto r = fake_study("held", "max_t = 2", "trials = 1\nparallel = 1\nscheduler = \"fifo\"");
    std::filesystem::create_directories(r.dir);
    {
        auto st = open_db(r);
        ASSERT_TRUE(st);
        ASSERT_TRUE(st->add_trial({{"optim.lr", "0.01"}}, 2, 0, "").is_ok());  // running, given up
    }
    auto held = fs::lock_dir(r.dir + "/trials/trial-0001");  // the old trainer, not gone yet
    ASSERT_TRUE(held.is_ok()) << held.status().message();
    std::thread old_trainer([&] {
        // It goes once a new trainer has tried the directory (its log says so), or after a while.
        const std::string log = r.dir + "/logs/trial-0001.log";
        for (int i = 0; i < 300; ++i) {
            std::error_code ec;
            if (std::filesystem::file_size(log, ec) > 0 && !ec) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        fs::DirLock gone = std::move(*held);
    });
    auto s = run_fake(r);
    old_trainer.join();
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    auto st = open_db(r);
    const auto trials = *st->trials();
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].state, TrialState::kCompleted) << trials[0].error;
    EXPECT_EQ(trials[0].epochs, 2);
}

// The stopping variant keeps the top 1/eta of a rung: a trial in the bottom half of four (eta 2)
// is stopped even when it sits exactly at the lower neighbour of the quantile.
// Found by review: a trial row edited by hand or damaged crashed the executor or ran what no
// sampler proposes: a bracket past the study's (a segmentation fault, resuming it), a parameter
// "abc" (TPE's std::stod: "error: stod"), a choice value not in the list (read as its first).
// Each is now an error naming the trial, from run, status and best alike.
TEST(Executor, ADamagedTrialRowIsAClearErrorNotACrash) {
    auto r = fake_study("damaged", "grace = 1\nmax_t = 2\n[tpe]\nstartup_trials = 1",
                        "trials = 2\nparallel = 1\nscheduler = \"fifo\"\nsampler = \"tpe\"");
    auto first = run_fake(r);
    ASSERT_TRUE(first.is_ok()) << first.status().message();
    ASSERT_EQ(first->completed, 2);
    r.cfg.trials = 3;  // (the next run draws a trial from the two: TPE reads their parameters)
    const std::tuple<const char*, const char*, const char*> damage[] = {
        {"UPDATE trials SET state = 'running', bracket = 5 WHERE id = 1",
         "trial 1's bracket is 5, but the study has 1 bracket(s)",
         "UPDATE trials SET state = 'completed', bracket = 0 WHERE id = 1"},
        {"UPDATE trials SET params = '{\"optim.lr\": \"abc\"}' WHERE id = 2",
         "trial 2's parameter optim.lr is 'abc', not a number in [0.0001, 1]", nullptr},
        {"UPDATE trials SET params = '{\"optim.lr\": \"7\"}' WHERE id = 2", "trial 2's parameter optim.lr is '7'",
         nullptr},
        {"UPDATE trials SET params = '{\"optim.lrr\": \"0.1\"}' WHERE id = 2",
         "trial 2's parameter optim.lrr is not one of the study's [params]", nullptr},
        {"UPDATE trials SET params = '{}' WHERE id = 2", "trial 2's parameter optim.lr has no value", nullptr},
        {"UPDATE trials SET target = 0 WHERE id = 2", "trial 2's target is 0 epochs, not in 1..2", nullptr},
    };
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((r.dir + "/study.db").c_str(), &db), SQLITE_OK);
    std::string params2;
    {
        auto st = open_db(r);
        params2 = nlohmann::json((*st->trials())[1].params).dump();
    }
    for (const auto& [sql, needle, undo] : damage) {
        ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
        auto s = run_fake(r);
        ASSERT_FALSE(s.is_ok()) << sql;
        EXPECT_EQ(s.status().code(), StatusCode::kDataLoss) << s.status().message();
        EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
        EXPECT_NE(s.status().message().find("the study database is damaged or was edited by hand"), std::string::npos);
        auto board = leaderboard(r.cfg, r.dir, 10);
        ASSERT_FALSE(board.is_ok()) << sql;
        EXPECT_NE(board.status().message().find(needle), std::string::npos) << board.status().message();
        EXPECT_FALSE(best_config(r.cfg, r.dir).is_ok()) << sql;
        if (undo) {
            ASSERT_EQ(sqlite3_exec(db, undo, nullptr, nullptr, nullptr), SQLITE_OK);
        } else {
            const std::string restore =
                fmt::format("UPDATE trials SET params = '{}', target = 2 WHERE id = 2", params2);
            ASSERT_EQ(sqlite3_exec(db, restore.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
        }
    }
    sqlite3_close(db);
    // Repaired, the study goes on.
    auto last = run_fake(r);
    ASSERT_TRUE(last.is_ok()) << last.status().message();
    EXPECT_EQ(last->trials, 3);
    EXPECT_EQ(last->failed, 0);
}

TEST(Executor, AshaStoppingCutsAtTheInterpolatedQuantile) {
    auto r = fake_study("cutoff", "grace = 1\nmax_t = 3\nreduction = 2\nvariant = \"stopping\"",
                        "trials = 8\nparallel = 1\nscheduler = \"asha\"");
    auto s = run_fake(r);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    // Each arrival at rung 0, once there are eta entries, is stopped iff it is below the median
    // (interpolated) of the entries so far, itself included.
    auto rung = rung_in_arrival_order(r, 0);
    ASSERT_EQ(rung.size(), 8u);
    auto st = open_db(r);
    auto trials = *st->trials();
    for (size_t n = 2; n <= rung.size(); ++n) {
        std::vector<double> vals;
        for (size_t i = 0; i < n; ++i) vals.push_back(rung[i].value);
        std::sort(vals.begin(), vals.end());
        const double pos = 0.5 * static_cast<double>(n - 1);
        const auto lo = static_cast<size_t>(pos);
        const double cutoff = vals[lo] + (pos - static_cast<double>(lo)) * (vals[std::min(lo + 1, n - 1)] - vals[lo]);
        const auto& t = *std::find_if(trials.begin(), trials.end(), [&](const Trial& x) { return x.id == rung[n - 1].trial; });
        EXPECT_EQ(t.state == TrialState::kStopped, rung[n - 1].value < cutoff)
            << "arrival " << n << " value " << rung[n - 1].value << " cutoff " << cutoff;
    }
}

TEST(Executor, BracketsHaveTheirOwnRungs) {
    auto r = fake_study("brackets", "grace = 1\nmax_t = 9\nreduction = 3\nbrackets = 2",
                        "trials = 8\nparallel = 4\nscheduler = \"asha\"");
    EXPECT_EQ(r.cfg.milestones(0), (std::vector<int>{1, 3, 9}));
    EXPECT_EQ(r.cfg.milestones(1), (std::vector<int>{3, 9}));
    auto s = run_fake(r);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 0);
    auto j = *study_json(r.cfg, r.dir);
    int b0 = 0, b1 = 0;
    for (const auto& t : j["trials"]) (t["bracket"] == 0 ? b0 : b1)++;
    EXPECT_EQ(b0, 4);
    EXPECT_EQ(b1, 4);
    ASSERT_EQ(j["rungs"].size(), 3u);  // bracket 0: 1 and 3 epochs; bracket 1: 3 epochs
    EXPECT_EQ(j["rungs"][2]["bracket"], 1);
    EXPECT_EQ(j["rungs"][2]["epochs"], 3);
    EXPECT_EQ(j["rungs"][2]["entries"], 4);
    EXPECT_EQ(j["rungs"][0]["entries"], 4);
    expect_contiguous_results(r);
}

// Three grid trials under ASHA (grace 1, max_t 3, reduction 3: rung 0 promotes one), the best
// of them (lr 0.01) made to fail by the fake trainer after `fail_epoch` epochs.
Result<RunSummary> run_with_failing_best(StudyRun& r, const std::string& name, const char* fail_epoch) {
    setenv("FAKE_TRAIN_FAIL_LR", "0.01", 1);
    setenv("FAKE_TRAIN_FAIL_EPOCH", fail_epoch, 1);
    r.dir = testing::TempDir() + "/tune_exec_" + name;
    std::filesystem::remove_all(r.dir);
    r.cfg = study(fmt::format(R"([study]
name = "{}"
base = "configs/fashion_mnist_mlp.toml"
trials = 3
parallel = 1
sampler = "grid"
scheduler = "asha"
[scheduler]
grace = 1
max_t = 3
reduction = 3
[params]
"optim.lr" = {{ type = "grid", values = [1e-6, 2e-6, 0.01] }}
)",
                              name));
    auto s = run_fake(r);
    unsetenv("FAKE_TRAIN_FAIL_LR");
    unsetenv("FAKE_TRAIN_FAIL_EPOCH");
    return s;
}

// Found by review: a trial that failed (killed after a good first epoch) held the rung's only
// promotion place, and no trial was promoted.
TEST(Executor, AFailedTrialTakesNoPromotionPlace) {
    StudyRun r;
    auto s = run_with_failing_best(r, "failed-top", "1");  // it tops rung 0, then fails
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 1);
    EXPECT_EQ(s->completed, 1) << "the best trial that did not fail goes on to max_t";
    auto st = open_db(r);
    const auto trials = *st->trials();  // (a range-for over *st->trials() read a destroyed temporary)
    for (const auto& t : trials)
        if (t.params.at("optim.lr") == "2e-06") {
            EXPECT_EQ(t.epochs, 3) << "trial " << t.id;
        }
}

// ... but one promoted from the rung that fails at the next has had its place: the rung's next
// best is not promoted after it (the rung promoted more than 1/reduction).
TEST(Executor, ATrialThatFailsAfterItsPromotionKeepsItsPlace) {
    StudyRun r;
    auto s = run_with_failing_best(r, "failed-promoted", "2");  // promoted from rung 0, fails at epoch 2
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 1);
    EXPECT_EQ(s->completed, 0) << "rung 0 of 3 promotes one trial, and it was the one that failed";
    auto st = open_db(r);
    const auto trials = *st->trials();  // (a range-for over *st->trials() read a destroyed temporary)
    for (const auto& t : trials)
        if (t.params.at("optim.lr") != "0.01") {
            EXPECT_EQ(t.epochs, 1) << "trial " << t.id;
        }
}

// Found by review: a promotion study of fewer trials than a rung needs ended with every trial
// paused at rung 0, none trained to max_t, and nothing said so.
TEST(Executor, AStudyTooSmallToPromoteSaysSo) {
    auto r = fake_study("too-small", "grace = 1\nmax_t = 3\nreduction = 3", "trials = 2\nparallel = 1\nscheduler = \"asha\"");
    testing::internal::CaptureStderr();
    auto s = run_fake(r);
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->completed, 0);
    EXPECT_NE(err.find("no trial trained to max_t = 3 epochs: 2 trial(s) wait paused at a rung"), std::string::npos) << err;
    auto big = fake_study("big-enough", "grace = 1\nmax_t = 3\nreduction = 3", "trials = 3\nparallel = 1\nscheduler = \"asha\"");
    testing::internal::CaptureStderr();
    ASSERT_TRUE(run_fake(big).is_ok());
    EXPECT_EQ(testing::internal::GetCapturedStderr().find("no trial trained"), std::string::npos);
}

// Found by review: a trial killed by a signal (the kernel's OOM killer, kill -9) failed with
// "exit 137", read as the trainer's own exit status.
TEST(Executor, ATrialKilledByASignalFailsSayingSo) {
    setenv("FAKE_TRAIN_FAIL_SIGNAL", "9", 1);
    StudyRun r;
    auto s = run_with_failing_best(r, "killed", "1");
    unsetenv("FAKE_TRAIN_FAIL_SIGNAL");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 1);
    auto st = open_db(r);
    const auto trials = *st->trials();
    for (const auto& t : trials)
        if (t.state == TrialState::kFailed) {
            EXPECT_EQ(t.error.rfind("killed by signal 9 (Killed): out of memory (the kernel's OOM killer), or kill -9", 0),
                      0u)
                << t.error;
        }
}

// Follow-up of the review: a trial that hangs (a dead NFS read, a deadlocked data loader) and
// never reports held `tune run` for ever. With [study] trial_timeout it gets SIGTERM, which the
// hung fake trainer ignores, then SIGKILL after the grace; it is failed saying why, and the study
// goes on and ends.
TEST(Executor, AHungTrialIsStoppedAfterTheTrialTimeoutAndFailed) {
    setenv("FAKE_TRAIN_HANG_RUN", "trial-0001", 1);
    auto r = fake_study("hung", "max_t = 2", "trials = 2\nparallel = 2\nscheduler = \"fifo\"\ntrial_timeout = \"2s\"");
    EXPECT_EQ(r.cfg.trial_timeout_s, 2.0);
    RunOptions o;
    o.dir = r.dir;
    o.strato_binary = FAKE_TRAIN;
    o.quiet = true;
    o.stop_grace_s = 0.5;
    auto s = run_study(r.cfg, o);
    unsetenv("FAKE_TRAIN_HANG_RUN");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 1);
    EXPECT_EQ(s->completed, 1);
    auto st = open_db(r);
    const auto trials = *st->trials();
    ASSERT_EQ(trials.size(), 2u);
    EXPECT_EQ(trials[0].state, TrialState::kFailed);
    EXPECT_EQ(trials[0].error.rfind("stopped after 2s ([study] trial_timeout) without finishing", 0), 0u)
        << trials[0].error;
    EXPECT_EQ(trials[1].state, TrialState::kCompleted) << trials[1].error;
    // The limit is no part of the study's identity: another one reads (and continues) the same study.
    StudyRun longer = r;
    longer.cfg.trial_timeout_s = 7200;
    longer.cfg.trial_timeout = "2h";
    EXPECT_TRUE(study_json(longer.cfg, r.dir).is_ok());
    auto again = run_fake(longer);
    ASSERT_TRUE(again.is_ok()) << again.status().message();
}

// Follow-up: without a trial_timeout, a trial that ignored the SIGTERM of a Ctrl-C (or of the
// scheduler's stop) held the tuner forever. SIGKILL follows after the grace, and a trial so
// killed by the tuner's own shutdown is given up for the next run, not failed.
TEST(Executor, ATrialThatIgnoresTheStopIsKilledAfterTheGraceAndNotFailed) {
    setenv("FAKE_TRAIN_HANG_RUN", "trial-0001", 1);
    auto r = fake_study("hung_stop", "max_t = 2", "trials = 1\nparallel = 1\nscheduler = \"fifo\"");
    signals::install_stop_handlers();
    signals::reset();
    std::thread stopper([dir = r.dir] {
        for (int i = 0; i < 12000; ++i) {
            auto m = fs::read_file(dir + "/trials/trial-0001/metrics.jsonl");
            if (m && m->find("\"eval\"") != std::string::npos) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        kill(getpid(), SIGTERM);
    });
    RunOptions o;
    o.dir = r.dir;
    o.strato_binary = FAKE_TRAIN;
    o.quiet = true;
    o.stop_grace_s = 0.5;
    auto s = run_study(r.cfg, o);
    stopper.join();
    unsetenv("FAKE_TRAIN_HANG_RUN");
    signals::reset();
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().code(), StatusCode::kCancelled) << s.status().message();
    auto st = open_db(r);
    const auto trials = *st->trials();
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].state, TrialState::kRunning) << trials[0].error;
    EXPECT_EQ(trials[0].owner, "") << "a trial the tuner's own shutdown killed is given up for the next executor";
}

TEST(Space, TrialTimeoutIsADuration) {
    const std::string head = "[study]\nbase = \"configs/fashion_mnist_mlp.toml\"\n";
    const std::string lr = "[params]\n\"optim.lr\" = { type = \"uniform\", low = 0.1, high = 1 }\n";
    auto none = StudyConfig::parse(head + lr, "study.toml", STRATO_SOURCE_DIR);
    ASSERT_TRUE(none.is_ok()) << none.status().message();
    EXPECT_EQ(none->trial_timeout_s, 0.0);
    auto ok = StudyConfig::parse(head + "trial_timeout = \"1h30m\"\n" + lr, "study.toml", STRATO_SOURCE_DIR);
    ASSERT_TRUE(ok.is_ok()) << ok.status().message();
    EXPECT_EQ(ok->trial_timeout_s, 5400.0);
    EXPECT_EQ(ok->trial_timeout, "1h30m");
    for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
             {"trial_timeout = 7200\n", "study.toml [study]: trial_timeout must be a duration string such as \"2h\""},
             {"trial_timeout = \"2 hours\"\n", "study.toml [study] trial_timeout"},
             {"trial_timeout = \"-1h\"\n", "expected a number with a unit"}}) {
        auto bad = StudyConfig::parse(head + text + lr, "study.toml", STRATO_SOURCE_DIR);
        ASSERT_FALSE(bad.is_ok()) << text;
        EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().message();
    }
}

// Follow-up of the review: `tune best` picked the best trial with its own copy of the selection,
// which could disagree with export-best's. Both use best_trial now: the failed trial with the best
// value (lr 0.01) is neither's choice.
TEST(Executor, BestAndExportBestAgree) {
    StudyRun r;
    auto s = run_with_failing_best(r, "best-agree", "1");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    auto best = best_trial_json(r.cfg, r.dir);
    ASSERT_TRUE(best.is_ok()) << best.status().message();
    EXPECT_NE((*best)["state"], "failed");
    auto text = best_config(r.cfg, r.dir);
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    EXPECT_NE(text->find("(" + (*best)["name"].get<std::string>() + ":"), std::string::npos) << *text;
    ASSERT_TRUE(s->best);
    EXPECT_EQ(s->best->id, (*best)["id"].get<int>());
    auto json = study_json(r.cfg, r.dir);
    ASSERT_TRUE(json.is_ok());
    for (const auto& t : (*json)["trials"])
        if (t["id"] == (*best)["id"]) {
            EXPECT_EQ(t, *best);
        }
}

// Follow-up of the review: export-best -o trials/trial-0001/metrics.jsonl replaced a trial's
// metrics (text, so the output check let it through).
TEST(Executor, AnOutputAmongTheStudysOwnFilesIsRefused) {
    auto r = fake_study("own-files", "max_t = 1", "trials = 1\nscheduler = \"fifo\"");
    ASSERT_TRUE(run_fake(r).is_ok());
    const std::string metrics = r.dir + "/trials/trial-0001/metrics.jsonl";
    const std::string link = r.dir + "-link.toml";
    std::filesystem::remove(link);
    std::filesystem::create_symlink(metrics, link);
    for (const std::string& out : {metrics, r.dir + "/trials/new.toml", r.dir + "/logs/trial-0001.log", link,
                                   r.dir + "/./trials/../trials/trial-0001/x.toml"}) {
        Status st = check_study_output(r.dir, out, "--out");
        ASSERT_FALSE(st.is_ok()) << out;
        EXPECT_NE(st.message().find("--out " + out + ": inside " + r.dir + "/"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("which the study owns"), std::string::npos) << st.message();
    }
    for (const char* db : {"/study.db", "/study.db-wal"}) {
        Status st = check_study_output(r.dir, r.dir + db, "--out");
        ASSERT_FALSE(st.is_ok()) << db;
        EXPECT_NE(st.message().find("that is the study's database"), std::string::npos) << st.message();
    }
    for (const std::string& out : {r.dir + "/best.toml", r.dir + "-best.toml", std::string("-"), r.dir + "/trialsX.toml"})
        EXPECT_TRUE(check_study_output(r.dir, out, "--out").is_ok()) << out;
    std::filesystem::remove(link);
}

// Found by review: the median rule counted a failed trial's values. Grid trials one at a time,
// median from epoch 1 (max_t 3); acc at epoch 1 = 0.6 - 0.1 |log10(lr) + 2| (fake_train.py):
//   trial 1, lr 0.01:    0.6, then it crashes (exit 1);
//   trial 2, lr 1e-5:    0.3 (the only other at epoch 1 is trial 1: no decision);
//   trial 3, lr 1e-3:    0.5 (others 0.3 and, not counted, 0.6);
//   trial 4, lr 10^-3.5: 0.45, above the median 0.4 of trials 2 and 3, but below 0.5 with the
//   failed trial's 0.6: it was stopped at epoch 1 by a trial that never finished.
TEST(Executor, TheMedianRuleLeavesFailedTrialsOut) {
    setenv("FAKE_TRAIN_FAIL_LR", "0.01", 1);
    setenv("FAKE_TRAIN_FAIL_EPOCH", "1", 1);
    StudyRun r;
    r.dir = testing::TempDir() + "/tune_exec_median_failed";
    std::filesystem::remove_all(r.dir);
    r.cfg = study(R"([study]
name = "median_failed"
base = "configs/fashion_mnist_mlp.toml"
trials = 4
parallel = 1
sampler = "grid"
scheduler = "median"
[scheduler]
grace = 1
max_t = 3
[params]
"optim.lr" = { type = "grid", values = [0.01, 1e-5, 1e-3, 3.1622776601683794e-4] }
)");
    auto s = run_fake(r);
    unsetenv("FAKE_TRAIN_FAIL_LR");
    unsetenv("FAKE_TRAIN_FAIL_EPOCH");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 1);
    auto st = open_db(r);
    const auto trials = *st->trials();
    ASSERT_EQ(trials.size(), 4u);
    EXPECT_EQ(trials[0].state, TrialState::kFailed);
    EXPECT_EQ(trials[3].state, TrialState::kCompleted) << "stopped at epoch " << trials[3].epochs;
    EXPECT_EQ(trials[3].epochs, 3);
}

// Found by review: a trial whose trainer wrote its evaluations at fractional epochs only (the
// trainer's "partial": true lines when train.max_steps ends an epoch) ended "completed" with no
// result and no word why. The study check refuses train.max_steps now; a trainer (or a user's
// script) that still reports no whole epoch fails the trial, saying so.
TEST(Executor, ATrialWithNoWholeEpochResultFailsSayingWhy) {
    setenv("FAKE_TRAIN_PARTIAL", "1", 1);
    auto r = fake_study("partial", "max_t = 2", "trials = 1\nparallel = 1\nscheduler = \"fifo\"");
    auto s = run_fake(r);
    unsetenv("FAKE_TRAIN_PARTIAL");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 1);
    EXPECT_EQ(s->completed, 0);
    auto st = open_db(r);
    const auto trials = *st->trials();
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_NE(trials[0].error.find("exited 0 without reporting test_acc at a whole epoch"), std::string::npos)
        << trials[0].error;
}

// Found by review: with the strato binary gone, every trial "failed (exit 127)" with an empty
// log, for good. Now the run stops with the reason and the trial waits for the next run.
TEST(Executor, ATrialThatCannotStartStopsTheRunAndIsNotFailed) {
    auto r = fake_study("cannot-start", "max_t = 2", "trials = 2\nparallel = 1\nscheduler = \"fifo\"");
    RunOptions o;
    o.dir = r.dir;
    o.strato_binary = r.dir + "/no-such-strato";
    o.quiet = true;
    auto s = run_study(r.cfg, o);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.status().message().find("cannot start trial-0001: " + o.strato_binary + ": No such file or directory"),
              std::string::npos)
        << s.status().message();
    {
        auto st = open_db(r);
        auto trials = *st->trials();
        ASSERT_EQ(trials.size(), 1u);
        EXPECT_EQ(trials[0].state, TrialState::kRunning);
        EXPECT_EQ(trials[0].owner, "");
    }
    auto again = run_fake(r);
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ(again->completed, 2);
    EXPECT_EQ(again->failed, 0);

    // With trials running beside it (found by review: they were stopped, then stored as failed
    // "exit 130"): the binary goes away while two trials run; the third cannot start, the other
    // running one stops at a checkpoint and is given up, none fails.
    setenv("FAKE_TRAIN_EPOCH_S", "0.1", 1);
    setenv("FAKE_TRAIN_SLOW_RUN", "trial-0002", 1);  // still running when trial 3 cannot start
    auto p = fake_study("cannot-start-2", "max_t = 6", "trials = 3\nparallel = 2\nscheduler = \"fifo\"");
    const std::string binary = p.dir + "-fake_train.py";
    std::filesystem::copy_file(FAKE_TRAIN, binary, std::filesystem::copy_options::overwrite_existing);
    std::thread remover([&] {
        // once both first trials have an epoch (they run), the binary goes
        for (int i = 0; i < 12000; ++i) {
            auto a = fs::read_file(p.dir + "/trials/trial-0001/metrics.jsonl");
            auto b = fs::read_file(p.dir + "/trials/trial-0002/metrics.jsonl");
            if (a && b && a->find("eval") != std::string::npos && b->find("eval") != std::string::npos) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        std::filesystem::remove(binary);
    });
    RunOptions o2;
    o2.dir = p.dir;
    o2.strato_binary = binary;
    o2.quiet = true;
    auto stopped = run_study(p.cfg, o2);
    remover.join();
    unsetenv("FAKE_TRAIN_EPOCH_S");
    unsetenv("FAKE_TRAIN_SLOW_RUN");
    ASSERT_FALSE(stopped.is_ok());
    EXPECT_NE(stopped.status().message().find("cannot start trial-0003"), std::string::npos) << stopped.status().message();
    auto st = open_db(p);
    auto trials = *st->trials();
    ASSERT_EQ(trials.size(), 3u);
    for (const auto& t : trials) EXPECT_NE(t.state, TrialState::kFailed) << "trial " << t.id << ": " << t.error;
    EXPECT_EQ(trials[1].state, TrialState::kRunning);  // stopped at a checkpoint, for the next run
    EXPECT_LT(trials[1].epochs, 6);
}

// Found by review: the base train config's contents and the [tpe] settings were no part of the
// study's identity, so resuming after editing either mixed trials of two setups in one study
// (and TPE learnt from both). Now the directory refuses, naming what changed; the definition's
// own changes are named too.
TEST(Executor, ResumingAfterTheBaseConfigOrTheTpeSettingsChangedIsRefused) {
    const std::string dir =
        (std::filesystem::path(testing::TempDir()) / "tune_exec_identity").lexically_normal().string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string base = dir + "/base.toml";
    const std::string original = *fs::read_file(std::string(STRATO_SOURCE_DIR) + "/configs/fashion_mnist_mlp.toml");
    ASSERT_TRUE(fs::atomic_write(base, original).is_ok());
    const auto make = [&](const std::string& extra_study, const std::string& tpe, int max_t) {
        StudyRun r;
        r.dir = dir + "/study";
        r.cfg =
            study(fmt::format("[study]\nname = \"identity\"\nbase = \"{}\"\nsampler = \"tpe\"\nscheduler = \"fifo\"\n"
                              "trials = 2\n{}\n[tpe]\n{}\n[scheduler]\nmax_t = {}\n[params]\n"
                              "\"optim.lr\" = {{ type = \"loguniform\", low = 1e-4, high = 1 }}\n",
                              base, extra_study, tpe, max_t));
        return r;
    };
    StudyRun r = make("", "startup_trials = 5", 1);
    auto first = run_fake(r);
    ASSERT_TRUE(first.is_ok()) << first.status().message();
    EXPECT_EQ(first->completed, 2);

    // The base config edited (a real setting): run, status and export-best refuse.
    std::string edited = original;
    const size_t at = edited.find("lr = 1e-3");
    ASSERT_NE(at, std::string::npos);
    edited.replace(at, 9, "lr = 5e-3");
    ASSERT_TRUE(fs::atomic_write(base, edited).is_ok());
    StudyRun more = make("", "startup_trials = 5", 1);
    more.cfg.trials = 3;
    auto again = run_fake(more);
    ASSERT_FALSE(again.is_ok());
    EXPECT_NE(again.status().message().find("other contents of the base train config " + base), std::string::npos)
        << again.status().message();
    EXPECT_NE(again.status().message().find("was 'lr = 1e-3', now 'lr = 5e-3'"), std::string::npos)
        << again.status().message();
    EXPECT_NE(again.status().message().find("hint: restore it"), std::string::npos) << again.status().message();
    EXPECT_FALSE(leaderboard(more.cfg, more.dir, 10).is_ok());
    EXPECT_FALSE(best_config(more.cfg, more.dir).is_ok());
    EXPECT_EQ(open_db(r)->trials()->size(), 2u) << "no trial was started";

    // Restored, the TPE settings changed: refused, naming them with both values.
    ASSERT_TRUE(fs::atomic_write(base, original).is_ok());
    StudyRun tpe = make("", "startup_trials = 5\ncandidates = 12", 1);
    auto tpe_run = run_fake(tpe);
    ASSERT_FALSE(tpe_run.is_ok());
    EXPECT_NE(tpe_run.status().message().find("[tpe] candidates (was 24, now 12) changed"), std::string::npos)
        << tpe_run.status().message();

    // The definition changed: the message names the key (it said only "[study], [scheduler] or
    // [params] changed").
    auto longer = run_fake(make("", "startup_trials = 5", 2));
    ASSERT_FALSE(longer.is_ok());
    EXPECT_NE(longer.status().message().find("holds a different study: [scheduler] max_t (was 1, now 2) changed"),
              std::string::npos)
        << longer.status().message();

    // A study recorded before these parts existed takes up the current ones; then it holds them.
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open((r.dir + "/study.db").c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, "DELETE FROM meta WHERE key IN ('base_config', 'tpe')", nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(db);
    }
    StudyRun extended = make("", "startup_trials = 5", 1);
    extended.cfg.trials = 3;  // the number of trials is no part of the identity: raising it extends the study
    auto resumed = run_fake(extended);
    ASSERT_TRUE(resumed.is_ok()) << resumed.status().message();
    EXPECT_EQ(resumed->trials, 3);
    EXPECT_EQ(*open_db(r)->meta("base_config"), std::optional<std::string>(original));
    EXPECT_FALSE(run_fake(tpe).is_ok());
}

// Found by review: a study resumed with its space changed said only "[params] changed", leaving the
// reader to find which of its parameters; it names each one now, as the study file says it.
TEST(Executor, AChangedSpaceNamesTheParameters) {
    auto r = fake_study("space_changed", "max_t = 1", "trials = 1\nscheduler = \"fifo\"");
    auto first = run_fake(r);
    ASSERT_TRUE(first.is_ok()) << first.status().message();
    StudyRun changed = r;
    changed.cfg = study(R"([study]
name = "space_changed"
base = "configs/fashion_mnist_mlp.toml"
seed = 3
trials = 1
scheduler = "fifo"
sampler = "random"
[scheduler]
max_t = 1
[params]
"optim.lr" = { type = "loguniform", low = 1e-4, high = 0.5 }
"model.width" = { type = "int", low = 32, high = 64, q = 32 }
)");
    auto again = run_fake(changed);
    ASSERT_FALSE(again.is_ok());
    EXPECT_NE(again.status().message().find("holds a different study: [params] \"model.width\" (was absent, now int "
                                            "[32, 64] q 32), [params] \"optim.lr\" (was loguniform [0.0001, 1], now "
                                            "loguniform [0.0001, 0.5]) changed since it started"),
              std::string::npos)
        << again.status().message();
}

// The base config edited while the study runs: the next trial would read the new file (a trial
// reads it when it starts or resumes). The trial does not start; the running ones stop at a
// checkpoint; the next run names the change.
TEST(Executor, ABaseConfigEditedWhileTheStudyRunsStartsNoMoreTrials) {
    const std::string dir =
        (std::filesystem::path(testing::TempDir()) / "tune_exec_identity_live").lexically_normal().string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string base = dir + "/base.toml";
    const std::string original = *fs::read_file(std::string(STRATO_SOURCE_DIR) + "/configs/fashion_mnist_mlp.toml");
    ASSERT_TRUE(fs::atomic_write(base, original).is_ok());
    StudyRun r;
    r.dir = dir + "/study";
    r.cfg =
        study(fmt::format("[study]\nname = \"live\"\nbase = \"{}\"\nsampler = \"random\"\nscheduler = \"fifo\"\n"
                          "trials = 3\nparallel = 1\n[scheduler]\nmax_t = 3\n[params]\n"
                          "\"optim.lr\" = {{ type = \"loguniform\", low = 1e-4, high = 1 }}\n",
                          base));
    setenv("FAKE_TRAIN_EPOCH_S", "0.2", 1);
    std::thread editor([&] {
        for (int i = 0; i < 12000; ++i) {  // once the first trial has an epoch
            auto m = fs::read_file(r.dir + "/trials/trial-0001/metrics.jsonl");
            if (m && m->find("\"eval\"") != std::string::npos) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        (void)fs::atomic_write(base, original + "# edited\n");
    });
    auto s = run_fake(r);
    editor.join();
    unsetenv("FAKE_TRAIN_EPOCH_S");
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.status().message().find("cannot start trial-0002: the base train config " + base + " changed"),
              std::string::npos)
        << s.status().message();
    {
        auto st = open_db(r);
        auto trials = *st->trials();
        ASSERT_EQ(trials.size(), 2u);
        EXPECT_EQ(trials[1].state, TrialState::kRunning) << "given up for the next run, not failed";
        EXPECT_EQ(trials[1].owner, "");
    }
    auto again = run_fake(r);
    ASSERT_FALSE(again.is_ok());
    const auto added_line = std::count(original.begin(), original.end(), '\n') + 1;
    EXPECT_NE(again.status().message().find(fmt::format("line {} was '<end of file>', now '# edited'", added_line)),
              std::string::npos)
        << again.status().message();
    ASSERT_TRUE(fs::atomic_write(base, original).is_ok());
    auto restored = run_fake(r);
    ASSERT_TRUE(restored.is_ok()) << restored.status().message();
    EXPECT_EQ(restored->completed, 3);
}

// Found by review: a trial the scheduler stopped was marked stopped only once it had exited. A
// study killed meanwhile (the trial finishing its step and checkpointing) resumed it, and since
// the scheduler does not judge recorded epochs again, it trained on to max_t. Now the decision
// is committed with the result that made it.
TEST(Executor, AStopDecisionSurvivesAKillOfTheExecutor) {
    setenv("FAKE_TRAIN_EPOCH_S", "0.05", 1);
    auto r = fake_study("stop-kill", "grace = 1\nmax_t = 9\nreduction = 2\nvariant = \"stopping\"",
                        "trials = 8\nparallel = 2\nscheduler = \"asha\"");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(run_fake(r).is_ok() ? 0 : 1);
    // Wait for a trial stopped in the store whose process has not yet checkpointed and exited
    // (fake_train.py writes its "interrupted" line on the way out, 0.3 s after the signal).
    int victim = 0;
    for (int i = 0; i < 6000 && victim == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        auto ro = Store::open_read_only(r.dir + "/study.db");
        if (!ro.is_ok()) continue;
        auto trials = (*ro)->trials();
        if (!trials.is_ok()) continue;
        for (const auto& t : *trials) {
            if (t.state != TrialState::kStopped || t.epochs >= 9) continue;  // (not one that ran to max_t anyway)
            auto m = fs::read_file(r.dir + fmt::format("/trials/trial-{:04d}/metrics.jsonl", t.id));
            if (m && m->find("interrupted") == std::string::npos) victim = t.id;
        }
        int status = 0;
        if (victim == 0 && waitpid(child, &status, WNOHANG) == child) break;  // finished: never caught
    }
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    unsetenv("FAKE_TRAIN_EPOCH_S");
    ASSERT_NE(victim, 0) << "no trial was ever stopped in the store while it still ran";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // (its trials die with it: PDEATHSIG)
    auto s = run_fake(r);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    auto st = open_db(r);
    const auto trials = *st->trials();  // (a range-for over *st->trials() read a destroyed temporary)
    for (const auto& t : trials)
        if (t.id == victim) {
            EXPECT_EQ(t.state, TrialState::kStopped);
            EXPECT_LT(t.epochs, 9) << "the stopped trial was resumed and trained to max_t";
        }
    expect_contiguous_results(r);
}

TEST(Executor, ShutdownStopsTrialsOnceAndTheNextRunFinishes) {
    setenv("FAKE_TRAIN_EPOCH_S", "0.3", 1);
    auto r = fake_study("shutdown", "grace = 1\nmax_t = 6\nreduction = 2", "trials = 4\nparallel = 2\nscheduler = \"fifo\"");
    signals::install_stop_handlers();
    signals::reset();
    // The signal comes once both running trials have finished an epoch (so they have installed
    // their handlers and have 5 epochs, 1.5 s, left), not after a fixed time that a loaded
    // machine may spend starting them.
    std::thread stopper([dir = r.dir] {
        auto running = [&] {
            int n = 0;
            std::error_code ec;
            for (const auto& e : std::filesystem::directory_iterator(dir + "/trials", ec)) {
                auto m = fs::read_file(e.path().string() + "/metrics.jsonl");
                n += m && m->find("\"eval\"") != std::string::npos;
            }
            return n;
        };
        for (int i = 0; i < 12000 && running() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        kill(getpid(), SIGTERM);
    });
    auto first = run_fake(r);
    stopper.join();
    ASSERT_FALSE(first.is_ok());
    EXPECT_EQ(first.status().code(), StatusCode::kCancelled) << first.status().message();
    {
        auto st = open_db(r);
        auto trials = *st->trials();
        for (const auto& t : trials) {
            EXPECT_EQ(t.state, TrialState::kRunning) << "trial " << t.id << ": " << t.error;
            EXPECT_EQ(t.owner, "") << "an interrupted trial is given up for the next executor";
            EXPECT_LT(t.epochs, 6);
            auto metrics = fs::read_file(r.dir + fmt::format("/trials/trial-{:04d}/metrics.jsonl", t.id));
            EXPECT_TRUE(metrics && metrics->find("interrupted") != std::string::npos)
                << "trial " << t.id << " was killed by a second signal instead of stopping at a checkpoint";
        }
    }
    // status says so: no process runs them (it said "2 running").
    auto board = leaderboard(r.cfg, r.dir, 10);
    ASSERT_TRUE(board.is_ok()) << board.status().message();
    EXPECT_NE(board->find(" interrupted"), std::string::npos) << *board;
    EXPECT_EQ(board->find(" running"), std::string::npos) << *board;
    signals::reset();
    auto second = run_fake(r);
    unsetenv("FAKE_TRAIN_EPOCH_S");
    ASSERT_TRUE(second.is_ok()) << second.status().message();
    EXPECT_EQ(second->trials, 4);
    EXPECT_EQ(second->completed, 4);
    EXPECT_EQ(second->epochs_trained, 24);
    expect_contiguous_results(r);
}

TEST(Executor, TwoExecutorsShareOneStudy) {
    setenv("FAKE_TRAIN_EPOCH_S", "0.03", 1);
    auto r = fake_study("shared", "grace = 1\nmax_t = 9\nreduction = 3",
                        "trials = 12\nparallel = 2\nscheduler = \"asha\"\nsampler = \"tpe\"");
    std::vector<pid_t> kids;
    for (int i = 0; i < 2; ++i) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            auto s = run_fake(r);
            if (!s.is_ok()) fmt::print(stderr, "executor {}: {}\n", i, s.status().message());
            _exit(s.is_ok() ? 0 : 1);
        }
        kids.push_back(pid);
    }
    for (pid_t k : kids) {
        int status = 0;
        ASSERT_EQ(waitpid(k, &status, 0), k);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    unsetenv("FAKE_TRAIN_EPOCH_S");
    auto j = *study_json(r.cfg, r.dir);
    ASSERT_EQ(j["trials"].size(), 12u);
    std::set<std::string> params;
    for (const auto& t : j["trials"]) {
        EXPECT_NE(t["state"], "running");
        EXPECT_NE(t["state"], "failed");
        params.insert(t["params"].dump());
    }
    EXPECT_EQ(params.size(), 12u) << "two executors proposed the same trial";
    EXPECT_EQ(j["rungs"][0]["entries"], 12);
    // ASHA's arithmetic holds across executors. Not as fixed counts: asynchronous ASHA (Li et al.
    // 2020, get_job) promotes the not-yet-promoted best floor(n/3) of the n entries a rung has *so
    // far*, so when a better trial arrives after a promotion, both are promoted, and how many are
    // depends on the order the trials reach the rung (CI under load saw rung 0 promote 5 of 12 and
    // rung 1 promote 2 of 4, each a correct decision). What holds in every order, and what a
    // promotion made on stale state or made twice would break:
    const auto& ms = r.cfg.milestones();
    for (int k = 0; k + 1 < static_cast<int>(ms.size()); ++k) {
        auto rung = rung_in_arrival_order(r, k);
        const size_t keep = rung.size() / 3;
        std::set<int> promoted, top;
        for (size_t i = 0; i < rung.size(); ++i) {
            if (!rung[i].promoted) continue;
            promoted.insert(rung[i].trial);
            // a promotion is made from the rung as it stood at some moment: among the first m
            // arrivals (m at least this entry's own place), this one was in the best floor(m/3).
            bool justified = false;
            for (size_t m = i + 1; m <= rung.size() && !justified; ++m) {
                size_t better = 0;
                for (size_t o = 0; o < m; ++o) better += r.cfg.better(rung[o].value, rung[i].value);
                justified = better < m / 3;
            }
            EXPECT_TRUE(justified) << "rung " << k << ": trial " << rung[i].trial
                                   << " was never in the best third of the rung, yet promoted";
        }
        // the best floor(n/3) of the full rung are all promoted in the end ...
        auto sorted = rung;
        std::stable_sort(sorted.begin(), sorted.end(),
                         [&](const Arrival& a, const Arrival& b) { return r.cfg.better(a.value, b.value); });
        for (size_t i = 0; i < keep; ++i) top.insert(sorted[i].trial);
        for (int t : top) EXPECT_TRUE(promoted.count(t)) << "rung " << k << ": trial " << t << " is in the top third, not promoted";
        // ... and exactly the promoted trials reached the next milestone.
        std::set<int> next;
        for (const auto& t : j["trials"])
            if (t["epochs"].get<int>() >= ms[static_cast<size_t>(k) + 1]) next.insert(t["id"].get<int>());
        EXPECT_EQ(next, promoted) << "rung " << k << ": the trials that went on are not the ones promoted";
    }
    expect_contiguous_results(r);
    expect_each_epoch_trained_once(r);
}

TEST(Executor, MemoryLimitKillsATrialThroughItsCgroup) {
    if (Status s = cgroup::Group::available(); !s.is_ok()) GTEST_SKIP() << s.message();
    setenv("FAKE_TRAIN_ALLOC_MB", "256", 1);
    auto r = fake_study("memory", "max_t = 2", "trials = 1\nscheduler = \"fifo\"\nmemory_limit_gb = 0.0625\ncpus_per_trial = 1");
    auto s = run_fake(r);
    unsetenv("FAKE_TRAIN_ALLOC_MB");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->failed, 1);
    auto st = open_db(r);
    auto t = (*st->trials())[0];
    EXPECT_NE(t.error.find("killed by the memory limit (cgroup"), std::string::npos) << t.error;
}

TEST(Executor, SlurmArrayScriptAndSharedJournal) {
    auto r = fake_study("slurm", "grace = 1\nmax_t = 9", "trials = 6\nthreads_per_trial = 2\nmemory_limit_gb = 1.5");
    SlurmOptions o;
    o.study_file = "study's.toml";
    o.dir = r.dir;
    o.strato_binary = "/opt/strato/bin/strato";
    o.tasks = 3;
    o.parallel = 2;
    o.time = "01:00:00";
    o.extra = {"--gres=gpu:1"};
    auto script = slurm_array(r.cfg, o);
    ASSERT_TRUE(script.is_ok()) << script.status().message();
    for (const char* want : {"#SBATCH --array=0-2\n", "#SBATCH --cpus-per-task=4\n", "#SBATCH --time=01:00:00\n",
                             "#SBATCH --mem=4G\n", "#SBATCH --gres=gpu:1\n", "export OMP_NUM_THREADS=2\n",
                             "exec '/opt/strato/bin/strato' tune run ", "'\\''s.toml' --dir '", "--parallel 2\n"})
        EXPECT_NE(script->find(want), std::string::npos) << want << " not in:\n" << *script;
    EXPECT_EQ(*open_db(r)->journal(), "delete");
    o.tasks = 0;
    EXPECT_FALSE(slurm_array(r.cfg, o).is_ok());
    // Found by review: --cpus-per-task=-2147483648 and --parallel 1073741824 (which tune run refuses).
    o.tasks = 3;
    o.parallel = 1073741824;
    auto huge = slurm_array(r.cfg, o);
    ASSERT_FALSE(huge.is_ok());
    EXPECT_NE(huge.status().message().find("--task-parallel in 1..4096, got 3 and 1073741824"), std::string::npos)
        << huge.status().message();
    o.parallel = 4096;
    auto most = slurm_array(r.cfg, o);
    ASSERT_TRUE(most.is_ok()) << most.status().message();
    EXPECT_NE(most->find("#SBATCH --cpus-per-task=8192\n"), std::string::npos) << *most;
    EXPECT_NE(most->find("#SBATCH --mem=6145G\n"), std::string::npos) << *most;
    // Found by review: a newline in --partition ended the #SBATCH block and ran the rest in the
    // shell; --sbatch took any word; a memory limit of 1e30 GB wrote --mem=-9223372036854775807G.
    o.parallel = 2;
    const std::string journal_before = *open_db(r)->journal();
    const std::tuple<std::string SlurmOptions::*, std::string, const char*> bad[] = {
        {&SlurmOptions::partition, "debug\ntouch /tmp/x", "--partition 'debug\\x0atouch /tmp/x': must be one word: it holds the control character 0x0a"},
        {&SlurmOptions::partition, "a b", "--partition 'a b': must be one word: it holds a blank"},
        {&SlurmOptions::account, "acct\r", "--account 'acct\\x0d'"},
        {&SlurmOptions::time, "bogus", "--time 'bogus': expected a Slurm time limit"},
        {&SlurmOptions::time, "1:2:3:4", "expected a Slurm time limit"},
        {&SlurmOptions::mem, "lots", "--mem 'lots': expected a Slurm memory size"},
        {&SlurmOptions::mem, "4G\n#SBATCH --x", "the control character 0x0a"},
        {&SlurmOptions::account, "it's", "without quotes"},
    };
    for (const auto& [field, value, needle] : bad) {
        SlurmOptions b = o;
        b.*field = value;
        auto refused = slurm_array(r.cfg, b);
        ASSERT_FALSE(refused.is_ok()) << value;
        EXPECT_NE(refused.status().message().find(needle), std::string::npos) << refused.status().message();
    }
    for (const std::string& extra : std::vector<std::string>{"not-an-option", "--gres=gpu:1\ntouch /tmp/x", "-"}) {
        SlurmOptions b = o;
        b.extra = {"--exclusive", extra};
        auto refused = slurm_array(r.cfg, b);
        ASSERT_FALSE(refused.is_ok()) << extra;
        EXPECT_NE(refused.status().message().find("--sbatch '"), std::string::npos) << refused.status().message();
    }
    for (const char* time : {"30", "04:00:00", "1-00", "2-12:30:00", "unlimited"})
        EXPECT_TRUE(check_sbatch_value("--time", time, SbatchValue::kTime).is_ok()) << time;
    for (const char* mem : {"0", "16G", "4096", "2t"})
        EXPECT_TRUE(check_sbatch_value("--mem", mem, SbatchValue::kMemory).is_ok()) << mem;
    EXPECT_TRUE(check_sbatch_value("--sbatch", "--comment=two words", SbatchValue::kOption).is_ok());
    EXPECT_EQ(*open_db(r)->journal(), journal_before);
    {
        StudyRun big = r;
        big.cfg.memory_limit_gb = 1e30;  // (a parsed study cannot hold it; the script stays sane anyway)
        auto clamped = slurm_array(big.cfg, o);
        ASSERT_TRUE(clamped.is_ok()) << clamped.status().message();
        EXPECT_NE(clamped->find("#SBATCH --mem=2000001G\n"), std::string::npos) << *clamped;
    }
    // Found by review: a newline in the study file's path ended the script's "# Follow it:"
    // comment and ran the rest as a command in every task (sbatch then read no #SBATCH line).
    {
        SlurmOptions b = o;
        b.study_file = "x\ntouch PWNED\n.toml";
        auto refused = slurm_array(r.cfg, b);
        ASSERT_FALSE(refused.is_ok());
        EXPECT_NE(refused.status().message().find("the study file '"), std::string::npos) << refused.status().message();
        EXPECT_NE(refused.status().message().find("\\x0atouch PWNED\\x0a.toml' holds a control character"),
                  std::string::npos)
            << refused.status().message();
        b = o;
        b.study_file = "my study (v2).toml";  // blanks and parentheses are quoted, not refused
        auto quoted = slurm_array(r.cfg, b);
        ASSERT_TRUE(quoted.is_ok()) << quoted.status().message();
        EXPECT_NE(quoted->find("/my study (v2).toml' --dir '"), std::string::npos) << *quoted;
    }
    o.dir = r.dir + " two words";  // (#SBATCH --output cannot carry it)
    auto blank = slurm_array(r.cfg, o);
    ASSERT_FALSE(blank.is_ok());
    EXPECT_NE(blank.status().message().find("holds blanks, quotes or '%'"), std::string::npos) << blank.status().message();
}

}  // namespace
}  // namespace strato::tune
