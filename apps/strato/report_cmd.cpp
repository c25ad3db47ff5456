// strato report RUN_DIR [--out FILE]

#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "strato/report/run_report.h"

namespace strato::cli {

void add_report_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        std::string run_dir, out;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("report", "Write a self-contained HTML report (charts, config, final metrics) of a run");
    cmd->add_option("run_dir", o->run_dir, "Run directory (runs/NAME)")->required();
    cmd->add_option("--out", o->out, "Output file (default: RUN_DIR/report.html)");
    cmd->footer("Example:\n  strato report runs/fashion_mnist_cnn && chromium runs/fashion_mnist_cnn/report.html");
    cmd->callback([o, exit_code] {
        std::string out = o->out.empty() ? (std::filesystem::path(o->run_dir) / "report.html").string() : o->out;
        Status st = report::write_run_report(o->run_dir, out);
        if (!st.is_ok()) return void(*exit_code = report_error("report", st));
        fmt::print("report: {}\n", out);
        *exit_code = 0;
    });
}

}  // namespace strato::cli
