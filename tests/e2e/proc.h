#pragma once
// Runs the real strato binary for end-to-end tests: exit code, stdout and stderr.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace strato::test {

struct Output {
    int code = -1;
    std::string out, err;
};

inline std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::string temp_dir(const std::string& tag) {
    auto d = std::filesystem::temp_directory_path() / ("strato-e2e-" + tag + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
}

/// Runs `strato ARGS` through the shell (ARGS is shell syntax), capturing both streams.
inline Output run_strato(const std::string& args, const std::string& scratch) {
    const std::string out = scratch + "/stdout.txt", err = scratch + "/stderr.txt";
    std::string cmd = std::string("cd ") + STRATO_SOURCE_DIR + " && timeout 600 " + STRATO_BINARY + " " + args + " >" +
                      out + " 2>" + err + " </dev/null";
    int rc = std::system(cmd.c_str());
    Output o;
    o.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
    o.out = slurp(out);
    o.err = slurp(err);
    return o;
}

/// Starts `strato ARGV...` as a child process (stdout/stderr to `log`); returns its pid.
inline pid_t spawn_strato(const std::vector<std::string>& argv, const std::string& log) {
    pid_t pid = ::fork();
    if (pid == 0) {
        if (::chdir(STRATO_SOURCE_DIR) != 0) ::_exit(126);
        FILE* f = std::freopen(log.c_str(), "a", stdout);
        (void)f;
        ::dup2(STDOUT_FILENO, STDERR_FILENO);
        std::vector<char*> args;
        std::string bin = STRATO_BINARY;
        args.push_back(bin.data());
        std::vector<std::string> copy = argv;
        for (auto& a : copy) args.push_back(a.data());
        args.push_back(nullptr);
        ::execv(bin.c_str(), args.data());
        ::_exit(127);
    }
    return pid;
}

}  // namespace strato::test
