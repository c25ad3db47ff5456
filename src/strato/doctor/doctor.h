#pragma once
// Machine checks for `strato doctor`: libtorch build, BLAS in use, threads, CPU features,
// GPUs, free memory and disk. Each check says ok / warn / fail with a hint to fix it.

#include <string>
#include <vector>

namespace strato::doctor {

enum class Level { kOk, kWarn, kFail };

struct Check {
    std::string name;
    std::string value;
    Level level = Level::kOk;
    std::string hint;  // what to do when level != kOk
};

/// Runs every check; `disk_path` is where free space is measured (the run directory).
std::vector<Check> run_checks(const std::string& disk_path);

const char* level_name(Level l);

}  // namespace strato::doctor
