#include "strato/train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <random>
#include <nlohmann/json.hpp>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/models/package.h"

namespace strato::train {
namespace stdfs = std::filesystem;
using nlohmann::json;

namespace {

// JSON has no NaN or infinity (nlohmann writes null, which then never loaded): such a number is
// written as the string "nan", "inf" or "-inf".
json real_to_json(double v) {
    if (std::isfinite(v)) return v;
    return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

Status real_from_json(const json& j, const char* key, double& out, std::optional<double> fallback = std::nullopt) {
    if (!j.contains(key)) {
        if (fallback) return out = *fallback, Status::ok();
        return data_loss("state.json: no {}", key);
    }
    const json& v = j[key];
    if (v.is_number()) return out = v.get<double>(), Status::ok();
    if (v.is_string() && (v == "nan" || v == "inf" || v == "-inf"))
        return out = v == "nan" ? std::nan("") : v == "inf" ? HUGE_VAL : -HUGE_VAL, Status::ok();
    if (v.is_null())  // what a NaN became before non-finite numbers were written as strings
        return data_loss("state.json: {} is null, a NaN or infinite number: {} (its loss was not a number when this "
                         "checkpoint was saved)",
                         key, kDivergedCheckpoint);
    return data_loss("state.json: {} must be a number, got {}", key, json_text(v));
}

json state_to_json(const TrainState& s) {
    return {{"step", s.step},
            {"epoch", s.epoch},
            {"next_batch", s.next_batch},
            {"batch_size", s.batch_size},
            {"train_samples", s.train_samples},
            {"order_seed", s.order_seed},
            {"order_shuffle", s.order_shuffle},
            {"metrics_lines", s.metrics_lines},
            {"best_acc", real_to_json(s.best_acc)},
            {"best_step", s.best_step},
            {"best_loss", real_to_json(s.best_loss)},
            {"bad_evals", s.bad_evals},
            {"elapsed_s", real_to_json(s.elapsed_s)},
            {"epoch_elapsed_s", real_to_json(s.epoch_elapsed_s)},
            {"epoch_loss_sum", real_to_json(s.epoch_loss_sum)},
            {"epoch_correct", s.epoch_correct},
            {"epoch_seen", s.epoch_seen},
            {"window_loss_sum", real_to_json(s.window_loss_sum)},
            {"window_correct", s.window_correct},
            {"window_seen", s.window_seen},
            {"loss_scale", real_to_json(s.loss_scale)},
            {"loss_scale_clean_steps", s.loss_scale_clean_steps}};
}

Status state_from_json(const json& j, TrainState& s) {
    // Counts are whole numbers >= 0 (best_step >= -1): 1e300 read as an int64 was undefined
    // behaviour and printed "-9223372036854775689 steps".
    for (const char* k : {"step", "epoch", "next_batch", "batch_size", "train_samples", "metrics_lines", "best_step",
                          "bad_evals", "epoch_correct",
                          "epoch_seen", "window_correct", "window_seen", "loss_scale_clean_steps"}) {
        if (!j.is_object() || !j.contains(k)) continue;  // (required ones are named below)
        const json& v = j[k];
        if (!v.is_number_integer() || v.get<int64_t>() < (std::string_view(k) == "best_step" ? -1 : 0))
            return data_loss("state.json: {} must be a whole number >= {}, got {}", k,
                             std::string_view(k) == "best_step" ? -1 : 0, json_text(v));
    }
    // (absent from checkpoints saved before they were kept: -1, not known)
    for (const char* k : {"order_seed", "order_shuffle"}) {
        if (!j.is_object() || !j.contains(k)) continue;
        const json& v = j[k];
        if (!v.is_number_integer() || v.get<int64_t>() < -1 ||
            (std::string_view(k) == "order_shuffle" && v.get<int64_t>() > 1))
            return data_loss("state.json: {} must be {}, got {}", k,
                             std::string_view(k) == "order_shuffle" ? "-1, 0 or 1" : "a whole number >= -1",
                             json_text(v));
    }
    if (!j.is_object()) return data_loss("state.json is not a JSON object");
    STRATO_RETURN_IF_ERROR(real_from_json(j, "best_acc", s.best_acc));
    STRATO_RETURN_IF_ERROR(real_from_json(j, "elapsed_s", s.elapsed_s));
    STRATO_RETURN_IF_ERROR(real_from_json(j, "epoch_loss_sum", s.epoch_loss_sum));
    // (absent in checkpoints from before they were kept: the window starts at the resume)
    STRATO_RETURN_IF_ERROR(real_from_json(j, "window_loss_sum", s.window_loss_sum, 0.0));
    STRATO_RETURN_IF_ERROR(real_from_json(j, "loss_scale", s.loss_scale, 0.0));  // absent before fp16
    STRATO_RETURN_IF_ERROR(real_from_json(j, "best_loss", s.best_loss, std::nan("")));  // absent before it was kept
    STRATO_RETURN_IF_ERROR(real_from_json(j, "epoch_elapsed_s", s.epoch_elapsed_s, std::nan("")));  // (the same)
    try {
        s.step = j.at("step").get<int64_t>();
        s.epoch = j.at("epoch").get<int64_t>();
        s.next_batch = j.at("next_batch").get<int64_t>();
        s.batch_size = j.value("batch_size", int64_t{0});
        s.train_samples = j.value("train_samples", int64_t{0});
        s.order_seed = j.value("order_seed", int64_t{-1});
        s.order_shuffle = j.value("order_shuffle", int64_t{-1});
        s.metrics_lines = j.at("metrics_lines").get<int64_t>();
        s.best_step = j.at("best_step").get<int64_t>();
        s.bad_evals = j.at("bad_evals").get<int64_t>();
        s.epoch_correct = j.at("epoch_correct").get<int64_t>();
        s.epoch_seen = j.at("epoch_seen").get<int64_t>();
        s.window_correct = j.value("window_correct", int64_t{0});
        s.window_seen = j.value("window_seen", int64_t{0});
        s.loss_scale_clean_steps = j.value("loss_scale_clean_steps", int64_t{0});
    } catch (const json::exception& e) {
        return data_loss("state.json: {}", e.what());
    }
    return Status::ok();
}

std::string rng_to_bytes() {
    auto gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor state;
    {
        std::lock_guard<std::mutex> lock(gen.mutex());
        state = gen.get_state();
    }
    return models::archive_to_bytes([&](auto& a) { a.write("cpu", state); });
}

}  // namespace

bool finite_weights(const torch::nn::Module& m) {
    torch::NoGradGuard no_grad;
    auto finite = [](const torch::Tensor& t) {
        return !t.defined() || !t.is_floating_point() || torch::isfinite(t).all().item<bool>();
    };
    for (const auto& p : m.parameters())
        if (!finite(p)) return false;
    for (const auto& b : m.buffers())
        if (!finite(b)) return false;
    return true;
}

namespace {

Result<json> read_manifest(const stdfs::path& d) {
    STRATO_ASSIGN_OR_RETURN(std::string mtext, fs::read_file(d / "manifest.json"));
    json manifest = parse_json_bounded(mtext);
    if (manifest.is_discarded() || !manifest.contains("files") || !manifest["files"].is_object())
        return data_loss("manifest.json is not valid");
    return manifest;
}

// A checkpoint file's bytes, checked against the SHA-256 its manifest records.
Result<std::string> read_checked(const stdfs::path& d, const json& manifest, const char* f) {
    const json& files = manifest["files"];
    if (!files.contains(f) || !files[f].is_object()) return data_loss("manifest.json lists no {}", f);
    STRATO_ASSIGN_OR_RETURN(std::string b, fs::read_file(d / f));
    const json& sha = files[f].contains("sha256") ? files[f]["sha256"] : json();
    const std::string want = sha.is_string() ? sha.get<std::string>() : "";
    if (fs::sha256_hex(b) != want) return data_loss("{} does not match its checksum (truncated or corrupt)", f);
    return b;
}

}  // namespace

CheckpointStore::CheckpointStore(std::string run_dir, CheckpointConfig cfg, int64_t world_size)
    : dir_((stdfs::path(run_dir) / "checkpoints").string()), cfg_(cfg), world_size_(world_size) {}

bool CheckpointStore::any() const { return !list_desc().empty(); }

std::vector<std::string> CheckpointStore::list_desc() const {
    std::vector<std::string> names;
    std::error_code ec;
    if (!stdfs::is_directory(dir_, ec)) return names;
    for (const auto& e : stdfs::directory_iterator(dir_, ec)) {
        std::string n = e.path().filename().string();
        if (e.is_directory() && n.rfind("step-", 0) == 0) names.push_back(n);
    }
    std::sort(names.rbegin(), names.rend());
    return names;
}

namespace {

// The optimizer's kind, recorded with its state: another kind's state does not load (libtorch
// stops on an internal assertion), and a changed optim.name is the user's, not a damaged file.
std::string optimizer_kind(const torch::optim::Optimizer& optim) {
    if (dynamic_cast<const torch::optim::AdamW*>(&optim)) return "adamw";
    if (dynamic_cast<const torch::optim::Adam*>(&optim)) return "adam";
    if (dynamic_cast<const torch::optim::SGD*>(&optim)) return "sgd";
    return "other";
}

constexpr const char* kOtherOptimizer = "saved with another optimizer";

}  // namespace

Result<std::string> CheckpointStore::run_id(bool create) {
    if (!run_id_.empty()) return run_id_;
    const stdfs::path path = stdfs::path(dir_) / "run-id";
    auto text = fs::read_file(path, 4096);
    if (text.is_ok()) {
        run_id_ = *text;
        while (!run_id_.empty() && std::isspace(static_cast<unsigned char>(run_id_.back()))) run_id_.pop_back();
        return run_id_;
    }
    if (text.status().code() != StatusCode::kNotFound) return text.status();
    if (!create) return std::string();  // a run from before ids were kept, or none saved yet
    std::random_device rd;
    std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()));
    run_id_ = fmt::format("{:016x}", gen());
    STRATO_RETURN_IF_ERROR(fs::atomic_write(path, run_id_ + "\n"));
    return run_id_;
}

Status CheckpointStore::save(const TrainState& state, torch::nn::Module& model, torch::optim::Optimizer& optim) {
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(dir_));
    STRATO_ASSIGN_OR_RETURN(const std::string id, run_id(/*create=*/true));
    const std::string name = fmt::format("step-{:09d}", state.step);
    const stdfs::path final_dir = stdfs::path(dir_) / name;
    const stdfs::path tmp = stdfs::path(dir_) / (".tmp-" + name + "." + std::to_string(::getpid()));
    (void)fs::remove_tree(tmp);
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(tmp));

    const std::pair<const char*, std::string> files[] = {
        {"model.pt", models::module_to_bytes(model)},
        {"optim.pt", models::archive_to_bytes([&](auto& a) { optim.save(a); })},
        {"rng.pt", rng_to_bytes()},
        {"state.json", json_text(state_to_json(state), 2)},
    };
    json manifest = {{"format", "strato-checkpoint"}, {"format_version", 1}, {"step", state.step},
                     {"optimizer", optimizer_kind(optim)}, {"world_size", world_size_}, {"run_id", id},
                     {"files", json::object()}};
    for (const auto& [fname, bytes] : files) {
        STRATO_RETURN_IF_ERROR(fs::atomic_write(tmp / fname, bytes));
        manifest["files"][fname] = {{"sha256", fs::sha256_hex(bytes)}, {"bytes", bytes.size()}};
    }
    STRATO_RETURN_IF_ERROR(fs::atomic_write(tmp / "manifest.json", json_text(manifest, 2)));
    // The same step saved again (a resume that ran no step, or a stale one from before a resume)
    // is swapped, so a crash at any instant leaves one complete copy under the step's name.
    STRATO_RETURN_IF_ERROR(fs::replace_dir(tmp, final_dir));
    STRATO_RETURN_IF_ERROR(fs::atomic_write(stdfs::path(dir_) / "latest", name + "\n"));
    prune(state);
    return Status::ok();
}

void CheckpointStore::prune(const TrainState& state) {
    auto names = list_desc();
    const std::string best = fmt::format("step-{:09d}", state.best_step);
    const std::string current = fmt::format("step-{:09d}", state.step);
    // Leftovers of saves that were killed half way.
    std::error_code list_ec;
    for (const auto& e : stdfs::directory_iterator(dir_, list_ec)) {
        const std::string n = e.path().filename().string();
        std::error_code ec;
        if (n.rfind(".tmp-step-", 0) == 0 || n.rfind(".old-step-", 0) == 0) (void)fs::remove_tree(e.path());
    }
    int64_t kept = 0;
    for (const auto& n : names) {
        // Checkpoints newer than the current one are leftovers of a run that was resumed from an
        // older checkpoint; they are stale.
        bool keep = n <= current && kept < cfg_.keep_last;
        if (keep) ++kept;
        if (!keep && !(cfg_.keep_best && n == best && n <= current)) {
            std::error_code ec;
            (void)fs::remove_tree(stdfs::path(dir_) / n);
        }
    }
}

Status CheckpointStore::check_run_id(const json& manifest) {
    if (const json& rid = manifest.contains("run_id") ? manifest["run_id"] : json(); rid.is_string()) {
        STRATO_ASSIGN_OR_RETURN(const std::string mine, run_id(/*create=*/false));
        if (!mine.empty() && rid.get<std::string>() != mine)
            return data_loss("it belongs to another run (run id {}; this run's, in {}/run-id, is {}): copied in from "
                             "elsewhere?",
                             rid.get<std::string>(), dir_, mine);
    }
    return Status::ok();
}

Status CheckpointStore::verify_and_load(const std::string& name, torch::nn::Module& model,
                                        torch::optim::Optimizer& optim, TrainState& state) {
    const stdfs::path d = stdfs::path(dir_) / name;
    STRATO_ASSIGN_OR_RETURN(const json manifest, read_manifest(d));
    std::map<std::string, std::string> bytes;
    for (const char* f : {"model.pt", "optim.pt", "rng.pt", "state.json"}) {
        STRATO_ASSIGN_OR_RETURN(bytes[f], read_checked(d, manifest, f));
    }
    json sj = parse_json_bounded(bytes["state.json"]);
    if (sj.is_discarded()) return data_loss("state.json is not valid JSON");
    STRATO_RETURN_IF_ERROR(state_from_json(sj, state));
    // A checkpoint renamed, or copied in from another run: its weights are not this run's at the
    // step its name says.
    const std::string own = fmt::format("step-{:09d}", state.step);
    if (own != name)
        return data_loss("state.json is step {}'s, not the step in the directory's name (a checkpoint renamed or "
                         "copied from another run?)",
                         state.step);
    if (const json& ms = manifest.contains("step") ? manifest["step"] : json();
        !ms.is_null() && !(ms.is_number_integer() && ms.get<int64_t>() == state.step))
        return data_loss("manifest.json is for step {}, state.json for step {}", json_text(ms), state.step);
    STRATO_RETURN_IF_ERROR(check_run_id(manifest));
    // An elastic restart may bring another number of processes: the position within the epoch
    // counts each process's batches, so the rest of the epoch is another share of the data.
    if (const json& ws = manifest.contains("world_size") ? manifest["world_size"] : json();
        ws.is_number_integer() && ws.get<int64_t>() != world_size_ && state.next_batch > 0)
        log::warn("checkpoint {} was saved by {} process(es), this run has {}: the epoch goes on from batch {} of each "
                  "process, so {} (the learning-rate schedule counts steps as before)",
                  name, ws.get<int64_t>(), world_size_, state.next_batch,
                  ws.get<int64_t>() < world_size_ ? "part of this epoch's samples are skipped"
                                                   : "part of this epoch's samples are trained twice");
    STRATO_RETURN_IF_ERROR(models::module_from_bytes(model, bytes["model.pt"], (d / "model.pt").string()));
    if (!finite_weights(model))
        return data_loss("model.pt holds NaN or infinite weights: {} (its training had blown up when this checkpoint "
                         "was saved)",
                         kDivergedCheckpoint);
    const std::string kind = optimizer_kind(optim);
    const json& saved = manifest.contains("optimizer") ? manifest["optimizer"] : json();
    if (saved.is_string() && saved.get<std::string>() != kind)
        return invalid_argument("{} ({}; this run's optim.name is {})", kOtherOptimizer, saved.get<std::string>(), kind);
    if (Status st = models::archive_from_bytes(bytes["optim.pt"], "optim.pt", [&](auto& a) { optim.load(a); }); !st.is_ok())
        // (a checkpoint from before the kind was recorded: a state that does not fit this optimizer)
        return saved.is_string() ? st
                                 : invalid_argument("{}? optim.pt does not load into this run's {} optimizer: {}",
                                                    kOtherOptimizer, kind, st.message());
    return models::archive_from_bytes(bytes["rng.pt"], "rng.pt", [&](auto& a) {
        torch::Tensor t;
        a.read("cpu", t);
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(t);
    });
}

Status CheckpointStore::load_weights(int64_t step, torch::nn::Module& model) {
    const std::string name = fmt::format("step-{:09d}", step);
    const stdfs::path d = stdfs::path(dir_) / name;
    std::error_code ec;
    if (!stdfs::is_directory(d, ec)) return Status(StatusCode::kNotFound, fmt::format("{} is not kept", d.string()));
    Status st = [&]() -> Status {
        STRATO_ASSIGN_OR_RETURN(const json manifest, read_manifest(d));
        if (const json& ms = manifest.contains("step") ? manifest["step"] : json();
            !(ms.is_number_integer() && ms.get<int64_t>() == step))
            return data_loss("manifest.json is for step {}, not {}", json_text(ms), step);
        STRATO_RETURN_IF_ERROR(check_run_id(manifest));
        STRATO_ASSIGN_OR_RETURN(const std::string bytes, read_checked(d, manifest, "model.pt"));
        STRATO_RETURN_IF_ERROR(models::module_from_bytes(model, bytes, (d / "model.pt").string()));
        if (!finite_weights(model)) return data_loss("model.pt holds NaN or infinite weights");
        return Status::ok();
    }();
    return st.is_ok() ? st : Status(st.code(), fmt::format("{}: {}", d.string(), st.message()));
}

Result<std::optional<TrainState>> CheckpointStore::load_latest(torch::nn::Module& model,
                                                                torch::optim::Optimizer& optim) {
    // Newest first. `latest` names the newest too, but a kill between renaming a checkpoint into
    // place and updating `latest` leaves a complete newer one that `latest` does not name yet.
    const std::vector<std::string> candidates = list_desc();
    if (candidates.empty()) return std::optional<TrainState>();
    std::string failures;
    bool all_diverged = true;
    for (const auto& name : candidates) {
        TrainState state;
        Status st = verify_and_load(name, model, optim, state);
        if (st.code() == StatusCode::kInvalidArgument && st.message().find(models::kOtherModelConfig) != std::string::npos)
            // Intact, but not this network's: an older checkpoint of the run would not be either.
            return invalid_argument("cannot resume from {}/{}: {}\nhint: resume with the model config the run started "
                                    "with, or start over with --overwrite",
                                    dir_, name, st.message());
        if (st.code() == StatusCode::kInvalidArgument && st.message().find(kOtherOptimizer) != std::string::npos)
            return invalid_argument("cannot resume from {}/{}: {}\nhint: resume with the optim.name the run started "
                                    "with, or start over with --overwrite",
                                    dir_, name, st.message());
        if (st.is_ok()) {
            if (!failures.empty()) log::warn("resuming from the older checkpoint {} instead", name);
            return std::optional<TrainState>(state);
        }
        log::warn("checkpoint {}/{} is unusable: {}", dir_, name, st.message());
        failures += fmt::format("\n  {}: {}", name, st.message());
        all_diverged = all_diverged && st.message().find(kDivergedCheckpoint) != std::string::npos;
    }
    if (all_diverged)
        return data_loss("no usable checkpoint in {}: the run had diverged (NaN or infinite loss or weights) when each "
                         "was saved:{}\nhint: start over with --overwrite and a lower optim.lr, or clip gradients "
                         "(train.clip_grad_norm)",
                         dir_, failures);
    return data_loss("no usable checkpoint in {} (every one failed verification):{}\nhint: start over with --overwrite",
                     dir_, failures);
}

}  // namespace strato::train
