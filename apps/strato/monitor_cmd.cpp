// strato monitor [--port 9400] [--interval 1s] [--rules configs/monitor/alerts.toml] [--jsonl FILE] [--once] ...

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "strato/core/duration.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/parse.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/monitor/monitor.h"

namespace strato::cli {

void add_monitor_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        std::string address = "127.0.0.1", interval = "1s", duration = "0", jsonl, rules, replay;
        int port = 9400;
        std::vector<int> pids;
        bool once = false, json = false, no_exporter = false, allow_remote = false, dcgm_labels = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand(
        "monitor", "Sample CPU, memory, disk, network, processes and GPUs (NVML); Prometheus exporter, JSONL, alerts");
    auto* port = cmd->add_option("--port", o->port,
                                 "Prometheus exporter port (default 9400, as NVIDIA's DCGM exporter; 0: any free; "
                                 "with --replay only when given, and then it serves the last sample until Ctrl-C or "
                                 "--duration)")
                     ->check(CLI::Range(0, 65535));
    auto* address = cmd->add_option(
        "--address", o->address, "Exporter address (default 127.0.0.1, also \"localhost\"; 0.0.0.0 to be scraped from elsewhere)")
        ->check(listen_address_flag());
    // (an exporter's port with --no-exporter served nothing, without a word)
    cmd->add_flag("--no-exporter", o->no_exporter, "Do not serve /metrics")->excludes(port)->excludes(address);
    auto* interval = cmd->add_option("--interval", o->interval, "Time between samples (default 1s, at least 10ms)")
                         ->check(strato::cli::duration_flag("s", true, 0.01));
    auto* duration = cmd->add_option("--duration", o->duration, "Stop after this long (default: until Ctrl-C)")
                         ->check(strato::cli::duration_flag("s", true));
    auto* jsonl = cmd->add_option("--jsonl", o->jsonl,
                                  "Append every sample to this JSONL file (or a FIFO or device: never blocks on one; - for stdout)")
                     ->check(file_path_flag());  // (an empty one, an unset variable in a script, logged nothing)
    auto* rules = cmd->add_option("--rules", o->rules, "Alert rules (TOML [[rule]] tables: when = \"gpu_util < 20 for 10m\")")
                      ->check(file_path_flag());  // (an empty one ran without rules, without a word)
    auto* pid = cmd->add_option("--pid", o->pids, "Also report these processes (CPU time, resident memory, threads)");
    auto* replay = cmd->add_option("--replay", o->replay,
                                   "Run the rules over a JSONL log written by --jsonl instead of sampling")
                       ->check(file_path_flag());  // (an empty one sampled live, until Ctrl-C, instead)
    auto* once = cmd->add_flag("--once", o->once, "Print one sample (Prometheus text, or --json) and exit");
    // --once samples and prints: what only a run does (rules, a log, an exporter) is a usage error.
    once->excludes(rules)->excludes(jsonl)->excludes(replay)->excludes(port)->excludes(duration)->excludes(interval);
    cmd->add_flag("--json", o->json, "With --once: print the sample as JSON")->needs(once);
    auto* dcgm = cmd->add_flag("--dcgm-labels", o->dcgm_labels,
                               "GPU labels UUID and modelName exactly as the DCGM exporter (default uuid, model_name)");
    // A replay samples nothing: what only sampling uses was silently ignored with it.
    replay->excludes(pid)->excludes(interval)->excludes(dcgm);
    cmd->add_flag("--allow-remote-webhooks", o->allow_remote, "Allow webhooks to hosts other than this machine");
    cmd->footer(
        "Examples:\n"
        "  strato monitor                                  # http://127.0.0.1:9400/metrics\n"
        "  strato monitor --rules configs/monitor/alerts.toml --jsonl gpu.jsonl\n"
        "  strato monitor --once --json\n"
        "  strato monitor --replay gpu.jsonl --rules configs/monitor/alerts.toml --no-exporter\n"
        "GPU metrics use the DCGM exporter's names (DCGM_FI_DEV_GPU_UTIL, ...) through NVML loaded at run\n"
        "time; without a GPU driver strato reports \"no GPU\" and CPU metrics only.\n"
        "Exit status: 0; 3 when a rule with action = \"exit\" fired; 2 on bad flags; 1 on other errors.");
    cmd->callback([o, exit_code, port] {
        monitor::MonitorOptions mo;
        mo.address = o->address;
        // A replay is a dry run of rules: it serves metrics only when asked (port 9400 is likely
        // taken by the live monitor or a DCGM exporter whose log it replays).
        mo.port = o->no_exporter || o->once || (!o->replay.empty() && port->count() == 0) ? -1 : o->port;
        if (o->jsonl == "-") o->jsonl = "/dev/stdout";  // (made a file named "-")
        mo.jsonl = o->jsonl;
        mo.replay = o->replay;
        mo.allow_remote_webhooks = o->allow_remote;
        mo.dcgm_labels = o->dcgm_labels;
        auto fail = [&](const Status& s) { *exit_code = report_error("monitor", s); };
        // --jsonl appends: never to a model package's files or a file that is not text, never to
        // an input (appending to the log being replayed grew it without end). A pipe or a device
        // (/dev/stdout, a log shipper's FIFO) takes the lines as they come.
        std::error_code ec;
        if (const auto type = std::filesystem::status(o->jsonl, ec).type();
            !o->jsonl.empty() && (type == std::filesystem::file_type::regular || type == std::filesystem::file_type::not_found))
            if (Status s = fs::check_output_file(o->jsonl, fs::OutputKind::kText, "--jsonl"); !s.is_ok()) return fail(s);
        if (!o->jsonl.empty() && std::filesystem::is_directory(o->jsonl, ec))
            return fail(invalid_argument("--jsonl {} is a directory; name a file to append to", o->jsonl));
        if (Status s = check_distinct_files(
                {{o->jsonl, "--jsonl", true}, {o->rules, "--rules", false}, {o->replay, "--replay", false}});
            !s.is_ok())
            return fail(s);
        for (int p : o->pids) {
            if (std::find(mo.pids.begin(), mo.pids.end(), static_cast<pid_t>(p)) != mo.pids.end() || p == getpid())
                continue;  // each process once (strato itself is always reported)
            if (signals::process_gone(p))
                return fail(not_found("--pid {}: no such process", p));
            mo.pids.push_back(static_cast<pid_t>(p));
        }
        mo.interval_s = *parse_duration_s(o->interval);  // (checked by the flag's validator)
        mo.duration_s = *parse_duration_s(o->duration);
        if (!o->rules.empty()) {
            auto loaded = monitor::load_rules(o->rules);
            if (!loaded) return fail(loaded.status());
            mo.rules = std::move(*loaded);
        }
        auto m = monitor::Monitor::create(mo);
        if (!m) return fail(m.status());
        if (o->once) {
            (*m)->sample();  // CPU utilisation is a difference: take it over the next 250 ms
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
            monitor::Snapshot s = (*m)->sample();
            // (the Prometheus text has no place for them: "no GPU: cannot load NVML (...)" went unsaid)
            for (const auto& note : s.notes) log::warn("monitor: {}", note);
            fmt::print("{}", o->json ? json_text(monitor::to_json(s), 2) + "\n" : monitor::to_prometheus(s));
            return void(*exit_code = 0);
        }
        signals::install_stop_handlers();
        log::info("monitor: {}; {}{} rule(s)", (*m)->gpu_summary(),
                  (*m)->port() >= 0 ? fmt::format("metrics at http://{}/metrics; ", host_port_text(o->address, (*m)->port()))
                                    : "",
                  mo.rules.size());
        auto summary = (*m)->run();
        if (!summary) return fail(summary.status());
        log::info("monitor: {} samples, {} alerts fired", summary->samples, summary->alerts_fired);
        if (!summary->exit_alert.empty()) {
            fmt::print(stderr, "strato monitor: alert: {}\n", summary->exit_alert);
            return void(*exit_code = 3);
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
