// strato report RUN_DIR|FILE.json [--out FILE]

#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "strato/core/fs.h"
#include "strato/report/loadtest_report.h"
#include "strato/report/run_report.h"

namespace strato::cli {

void add_report_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        std::string run_dir, out;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand(
        "report", "Write a self-contained HTML report (charts, tables) of a run, a load test or an autoscaling simulation");
    cmd->add_option("run_dir", o->run_dir,
                    "Run directory (runs/NAME), or the JSON of `strato loadtest --json` or `strato autoscale simulate "
                    "--json`")
        ->required()
        ->check(CLI::Validator(
            [](std::string& v) {
                return v.empty() ? std::string("expected a run directory or the .json of strato loadtest or strato "
                                               "autoscale simulate, got ''")
                                 : "";
            },
            "PATH"));
    // (an --out "$OUT" with OUT unset wrote the default file, without a word)
    cmd->add_option("--out", o->out, "Output file (default: RUN_DIR/report.html, or FILE.html next to the JSON; - for stdout)")
        ->check(CLI::Validator(
            [](std::string& v) { return v.empty() ? std::string("expected a file name, got ''") : ""; }, "FILE"));
    cmd->footer(
        "Examples:\n  strato report runs/fashion_mnist_cnn && chromium runs/fashion_mnist_cnn/report.html\n"
        "  strato loadtest --model fashion_mnist_cnn --concurrency-range 1:16:x2 --json lt.json && strato report lt.json\n"
        "  strato autoscale simulate --policy P.toml --trace T.csv --per-gpu-capacity 600 --json sim.json && strato report "
        "sim.json");
    cmd->callback([o, exit_code] {
        std::filesystem::path in(o->run_dir);
        const bool result_json = in.extension() == ".json" && !std::filesystem::is_directory(in);
        std::string out = !o->out.empty() ? o->out
                          : result_json   ? std::filesystem::path(in).replace_extension(".html").string()
                                          : (in / "report.html").string();
        // (a default output inside an input that is no run directory: the input's own error says more)
        Status st = Status::ok();
        std::error_code ec;
        if (!o->out.empty() || result_json || std::filesystem::is_regular_file(in / "metrics.jsonl", ec))
            st = fs::check_output_file(out, fs::OutputKind::kHtml, "--out");
        if (!st.is_ok()) return void(*exit_code = report_error("report", st));
        st = result_json ? report::write_json_report(o->run_dir, out) : report::write_run_report(o->run_dir, out);
        if (!st.is_ok()) return void(*exit_code = report_error("report", st));
        fmt::print(text_stream({out}), "report: {}\n", out);
        *exit_code = 0;
    });
}

}  // namespace strato::cli
