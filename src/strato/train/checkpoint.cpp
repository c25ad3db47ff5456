#include "strato/train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
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

json state_to_json(const TrainState& s) {
    return {{"step", s.step},
            {"epoch", s.epoch},
            {"next_batch", s.next_batch},
            {"batch_size", s.batch_size},
            {"metrics_lines", s.metrics_lines},
            {"best_acc", s.best_acc},
            {"best_step", s.best_step},
            {"bad_evals", s.bad_evals},
            {"elapsed_s", s.elapsed_s},
            {"epoch_loss_sum", s.epoch_loss_sum},
            {"epoch_correct", s.epoch_correct},
            {"epoch_seen", s.epoch_seen},
            {"window_loss_sum", s.window_loss_sum},
            {"window_correct", s.window_correct},
            {"window_seen", s.window_seen},
            {"loss_scale", s.loss_scale},
            {"loss_scale_clean_steps", s.loss_scale_clean_steps}};
}

Status state_from_json(const json& j, TrainState& s) {
    // Counts are whole numbers >= 0 (best_step >= -1): 1e300 read as an int64 was undefined
    // behaviour and printed "-9223372036854775689 steps".
    for (const char* k : {"step", "epoch", "next_batch", "batch_size", "metrics_lines", "best_step", "bad_evals", "epoch_correct",
                          "epoch_seen", "window_correct", "window_seen", "loss_scale_clean_steps"}) {
        if (!j.is_object() || !j.contains(k)) continue;  // (required ones are named below)
        const json& v = j[k];
        if (!v.is_number_integer() || v.get<int64_t>() < (std::string_view(k) == "best_step" ? -1 : 0))
            return data_loss("state.json: {} must be a whole number >= {}, got {}", k,
                             std::string_view(k) == "best_step" ? -1 : 0, json_text(v));
    }
    try {
        s.step = j.at("step").get<int64_t>();
        s.epoch = j.at("epoch").get<int64_t>();
        s.next_batch = j.at("next_batch").get<int64_t>();
        s.batch_size = j.value("batch_size", int64_t{0});
        s.metrics_lines = j.at("metrics_lines").get<int64_t>();
        s.best_acc = j.at("best_acc").get<double>();
        s.best_step = j.at("best_step").get<int64_t>();
        s.bad_evals = j.at("bad_evals").get<int64_t>();
        s.elapsed_s = j.at("elapsed_s").get<double>();
        s.epoch_loss_sum = j.at("epoch_loss_sum").get<double>();
        s.epoch_correct = j.at("epoch_correct").get<int64_t>();
        s.epoch_seen = j.at("epoch_seen").get<int64_t>();
        // (absent in checkpoints from before they were kept: the window starts at the resume)
        s.window_loss_sum = j.value("window_loss_sum", 0.0);
        s.window_correct = j.value("window_correct", int64_t{0});
        s.window_seen = j.value("window_seen", int64_t{0});
        s.loss_scale = j.value("loss_scale", 0.0);  // absent in checkpoints of fp32/bf16 runs before fp16
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

Status CheckpointStore::save(const TrainState& state, torch::nn::Module& model, torch::optim::Optimizer& optim) {
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(dir_));
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
                     {"optimizer", optimizer_kind(optim)}, {"world_size", world_size_}, {"files", json::object()}};
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

Status CheckpointStore::verify_and_load(const std::string& name, torch::nn::Module& model,
                                        torch::optim::Optimizer& optim, TrainState& state) {
    const stdfs::path d = stdfs::path(dir_) / name;
    STRATO_ASSIGN_OR_RETURN(std::string mtext, fs::read_file(d / "manifest.json"));
    json manifest = parse_json_bounded(mtext);
    if (manifest.is_discarded() || !manifest.contains("files")) return data_loss("manifest.json is not valid");
    std::map<std::string, std::string> bytes;
    for (const char* f : {"model.pt", "optim.pt", "rng.pt", "state.json"}) {
        if (!manifest["files"].is_object() || !manifest["files"].contains(f) || !manifest["files"][f].is_object()) {
            return data_loss("manifest.json lists no {}", f);
        }
        STRATO_ASSIGN_OR_RETURN(std::string b, fs::read_file(d / f));
        const json& sha = manifest["files"][f].contains("sha256") ? manifest["files"][f]["sha256"] : json();
        const std::string want = sha.is_string() ? sha.get<std::string>() : "";
        if (fs::sha256_hex(b) != want) return data_loss("{} does not match its checksum (truncated or corrupt)", f);
        bytes[f] = std::move(b);
    }
    json sj = parse_json_bounded(bytes["state.json"]);
    if (sj.is_discarded()) return data_loss("state.json is not valid JSON");
    STRATO_RETURN_IF_ERROR(state_from_json(sj, state));
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

Result<std::optional<TrainState>> CheckpointStore::load_latest(torch::nn::Module& model,
                                                                torch::optim::Optimizer& optim) {
    // Newest first. `latest` names the newest too, but a kill between renaming a checkpoint into
    // place and updating `latest` leaves a complete newer one that `latest` does not name yet.
    const std::vector<std::string> candidates = list_desc();
    if (candidates.empty()) return std::optional<TrainState>();
    std::string failures;
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
    }
    return data_loss("no usable checkpoint in {} (every one failed verification):{}\nhint: start over with --overwrite",
                     dir_, failures);
}

}  // namespace strato::train
