// strato compress prune --model PKG [--method magnitude|channels] [--amount F] [--schedule oneshot|gradual] ...

#include <fmt/format.h>

#include <cmath>

#include "commands.h"
#include "strato/compress/prune.h"
#include "strato/core/json.h"
#include "strato/core/signals.h"

namespace strato::cli {
namespace {

// --amount: a fraction to remove, in (0, 1) open at both ends (prune_package checks it again).
CLI::Validator fraction_open() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v))
                return fmt::format("expected a number, got '{}'", text);
            if (!(v > 0 && v < 1)) return fmt::format("expected the fraction to remove, in (0, 1) (e.g. 0.5), got {}", text);
            return {};
        },
        "FRACTION in (0, 1)");
}

// --ramp-points: a count of at least 1 (prune_package checks it again).
CLI::Validator at_least_one() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            int64_t v = 0;
            if (!CLI::detail::lexical_cast(text, v) || v < 1) return fmt::format("expected at least 1, got '{}'", text);
            return {};
        },
        "N >= 1");
}

}  // namespace

void add_compress_prune_command(CLI::App& compress, const GlobalFlags& g, int* exit_code) {
    struct Opts {
        std::string model, method = "magnitude", schedule = "oneshot", config, output;
        double amount = 0;
        std::vector<std::string> sets;
        int64_t epochs = 0;
        double ramp = 0.5;
        int64_t ramp_points = 10;
        int64_t round_to = 8;
        bool resume = false, overwrite = false, json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = compress.add_subcommand(
        "prune",
        "Prune a model package and fine-tune it: global magnitude pruning (zeros, same shapes) or channel "
        "pruning (a narrower, faster network)");
    cmd->add_option("--model", o->model, "Source model package directory (runs/NAME/model); a float package")
        ->required()
        ->check(file_path_flag());
    cmd->add_option("--method", o->method,
                    "magnitude: zero the smallest |w| over all conv/linear weights (unstructured); channels: remove "
                    "the least important channels of every prunable layer and rebuild smaller layers (structured)")
        ->check(CLI::IsMember({"magnitude", "channels"}))
        ->capture_default_str();
    auto* amount =
        cmd->add_option("--amount", o->amount,
                        "Fraction to remove, in (0, 1): of all conv/linear weights (magnitude, default 0.5) or of each "
                        "layer's channels (channels, default 0.3)")
            ->check(fraction_open());
    cmd->add_option("--round-to", o->round_to,
                    "channels: round each layer's kept width down to a multiple of this (CPU kernels work on "
                    "blocks of 8 or 16 channels: 22 channels cost as much as 24); 1 = exactly --amount")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("--schedule", o->schedule,
                    "oneshot: prune once, then fine-tune; gradual (magnitude): raise the sparsity from 0 to --amount "
                    "during fine-tuning on Zhu & Gupta's cubic schedule")
        ->check(CLI::IsMember({"oneshot", "gradual"}))
        ->capture_default_str();
    cmd->add_option("--ramp", o->ramp, "gradual: fraction of the fine-tuning steps the sparsity ramps over")
        ->check(finite_above(0, 1))
        ->capture_default_str();
    cmd->add_option("--ramp-points", o->ramp_points, "gradual: how many times the masks are recomputed on the ramp")
        ->check(at_least_one())
        ->capture_default_str();
    cmd->add_option("--config", o->config,
                    "Fine-tuning config (a training config: [data], [optim], [schedule], [train]); its [model] is "
                    "ignored, the package's is used. Default: Fashion-MNIST, SGD lr 0.01, cosine, 2 epochs");
    auto* epochs = cmd->add_option("--epochs", o->epochs,
                                   "Fine-tuning epochs (overrides train.epochs); 0 = prune without fine-tuning")
                       ->check(CLI::Range(int64_t{0}, int64_t{100000}));
    cmd->add_option("--set", o->sets, "Override a fine-tuning config key: --set optim.lr=0.005 (repeatable)")
        ->check(set_flag());
    cmd->add_option("--output", o->output,
                    "Run directory of the fine-tuning; the pruned package is OUTPUT/model (default: next to the "
                    "source run, e.g. runs/NAME-prune-magnitude-50)");
    cmd->add_flag("--resume", o->resume, "Continue an interrupted fine-tuning from its latest checkpoint");
    cmd->add_flag("--overwrite", o->overwrite, "Replace an existing output run directory");
    cmd->add_flag("--json", o->json, "Print the result (per-layer table included) as JSON on stdout");
    cmd->footer(
        "Examples:\n"
        "  strato compress prune --model runs/fashion_mnist_cnn/model                      # 50 % of weights, 2 "
        "epochs\n"
        "  strato compress prune --model runs/fashion_mnist_cnn/model --amount 0.8 --schedule gradual --epochs 4\n"
        "  strato compress prune --model runs/fashion_mnist_cnn/model --method channels --amount 0.3\n"
        "  strato compress prune --model runs/x/model --method channels --epochs 0 --output runs/x-narrow\n"
        "  strato compress prune --model runs/x/model --config configs/fashion_mnist_cnn.toml --set optim.lr=0.005\n"
        "The pruned package loads like any other: strato eval --model "
        "runs/fashion_mnist_cnn-prune-magnitude-50/model.\n"
        "Magnitude pruning leaves the shapes as they are (zeros in weights.pt): smaller when compressed, not faster\n"
        "on dense kernels. Channel pruning writes model.channels into the package: fewer FLOPs, really faster.\n"
        "Prune the float package, then quantize the pruned one (an INT8 package cannot be pruned).");
    cmd->callback([o, amount, epochs, &g, exit_code] {
        signals::install_stop_handlers();  // first: Ctrl-C during the evaluation before training stops it (exit 130)
        auto finetune = compress::finetune_config(o->config, o->sets);
        if (!finetune) return void(*exit_code = report_error("compress prune", finetune.status()));
        compress::PruneOptions po;
        po.model = o->model;
        po.method = o->method;
        if (amount->count() > 0) po.amount = o->amount;
        po.round_to = o->round_to;
        po.schedule = o->schedule;
        po.ramp = o->ramp;
        po.ramp_points = o->ramp_points;
        po.finetune = *finetune;
        po.epochs = epochs->count() > 0 ? o->epochs : -1;
        po.output = o->output;
        po.resume = o->resume;
        po.overwrite = o->overwrite;
        po.quiet = g.quiet || o->json;
        auto r = compress::prune_package(po);
        if (!r) return void(*exit_code = report_error("compress prune", r.status()));
        if (o->json) {
            fmt::print("{}\n", json_text(r->to_json(), 2));
        } else {
            fmt::print("{}", compress::format_prune_table(*r));
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
