#include "strato/compress/distill.h"

#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "strato/core/check.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/log.h"
#include "strato/data/data_config.h"

namespace strato::compress {
namespace stdfs = std::filesystem;

namespace {

std::string describe(const std::vector<double>& v) {
    return v.empty() ? "none" : fmt::format("{}", fmt::join(v, ", "));
}

/// One value per channel: a missing list is `fallback` everywhere.
Result<std::vector<double>> per_channel(const std::vector<double>& v, int64_t channels, double fallback,
                                        const char* what) {
    if (v.empty()) return std::vector<double>(static_cast<size_t>(channels), fallback);
    if (static_cast<int64_t>(v.size()) != channels)
        return invalid_argument("{}: {} values for {} channels", what, v.size(), channels);
    return v;
}

}  // namespace

RenormalizedNetImpl::RenormalizedNetImpl(models::Net inner, const std::vector<double>& from_mean,
                                         const std::vector<double>& from_std, const std::vector<double>& to_mean,
                                         const std::vector<double>& to_std)
    : inner_(std::move(inner)) {
    const auto c = static_cast<int64_t>(from_mean.size());
    STRATO_ASSERT(
        from_std.size() == from_mean.size() && to_mean.size() == from_mean.size() && to_std.size() == from_mean.size(),
        "one mean and std per channel");
    std::vector<float> scale(c), shift(c);
    for (int64_t i = 0; i < c; ++i) {
        // p = x_s * std_s + mean_s;  x_t = (p - mean_t) / std_t
        scale[i] = static_cast<float>(from_std[i] / to_std[i]);
        shift[i] = static_cast<float>((from_mean[i] - to_mean[i]) / to_std[i]);
    }
    scale_ = register_buffer("scale", torch::tensor(scale).view({1, c, 1, 1}));
    shift_ = register_buffer("shift", torch::tensor(shift).view({1, c, 1, 1}));
    register_module("net", inner_);
}

torch::Tensor RenormalizedNetImpl::forward(torch::Tensor x) {
    // x: [B, C, H, W] in any memory format; y takes the same one (empty_like preserves it).
    auto y = torch::empty_like(x);
    torch::mul_out(y, x, scale_);
    y.add_(shift_);
    return inner_->forward(y);
}

Result<models::Net> renormalize_input(models::Net teacher, int64_t channels, const std::vector<double>& from_mean,
                                      const std::vector<double>& from_std, const std::vector<double>& to_mean,
                                      const std::vector<double>& to_std) {
    STRATO_ASSIGN_OR_RETURN(auto fm, per_channel(from_mean, channels, 0.0, "the student's data mean"));
    STRATO_ASSIGN_OR_RETURN(auto fs, per_channel(from_std, channels, 1.0, "the student's data std"));
    STRATO_ASSIGN_OR_RETURN(auto tm, per_channel(to_mean, channels, 0.0, "the teacher's mean"));
    STRATO_ASSIGN_OR_RETURN(auto ts, per_channel(to_std, channels, 1.0, "the teacher's std"));
    bool same = true;
    for (int64_t i = 0; i < channels; ++i) {
        if (!(fs[i] > 0) || !(ts[i] > 0))
            return invalid_argument("normalisation std must be > 0 (channel {}: student {}, teacher {})", i, fs[i],
                                    ts[i]);
        same = same && std::abs(fm[i] - tm[i]) <= 1e-9 && std::abs(fs[i] - ts[i]) <= 1e-9;
    }
    if (same) return teacher;
    return models::Net(std::make_shared<RenormalizedNetImpl>(std::move(teacher), fm, fs, tm, ts));
}

Result<Distillation> prepare_distillation(const train::TrainConfig& student, const DistillOptions& opts) {
    if (opts.teacher.empty())
        return invalid_argument("no teacher given\nhint: --teacher runs/NAME/model (a package from strato train)");
    // (1e-300 overflowed the scaled logits and underflowed T^2: a NaN loss blamed on the learning rate)
    if (!(opts.temperature >= 0.05 && opts.temperature <= 100))
        return invalid_argument("temperature must be in [0.05, 100], got {}\nhint: 1 is the plain softmax; 2 to 8 are usual",
                                opts.temperature);
    if (!(opts.alpha >= 0 && opts.alpha <= 1))
        return invalid_argument("alpha must be in [0, 1] (the weight of the teacher's term), got {}", opts.alpha);
    try {
        auto loaded = models::load_package(opts.teacher);
        if (!loaded) return loaded.status().with_context("teacher");
        models::LoadedPackage pkg = std::move(loaded).value();
        STRATO_ASSIGN_OR_RETURN(data::DataSplits splits, data::open_datasets(student.data));
        const data::ImageShape s = splits.train->shape();
        const data::ImageShape& t = pkg.info.input_shape;
        const int64_t classes = splits.train->num_classes();
        if (!(s == t) || classes != pkg.info.num_classes) {
            return invalid_argument(
                "the teacher {} takes {}x{}x{} images and predicts {} classes, but the student's data ({} at {}) has "
                "{}x{}x{} images in {} classes\nhint: distil from a teacher trained on the same data (same image "
                "size, channels and classes)",
                opts.teacher, t.channels, t.height, t.width, pkg.info.num_classes, student.data.dataset,
                student.data.path, s.channels, s.height, s.width, classes);
        }
        const auto names = splits.train->class_names();
        if (!pkg.info.labels.empty() && !names.empty() && pkg.info.labels != names) {
            log::warn(
                "the teacher's class labels ({}, ...) differ from the student's data ({}, ...); distilling by "
                "class index",
                pkg.info.labels.front(), names.front());
        }
        if (pkg.info.quantized() && student.run.device != "cpu")
            return invalid_argument(
                "the teacher {} is an INT8 package, which runs on the CPU only (run.device = \"{}\")", opts.teacher,
                student.run.device);

        Distillation d;
        d.teacher = pkg.info;
        d.teacher_parameters = models::parameter_count(*pkg.net);
        STRATO_ASSIGN_OR_RETURN(models::Net teacher, renormalize_input(pkg.net, s.channels, splits.mean, splits.std,
                                                                       pkg.info.mean, pkg.info.std));
        d.renormalized = teacher.get() != pkg.net.get();
        if (d.renormalized) {
            log::info(
                "the teacher was trained on inputs normalised with mean [{}] std [{}], the student's data uses "
                "mean [{}] std [{}]: the teacher's inputs are re-normalised",
                describe(pkg.info.mean), describe(pkg.info.std), describe(splits.mean), describe(splits.std));
        }
        teacher->eval();
        d.hooks.teacher = teacher;
        d.hooks.kd_temperature = opts.temperature;
        d.hooks.kd_alpha = opts.alpha;
        std::error_code ec;
        stdfs::path abs = stdfs::absolute(opts.teacher, ec);
        nlohmann::json c = {{"method", "distill"},
                            {"teacher", ec ? opts.teacher : abs.lexically_normal().string()},
                            {"teacher_arch", pkg.info.model.arch},
                            {"teacher_parameters", d.teacher_parameters},
                            {"temperature", opts.temperature},
                            {"alpha", opts.alpha},
                            {"renormalized", d.renormalized}};
        if (pkg.info.metrics.is_object() && pkg.info.metrics.contains("test_acc"))
            c["teacher_test_acc"] = pkg.info.metrics["test_acc"];
        d.hooks.package_metrics = {{"compression", c}};
        return d;
    } catch (const c10::Error& e) {
        return internal_error("libtorch: {}", models::torch_error_message(e));
    }
}

Result<train::TrainResult> distill(const train::TrainConfig& student, const DistillOptions& opts,
                                   train::TrainOptions train_opts) {
    STRATO_ASSIGN_OR_RETURN(Distillation d, prepare_distillation(student, opts));
    // The teacher and its settings are kept beside config.toml (distill.json): a resume with
    // others says so, as a resume with a changed config does.
    const nlohmann::json settings = d.hooks.package_metrics["compression"];
    const stdfs::path record = stdfs::path(student.run_dir()) / "distill.json";
    d.hooks.init = [record, settings, resume = train_opts.resume](models::NetImpl&) -> Status {
        if (auto old = fs::read_file(record, 1 << 20); resume && old) {
            const auto j = nlohmann::json::parse(*old, nullptr, false);
            if (j != settings)
                log::warn("the distillation differs from the one this run started with ({} then, {} now); continuing "
                          "with the new one, which the package's metrics.json records",
                          json_text(j), json_text(settings));
        }
        fs::remove_stale_temps(record);  // a run killed while writing it
        return fs::atomic_write(record, json_text(settings, 2) + "\n");
    };
    train_opts.hooks = &d.hooks;
    train_opts.inputs.push_back(opts.teacher);
    return train::run_training(student, train_opts);
}

}  // namespace strato::compress
