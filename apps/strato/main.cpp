// strato: one binary for the life of a model. Subcommands live in *_cmd.cpp.

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "strato/core/config.h"
#include "strato/core/duration.h"
#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/core/memory.h"
#include "strato/core/parse.h"

namespace strato::cli {

void put(std::FILE* f, std::string_view text) { (void)std::fwrite(text.data(), 1, text.size(), f); }

int report_error(const std::string& command, const Status& status) {
    const std::string& msg = status.message();
    size_t nl = msg.find('\n');
    put(stderr, fmt::format("strato {}: error: {}\n", command, msg.substr(0, nl)));
    if (nl != std::string::npos) put(stderr, msg.substr(nl + 1) + "\n");
    return status.code() == StatusCode::kCancelled ? 130 : 1;
}

int report_usage_error(const std::string& command, const std::string& message) {
    report_error(command, invalid_argument("{}", message));
    return 2;
}

Status check_distinct_files(const std::vector<FileFlag>& files) {
    std::vector<std::pair<std::string, const FileFlag*>> seen;
    for (const FileFlag& f : files) {
        if (f.path.empty()) continue;
        std::error_code ec;
        std::string real = std::filesystem::weakly_canonical(std::filesystem::absolute(f.path, ec), ec).string();
        if (ec || real.empty()) real = f.path;
        if (f.output && fs::is_stdout(f.path)) real = "standard output";  // ("-" and /dev/stdout alike)
        for (const auto& [other_real, other] : seen) {
            // Two names of one file (a hard link, a bind mount) are the same file too.
            const bool same = other_real == real || (real != "standard output" && other_real != "standard output" &&
                                                     std::filesystem::equivalent(other->path, f.path, ec));
            if (same && (f.output || other->output))
                return invalid_argument("{} and {} name the same file {}: the output would replace the other",
                                        other->flag, f.flag, real == "standard output" ? real : f.path);
        }
        seen.emplace_back(real, &f);
    }
    return Status::ok();
}

std::FILE* text_stream(std::initializer_list<std::string_view> outputs) {
    for (std::string_view out : outputs)
        if (fs::is_stdout(std::filesystem::path(out))) return stderr;
    return stdout;
}

CLI::Validator finite_range(double lo, double hi) {
    return CLI::Validator(
        [lo, hi](std::string& text) -> std::string {
            auto v = parse_number(text, NAN, "");
            if (!v.is_ok() || !(*v >= lo && *v <= hi)) return fmt::format("expected a number in [{}, {}], got '{}'", lo, hi, text);
            return {};
        },
        fmt::format("NUMBER in [{}, {}]", lo, hi));
}

CLI::Validator finite_above(double lo, double hi) {
    return CLI::Validator(
        [lo, hi](std::string& text) -> std::string {
            auto v = parse_number(text, NAN, "");
            if (!v.is_ok() || !(*v > lo && *v <= hi)) return fmt::format("expected a number in ({}, {}], got '{}'", lo, hi, text);
            return {};
        },
        fmt::format("NUMBER in ({}, {}]", lo, hi));
}

CLI::Validator duration_flag(const std::string& default_unit, bool positive, double min_s) {
    return CLI::Validator(
        [default_unit, positive, min_s](std::string& text) -> std::string {
            auto ns = parse_duration_ns(text, default_unit);
            if (!ns) return ns.status().message();
            if (positive && *ns == 0) return fmt::format("duration '{}': expected more than 0", text);
            if (static_cast<double>(*ns) < min_s * 1e9) return fmt::format("duration '{}': expected at least {:g}s", text, min_s);
            return {};
        },
        fmt::format("DURATION (bare numbers: {})", default_unit));
}

Result<int64_t> parse_busy_poll_ns(const std::string& text) {
    auto ns = parse_duration_ns(text, "us");
    if (!ns) return ns.status().with_context("--busy-poll");
    if (*ns < 0 || *ns > 10'000'000) return invalid_argument("--busy-poll must be between 0 and 10ms, not '{}'", text);
    return *ns;
}

CLI::Validator set_flag(const std::string& only_section) {
    return CLI::Validator(
        [only_section](std::string& text) -> std::string {
            const size_t eq = text.find('=');
            if (eq == std::string::npos || eq == 0 || text.find_first_not_of(" \t") == eq)
                return fmt::format("expected section.key=value, such as {}.{}, got '{}'",
                                   only_section.empty() ? "optim" : only_section,
                                   only_section.empty() ? "lr=0.1" : "limit_test=1000", text);
            // (eval, quantize and distill's evaluation take the [data] section only: `--set
            // model.arch=cnn` was accepted and did nothing, the model being the package's)
            const size_t key = text.find_first_not_of(" \t");
            if (!only_section.empty() && text.compare(key, only_section.size() + 1, only_section + ".") != 0)
                return fmt::format("only {}.* keys apply here (the model and how it was trained come from the package), "
                                   "got '{}'",
                                   only_section, text);
            return {};
        },
        "KEY=VALUE");
}

CLI::Validator listen_address_flag() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            unsigned char buf[sizeof(in6_addr)];
            if (text == "localhost" || ::inet_pton(AF_INET, text.c_str(), buf) == 1 ||
                ::inet_pton(AF_INET6, text.c_str(), buf) == 1)
                return {};
            return fmt::format("'{}' is not an IP address to listen on (expected e.g. 127.0.0.1, 0.0.0.0, ::1 or "
                               "localhost)",
                               text);
        },
        "ADDRESS");
}

CLI::Validator status_flag(const std::string& flag, std::function<Status(const std::string&)> check,
                           const std::string& type) {
    return CLI::Validator(
        [flag, check = std::move(check)](std::string& text) -> std::string {
            const Status st = check(text);
            if (st.is_ok()) return {};
            // CLI11 puts "<flag>: " before the message: the flag is not named twice.
            std::string_view m = st.message();
            for (const std::string& prefix : {flag + ": ", flag + " "})
                if (m.substr(0, prefix.size()) == prefix) return std::string(m.substr(prefix.size()));
            return std::string(m);
        },
        type);
}

std::string trained_for(int64_t epochs, int64_t steps) {
    if (epochs == 0 && steps > 0) return fmt::format("after {} steps (part of the first epoch)", steps);
    return fmt::format("after {} epoch{}, {} steps", epochs, epochs == 1 ? "" : "s", steps);
}

std::string rate_text(double v) {
    if (!(v > 0) || v >= 100) return fmt::format("{:.0f}", v);
    return fmt::format("{:.3g}", v);
}

std::string weights_note(int64_t weights_step, int64_t steps) {
    if (weights_step == steps) return "";
    return fmt::format(" (weights of step {}, the best evaluation)", weights_step);
}

CLI::Validator busy_poll_flag() {
    return status_flag("--busy-poll", [](const std::string& text) { return parse_busy_poll_ns(text).status(); },
                       "DURATION in [0, 10ms] (bare numbers: us)");
}

CLI::Validator file_path_flag(const std::string& why) {
    return CLI::Validator(
        [why](std::string& v) {
            if (!v.empty()) return std::string();
            return "expected a file path, got an empty one" + (why.empty() ? "" : " (" + why + ")");
        },
        "FILE");
}

}  // namespace strato::cli

int main(int argc, char** argv) {
    using namespace strato;
    configure_allocator();
    CLI::App app{"strato: train, tune, evaluate, report on, serve and load-test deep-learning models, and plan, monitor and autoscale their cloud machines, natively.\n"
                 "Run `strato <command> --help` for a command's flags and examples."};
    app.set_version_flag("--version", "strato 0.1.0");
    app.require_subcommand(1);
    app.fallthrough();
    cli::GlobalFlags g;
    app.add_flag("-q,--quiet", g.quiet, "Only warnings and errors; no progress bars");
    app.add_flag("-v,--verbose", g.verbose, "Debug logging");
    app.footer(
        "Examples:\n"
        "  strato train configs/fashion_mnist_cnn.toml\n"
        "  strato eval --model runs/fashion_mnist_cnn/model\n"
        "  strato export --model runs/fashion_mnist_cnn/model\n"
        "  strato report runs/fashion_mnist_cnn\n"
        "  strato serve --model runs/fashion_mnist_cnn/model\n"
        "  strato loadtest --model fashion_mnist_cnn --concurrency-range 1:32:x2\n"
        "  strato tune run configs/tune/fashion_mnist_mlp.toml\n"
        "  strato launch --standalone --nproc-per-node 2 strato train configs/fashion_mnist_cnn.toml\n"
        "  strato data pack photos/ photos-shards/ --shard-size 256MB\n"
        "  strato plan --workload resnet50-imagenet --deadline 4h\n"
        "  strato monitor --rules configs/monitor/alerts.toml\n"
        "  strato autoscale simulate --policy configs/autoscale/seeds.toml --trace bench/cloud/week_trace.csv --per-gpu-capacity 600\n"
        "  strato doctor");
    int exit_code = 0;
    cli::add_train_command(app, g, &exit_code);
    cli::add_eval_command(app, g, &exit_code);
    cli::add_report_command(app, g, &exit_code);
    cli::add_doctor_command(app, g, &exit_code);
    cli::add_monitor_command(app, g, &exit_code);
    cli::add_launch_command(app, g, &exit_code);
    cli::add_serve_command(app, g, &exit_code);
    cli::add_loadtest_command(app, g, &exit_code);
#ifndef STRATO_MINIMAL  // the minimal subset (-DSTRATO_MINIMAL=ON, docs/gpu.md) has the commands above
    cli::add_export_command(app, g, &exit_code);
    cli::add_plan_command(app, g, &exit_code);
    cli::add_autoscale_command(app, g, &exit_code);
    cli::add_tune_command(app, g, &exit_code);
    cli::add_data_command(app, g, &exit_code);
    cli::add_compress_command(app, g, &exit_code);
#endif
    app.parse_complete_callback([&] {
        log::set_level(g.verbose ? log::Level::kDebug : g.quiet ? log::Level::kWarn : log::Level::kInfo);
    });
    try {
        app.parse(cli::split_launch_command(argc, argv), argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version are 0; every usage error (unknown command or flag, a value the
        // parser refuses) is 2, as argparse and getopt tools (torchrun among them) exit, rather
        // than CLI11's 105-114.
        if (e.get_exit_code() != 0) {
            // A word where a command was expected ("A subcommand is required" for `strato trian`
            // or `strato tune rn`): named, with the commands there are.
            CLI::App* at = &app;
            std::vector<std::string> chain;
            while (!at->get_subcommands().empty()) {
                at = at->get_subcommands().front();
                chain.push_back(at->get_name());
            }
            const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
            // The word right after the command chain (after strato's own -q/-v at the top), if
            // that is where a command belongs: an option's value is never taken for one.
            int i = 1, matched = 0;
            for (; i < argc; ++i) {
                const std::string word = argv[i];
                if (matched < static_cast<int>(chain.size())) {
                    if (word == chain[static_cast<size_t>(matched)]) ++matched;
                    continue;
                }
                if (chain.empty() && (word == "-q" || word == "--quiet" || word == "-v" || word == "--verbose")) continue;
                break;
            }
            std::string names, closest;
            size_t best = 3;  // (at most two edits away: "trian", "tune rn")
            for (const auto* sub : subs) {
                names += (names.empty() ? "" : ", ") + sub->get_name();
                if (i < argc) {
                    const size_t d = config::edit_distance(argv[i], sub->get_name());
                    if (d < best) best = d, closest = sub->get_name();
                }
            }
            const std::string where = chain.empty() ? "" : fmt::format(" of {}", fmt::join(chain, " "));
            if (!subs.empty() && i < argc && argv[i][0] != '-' && argv[i][0] != '\0') {
                fmt::print(stderr, "strato: '{}' is not a command{}{} (commands: {})\nRun with --help for more information.\n",
                           argv[i], where, closest.empty() ? "" : fmt::format("; did you mean '{}'?", closest), names);
                return 2;
            }
            // No command word at all (`strato`, `strato tune`): the commands there are.
            if (!subs.empty() && i >= argc && at->get_subcommands().empty() &&
                std::string(e.what()).find("subcommand is required") != std::string::npos) {
                fmt::print(stderr, "strato{}: a command is required: {}\nRun with --help for more information.\n",
                           chain.empty() ? "" : " " + fmt::format("{}", fmt::join(chain, " ")), names);
                return 2;
            }
        }
        return app.exit(e) == 0 ? 0 : 2;
    } catch (const std::exception& e) {
        strato::cli::put(stderr, fmt::format("strato: error: {}\n", e.what()));
        return 1;
    }
    return exit_code;
}
