// strato eval --model DIR [--data PATH] [--dataset KIND]

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/core/json.h"
#include "strato/train/trainer.h"

namespace strato::cli {

Result<data::DataConfig> data_config_from_flags(const std::string& config, const std::vector<std::string>& sets,
                                                const std::string& data, const std::string& dataset) {
    train::TrainConfig cfg;
    if (!config.empty()) {
        STRATO_ASSIGN_OR_RETURN(cfg, train::load_train_config(config, sets));
    } else if (!sets.empty()) {
        STRATO_ASSIGN_OR_RETURN(cfg, config::load_string<train::TrainConfig>("", sets));
    }
    if (!data.empty()) cfg.data.path = data;
    if (!dataset.empty()) {
        // Through the config's own check of data.dataset (its list of kinds); --set reads a bare
        // word as a string (quoting it itself).
        auto kind = config::load_string<train::TrainConfig>("", {"data.dataset=" + dataset});
        if (!kind) {
            const std::string& m = kind.status().message();
            const size_t colon = m.find("data.dataset:");  // the check's words, not the --set it went through
            return invalid_argument("--dataset: {}", colon == std::string::npos ? m : m.substr(colon + 14));
        }
        cfg.data.dataset = kind->data.dataset;
    }
    return cfg.data;
}

void add_eval_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        std::string model;
        std::string config;
        std::vector<std::string> sets;
        std::string data, dataset;
        bool json = false, bf16 = false;
        int64_t threads = 0;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("eval", "Evaluate a model package on a dataset's test split (accuracy, loss)");
    // An empty path (an unset variable in a script) is a usage error: an empty --data or --config
    // evaluated on the default Fashion-MNIST test split without a word.
    cmd->add_option("--model", o->model, "Model package directory (runs/NAME/model)")
        ->required()
        ->check(file_path_flag());
    cmd->add_option("--config", o->config, "Take the [data] section from this training config")
        ->check(file_path_flag());
    cmd->add_option("--set", o->sets, "Override a [data] key, e.g. --set data.limit_test=1000")->check(set_flag("data"));
    cmd->add_option("--data", o->data, "Dataset directory (default: Debian's Fashion-MNIST)")->check(file_path_flag());
    // Checked as data.dataset is (its list of kinds): an unknown kind is a usage error (exit 2).
    cmd->add_option("--dataset", o->dataset, "Dataset kind: fashion-mnist, idx, image-folder, shards, csv, synthetic")
        ->check(status_flag(
            "--dataset",
            [](const std::string& v) -> Status {
                // (an empty kind was no kind: the default Fashion-MNIST, without a word)
                if (v.empty()) return invalid_argument("expected a dataset kind, got an empty one");
                return data_config_from_flags("", {}, "", v).status();
            },
            "KIND"));
    cmd->add_option("--threads", o->threads, "Intra-op threads (0 = OMP_NUM_THREADS when set, else one per usable CPU)")
        ->check(CLI::Range(0, 1024));
    cmd->add_flag("--bf16", o->bf16,
                  "Run the forward pass in bf16 as `strato serve` does with precision \"bf16\" (the inference graph on "
                  "oneDNN's bf16 kernels; the eager network under autocast where the CPU has none)");
    cmd->add_flag("--json", o->json, "Print the result as JSON");
    cmd->footer("Examples:\n  strato eval --model runs/fashion_mnist_cnn/model\n"
                "  strato eval --model runs/x/model --dataset image-folder --data photos/ --set data.image_size=32");
    cmd->callback([o, exit_code] {
        auto data = data_config_from_flags(o->config, o->sets, o->data, o->dataset);
        if (!data) return void(*exit_code = report_error("eval", data.status()));
        train::configure_threads(o->threads);
        auto r = train::evaluate_package(o->model, *data, o->bf16);
        if (!r) return void(*exit_code = report_error("eval", r.status()));
        if (o->json) {
            nlohmann::json j = {{"model", o->model},          {"arch", r->arch},
                                {"parameters", r->parameters}, {"accuracy", r->result.accuracy},
                                {"loss", r->result.loss},      {"samples", r->result.count},
                                {"skipped", r->result.skipped}, {"seconds", r->result.seconds}};
            fmt::print("{}\n", json_text(j, 2));
        } else {
            fmt::print("{} ({} parameters) on {} samples{}: accuracy {:.2f}%, loss {:.4f} ({:.1f} s)\n", r->arch,
                       r->parameters, r->result.count,
                       r->result.skipped > 0 ? fmt::format(" ({} unreadable skipped)", r->result.skipped) : "",
                       100 * r->result.accuracy, r->result.loss, r->result.seconds);
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
