#include "strato/compress/quantize.h"

#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>

#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/data/loader.h"
#include "strato/models/package.h"
#include "strato/train/trainer.h"

namespace strato::compress {
namespace stdfs = std::filesystem;

namespace {

int64_t file_bytes(const std::string& dir, const char* name) {
    std::error_code ec;
    auto n = stdfs::file_size(stdfs::path(dir) / name, ec);
    return ec ? 0 : static_cast<int64_t>(n);
}

/// The nearest folder that exists at or above where save_package stages the package must take
/// new files: a read-only mount failed the command only when the package was saved, after the
/// calibration and the evaluation. (No folder is created here; a probe file comes and goes.)
Status check_output_writable(const std::string& output) {
    std::error_code ec;
    stdfs::path p = stdfs::absolute(output, ec).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    for (stdfs::path up = p.parent_path();; up = up.parent_path()) {
        if (stdfs::exists(up, ec)) return fs::check_writable_dir(up).with_context("--output " + output);
        if (up == up.parent_path()) return Status::ok();
    }
}

/// Ctrl-C (SIGINT) or SIGTERM, once signals::install_stop_handlers() ran: the command stops at
/// the next safe point, before the package is saved, so --output stays as it was.
Status check_stop(const std::string& during, const std::string& output) {
    return signals::stopped(fmt::format("{}; no package written ({} left as it was)", during, output));
}

}  // namespace

Result<QuantizeResult> quantize_package(const QuantizeRequest& r) {
    if (r.calibration_batches < 1 || r.calibration_batch_size < 1)
        return invalid_argument("calibration needs at least 1 batch of at least 1 sample (got {} x {})",
                                r.calibration_batches, r.calibration_batch_size);
    if (r.output.empty()) return invalid_argument("no output directory given for the INT8 package");
    // The output directory is replaced by the INT8 package: it must not hold the source, nor lie
    // inside it.
    const bool holds_source = fs::is_within(r.model, r.output), in_source = fs::is_within(r.output, r.model);
    if (holds_source)
        return invalid_argument("--output {}: the source package {} is {}; write the INT8 package next to it", r.output,
                                r.model, in_source ? "that directory itself" : "inside it");
    if (in_source)
        return invalid_argument("--output {} is inside the source package {}; write the INT8 package next to it",
                                r.output, r.model);
    STRATO_RETURN_IF_ERROR(models::check_package_destination(r.output).with_context("--output"));
    STRATO_RETURN_IF_ERROR(check_output_writable(r.output));
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage pkg, models::load_package(r.model));
    if (pkg.info.quantized()) {
        return invalid_argument("{} is already quantized (INT8, {}); quantize its float package instead",
                                r.model, pkg.info.quantization.value("scheme", "static"));
    }
    if (std::error_code ec; !r.overwrite && stdfs::exists(stdfs::path(r.output) / models::kPackageManifest, ec))
        return Status(StatusCode::kAlreadyExists,
                      fmt::format("--output {}: a model package is already there\nhint: pass --overwrite to replace it, "
                                  "or choose another --output",
                                  r.output));
    data::DataConfig cfg;
    auto splits = train::open_package_data(pkg.info, r.data, &cfg, train::PackageData::kCalibrate);
    if (!splits) return train::package_data_error(pkg.info, r.data, splits.status(), "calibration data", "calibrate");
    if (splits->train->size() == 0)
        return invalid_argument("calibration data: the train split of {} holds no samples", cfg.path);

    QuantizeResult out;
    out.output = r.output;
    try {
        const bool channels_last = models::is_convolutional(pkg.info.model);
        STRATO_ASSIGN_OR_RETURN(auto qnet, models::QuantizedNet::lower(pkg.info.model, *pkg.net));
        out.engine = models::QuantizedNet::engine();

        // Calibration: a seeded random sample of the train split, without augmentation.
        data::LoaderOptions lo = data::eval_loader_options(cfg, *splits);
        lo.batch_size = r.calibration_batch_size;
        lo.shuffle = true;
        lo.seed = r.seed;
        STRATO_ASSIGN_OR_RETURN(auto calib, data::Loader::create(splits->train, lo));
        const int64_t batches = std::min(r.calibration_batches, calib->batches_per_epoch());
        const auto start = std::chrono::steady_clock::now();
        int64_t samples = 0;
        int pass = 0;
        const int passes = r.quant.observer == "minmax" ? 1 : 2;
        auto for_each_batch = [&](const models::QuantizedNet::Feed& feed) -> Status {
            calib->seek({0, 0});
            samples = 0;
            ++pass;
            data::Batch b;
            for (int64_t i = 0; i < batches; ++i) {
                if (signals::stop_requested())
                    return check_stop(fmt::format("during the calibration (pass {} of {}, before batch {} of {})", pass,
                                                  passes, i + 1, batches),
                                      r.output);
                STRATO_ASSIGN_OR_RETURN(bool more, calib->next(b));
                if (!more) break;
                feed(train::images_tensor(b, false));  // NCHW: the folded float graph keeps NCHW weights
                samples += b.size;
            }
            return Status::ok();
        };
        log::info("calibrating on {} batch{} of {} training samples ({} observer, {} pass{})", batches,
                  batches == 1 ? "" : "es", r.calibration_batch_size, r.quant.observer, passes, passes == 1 ? "" : "es");
        STRATO_RETURN_IF_ERROR(qnet->calibrate(for_each_batch, r.quant));
        out.calibration_samples = samples;
        out.calibration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        out.layers = qnet->describe();
        log::info("calibrated on {} samples ({} batches, {} observer) in {:.1f} s; engine {}", samples, batches,
                  r.quant.observer, out.calibration_s, out.engine);

        models::PackageInfo info = pkg.info;
        // Absolute, as prune and distill record theirs: "cnn" said nothing from another directory.
        std::error_code abs_ec;
        const std::string source = stdfs::absolute(r.model, abs_ec).lexically_normal().string();
        info.quantization = {
            {"scheme", "static"},
            {"weights", r.quant.per_channel ? "int8 symmetric per output channel" : "int8 symmetric per tensor"},
            {"activations", "uint8 affine per tensor"},
            {"engine", out.engine},
            {"observer", r.quant.observer},
            {"calibration", {{"split", "train"}, {"samples", samples}, {"batches", batches}, {"seed", r.seed}}},
            {"source", source},
            {"source_parameters", models::parameter_count(*pkg.net)},
            {"layers", out.layers}};
        if (r.quant.observer == "percentile") info.quantization["percentile"] = r.quant.percentile;

        // The float run's figures that do not describe this package: its best accuracy during
        // training, its training precision.
        if (!info.metrics.is_object()) info.metrics = nlohmann::json::object();
        info.metrics.erase("best_test_acc");
        if (info.metrics.contains("precision")) info.metrics["precision"] = "int8";
        if (r.evaluate) {
            STRATO_ASSIGN_OR_RETURN(auto test, data::Loader::create(splits->test,
                                                                    data::eval_loader_options(cfg, *splits)));
            if (channels_last) models::to_channels_last(*pkg.net);
            auto evaluate = [&](models::NetImpl& net, const char* which) -> Result<train::EvalResult> {
                auto e = train::evaluate(net, *test, false, channels_last, torch::kCPU, /*fp16=*/false,
                                         [] { return signals::stop_requested(); });
                if (!e.is_ok() && signals::stop_requested())
                    return check_stop(fmt::format("while evaluating the {} model", which), r.output);
                return e;
            };
            STRATO_ASSIGN_OR_RETURN(train::EvalResult f, evaluate(*pkg.net, "float"));
            STRATO_ASSIGN_OR_RETURN(train::EvalResult q, evaluate(*qnet, "INT8"));
            out.float_accuracy = f.accuracy;
            out.int8_accuracy = q.accuracy;
            out.test_samples = q.count;
            info.metrics["test_acc"] = q.accuracy;
            info.metrics["test_loss"] = q.loss;
            info.metrics["test_samples"] = q.count;
            info.metrics["source_test_acc"] = f.accuracy;
        } else {
            for (const char* k : {"test_acc", "test_loss", "test_samples"}) info.metrics.erase(k);
        }
        info.metrics["compression"] = {{"method", "int8"}, {"source", source}, {"observer", r.quant.observer}};
        // The last safe point: a signal during the save (atomic, short) lets it finish.
        STRATO_RETURN_IF_ERROR(check_stop("before the package was saved", r.output));
        STRATO_RETURN_IF_ERROR(models::save_package(r.output, info, *qnet));
    } catch (const c10::Error& e) {
        return internal_error("libtorch: {}", models::torch_error_message(e));
    }
    out.float_bytes = file_bytes(r.model, models::kPackageWeights);
    out.int8_bytes = file_bytes(r.output, models::kPackageWeights);
    return out;
}

}  // namespace strato::compress
