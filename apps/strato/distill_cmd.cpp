// strato compress distill --teacher PKG --config STUDENT.toml [--temperature T] [--alpha A] [--set k=v]...
// strato compress report --model LABEL=DIR[@bf16|@eager]... [--data PATH] [--dataset KIND] [--threads N] [--runs N]

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/compress/distill.h"
#include "strato/compress/report.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/signals.h"
#include "strato/report/run_report.h"

namespace strato::cli {

void add_compress_distill_command(CLI::App& compress, const GlobalFlags& g, int* exit_code) {
    struct Opts {
        std::string config;
        std::vector<std::string> sets;
        compress::DistillOptions d;
        bool resume = false, overwrite = false, json = false, no_report = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = compress.add_subcommand(
        "distill", "Train a (smaller) student config from a teacher package with the knowledge-distillation loss");
    cmd->add_option("--teacher", o->d.teacher, "The teacher's model package (runs/NAME/model)")
        ->required()
        ->check(file_path_flag());
    cmd->add_option("--config", o->config,
                    "The student's training config (TOML), e.g. configs/fashion_mnist_student.toml")
        ->required()
        ->check(file_path_flag());  // (an empty one was "config file  cannot be read", exit 1)
    cmd->add_option("--temperature", o->d.temperature, "Softmax temperature T in [0.05, 100] for teacher and student")
        ->capture_default_str()
        ->check(finite_range(0.05, 100));
    cmd->add_option("--alpha", o->d.alpha, "Weight of the teacher's term in [0, 1]; 1 - alpha goes to the labels")
        ->capture_default_str()
        ->check(finite_range(0, 1));
    cmd->add_option("--set", o->sets, "Override a key of the student's config: --set train.epochs=5 (repeatable)")
        ->check(set_flag());
    cmd->add_flag("--resume", o->resume, "Continue from the run's latest checkpoint (starts fresh when there is none)");
    cmd->add_flag("--overwrite", o->overwrite, "Delete an existing run directory of the same name first");
    cmd->add_flag("--json", o->json, "Print the result as JSON on stdout");
    cmd->add_flag("--no-report", o->no_report, "Do not write report.html");
    cmd->footer(
        "The loss is (1 - alpha) * CE(student, labels) + alpha * T^2 * KL(softmax(teacher/T) || softmax(student/T)).\n"
        "The teacher must take the same images and predict the same classes as the student's data; a teacher\n"
        "trained with another input normalisation gets its inputs re-normalised, one that names the same classes\n"
        "in another order has its outputs reordered. The run is a `strato train` run (run directory, checkpoints,\n"
        "--resume, metrics.jsonl, report.html); its package's metrics.json names the teacher. --resume of a run\n"
        "that `strato train` started, without a teacher, is refused.\n"
        "Examples:\n"
        "  strato train configs/fashion_mnist_cnn.toml                   # the teacher\n"
        "  strato compress distill --teacher runs/fashion_mnist_cnn/model \\\n"
        "      --config configs/fashion_mnist_student.toml\n"
        "  strato compress distill --teacher runs/fashion_mnist_cnn/model \\\n"
        "      --config configs/fashion_mnist_student.toml --temperature 2 --alpha 0.5 \\\n"
        "      --set run.name=student_t2 --set train.epochs=6\n"
        "  strato compress distill --teacher T --config S.toml --resume  # after Ctrl-C or a crash\n"
        "Ctrl-C (SIGINT) or SIGTERM finishes the current step, writes a checkpoint and exits with 130.");
    cmd->callback([o, &g, exit_code] {
        auto cfg = train::load_train_config(o->config, o->sets);
        if (!cfg) return void(*exit_code = report_error("compress distill", cfg.status()));
        signals::install_stop_handlers();
        auto r = compress::distill(*cfg, o->d,
                                   {.resume = o->resume, .overwrite = o->overwrite, .quiet = g.quiet || o->json});
        if (!r) return void(*exit_code = report_error("compress distill", r.status()));
        std::string report_path;
        if (!o->no_report) {
            report_path = (std::filesystem::path(r->run_dir) / "report.html").string();
            Status st = report::write_run_report(r->run_dir, report_path);
            if (!st.is_ok())
                return void(*exit_code = report_error("compress distill", st.with_context("writing the report")));
        }
        if (o->json) {
            nlohmann::json j = {{"run_dir", r->run_dir},
                                {"package", r->package_dir},
                                {"report", report_path},
                                {"teacher", o->d.teacher},
                                {"temperature", o->d.temperature},
                                {"alpha", o->d.alpha},
                                {"test_acc", r->test_acc},
                                {"test_loss", r->test_loss},
                                {"best_test_acc", r->best_test_acc},
                                {"epochs", r->epochs},
                                {"steps", r->steps},
                                {"wall_time_s", r->wall_time_s},
                                {"early_stopped", r->early_stopped},
                                {"weights_step", r->weights_step}};
            fmt::print("{}\n", json_text(j, 2));
        } else {
            fmt::print("student test accuracy: {:.2f}% (best {:.2f}%) {}, {:.1f} s\n", 100 * r->test_acc,
                       100 * r->best_test_acc, trained_for(r->epochs, r->steps), r->wall_time_s);
            fmt::print("model package: {}{}\n", r->package_dir, weights_note(r->weights_step, r->steps));
            if (!report_path.empty()) fmt::print("report:        {}\n", report_path);
            fmt::print("compare:       strato compress report --model teacher={} --model student={}\n", o->d.teacher,
                       r->package_dir);
        }
        *exit_code = 0;
    });
}

void add_compress_report_command(CLI::App& compress, const GlobalFlags&, int* exit_code) {
    struct Opts {
        std::vector<std::string> models;
        std::string config, data, dataset, markdown;
        std::vector<std::string> sets;
        compress::CompareOptions c;
        bool json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = compress.add_subcommand(
        "report",
        "Compare model packages: accuracy, size on disk, parameters, latency (batch 1), throughput (batch 64)");
    cmd->add_option("--model", o->models,
                    "A row: LABEL=DIR, LABEL=DIR@bf16 to run a float package's graph in bf16 (as serve's precision "
                    "\"bf16\"), LABEL=DIR@eager to time its eager network instead of the fused graph the server runs, or "
                    "LABEL=DIR@bf16-eager for the eager network under bf16 autocast (repeatable; the first row is the "
                    "baseline of the ratios)")
        ->required();
    cmd->add_option("--config", o->config, "Take the [data] section from this training config")
        ->check(file_path_flag());
    cmd->add_option("--set", o->sets, "Override a [data] key, e.g. --set data.limit_test=2000")->check(set_flag("data"));
    cmd->add_option("--data", o->data, "Dataset directory (default: Debian's Fashion-MNIST)")->check(file_path_flag());
    // Checked as eval checks it (data.dataset's list of kinds): an unknown kind is a usage error (exit 2).
    cmd->add_option("--dataset", o->dataset, "Dataset kind: fashion-mnist, idx, image-folder, shards, csv, synthetic")
        ->check(status_flag(
            "--dataset", [](const std::string& v) { return data_config_from_flags("", {}, "", v).status(); }, "KIND"));
    cmd->add_option("--threads", o->c.threads, "Intra-op threads (0 = one per usable CPU)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
    cmd->add_option("--runs", o->c.latency_runs, "Timed forward passes at batch 1 (throughput: a tenth, at least 20)")
        ->capture_default_str()
        ->check(CLI::Range(1, 10000000));
    cmd->add_option("--rounds", o->c.rounds,
                    "Interleave the rows' timed passes over this many rounds, so a machine that slows down for a "
                    "while slows every row alike")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    cmd->add_option("--markdown", o->markdown, "Also write the table as Markdown to this file (for bench/RESULTS.md)");
    cmd->add_flag("--json", o->json, "Print the report as JSON instead of a table");
    cmd->footer(
        "Accuracy is `strato eval`'s on the test split; latency and throughput time the package's forward pass as\n"
        "`strato serve` runs it (channels-last for convolutional nets, InferenceMode, CPU), after a warm-up, every\n"
        "row in turn for --rounds rounds.\n"
        "Examples:\n"
        "  strato compress report --model teacher=runs/fashion_mnist_cnn/model \\\n"
        "      --model teacher-bf16=runs/fashion_mnist_cnn/model@bf16 \\\n"
        "      --model student-kd=runs/fashion_mnist_student_kd/model --model int8=runs/cnn_int8/model\n"
        "  strato compress report --model a=runs/x/model --model b=runs/y/model --set data.limit_test=2000 \\\n"
        "      --threads 2 --runs 500 --markdown compress.md\n"
        "  strato compress report --model a=runs/x/model --dataset image-folder --data photos/ --json\n"
        "Ctrl-C (SIGINT) or SIGTERM stops it and exits with 130, naming the accuracies measured so far; no table\n"
        "is printed and --markdown is not written (the timing is incomplete).");
    cmd->callback([o, exit_code] {
        signals::install_stop_handlers();  // Ctrl-C: "interrupted ..." and exit 130, not a silent death
        if (!o->markdown.empty()) {
            Status s = fs::check_output_file(o->markdown, fs::OutputKind::kText, "--markdown");
            const auto parent = std::filesystem::path(o->markdown).parent_path();
            if (std::error_code ec; s.is_ok() && !parent.empty() && !std::filesystem::is_directory(parent, ec))
                s = not_found("--markdown {}: directory {} does not exist", o->markdown, parent.string());
            if (s.is_ok()) s = check_distinct_files({{o->markdown, "--markdown", true}, {o->config, "--config", false}});
            if (!s.is_ok()) return void(*exit_code = report_error("compress report", s));
        }
        auto data = data_config_from_flags(o->config, o->sets, o->data, o->dataset);
        if (!data) return void(*exit_code = report_error("compress report", data.status()));
        std::vector<compress::Variant> variants;
        for (const auto& spec : o->models) {
            auto v = compress::parse_variant(spec);
            if (!v) return void(*exit_code = report_error("compress report", v.status().with_context("--model")));
            variants.push_back(*v);
        }
        o->c.data = *data;
        o->c.throughput_runs = std::max<int64_t>(20, o->c.latency_runs / 10);
        auto r = compress::compare(variants, o->c);
        if (!r) return void(*exit_code = report_error("compress report", r.status()));
        // The table first: minutes of measuring are not lost to a --markdown that cannot be written.
        if (o->json) fmt::print("{}\n", json_text(compress::to_json(*r), 2));
        else fmt::print("{}", compress::format_table(*r));
        if (!o->markdown.empty()) {
            Status st = fs::atomic_write(o->markdown, compress::format_markdown(*r));
            if (!st.is_ok()) return void(*exit_code = report_error("compress report", st.with_context("--markdown")));
            if (!o->json) fmt::print("markdown: {}\n", o->markdown);
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
