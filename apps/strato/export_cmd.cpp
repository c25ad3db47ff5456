// strato export --model DIR [--format onnx] [--output FILE] [--opset N] [--json]

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/core/json.h"
#include "strato/core/signals.h"
#include "strato/export/onnx_export.h"

namespace strato::cli {

void add_export_command(CLI::App& app, const GlobalFlags& g, int* exit_code) {
    struct Opts {
        std::string model;
        std::string format = "onnx";
        std::string output;
        int64_t opset = exporter::kOnnxOpsetMin;
        bool json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd =
        app.add_subcommand("export", "Write a model package as an ONNX file (dynamic batch axis), checked by libonnx");
    cmd->add_option("--model", o->model, "Model package directory (runs/NAME/model)")
        ->required()
        ->check(file_path_flag());  // an empty value (an unset variable in a script) is a usage error
    cmd->add_option("--format", o->format, "Output format (onnx)")->capture_default_str()->check(CLI::IsMember({"onnx"}));
    cmd->add_option("--output", o->output,
                    "Output file (default: <model>/model.onnx, recorded in the package manifest; - for stdout, "
                    "the summary then on stderr)")
        ->check(file_path_flag());  // (an empty one fell back to the default without a word)
    cmd->add_option("--opset", o->opset,
                    fmt::format("ONNX opset ({}..{})", exporter::kOnnxOpsetMin, exporter::kOnnxOpsetMax))
        ->capture_default_str()
        ->check(CLI::Range(exporter::kOnnxOpsetMin, exporter::kOnnxOpsetMax));
    cmd->add_flag("--json", o->json, "Print the result as JSON");
    cmd->footer(
        "Examples:\n  strato export --model runs/fashion_mnist_cnn/model\n"
        "  strato export --model runs/x/model --output /srv/models/x/1/model.onnx --opset 17 --json\n"
        "The graph takes the package's normalised input (see strato-model.json /preprocessing) and\n"
        "returns the logits; the batch axis is dynamic.\n"
        "Ctrl-C (SIGINT) or SIGTERM stops between the steps (load, build and check, write) and exits with\n"
        "130; nothing is written (an existing file and the manifest stay as they were). See docs/export.md.");
    cmd->callback([o, &g, exit_code] {
        signals::install_stop_handlers();
        auto r = exporter::export_package_onnx(o->model, {.output = o->output, .opset = o->opset});
        if (!r) return void(*exit_code = report_error("export", r.status()));
        // The ONNX bytes went to standard output (`--output -`): what the command says goes to
        // stderr, or it would be appended to the model (found by review).
        std::FILE* say = text_stream({o->output});
        if (o->json) {
            nlohmann::json j = {
                {"model", o->model},
                {"format", "onnx"},
                {"path", r->path},
                {"bytes", r->bytes},
                {"sha256", r->sha256},
                {"opset", r->opset},
                {"arch", r->arch},
                {"nodes", r->nodes},
                {"ops", r->ops},
                {"inputs", {{{"name", r->input_name}, {"datatype", "FP32"}, {"shape", r->input_shape}}}},
                {"outputs", {{{"name", r->output_name}, {"datatype", "FP32"}, {"shape", r->output_shape}}}},
                {"in_manifest", r->in_manifest}};
            fmt::print(say, "{}\n", json_text(j, 2));
        } else if (!g.quiet) {
            fmt::print(say, "{} -> {} ({} bytes, opset {}, {} nodes; {} {} -> {} {}){}\n", r->arch, r->path, r->bytes,
                       r->opset, r->nodes, r->input_name, fmt::join(r->input_shape, "x"), r->output_name,
                       fmt::join(r->output_shape, "x"), r->in_manifest ? ", listed in the package manifest" : "");
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
