// strato report RUN_DIR [--out FILE]

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
    auto* cmd = app.add_subcommand("report", "Write a self-contained HTML report (charts, tables) of a run or a load test");
    cmd->add_option("run_dir", o->run_dir, "Run directory (runs/NAME), or a load test's JSON (strato loadtest --json FILE)")
        ->required()
        ->check(CLI::Validator(
            [](std::string& v) { return v.empty() ? std::string("expected a run directory or a load test's JSON, got ''") : ""; },
            "PATH"));
    cmd->add_option("--out", o->out, "Output file (default: RUN_DIR/report.html, or FILE.html next to the JSON)");
    cmd->footer(
        "Examples:\n  strato report runs/fashion_mnist_cnn && chromium runs/fashion_mnist_cnn/report.html\n"
        "  strato loadtest --model fashion_mnist_cnn --concurrency-range 1:16:x2 --json lt.json && strato report lt.json");
    cmd->callback([o, exit_code] {
        std::filesystem::path in(o->run_dir);
        bool loadtest = in.extension() == ".json" && !std::filesystem::is_directory(in);
        std::string out = !o->out.empty() ? o->out
                          : loadtest      ? std::filesystem::path(in).replace_extension(".html").string()
                                          : (in / "report.html").string();
        // (a default output inside an input that is no run directory: the input's own error says more)
        Status st = Status::ok();
        std::error_code ec;
        if (!o->out.empty() || loadtest || std::filesystem::is_regular_file(in / "metrics.jsonl", ec))
            st = fs::check_output_file(out, fs::OutputKind::kHtml, "--out");
        if (!st.is_ok()) return void(*exit_code = report_error("report", st));
        st = loadtest ? report::write_loadtest_report(o->run_dir, out) : report::write_run_report(o->run_dir, out);
        if (!st.is_ok()) return void(*exit_code = report_error("report", st));
        fmt::print("report: {}\n", out);
        *exit_code = 0;
    });
}

}  // namespace strato::cli
