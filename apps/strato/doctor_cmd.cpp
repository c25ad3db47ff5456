// strato doctor [--json]

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/doctor/doctor.h"

namespace strato::cli {

void add_doctor_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        bool json = false;
        std::string dir = "runs";
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("doctor", "Check this machine: libtorch, BLAS, threads, CPU features (AVX-512, AMX), "
                                             "GPUs, memory and disk");
    cmd->add_flag("--json", o->json, "Print the checks as JSON");
    cmd->add_option("--dir", o->dir, "Where free disk space matters (default: runs)");
    cmd->footer("Exit code 1 when a check FAILs (for example the slow reference BLAS).");
    cmd->callback([o, exit_code] {
        auto checks = doctor::run_checks(o->dir);
        bool failed = false;
        if (o->json) {
            nlohmann::json j = nlohmann::json::array();
            for (const auto& c : checks)
                j.push_back({{"name", c.name}, {"value", c.value}, {"level", doctor::level_name(c.level)}, {"hint", c.hint}});
            fmt::print("{}\n", j.dump(2));
        }
        for (const auto& c : checks) {
            failed |= c.level == doctor::Level::kFail;
            if (o->json) continue;
            fmt::print("{:<5} {:<20} {}\n", doctor::level_name(c.level), c.name, c.value);
            if (!c.hint.empty() && c.level != doctor::Level::kOk) fmt::print("      {:<20} -> {}\n", "", c.hint);
        }
        *exit_code = failed ? 1 : 0;
    });
}

}  // namespace strato::cli
