// strato tune run|status|best|export-best|report|slurm STUDY.toml [--dir DIR]

#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/signals.h"
#include "strato/report/tune_report.h"
#include "strato/tune/study.h"

namespace strato::cli {

namespace {

// A value `tune slurm` writes into an #SBATCH line, checked by the parser (a usage error, exit 2):
// a newline in --partition ran the rest of the value as a shell command in every array task.
CLI::Validator sbatch_value(tune::SbatchValue kind) {
    return CLI::Validator(
        [kind](std::string& v) -> std::string {
            Status s = tune::check_sbatch_value("", v, kind);  // (CLI11 names the flag)
            return s.is_ok() ? std::string() : s.message();
        },
        kind == tune::SbatchValue::kOption ? "SBATCH-OPTION" : "TEXT");
}

}  // namespace

void add_tune_command(CLI::App& app, const GlobalFlags& g, int* exit_code) {
    struct Opts {
        std::string study, dir, out;
        int parallel = 0, trials = 0, top = 10;
        tune::SlurmOptions slurm;
        bool submit = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("tune", "Hyper-parameter search: TPE, random or grid sampling; ASHA, median or no early "
                                           "stopping; parallel trial processes; a crash-safe SQLite study");
    cmd->require_subcommand(1);
    // Before the subcommands are added: CLI11 gives each its parent's footer as it is then.
    cmd->footer("Examples:\n"
                "  strato tune run configs/tune/fashion_mnist_mlp.toml\n"
                "  strato tune status configs/tune/fashion_mnist_mlp.toml\n"
                "  strato tune export-best configs/tune/fashion_mnist_mlp.toml -o best.toml && strato train best.toml\n"
                "  strato tune slurm configs/tune/fashion_mnist_mlp.toml --dir /shared/fmnist --tasks 8 --submit\n"
                "Ctrl-C stops the running trials at a checkpoint; `strato tune run` again continues the study.");
    auto load = [o]() -> Result<tune::StudyConfig> {
        STRATO_ASSIGN_OR_RETURN(tune::StudyConfig c, tune::StudyConfig::load(o->study));
        if (o->parallel > 0) c.parallel = o->parallel;
        if (o->trials > 0) c.trials = o->trials;
        return c;
    };
    auto add = [&](const char* name, const char* help) {
        auto* sub = cmd->add_subcommand(name, help);
        sub->add_option("study", o->study, "Study file (TOML: [study], [scheduler], [tpe], [params])")->required();
        sub->add_option("--dir", o->dir, "Study directory (default runs/tune/<name>)");
        return sub;
    };
    auto* run = add("run", "Run the study, or continue it where it stopped (also after kill -9)");
    run->add_option("--parallel", o->parallel, "Trial processes at once (overrides the study file)")
        ->check(CLI::Range(1, tune::kParallelMax));
    run->add_option("--trials", o->trials, "Number of trials (overrides the study file; raise it to extend a study)")
        ->check(CLI::Range(1, 1000000));
    run->callback([o, load, &g, exit_code] {
        auto c = load();
        if (!c) return void(*exit_code = report_error("tune", c.status()));
        signals::install_stop_handlers();
        tune::RunOptions ro;
        ro.dir = tune::study_dir(*c, o->dir);
        ro.quiet = g.quiet;
        auto s = tune::run_study(*c, ro);
        if (!s) return void(*exit_code = report_error("tune", s.status()));
        auto board = tune::leaderboard(*c, ro.dir, o->top);
        if (board) fmt::print("{}", *board);
        fmt::print("study directory: {}\n", ro.dir);
        // (the exit status said so, and nothing else did)
        if (s->failed == s->trials && s->trials > 0)
            return void(
                *exit_code = report_error(
                    "tune", invalid_argument("every trial of study {} failed ({} of {}); their logs are in "
                                             "{}/logs/\nhint: the end of a trial's log says why (a bad setting, "
                                             "divergence, the memory limit)",
                                             c->name, s->failed, s->trials, ro.dir)));
        *exit_code = 0;
    });
    auto* status = add("status", "Leaderboard and trial states");
    status->add_option("--top", o->top, "Rows (default 10)")->check(CLI::Range(1, 1000000));
    status->callback([o, load, exit_code] {
        auto c = load();
        if (!c) return void(*exit_code = report_error("tune", c.status()));
        auto board = tune::leaderboard(*c, tune::study_dir(*c, o->dir), o->top);
        if (!board) return void(*exit_code = report_error("tune", board.status()));
        fmt::print("{}", *board);
        *exit_code = 0;
    });
    auto* best = add("best", "The best trial as JSON");
    best->callback([o, load, exit_code] {
        auto c = load();
        if (!c) return void(*exit_code = report_error("tune", c.status()));
        // (the library's choice, as export-best's: a second copy of it here could disagree)
        auto b = tune::best_trial_json(*c, tune::study_dir(*c, o->dir));
        if (!b) return void(*exit_code = report_error("tune", b.status()));
        fmt::print("{}\n", json_text(*b, 2));
        *exit_code = 0;
    });
    auto* exp = add("export-best", "Write the best trial's full train config");
    exp->add_option("-o,--out", o->out, "Output TOML (default <dir>/best.toml; - for stdout)");
    exp->callback([o, load, exit_code] {
        auto c = load();
        if (!c) return void(*exit_code = report_error("tune", c.status()));
        std::string dir = tune::study_dir(*c, o->dir);
        std::string out = o->out.empty() ? dir + "/best.toml" : o->out;
        // The study first: one that is not there is the error ("the directory does not exist"
        // blamed the default --out, never given, in that directory).
        auto text = tune::best_config(*c, dir);
        Status s = text.status();
        // (a trial's metrics.jsonl is text, which check_output_file lets a text output replace)
        if (s.is_ok()) s = tune::check_study_output(dir, out, "--out");
        if (s.is_ok()) s = fs::check_output_file(out, fs::OutputKind::kText, "--out");
        // (the base train config too: overwritten, every later trial trained on the best one's values)
        if (s.is_ok())
            s = check_distinct_files({{out, "--out", true},
                                      {o->study, "the study file", false},
                                      {c->base, "the study's base train config", false}});
        if (s.is_ok()) s = fs::atomic_write(out, *text);
        if (!s.is_ok()) return void(*exit_code = report_error("tune", s));
        fmt::print(text_stream({out}), "{}\n", out);
        *exit_code = 0;
    });
    auto* rep = add("report", "HTML report: objective per trial over epochs, parameters vs objective, ASHA rungs");
    rep->add_option("-o,--out", o->out, "Output HTML (default <dir>/report.html; - for stdout)");
    rep->callback([o, load, exit_code] {
        auto c = load();
        if (!c) return void(*exit_code = report_error("tune", c.status()));
        std::string dir = tune::study_dir(*c, o->dir);
        const std::string out = o->out.empty() ? dir + "/report.html" : o->out;
        // The study first: the default output is in its directory (a study that is not there was
        // reported as "--out ...: the directory does not exist", an --out never given).
        auto j = tune::study_json(*c, dir);
        if (!j) return void(*exit_code = report_error("tune", j.status()));
        Status checked = tune::check_study_output(dir, out, "--out");
        if (checked.is_ok()) checked = fs::check_output_file(out, fs::OutputKind::kHtml, "--out");
        if (Status s = checked; !s.is_ok())
            return void(*exit_code = report_error("tune", s));
        auto html = report::render_tune_report(*j);
        if (!html) return void(*exit_code = report_error("tune", html.status()));
        Status s = fs::atomic_write(out, *html);
        if (!s.is_ok()) return void(*exit_code = report_error("tune", s));
        fmt::print(text_stream({out}), "{}\n", out);
        *exit_code = 0;
    });
    auto* sl = add("slurm", "Write (and with --submit, submit) a Slurm array job whose tasks run the study together");
    sl->add_option("--tasks", o->slurm.tasks, "Array tasks, each an executor of the study (default 2)")
        ->check(CLI::Range(1, 1000000));
    sl->add_option("--task-parallel", o->slurm.parallel, "Trials each task runs at once (default 1)")
        ->check(CLI::Range(1, tune::kParallelMax));
    sl->add_option("--partition", o->slurm.partition, "sbatch --partition")->check(sbatch_value(tune::SbatchValue::kWord));
    sl->add_option("--account", o->slurm.account, "sbatch --account")->check(sbatch_value(tune::SbatchValue::kWord));
    sl->add_option("--time", o->slurm.time, "sbatch --time (e.g. 04:00:00)")->check(sbatch_value(tune::SbatchValue::kTime));
    sl->add_option("--mem", o->slurm.mem, "sbatch --mem (default: memory_limit_gb x trials per task + 1G, if set)")
        ->check(sbatch_value(tune::SbatchValue::kMemory));
    sl->add_option("--sbatch", o->slurm.extra, "Another sbatch option, e.g. --sbatch=--gres=gpu:1 (repeatable)")
        ->check(sbatch_value(tune::SbatchValue::kOption));
    sl->add_option("-o,--out", o->out, "Script to write (default <dir>/slurm.sbatch; - for stdout)");
    sl->add_flag("--submit", o->submit, "Run sbatch on the script and print the job id");
    sl->callback([o, load, exit_code] {
        auto c = load();
        if (!c) return void(*exit_code = report_error("tune", c.status()));
        tune::SlurmOptions so = o->slurm;
        so.study_file = o->study;
        so.dir = tune::study_dir(*c, o->dir);
        // The output is checked before the study directory is touched (-o STUDY.toml was refused
        // after study.db had been created and its journal switched). The default one, in the
        // study directory, once that exists.
        const std::string out = o->out.empty() ? so.dir + "/slurm.sbatch" : o->out;
        Status checked = check_distinct_files({{out, "--out", true},
                                               {o->study, "the study file", false},
                                               {c->base, "the study's base train config", false}});
        if (checked.is_ok()) checked = tune::check_study_output(so.dir, out, "--out");
        if (checked.is_ok() && !o->out.empty()) checked = fs::check_output_file(out, fs::OutputKind::kText, "--out");
        if (o->submit && fs::is_stdout(out))
            return void(*exit_code = report_usage_error("tune", "--submit hands sbatch a file: give --out FILE, not standard output"));
        if (!checked.is_ok()) return void(*exit_code = report_error("tune", checked));
        auto script = tune::slurm_array(*c, so);
        if (!script) return void(*exit_code = report_error("tune", script.status()));
        if (Status s = o->out.empty() ? fs::check_output_file(out, fs::OutputKind::kText, "--out") : Status::ok(); !s.is_ok())
            return void(*exit_code = report_error("tune", s));
        if (Status s = fs::atomic_write(out, *script); !s.is_ok()) return void(*exit_code = report_error("tune", s));
        if (!o->submit) {
            if (!fs::is_stdout(out)) fmt::print("{}\nsubmit with: sbatch {}\n", out, fs::shell_quote(out));
            return void(*exit_code = 0);
        }
        FILE* p = popen(("sbatch --parsable " + fs::shell_quote(out) + " 2>&1").c_str(), "r");
        if (!p) return void(*exit_code = report_error("tune", io_error("cannot run sbatch")));
        std::string answer;
        char buf[256];
        while (fgets(buf, sizeof buf, p)) answer += buf;
        int rc = pclose(p);
        while (!answer.empty() && (answer.back() == '\n' || answer.back() == '\r')) answer.pop_back();
        if (rc != 0)
            return void(*exit_code = report_error("tune", io_error("sbatch {} failed: {}", out, answer)));
        fmt::print("{}\nsubmitted: job {}\n", out, answer);
        *exit_code = 0;
    });
}

}  // namespace strato::cli
