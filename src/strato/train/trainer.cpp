#include "strato/train/trainer.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

#include "strato/core/cgroup.h"
#include "strato/core/check.h"
#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/core/parse.h"
#include "strato/core/progress.h"
#include "strato/core/signals.h"
#include "strato/data/csv.h"
#include "strato/data/idx.h"
#include "strato/dist/ddp.h"
#include "strato/dist/env.h"
#include "strato/models/package.h"
#include "strato/models/torch_compat.h"
#include "strato/models/zoo.h"
#include "strato/train/checkpoint.h"
#include "strato/train/cuda_graph.h"
#include "strato/train/loss_scaler.h"
#include "strato/monitor/monitor.h"
#include "strato/train/metrics_log.h"
#include "strato/train/schedule.h"

namespace strato::train {
namespace stdfs = std::filesystem;
namespace F = torch::nn::functional;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

/// bf16 autocast on CPU for a scope (libtorch 1.13 has no C++ guard; this mirrors torch.autocast).
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o, std::vector<torch::Tensor> params) {
    if (o.name == "adamw") {
        return std::make_unique<torch::optim::AdamW>(
            params, torch::optim::AdamWOptions(o.lr).betas({o.betas[0], o.betas[1]}).eps(o.eps).weight_decay(o.weight_decay));
    }
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov && o.momentum > 0).weight_decay(o.weight_decay));
}

/// The key of a parameter's optimizer state: its TensorImpl's address, printed in libtorch 1.x
/// (c10::guts::to_string), the address itself where the map is keyed by void*.
template <typename Map>
typename Map::key_type state_key(const Map&, void* impl) {
    if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
        std::ostringstream os;
        os << impl;
        return os.str();
    } else {
        return impl;
    }
}
}  // namespace

bool foreach_sgd_step(torch::optim::Optimizer& optimizer) {
    auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
    if (!sgd) return false;
    torch::NoGradGuard ng;
    auto& state = sgd->state();
    for (auto& group : sgd->param_groups()) {
        const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
        std::vector<torch::Tensor> params, grads;
        for (auto& p : group.params()) {
            if (!p.grad().defined()) continue;
            params.push_back(p);
            grads.push_back(p.grad());
        }
        if (params.empty()) continue;
        // d = grad + weight_decay * param
        std::vector<torch::Tensor> d = o.weight_decay() != 0 ? at::_foreach_add(grads, params, o.weight_decay()) : grads;
        if (o.momentum() != 0) {
            std::vector<torch::Tensor> bufs(params.size()), old_bufs, old_d;
            for (size_t i = 0; i < params.size(); ++i) {
                auto key = state_key(state, params[i].unsafeGetTensorImpl());
                auto it = state.find(key);
                if (it == state.end()) {  // first step: the buffer starts as d
                    auto st = std::make_unique<torch::optim::SGDParamState>();
                    st->momentum_buffer(torch::clone(d[i]).detach());
                    bufs[i] = st->momentum_buffer();
                    state[key] = std::move(st);
                } else {
                    bufs[i] = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
                    old_bufs.push_back(bufs[i]);
                    old_d.push_back(d[i]);
                }
            }
            if (!old_bufs.empty()) {  // buf = momentum * buf + (1 - dampening) * d
                at::_foreach_mul_(old_bufs, o.momentum());
                at::_foreach_add_(old_bufs, old_d, 1 - o.dampening());
            }
            d = o.nesterov() ? at::_foreach_add(d, bufs, o.momentum()) : bufs;
        }
        at::_foreach_add_(params, d, -o.lr());
    }
    return true;
}

namespace {

void set_lr(torch::optim::Optimizer& opt, double lr) {
    for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

/// One process at a time trains in a run directory (a second one, with --resume, truncated the
/// first's metrics.jsonl and renamed its checkpoints away): fs::lock_dir's lock beside the
/// directory, so that --overwrite, which deletes it, keeps the lock.
Result<fs::DirLock> lock_run_dir(const stdfs::path& dir) {
    auto lock = fs::lock_dir(dir);
    if (lock.is_ok()) return lock;
    if (lock.status().code() != StatusCode::kAlreadyExists) return lock.status().with_context("run.dir");
    return Status(StatusCode::kAlreadyExists,
                  fmt::format("run directory {}\nhint: wait for it to finish, or give this run another run.name",
                              lock.status().message()));
}

/// A last training batch of one sample meets batch norm in training mode, which needs more than
/// one value per channel: where a feature map is 1x1 there (a resnet on a CSV's features, on tiny
/// images) libtorch failed at the end of the first epoch, after all its work. One training-mode
/// forward pass of one sample through a throwaway network of the same config tells before any
/// (called before the run's seed is set: it draws nothing the run draws).
Status check_one_sample_batch(const TrainConfig& cfg, const data::Dataset& train, int64_t per_process) {
    STRATO_ASSIGN_OR_RETURN(models::Net probe, models::create_model(cfg.model, train.shape(), train.num_classes()));
    probe->train();
    const data::ImageShape s = train.shape();
    try {
        torch::NoGradGuard no_grad;
        (void)probe->forward(torch::zeros({1, s.channels, s.height, s.width}));
    } catch (const c10::Error& e) {
        const std::string what = models::torch_error_message(e);
        if (what.find("Expected more than 1 value per channel") == std::string::npos) return Status::ok();
        return invalid_argument(
            "data.batch_size {} leaves a last training batch of 1 sample ({} samples per process), and the {}'s "
            "batch norm cannot train on one (libtorch: {})\nhint: set data.drop_last = true, or a data.batch_size "
            "that does not leave one sample over",
            cfg.data.batch_size, per_process, cfg.model.arch, what);
    }
    return Status::ok();
}

/// Refuses a run directory that holds what the run reads, or lies inside it. Before the run's
/// lock: that file, beside the run directory, would land in the input too.
Status check_run_dir_inputs(const TrainConfig& cfg, const TrainOptions& opts) {
    const stdfs::path dir = cfg.run_dir();
    auto holds = [&](const std::string& in) -> Status {
        if (fs::is_within(in, dir / "model") || (opts.overwrite && fs::is_within(in, dir)))
            return invalid_argument("run directory {}: it holds {}, which this run reads; {} it would destroy it -- "
                                    "choose another run.name",
                                    dir.string(), in, opts.overwrite ? "--overwrite" : "saving the new package");
        return Status::ok();
    };
    // The training data (it was loaded, then --overwrite deleted it with the run directory). A
    // run directory inside the data's folder is the user's choice (data.path = ".").
    const std::string& data = cfg.data.path;
    const bool remote = data.rfind("http://", 0) == 0 || data.rfind("https://", 0) == 0;
    if (cfg.data.dataset != "synthetic" && !data.empty() && !remote) STRATO_RETURN_IF_ERROR(holds(data));
    for (const auto& in : opts.inputs) {
        STRATO_RETURN_IF_ERROR(holds(in));
        // The other way round: a run written into the package it reads (a teacher) filled that
        // package with checkpoints, logs and a model/ of its own.
        if (fs::is_within(dir, in))
            return invalid_argument("run directory {} is inside {}, which this run reads; choose a run.dir outside it",
                                    dir.string(), in);
    }
    return Status::ok();
}

/// Prepares the run directory: refuses to clobber a previous run unless asked.
Status prepare_run_dir(const TrainConfig& cfg, const TrainOptions& opts) {
    const stdfs::path dir = cfg.run_dir();
    Status st = fs::check_writable_dir(cfg.run.dir);
    if (!st.is_ok()) return {st.code(), fmt::format("run.dir: {}", st.message())};
    std::error_code ec;
    // A run is there once it has metrics or a checkpoint; an empty metrics.jsonl or checkpoints/
    // is a start that failed.
    const auto metrics_bytes = stdfs::file_size(dir / "metrics.jsonl", ec);
    const bool exists = (!ec && metrics_bytes > 0) ||
                        (stdfs::is_directory(dir / "checkpoints", ec) && !stdfs::is_empty(dir / "checkpoints", ec));
    if (exists && opts.overwrite) {
        STRATO_RETURN_IF_ERROR(fs::remove_tree(dir));
    } else if (exists && !opts.resume) {
        return {StatusCode::kAlreadyExists,
                fmt::format("run directory {} already holds a run\nhint: pass --resume to continue it, --overwrite to "
                            "start over, or --set run.name=NEW",
                            dir.string())};
    }
    // The package is saved at the end: a folder of the user's in its place failed the run only
    // then, after the whole training.
    STRATO_RETURN_IF_ERROR(models::check_package_destination((dir / "model").string()));
    st = fs::check_writable_dir(dir);
    if (!st.is_ok()) return {st.code(), fmt::format("run directory: {}", st.message())};
    return fs::ensure_dir(dir / "checkpoints");
}

/// A --resume that finds no checkpoint starts from scratch, which replaces the run's package and
/// metrics.jsonl: refused where they hold a run that once had checkpoints (its package, or an
/// evaluation that more lines follow -- each evaluation is followed by a checkpoint). A run killed
/// before its first checkpoint only has the lines of the steps it is about to redo.
Status check_nothing_to_lose(const stdfs::path& dir) {
    std::error_code ec;
    std::string held;
    if (stdfs::exists(dir / "model" / models::kPackageManifest, ec)) held = "a model package (model/)";
    if (held.empty()) {
        auto lines = MetricsLog::read((dir / "metrics.jsonl").string());
        if (lines.is_ok()) {
            bool eval = false;
            for (const auto& j : *lines) {
                if (eval) {
                    held = "metrics.jsonl of evaluated epochs";
                    break;
                }
                eval = j.is_object() && j.value("kind", "") == "eval";
            }
        }
    }
    if (held.empty()) return Status::ok();
    return Status(StatusCode::kAlreadyExists,
                  fmt::format("run directory {} holds {} but no checkpoint to resume from ({} is empty); resuming "
                              "would train from scratch and replace them\nhint: start over with --overwrite, or give "
                              "this run another run.name",
                              dir.string(), held, (dir / "checkpoints").string()));
}

/// The keys whose values differ between two resolved configs (config::dump's TOML: "[section]"
/// headers, then "key = value" lines), as "optim.lr 0.05 -> 0.1"; a resumed run said only that
/// something had changed.
std::string changed_keys(const std::string& before, const std::string& after) {
    auto entries = [](const std::string& text) {
        std::map<std::string, std::string> out;
        std::istringstream in(text);
        std::string line, section;
        while (std::getline(in, line)) {
            const std::string t(trim_blanks(line));
            if (t.empty() || t[0] == '#') continue;
            if (t.front() == '[' && t.back() == ']') {
                section = t.substr(1, t.size() - 2);
                continue;
            }
            const size_t eq = t.find(" = ");
            if (eq == std::string::npos) continue;
            out[(section.empty() ? "" : section + ".") + t.substr(0, eq)] = t.substr(eq + 3);
        }
        return out;
    };
    const auto a = entries(before), b = entries(after);
    std::vector<std::string> diffs;
    for (const auto& [key, value] : b) {
        auto it = a.find(key);
        if (it == a.end()) diffs.push_back(fmt::format("{} = {} (new)", key, value));
        else if (it->second != value) diffs.push_back(fmt::format("{} {} -> {}", key, it->second, value));
    }
    for (const auto& [key, value] : a)
        if (!b.contains(key)) diffs.push_back(fmt::format("{} (gone, was {})", key, value));
    if (diffs.empty()) return "its text differs";
    const size_t shown = std::min<size_t>(diffs.size(), 8);
    std::string out =
        fmt::format("{}", fmt::join(diffs.begin(), diffs.begin() + static_cast<std::ptrdiff_t>(shown), ", "));
    if (diffs.size() > shown) out += fmt::format(" and {} more", diffs.size() - shown);
    return out;
}

torch::Tensor labels_tensor(data::Batch& b) { return torch::from_blob(b.labels.data(), {b.size}, torch::kLong); }

/// On a GPU: through pinned host memory, copied without blocking the host.
torch::Tensor on_device(const torch::Tensor& t, const torch::Device& device) {
    if (device.is_cpu()) return t;
    return t.pin_memory().to(device, /*non_blocking=*/true);
}

/// A batch's images where the net runs. On a GPU the NCHW batch is copied first (on `copier`'s
/// stream where given) and made channels-last there (a fraction of a millisecond, where the host
/// transpose takes tens).
torch::Tensor input_batch(data::Batch& b, bool channels_last, const torch::Device& device, CopyStream* copier = nullptr) {
    if (device.is_cpu()) return images_tensor(b, channels_last);
    torch::Tensor x;
#ifdef STRATO_WITH_CUDA
    if (copier) x = copier->to_device(images_tensor(b, false).pin_memory());
#else
    (void)copier;
#endif
    if (!x.defined()) x = on_device(images_tensor(b, false), device);
    return channels_last ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
}

}  // namespace

torch::Tensor images_tensor(data::Batch& b, bool channels_last) {
    auto x = torch::from_blob(b.images.data(), {b.size, b.shape.channels, b.shape.height, b.shape.width}, torch::kFloat);
    return channels_last ? models::channels_last_copy(x) : x;
}

int configure_threads(int64_t threads, std::string* source) {
    // 0: OMP_NUM_THREADS when it is set, as PyTorch does (strato launch sets it to 1 when several
    // workers share the node: each took every core), else the CPUs this process may use. At most 1024 (the
    // config's and the flags' bound): more is no faster and costs memory.
    int64_t from_env = 0;
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && threads <= 0) {
        auto v = parse_int(omp, 1, 1024);
        if (v) from_env = *v;
        else log::warn("OMP_NUM_THREADS={} is not a thread count (1..1024); using one thread per usable CPU", omp);
    }
    int n = threads > 0    ? static_cast<int>(std::min<int64_t>(threads, 1024))
            : from_env > 0 ? static_cast<int>(from_env)
                           : cgroup::usable_cpus();
    if (source)
        *source = threads > 0    ? std::string("as asked")
                  : from_env > 0 ? fmt::format("from OMP_NUM_THREADS={}", from_env)
                                 : std::string("one per usable CPU");
    at::set_num_threads(n);
    return at::get_num_threads();
}

Result<EvalResult> evaluate(models::NetImpl& net, data::Loader& loader, bool bf16, bool channels_last,
                            const torch::Device& device, bool fp16, const std::function<bool()>& interrupted) {
    const auto start = Clock::now();
    const bool was_training = net.is_training();
    net.eval();
    torch::NoGradGuard no_grad;
    EvalResult r;
    double loss_sum = 0;
    int64_t correct = 0;
    loader.seek({0, 0});
    data::Batch b;
    for (;;) {
        if (interrupted && interrupted()) {
            net.train(was_training);
            return Status(StatusCode::kCancelled,
                          fmt::format("interrupted while evaluating, after {} of the test samples", r.count));
        }
        STRATO_ASSIGN_OR_RETURN(bool more, loader.next(b));
        if (!more) break;
        torch::Tensor logits;
        {
            compat::AutocastGuard ac(device.type(), fp16 ? at::kHalf : at::kBFloat16, bf16 || fp16);
            logits = net.forward(input_batch(b, channels_last, device));
        }
        logits = logits.to(torch::kFloat);
        auto y = on_device(labels_tensor(b), device);
        if (!b.replaced.empty()) {
            // A bad sample's slot holds a copy of another sample: scored, it would count twice.
            auto keep = torch::ones({b.size}, torch::kBool);
            for (int64_t i : b.replaced) keep[i] = false;
            auto rows = on_device(keep.nonzero().squeeze(1), device);
            logits = logits.index_select(0, rows);
            y = y.index_select(0, rows);
            r.skipped += static_cast<int64_t>(b.replaced.size());
        }
        loss_sum += F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
        correct += logits.argmax(1).eq(y).sum().item<int64_t>();
        r.count += y.size(0);
    }
    net.train(was_training);
    if (r.count > 0) {
        r.loss = loss_sum / static_cast<double>(r.count);
        r.accuracy = static_cast<double>(correct) / static_cast<double>(r.count);
    }
    r.seconds = seconds_since(start);
    return r;
}

Result<data::DataSplits> open_package_data(const models::PackageInfo& info, const data::DataConfig& data,
                                           data::DataConfig* resolved, PackageData use) {
    // Images are brought to the size the model takes unless the config says otherwise.
    data::DataConfig cfg = data;
    if (cfg.image_size <= 0 && info.input_shape.height == info.input_shape.width) cfg.image_size = info.input_shape.height;
    if (cfg.reads_image_files()) {
        cfg.channels = info.input_shape.channels;
        // The test transforms the model was evaluated with in training (found by review: without
        // them, `strato eval` resized a center-cropped model's images whole and scored it otherwise
        // than its metrics.json), unless the data config names its own.
        if (cfg.test_transforms.empty()) cfg.test_transforms = info.test_transforms;
    }
    data::DataSplits splits;
    if (use == PackageData::kEvaluate) {
        STRATO_ASSIGN_OR_RETURN(splits.test, data::open_evaluation_split(cfg, info.labels, info.mean));
    } else {
        // (calibration: an image folder's sorted classes could never be a Fashion-MNIST model's
        // order, and quantize refused a folder eval scores)
        const bool by_name = use == PackageData::kCalibrate && cfg.dataset == "image-folder";
        STRATO_ASSIGN_OR_RETURN(splits, data::open_datasets(cfg, by_name ? info.labels : std::vector<std::string>{}));
    }
    if (!(splits.test->shape() == info.input_shape)) {
        const auto& a = splits.test->shape();
        const auto& b = info.input_shape;
        return invalid_argument("the data has {}x{}x{} images but the model expects {}x{}x{}", a.channels, a.height,
                                a.width, b.channels, b.height, b.width);
    }
    if (splits.test->num_classes() > info.num_classes) {
        return invalid_argument("the data has {} classes but the model predicts {}", splits.test->num_classes(),
                                info.num_classes);
    }
    // Labels are class indices: the data's class i must be the model's class i, or every
    // prediction is scored against another class (a folder with a class missing shifts the rest).
    // Folder datasets name their classes; IDX and CSV files number them.
    const bool named = cfg.reads_image_files();
    const auto& names = splits.test->class_names();
    for (size_t i = 0; named && i < names.size() && i < info.labels.size(); ++i) {
        if (names[i] != info.labels[i])
            return invalid_argument(
                "the data's class {} is '{}' but the model's class {} is '{}': the classes must be the model's, in its "
                "order (the model knows {}; an image folder needs a folder for each, empty ones included)",
                i, names[i], i, info.labels[i], fmt::join(info.labels, ", "));
    }
    // Fashion-MNIST names its classes, but its files number them (fashion_mnist_classes() is the
    // order). A model whose labels are those names in another order (trained on an image folder
    // or shards of the same images, whose classes are sorted) is matched by name, as an image
    // folder is and as distill reorders such a teacher (found by review: it was scored by index
    // without a word). Labels "0", "1", ... (a model of IDX files) are matched by index.
    if (cfg.dataset == "fashion-mnist" && !info.labels.empty()) {
        const auto& fashion = data::fashion_mnist_classes();
        auto folder = [](std::string s) {  // "T-shirt/top" is "T-shirt_top" as a class folder
            std::replace(s.begin(), s.end(), '/', '_');
            return s;
        };
        bool numbered = true, same = info.labels.size() == fashion.size();
        for (size_t i = 0; i < info.labels.size(); ++i) {
            numbered = numbered && info.labels[i] == std::to_string(i);
            same = same && folder(info.labels[i]) == folder(fashion[i]);
        }
        if (!numbered && !same) {
            std::vector<int64_t> to;  // the model's class of each Fashion-MNIST class
            std::vector<bool> taken(info.labels.size());
            for (const auto& name : fashion) {
                auto it = std::find_if(info.labels.begin(), info.labels.end(),
                                       [&](const std::string& l) { return folder(l) == folder(name); });
                const auto k = static_cast<size_t>(it - info.labels.begin());
                if (it == info.labels.end() || taken[k]) break;
                taken[k] = true;
                to.push_back(static_cast<int64_t>(k));
            }
            auto* idx = dynamic_cast<data::InMemoryDataset*>(splits.test.get());
            if (to.size() == fashion.size() && info.labels.size() == fashion.size() && idx) {
                size_t first = 0;  // the first class the orders disagree on
                while (to[first] == static_cast<int64_t>(first)) ++first;
                if (use == PackageData::kFineTune)
                    return invalid_argument(
                        "the data's class {} is '{}' but the model's class {} is '{}': the model orders Fashion-MNIST's "
                        "classes otherwise ({}), and its labels would be the data's",
                        first, fashion[first], first, info.labels[first], fmt::join(info.labels, ", "));
                idx->relabel(to, info.labels);
                if (auto* train = dynamic_cast<data::InMemoryDataset*>(splits.train.get())) train->relabel(to, info.labels);
                log::info("the model orders Fashion-MNIST's classes otherwise ({}): each test image is scored "
                          "against the model's class of its name (Fashion-MNIST's class {} '{}' is the model's {})",
                          fmt::join(info.labels, ", "), first, fashion[first], to[first]);
            } else {
                log::warn("the model's classes ({}) are not Fashion-MNIST's ({}): they are matched by index",
                          fmt::join(info.labels, ", "), fmt::join(fashion, ", "));
            }
        }
    }
    // A table's columns are matched by position: the model's features must be the data's, in its
    // order (found by review: a test.csv with its columns swapped was scored without a word).
    if (const auto* csv = dynamic_cast<const data::CsvDataset*>(splits.test.get()); csv && !info.features.empty()) {
        const auto& have = csv->feature_names();
        for (size_t i = 0; i < have.size() && i < info.features.size(); ++i)
            if (have[i] != info.features[i]) {
                const bool known = std::find(info.features.begin(), info.features.end(), have[i]) != info.features.end();
                return invalid_argument("the data's feature column {} is '{}' but the model's is '{}'{}: the columns "
                                        "must be the model's, in its order ({})",
                                        i + 1, have[i], info.features[i],
                                        known ? " (the same columns in another order?)" : "",
                                        fmt::join(info.features, ", "));
            }
    }
    splits.mean = info.mean;
    splits.std = info.std;
    if (resolved) *resolved = cfg;
    return splits;
}

Status package_data_error(const models::PackageInfo& info, const data::DataConfig& data, const Status& error,
                          std::string_view role, std::string_view verb) {
    const bool synthetic = data.dataset == "synthetic";
    std::string msg = fmt::format("{} ({}{}{}): {}", role, data.dataset, synthetic ? "" : " at ", synthetic ? "" : data.path,
                                  error.message());
    if (!info.features.empty() && data.dataset != "csv") {
        // (found by review: a table model evaluated on the default data said only "label 9 found,
        // but there are only 2 classes")
        msg += fmt::format("\nhint: the model reads a table of {} features ({}): --dataset csv --data DIR "
                           "(DIR/train.csv, DIR/test.csv)",
                           info.features.size(), fmt::join(info.features, ", "));
    } else if (error.message().rfind("the data", 0) == 0) {
        // (open_package_data's refusals of data that opened but does not fit start "the data has",
        // "the data's ..."; a file that cannot be read or parsed is named by its path instead.)
        msg += fmt::format("\nhint: {} on the data the model was trained on: --dataset KIND --data PATH, or --config "
                           "with its [data] section",
                           verb);
    }
    return Status(error.code(), msg);
}

Result<PackageEval> evaluate_package(const std::string& package_dir, const data::DataConfig& data, bool bf16, bool fuse,
                                     const std::function<bool()>& interrupted) {
    try {
        STRATO_ASSIGN_OR_RETURN(models::LoadedPackage pkg, models::load_package(package_dir));
        if (bf16 && pkg.info.quantized())
            return invalid_argument("{} is an INT8 package: it runs its own int8 kernels, and bf16 applies to float "
                                    "packages (drop --bf16)",
                                    package_dir);
        data::DataConfig cfg;
        auto splits = open_package_data(pkg.info, data, &cfg, PackageData::kEvaluate);
        if (!splits) return package_data_error(pkg.info, data, splits.status(), "test data", "evaluate");
        STRATO_ASSIGN_OR_RETURN(auto loader, data::Loader::create(splits->test, data::eval_loader_options(cfg, *splits)));
        PackageEval out;
        // What the server runs: the fused network in FP32 or bf16 (the eager one under bf16
        // autocast where the CPU has no oneDNN bf16 kernels, or with `fuse` false).
        models::InferenceNet run = models::inference_net(pkg, fuse, bf16);
        STRATO_ASSIGN_OR_RETURN(out.result, evaluate(*run.net, *loader, run.bf16_autocast, run.channels_last, torch::kCPU,
                                                    /*fp16=*/false, interrupted));
        if (!std::isfinite(out.result.loss))
            return invalid_argument("{}: the model's loss on the {} test samples is {}: its outputs are NaN or infinite "
                                    "(weights from a training that diverged?); it is no usable model",
                                    package_dir, out.result.count, out.result.loss);
        out.arch = pkg.info.model.arch;
        out.parameters = models::parameter_count(*pkg.net);
        out.labels = pkg.info.labels;
        return out;
    } catch (const c10::Error& e) {
        return internal_error("libtorch: {}", models::torch_error_message(e));
    }
}

torch::Tensor distillation_loss(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                                const torch::Tensor& hard, double temperature, double alpha) {
    const double t = temperature;
    // KL(p_t || p_s) = sum p_t * (log p_t - log p_s) over classes, averaged over the batch
    // ("batchmean"); kl_div takes log p_s and p_t, and counts a p_t that underflows to 0 as 0.
    auto log_p_s = torch::log_softmax(student_logits / t, 1);  // [B, classes]
    auto p_t = torch::softmax(teacher_logits / t, 1);          // [B, classes], no gradient
    auto soft = F::kl_div(log_p_s, p_t, F::KLDivFuncOptions().reduction(torch::kBatchMean));
    return (1 - alpha) * hard + alpha * t * t * soft;
}

namespace {

class Trainer {
public:
    Trainer(const TrainConfig& cfg, const TrainOptions& opts)
        : cfg_(cfg), opts_(opts), hooks_(opts.hooks ? *opts.hooks : TrainHooks{}) {}

    Result<TrainResult> run();

private:
    Status setup();
    Status train_epoch(bool& stop);
    Status checkpoint();
    /// The error of a run whose loss or weights stopped being finite at `step` (`after_epoch`: at
    /// the end of state_.epoch, else within the next one): names the last good checkpoint, which
    /// is kept, and says that nothing more is saved.
    Status diverged(int64_t step, bool after_epoch, std::string_view what) const;
    Result<TrainResult> finish(bool early_stopped);
    Result<int64_t> restore_best();

    const TrainConfig& cfg_;
    TrainOptions opts_;  // (a copy: an elastic restart resumes, whatever the command line said)
    TrainHooks hooks_;
    std::string run_dir_;
    fs::DirLock lock_;  // of the run directory, on rank 0
    data::DataSplits splits_;
    std::unique_ptr<data::Loader> train_loader_, test_loader_;
    models::Net net_;
    std::unique_ptr<torch::optim::Optimizer> optim_;
    std::unique_ptr<CheckpointStore> store_;
    std::unique_ptr<MetricsLog> metrics_;
    std::unique_ptr<monitor::Monitor> monitor_;  // with train.monitor_every
    TrainState state_;
    int64_t steps_per_epoch_ = 0;
    int64_t group_ = 1;  // micro-steps in the current optimizer step (train_epoch)
    int64_t total_steps_ = 0;
    Clock::time_point process_start_;
    Clock::time_point epoch_start_ = Clock::now();  // when this process began training the current epoch
    bool epoch_running_ = false;                      // between that and the end of the epoch's training
    EvalResult last_eval_;
    bool bf16_ = false, fp16_ = false;
    bool channels_last_ = false;
    torch::Device device_{torch::kCPU};
    std::optional<DynamicLossScaler> scaler_;  // fp16
    torch::Tensor pending_;                    // [loss sum, correct] of steps not read back yet (GPU)
    // train.cuda_graph: the captured step, and the loss scale as a GPU tensor the graph reads.
#ifdef STRATO_WITH_CUDA
    std::unique_ptr<GraphedStep> graph_;
    std::unique_ptr<CopyStream> copier_;  // training batches' host-to-device copies
    CopyStream* copier() { return copier_.get(); }
#else
    CopyStream* copier() { return nullptr; }
#endif
    bool graphed_ = false;  // a graph was captured: its gradients must stay put
    torch::Tensor scale_t_;
    /// One micro-step's forward and backward through `step`: replayed from the CUDA graph when
    /// train.cuda_graph is on and the batch has the captured shape, else run eagerly.
    Result<std::pair<torch::Tensor, torch::Tensor>> run_step(const StepFn& step, const torch::Tensor& x,
                                                             const torch::Tensor& y);
    // Data parallelism (WORLD_SIZE > 1): rank 0 writes the run directory; all ranks stop together.
    dist::DistEnv env_;
    std::unique_ptr<dist::DataParallel> ddp_;
    bool rank0_ = true;
    bool stopping_ = false;  // agreed by all ranks (through the gradient all-reduce)
    bool stop_now() const { return ddp_ ? stopping_ : signals::stop_requested(); }
    /// What stopped the run: this process's signal, or (found by review: said "signal 0") a
    /// signal that only another rank received.
    static std::string interrupted_by() {
        const int sig = signals::stop_signal();
        return sig != 0 ? fmt::format("interrupted by signal {}", sig) : "interrupted by a stop signal to another rank";
    }
    /// Sums over the ranks (identity in a single process).
    Result<std::vector<double>> global_sum(std::vector<double> v) {
        if (!ddp_) return v;
        return ddp_->sum(v);
    }
    /// The knowledge-distillation loss for a batch (see TrainHooks::teacher).
    torch::Tensor distillation_loss(const torch::Tensor& logits, const torch::Tensor& x, const torch::Tensor& hard) {
        torch::Tensor teacher_logits;
        {
            torch::NoGradGuard no_grad;
            compat::AutocastGuard ac(device_.type(), fp16_ ? at::kHalf : at::kBFloat16, bf16_ || fp16_);
            teacher_logits = hooks_.teacher->forward(x).to(torch::kFloat);
        }
        return train::distillation_loss(logits, teacher_logits, hard, hooks_.kd_temperature, hooks_.kd_alpha);
    }
    /// Evaluates this rank's share of the test set and combines the ranks' results.
    Result<EvalResult> evaluate_all();
};

Result<std::pair<torch::Tensor, torch::Tensor>> Trainer::run_step(const StepFn& step, const torch::Tensor& x,
                                                                  const torch::Tensor& y) {
#ifdef STRATO_WITH_CUDA
    if (cfg_.train.cuda_graph) {
        if (scaler_) {
            const auto scale = static_cast<float>(scaler_->current_scale());
            if (!scale_t_.defined())
                scale_t_ = torch::full({}, scale, torch::TensorOptions().dtype(torch::kFloat).device(device_));
            else
                scale_t_.fill_(scale);
        }
        if (!graph_ && x.size(0) == cfg_.data.batch_size) {
            STRATO_ASSIGN_OR_RETURN(graph_, GraphedStep::capture(step, x, y, net_->parameters(), net_->buffers()));
            graphed_ = true;
            log::info("training step captured as a CUDA graph (batch {}); replaying it", x.size(0));
        }
        if (graph_ && graph_->fits(x, y)) return graph_->replay(x, y);
        if (graph_) {  // another batch size: eagerly, into the graph's gradients
            torch::NoGradGuard ng;
            for (auto& p : net_->parameters())
                if (p.grad().defined()) p.mutable_grad().zero_();
        }
    }
#endif
    return step(x, y);
}

Result<EvalResult> Trainer::evaluate_all() {
    if (ddp_) STRATO_RETURN_IF_ERROR(ddp_->broadcast_buffers());  // rank 0's BatchNorm statistics, as DDP
    // One process stops at the next test batch on SIGINT/SIGTERM (found by review: it evaluated
    // the whole test split first -- minutes of an image folder, past a preemption's grace period,
    // whose SIGKILL then lost the epoch). Ranks would have to agree first: they evaluate on.
    std::function<bool()> interrupted;
    if (!ddp_) interrupted = [] { return signals::stop_requested(); };
    STRATO_ASSIGN_OR_RETURN(EvalResult r,
                            evaluate(*net_, *test_loader_, bf16_, channels_last_, device_, fp16_, interrupted));
    if (!ddp_) return r;
    const double n = static_cast<double>(r.count);
    STRATO_ASSIGN_OR_RETURN(auto g, ddp_->sum({r.loss * n, r.accuracy * n, n, static_cast<double>(r.skipped)}));
    r.count = static_cast<int64_t>(g[2]);
    r.skipped = static_cast<int64_t>(g[3]);
    r.loss = g[0] / std::max(1.0, g[2]);
    r.accuracy = g[1] / std::max(1.0, g[2]);
    return r;
}

Status Trainer::setup() {
    process_start_ = Clock::now();
    run_dir_ = cfg_.run_dir();
    STRATO_ASSIGN_OR_RETURN(env_, dist::read_env());
    rank0_ = env_.rank == 0;
    // An elastic agent (strato launch, torchrun) restarts the same command after a failure, and
    // the workers are meant to go on from their checkpoints (found by review: with --overwrite
    // each restart deleted the attempt before it; without --resume each one failed at once, "the
    // run directory already holds a run", until the restarts were used up).
    if (env_.restart_count > 0 && (!opts_.resume || opts_.overwrite)) {
        if (rank0_)
            log::info("restart {} of an elastic group (TORCHELASTIC_RESTART_COUNT): resuming from the run's "
                      "checkpoints{}",
                      env_.restart_count, opts_.overwrite ? ", not starting over as --overwrite says (the first "
                                                            "attempt did)"
                                                          : " as --resume does");
        opts_.resume = true;
        opts_.overwrite = false;
    }
    if (cfg_.run.device == "cuda") {
        if (!torch::cuda::is_available())
            return invalid_argument("run.device = \"cuda\": no CUDA device is usable here (libtorch {}: a CPU-only build, "
                                    "or no GPU)\nhint: build strato against a CUDA libtorch: cmake -DSTRATO_WITH_CUDA=ON "
                                    "-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')",
                                    TORCH_VERSION);
        // One GPU per process is often all a process sees (CUDA_VISIBLE_DEVICES per task or pod).
        const int64_t gpus = std::max<int64_t>(1, static_cast<int64_t>(torch::cuda::device_count()));
        device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank % gpus));
#ifdef STRATO_WITH_CUDA
        copier_ = std::make_unique<CopyStream>(device_);
#endif
    }
    // Data and model first: a typo in the config must fail before --overwrite deletes the old run
    // (and before a new run directory exists to block the corrected command). What they log
    // is held for the run's events.log.
    if (rank0_) log::hold_for_file_sink();
    STRATO_ASSIGN_OR_RETURN(splits_, data::open_datasets(cfg_.data));
    const uint64_t seed = static_cast<uint64_t>(cfg_.run.seed);
    auto train_opts = data::train_loader_options(cfg_.data, splits_, seed);
    auto test_opts = data::eval_loader_options(cfg_.data, splits_);
    train_opts.shard_rank = test_opts.shard_rank = env_.rank;
    train_opts.shard_count = test_opts.shard_count = env_.world_size;
    test_opts.shard_pad = false;  // every test sample once over the ranks
    STRATO_ASSIGN_OR_RETURN(train_loader_, data::Loader::create(splits_.train, train_opts));
    STRATO_ASSIGN_OR_RETURN(test_loader_, data::Loader::create(splits_.test, test_opts));
    if (train_loader_->batches_per_epoch() == 0)  // drop_last with a batch larger than this process's share
        return invalid_argument(
            "data.batch_size {} with data.drop_last leaves no batch: the training split gives this process {} "
            "samples; lower the batch size or set data.drop_last = false",
            cfg_.data.batch_size, splits_.train->size() / std::max(1, env_.world_size));
    if (train_loader_->last_batch_size() == 1)
        STRATO_RETURN_IF_ERROR(check_one_sample_batch(cfg_, *splits_.train, train_loader_->samples_per_epoch()));

    torch::manual_seed(seed);
    STRATO_ASSIGN_OR_RETURN(net_, models::create_model(cfg_.model, splits_.train->shape(), splits_.train->num_classes()));
    if (rank0_) {
        STRATO_RETURN_IF_ERROR(check_run_dir_inputs(cfg_, opts_));
        STRATO_ASSIGN_OR_RETURN(lock_, lock_run_dir(run_dir_));
        STRATO_RETURN_IF_ERROR(prepare_run_dir(cfg_, opts_));
        log::add_file_sink((stdfs::path(run_dir_) / "events.log").string());
    }

    const int threads = configure_threads(cfg_.run.threads);
    if (cfg_.run.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    bf16_ = cfg_.train.precision == "bf16";
    fp16_ = cfg_.train.precision == "fp16";

    // The resolved config: every key with its value, as the run used it.
    const std::string resolved = config::dump(cfg_);
    const stdfs::path cfg_path = stdfs::path(run_dir_) / "config.toml";
    const auto old_config = opts_.resume ? fs::read_file(cfg_path) : Result<std::string>(not_found("not resuming"));
    if (old_config && *old_config != resolved) {
        // Read and written again: a config.toml of an older strato (floats with 17 digits, keys
        // added since at their defaults) is not a change.
        std::string before = *old_config;
        if (auto was = config::load_string<TrainConfig>(before); was) before = config::dump(*was);
        if (before != resolved)
            log::warn("the config differs from the one this run started with ({}: {}); continuing with the new one",
                      cfg_path.string(), changed_keys(before, resolved));
    }

    if (hooks_.init) STRATO_RETURN_IF_ERROR(hooks_.init(*net_));
    channels_last_ = cfg_.train.channels_last && models::is_convolutional(cfg_.model);
    if (channels_last_) models::to_channels_last(*net_);
    if (!device_.is_cpu()) net_->to(device_);
    if (hooks_.teacher) {
        hooks_.teacher->eval();
        if (channels_last_) models::to_channels_last(*hooks_.teacher);
        if (!device_.is_cpu()) hooks_.teacher->to(device_);
        log::info("distilling from a teacher with {} parameters (temperature {}, alpha {})",
                  models::parameter_count(*hooks_.teacher), hooks_.kd_temperature, hooks_.kd_alpha);
    }
    optim_ = make_optimizer(cfg_.optim, net_->parameters());
    store_ = std::make_unique<CheckpointStore>(run_dir_, cfg_.checkpoint, env_.world_size);

    steps_per_epoch_ = (train_loader_->batches_per_epoch() + cfg_.train.grad_accum - 1) / cfg_.train.grad_accum;
    total_steps_ = steps_per_epoch_ * cfg_.train.epochs;
    if (cfg_.train.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.train.max_steps);

    if (opts_.resume) {
        STRATO_ASSIGN_OR_RETURN(auto restored, store_->load_latest(*net_, *optim_));
        if (restored) {
            // The position in an epoch counts batches: at another batch size, batch N is another
            // place in the epoch's order, and the rest of the epoch was skipped or trained twice.
            // The checkpoint says (older ones: the run's config.toml).
            int64_t was = restored->batch_size;
            if (was == 0 && old_config)
                if (auto before = config::load_string<TrainConfig>(*old_config); before) was = before->data.batch_size;
            if (restored->next_batch > 0 && was > 0 && was != cfg_.data.batch_size)
                return invalid_argument(
                    "the checkpoint is in the middle of epoch {} (batch {} at data.batch_size {}); resuming it at "
                    "data.batch_size {} would skip or repeat part of the epoch\nhint: resume with data.batch_size "
                    "= {}, or start a new run from the package",
                    restored->epoch + 1, restored->next_batch, was, cfg_.data.batch_size, was);
            // The epoch's order is a permutation of the training split: over another number of
            // samples (data.limit_train changed) batch N is another place, or past the end
            // (the rest of the epoch then ran with a learning rate of 0).
            const int64_t samples = splits_.train->size();
            const int64_t batches = train_loader_->batches_per_epoch();
            if (restored->next_batch > 0 && restored->train_samples > 0 && restored->train_samples != samples)
                return invalid_argument(
                    "the checkpoint is in the middle of epoch {} (batch {} of a training split of {} samples); resuming "
                    "it with {} training samples would skip or repeat part of the epoch\nhint: resume with the data the "
                    "run started with (data.limit_train, data.path), or start a new run from the package",
                    restored->epoch + 1, restored->next_batch, restored->train_samples, samples);
            // The same for the order itself (found by review: a resume mid-epoch with another
            // run.seed, or data.shuffle switched, only warned that the config differed, then drew
            // another order for the rest of the epoch).
            const bool other_seed = restored->order_seed >= 0 && restored->order_seed != cfg_.run.seed;
            const bool other_shuffle =
                restored->order_shuffle >= 0 && (restored->order_shuffle == 1) != cfg_.data.shuffle;
            if (restored->next_batch > 0 && (other_shuffle || (other_seed && cfg_.data.shuffle)))
                return invalid_argument(
                    "the checkpoint is in the middle of epoch {} (batch {}), whose order {}; resuming it with {} would "
                    "draw another order and skip or repeat part of the epoch\nhint: resume with {}, or change it at an "
                    "epoch's end (checkpoints there resume with any), or start a new run from the package",
                    restored->epoch + 1, restored->next_batch,
                    other_shuffle ? fmt::format("is {}", restored->order_shuffle == 1 ? "shuffled" : "not shuffled")
                                  : fmt::format("run.seed {} drew", restored->order_seed),
                    other_shuffle ? fmt::format("data.shuffle = {}", cfg_.data.shuffle)
                                  : fmt::format("run.seed {}", cfg_.run.seed),
                    other_shuffle ? fmt::format("data.shuffle = {}", restored->order_shuffle == 1)
                                  : fmt::format("run.seed = {}", restored->order_seed));
            if (restored->next_batch > batches)
                return invalid_argument(
                    "the checkpoint is in the middle of epoch {} at batch {}, but the training data gives {} batches "
                    "per epoch now; resuming it would skip or repeat part of the epoch\nhint: resume with the data the "
                    "run started with (data.limit_train, data.path), or start a new run from the package",
                    restored->epoch + 1, restored->next_batch, batches);
            if (restored->next_batch > 0 && was == 0)
                log::warn("cannot tell the data.batch_size the checkpoint's epoch position counts in (an old "
                          "checkpoint, and {} unreadable); resuming at {}",
                          cfg_path.string(), cfg_.data.batch_size);
            state_ = *restored;
            log::info("resuming {} from step {} (epoch {}, batch {})", run_dir_, state_.step, state_.epoch + 1,
                      state_.next_batch);
        } else {
            if (rank0_) STRATO_RETURN_IF_ERROR(check_nothing_to_lose(run_dir_));
            log::info("no checkpoint in {}; starting from scratch", store_->dir());
        }
    }
    if (env_.distributed()) {
        dist::DdpOptions d;
        d.timeout_s = cfg_.dist.timeout_s;
        d.bucket_bytes = static_cast<int64_t>(cfg_.dist.bucket_mb * (1 << 20));
        d.first_bucket_bytes = static_cast<int64_t>(cfg_.dist.first_bucket_mb * (1 << 20));
        d.backend = cfg_.dist.backend;
        // What decides the steps and collectives each rank runs (found by review: data.batch_size
        // 32 on one rank and 16 on another aborted in Gloo once one rank's gradients met the
        // other's metrics).
        const auto& t = cfg_.train;
        d.settings = fmt::format(
            "data.batch_size={} batches_per_epoch={} train.epochs={} train.max_steps={} train.stop_after_epochs={} "
            "train.grad_accum={} train.log_every={} train.monitor_every={} train.eval_every={} "
            "train.early_stopping_patience={} train.precision={} checkpoint.every_steps={} dist.bucket_mb={} "
            "dist.first_bucket_mb={} dist.backend={}",
            cfg_.data.batch_size, train_loader_->batches_per_epoch(), t.epochs, t.max_steps, t.stop_after_epochs,
            t.grad_accum, t.log_every, t.monitor_every, t.eval_every, t.early_stopping_patience, t.precision,
            cfg_.checkpoint.every_steps, cfg_.dist.bucket_mb, cfg_.dist.first_bucket_mb, cfg_.dist.backend);
        // ... and what each rank's optimizer step and data order take (found by review: optim.lr
        // 0.05 on one rank and 0.1 on another trained without a word, the replicas' weights
        // drifting apart from the same averaged gradients; rank 0's were saved).
        const auto& op = cfg_.optim;
        const auto& sc = cfg_.schedule;
        d.settings += fmt::format(
            " optim.name={} optim.lr={} optim.momentum={} optim.nesterov={} optim.weight_decay={} optim.betas={} "
            "optim.eps={} schedule.name={} schedule.warmup_epochs={} schedule.warmup_start_factor={} "
            "schedule.step_epochs={} schedule.gamma={} schedule.min_lr={} schedule.pct_start={} schedule.div_factor={} "
            "schedule.final_div_factor={} train.clip_grad_norm={} train.label_smoothing={} run.seed={} data.augment={}",
            op.name, op.lr, op.momentum, op.nesterov, op.weight_decay, fmt::join(op.betas, ","), op.eps, sc.name,
            sc.warmup_epochs, sc.warmup_start_factor, sc.step_epochs, sc.gamma, sc.min_lr, sc.pct_start, sc.div_factor,
            sc.final_div_factor, t.clip_grad_norm, t.label_smoothing, cfg_.run.seed, fmt::join(cfg_.data.augment, ","));
        STRATO_ASSIGN_OR_RETURN(ddp_, dist::DataParallel::create(env_, net_->parameters(), net_->buffers(), d));
        STRATO_RETURN_IF_ERROR(ddp_->broadcast_state());
        // The checkpoint holds the epoch's sums over all ranks: rank 0 carries them on.
        if (!rank0_) {
            state_.epoch_loss_sum = 0, state_.epoch_correct = state_.epoch_seen = 0;
            state_.window_loss_sum = 0, state_.window_correct = state_.window_seen = 0;
        }
        log::info("data parallel: {}; {} gradient buckets over {}", env_.describe(), ddp_->bucket_count(),
                  ddp_->backend());
    }
    if (hooks_.after_step) {
        torch::NoGradGuard no_grad;
        hooks_.after_step(*net_, state_.step, total_steps_);
    }
    if (cfg_.train.cuda_graph) {
#ifndef STRATO_WITH_CUDA
        return invalid_argument("train.cuda_graph = true: this strato is built without CUDA (-DSTRATO_WITH_CUDA=ON "
                                "against a CUDA libtorch; docs/gpu.md)");
#endif
        if (ddp_ || hooks_.teacher)
            return invalid_argument("train.cuda_graph = true works for single-process training without a teacher "
                                    "(data parallelism and distillation run hooks the graph cannot hold); set it to false");
    }
    if (fp16_) {
        scaler_.emplace();
        if (state_.loss_scale > 0) scaler_->restore(state_.loss_scale, state_.loss_scale_clean_steps);
    }
    if (rank0_) {
        STRATO_ASSIGN_OR_RETURN(MetricsLog m,
                                MetricsLog::open((stdfs::path(run_dir_) / "metrics.jsonl").string(), state_.metrics_lines));
        metrics_ = std::make_unique<MetricsLog>(std::move(m));
    }
    // Written once the checkpoint took the network and the metrics could be resumed: a resume
    // refused (weights of another model config, metrics.jsonl gone) leaves the run's config as
    // it was, and the next resume does not warn of a change that never trained.
    if (rank0_) STRATO_RETURN_IF_ERROR(fs::atomic_write(cfg_path, resolved));
    if (cfg_.train.monitor_every > 0 && rank0_) {
        monitor::MonitorOptions mo;
        mo.port = -1;  // samples only; `strato monitor` is the exporter
        STRATO_ASSIGN_OR_RETURN(monitor_, monitor::Monitor::create(mo));
        log::info("monitor samples every {} steps ({})", cfg_.train.monitor_every, monitor_->gpu_summary());
    }
    log::info("training {} ({} parameters) on {} samples, {} threads, {}, {} steps/epoch", cfg_.model.arch,
              models::parameter_count(*net_), splits_.train->size(), threads, cfg_.train.precision, steps_per_epoch_);
    return Status::ok();
}

Status Trainer::diverged(int64_t step, bool after_epoch, std::string_view what) const {
    std::string kept;
    if (auto f = fs::read_file(stdfs::path(store_->dir()) / "latest", 4096); f.is_ok() && store_->any())
        kept = fmt::format(" (the last good one, {}, is kept)", trim_blanks(f->substr(0, f->find('\n'))));
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("training diverged: at step {} ({} epoch {}) {}; no checkpoint saved{} and no "
                              "package written\nhint: lower optim.lr, or clip gradients (train.clip_grad_norm), then "
                              "--resume{} or start over with --overwrite",
                              step, after_epoch ? "after" : "in", after_epoch ? state_.epoch : state_.epoch + 1, what,
                              kept, kept.empty() ? "" : " from that checkpoint"));
}

Status Trainer::checkpoint() {
    // A diverged network is not saved: its state.json held null for NaN (never loadable again), and
    // keep_last pruned the good checkpoints from before the divergence. fp16 skips the steps whose
    // loss overflowed, so there only the weights say. (Every rank holds the same weights, and the
    // loss sums below are all ranks', so all ranks stop together.)
    std::vector<double> sums = {state_.epoch_loss_sum, state_.window_loss_sum};
    if (ddp_) {
        STRATO_ASSIGN_OR_RETURN(sums, ddp_->sum(sums));
    }
    const bool finite_loss = fp16_ || (std::isfinite(sums[0]) && std::isfinite(sums[1]));
    if (!finite_loss || !finite_weights(*net_))
        return diverged(state_.step, state_.next_batch == 0,
                        finite_loss ? "the weights are NaN or infinite" : "the training loss is not finite");
    if (ddp_) {
        // Every rank checkpoints at the same step; rank 0 saves the epoch's sums over all ranks.
        STRATO_ASSIGN_OR_RETURN(auto g, ddp_->sum({state_.epoch_loss_sum, static_cast<double>(state_.epoch_correct),
                                                   static_cast<double>(state_.epoch_seen), state_.window_loss_sum,
                                                   static_cast<double>(state_.window_correct),
                                                   static_cast<double>(state_.window_seen)}));
        if (rank0_) {
            state_.epoch_loss_sum = g[0];
            state_.epoch_correct = static_cast<int64_t>(g[1]);
            state_.epoch_seen = static_cast<int64_t>(g[2]);
            state_.window_loss_sum = g[3];
            state_.window_correct = static_cast<int64_t>(g[4]);
            state_.window_seen = static_cast<int64_t>(g[5]);
        } else {
            state_.epoch_loss_sum = 0;
            state_.epoch_correct = state_.epoch_seen = 0;
            state_.window_loss_sum = 0;
            state_.window_correct = state_.window_seen = 0;
            return Status::ok();
        }
    }
    STRATO_RETURN_IF_ERROR(metrics_->sync());
    TrainState s = state_;
    s.batch_size = cfg_.data.batch_size;
    s.train_samples = splits_.train->size();
    s.order_seed = cfg_.run.seed;
    s.order_shuffle = cfg_.data.shuffle ? 1 : 0;
    s.metrics_lines = metrics_->lines();
    s.elapsed_s = state_.elapsed_s + seconds_since(process_start_);
    s.epoch_elapsed_s = s.next_batch == 0 ? 0.0 : state_.epoch_elapsed_s + (epoch_running_ ? seconds_since(epoch_start_) : 0.0);
    return store_->save(s, *net_, *optim_);
}

Status Trainer::train_epoch(bool& stop) {
    const int64_t epoch = state_.epoch;
    const int64_t batches = train_loader_->batches_per_epoch();
    const int64_t accum = cfg_.train.grad_accum;
    train_loader_->seek({epoch, state_.next_batch});
    net_->train();
    ProgressBar bar(batches, fmt::format("epoch {}/{}", epoch + 1, cfg_.train.epochs), opts_.quiet || !rank0_);

    auto window_start = Clock::now();
    // The window's sums live in the state, so that a checkpoint carries them across a resume.
    if (state_.next_batch == 0) state_.window_loss_sum = 0, state_.window_correct = state_.window_seen = 0;
    double& window_loss = state_.window_loss_sum;
    int64_t &window_correct = state_.window_correct, &window_seen = state_.window_seen;
    // The rate counts what this process trained since window_start (after a resume the window's
    // earlier samples were trained before it).
    int64_t seen_since_start = 0;
    int64_t micro = 0;
    const auto smoothing = cfg_.train.label_smoothing;
    // Loss and accuracy sums still on the GPU (pending_), moved into the window and epoch sums.
    int64_t pending_seen = 0;
    double bar_loss = 0;  // the mean loss of the last samples read back
    auto flush = [&] {
        if (!pending_.defined()) return;
        const auto v = pending_.cpu();
        pending_ = torch::Tensor();
        const double l = v[0].item<double>();
        const auto c = static_cast<int64_t>(std::llround(v[1].item<double>()));
        window_loss += l, window_correct += c;
        state_.epoch_loss_sum += l, state_.epoch_correct += c;
        bar_loss = l / static_cast<double>(std::max<int64_t>(1, pending_seen));
        pending_seen = 0;
    };
    // On a GPU the next batch is fetched and its copy queued while this step's kernels run, so a
    // step that waits for the GPU (fp16's overflow check) is not followed by an idle GPU.
    data::Batch b, ahead;
    torch::Tensor ahead_x, ahead_y;
    bool have_ahead = false, end_ahead = false;
    for (;;) {
        torch::Tensor x, y;
        if (have_ahead) {
            std::swap(b, ahead);
            x = std::move(ahead_x), y = std::move(ahead_y);
            have_ahead = false;
        } else {
            if (end_ahead) break;
            Result<bool> more = train_loader_->next(b);
            // Ctrl-C while a remote shard was being fetched ends the fetch at once: stop at the last
            // whole step and checkpoint it, as at any other step (one process; ranks stop together by vote).
            if (!more.is_ok() && more.status().code() == StatusCode::kCancelled && !ddp_ && micro == 0 &&
                signals::stop_requested()) {
                stop = true;
                break;
            }
            if (!more.is_ok()) return more.status();
            if (!*more) break;
            x = input_batch(b, channels_last_, device_, copier());
            y = on_device(labels_tensor(b), device_);
        }
        const bool sync = micro + 1 >= accum || b.index + 1 == batches;  // this micro-step ends an optimizer step
        // The micro-steps of this optimizer step: fewer than grad_accum in an epoch's last one when
        // grad_accum does not divide its batches. Each loss is divided by their number, so the step
        // takes their mean gradient (dividing by grad_accum shrank the epoch's last step: 3 batches
        // at grad_accum 2 gave the third half its gradient).
        if (micro == 0) group_ = std::min<int64_t>(accum, batches - b.index);
        if (ddp_) ddp_->prepare(sync, signals::stop_requested() ? 1.0 : 0.0);
        // Forward, loss and (scaled) backward: run eagerly, or replayed from a CUDA graph.
        auto step = [&](const torch::Tensor& xs, const torch::Tensor& ys) {
            torch::Tensor out;
            {
                compat::AutocastGuard ac(device_.type(), fp16_ ? at::kHalf : at::kBFloat16, bf16_ || fp16_);
                out = net_->forward(xs);
            }
            out = out.to(torch::kFloat);
            auto l = F::cross_entropy(out, ys, F::CrossEntropyFuncOptions().label_smoothing(smoothing));
            if (hooks_.teacher) l = distillation_loss(out, xs, l);
            auto to_backward = group_ > 1 ? l / static_cast<double>(group_) : l;
            if (scaler_) to_backward = scale_t_.defined() ? to_backward * scale_t_ : scaler_->scale(to_backward);
            to_backward.backward();
            return std::make_pair(l, out);
        };
        torch::Tensor loss, logits;
        STRATO_ASSIGN_OR_RETURN(std::tie(loss, logits), run_step(step, x, y));
        if (ddp_ && sync) {
            STRATO_ASSIGN_OR_RETURN(double stop_votes, ddp_->finish());
            if (stop_votes > 0) stopping_ = true;
        }
        ++micro;
        if (!device_.is_cpu()) {
            STRATO_ASSIGN_OR_RETURN(bool more, train_loader_->next(ahead));
            if (more) {
                ahead_x = input_batch(ahead, channels_last_, device_, copier());
                ahead_y = on_device(labels_tensor(ahead), device_);
                have_ahead = true;
            } else {
                end_ahead = true;
            }
        }

        // Loss and accuracy: read back every step on CPU; on a GPU summed there and read when
        // needed (a read per step would stall the GPU while the host prepares the next batch).
        {
            torch::NoGradGuard ng;
            auto sums = torch::stack({loss.detach().to(torch::kDouble) * static_cast<double>(b.size),
                                      logits.detach().argmax(1).eq(y).sum().to(torch::kDouble)});
            pending_ = pending_.defined() ? pending_ + sums : sums;
        }
        window_seen += b.size;
        seen_since_start += b.size;
        state_.epoch_seen += b.size;
        pending_seen += b.size;
        if (device_.is_cpu()) flush();
        // A loss that is no longer finite stops the run at once (found by review: it trained on,
        // NaN, until the next checkpoint or the epoch's end -- hours of an image-folder epoch --
        // and its "train" lines held "loss": null). Read on the host every step on a CPU; one
        // process only (ranks see only their own losses: they stop together at the log window,
        // on the sums over all ranks). fp16's loss scaler skips the steps whose loss overflowed.
        if (device_.is_cpu() && !ddp_ && !fp16_ && !std::isfinite(window_loss))
            return diverged(state_.step + 1, false,
                            fmt::format("the training loss is {} (batch {} of {})",
                                        std::isnan(bar_loss) ? "nan" : fmt::format("{}", bar_loss), b.index + 1,
                                        batches));

        const bool last_batch = b.index + 1 == batches;
        if (micro < accum && !last_batch) continue;
        micro = 0;
        const double lr = learning_rate(cfg_.schedule, cfg_.optim.lr, state_.step, total_steps_, steps_per_epoch_);
        set_lr(*optim_, lr);
        // fp16: gradients back to their true size; a step whose gradients overflowed is skipped
        // (on every rank alike: they are already all-reduced).
        const bool finite = !scaler_ || scaler_->unscale(net_->parameters());
        if (cfg_.train.clip_grad_norm > 0 && finite)
            torch::nn::utils::clip_grad_norm_(net_->parameters(), cfg_.train.clip_grad_norm);
        if (finite && !(device_.is_cuda() && foreach_sgd_step(*optim_))) optim_->step();
        if (!graphed_) optim_->zero_grad();  // a captured step's gradients stay put (its replays overwrite them)
        if (hooks_.after_step) {
            torch::NoGradGuard no_grad;
            hooks_.after_step(*net_, state_.step + 1, total_steps_);
        }
        if (scaler_) {
            scaler_->update(!finite);
            state_.loss_scale = scaler_->current_scale();
            state_.loss_scale_clean_steps = scaler_->clean_steps();
        }
        ++state_.step;
        state_.next_batch = b.index + 1;

        const double secs = seconds_since(window_start);
        bar.update(b.index + 1, fmt::format("loss {:.4f}  {:.0f} samples/s",
                                            device_.is_cpu() ? window_loss / static_cast<double>(std::max<int64_t>(1, window_seen)) : bar_loss,
                                            static_cast<double>(seen_since_start) / std::max(1e-9, secs)));
        if (state_.step % cfg_.train.log_every == 0) {
            flush();  // on a GPU this waits for the window's work, so the rate below counts it
            const double window_s = seconds_since(window_start);
            STRATO_ASSIGN_OR_RETURN(auto w, global_sum({window_loss, static_cast<double>(window_correct),
                                                        static_cast<double>(window_seen),
                                                        static_cast<double>(seen_since_start)}));
            if (!fp16_ && !std::isfinite(w[0]))  // (the same on every rank: the sums are all ranks')
                return diverged(state_.step, false, "the training loss is not finite");
            if (metrics_)
                STRATO_RETURN_IF_ERROR(metrics_->append({{"kind", "train"},
                                                         {"step", state_.step},
                                                         {"epoch", epoch + static_cast<double>(b.index + 1) / static_cast<double>(batches)},
                                                         {"loss", w[0] / w[2]},
                                                         {"acc", w[1] / w[2]},
                                                         {"lr", lr},
                                                         {"samples_per_s", w[3] / std::max(1e-9, window_s)}}));
            window_start = Clock::now();
            window_loss = 0;
            window_correct = window_seen = seen_since_start = 0;
        }
        if (monitor_ && state_.step % cfg_.train.monitor_every == 0) {
            nlohmann::json sample = monitor::to_json(monitor_->sample());
            sample["kind"] = "monitor";
            sample["step"] = state_.step;
            STRATO_RETURN_IF_ERROR(metrics_->append(sample));
        }
        const bool max_reached = cfg_.train.max_steps > 0 && state_.step >= cfg_.train.max_steps;
        if (stop_now() || max_reached) {
            stop = true;
            flush();
            break;
        }
        if (cfg_.checkpoint.every_steps > 0 && state_.step % cfg_.checkpoint.every_steps == 0 && !last_batch) {
            flush();
            STRATO_RETURN_IF_ERROR(checkpoint());
        }
    }
    flush();  // the epoch's last micro-steps
    bar.finish();
    return Status::ok();
}

Result<TrainResult> Trainer::run() {
    STRATO_RETURN_IF_ERROR(setup());
    bool early_stopped = false;
    while (state_.epoch < cfg_.train.epochs) {
        if (cfg_.train.max_steps > 0 && state_.step >= cfg_.train.max_steps) break;  // resumed after max_steps
        // A pause (strato tune's rungs): the learning-rate schedule still spans train.epochs, so a
        // run resumed with a later stop_after_epochs continues exactly as an uninterrupted one.
        if (cfg_.train.stop_after_epochs > 0 && state_.epoch >= cfg_.train.stop_after_epochs) break;
        if (cfg_.train.early_stopping_patience > 0 && state_.bad_evals >= cfg_.train.early_stopping_patience) {
            early_stopped = true;  // resumed after early stopping had triggered
            break;
        }
        // A resume mid-epoch adds the training time its checkpoint kept (one from before that was
        // kept times only the rest of the epoch: marked partial below).
        if (state_.next_batch == 0) state_.epoch_elapsed_s = 0.0;
        const bool timed_whole = std::isfinite(state_.epoch_elapsed_s);
        const auto epoch_start = Clock::now();
        epoch_start_ = epoch_start;
        epoch_running_ = true;
        bool stop = false;
        Status trained = train_epoch(stop);
        epoch_running_ = false;
        const auto train_end = Clock::now();
        state_.epoch_elapsed_s += std::chrono::duration<double>(train_end - epoch_start).count();
        STRATO_RETURN_IF_ERROR(trained);
        if (stop && stop_now()) {
            STRATO_RETURN_IF_ERROR(checkpoint());
            return Status(StatusCode::kCancelled,
                          fmt::format("{} at step {}; checkpoint saved in {}\nhint: continue with the same command and "
                                      "--resume",
                                      interrupted_by(), state_.step, store_->dir()));
        }
        const bool epoch_done = state_.next_batch >= train_loader_->batches_per_epoch();
        const int64_t epoch = state_.epoch;
        const bool last = epoch + 1 >= cfg_.train.epochs || stop ||
                          (cfg_.train.stop_after_epochs > 0 && epoch + 1 >= cfg_.train.stop_after_epochs);
        if ((epoch + 1) % cfg_.train.eval_every == 0 || last) {
            auto evaluated = evaluate_all();
            if (!evaluated.is_ok() && evaluated.status().code() == StatusCode::kCancelled) {
                // The epoch's training is kept: the checkpoint is where its training ended, and a
                // resume evaluates it (no batch of it left to train).
                STRATO_RETURN_IF_ERROR(checkpoint());
                return Status(StatusCode::kCancelled,
                              fmt::format("{} while evaluating epoch {}; checkpoint saved in {} (with the epoch's "
                                          "training: a resume evaluates it)\nhint: continue with the same command and "
                                          "--resume",
                                          interrupted_by(), epoch + 1, store_->dir()));
            }
            STRATO_ASSIGN_OR_RETURN(last_eval_, std::move(evaluated));
            STRATO_ASSIGN_OR_RETURN(auto sums, global_sum({state_.epoch_loss_sum, static_cast<double>(state_.epoch_correct),
                                                           static_cast<double>(state_.epoch_seen)}));
            const double train_loss = sums[0] / std::max(1.0, sums[2]);
            const double train_acc = sums[1] / std::max(1.0, sums[2]);
            const double epoch_s =
                timed_whole ? state_.epoch_elapsed_s + seconds_since(train_end) : seconds_since(epoch_start);
            // A network whose outputs are NaN or infinite is not a model: no package is written.
            // (fp16's loss scaler skips steps whose loss overflowed, so only the test loss says so.)
            if (!std::isfinite(last_eval_.loss) || (!fp16_ && !std::isfinite(train_loss)))
                return Status(StatusCode::kInvalidArgument,
                              fmt::format("training diverged: after epoch {} (step {}) the training loss is {} and the "
                                          "test loss {}; no package written\nhint: lower optim.lr, or clip gradients "
                                          "(train.clip_grad_norm)",
                                          epoch + 1, state_.step, train_loss, last_eval_.loss));
            if (metrics_) {
                // An epoch cut short (train.max_steps) says how far it got, and one not timed from
                // its start is marked: its epoch_time_s is no epoch's time (report and plan skip it).
                const nlohmann::json epoch_at =
                    epoch_done ? nlohmann::json(epoch + 1)
                               : nlohmann::json(static_cast<double>(epoch) +
                                                static_cast<double>(state_.next_batch) /
                                                    static_cast<double>(std::max<int64_t>(1, train_loader_->batches_per_epoch())));
                nlohmann::json line = {{"kind", "eval"},
                                       {"step", state_.step},
                                       {"epoch", epoch_at},
                                       {"train_loss", train_loss},
                                       {"train_acc", train_acc},
                                       {"test_loss", last_eval_.loss},
                                       {"test_acc", last_eval_.accuracy},
                                       {"epoch_time_s", epoch_s},
                                       {"eval_time_s", last_eval_.seconds}};
                if (!epoch_done || !timed_whole) line["partial"] = true;
                STRATO_RETURN_IF_ERROR(metrics_->append(line));
            }
            log::info("epoch {}/{}: train loss {:.4f} acc {:.2f}% | test loss {:.4f} acc {:.2f}% | {:.1f} s", epoch + 1,
                      cfg_.train.epochs, train_loss, 100 * train_acc, last_eval_.loss, 100 * last_eval_.accuracy, epoch_s);
            for (auto* l : {train_loader_.get(), test_loader_.get()}) {
                const data::BadSamples bad = l->bad_samples();
                if (bad.count > 0)
                    log::warn("{} {} sample(s) skipped so far (data.on_bad_sample = \"skip\"); first: {}",
                              l == train_loader_.get() ? "train:" : "test:", bad.count, bad.first.front());
            }
            if (last_eval_.accuracy > state_.best_acc + cfg_.train.early_stopping_min_delta) {
                state_.best_acc = last_eval_.accuracy;
                state_.best_step = state_.step;
                state_.best_loss = last_eval_.loss;
                state_.bad_evals = 0;
            } else {
                ++state_.bad_evals;
            }
            if (cfg_.train.early_stopping_patience > 0 && state_.bad_evals >= cfg_.train.early_stopping_patience) {
                log::info("early stopping: no improvement in {} evaluations", state_.bad_evals);
                early_stopped = true;
            }
        }
        if (epoch_done) {
            state_.epoch = epoch + 1;
            state_.next_batch = 0;
            state_.epoch_elapsed_s = 0.0;
            state_.epoch_loss_sum = 0;
            state_.epoch_correct = state_.epoch_seen = 0;
        }
        STRATO_RETURN_IF_ERROR(checkpoint());
        bool interrupted = signals::stop_requested();
        if (ddp_) {  // together: a rank that got the signal after the last step tells the others
            STRATO_ASSIGN_OR_RETURN(auto votes, ddp_->sum({interrupted ? 1.0 : 0.0}));
            interrupted = votes[0] > 0;
        }
        if (interrupted) {
            return Status(StatusCode::kCancelled,
                          fmt::format("{} after epoch {}; checkpoint saved in {}\nhint: continue with the same command "
                                      "and --resume",
                                      interrupted_by(), epoch + 1, store_->dir()));
        }
        if (stop || early_stopped) break;
    }
    return finish(early_stopped);
}

// train.early_stopping_restore_best: with early stopping on, the network takes the weights of the
// best evaluation (its checkpoint) before it is packaged. Returns the step whose weights the
// network holds. A best checkpoint that is gone (checkpoint.keep_best = false) or damaged leaves
// the last weights, with a warning: the run's work is not thrown away for it.
Result<int64_t> Trainer::restore_best() {
    const int64_t best = state_.best_step;
    if (cfg_.train.early_stopping_patience == 0 || !cfg_.train.early_stopping_restore_best || best < 0 ||
        best == state_.step)
        return state_.step;
    if (!std::isfinite(state_.best_loss)) {
        log::warn("early stopping: the package holds the last weights (step {}), not the best evaluation's (step {}): "
                  "this run was resumed from a checkpoint saved before strato kept the best evaluation's loss",
                  state_.step, best);
        return state_.step;
    }
    const std::string last = models::module_to_bytes(*net_);
    if (Status st = store_->load_weights(best, *net_); !st.is_ok()) {
        STRATO_RETURN_IF_ERROR(models::module_from_bytes(*net_, last, "the last weights"));
        log::warn("early stopping: the package holds the last weights (step {}), not the best evaluation's (step {}): "
                  "{}{}",
                  state_.step, best, st.message(),
                  cfg_.checkpoint.keep_best ? "" : "\nhint: keep it with checkpoint.keep_best = true");
        return state_.step;
    }
    log::info("early stopping: the package holds the best evaluation's weights (step {}, test accuracy {:.2f}%), "
              "not the last ones (step {}, {:.2f}%)",
              best, 100 * state_.best_acc, state_.step, 100 * last_eval_.accuracy);
    return best;
}

Result<TrainResult> Trainer::finish(bool early_stopped) {
    if (last_eval_.count == 0) {  // resumed after the last epoch had finished
        STRATO_ASSIGN_OR_RETURN(last_eval_, evaluate_all());
    }
    // As after every evaluation in run(): a resume that trains no more (train.epochs or
    // train.max_steps reached) evaluated a checkpoint's weights here, unchecked.
    if (const bool weights = finite_weights(*net_); !weights || !std::isfinite(last_eval_.loss))
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("training diverged: at step {} the test loss is {}{}; no package written\nhint: lower "
                                  "optim.lr, or clip gradients (train.clip_grad_norm), and start over with --overwrite",
                                  state_.step, last_eval_.loss, weights ? "" : " and the weights are NaN or infinite"));
    TrainResult r;
    r.weights_step = state_.step;
    if (rank0_) {  // (the one that packages)
        STRATO_ASSIGN_OR_RETURN(r.weights_step, restore_best());
    }
    r.run_dir = run_dir_;
    r.package_dir = (stdfs::path(run_dir_) / "model").string();
    r.rank = env_.rank;
    r.steps = state_.step;
    r.epochs = state_.epoch;
    r.test_acc = r.weights_step == state_.step ? last_eval_.accuracy : state_.best_acc;
    r.test_loss = r.weights_step == state_.step ? last_eval_.loss : state_.best_loss;
    r.best_test_acc = std::max(state_.best_acc, last_eval_.accuracy);
    r.wall_time_s = state_.elapsed_s + seconds_since(process_start_);
    r.early_stopped = early_stopped;

    models::PackageInfo info;
    info.model = cfg_.model;
    info.input_shape = splits_.train->shape();
    info.num_classes = splits_.train->num_classes();
    info.labels = splits_.train->class_names();
    if (const auto* csv = dynamic_cast<const data::CsvDataset*>(splits_.train.get())) info.features = csv->feature_names();
    info.mean = splits_.mean;
    info.std = splits_.std;
    if (cfg_.data.reads_image_files()) info.test_transforms = cfg_.data.test_transforms;
    info.metrics = {{"test_acc", r.test_acc},        {"test_loss", r.test_loss}, {"best_test_acc", r.best_test_acc},
                    {"test_samples", last_eval_.count}, {"test_skipped", last_eval_.skipped},
                    {"epochs", r.epochs},             {"steps", r.steps},
                    {"wall_time_s", r.wall_time_s},   {"precision", cfg_.train.precision},
                    {"weights_step", r.weights_step}};
    info.metrics.update(hooks_.package_metrics);
    if (ddp_) {
        const auto& st = ddp_->stats();
        log::info("data parallel: {} synchronised steps, {} buckets; all-reduce {:.2f} s, of which {:.2f} s waited after "
                  "backward ({:.1f} % of {:.1f} s training; backward hid {:.0f} % of the all-reduce time)",
                  st.steps, st.buckets, st.comm_s, st.wait_s, 100 * st.wait_s / std::max(1e-9, r.wall_time_s),
                  r.wall_time_s, 100 * (1 - st.wait_s / std::max(1e-9, st.comm_s)));
    }
    if (rank0_) STRATO_RETURN_IF_ERROR(models::save_package(r.package_dir, info, *net_));
    return r;
}

}  // namespace

Result<TrainResult> run_training(const TrainConfig& cfg, const TrainOptions& opts) {
    try {
        Trainer t(cfg, opts);
        auto r = t.run();
        log::remove_file_sinks();
        return r;
    } catch (const c10::Error& e) {
        log::remove_file_sinks();
        return internal_error("libtorch: {}", models::torch_error_message(e));
    } catch (const Error& e) {
        log::remove_file_sinks();
        return e.status();
    } catch (const std::exception& e) {  // libtorch's own (a value a float cannot hold), bad_alloc
        log::remove_file_sinks();
        return internal_error("training stopped: {}", e.what());
    }
}

}  // namespace strato::train
