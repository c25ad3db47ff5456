// strato train CONFIG [--set key=value]... [--resume] [--overwrite]

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/core/json.h"
#include "strato/core/signals.h"
#include "strato/report/run_report.h"
#include "strato/train/trainer.h"

namespace strato::cli {

void add_train_command(CLI::App& app, const GlobalFlags& g, int* exit_code) {
    struct Opts {
        std::string config;
        std::vector<std::string> sets;
        bool resume = false, overwrite = false, json = false, no_report = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("train", "Train a model from a TOML config; writes a run directory with checkpoints, "
                                            "metrics.jsonl, the model package and report.html");
    cmd->add_option("config", o->config, "Training config (TOML), e.g. configs/fashion_mnist_cnn.toml")->required();
    cmd->add_option("--set", o->sets, "Override a config key: --set optim.lr=0.1 (repeatable)")->check(set_flag());
    auto* resume = cmd->add_flag("--resume", o->resume,
                  "Continue from the run's newest usable checkpoint (a corrupt one is skipped for the one before); "
                  "starts fresh when the run has none, unless that would replace its package or evaluated metrics");
    // Both at once deleted the run that --resume was to continue (found by review): one or the other.
    cmd->add_flag("--overwrite", o->overwrite,
                  "Delete an existing run directory of the same name first (not on an elastic restart by strato "
                  "launch or torchrun, TORCHELASTIC_RESTART_COUNT > 0: that resumes, with or without --resume)")
        ->excludes(resume);
    cmd->add_flag("--json", o->json, "Print the result as JSON on stdout");
    cmd->add_flag("--no-report", o->no_report, "Do not write report.html");
    cmd->footer(
        "Examples:\n"
        "  strato train configs/fashion_mnist_cnn.toml\n"
        "  strato train configs/fashion_mnist_cnn.toml --set train.epochs=3 --set train.precision=bf16\n"
        "  strato train configs/fashion_mnist_resnet.toml --resume     # after Ctrl-C or a crash\n"
        "  strato train bench/gpu/resnet50_synthetic.toml --set train.precision=fp16 --set train.cuda_graph=true  # GPU build (docs/gpu.md)\n"
        "Ctrl-C (SIGINT) or SIGTERM finishes the current step (or test batch), writes a checkpoint and exits with "
        "130.");
    cmd->callback([o, &g, exit_code] {
        auto cfg = train::load_train_config(o->config, o->sets);
        if (!cfg) return void(*exit_code = report_error("train", cfg.status()));
        signals::install_stop_handlers();
        auto r = train::run_training(*cfg, {.resume = o->resume, .overwrite = o->overwrite, .quiet = g.quiet || o->json});
        if (!r) return void(*exit_code = report_error("train", r.status()));
        if (r->rank != 0) {
            // Rank 0 writes the run directory, the package and the report; another rank's node may
            // not even have the directory (found by review: rank 1 then failed "writing the report"
            // after a good run, which strato launch counted as a failed worker).
            if (o->json)
                fmt::print("{}\n", json_text(nlohmann::json{{"rank", r->rank}, {"test_acc", r->test_acc},
                                                             {"steps", r->steps}, {"epochs", r->epochs}},
                                              2));
            else
                fmt::print("rank {}: test accuracy {:.2f}% {}; rank 0 writes the package and the report\n", r->rank,
                           100 * r->test_acc, trained_for(r->epochs, r->steps));
            *exit_code = 0;
            return;
        }
        std::string report_path, report_problem;
        if (!o->no_report) {
            report_path = (std::filesystem::path(r->run_dir) / "report.html").string();
            Status st = report::write_run_report(r->run_dir, report_path);
            if (!st.is_ok()) {
                // The run and its package are complete: the report is an extra (found by review: a
                // damaged metrics.jsonl line made a finished run exit 1, which strato launch counts
                // as a failed worker, restarting a done run until its restarts were used up).
                report_problem = st.message();
                report_path.clear();
                put(stderr, fmt::format("strato train: warning: the report was not written: {}\nhint: the run and its "
                                        "package are complete; `strato report {}` writes the report once that is "
                                        "fixed\n",
                                        report_problem, r->run_dir));
            }
        }
        if (o->json) {
            nlohmann::json j = {{"run_dir", r->run_dir},       {"package", r->package_dir}, {"report", report_path},
                                {"test_acc", r->test_acc},     {"test_loss", r->test_loss}, {"best_test_acc", r->best_test_acc},
                                {"epochs", r->epochs},         {"steps", r->steps},         {"wall_time_s", r->wall_time_s},
                                {"early_stopped", r->early_stopped}, {"weights_step", r->weights_step}};
            if (!report_problem.empty()) j["report_error"] = report_problem;
            fmt::print("{}\n", json_text(j, 2));
        } else {
            fmt::print("test accuracy: {:.2f}% (best {:.2f}%) {}, {:.1f} s\n", 100 * r->test_acc, 100 * r->best_test_acc,
                       trained_for(r->epochs, r->steps), r->wall_time_s);
            fmt::print("model package: {}{}\n", r->package_dir, weights_note(r->weights_step, r->steps));
            if (!report_path.empty()) fmt::print("report:        {}\n", report_path);
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
