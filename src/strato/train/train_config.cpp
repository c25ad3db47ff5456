#include "strato/train/train_config.h"

#include <filesystem>

namespace strato::train {
using config::Range;

void RunConfig::visit(config::Visitor& v) {
    v.field("name", name);
    v.field("dir", dir);
    v.field("seed", seed, Range::non_negative());
    v.field("deterministic", deterministic);
    v.field("threads", threads, Range::between(0, 1024));
    v.field("device", device, {"cpu", "cuda"});
}

void OptimConfig::visit(config::Visitor& v) {
    v.field("name", name, {"sgd", "adamw"});
    // Bounded where libtorch holds them as float (an lr of 1e39 overflowed inside the optimizer).
    v.field("lr", lr, Range{0.0, 1e3, true, false});
    v.field("momentum", momentum, Range::half_open(0, 1));
    v.field("nesterov", nesterov);
    v.field("weight_decay", weight_decay, Range::between(0, 1e3));
    v.field("betas", betas, Range::half_open(0, 1));
    v.field("eps", eps, Range{0.0, 1.0, true, false});
}

void ScheduleConfig::visit(config::Visitor& v) {
    v.field("name", name, {"constant", "step", "cosine", "onecycle"});
    v.field("warmup_epochs", warmup_epochs, Range::non_negative());
    v.field("warmup_start_factor", warmup_start_factor, Range::between(0, 1));
    v.field("step_epochs", step_epochs, Range::positive());
    v.field("gamma", gamma, Range::positive());
    v.field("min_lr", min_lr, Range::between(0, 1e3));
    v.field("pct_start", pct_start, Range::between(0, 1));
    v.field("div_factor", div_factor, Range::at_least(1));
    v.field("final_div_factor", final_div_factor, Range::at_least(1));
}

void LoopConfig::visit(config::Visitor& v) {
    v.field("epochs", epochs, Range::between(1, 100000));
    v.field("max_steps", max_steps, Range::non_negative());
    v.field("stop_after_epochs", stop_after_epochs, Range::non_negative());
    v.field("grad_accum", grad_accum, Range::between(1, 4096));
    v.field("clip_grad_norm", clip_grad_norm, Range::non_negative());
    v.field("label_smoothing", label_smoothing, Range::half_open(0, 1));
    v.field("precision", precision, {"fp32", "bf16", "fp16"});
    v.field("channels_last", channels_last);
    v.field("cuda_graph", cuda_graph);
    v.field("log_every", log_every, Range::at_least(1));
    v.field("monitor_every", monitor_every, Range::non_negative());
    v.field("eval_every", eval_every, Range::at_least(1));
    v.field("early_stopping_patience", early_stopping_patience, Range::non_negative());
    v.field("early_stopping_min_delta", early_stopping_min_delta, Range::non_negative());
    v.field("early_stopping_restore_best", early_stopping_restore_best);
}

void CheckpointConfig::visit(config::Visitor& v) {
    v.field("every_steps", every_steps, Range::non_negative());
    v.field("keep_last", keep_last, Range::between(1, 1000));
    v.field("keep_best", keep_best);
}

void DistConfig::visit(config::Visitor& v) {
    v.field("timeout_s", timeout_s, Range::positive());
    v.field("bucket_mb", bucket_mb, Range::positive());
    v.field("first_bucket_mb", first_bucket_mb, Range::positive());
    v.field("backend", backend, {"auto", "gloo", "nccl"});
}

void TrainConfig::visit(config::Visitor& v) {
    v.section("run", [&] { run.visit(v); });
    v.section("data", [&] { data.visit(v); });
    v.section("model", [&] { model.visit(v); });
    v.section("optim", [&] { optim.visit(v); });
    v.section("schedule", [&] { schedule.visit(v); });
    v.section("train", [&] { train.visit(v); });
    v.section("checkpoint", [&] { checkpoint.visit(v); });
    v.section("dist", [&] { dist.visit(v); });
}

std::string TrainConfig::run_dir() const { return (std::filesystem::path(run.dir) / run.name).string(); }

Status TrainConfig::validate() const {
    if (run.name.empty() || run.name.find('/') != std::string::npos || run.name == "." || run.name == "..") {
        return invalid_argument("run.name: expected a plain directory name, got \"{}\"", run.name);
    }
    if (run.dir.empty())  // (it failed at the run's start as "cannot create directory : Invalid argument")
        return invalid_argument("run.dir: expected the directory that holds run directories, got \"\" (\".\" is the "
                                "current directory)");
    if (train.precision == "fp16" && run.device != "cuda")
        return invalid_argument("train.precision = \"fp16\" needs run.device = \"cuda\" (fp16 autocast with loss scaling is "
                                "for GPUs); on CPU use \"bf16\", which needs no loss scaling");
    if (train.cuda_graph && run.device != "cuda")
        return invalid_argument("train.cuda_graph = true needs run.device = \"cuda\" (CUDA graphs replay GPU work)");
    if (train.cuda_graph && train.grad_accum > 1)
        return invalid_argument("train.cuda_graph = true needs train.grad_accum = 1 (a graph replays one whole step's "
                                "forward and backward), got {}",
                                train.grad_accum);
    if (dist.backend == "nccl" && run.device != "cuda")
        return invalid_argument("dist.backend = \"nccl\" needs run.device = \"cuda\" (NCCL reduces GPU tensors); on CPU "
                                "use \"gloo\" or \"auto\"");
    if (optim.betas.size() != 2) return invalid_argument("optim.betas: expected 2 values, got {}", optim.betas.size());
    if (data.reads_image_files() && data.image_size <= 0 &&
        (data.train_transforms.empty() || data.test_transforms.empty())) {
        return invalid_argument("data.image_size: required (> 0) for {} datasets unless data.train.transforms and "
                                "data.test.transforms both end at a fixed size",
                                data.dataset);
    }
    return Status::ok();
}

Result<TrainConfig> load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
    STRATO_ASSIGN_OR_RETURN(TrainConfig cfg, config::load<TrainConfig>(path, overrides));
    STRATO_RETURN_IF_ERROR(cfg.validate());
    return cfg;
}

}  // namespace strato::train
