#include "strato/compress/distill.h"

#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "strato/core/check.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/log.h"
#include "strato/data/data_config.h"

namespace strato::compress {
namespace stdfs = std::filesystem;

namespace {

// (A CSV table's per-feature lists printed every one of 784 values, twice, in one log line.)
std::string describe(const std::vector<double>& v) {
    if (v.empty()) return "none";
    if (v.size() <= 4) return fmt::format("{}", fmt::join(v, ", "));
    return fmt::format("{}, ... ({} values)", fmt::join(v.begin(), v.begin() + 3, ", "), v.size());
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

ReorderedNetImpl::ReorderedNetImpl(models::Net inner, const std::vector<int64_t>& order) : inner_(std::move(inner)) {
    order_ = register_buffer("order", torch::tensor(order, torch::kLong));
    register_module("net", inner_);
}

torch::Tensor ReorderedNetImpl::forward(torch::Tensor x) {
    return inner_->forward(std::move(x)).index_select(1, order_);  // [B, classes]
}

std::vector<int64_t> class_order(const std::vector<std::string>& teacher_labels,
                                 const std::vector<std::string>& student_labels) {
    if (teacher_labels.empty() || teacher_labels.size() != student_labels.size() || teacher_labels == student_labels)
        return {};
    std::map<std::string, int64_t> index;
    for (size_t i = 0; i < teacher_labels.size(); ++i)
        if (!index.emplace(teacher_labels[i], static_cast<int64_t>(i)).second) return {};  // a name twice
    std::vector<int64_t> order;
    std::vector<bool> used(teacher_labels.size());
    for (const auto& name : student_labels) {
        auto it = index.find(name);
        if (it == index.end() || used[static_cast<size_t>(it->second)]) return {};
        used[static_cast<size_t>(it->second)] = true;
        order.push_back(it->second);
    }
    return order;
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

Result<Distillation> prepare_distillation(const train::TrainConfig& student, const DistillOptions& opts, bool resume) {
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
        const std::vector<int64_t> order = class_order(pkg.info.labels, names);
        if (!order.empty()) {
            // (Was a warning, "distilling by class index": the student learnt the teacher's class 2
            // as its class 2 whatever either called it.)
            log::info(
                "the teacher orders the classes differently ({}, ... against the data's {}, ...): its outputs "
                "are reordered to the student's classes",
                pkg.info.labels.front(), names.front());
        } else if (!pkg.info.labels.empty() && !names.empty() && pkg.info.labels != names) {
            log::warn(
                "the teacher's class labels ({}, ...) differ from the student's data ({}, ...); distilling by "
                "class index",
                pkg.info.labels.front(), names.front());
        }
        if (pkg.info.quantized() && student.run.device != "cpu")
            return invalid_argument(
                "the teacher {} is an INT8 package, which runs on the CPU only (run.device = \"{}\")", opts.teacher,
                student.run.device);

        // (A teacher with a NaN weight made the student's first loss NaN: "training diverged ...
        // lower optim.lr", about the student.)
        for (const auto& tensors : {pkg.net->named_parameters(), pkg.net->named_buffers()}) {
            for (const auto& p : tensors) {
                if (p.value().is_floating_point() && !torch::isfinite(p.value()).all().item<bool>())
                    return invalid_argument(
                        "the teacher {} has NaN or infinite weights ({}): weights from a training that diverged? "
                        "It is no usable teacher",
                        opts.teacher, p.key());
            }
        }
        Distillation d;
        d.teacher = pkg.info;
        d.teacher_parameters = models::parameter_count(*pkg.net);
        STRATO_ASSIGN_OR_RETURN(models::Net teacher, renormalize_input(pkg.net, s.channels, splits.mean, splits.std,
                                                                       pkg.info.mean, pkg.info.std));
        d.renormalized = teacher.get() != pkg.net.get();
        d.reordered = !order.empty();
        if (d.reordered) teacher = models::Net(std::make_shared<ReorderedNetImpl>(teacher, order));
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
        if (d.reordered) c["reordered"] = true;  // (only then: distill.json of earlier runs compares equal)
        if (pkg.info.metrics.is_object() && pkg.info.metrics.contains("test_acc"))
            c["teacher_test_acc"] = pkg.info.metrics["test_acc"];
        d.hooks.package_metrics = {{"compression", c}};
        // The teacher and its settings are kept beside config.toml (distill.json): a resume with
        // others says so, as a resume with a changed config does.
        const nlohmann::json settings = c;
        const stdfs::path record = stdfs::path(student.run_dir()) / "distill.json";
        d.hooks.init = [record, settings, resume](models::NetImpl&) -> Status {
            auto old = fs::read_file(record, 1 << 20);
            if (resume && old) {
                const auto j = nlohmann::json::parse(*old, nullptr, false);
                if (j != settings)
                    log::warn(
                        "the distillation differs from the one this run started with ({} then, {} now); continuing "
                        "with the new one, which the package's metrics.json records",
                        json_text(j), json_text(settings));
            } else if (resume) {
                // A run that `strato train` started (no distill.json: it is written before the first
                // step) would go on with the teacher's loss, and a finished one had its package
                // re-labelled "distilled from" a teacher that never took part (exit 0).
                const stdfs::path dir = record.parent_path();
                std::error_code err;
                const bool has_package = stdfs::exists(dir / "model" / models::kPackageManifest, err);
                const bool has_checkpoints =
                    stdfs::is_directory(dir / "checkpoints", err) && !stdfs::is_empty(dir / "checkpoints", err);
                const auto metrics_bytes = stdfs::file_size(dir / "metrics.jsonl", err);
                if (has_package || has_checkpoints || (!err && metrics_bytes > 0))
                    return Status(StatusCode::kAlreadyExists,
                                  fmt::format("run directory {} holds a run started without a teacher (it has no "
                                              "distill.json); --resume would continue it as a distillation\nhint: "
                                              "give the student another run.name, or --overwrite to distil it "
                                              "from the start",
                                              dir.string()));
            }
            fs::remove_stale_temps(record);  // a run killed while writing it
            return fs::atomic_write(record, json_text(settings, 2) + "\n");
        };
        return d;
    } catch (const c10::Error& e) {
        return internal_error("libtorch: {}", models::torch_error_message(e));
    }
}

Result<train::TrainResult> distill(const train::TrainConfig& student, const DistillOptions& opts,
                                   train::TrainOptions train_opts) {
    STRATO_ASSIGN_OR_RETURN(Distillation d, prepare_distillation(student, opts, train_opts.resume));
    train_opts.hooks = &d.hooks;
    train_opts.inputs.push_back(opts.teacher);
    return train::run_training(student, train_opts);
}

}  // namespace strato::compress
