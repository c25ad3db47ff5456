// strato compress quantize|prune|distill|report

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/compress/quantize.h"
#include "strato/core/json.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/train/train_config.h"
#include "strato/train/trainer.h"

namespace strato::cli {
namespace {

void add_quantize_command(CLI::App& compress, const GlobalFlags& g, int* exit_code) {
    struct Opts {
        compress::QuantizeRequest r;
        std::string config, data, dataset;
        std::vector<std::string> sets;
        bool per_tensor = false, no_eval = false, json = false;
        int64_t threads = 0, seed = 0;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = compress.add_subcommand(
        "quantize", "INT8 post-training quantization: calibrate on training data, write an INT8 model package");
    cmd->add_option("--model", o->r.model, "Float model package directory (runs/NAME/model)")
        ->required()
        ->check(file_path_flag());
    cmd->add_option("--output", o->r.output, "Directory of the INT8 package (default: <model>-int8)");
    cmd->add_option("--calibration-batches", o->r.calibration_batches,
                    "Batches of training samples the observers see (drawn at random)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    cmd->add_option("--batch-size", o->r.calibration_batch_size, "Samples per calibration batch")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    cmd->add_option("--observer", o->r.quant.observer,
                    "Activation ranges: minmax, percentile (clip at --percentile), or histogram (minimum-MSE clipping)")
        ->check(CLI::IsMember(models::observer_names()))
        ->capture_default_str();
    cmd->add_option("--percentile", o->r.quant.percentile, "Clipping percentile of the percentile observer")
        ->capture_default_str()
        ->check(finite_above(50, 100));
    cmd->add_flag("--per-tensor-weights", o->per_tensor, "One weight scale per layer instead of per output channel");
    cmd->add_option("--seed", o->seed, "Seed of the calibration sample")->capture_default_str();
    cmd->add_option("--config", o->config, "Take the [data] section from this training config")
        ->check(file_path_flag());
    cmd->add_option("--set", o->sets, "Override a [data] key, e.g. --set data.limit_test=1000")->check(set_flag("data"));
    cmd->add_option("--data", o->data, "Dataset directory (default: Debian's Fashion-MNIST)")->check(file_path_flag());
    // Checked as eval checks it (data.dataset's list of kinds): an unknown kind is a usage error (exit 2).
    cmd->add_option("--dataset", o->dataset, "Dataset kind: fashion-mnist, idx, image-folder, shards, csv, synthetic")
        ->check(status_flag(
            "--dataset", [](const std::string& v) { return data_config_from_flags("", {}, "", v).status(); }, "KIND"));
    cmd->add_option("--threads", o->threads, "Intra-op threads (0 = one per usable CPU)")->check(CLI::Range(0, 1024));
    cmd->add_flag("--no-eval", o->no_eval, "Skip measuring float and INT8 accuracy on the test split");
    cmd->add_flag("--overwrite", o->r.overwrite, "Replace a model package already at --output");
    cmd->add_flag("--json", o->json, "Print the result as JSON");
    cmd->footer(
        "Weights: symmetric int8 per output channel; activations: uint8 per tensor; BatchNorm folded and ReLU\n"
        "fused; run by libtorch's oneDNN quantized engine. The INT8 package loads in strato eval, serve and\n"
        "compress report like any other.\n"
        "Examples:\n  strato compress quantize --model runs/fashion_mnist_cnn/model\n"
        "  strato compress quantize --model runs/x/model --output runs/x/model-int8 --observer percentile "
        "--percentile 99.9\n"
        "Ctrl-C (SIGINT) or SIGTERM stops between calibration or evaluation batches and exits with 130;\n"
        "nothing is written (a package already at --output stays as it was). See docs/compress.md.");
    cmd->callback([o, &g, exit_code] {
        signals::install_stop_handlers();  // first: a Ctrl-C while the data opens stops it too (exit 130)
        auto data = data_config_from_flags(o->config, o->sets, o->data, o->dataset);
        if (!data) return void(*exit_code = report_error("compress quantize", data.status()));
        compress::QuantizeRequest r = o->r;
        r.data = *data;
        r.quant.per_channel = !o->per_tensor;
        r.evaluate = !o->no_eval;
        r.seed = static_cast<uint64_t>(o->seed);
        if (r.output.empty()) {
            std::filesystem::path m = std::filesystem::path(r.model).lexically_normal();
            if (m.filename().empty()) m = m.parent_path();  // "runs/x/model/"
            if (m.filename() == "." || m.filename() == "..") {  // (`--model .`: beside it, by its real name)
                std::error_code ec;
                if (auto real = std::filesystem::weakly_canonical(m, ec); !ec) m = real;
            }
            r.output = m.string() + "-int8";
        }
        train::configure_threads(o->threads);
        auto q = compress::quantize_package(r);
        if (!q) return void(*exit_code = report_error("compress quantize", q.status()));
        // The package is written either way (it is what was asked for), but a collapse is not
        // left to a reader to notice in a line of numbers.
        // (More than 1 point: 0.97 - 0.96 is 0.010000000000000009 in doubles, and warned.)
        if (q->float_accuracy && *q->float_accuracy - *q->int8_accuracy > 0.01 + 1e-9)
            log::warn("compress quantize: the INT8 model is {:.2f} points less accurate than the float one ({:.2f}% -> "
                      "{:.2f}%); the {} observer's activation ranges fit this model badly: try --observer histogram, or "
                      "--observer percentile with a --percentile closer to 100",
                      100 * (*q->float_accuracy - *q->int8_accuracy), 100 * *q->float_accuracy, 100 * *q->int8_accuracy,
                      r.quant.observer);
        if (o->json) {
            nlohmann::json j = {{"model", r.model},
                                {"output", q->output},
                                {"engine", q->engine},
                                {"observer", r.quant.observer},
                                {"calibration_samples", q->calibration_samples},
                                {"calibration_s", q->calibration_s},
                                {"float_weights_bytes", q->float_bytes},
                                {"int8_weights_bytes", q->int8_bytes},
                                {"layers", q->layers}};
            if (q->float_accuracy) {
                j["float_accuracy"] = *q->float_accuracy;
                j["int8_accuracy"] = *q->int8_accuracy;
                j["test_samples"] = q->test_samples;
            }
            fmt::print("{}\n", json_text(j, 2));
        } else if (!g.quiet) {
            fmt::print("INT8 package: {} (engine {}, {} observer, {} calibration samples)\n", q->output, q->engine,
                       r.quant.observer, q->calibration_samples);
            fmt::print("weights: {:.2f} MB -> {:.2f} MB ({:.1f}x smaller)\n", q->float_bytes / 1e6, q->int8_bytes / 1e6,
                       static_cast<double>(q->float_bytes) / std::max<int64_t>(1, q->int8_bytes));
            if (q->float_accuracy)
                fmt::print("accuracy on {} test samples: float {:.2f}%, int8 {:.2f}% ({:+.2f} pt)\n", q->test_samples,
                           100 * *q->float_accuracy, 100 * *q->int8_accuracy,
                           100 * (*q->int8_accuracy - *q->float_accuracy));
        }
        *exit_code = 0;
    });
}

}  // namespace

void add_compress_command(CLI::App& app, const GlobalFlags& g, int* exit_code) {
    auto* cmd = app.add_subcommand("compress", "Make a model package smaller and faster: INT8 quantization, pruning, "
                                               "distillation, and a comparison table");
    cmd->require_subcommand(1);
    cmd->footer("See docs/compress.md.");
    add_quantize_command(*cmd, g, exit_code);
    add_compress_prune_command(*cmd, g, exit_code);
    add_compress_distill_command(*cmd, g, exit_code);
    add_compress_report_command(*cmd, g, exit_code);
}

}  // namespace strato::cli
