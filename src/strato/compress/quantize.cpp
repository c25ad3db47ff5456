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
    if (!signals::stop_requested()) return Status::ok();
    return Status(StatusCode::kCancelled, fmt::format("interrupted by signal {} {}; no package written ({} left as it was)",
                                                      signals::stop_signal(), during, output));
}

/// The test split as the evaluation reads it: a sample asked for after a stop signal fails with
/// kCancelled (never a "bad sample" that data.on_bad_sample = "skip" would step over), so
/// train::evaluate ends at the batch it is in instead of scoring the whole split first.
class StopAtSignal final : public data::Dataset {
public:
    explicit StopAtSignal(std::shared_ptr<const data::Dataset> inner) : inner_(std::move(inner)) {}
    int64_t size() const override { return inner_->size(); }
    data::ImageShape shape() const override { return inner_->shape(); }
    const std::vector<std::string>& class_names() const override { return inner_->class_names(); }
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override {
        STRATO_RETURN_IF_ERROR(stopped());
        return inner_->load(index, dst, label);
    }
    Status load_random(int64_t index, uint64_t seed, uint8_t* dst, int64_t* label) const override {
        STRATO_RETURN_IF_ERROR(stopped());
        return inner_->load_random(index, seed, dst, label);
    }
    std::vector<int64_t> group_starts() const override { return inner_->group_starts(); }
    void will_read(const std::vector<int64_t>& order, int64_t from) const override { inner_->will_read(order, from); }
    bool is_float() const override { return inner_->is_float(); }
    Status load_float(int64_t index, float* dst, int64_t* label) const override {
        STRATO_RETURN_IF_ERROR(stopped());
        return inner_->load_float(index, dst, label);
    }

private:
    static Status stopped() {
        return signals::stop_requested() ? Status(StatusCode::kCancelled, "stop requested") : Status::ok();
    }
    std::shared_ptr<const data::Dataset> inner_;
};

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
    auto splits = train::open_package_data(pkg.info, r.data, &cfg);
    if (!splits) {
        // Which data was read (the default is Fashion-MNIST, whatever the model was trained on), and
        // for data that does not fit the model, what would.
        std::string msg = fmt::format("calibration data ({}{}{}): {}", r.data.dataset,
                                      r.data.dataset == "synthetic" ? "" : " at ",
                                      r.data.dataset == "synthetic" ? "" : r.data.path, splits.status().message());
        // (open_package_data's refusals of data that opened but does not fit start "the data has",
        // "the data's ..."; a file that cannot be read or parsed is named by its path instead.)
        if (splits.status().message().rfind("the data", 0) == 0) {
            msg += pkg.info.features.empty() || r.data.dataset == "csv"
                       ? "\nhint: calibrate on the data the model was trained on: --dataset KIND --data PATH, or "
                         "--config with its [data] section"
                       : fmt::format("\nhint: the model reads a table of {} features ({}): --dataset csv --data DIR "
                                     "(DIR/train.csv, DIR/test.csv)",
                                     pkg.info.features.size(), fmt::join(pkg.info.features, ", "));
        }
        return Status(splits.status().code(), msg);
    }
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
            STRATO_ASSIGN_OR_RETURN(auto test, data::Loader::create(std::make_shared<StopAtSignal>(splits->test),
                                                                    data::eval_loader_options(cfg, *splits)));
            if (channels_last) models::to_channels_last(*pkg.net);
            auto evaluate = [&](models::NetImpl& net, const char* which) -> Result<train::EvalResult> {
                auto e = train::evaluate(net, *test, false, channels_last);
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
