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
                                             "GPUs, memory and disk");
    cmd->add_flag("--json", o->json, "Print the checks as JSON");
    cmd->add_option("--dir", o->dir, "Where free disk space matters (default: runs)");
    cmd->add_option("--peers", o->peers, "HOST:PORT of other nodes (comma-separated): round-trip time, < 2 ms wanted "
                                         "for data parallelism; over an echo when they run `strato doctor --listen`")
        ->delimiter(',');
    cmd->add_option("--samples", o->samples, "Round trips per peer (default 20)")->check(CLI::Range(1, 100000));
    cmd->add_option("--listen", o->listen, "Answer other nodes' --peers probes on [HOST:]PORT until Ctrl-C");
    cmd->footer("Exit code 1 when a check FAILs (for example the slow reference BLAS, or an unreachable peer).\n"
                "Examples:\n"
                "  node2$ strato doctor --listen 0.0.0.0:29999\n"
                "  node1$ strato doctor --peers node2:29999,node3:29999");
    cmd->callback([o, exit_code] {
        if (!o->listen.empty()) {
            std::string host = "0.0.0.0", port = o->listen;
            if (size_t c = o->listen.rfind(':'); c != std::string::npos) host = o->listen.substr(0, c), port = o->listen.substr(c + 1);
            auto port_number = parse_int(port, 0, 65535);  // 0: any free port, printed
            if (!port_number) {
                *exit_code = report_error("doctor", invalid_argument("--listen '{}': expected [HOST:]PORT with a port in 0..65535", o->listen));
                return;
            }
            signals::install_stop_handlers();
            Status s = dist::serve_echo(host, static_cast<int>(*port_number), [] { return signals::stop_requested(); },
                                        [&](int p) { fmt::print("listening on {}:{} (Ctrl-C to stop)\n", host, p); std::fflush(stdout); });
            *exit_code = s.is_ok() ? 0 : report_error("doctor", s);
            return;
        }
        for (const auto& p : o->peers) {
            if (Status s = parse_host_port(p, "--peers").status(); !s.is_ok())
                return void(*exit_code = report_error("doctor", s));
        }
        auto checks = doctor::run_checks(o->dir);
        if (!o->peers.empty()) {
            for (const auto& p : dist::probe_peers(o->peers, std::max(1, o->samples), 3.0)) {
                doctor::Check c;
                c.name = "peer " + p.target;
                if (!p.reachable || p.samples == 0) {
                    c.level = doctor::Level::kFail;
                    c.value = "unreachable: " + p.error;
                    c.hint = "is the host up, the port open, and a firewall in the way?";
                } else {
                    c.value = fmt::format("round trip median {:.3f} ms (min {:.3f}, max {:.3f}; {} samples, {})", p.median_ms,
                                          p.min_ms, p.max_ms, p.samples, p.echo ? "echo" : "TCP handshake");
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
            for (const auto& c : checks)
                j.push_back({{"name", c.name}, {"value", c.value}, {"level", doctor::level_name(c.level)}, {"hint", c.hint}});
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
