// strato doctor [--json]

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/core/json.h"
#include "strato/core/parse.h"
#include "strato/core/signals.h"
#include "strato/dist/peers.h"
#include "strato/doctor/doctor.h"

namespace strato::cli {

void add_doctor_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        bool json = false;
        std::string dir = "runs";
        std::vector<std::string> peers;
        int samples = 20;
        std::string listen;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("doctor", "Check this machine: libtorch, BLAS, threads, CPU features (AVX-512, AMX), "
                                             "GPUs, memory (within a cgroup's limit), disk and cache");
    auto* json = cmd->add_flag("--json", o->json, "Print the checks as JSON");
    auto* dir = cmd->add_option("--dir", o->dir,
                                "The run directory (run.dir): its free space and whether it can be written "
                                "(default: runs)");
    // Bad addresses are usage errors (exit 2), refused by the parser before any check runs.
    auto* peers = cmd->add_option("--peers", o->peers,
                                  "HOST:PORT of other nodes (comma-separated): round-trip time, < 2 ms wanted for data "
                                  "parallelism; over an echo when they run `strato doctor --listen`. FAILs when fewer "
                                  "than half the round trips are measured (a lost one is counted and probing goes on; 3 lost in a row end it)")
                      ->delimiter(',')
                      ->check(
                          [](const std::string& text) {
                              auto hp = parse_host_port(text, "peer");
                              return hp.is_ok() ? std::string() : hp.status().message();
                          },
                          "HOST:PORT");
    auto* samples = cmd->add_option("--samples", o->samples, "Round trips per peer (default 20; each within 3 s)")
                        ->check(CLI::Range(1, 100000))
                        ->needs(peers);  // (alone it was silently ignored)
    // The listener runs no checks: flags for them would be silently ignored.
    cmd->add_option("--listen", o->listen,
                    "Answer other nodes' --peers probes on [HOST:]PORT until Ctrl-C (HOST an IPv4 address, "
                    "default 0.0.0.0; port 0: any free port, printed)")
        ->check(
            [](const std::string& text) {
                auto hp = dist::parse_listen_address(text);
                return hp.is_ok() ? std::string() : hp.status().message();
            },
            "[HOST:]PORT")
        ->excludes(peers)
        ->excludes(json)
        ->excludes(samples)
        ->excludes(dir);
    cmd->footer(
        "Exit code 1 when a check FAILs (for example the slow reference BLAS, a --dir that cannot be written, an\n"
        "unreachable peer, or one whose round trips fail before half are measured), 2 for a usage error; warnings\n"
        "(less than 2 GiB of memory left under the cgroup's limit, a junk OMP_NUM_THREADS, more threads than usable\n"
        "CPUs, an unwritable cache) exit 0.\n"
        "Examples:\n"
        "  node2$ strato doctor --listen 0.0.0.0:29999\n"
        "  node1$ strato doctor --peers node2:29999,node3:29999");
    cmd->callback([o, exit_code] {
        if (!o->listen.empty()) {
            const HostPort at = dist::parse_listen_address(o->listen).value();
            signals::install_stop_handlers();
            Status s = dist::serve_echo(
                at.host, at.port, [] { return signals::stop_requested(); },
                [&](int p) {
                    fmt::print("listening on {}:{} (Ctrl-C to stop)\n", at.host, p);
                    std::fflush(stdout);
                });
            *exit_code = s.is_ok() ? 0 : report_error("doctor", s);
            return;
        }
        auto checks = doctor::run_checks(o->dir);
        if (!o->peers.empty()) {
            for (const auto& p : dist::probe_peers(o->peers, std::max(1, o->samples), 3.0)) {
                doctor::Check c;
                c.name = "peer " + p.target;
                c.value = dist::describe(p);
                if (p.failing()) {
                    c.level = doctor::Level::kFail;
                    c.hint = p.reachable ? "the peer took the connection, then did not answer in time: is it "
                                           "overloaded, hung, or dropping packets?"
                                         : "is the host up, the port open, and a firewall in the way?";
                } else if (p.failed > 0) {
                    c.level = doctor::Level::kWarn;
                    c.hint = "some round trips failed: packet loss or an overloaded peer?";
                } else {
                    c.level = p.median_ms < 2.0 ? doctor::Level::kOk : doctor::Level::kWarn;
                    c.hint = "over 2 ms between nodes slows gradient all-reduce: same placement group or rack?";
                }
                checks.push_back(c);
            }
            for (const auto& [name, addr] : dist::interfaces())
                checks.push_back({"interface " + name, addr, doctor::Level::kOk, ""});
            for (const auto& [k, v] : dist::dist_environment()) checks.push_back({"env " + k, v, doctor::Level::kOk, ""});
        }
        bool failed = false;
        if (o->json) {
            nlohmann::json j = nlohmann::json::array();
            for (const auto& c : checks) {
                const char* level = c.level == doctor::Level::kFail ? "fail" : doctor::level_name(c.level);  // (the table shouts FAIL)
                j.push_back({{"name", c.name}, {"value", c.value}, {"level", level}, {"hint", c.hint}});
            }
            fmt::print("{}\n", json_text(j, 2));
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
