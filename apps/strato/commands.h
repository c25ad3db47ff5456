#pragma once
// Subcommands of the strato binary. Each file parses its flags and calls the libraries; the
// callbacks store the process exit code in `*exit_code`.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string_view>

#include "strato/core/status.h"
#include "strato/data/data_config.h"

namespace strato::cli {

struct GlobalFlags {
    bool quiet = false;
    bool verbose = false;
};

void add_train_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_eval_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_export_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_report_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_doctor_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_serve_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_loadtest_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_plan_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_monitor_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_autoscale_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_tune_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
/// `strato data bench`, a subcommand of `strato data` (data_bench_cmd.cpp).
void add_data_bench_command(CLI::App& data, const GlobalFlags& g, int* exit_code);
void add_launch_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_data_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
void add_compress_command(CLI::App& app, const GlobalFlags& g, int* exit_code);
// The subcommands of `strato compress` (each in its own file).
void add_compress_prune_command(CLI::App& compress, const GlobalFlags& g, int* exit_code);
void add_compress_distill_command(CLI::App& compress, const GlobalFlags& g, int* exit_code);
void add_compress_report_command(CLI::App& compress, const GlobalFlags& g, int* exit_code);
/// For `strato [-q] launch [OPTIONS] COMMAND [ARGS...]`: keeps COMMAND... for the launch command
/// and returns how many arguments CLI11 should parse (all of them for other commands).
int split_launch_command(int argc, char** argv);

/// The [data] section commands that read a dataset but train nothing take from their flags:
/// `--config FILE` (its [data]), `--set key=value` overrides, then `--data PATH` / `--dataset KIND`.
Result<data::DataConfig> data_config_from_flags(const std::string& config, const std::vector<std::string>& sets,
                                                const std::string& data, const std::string& dataset);

/// Prints `strato <cmd>: error: <message>` (further lines as hints) to stderr; returns the exit code
/// (130 for an interrupted run, 1 otherwise).
int report_error(const std::string& command, const Status& status);
/// A usage error found after parsing (a missing target, flags that conflict): printed as
/// report_error prints, and 2 returned, the exit status of CLI11's own usage errors.
int report_usage_error(const std::string& command, const std::string& message);

/// A file a command reads or writes, named by `flag` (empty paths are skipped).
struct FileFlag {
    std::string path;
    const char* flag;
    bool output;
};
/// Refuses an output that names the same file as another flag's input or output (compared as
/// absolute paths with links resolved): it would replace the other (`--json trace.csv`).
Status check_distinct_files(const std::vector<FileFlag>& files);
/// Where a command prints its own text: stderr when one of its output flags names standard output
/// ("-", /dev/stdout: `--json - | jq` gets the data alone), stdout otherwise.
std::FILE* text_stream(std::initializer_list<std::string_view> outputs);

/// A flag's number: finite and within [lo, hi] (CLI::Range lets NaN through: every comparison
/// with NaN is false).
CLI::Validator finite_range(double lo, double hi);

/// A flag's number: finite, above `lo` and at most `hi`.
CLI::Validator finite_above(double lo, double hi);

/// A flag's duration (250ms, 10s, 2m, 8h, 3d; a bare number in `default_unit`), more than 0 when
/// `positive` and at least `min_s`: a usage error (exit 2) otherwise.
CLI::Validator duration_flag(const std::string& default_unit, bool positive, double min_s = 0);

/// `--busy-poll D` of loadtest and serve, in ns: a duration (bare numbers are µs) from 0 to 10 ms.
Result<int64_t> parse_busy_poll_ns(const std::string& text);

/// The check of `--busy-poll` (parse_busy_poll_ns) as a flag validator: a usage error (exit 2),
/// found before the command starts anything.
CLI::Validator busy_poll_flag();
/// A flag naming a file: an empty value (an unset variable in a script) is a usage error whose
/// message adds `why` when given ("expected a file path, got an empty one (<why>)").
CLI::Validator file_path_flag(const std::string& why = "");

/// An address to listen on: an IPv4 or IPv6 literal, or "localhost" (127.0.0.1); a name or a
/// typo is a usage error (exit 2) before anything starts.
CLI::Validator listen_address_flag();

/// A `--set section.key=value` override: without `=` or a key, a usage error (exit 2), as
/// other malformed flags are; the value itself is checked with the config. With `only_section`
/// ("data"), a key of another section is a usage error too.
CLI::Validator set_flag(const std::string& only_section = "");

/// Writes `text` to `f`, errors ignored: fmt::print throws on a closed pipe where SIGPIPE is ignored
/// (loadtest ignores it so that `| head` keeps what it measured), and an error message about that
/// error then ended in std::terminate (SIGABRT) instead of the exit status.
void put(std::FILE* f, std::string_view text);

/// "after 3 epochs, 1407 steps", or "after 20 steps (part of the first epoch)": a run stopped by
/// train.max_steps inside its first epoch said "after 0 epochs".
std::string trained_for(int64_t epochs, int64_t steps);
/// "" when a package holds the last weights; " (weights of step 60, the best evaluation)" when
/// early stopping restored the best evaluation's.
std::string weights_note(int64_t weights_step, int64_t steps);
/// A rate for a table or a line: whole numbers from 100 up, three significant digits below (a
/// large model runs well under one sample a second per GPU; "0" said it did not run at all).
std::string rate_text(double v);

/// A flag validator from a check whose message names the flag itself ("--flag: ..." or
/// "--flag ..."): a usage error (exit 2) whose message names it once (CLI11 puts it in front).
CLI::Validator status_flag(const std::string& flag, std::function<Status(const std::string&)> check,
                           const std::string& type);

}  // namespace strato::cli
