// End-to-end: the strato binary on bad input (one clear line, non-zero exit) and a small real run.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>
#include <thread>
#include <nlohmann/json.hpp>

#include "proc.h"
#include "strato/core/fs.h"

namespace strato::test {
namespace {
namespace stdfs = std::filesystem;

class Cli : public ::testing::Test {
protected:
    void SetUp() override { dir_ = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
    void TearDown() override { stdfs::remove_all(dir_); }
    std::string write_config(const std::string& text) {
        std::string p = dir_ + "/cfg.toml";
        EXPECT_TRUE(fs::atomic_write(p, text).is_ok());
        return p;
    }
    Output train(const std::string& args) { return run_strato("--quiet train " + args + " --set run.dir=" + dir_ + "/runs", dir_); }
    static void expect_one_error(const Output& o, const std::string& needle) {
        EXPECT_NE(o.code, 0);
        EXPECT_NE(o.err.find("error: "), std::string::npos) << o.err;
        EXPECT_NE(o.err.find(needle), std::string::npos) << "stderr:\n" << o.err << "\nexpected: " << needle;
        EXPECT_EQ(o.err.find("terminate called"), std::string::npos) << o.err;
    }
    std::string dir_;
};

TEST_F(Cli, HelpListsCommands) {
    auto o = run_strato("--help", dir_);
    EXPECT_EQ(o.code, 0);
    for (const char* c : {"train", "eval", "report", "doctor"}) EXPECT_NE(o.out.find(c), std::string::npos) << c;
    o = run_strato("train --help", dir_);
    EXPECT_EQ(o.code, 0);
    EXPECT_NE(o.out.find("--resume"), std::string::npos);
    // Usage errors exit 2 (as argparse tools do), whatever CLI11 calls them; errors strato finds
    // in a value it checks itself exit 1.
    for (const char* bad : {"frobnicate", "train --no-such-flag", "loadtest http://127.0.0.1:1/ --concurrency 0",
                            "loadtest http://127.0.0.1:1/ --tensor-format xml", "train"}) {
        auto u = run_strato(bad, dir_);
        EXPECT_EQ(u.code, 2) << bad << ": " << u.err;
        EXPECT_FALSE(u.err.empty()) << bad;
    }
    EXPECT_EQ(run_strato("train no-such-config.toml", dir_).code, 1);
    // Found by review: no command word printed only "A subcommand is required"; a typo got no
    // suggestion; serve, loadtest and launch with nothing to do exited 1, not 2.
    auto none = run_strato("", dir_);
    EXPECT_EQ(none.code, 2);
    EXPECT_NE(none.err.find("a command is required: train, eval"), std::string::npos) << none.err;
    auto typo = run_strato("trian", dir_);
    EXPECT_EQ(typo.code, 2);
    EXPECT_NE(typo.err.find("'trian' is not a command; did you mean 'train'?"), std::string::npos) << typo.err;
    auto sub = run_strato("tune rn", dir_);
    EXPECT_NE(sub.err.find("did you mean 'run'?"), std::string::npos) << sub.err;
    for (const char* nothing : {"serve", "loadtest", "launch"}) {
        auto u = run_strato(nothing, dir_);
        EXPECT_EQ(u.code, 2) << nothing << ": " << u.err;
    }
    // Found by review: an address that is no IP literal exited 1 once the server tried to bind it.
    for (const char* bad : {"serve --model x --http-address nonsense", "monitor --address 127.0.0.256",
                            "autoscale local --policy p.toml --model x --address example.com"}) {
        auto u = run_strato(bad, dir_);
        EXPECT_EQ(u.code, 2) << bad << ": " << u.err;
        EXPECT_NE(u.err.find("is not an IP address to listen on"), std::string::npos) << bad << ": " << u.err;
    }
    // A --set without '=' is a malformed flag, a usage error (it exited 1 once the config was read).
    // (eval's example is a [data] key: it takes no other)
    for (auto [bad, example] : {std::pair{"train configs/fashion_mnist_cnn.toml --set optim.lr", "optim.lr=0.1"},
                                {"eval --model x --set =1", "data.limit_test=1000"}}) {
        auto u = run_strato(bad, dir_);
        EXPECT_EQ(u.code, 2) << bad << ": " << u.err;
        EXPECT_NE(u.err.find(std::string("expected section.key=value, such as ") + example), std::string::npos)
            << bad << ": " << u.err;
    }
    // eval's --dataset is checked by its flag, against data.dataset's kinds: a usage error that
    // names the kinds (it exited 1 from the command).
    auto kind = run_strato("eval --model " + dir_ + "/missing --dataset foo", dir_);
    EXPECT_EQ(kind.code, 2) << kind.err;
    EXPECT_NE(kind.err.find("--dataset: expected one of fashion-mnist, idx, image-folder, shards, csv, synthetic, got \"foo\""),
              std::string::npos)
        << kind.err;
}

// `strato doctor --json` describes this machine: every check named, the CPU's bf16 instructions
// as /proc/cpuinfo lists them (and what to do with them), the Fashion-MNIST package found.
TEST_F(Cli, DoctorDescribesThisMachine) {
    auto o = run_strato("doctor --json --dir " + dir_, dir_);
    ASSERT_EQ(o.code, 0) << o.err;
    auto checks = nlohmann::json::parse(o.out, nullptr, false);
    ASSERT_TRUE(checks.is_array()) << o.out;
    std::map<std::string, nlohmann::json> by_name;
    for (const auto& c : checks) {
        ASSERT_TRUE(c.contains("name") && c.contains("level") && c.contains("value")) << c.dump();
        by_name[c["name"].get<std::string>()] = c;
    }
    for (const char* name : {"libtorch", "cpu", "blas", "cpu features", "bf16", "cuda", "memory available", "disk free"})
        EXPECT_TRUE(by_name.count(name)) << name << " missing from " << o.out;
    std::ifstream in("/proc/cpuinfo");
    const std::string cpuinfo{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const bool bf16 = cpuinfo.find(" avx512_bf16") != std::string::npos || cpuinfo.find(" amx_bf16") != std::string::npos;
    const std::string value = by_name["bf16"].value("value", "");
    EXPECT_EQ(by_name["bf16"]["level"], bf16 ? "ok" : "warn") << value;
    if (bf16) {
        EXPECT_NE(value.find("train.precision"), std::string::npos) << value;
        EXPECT_NE(value.find("serve with parameter precision"), std::string::npos) << value;
    }
}

// Found by review: doctor named the first "blas" file in the address map (an OpenBLAS liblapack
// pulled in) while netlib's libblas answered libtorch's sgemm_: "ok", exit 0, at 3.6 GFLOP/s.
// And it said "strato sets 2 threads" under OMP_NUM_THREADS=1 and on one CPU of affinity.
TEST_F(Cli, DoctorNamesTheBlasThatServesMatrixProductsAndTheThreadsItSets) {
    const std::string netlib = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
    auto check_of = [](const Output& o, const std::string& name) {
        auto checks = nlohmann::json::parse(o.out, nullptr, false);
        for (const auto& c : checks)
            if (c.is_object() && c.value("name", "") == name) return c;
        return nlohmann::json();
    };
    if (std::filesystem::exists(netlib)) {
        std::filesystem::create_directories(dir_ + "/netlib");
        std::filesystem::create_symlink(netlib, dir_ + "/netlib/libblas.so.3");
        ::setenv("LD_LIBRARY_PATH", (dir_ + "/netlib").c_str(), 1);
        auto o = run_strato("doctor --json --dir " + dir_, dir_);
        ::unsetenv("LD_LIBRARY_PATH");
        EXPECT_EQ(o.code, 1) << o.err;
        auto blas = check_of(o, "blas");
        EXPECT_EQ(blas.value("level", ""), "fail") << o.out;  // (lower case as "ok" and "warn"; the table shouts FAIL)
        EXPECT_NE(blas.value("value", "").find("reference BLAS"), std::string::npos) << o.out;
    }
    cpu_set_t saved, one;
    ASSERT_EQ(::sched_getaffinity(0, sizeof saved, &saved), 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &saved)) {
            CPU_SET(c, &one);
            break;
        }
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    auto pinned = run_strato("doctor --json --dir " + dir_, dir_);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    auto omp = run_strato("doctor --json --dir " + dir_, dir_);
    ::unsetenv("OMP_NUM_THREADS");
    ASSERT_EQ(::sched_setaffinity(0, sizeof saved, &saved), 0);
    EXPECT_NE(check_of(pinned, "intra-op threads").value("value", "").find("strato sets 1 by default, one per usable CPU"),
              std::string::npos)
        << pinned.out;
    if (std::thread::hardware_concurrency() > 1) {
        EXPECT_NE(check_of(pinned, "cpu").value("value", "").find("1 usable here"), std::string::npos) << pinned.out;
    }
    EXPECT_NE(check_of(omp, "intra-op threads").value("value", "").find("strato sets 1 by default, from OMP_NUM_THREADS=1"),
              std::string::npos)
        << omp.out;
}

// The example files the README and --help point at are shipped and load (found by review:
// `strato monitor --rules alerts.toml` and `--prices my_prices.toml` named files that were not there).
// Found by review: doctor said "ok" for a --dir that is a file (or on a read-only mount) and for a
// junk or oversubscribing OMP_NUM_THREADS, and said nothing of an unwritable cache (read-only HOME).
TEST_F(Cli, DoctorFailsOnAnUnwritableRunDirAndWarnsOfJunkThreadsAndCache) {
    auto check_of = [](const Output& o, const std::string& name) {
        auto checks = nlohmann::json::parse(o.out, nullptr, false);
        for (const auto& c : checks)
            if (c.is_object() && c.value("name", "") == name) return c;
        return nlohmann::json();
    };
    ASSERT_TRUE(fs::atomic_write(dir_ + "/file", "x").is_ok());
    auto file = run_strato("doctor --json --dir " + dir_ + "/file/runs", dir_);
    EXPECT_EQ(file.code, 1) << file.err;
    EXPECT_EQ(check_of(file, "disk free").value("level", ""), "fail") << file.out;
    EXPECT_NE(check_of(file, "disk free").value("value", "").find("is not a directory"), std::string::npos);

    ::setenv("OMP_NUM_THREADS", "junk", 1);
    auto junk = run_strato("doctor --json --dir " + dir_, dir_);
    ::setenv("OMP_NUM_THREADS", "1024", 1);
    auto many = run_strato("doctor --json --dir " + dir_, dir_);
    ::unsetenv("OMP_NUM_THREADS");
    EXPECT_EQ(junk.code, 0) << junk.err;
    EXPECT_EQ(check_of(junk, "intra-op threads").value("level", ""), "warn") << junk.out;
    EXPECT_NE(check_of(junk, "intra-op threads").value("hint", "").find("OMP_NUM_THREADS=\"junk\""), std::string::npos);
    if (std::thread::hardware_concurrency() < 1024)
        EXPECT_NE(check_of(many, "intra-op threads").value("hint", "").find("oversubscribe"), std::string::npos)
            << many.out;

    const char* home = std::getenv("HOME");
    const std::string saved = home ? home : "";
    ::unsetenv("STRATO_CACHE_DIR");
    ::unsetenv("XDG_CACHE_HOME");
    ::setenv("HOME", "/sys", 1);  // nothing can be made there, even by root (access() says yes)
    auto ro = run_strato("doctor --json --dir " + dir_, dir_);
    if (home) ::setenv("HOME", saved.c_str(), 1);
    EXPECT_EQ(check_of(ro, "cache").value("level", ""), "warn") << ro.out;
}

TEST_F(Cli, ShippedExampleConfigsLoad) {
    auto m = run_strato("monitor --no-exporter --rules configs/monitor/alerts.toml --duration 0.3s", dir_);
    EXPECT_EQ(m.code, 0) << m.err;
    auto p = run_strato("plan --workload resnet50-imagenet --deadline 4h --prices configs/plan/prices.toml --top 1 --json", dir_);
    EXPECT_EQ(p.code, 0) << p.err;
}

TEST_F(Cli, UnknownKeyNamesFileLineAndKey) {
    auto cfg = write_config("[optim]\nlr = 0.1\nmomentun = 0.9\n");
    expect_one_error(train(cfg), "cfg.toml:3: unknown key 'optim.momentun' (did you mean 'optim.momentum'?)");
}

TEST_F(Cli, WrongTypeNamesTheKey) {
    auto cfg = write_config("[train]\nepochs = \"ten\"\n");
    expect_one_error(train(cfg), "cfg.toml:2: train.epochs: expected an integer in [1, 100000], got a string");
}

TEST_F(Cli, NegativeLearningRate) {
    expect_one_error(train("configs/fashion_mnist_cnn.toml --set optim.lr=-0.1"),
                     "--set optim.lr=-0.1: optim.lr: expected a number in (0, 1000], got -0.1");
    // Infinity passed every "> 0" check; 1e39 overflowed libtorch's float (raw text, found by review).
    expect_one_error(train("configs/fashion_mnist_cnn.toml --set optim.lr=inf"), "optim.lr: expected a number in (0, 1000]");
    expect_one_error(train("configs/fashion_mnist_cnn.toml --set optim.lr=1e39"), "optim.lr: expected a number in (0, 1000]");
    expect_one_error(train("configs/fashion_mnist_cnn.toml --set optim.eps=inf"), "optim.eps");
    expect_one_error(train("configs/fashion_mnist_cnn.toml --set train.clip_grad_norm=inf"), "train.clip_grad_norm");
}

// Two trainings in one run directory: the second (a --resume) truncated the first's metrics and
// renamed its checkpoints away (found by review). The lock beside the directory refuses it.
TEST_F(Cli, ARunDirectoryInUseIsRefused) {
    stdfs::create_directories(dir_ + "/runs");
    const std::string lock = dir_ + "/runs/.held.lock";
    ASSERT_TRUE(fs::atomic_write(lock, "4242\n").is_ok());
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    expect_one_error(train("configs/fashion_mnist_mlp.toml --set run.name=held --set data.limit_train=100 --set "
                           "data.limit_test=100 --resume --no-report"),
                     "run directory " + dir_ + "/runs/held is in use by another strato process (pid 4242)");
    EXPECT_FALSE(stdfs::exists(dir_ + "/runs/held/metrics.jsonl"));
    // Found by review: another name of the directory (a symlink to it) took another lock file, and
    // two trainings wrote one directory at once.
    stdfs::create_directories(dir_ + "/runs/held");
    stdfs::create_directory_symlink("held", dir_ + "/runs/alias");
    expect_one_error(train("configs/fashion_mnist_mlp.toml --set run.name=alias --set data.limit_train=100 --set "
                           "data.limit_test=100 --resume --no-report"),
                     "run directory " + dir_ + "/runs/alias is in use by another strato process (pid 4242)");
    EXPECT_FALSE(stdfs::exists(dir_ + "/runs/held/metrics.jsonl"));
    ::close(fd);  // released: the run goes ahead, and an empty metrics.jsonl of a failed start does not block it
    stdfs::create_directories(dir_ + "/runs/held");
    ASSERT_TRUE(fs::atomic_write(dir_ + "/runs/held/metrics.jsonl", "").is_ok());
    auto o = train("configs/fashion_mnist_mlp.toml --set run.name=held --set data.limit_train=200 --set "
                   "data.limit_test=100 --set train.epochs=1 --no-report");
    EXPECT_EQ(o.code, 0) << o.err;
}

TEST_F(Cli, MissingConfigFile) { expect_one_error(train(dir_ + "/nope.toml"), "nope.toml cannot be read"); }

TEST_F(Cli, MissingDataset) {
    expect_one_error(train("configs/fashion_mnist_mlp.toml --set data.path=/nonexistent/fmnist"),
                     "data.path: dataset directory /nonexistent/fmnist does not exist");
}

TEST_F(Cli, UnwritableRunDirectory) {
    auto o = run_strato("--quiet train configs/fashion_mnist_mlp.toml --set run.dir=/proc/strato-runs", dir_);
    expect_one_error(o, "run.dir: ");
    EXPECT_NE(o.err.find("/proc/strato-runs"), std::string::npos);
}

TEST_F(Cli, CorruptModelPackage) {
    stdfs::create_directories(dir_ + "/pkg");
    ASSERT_TRUE(fs::atomic_write(dir_ + "/pkg/strato-model.json", "{\"format\": \"strato-model\"").is_ok());
    expect_one_error(run_strato("eval --model " + dir_ + "/pkg", dir_), "strato-model.json: not valid JSON");
    expect_one_error(run_strato("eval --model " + dir_ + "/missing", dir_), "does not exist");
}

TEST_F(Cli, ReportOfMissingRun) {
    expect_one_error(run_strato("report " + dir_ + "/no-run", dir_), "no-run does not exist");
    expect_one_error(run_strato("report configs/fashion_mnist_mlp.toml", dir_), "is a file: expected a run directory");
}

TEST_F(Cli, SmallRunEndToEnd) {
    const std::string sets =
        " --set data.limit_train=2048 --set data.limit_test=512 --set train.epochs=2 --set model.width=64"
        " --set run.name=smoke --json";
    auto o = train("configs/fashion_mnist_mlp.toml" + sets);
    ASSERT_EQ(o.code, 0) << o.err;
    const std::string run = dir_ + "/runs/smoke";
    for (const char* f : {"config.toml", "metrics.jsonl", "events.log", "report.html", "model/strato-model.json",
                          "model/weights.pt", "model/metrics.json", "checkpoints/latest"}) {
        EXPECT_TRUE(stdfs::exists(run + "/" + f)) << f;
    }
    EXPECT_NE(o.out.find("\"test_acc\""), std::string::npos) << o.out;
    // A second run with the same name refuses to clobber the first.
    auto again = train("configs/fashion_mnist_mlp.toml" + sets);
    expect_one_error(again, "already holds a run");
    // --overwrite with a typo fails before the old run is deleted (found by review: it was gone).
    expect_one_error(train("configs/fashion_mnist_mlp.toml" + sets + " --overwrite --set data.path=/nonexistent/fm"),
                     "does not exist");
    EXPECT_TRUE(stdfs::exists(run + "/metrics.jsonl"));
    // A batch larger than the data with drop_last trains nothing: an error, and no run directory.
    expect_one_error(train("configs/fashion_mnist_mlp.toml" + sets +
                           " --set run.name=nobatch --set data.batch_size=4096 --set data.drop_last=true"),
                     "data.batch_size 4096 with data.drop_last leaves no batch: the training split gives this process "
                     "2048 samples");
    EXPECT_FALSE(stdfs::exists(dir_ + "/runs/nobatch"));
    // A resume with another model config is refused instead of training the old network under
    // the new config's name; the run's config stays as it was.
    const std::string config_before = fs::read_file(run + "/config.toml").value();
    expect_one_error(train("configs/fashion_mnist_mlp.toml" + sets + " --resume --set model.width=32"),
                     "(the weights were saved with another model config)");
    EXPECT_EQ(fs::read_file(run + "/config.toml").value(), config_before);
    // ... and so with another optimizer (found by review: the next resume warned of a change that
    // never trained). (Its metrics gone is no refusal: the missing lines are lost, not the run.)
    expect_one_error(train("configs/fashion_mnist_mlp.toml" + sets + " --resume --set optim.name=sgd"),
                     "saved with another optimizer");
    EXPECT_EQ(fs::read_file(run + "/config.toml").value(), config_before);
    // A folder of the user's where the package goes fails before training, not after it.
    stdfs::create_directories(dir_ + "/runs/squat/model");
    ASSERT_TRUE(fs::atomic_write(dir_ + "/runs/squat/model/notes.txt", "mine\n").is_ok());
    expect_one_error(train("configs/fashion_mnist_mlp.toml" + sets + " --set run.name=squat --overwrite"),
                     "exists and is not a model package");
    EXPECT_FALSE(stdfs::exists(dir_ + "/runs/squat/metrics.jsonl"));
    EXPECT_TRUE(stdfs::exists(dir_ + "/runs/squat/model/notes.txt"));
    // eval loads the package without the training config.
    auto ev = run_strato("eval --model " + run + "/model --set data.limit_test=512 --json", dir_);
    ASSERT_EQ(ev.code, 0) << ev.err;
    EXPECT_NE(ev.out.find("\"accuracy\""), std::string::npos);
    EXPECT_NE(ev.out.find("\"samples\": 512"), std::string::npos) << ev.out;
    // --resume on a finished run is a no-op that still succeeds.
    auto resumed = train("configs/fashion_mnist_mlp.toml" + sets + " --resume");
    EXPECT_EQ(resumed.code, 0) << resumed.err;
    // Found by review: a run stopped mid-epoch and resumed at another batch size took its batch
    // index as a place in the new order (the rest of the epoch skipped or trained twice).
    const std::string mid = sets + " --set run.name=mid --set data.batch_size=64 --set train.max_steps=3";
    ASSERT_EQ(train("configs/fashion_mnist_mlp.toml" + mid).code, 0);
    expect_one_error(train("configs/fashion_mnist_mlp.toml" + mid + " --resume --set train.max_steps=5 --set "
                                                                    "data.batch_size=32"),
                     "the checkpoint is in the middle of epoch 1 (batch 3 at data.batch_size 64); resuming it at "
                     "data.batch_size 32 would skip or repeat part of the epoch");
    auto same = train("configs/fashion_mnist_mlp.toml" + mid + " --resume --set train.max_steps=5");
    EXPECT_EQ(same.code, 0) << same.err;
    // Found by review: an epoch cut short by max_steps was logged as "epoch": 1 with its short time,
    // which report and plan --run took for an epoch's. 2048 samples / 64 = 32 batches an epoch.
    std::vector<nlohmann::json> evals;
    std::istringstream lines(fs::read_file(dir_ + "/runs/mid/metrics.jsonl").value());
    for (std::string line; std::getline(lines, line);)
        if (auto j = nlohmann::json::parse(line, nullptr, false); j.is_object() && j.value("kind", "") == "eval")
            evals.push_back(j);
    ASSERT_EQ(evals.size(), 2u);
    EXPECT_DOUBLE_EQ(evals[0]["epoch"].get<double>(), 3.0 / 32) << evals[0].dump();
    EXPECT_DOUBLE_EQ(evals[1]["epoch"].get<double>(), 5.0 / 32) << evals[1].dump();
    for (const auto& e : evals) EXPECT_EQ(e.value("partial", false), true) << e.dump();
}

// The small runs of the review of `strato train` / `strato eval` below: 8 steps per epoch.
std::string tiny(const std::string& name) {
    return "configs/fashion_mnist_mlp.toml --no-report --set run.threads=1 --set data.workers=1 --set "
           "data.limit_train=512 --set data.limit_test=256 --set train.epochs=2 --set run.name=" + name;
}

// Found by review: a run stopped by train.max_steps inside its first epoch said "after 0 epochs".
TEST_F(Cli, ARunStoppedInItsFirstEpochSaysHowFarItGot) {
    auto o = train(tiny("steps") + " --set train.max_steps=3");
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find(") after 3 steps (part of the first epoch), "), std::string::npos) << o.out;
    o = train(tiny("two"));
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find(") after 2 epochs, 16 steps, "), std::string::npos) << o.out;
}

// Found by review: a run that diverged after a checkpoint of NaN weights was saved (no evaluation
// that epoch), resumed with train.epochs reached, evaluated that checkpoint and shipped a package of
// NaN weights with exit 0 (metrics.json: test_loss null).
TEST_F(Cli, ADivergedRunResumedPastItsEndWritesNoPackage) {
    const std::string run = tiny("nan2") + " --set optim.name=sgd --set optim.lr=999 --set checkpoint.every_steps=0 "
                                           "--set train.log_every=1 --set train.eval_every=2";
    expect_one_error(train(run + " --set train.epochs=4"), "training diverged");
    auto resumed = train(run + " --set train.epochs=1 --resume");
    expect_one_error(resumed, "training diverged");
    EXPECT_EQ(resumed.code, 1);
    EXPECT_FALSE(stdfs::exists(dir_ + "/runs/nan2/model"));
}

// Found by review: a diverged run saved checkpoints whose state.json held null for NaN (never
// loadable), and keep_last pruned the good ones from before the divergence.
TEST_F(Cli, ADivergedRunKeepsItsLastGoodCheckpoint) {
    const std::string run = tiny("div") + " --set optim.name=sgd --set optim.lr=0.05 --set checkpoint.every_steps=0";
    ASSERT_EQ(train(run + " --set train.epochs=1").code, 0);
    const std::string ckpt = dir_ + "/runs/div/checkpoints";
    ASSERT_TRUE(stdfs::exists(ckpt + "/step-000000008"));
    // Epoch 2 at a learning rate of 999 blows up; no evaluation at its end (eval_every = 3).
    auto blown = train(run + " --resume --set train.epochs=4 --set train.eval_every=3 --set optim.lr=999 --set "
                             "checkpoint.keep_last=1");
    // (stopped at the step whose loss is NaN, not at the epoch's end)
    expect_one_error(blown, "(in epoch 2) the training loss is nan");
    EXPECT_NE(blown.err.find("no checkpoint saved (the last good one, step-000000008, is kept)"), std::string::npos)
        << blown.err;
    EXPECT_TRUE(stdfs::exists(ckpt + "/step-000000008"));
    EXPECT_FALSE(stdfs::exists(ckpt + "/step-000000016"));
    EXPECT_EQ(fs::read_file(ckpt + "/latest").value(), "step-000000008\n");
    // ... and it resumes.
    auto again = train(run + " --resume --set train.epochs=2 --set optim.lr=0.05");
    EXPECT_EQ(again.code, 0) << again.err;
}

// Found by review: --overwrite deleted the training data when it lived inside the run directory
// (loaded first, then the run directory went).
TEST_F(Cli, OverwriteRefusesARunDirectoryHoldingTheData) {
    const std::string data = dir_ + "/runs/exp/data";
    stdfs::create_directories(data);
    for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                          "t10k-labels-idx1-ubyte.gz"})
        stdfs::create_symlink(std::string("/usr/share/datasets/fashion-mnist/") + f, data + "/" + f);
    const std::string run = tiny("exp") + " --set train.epochs=1 --set data.path=" + data;
    ASSERT_EQ(train(run).code, 0);
    expect_one_error(train(run + " --overwrite"), "run directory " + dir_ + "/runs/exp: it holds " + data +
                                                      ", which this run reads; --overwrite");
    EXPECT_TRUE(stdfs::exists(data + "/train-images-idx3-ubyte.gz"));
    EXPECT_TRUE(stdfs::exists(dir_ + "/runs/exp/model/strato-model.json"));
}

// Found by review: --resume on a finished run whose checkpoints were removed trained from scratch
// and replaced its package and metrics.jsonl (an info line, hidden by -q); without --resume the
// same directory is refused.
TEST_F(Cli, ResumeWithoutCheckpointsRefusesToReplaceAFinishedRun) {
    const std::string run = tiny("done") + " --set train.log_every=4";
    ASSERT_EQ(train(run).code, 0);
    const std::string d = dir_ + "/runs/done";
    const std::string metrics = fs::read_file(d + "/metrics.jsonl").value();
    for (auto& e : stdfs::directory_iterator(d + "/checkpoints")) stdfs::remove_all(e.path());
    expect_one_error(train(run + " --resume"), "run directory " + d + " holds a model package (model/) but no "
                                                                      "checkpoint to resume from");
    // Its metrics alone say so too (an evaluated epoch that more training followed).
    stdfs::remove_all(d + "/model");
    auto o = train(run + " --resume");
    expect_one_error(o, "holds metrics.jsonl of evaluated epochs but no checkpoint to resume from");
    EXPECT_NE(o.err.find("--overwrite"), std::string::npos) << o.err;
    EXPECT_EQ(fs::read_file(d + "/metrics.jsonl").value(), metrics);
    // A run killed before its first checkpoint (no evaluation yet) starts again.
    ASSERT_TRUE(fs::atomic_write(d + "/metrics.jsonl", metrics.substr(0, metrics.find("\n") + 1)).is_ok());
    auto fresh = train(run + " --resume");
    EXPECT_EQ(fresh.code, 0) << fresh.err;
}

// Found by review: a run stopped mid-epoch and resumed on fewer training samples took a position
// past the end of the new epoch and trained the rest with a learning rate of 0.
TEST_F(Cli, ResumingMidEpochOnOtherDataIsRefused) {
    const std::string run = tiny("shrink") + " --set train.max_steps=20";
    ASSERT_EQ(train(run + " --set data.limit_train=1536").code, 0);
    expect_one_error(train(run + " --resume --set train.max_steps=30"),
                     "the checkpoint is in the middle of epoch 1 (batch 20 of a training split of 1536 samples); "
                     "resuming it with 512 training samples would skip or repeat part of the epoch");
    // A checkpoint from before the split's size was kept: a position past the end is refused.
    const std::string ck = dir_ + "/runs/shrink/checkpoints/step-000000020";
    auto state = nlohmann::json::parse(fs::read_file(ck + "/state.json").value());
    state.erase("train_samples");
    const std::string text = state.dump();
    ASSERT_TRUE(fs::atomic_write(ck + "/state.json", text).is_ok());
    auto manifest = nlohmann::json::parse(fs::read_file(ck + "/manifest.json").value());
    manifest["files"]["state.json"]["sha256"] = fs::sha256_hex(text);
    manifest["files"]["state.json"]["bytes"] = text.size();
    ASSERT_TRUE(fs::atomic_write(ck + "/manifest.json", manifest.dump()).is_ok());
    expect_one_error(train(run + " --resume --set train.max_steps=30"),
                     "the checkpoint is in the middle of epoch 1 at batch 20, but the training data gives 8 batches "
                     "per epoch now");
    auto same = train(run + " --resume --set train.max_steps=30 --set data.limit_train=1536");
    EXPECT_EQ(same.code, 0) << same.err;
}

}  // namespace
}  // namespace strato::test
