#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "strato/core/fs.h"

namespace strato::fs {
namespace {

class FsTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = stdfs::temp_directory_path() / ("strato-fs-" + std::to_string(::getpid()));
        stdfs::remove_all(dir_);
        stdfs::create_directories(dir_);
    }
    void TearDown() override {
        ::chmod(dir_.c_str(), 0755);
        stdfs::remove_all(dir_);
    }
    stdfs::path dir_;
};

TEST_F(FsTest, AtomicWriteReplacesContentAndLeavesNoTemp) {
    auto p = dir_ / "a.json";
    ASSERT_TRUE(atomic_write(p, "first").is_ok());
    ASSERT_TRUE(atomic_write(p, "second").is_ok());
    EXPECT_EQ(*read_file(p), "second");
    int files = 0;
    for (auto& e : stdfs::directory_iterator(dir_)) files += e.is_regular_file();
    EXPECT_EQ(files, 1);
}

// Found by review: `strato report RUN` with RUN/report.html a link to a published page made the
// link a file of its own and left the page stale. A write goes where the links lead, as `>`.
TEST_F(FsTest, AtomicWriteFollowsSymbolicLinksAndTheyStay) {
    stdfs::create_directories(dir_ / "pub");
    ASSERT_TRUE(atomic_write(dir_ / "pub" / "page.html", "old").is_ok());
    stdfs::create_symlink("../pub/page.html", dir_ / "pub" / "hop");  // relative, through a second link
    stdfs::create_directories(dir_ / "run");
    stdfs::create_symlink("../pub/hop", dir_ / "run" / "report.html");
    ASSERT_TRUE(check_output_file(dir_ / "run" / "report.html", OutputKind::kText, "--out").is_ok());
    ASSERT_TRUE(atomic_write(dir_ / "run" / "report.html", "new").is_ok());
    EXPECT_TRUE(stdfs::is_symlink(dir_ / "run" / "report.html"));
    EXPECT_EQ(*read_file(dir_ / "pub" / "page.html"), "new");
    stdfs::create_symlink(dir_ / "nowhere" / "x", dir_ / "run" / "dangling");  // a link to a file not there yet
    EXPECT_FALSE(atomic_write(dir_ / "run" / "dangling", "made").is_ok());  // (its directory is missing)
    stdfs::create_directories(dir_ / "nowhere");
    ASSERT_TRUE(atomic_write(dir_ / "run" / "dangling", "made").is_ok());
    EXPECT_EQ(*read_file(dir_ / "nowhere" / "x"), "made");
    stdfs::create_symlink("loop", dir_ / "loop");
    Status looped = atomic_write(dir_ / "loop", "x");
    EXPECT_NE(looped.message().find("cannot follow the symbolic link"), std::string::npos) << looped.message();
    Status checked = check_output_file(dir_ / "loop", OutputKind::kText, "--out");
    EXPECT_NE(checked.message().find("--out"), std::string::npos) << checked.message();
}

// Found by review: following links by readlink-and-open bypassed the kernel's
// fs.protected_symlinks: another user's link planted in /tmp sent a write over the caller's files.
TEST_F(FsTest, AnotherUsersLinkInAStickyDirectoryIsNotFollowed) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a link another owner";
    const stdfs::path shared = dir_ / "shared";
    stdfs::create_directories(shared);
    ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
    ASSERT_TRUE(atomic_write(dir_ / "mine.txt", "precious").is_ok());
    stdfs::create_symlink(dir_ / "mine.txt", shared / "out.json");
    ASSERT_EQ(::lchown((shared / "out.json").c_str(), 65534, 65534), 0);
    Status st = atomic_write(shared / "out.json", "overwritten");
    EXPECT_NE(st.message().find("another user's link in the shared directory"), std::string::npos) << st.message();
    EXPECT_EQ(*read_file(dir_ / "mine.txt"), "precious");
    ASSERT_EQ(::lchown((shared / "out.json").c_str(), 0, 0), 0);  // one's own link is followed
    EXPECT_TRUE(atomic_write(shared / "out.json", "mine again").is_ok());
    EXPECT_EQ(*read_file(dir_ / "mine.txt"), "mine again");
}

TEST_F(FsTest, ReadMissingFileNamesIt) {
    auto r = read_file(dir_ / "nope.txt");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("nope.txt"), std::string::npos);
}

TEST_F(FsTest, ReadLimitsRefuseBigFilesAndEndlessStreams) {
    auto p = dir_ / "big.csv";
    ASSERT_TRUE(atomic_write(p, std::string(5000, 'x')).is_ok());
    EXPECT_EQ(read_file(p, 5000)->size(), 5000u);
    auto big = read_file(p, 4999);
    ASSERT_FALSE(big.is_ok());
    EXPECT_EQ(big.status().message(), p.string() + " is larger than 4999 bytes, more than such a file can be (is it the right file?)");
    // A device is read up to the limit, not to its (missing) end.
    auto zero = read_file("/dev/zero", 3 << 20);
    ASSERT_FALSE(zero.is_ok());
    EXPECT_NE(zero.status().message().find("/dev/zero is larger than 3 MiB"), std::string::npos);
    // /proc files report size 0 and still have content.
    auto stat = read_file("/proc/self/stat");
    ASSERT_TRUE(stat.is_ok());
    EXPECT_GT(stat->size(), 10u);
    // A pipe that ends is read whole (`--body-file <(cmd)`).
    auto fifo = dir_ / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::thread writer([&] {
        FILE* f = std::fopen(fifo.c_str(), "w");
        if (f) std::fputs("from a pipe", f), std::fclose(f);
    });
    auto piped = read_file(fifo);
    writer.join();
    ASSERT_TRUE(piped.is_ok()) << piped.status().message();
    EXPECT_EQ(*piped, "from a pipe");
    auto dir = read_file(dir_);
    ASSERT_FALSE(dir.is_ok());
    EXPECT_EQ(dir.status().message(), dir_.string() + " is a directory, expected a file");
}

// A package or checkpoint saved over an existing one: swapped in one step, so no instant leaves
// neither at the name (the old two renames did: a crash between them lost `model/`).
TEST_F(FsTest, ANamedPipeWithoutAWriterIsAnErrorNotAHang) {
    // Found by review: a FIFO left in a run directory held `strato report` in open() forever.
    const auto p = dir_ / "pipe";
    ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
    auto r = read_file(p);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), p.string() + " is a named pipe and nothing wrote to it within 5 s");
}

TEST_F(FsTest, CheckRegularFileRefusesPipesDirectoriesAndDevices) {
    // Found by review: a FIFO named model.pt held serve's loader in libtorch's open() forever.
    const auto p = dir_ / "model.pt";
    ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
    EXPECT_EQ(check_regular_file(p).message(), p.string() + " is a named pipe, expected a regular file");
    EXPECT_EQ(check_regular_file("/dev/null").message(), "/dev/null is a device, expected a regular file");
    EXPECT_EQ(check_regular_file(dir_).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(check_regular_file(dir_ / "none").code(), StatusCode::kNotFound);
    ASSERT_TRUE(atomic_write(dir_ / "f", "x").is_ok());
    std::filesystem::create_symlink(dir_ / "f", dir_ / "link");
    EXPECT_TRUE(check_regular_file(dir_ / "link").is_ok());
}

TEST_F(FsTest, APipeWhoseWriterIsSlowIsWaitedFor) {
    // A writer already there (`<(cmd)` of a slow command) is waited for, however long it takes
    // to write its first byte; only a pipe without a writer has a limit.
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ASSERT_EQ(::write(fds[1], "late", 4), 4);
        ::close(fds[1]);
    });
    auto r = read_file("/proc/self/fd/" + std::to_string(fds[0]));
    writer.join();
    ::close(fds[0]);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(*r, "late");
}

TEST_F(FsTest, ReplaceDirSwapsInANewDirectoryAndRemovesTheOld) {
    auto target = dir_ / "model", staged = dir_ / "model.tmp.1";
    ASSERT_TRUE(ensure_dir(staged).is_ok());
    ASSERT_TRUE(atomic_write(staged / "w", "one").is_ok());
    ASSERT_TRUE(replace_dir(staged, target).is_ok());  // nothing there yet: a rename
    EXPECT_EQ(*read_file(target / "w"), "one");
    ASSERT_TRUE(ensure_dir(staged).is_ok());
    ASSERT_TRUE(atomic_write(staged / "w", "two").is_ok());
    ASSERT_TRUE(atomic_write(staged / "extra", "x").is_ok());
    ASSERT_TRUE(replace_dir(staged, target).is_ok());  // over the old one: a swap
    EXPECT_EQ(*read_file(target / "w"), "two");
    EXPECT_TRUE(stdfs::exists(target / "extra"));
    std::vector<std::string> names;
    for (auto& e : stdfs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"model"});  // the old one is gone, nothing set aside
    EXPECT_FALSE(replace_dir(dir_ / "missing", target).is_ok());
    EXPECT_EQ(*read_file(target / "w"), "two");
}

TEST_F(FsTest, Sha256KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(FsTest, UnwritableDirectoryIsReported) {
    if (::geteuid() == 0) {
        // root ignores permission bits; a regular file in the way still cannot hold files.
        ASSERT_TRUE(atomic_write(dir_ / "file", "x").is_ok());
        Status st = check_writable_dir(dir_ / "file" / "sub");
        EXPECT_FALSE(st.is_ok());
        return;
    }
    ::chmod(dir_.c_str(), 0555);
    Status st = check_writable_dir(dir_);
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(dir_.string()), std::string::npos);
}

TEST_F(FsTest, EnsureDirRefusesFileInTheWay) {
    ASSERT_TRUE(atomic_write(dir_ / "f", "x").is_ok());
    Status st = ensure_dir(dir_ / "f");
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("not a directory"), std::string::npos);
}

// Two launchers sharing a log directory create the same path at the same moment; neither may
// fail because the other won the race (it did, once, in CI: "exists and is not a directory").
TEST_F(FsTest, EnsureDirRacingCreatorsAllSucceed) {
    for (int round = 0; round < 50; ++round) {
        const stdfs::path target = dir_ / std::to_string(round) / "launch" / "1" / "attempt_0";
        std::atomic<int> failures{0};
        std::atomic<bool> go{false};
        std::vector<std::thread> threads;
        for (int t = 0; t < 8; ++t)
            threads.emplace_back([&] {
                while (!go.load()) std::this_thread::yield();
                if (!ensure_dir(target).is_ok()) ++failures;
            });
        go = true;
        for (auto& th : threads) th.join();
        ASSERT_EQ(failures.load(), 0) << "round " << round;
        ASSERT_TRUE(stdfs::is_directory(target));
    }
}

TEST_F(FsTest, RemoveTreeDeletesEverythingButWhatLinksPointTo) {
    const auto outside = dir_ / "outside";
    stdfs::create_directories(outside);
    ASSERT_TRUE(atomic_write(outside / "keep.txt", "kept").is_ok());
    const auto tree = dir_ / "tree";
    stdfs::create_directories(tree / "a" / "b" / "c");
    ASSERT_TRUE(atomic_write(tree / "a" / "x.bin", "x").is_ok());
    ASSERT_TRUE(atomic_write(tree / "a" / "b" / "c" / "y.bin", "y").is_ok());
    stdfs::create_directory_symlink(outside, tree / "a" / "link");
    ASSERT_TRUE(remove_tree(tree).is_ok());
    EXPECT_FALSE(stdfs::exists(tree));
    EXPECT_TRUE(stdfs::exists(outside / "keep.txt"));  // the link went, not its target
    EXPECT_TRUE(remove_tree(tree).is_ok());             // already gone: no error
    ASSERT_TRUE(atomic_write(dir_ / "file", "f").is_ok());
    EXPECT_TRUE(remove_tree(dir_ / "file").is_ok());    // a plain file
    EXPECT_FALSE(stdfs::exists(dir_ / "file"));
    if (::geteuid() != 0) {  // root may delete anyway
        stdfs::create_directories(dir_ / "locked" / "inner");
        ::chmod((dir_ / "locked").c_str(), 0555);
        auto st = remove_tree(dir_ / "locked");
        EXPECT_FALSE(st.is_ok());
        EXPECT_NE(st.message().find("locked"), std::string::npos) << st.message();
        ::chmod((dir_ / "locked").c_str(), 0755);
    }
}

TEST_F(FsTest, IsWithinResolvesDotsAndLinks) {
    stdfs::create_directories(dir_ / "run" / "model");
    stdfs::create_directory_symlink(dir_ / "run", dir_ / "alias");
    EXPECT_TRUE(is_within(dir_ / "run" / "model", dir_ / "run"));
    EXPECT_TRUE(is_within(dir_ / "run", dir_ / "run"));
    EXPECT_TRUE(is_within(dir_ / "run" / "model" / ".", dir_ / "run/"));
    EXPECT_TRUE(is_within(dir_ / "alias" / "model", dir_ / "run"));         // through a link
    EXPECT_TRUE(is_within(dir_ / "run" / "model" / "..", dir_ / "run"));    // the run itself
    EXPECT_TRUE(is_within(dir_ / "run" / "new" / "x", dir_ / "run"));       // not there yet
    EXPECT_FALSE(is_within(dir_ / "run", dir_ / "run" / "model"));
    EXPECT_FALSE(is_within(dir_ / "runs", dir_ / "run"));                   // a prefix of the name is not inside
    EXPECT_FALSE(is_within(dir_ / "run" / ".." / "other", dir_ / "run"));
}

TEST_F(FsTest, OutputFilesReplaceOnlyWhatTheCommandWrites) {
    const auto html = dir_ / "report.html", text = dir_ / "notes.md", bin = dir_ / "weights.pt";
    ASSERT_TRUE(atomic_write(html, "<!DOCTYPE html>\n<html></html>").is_ok());
    ASSERT_TRUE(atomic_write(text, "# notes\n").is_ok());
    ASSERT_TRUE(atomic_write(bin, std::string("PK\x03\x04\0\0weights", 12)).is_ok());
    EXPECT_TRUE(check_output_file(dir_ / "new.html", OutputKind::kHtml, "--out").is_ok());
    EXPECT_TRUE(check_output_file(html, OutputKind::kHtml, "--out").is_ok());
    EXPECT_TRUE(check_output_file(text, OutputKind::kText, "--markdown").is_ok());
    Status s = check_output_file(text, OutputKind::kHtml, "--out");  // a run's metrics.jsonl, say
    EXPECT_NE(s.message().find("--out " + text.string() + ": the file exists and is not an HTML report"),
              std::string::npos)
        << s.message();
    EXPECT_NE(check_output_file(bin, OutputKind::kText, "--markdown").message().find("is not a text file"),
              std::string::npos);
    EXPECT_NE(check_output_file(dir_, OutputKind::kText, "-o").message().find("is a directory"), std::string::npos);
    // A folder that is not there is said before the work (a load test's results were lost after it).
    EXPECT_EQ(check_output_file(dir_ / "nope" / "x.json", OutputKind::kText, "--json").message(),
              "--json " + (dir_ / "nope" / "x.json").string() + ": the directory " + (dir_ / "nope").string() +
                  " does not exist");
    // ... and a file where the directory would be is said as such (it read "does not exist").
    ASSERT_TRUE(atomic_write(dir_ / "plain", "x").is_ok());
    EXPECT_EQ(check_output_file(dir_ / "plain" / "x.json", OutputKind::kText, "--json").message(),
              "--json " + (dir_ / "plain" / "x.json").string() + ": " + (dir_ / "plain").string() +
                  " is a file, not a directory");
    // A report write killed half way left "<out>.tmp.<pid>.<n>" beside it for good.
    ASSERT_TRUE(atomic_write(dir_ / "report.html.tmp.99999999.0", "<!DOCTYPE html>\n<ht").is_ok());
    EXPECT_TRUE(check_output_file(html, OutputKind::kHtml, "--out").is_ok());
    EXPECT_FALSE(stdfs::exists(dir_ / "report.html.tmp.99999999.0"));
    // A model package's manifest is text, yet not a table's to replace (found by review).
    const auto pkg = dir_ / "model";
    ASSERT_TRUE(ensure_dir(pkg).is_ok());
    ASSERT_TRUE(atomic_write(pkg / "strato-model.json", "{}").is_ok());
    for (const char* name : {"strato-model.json", "metrics.json", "new.md"})
        EXPECT_NE(check_output_file(pkg / name, OutputKind::kText, "--markdown").message().find(
                      "belongs to the model package"),
                  std::string::npos)
            << name;
}

// Found by review: `strato loadtest --json /dev/stdout | jq` ran the whole test, then failed to make
// a temporary file beside /proc/self/fd/pipe:[...]: the results were lost. A pipe, a terminal or
// /dev/null is written as a stream.
TEST_F(FsTest, APipeOrADeviceIsWrittenAsAStream) {
    const auto fifo = dir_ / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_TRUE(check_output_file(fifo, OutputKind::kText, "--json").is_ok());
    EXPECT_TRUE(check_output_file("/dev/null", OutputKind::kHtml, "--out").is_ok());
    std::string got;
    std::thread reader([&] {
        std::FILE* f = std::fopen(fifo.c_str(), "rb");
        if (!f) return;
        char buf[256];
        for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) got.append(buf, n);
        std::fclose(f);
    });
    const Status st = atomic_write(fifo, "{\"ok\": true}\n");
    reader.join();
    EXPECT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(got, "{\"ok\": true}\n");
    EXPECT_TRUE(atomic_write("/dev/null", "x").is_ok());
    // Nothing was made beside the pipe.
    EXPECT_EQ(std::distance(stdfs::directory_iterator(dir_), stdfs::directory_iterator()), 1);
}

// Found by review: `--json -` made a file named "-", and `--json /dev/stdout >> log` renamed a new
// file over the log the shell opened (its earlier lines lost, and the command's own text printed
// into the replaced file). Standard output is written through descriptor 1.
TEST_F(FsTest, StandardOutputIsWrittenThroughItsDescriptor) {
    for (const char* name : {"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) EXPECT_TRUE(is_stdout(name)) << name;
    for (const char* name : {"./-", "--", "/dev/stderr", "stdout"}) EXPECT_FALSE(is_stdout(name)) << name;
    const auto log = dir_ / "log";
    ASSERT_TRUE(atomic_write(log, "earlier\n").is_ok());
    struct stat before {};
    ASSERT_EQ(::stat(log.c_str(), &before), 0);
    std::fflush(stdout);
    const int saved = ::dup(STDOUT_FILENO);
    const int appended = ::open(log.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(appended, 0);
    ::dup2(appended, STDOUT_FILENO);
    ::close(appended);
    std::fputs("table\n", stdout);  // (the command's own text, buffered)
    const Status dash = atomic_write("-", "{\"a\": 1}\n");
    const Status dev = atomic_write("/dev/stdout", "{\"b\": 2}\n");
    const Status checked = check_output_file("-", OutputKind::kHtml, "--out");
    std::fflush(stdout);
    ::dup2(saved, STDOUT_FILENO);
    ::close(saved);
    EXPECT_TRUE(dash.is_ok()) << dash.message();
    EXPECT_TRUE(dev.is_ok()) << dev.message();
    EXPECT_TRUE(checked.is_ok()) << checked.message();
    struct stat after {};
    ASSERT_EQ(::stat(log.c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino);  // the same file, appended to
    EXPECT_EQ(*read_file(log), "earlier\ntable\n{\"a\": 1}\n{\"b\": 2}\n");
    EXPECT_FALSE(stdfs::exists("-"));
}

TEST_F(FsTest, StaleTempsOfDeadWritersAreRemoved) {
    const auto out = dir_ / "model.onnx";
    for (const char* n : {"model.onnx.tmp.99999999.0", "model.onnx.tmp.1.3", "model.onnx.tmp.notes", "other.tmp.99999999.0"})
        ASSERT_TRUE(atomic_write(dir_ / n, "x").is_ok());
    remove_stale_temps(out);
    EXPECT_FALSE(stdfs::exists(dir_ / "model.onnx.tmp.99999999.0"));  // no such process
    EXPECT_TRUE(stdfs::exists(dir_ / "model.onnx.tmp.1.3"));          // pid 1 runs
    EXPECT_TRUE(stdfs::exists(dir_ / "model.onnx.tmp.notes"));        // not a temp name
    EXPECT_TRUE(stdfs::exists(dir_ / "other.tmp.99999999.0"));        // another file's
}

// Found by review: a run named by a symlink to another run's directory took the lock of the link's
// name, and two trainings wrote one directory at once.
TEST_F(FsTest, EveryNameOfADirectoryTakesTheSameLock) {
    stdfs::create_directories(dir_ / "runs" / "sl");
    stdfs::create_directory_symlink("sl", dir_ / "runs" / "slalias");
    stdfs::create_directory_symlink(dir_ / "runs", dir_ / "runs-link");
    auto held = lock_dir(dir_ / "runs" / "sl");
    ASSERT_TRUE(held.is_ok()) << held.status().message();
    for (const auto& other : {dir_ / "runs" / "slalias", dir_ / "runs-link" / "sl", dir_ / "runs-link" / "slalias/"}) {
        auto second = lock_dir(other);
        ASSERT_FALSE(second.is_ok()) << other;
        EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
        EXPECT_NE(second.status().message().find(other.string() + " is in use by another strato process (pid "),
                  std::string::npos)
            << second.status().message();
    }
    // A directory that does not exist yet locks by its name under its (resolved) parent.
    auto fresh = lock_dir(dir_ / "runs-link" / "new");
    ASSERT_TRUE(fresh.is_ok()) << fresh.status().message();
    EXPECT_FALSE(lock_dir(dir_ / "runs" / "new").is_ok());
    EXPECT_TRUE(lock_dir(dir_ / "runs" / "other").is_ok());
    // A file where the directory would be: refused before a lock file is left beside it.
    ASSERT_TRUE(atomic_write(dir_ / "runs" / "afile", "x").is_ok());
    auto file = lock_dir(dir_ / "runs" / "afile");
    ASSERT_FALSE(file.is_ok());
    EXPECT_NE(file.status().message().find("afile is not a directory"), std::string::npos) << file.status().message();
    EXPECT_FALSE(stdfs::exists(dir_ / "runs" / ".afile.lock"));
}

TEST(ShellQuote, SurvivesTheShell) {
    EXPECT_EQ(shell_quote("plain"), "'plain'");
    EXPECT_EQ(shell_quote("it's $HOME `x`"), "'it'\\''s $HOME `x`'");
    // What /bin/sh makes of it is the original string.
    std::string tricky = "a b'c\"d$e`f`\\g";
    FILE* p = popen(("printf %s " + shell_quote(tricky)).c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[128] = {};
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    pclose(p);
    EXPECT_EQ(std::string(buf, n), tricky);
}

}  // namespace
}  // namespace strato::fs
