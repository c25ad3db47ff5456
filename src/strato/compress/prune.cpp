#include "strato/compress/prune.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "strato/core/check.h"
#include "strato/core/fs.h"
#include "strato/core/json_depth.h"
#include "strato/core/json.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/models/package.h"
#include "strato/train/trainer.h"

namespace strato::compress {
namespace nn = torch::nn;
namespace stdfs = std::filesystem;
using nlohmann::json;

// --- Unstructured ---

std::vector<std::string> prunable_weights(nn::Module& net) {
    std::vector<std::string> names;
    for (const auto& item : net.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
        if (item.value()->as<nn::Conv2d>() || item.value()->as<nn::Linear>()) names.push_back(item.key() + ".weight");
    }
    return names;
}

MagnitudePruner::MagnitudePruner(nn::Module& net) : names_(prunable_weights(net)) {}

void MagnitudePruner::prune(nn::Module& net, double sparsity) {
    torch::NoGradGuard no_grad;
    auto params = net.named_parameters();
    std::vector<torch::Tensor> weights, flat;
    int64_t total = 0;
    for (const auto& name : names_) {
        torch::Tensor* w = params.find(name);
        STRATO_ASSERT(w, "the pruned network has no parameter ", name);
        weights.push_back(*w);
        flat.push_back(w->detach().abs().reshape({-1}));  // logical (NCHW) order, whatever the layout
        total += w->numel();
    }
    // One global threshold: the k smallest |w| over all prunable weights, exactly k of them.
    const auto k = static_cast<int64_t>(std::llround(sparsity * static_cast<double>(total)));
    torch::Tensor importance = torch::cat(flat);
    torch::Tensor keep = torch::ones_like(importance);
    if (k > 0) {
        torch::Tensor idx = std::get<1>(importance.topk(std::min(k, total), 0, /*largest=*/false, /*sorted=*/false));
        keep.index_fill_(0, idx, 0);
    }
    masks_.clear();
    int64_t offset = 0;
    for (size_t i = 0; i < names_.size(); ++i) {
        torch::Tensor& w = weights[i];
        torch::Tensor mask = keep.narrow(0, offset, w.numel()).reshape(w.sizes());
        offset += w.numel();
        w.mul_(mask);
        masks_.emplace(names_[i], mask);
    }
    sparsity_ = sparsity;
}

void MagnitudePruner::apply(nn::Module& net) {
    if (masks_.empty()) return;
    torch::NoGradGuard no_grad;
    auto params = net.named_parameters();
    for (auto& [name, mask] : masks_) {
        torch::Tensor* w = params.find(name);
        STRATO_ASSERT(w, "the pruned network has no parameter ", name);
        if (mask.device() != w->device()) mask = mask.to(w->device());
        w->mul_(mask);
    }
}

double gradual_sparsity(double final_sparsity, int64_t step, int64_t ramp_steps, int64_t points) {
    if (step <= 0) return 0.0;
    const int64_t ramp = std::max<int64_t>(1, ramp_steps);
    const int64_t n = std::clamp<int64_t>(points, 1, ramp);
    const int64_t k = std::min(n, step * n / ramp);  // ramp points passed
    const double left = 1.0 - static_cast<double>(k) / static_cast<double>(n);
    return final_sparsity * (1.0 - left * left * left);
}

std::vector<WeightSparsity> measure_sparsity(nn::Module& net) {
    torch::NoGradGuard no_grad;
    auto params = net.named_parameters();
    std::vector<WeightSparsity> out;
    for (const auto& name : prunable_weights(net)) {
        const torch::Tensor& w = params[name];
        out.push_back({name, w.sizes().vec(), w.numel(), w.eq(0).sum().item<int64_t>()});
    }
    return out;
}

// --- Structured ---

namespace {

/// Which prunable layer's kept channels index a tensor: its rows (dim 0) and/or its columns
/// (dim 1, in blocks of `block` consecutive columns per channel).
struct Slice {
    int rows = -1;
    int cols = -1;
    int64_t block = 1;
};

/// The prunable layers of a zoo network, in model.channels order, and how each parameter and
/// buffer is sliced when they narrow.
struct ChannelMap {
    struct Layer {
        std::string name, weight, bn;  // bn: the BatchNorm after it ("" if none)
    };
    std::vector<Layer> layers;
    std::map<std::string, Slice> slices;

    void add_bn(const std::string& bn, int layer) {
        layers[static_cast<size_t>(layer)].bn = bn;
        for (const char* s : {"weight", "bias", "running_mean", "running_var"}) slices[bn + "." + s].rows = layer;
    }
};

Result<ChannelMap> channel_map(models::NetImpl& net, const models::ModelConfig& cfg) {
    ChannelMap m;
    auto children = net.named_children();
    auto seq = [&](const char* name) -> nn::SequentialImpl* {
        auto* c = children.find(name);
        return c ? (*c)->as<nn::Sequential>() : nullptr;
    };
    auto not_zoo = [&](const char* what) {
        return invalid_argument(
            "the network is not the zoo's {} (no {}); structured pruning knows the zoo's cnn, mlp "
            "and resnet",
            cfg.arch, what);
    };
    if (cfg.arch == "cnn") {
        auto* features = seq("features");
        auto* classifier = seq("classifier");
        if (!features || !classifier) return not_zoo("features/classifier");
        int last = -1;
        int64_t last_channels = 0;
        for (const auto& item : features->named_children()) {
            const std::string path = "features." + item.key();
            if (auto* c = item.value()->as<nn::Conv2d>()) {
                const int k = static_cast<int>(m.layers.size());
                m.layers.push_back({path, path + ".weight", ""});
                m.slices[path + ".weight"].rows = k;
                m.slices[path + ".weight"].cols = last;
                if (c->options.bias()) m.slices[path + ".bias"].rows = k;
                last = k;
                last_channels = c->options.out_channels();
            } else if (item.value()->as<nn::BatchNorm2d>() && last >= 0) {
                m.add_bn(path, last);
            }
        }
        for (const auto& item : classifier->named_children()) {
            if (auto* lin = item.value()->as<nn::Linear>()) {
                // flatten(1) of [B, C, H, W]: channel c owns columns c*H*W .. (c+1)*H*W - 1.
                const int64_t in = lin->options.in_features();
                if (last < 0 || in % last_channels != 0) return not_zoo("Linear after the last convolution");
                Slice& s = m.slices["classifier." + item.key() + ".weight"];
                s.cols = last;
                s.block = in / last_channels;
                break;
            }
        }
    } else if (cfg.arch == "mlp") {
        auto* body = seq("body");
        if (!body) return not_zoo("body");
        std::vector<std::pair<std::string, nn::LinearImpl*>> linears;
        for (const auto& item : body->named_children()) {
            if (auto* lin = item.value()->as<nn::Linear>()) linears.emplace_back("body." + item.key(), lin);
        }
        for (size_t i = 0; i < linears.size(); ++i) {
            const auto& [path, lin] = linears[i];
            const int k = static_cast<int>(i);
            const bool hidden = i + 1 < linears.size();  // the last Linear's outputs are the logits
            if (hidden) {
                m.layers.push_back({path, path + ".weight", ""});
                m.slices[path + ".weight"].rows = k;
                if (lin->options.bias()) m.slices[path + ".bias"].rows = k;
            }
            if (k > 0) m.slices[path + ".weight"].cols = k - 1;
        }
    } else if (cfg.arch == "resnet") {
        auto* stages = seq("stages");
        if (!stages) return not_zoo("stages");
        for (const auto& item : stages->named_children()) {
            const std::string path = "stages." + item.key();
            auto kids = item.value()->named_children();
            if (!kids.contains("conv1") || !kids.contains("conv2")) return not_zoo("residual blocks");
            const int inner = kids.contains("conv3") ? 2 : 1;  // bottleneck: conv1 and conv2; basic: conv1
            for (int i = 1; i <= inner; ++i) {
                const int k = static_cast<int>(m.layers.size());
                const std::string conv = fmt::format("{}.conv{}", path, i);
                m.layers.push_back({conv, conv + ".weight", ""});
                m.slices[conv + ".weight"].rows = k;
                m.add_bn(fmt::format("{}.bn{}", path, i), k);
                m.slices[fmt::format("{}.conv{}.weight", path, i + 1)].cols = k;
            }
        }
    } else {
        return invalid_argument("model.arch: structured pruning knows cnn, mlp and resnet, not '{}'", cfg.arch);
    }
    if (m.layers.empty()) return invalid_argument("the {} has no layers structured pruning can narrow", cfg.arch);
    return m;
}

std::string dims_str(c10::IntArrayRef sizes) { return fmt::format("{}", fmt::join(sizes.begin(), sizes.end(), "x")); }
std::string shape_str(c10::IntArrayRef sizes) { return fmt::format("[{}]", dims_str(sizes)); }

}  // namespace

Result<std::vector<torch::Tensor>> channel_importance(models::NetImpl& net, const models::ModelConfig& cfg) {
    STRATO_ASSIGN_OR_RETURN(ChannelMap map, channel_map(net, cfg));
    torch::NoGradGuard no_grad;
    auto params = net.named_parameters();
    auto buffers = net.named_buffers();
    auto modules = net.named_modules("", false);
    std::vector<torch::Tensor> out;
    for (const auto& layer : map.layers) {
        const torch::Tensor w = params[layer.weight].detach().to(torch::kCPU, torch::kDouble);
        torch::Tensor imp = w.abs().reshape({w.size(0), -1}).sum(1);  // ||W_c||_1, [C]
        if (!layer.bn.empty()) {
            const double eps = modules[layer.bn]->as<nn::BatchNorm2d>()->options.eps();
            const torch::Tensor gamma = params[layer.bn + ".weight"].detach().to(torch::kCPU, torch::kDouble);
            const torch::Tensor var = buffers[layer.bn + ".running_var"].detach().to(torch::kCPU, torch::kDouble);
            imp = imp * gamma.abs() / (var + eps).sqrt();
        }
        out.push_back(imp);
    }
    return out;
}

Result<ChannelPruneResult> prune_channels(models::NetImpl& net, const models::ModelConfig& cfg,
                                          const data::ImageShape& shape, int64_t classes, double amount,
                                          int64_t round_to) {
    if (!(amount > 0 && amount < 1)) return invalid_argument("--amount: expected a fraction in (0, 1), got {}", amount);
    if (round_to < 1) return invalid_argument("--round-to: expected a channel multiple >= 1, got {}", round_to);
    STRATO_ASSIGN_OR_RETURN(ChannelMap map, channel_map(net, cfg));
    STRATO_ASSIGN_OR_RETURN(std::vector<torch::Tensor> importance, channel_importance(net, cfg));
    ChannelPruneResult out;
    out.model = cfg;
    out.model.channels.clear();
    std::vector<torch::Tensor> kept_idx;
    for (size_t i = 0; i < map.layers.size(); ++i) {
        const int64_t n = importance[i].size(0);
        int64_t drop = std::min<int64_t>(n - 1, std::llround(amount * static_cast<double>(n)));
        if (round_to > 1 && n > round_to) drop = n - std::max(round_to, (n - drop) / round_to * round_to);
        // The n - drop most important channels, in their original order (ties: the earlier one).
        torch::Tensor order = std::get<1>(importance[i].sort(/*stable=*/true, 0, /*descending=*/true));
        torch::Tensor kept = std::get<0>(order.narrow(0, 0, n - drop).sort());
        ChannelLayer layer{map.layers[i].name, n, n - drop, {}};
        layer.kept.assign(kept.data_ptr<int64_t>(), kept.data_ptr<int64_t>() + kept.numel());
        out.layers.push_back(std::move(layer));
        out.model.channels.push_back(n - drop);
        kept_idx.push_back(kept);
    }
    STRATO_ASSIGN_OR_RETURN(out.net, models::create_model(out.model, shape, classes));

    torch::NoGradGuard no_grad;
    auto src_params = net.named_parameters();
    auto src_buffers = net.named_buffers();
    auto copy = [&](const std::string& name, torch::Tensor& dst) -> Status {
        const torch::Tensor* found = src_params.find(name);
        if (!found) found = src_buffers.find(name);
        if (!found) return internal_error("structured pruning: the narrower network has {}, the source has not", name);
        torch::Tensor t = found->detach();
        if (auto it = map.slices.find(name); it != map.slices.end()) {
            const Slice& s = it->second;
            if (s.rows >= 0) t = t.index_select(0, kept_idx[static_cast<size_t>(s.rows)].to(t.device()));
            if (s.cols >= 0) {
                torch::Tensor cols = kept_idx[static_cast<size_t>(s.cols)];
                if (s.block > 1) cols = (cols.unsqueeze(1) * s.block + torch::arange(s.block)).reshape({-1});
                t = t.index_select(1, cols.to(t.device()));
            }
        }
        if (!t.sizes().equals(dst.sizes())) {
            return internal_error("structured pruning: {} is {} after slicing but {} in the narrower network", name,
                                  shape_str(t.sizes()), shape_str(dst.sizes()));
        }
        dst.copy_(t);
        return Status::ok();
    };
    for (auto& item : out.net->named_parameters()) STRATO_RETURN_IF_ERROR(copy(item.key(), item.value()));
    for (auto& item : out.net->named_buffers()) STRATO_RETURN_IF_ERROR(copy(item.key(), item.value()));
    out.net->eval();
    return out;
}

// --- The command ---

namespace {

/// Built-in fine-tuning defaults: a fifth of strato train's default learning rate (the weights are
/// trained already), no warmup, two epochs; [data] is the default Fashion-MNIST.
constexpr const char* kFinetuneDefaults = R"([optim]
name = "sgd"
lr = 0.01
momentum = 0.9
nesterov = true
weight_decay = 5e-4

[schedule]
name = "cosine"
warmup_epochs = 0

[train]
epochs = 2
)";

constexpr double kDefaultAmountMagnitude = 0.5;
constexpr double kDefaultAmountChannels = 0.3;

/// Copies every parameter and buffer of `src` into `dst` by name; a missing name or a shape that
/// differs is an error (the fine-tuning data does not fit the package).
Status copy_weights(nn::Module& dst, nn::Module& src) {
    torch::NoGradGuard no_grad;
    auto sp = src.named_parameters();
    auto sb = src.named_buffers();
    auto copy = [&](const std::string& name, torch::Tensor& d) -> Status {
        const torch::Tensor* s = sp.find(name);
        if (!s) s = sb.find(name);
        if (!s) return invalid_argument("the fine-tuned network has {}, the pruned one has not", name);
        if (!s->sizes().equals(d.sizes())) {
            return invalid_argument(
                "the fine-tuning data builds a network whose {} is {}, but the pruned package's is {}"
                "\nhint: fine-tune on the data the package was trained on (same image size, "
                "channels and classes): --config or --set data.*",
                name, shape_str(d.sizes()), shape_str(s->sizes()));
        }
        d.copy_(*s);
        return Status::ok();
    };
    for (auto& item : dst.named_parameters()) STRATO_RETURN_IF_ERROR(copy(item.key(), item.value()));
    for (auto& item : dst.named_buffers()) STRATO_RETURN_IF_ERROR(copy(item.key(), item.value()));
    return Status::ok();
}

/// Loads the package at `dir`, lets `update` change its metrics, and writes it back (atomically).
Status update_package_metrics(const std::string& dir, const std::function<void(json&)>& update) {
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage pkg, models::load_package(dir));
    if (!pkg.info.metrics.is_object()) pkg.info.metrics = json::object();
    update(pkg.info.metrics);
    return models::save_package(dir, pkg.info, *pkg.net);
}

/// Fills the report's per-weight sparsity (and totals) from `net`.
void measure_into(PruneReport& r, nn::Module& net) {
    r.weights = r.zeros = 0;
    std::vector<WeightSparsity> ws = measure_sparsity(net);
    const bool rows = r.method == "magnitude";
    if (rows) r.layers.clear();
    for (const auto& w : ws) {
        r.weights += w.weights;
        r.zeros += w.zeros;
        if (rows) r.layers.push_back({w.name, w.shape, w.weights, w.zeros, 0, 0});
    }
    r.parameters_after = models::parameter_count(net);
}

// One decimal, and more where one would say what is not so: 99.99 % sparsity is not "100.0%"
// (every weight gone), one zero in 10^5 not "0.0%" (nothing pruned).
std::string pct(double x) {
    auto says_an_end = [](const std::string& t) { return t.starts_with("100.") || t.find_first_of("123456789") == std::string::npos; };
    std::string s = fmt::format("{:.1f}%", 100 * x);
    for (int digits = 2; digits <= 6 && x > 0 && x < 1 && says_an_end(s); ++digits) s = fmt::format("{:.{}f}%", 100 * x, digits);
    return s;
}

std::string with_commas(int64_t v) {
    std::string s = std::to_string(v < 0 ? -v : v), out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
        out += s[i];
    }
    return v < 0 ? "-" + out : out;
}

}  // namespace

Result<train::TrainConfig> finetune_config(const std::string& config_path, const std::vector<std::string>& sets) {
    // Not validated here: prune_package fills in the package's model and image size, then validates.
    if (!config_path.empty()) return config::load<train::TrainConfig>(config_path, sets);
    return config::load_string<train::TrainConfig>(kFinetuneDefaults, sets);
}

std::string default_prune_output(const std::string& package, const std::string& method, double amount) {
    stdfs::path p = stdfs::path(package).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // "runs/x/model/"
    if (p.filename() == "." || p.filename() == "..") {  // the package is here: named by its real path
        std::error_code ec;
        if (auto real = stdfs::weakly_canonical(p, ec); !ec) p = real;
    }
    stdfs::path base = p;
    if (p.filename() == "model" && !p.parent_path().empty()) base = p.parent_path();  // the run directory
    const std::string name =
        fmt::format("{}-prune-{}-{}", base.filename().string(), method, std::llround(amount * 100));
    return (base.parent_path() / name).string();
}

json PruneReport::compression_json() const {
    json layers_json = json::array();
    for (const auto& l : layers) {
        if (method == "channels") {
            layers_json.push_back(
                {{"name", l.name}, {"channels_before", l.channels_before}, {"channels_after", l.channels_after}});
        } else {
            layers_json.push_back(
                {{"name", l.name},
                 {"shape", l.shape},
                 {"weights", l.weights},
                 {"zeros", l.zeros},
                 {"sparsity", l.weights ? static_cast<double>(l.zeros) / static_cast<double>(l.weights) : 0.0}});
        }
    }
    json j = {{"method", method},
              {"amount", amount},
              {"round_to", round_to},
              {"schedule", schedule},
              {"source", source},
              {"finetune_epochs", epochs},
              {"sparsity", sparsity()},
              {"prunable_weights", weights},
              {"pruned_weights", zeros},
              {"parameters_before", parameters_before},
              {"parameters_after", parameters_after},
              {"layers", layers_json}};
    j["source_test_acc"] = source_test_acc ? json(*source_test_acc) : json(nullptr);
    return j;
}

json PruneReport::to_json() const {
    json j = compression_json();
    j["run_dir"] = run_dir;
    j["package"] = package;
    j["test_acc"] = test_acc ? json(*test_acc) : json(nullptr);
    j["test_samples"] = test_samples;
    return j;
}

std::string format_prune_table(const PruneReport& r) {
    std::string out;
    size_t wname = 5;
    for (const auto& l : r.layers) wname = std::max(wname, l.name.size());
    if (r.method == "channels") {
        out += fmt::format("{:<{}}  {:>8}  {:>8}  {:>6}\n", "layer", wname, "before", "after", "kept");
        for (const auto& l : r.layers) {
            out += fmt::format("{:<{}}  {:>8}  {:>8}  {:>6}\n", l.name, wname, l.channels_before, l.channels_after,
                               pct(static_cast<double>(l.channels_after) /
                                   static_cast<double>(std::max<int64_t>(1, l.channels_before))));
        }
        out += fmt::format("parameters: {} -> {} ({} of the original)\n", with_commas(r.parameters_before),
                           with_commas(r.parameters_after),
                           pct(static_cast<double>(r.parameters_after) /
                               static_cast<double>(std::max<int64_t>(1, r.parameters_before))));
    } else {
        size_t wshape = 5;
        std::vector<std::string> shapes;
        for (const auto& l : r.layers) {
            shapes.push_back(dims_str(l.shape));
            wshape = std::max(wshape, shapes.back().size());
        }
        out += fmt::format("{:<{}}  {:<{}}  {:>11}  {:>11}  {:>8}\n", "layer", wname, "shape", wshape, "weights",
                           "zeros", "sparsity");
        for (size_t i = 0; i < r.layers.size(); ++i) {
            const auto& l = r.layers[i];
            out +=
                fmt::format("{:<{}}  {:<{}}  {:>11}  {:>11}  {:>8}\n", l.name, wname, shapes[i], wshape,
                            with_commas(l.weights), with_commas(l.zeros),
                            pct(static_cast<double>(l.zeros) / static_cast<double>(std::max<int64_t>(1, l.weights))));
        }
        out += fmt::format("{:<{}}  {:<{}}  {:>11}  {:>11}  {:>8}\n", "total", wname, "", wshape,
                           with_commas(r.weights), with_commas(r.zeros), pct(r.sparsity()));
        out += fmt::format("parameters: {} ({} non-zero)\n", with_commas(r.parameters_after),
                           with_commas(r.parameters_after - r.zeros));
    }
    auto acc = [](const std::optional<double>& a) { return a ? fmt::format("{:.2f}%", 100 * *a) : std::string("n/a"); };
    out += fmt::format("test accuracy: {} (source) -> {} ({})\n", acc(r.source_test_acc), acc(r.test_acc),
                       r.epochs > 0 ? fmt::format("after {} fine-tuning epoch{}", r.epochs, r.epochs == 1 ? "" : "s")
                                    : std::string("no fine-tuning"));
    out += fmt::format("model package: {}\n", r.package);
    return out;
}

namespace {

/// The pruning a run directory was started with, kept beside config.toml as prune.json: a
/// --resume with other settings or another source would finish a run that is neither.
json prune_settings(const PruneReport& r, const PruneOptions& o, const json& source_sha256) {
    json j = {{"source", r.source},       {"source_weights_sha256", source_sha256},
              {"method", r.method},       {"amount", r.amount},
              {"schedule", r.schedule},   {"round_to", r.round_to}};
    if (r.schedule == "gradual") {
        j["ramp"] = o.ramp;
        j["ramp_points"] = o.ramp_points;
    }
    return j;
}

/// Refuses a --resume whose settings differ from the run's prune.json (none there: a run from
/// before it was written, accepted).
Status check_resume_settings(const stdfs::path& record, const json& now) {
    auto text = fs::read_file(record, 1 << 20);
    if (!text) {
        log::warn("prune: {} is missing; cannot check that the run was started with the same pruning settings",
                  record.string());
        return Status::ok();
    }
    const json then = parse_json_bounded(*text);
    if (!then.is_object())
        return invalid_argument("{} is not a JSON object; cannot check the pruning settings of the run it resumes",
                                record.string());
    std::vector<std::string> diffs;
    for (const auto& [key, value] : now.items()) {
        const json old = then.contains(key) ? then[key] : json(nullptr);
        if (old != value) diffs.push_back(fmt::format("{} {} then, {} now", key, old.dump(), value.dump()));
    }
    for (const auto& [key, value] : then.items())
        if (!now.contains(key)) diffs.push_back(fmt::format("{} {} then, none now", key, value.dump()));
    if (diffs.empty()) return Status::ok();
    return invalid_argument(
        "--resume: the run was started with other pruning settings ({}; see {})\nhint: resume with the same "
        "--model, --method, --amount, --schedule, --ramp, --ramp-points and --round-to, or start over with "
        "--overwrite or another --output",
        fmt::join(diffs, "; "), record.string());
}

/// A run is there once it has metrics, a checkpoint or a package (as the trainer counts runs, plus
/// the package an --epochs 0 prune writes).
bool holds_run(const stdfs::path& dir) {
    std::error_code ec;
    const auto metrics_bytes = stdfs::file_size(dir / "metrics.jsonl", ec);
    if (!ec && metrics_bytes > 0) return true;
    if (stdfs::is_directory(dir / "checkpoints", ec) && !stdfs::is_empty(dir / "checkpoints", ec)) return true;
    return stdfs::exists(dir / "model" / models::kPackageManifest, ec);
}

/// Ctrl-C (SIGINT) or SIGTERM between the long steps before and after fine-tuning (the trainer
/// polls during it): `step` is what just finished.
Status check_stop(const char* step) { return signals::stopped(fmt::format("after {}; no package written", step)); }

Result<PruneReport> prune_package_impl(const PruneOptions& o) {
    // Options first, then the package: every refusal before any work.
    if (o.method != "magnitude" && o.method != "channels")
        return invalid_argument("--method: unknown method '{}' (expected magnitude or channels)", o.method);
    const double amount = o.amount.value_or(o.method == "magnitude" ? kDefaultAmountMagnitude : kDefaultAmountChannels);
    if (!(amount > 0 && amount < 1))
        return invalid_argument("--amount: expected the fraction to remove, in (0, 1) (e.g. 0.5), got {}", amount);
    if (o.schedule != "oneshot" && o.schedule != "gradual")
        return invalid_argument("--schedule: unknown schedule '{}' (expected oneshot or gradual)", o.schedule);
    const bool gradual = o.schedule == "gradual";
    const int64_t epochs = o.epochs >= 0 ? o.epochs : o.finetune.train.epochs;
    if (gradual && o.method != "magnitude")
        return invalid_argument(
            "--schedule gradual: only magnitude pruning has a gradual schedule; channel pruning "
            "rebuilds the network once (use --schedule oneshot)");
    if (gradual && epochs == 0)
        return invalid_argument(
            "--schedule gradual: the sparsity ramps up during fine-tuning, so it needs --epochs >= 1");
    if (!(o.ramp > 0 && o.ramp <= 1)) return invalid_argument("--ramp: expected a fraction in (0, 1], got {}", o.ramp);
    if (o.ramp_points < 1) return invalid_argument("--ramp-points: expected at least 1, got {}", o.ramp_points);

    std::error_code ec;
    if (!stdfs::is_directory(o.model, ec)) {
        return not_found("--model: {} is not a directory (a model package is a directory such as runs/NAME/model)",
                         o.model);
    }
    const stdfs::path manifest_path = stdfs::path(o.model) / models::kPackageManifest;
    json source_sha256 = nullptr;  // of weights.pt, as the manifest records it
    if (auto text = fs::read_file(manifest_path); text) {
        const json m = parse_json_bounded(*text);
        if (m.is_object() && m.contains("files") && m["files"].is_object() && m["files"].contains("weights.pt") &&
            m["files"]["weights.pt"].is_object() && m["files"]["weights.pt"].contains("sha256"))
            source_sha256 = m["files"]["weights.pt"]["sha256"];
        if (m.is_object() && m.contains("quantization") && m["quantization"].is_object()) {
            return invalid_argument(
                "{} is an INT8 package (made by strato compress quantize); pruning needs the float "
                "weights\nhint: prune the float package it was made from, then quantize the pruned "
                "package",
                o.model);
        }
    }
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage src, models::load_package(o.model));
    if (src.info.quantized()) {
        return invalid_argument(
            "{} is an INT8 package (made by strato compress quantize); prune the float package it "
            "was made from, then quantize the pruned package",
            o.model);
    }

    PruneReport report;
    report.method = o.method;
    report.schedule = o.schedule;
    report.amount = amount;
    report.round_to = o.method == "channels" ? o.round_to : 1;
    report.epochs = epochs;
    report.source = stdfs::absolute(o.model, ec).lexically_normal().string();
    report.parameters_before = models::parameter_count(*src.net);
    if (src.info.metrics.is_object() && src.info.metrics.contains("test_acc") &&
        src.info.metrics["test_acc"].is_number())
        report.source_test_acc = src.info.metrics["test_acc"].get<double>();

    // The fine-tuning config: the package's model and normalisation, the output run directory.
    train::TrainConfig cfg = o.finetune;
    if (epochs > 0) cfg.train.epochs = epochs;
    // The gradual schedule's sparsity rises through the fine-tuning, and accuracy with it falls:
    // early stopping's best evaluation would be an early, denser network (found by review).
    if (gradual && cfg.train.early_stopping_patience > 0 && cfg.train.early_stopping_restore_best) {
        cfg.train.early_stopping_restore_best = false;
        log::info("prune: --schedule gradual packages the last weights (at the full sparsity), not early stopping's best "
                  "evaluation");
    }
    cfg.data.mean = src.info.mean;
    cfg.data.std = src.info.std;
    const auto& in = src.info.input_shape;
    if (cfg.data.image_size <= 0 && in.height == in.width) cfg.data.image_size = in.height;  // as strato eval
    if (cfg.data.reads_image_files()) cfg.data.channels = in.channels;
    // The fine-tuning data must be the model's: its image shape and its classes, in its order
    // (else the package would be relabelled with the data's class names).
    if (auto checked = train::open_package_data(src.info, cfg.data); !checked)
        return checked.status().with_context("fine-tuning data");
    std::string output = o.output;
    if (output.empty()) {
        output =
            cfg.run.name != train::RunConfig{}.name ? cfg.run_dir() : default_prune_output(o.model, o.method, amount);
    }
    const stdfs::path out_path = stdfs::path(output).lexically_normal();
    cfg.run.dir = out_path.parent_path().empty() ? "." : out_path.parent_path().string();
    cfg.run.name = out_path.filename().string();
    STRATO_RETURN_IF_ERROR(cfg.validate());
    report.run_dir = cfg.run_dir();
    report.package = (stdfs::path(report.run_dir) / "model").string();
    // --overwrite deletes the output run directory: never the one the source package lives in
    if (fs::is_within(o.model, report.run_dir))
        return invalid_argument("--output {}: the source package {} is inside it; choose another directory",
                                report.run_dir, o.model);
    // ... nor a run inside the source package (a later save of that package would delete it)
    if (fs::is_within(report.run_dir, o.model))
        return invalid_argument("--output {} is inside the source package {}; write the pruned run next to it",
                                report.run_dir, o.model);
    // An existing run is refused before the source is evaluated and pruned, naming the flags
    // that choose (the trainer's own refusal, much later, names run.name, which --output overrides).
    const bool resuming = o.resume && epochs > 0;
    if (!o.overwrite && !resuming && holds_run(report.run_dir)) {
        return Status(StatusCode::kAlreadyExists,
                      fmt::format("--output {} already holds a run\nhint: pass --output DIR for a new one, --overwrite "
                                  "to start over{}",
                                  report.run_dir, epochs > 0 ? ", or --resume to continue its fine-tuning" : ""));
    }
    const json settings = prune_settings(report, o, source_sha256);
    const stdfs::path settings_path = stdfs::path(report.run_dir) / "prune.json";
    if (resuming && holds_run(report.run_dir)) STRATO_RETURN_IF_ERROR(check_resume_settings(settings_path, settings));

    // The source's accuracy on the test split the pruned model is measured on: its metrics.json may
    // count another (10,000 samples against --set data.limit_test=500: "89.20 % -> 93.40 %").
    const auto interrupted = [] { return signals::stop_requested(); };
    if (auto ev = train::evaluate_package(o.model, cfg.data, /*bf16=*/false, /*fuse=*/true, interrupted); ev.is_ok())
        report.source_test_acc = ev->result.accuracy;
    else if (!signals::stop_requested())
        log::warn("prune: the source package's accuracy is taken from its metrics.json (evaluating it failed: {})",
                  ev.status().message());
    STRATO_RETURN_IF_ERROR(check_stop("evaluating the source package"));

    // Prune.
    models::Net start;
    std::shared_ptr<MagnitudePruner> pruner;
    if (o.method == "magnitude") {
        start = src.net;
        cfg.model = src.info.model;
        pruner = std::make_shared<MagnitudePruner>(*start);
        if (pruner->weights().empty())
            return invalid_argument("the {} has no Conv2d or Linear weights to prune", src.info.model.arch);
        if (!gradual) pruner->prune(*start, amount);
        measure_into(report, *start);
        // (--amount 1e-9 pruned nothing and said "0 of N weights set to 0" as if that were asked)
        if (std::llround(amount * static_cast<double>(report.weights)) == 0)
            log::warn("--amount {}: that fraction of the {} prunable weights rounds to none, so nothing is pruned (the "
                      "smallest amount that prunes one weight is {:.2g})",
                      amount, report.weights, 0.5 / static_cast<double>(std::max<int64_t>(1, report.weights)));
        log::info("magnitude pruning: {} of {} weights set to 0 ({}){}", report.zeros, report.weights,
                  pct(report.sparsity()), gradual ? "; the gradual schedule starts dense" : "");
    } else {
        STRATO_ASSIGN_OR_RETURN(
            ChannelPruneResult pruned,
            prune_channels(*src.net, src.info.model, src.info.input_shape, src.info.num_classes, amount,
                           o.round_to));
        start = pruned.net;
        cfg.model = pruned.model;
        for (const auto& l : pruned.layers) report.layers.push_back({l.name, {}, 0, 0, l.before, l.after});
        measure_into(report, *start);
        log::info("channel pruning: {} -> {} parameters", report.parameters_before, report.parameters_after);
    }
    STRATO_RETURN_IF_ERROR(check_stop("pruning"));

    if (epochs == 0) {
        STRATO_RETURN_IF_ERROR(fs::ensure_dir(report.run_dir));
        // The trainer's lock on the run directory, before the package is looked at: a fine-tuning
        // running there keeps its files (and a package it writes meanwhile is not replaced).
        auto lock = fs::lock_dir(report.run_dir);
        if (!lock) return lock.status().with_context("--output");
        std::error_code exists_ec;
        if (stdfs::exists(report.package, exists_ec) && !o.overwrite) {
            return Status(StatusCode::kAlreadyExists,
                          fmt::format("{} already exists\nhint: pass --overwrite to replace it, or --output DIR",
                                      report.package));
        }
        models::PackageInfo info = src.info;
        info.model = cfg.model;
        info.metrics = {{"compression", report.compression_json()}};
        // Before anything is replaced (found by review: a stop seen after the save deleted the new
        // package, which had already replaced the --overwrite target: both were gone).
        STRATO_RETURN_IF_ERROR(check_stop("pruning"));
        if (o.overwrite) {
            // The replaced run's fine-tuning goes (the package is replaced below, atomically): left
            // beside the new package, a later --resume continued it under the new settings.
            for (const char* f : {"metrics.jsonl", "checkpoints", "config.toml", "events.log"})
                STRATO_RETURN_IF_ERROR(fs::remove_tree(stdfs::path(report.run_dir) / f));
        }
        fs::remove_stale_temps(settings_path);
        STRATO_RETURN_IF_ERROR(fs::atomic_write(settings_path, json_text(settings, 2) + "\n"));
        STRATO_RETURN_IF_ERROR(models::save_package(report.package, info, *start));
        // Interrupted once it is saved: the package stays (whatever it replaced is gone), without
        // its test scores, and the message says so.
        auto saved_then_stopped = [&](const char* step) -> Status {
            return signals::stopped(fmt::format("{}; {} holds the pruned package, not evaluated "
                                                "(`strato eval --model {}` scores it)",
                                                step, report.package, report.package));
        };
        STRATO_RETURN_IF_ERROR(saved_then_stopped("while the pruned package was saved"));
        auto ev = train::evaluate_package(report.package, cfg.data, /*bf16=*/false, /*fuse=*/true, interrupted);
        STRATO_RETURN_IF_ERROR(saved_then_stopped("while the pruned package was evaluated"));
        if (ev) {
            report.test_acc = ev->result.accuracy;
            report.test_samples = ev->result.count;
            STRATO_RETURN_IF_ERROR(update_package_metrics(report.package, [&](json& m) {
                m["test_acc"] = ev->result.accuracy;
                m["test_loss"] = ev->result.loss;
                m["test_samples"] = ev->result.count;
            }));
        } else {
            log::warn("the pruned package is not evaluated: {}", ev.status().message());
        }
        return report;
    }

    // Fine-tune through the trainer: the init hook starts from the pruned weights; magnitude
    // pruning re-applies its masks (and moves along the gradual schedule) after every step.
    train::TrainHooks hooks;
    // After the trainer prepared the run directory (--overwrite emptied it): the settings first.
    hooks.init = [start, settings, settings_path](models::NetImpl& net) {
        fs::remove_stale_temps(settings_path);  // a killed run's
        STRATO_RETURN_IF_ERROR(fs::atomic_write(settings_path, json_text(settings, 2) + "\n"));
        return copy_weights(net, *start);
    };
    if (pruner) {
        const double ramp = o.ramp;
        const int64_t points = o.ramp_points;
        hooks.after_step = [pruner, gradual, amount, ramp, points](models::NetImpl& net, int64_t step, int64_t total) {
            pruner->apply(net);  // pruned weights back to exactly 0
            if (!gradual) return;
            const auto ramp_steps = std::max<int64_t>(1, std::llround(ramp * static_cast<double>(total)));
            const double target = gradual_sparsity(amount, step, ramp_steps, points);
            if (target > pruner->sparsity()) {
                pruner->prune(net, target);
                log::debug("gradual pruning: sparsity {:.4f} at step {}", target, step);
            }
        };
    }
    hooks.package_metrics = {{"compression", report.compression_json()}};
    log::info("fine-tuning {} epoch(s) in {}", cfg.train.epochs, report.run_dir);
    STRATO_ASSIGN_OR_RETURN(
        train::TrainResult tr,
        train::run_training(cfg, {.resume = o.resume, .overwrite = o.overwrite, .quiet = o.quiet, .hooks = &hooks,
                                  .inputs = {o.model}}));
    report.test_acc = tr.test_acc;
    report.package = tr.package_dir;

    // What the package really holds (the schedule's final masks, after the last step).
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage out, models::load_package(tr.package_dir));
    measure_into(report, *out.net);
    if (out.info.metrics.is_object() && out.info.metrics.contains("test_samples"))
        report.test_samples = out.info.metrics["test_samples"].get<int64_t>();
    out.info.metrics["compression"] = report.compression_json();
    STRATO_RETURN_IF_ERROR(models::save_package(tr.package_dir, out.info, *out.net));
    return report;
}

}  // namespace

Result<PruneReport> prune_package(const PruneOptions& o) {
    try {
        return prune_package_impl(o);
    } catch (const c10::Error& e) {
        return internal_error("libtorch: {}", models::torch_error_message(e));
    } catch (const Error& e) {
        return e.status();
    }
}

}  // namespace strato::compress
