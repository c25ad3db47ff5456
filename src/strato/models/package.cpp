#include "strato/models/package.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/parse.h"
#include "strato/core/signals.h"
#ifdef STRATO_WITH_INT8
#include "strato/models/quantized.h"
#endif

namespace strato::models {
namespace stdfs = std::filesystem;
using nlohmann::json;

std::string archive_to_bytes(const std::function<void(torch::serialize::OutputArchive&)>& fill) {
    torch::serialize::OutputArchive archive;
    fill(archive);
    std::ostringstream os;
    archive.save_to(os);
    return os.str();
}

Status archive_from_bytes(const std::string& bytes, const std::string& what,
                          const std::function<void(torch::serialize::InputArchive&)>& read) {
    torch::serialize::InputArchive archive;
    try {
        std::istringstream is(bytes);
        archive.load_from(is);
    } catch (const c10::Error& e) {
        return data_loss("{}: cannot load: {}", what, torch_error_message(e));
    }
    try {
        read(archive);
    } catch (const c10::Error& e) {
        // The archive is whole but holds other modules or tensors than the network has: weights of
        // another architecture (a resume after changing model.arch), not damage.
        const std::string msg = torch_error_message(e);
        if (msg.find("No such serialized") != std::string::npos)
            return invalid_argument("{}: {} ({})", what, kOtherModelConfig, msg);
        return data_loss("{}: cannot load: {}", what, msg);
    }
    return Status::ok();
}

std::string module_to_bytes(torch::nn::Module& m) {
    return archive_to_bytes([&](auto& a) { m.save(a); });
}

Status module_from_bytes(torch::nn::Module& m, const std::string& bytes, const std::string& what) {
    // Module::load takes on whatever shapes the archive holds (its read() is a set_), so a
    // network built from another config would silently become the saved one while the run
    // records the new config. Every tensor must keep the shape the network was built with.
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : m.named_parameters()) shapes[p.key()] = p.value().sizes().vec();
    for (const auto& b : m.named_buffers()) shapes[b.key()] = b.value().sizes().vec();
    STRATO_RETURN_IF_ERROR(archive_from_bytes(bytes, what, [&](auto& a) { m.load(a); }));
    auto check = [&](const std::string& name, const torch::Tensor& t) -> Status {
        const auto& want = shapes[name];
        if (t.sizes().vec() != want)
            return invalid_argument("{}: '{}' is {} in the file but {} in the network the model config describes ({})",
                                    what, name, fmt::format("[{}]", fmt::join(t.sizes(), ", ")),
                                    fmt::format("[{}]", fmt::join(want, ", ")), kOtherModelConfig);
        // Another data type in the file (float64 weights re-saved by hand) keeps the tensor's type
        // but takes the file's storage: its bytes would be read as garbage. A storage of another
        // size than the tensor's values is the sign.
        const auto need = static_cast<size_t>(t.numel()) * t.element_size();
        if (t.has_storage() && (t.storage_offset() != 0 || t.storage().nbytes() != need))
            return invalid_argument("{}: '{}' holds {} bytes in the file for {} {} values ({} bytes): saved with another "
                                    "data type",
                                    what, name, t.storage().nbytes(), t.numel(), c10::toString(t.scalar_type()), need);
        return Status::ok();
    };
    for (const auto& p : m.named_parameters()) STRATO_RETURN_IF_ERROR(check(p.key(), p.value()));
    for (const auto& b : m.named_buffers()) STRATO_RETURN_IF_ERROR(check(b.key(), b.value()));
    return Status::ok();
}

namespace {

json signature(const PackageInfo& info) {
    const auto& s = info.input_shape;
    return {{"inputs", json::array({{{"name", "input"}, {"datatype", "FP32"}, {"shape", {-1, s.channels, s.height, s.width}}}})},
            {"outputs", json::array({{{"name", "logits"}, {"datatype", "FP32"}, {"shape", {-1, info.num_classes}}}})}};
}

Status write_file(const stdfs::path& p, std::string_view data) { return fs::atomic_write(p, data); }

template <typename T>
Result<T> get(const json& j, const char* key, const std::string& where) {
    if (!j.contains(key)) return invalid_argument("{}: missing key /{}", where, key);
    // json's get<int64_t>() takes 10.5 as 10: a count or a dimension must be written as an integer.
    auto not_integer = [](const json& v) { return !v.is_number_integer(); };
    if constexpr (std::is_integral_v<T>) {
        if (not_integer(j.at(key))) return invalid_argument("{}: /{} must be an integer, got {}", where, key, j.at(key).dump());
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
        if (j.at(key).is_array() && std::any_of(j.at(key).begin(), j.at(key).end(), not_integer))
            return invalid_argument("{}: /{} must hold integers, got {}", where, key, j.at(key).dump());
    }
    try {
        return j.at(key).get<T>();
    } catch (const json::exception&) {
        return invalid_argument("{}: /{} has the wrong type ({})", where, key, j.at(key).type_name());
    }
}

}  // namespace

namespace {

/// A leftover of a save killed half way: a staging copy "<base>.tmp.<pid>" or an old package set
/// aside ".old-<base>.<pid>" whose process is gone (or is this one). Anything else next to the
/// package -- a user's "model.old.2024-11", another live process's staging copy -- is not.
bool stale_leftover(const std::string& name, const std::string& base) {
    for (const std::string& prefix : {base + ".tmp.", ".old-" + base + "."}) {
        if (name.rfind(prefix, 0) != 0) continue;
        auto pid = parse_int(std::string_view(name).substr(prefix.size()), 1, std::numeric_limits<pid_t>::max());
        if (!pid) return false;
        return *pid == ::getpid() || signals::process_gone(*pid);
    }
    return false;
}

// "out/" and "out/." are the directory out (a shell's completion adds the slash); nothing else
// is rewritten ("a/b/.." stays, and is refused: lexically it is not where links lead).
stdfs::path package_path(const std::string& dir) {
    std::string p = dir;
    for (;;) {
        if (p.size() > 1 && p.back() == '/') p.pop_back();
        else if (p.size() > 2 && p.ends_with("/.")) p.resize(p.size() - 2);
        else break;
    }
    return p;
}

}  // namespace

Status check_package_destination(const std::string& dir) {
    const stdfs::path final_dir = package_path(dir);
    const std::string base = final_dir.filename().string();
    if (base.empty() || base == "." || base == "..")
        return invalid_argument("{}: a package is saved as a directory of its own; name it (e.g. {}/model)", dir, dir);
    // A package replaces an earlier package, never another directory (a run, a user's folder).
    std::error_code ec;
    // Found before the work that precedes a save (calibration, evaluation), not after it: a dangling
    // link where the package goes, or a file where a folder above it must be.
    if (!stdfs::exists(final_dir, ec) && stdfs::is_symlink(stdfs::symlink_status(final_dir, ec)))
        return invalid_argument("{} is a symbolic link to {}, which does not exist; not saving a package through it", dir,
                                stdfs::read_symlink(final_dir, ec).string());
    for (stdfs::path up = final_dir.parent_path(); !up.empty(); up = up.parent_path()) {
        if (stdfs::exists(up, ec)) {
            if (!stdfs::is_directory(up, ec))
                return invalid_argument("{}: {} is a file, not a directory; the package cannot be saved below it", dir,
                                        up.string());
            break;
        }
        if (stdfs::is_symlink(stdfs::symlink_status(up, ec)))
            return invalid_argument("{}: {} is a symbolic link to nothing; the package cannot be saved below it", dir,
                                    up.string());
        if (up == up.parent_path()) break;
    }
    if (stdfs::exists(final_dir, ec)) {
        if (!stdfs::is_directory(final_dir, ec))
            return invalid_argument("{} exists and is not a directory; not replacing it with a model package", dir);
        if (!stdfs::is_empty(final_dir, ec) && !stdfs::exists(final_dir / kPackageManifest, ec))
            return invalid_argument("{} exists and is not a model package (no {}); not replacing it -- choose another "
                                    "directory or remove it",
                                    dir, kPackageManifest);
    }
    return Status::ok();
}

namespace {

/// Writes the package's files into the staging directory `tmp`.
Status stage_package(const stdfs::path& tmp, const PackageInfo& info, NetImpl& net) {
    std::string weights = module_to_bytes(net);
    std::string metrics = json_text(info.metrics, 2) + "\n";
    STRATO_RETURN_IF_ERROR(write_file(tmp / kPackageWeights, weights));
    STRATO_RETURN_IF_ERROR(write_file(tmp / "metrics.json", metrics));

    ModelConfig model = info.model;
    json manifest = {
        {"format", "strato-model"},
        {"format_version", 1},
        {"created_by", "strato 0.1.0"},
        {"model", json::parse(config::to_json([&](config::Visitor& v) { model.visit(v); }))},
        {"num_classes", info.num_classes},
        {"parameters", parameter_count(net)},
        {"precision", info.quantized() ? "int8" : "fp32"},
        {"labels", info.labels},
        {"preprocessing",
         {{"pixels", "uint8, scaled to [0, 1]"}, {"mean", info.mean}, {"std", info.std}, {"layout", "NCHW"}}},
        {"files",
         {{kPackageWeights, {{"sha256", fs::sha256_hex(weights)}, {"bytes", weights.size()}}},
          {"metrics.json", {{"sha256", fs::sha256_hex(metrics)}, {"bytes", metrics.size()}}}}},
    };
    if (info.quantized()) manifest["quantization"] = info.quantization;
    if (!info.features.empty()) {
        manifest["features"] = info.features;
        // (a table's values are no pixels: each column is normalised by its mean and std)
        manifest["preprocessing"].erase("pixels");
        manifest["preprocessing"]["values"] = "the feature columns as read, in /features order, as [F, 1, 1]";
    }
    if (!info.test_transforms.empty()) manifest["preprocessing"]["transforms"] = info.test_transforms;
    manifest.update(signature(info));
    STRATO_RETURN_IF_ERROR(write_file(tmp / kPackageManifest, json_text(manifest, 2) + "\n"));
    return Status::ok();
}

}  // namespace

Status save_package(const std::string& dir, const PackageInfo& info, NetImpl& net) {
    STRATO_RETURN_IF_ERROR(check_package_destination(dir));
    stdfs::path final_dir = package_path(dir);
    std::error_code ec;
    // A link to a package (models/current -> v3) is saved through, as a file is written through
    // one: the directory it points to is replaced and the link kept. Renamed onto the link
    // itself, the new package failed after all the work ("cannot move ...: Not a directory").
    // (check_package_destination refused a dangling link; the target's checks follow the link.)
    if (stdfs::is_symlink(stdfs::symlink_status(final_dir, ec))) {
        stdfs::path target = stdfs::canonical(final_dir, ec);
        if (ec) return io_error("{}: cannot resolve the symbolic link: {}", dir, ec.message());
        final_dir = target;
    }
    stdfs::path parent = final_dir.parent_path().empty() ? stdfs::path(".") : final_dir.parent_path();
    const std::string base = final_dir.filename().string();
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(parent));
    stdfs::path tmp = parent / (base + ".tmp." + std::to_string(::getpid()));
    for (const auto& e : stdfs::directory_iterator(parent, ec))
        if (stale_leftover(e.path().filename().string(), base)) (void)fs::remove_tree(e.path());
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(tmp));
    // A write that fails (disk full, quota) takes the staging copy with it: nothing half-written
    // is left next to the package.
    if (Status st = stage_package(tmp, info, net); !st.is_ok()) {
        (void)fs::remove_tree(tmp);
        return st;
    }

    // Swapped into place: a crash at any instant leaves the old package or the new one.
    if (Status st = fs::replace_dir(tmp, final_dir); !st.is_ok()) {
        // The old package still in place (a symlink at `dir`, say): the staging copy goes. If the
        // swap got half way (the old one moved aside), the new package may be the only copy: kept.
        if (std::error_code exists_ec; stdfs::exists(final_dir, exists_ec)) {
            (void)fs::remove_tree(tmp);
            return st;
        }
        return st.with_context(fmt::format("the new package is kept at {}", tmp.string()));
    }
    return Status::ok();
}

Result<LoadedPackage> load_package(const std::string& dir) {
    std::error_code ec;
    if (!stdfs::is_directory(dir, ec)) {
        // A package is its directory, not one of its files (torch.load takes the weights file;
        // here the manifest beside it says what network they fill).
        if (stdfs::exists(dir, ec)) {
            const stdfs::path p(dir);
            const std::string name = p.filename().string();
            if (name == kPackageManifest || name == kPackageWeights || name == "metrics.json" || name == "model.onnx")
                return not_found("model package {} is a file of a package; give the package's directory: {}", dir,
                                        p.parent_path().empty() ? std::string(".") : p.parent_path().string());
            return not_found("model package {} is a file; expected a package directory (holding {} and {})", dir,
                                    kPackageManifest, kPackageWeights);
        }
        return not_found("model package {} does not exist", dir);
    }
    const std::string manifest_path = (stdfs::path(dir) / kPackageManifest).string();
    auto text = fs::read_file(manifest_path);
    if (!text) {
        // A run directory (runs/NAME) holds its package in model/.
        const stdfs::path inner = stdfs::path(dir) / "model";
        if (stdfs::exists(inner / kPackageManifest, ec))
            return not_found("{} is not a model package: {}; a run directory? its package is {}", dir,
                             text.status().message(), inner.string());
        return not_found("{} is not a model package: {}", dir, text.status().message());
    }
    STRATO_ASSIGN_OR_RETURN(json m, parse_json_named(*text, manifest_path, StatusCode::kDataLoss));
    if (!m.is_object()) return data_loss("{}: expected a JSON object, got {}", manifest_path, m.type_name());
    STRATO_ASSIGN_OR_RETURN(std::string format, get<std::string>(m, "format", manifest_path));
    if (format != "strato-model") return invalid_argument("{}: /format is \"{}\", expected \"strato-model\"", manifest_path, format);
    if (m.contains("format_version") && m["format_version"] != 1) {
        const json& v = m["format_version"];
        const bool newer = v.is_number() && v.get<double>() > 1;  // not for 0, -1 or "1"
        return invalid_argument("{}: /format_version is {}, and this strato reads version 1{}", manifest_path,
                                json_text(v), newer ? " (a newer strato wrote it?)" : "");
    }

    LoadedPackage out;
    PackageInfo& info = out.info;
    if (!m.contains("model") || !m["model"].is_object()) return invalid_argument("{}: /model must be an object", manifest_path);
    STRATO_RETURN_IF_ERROR(
        config::bind_json(json_text(m["model"]), manifest_path + " /model", [&](config::Visitor& v) { info.model.visit(v); }));
    STRATO_ASSIGN_OR_RETURN(info.num_classes, get<int64_t>(m, "num_classes", manifest_path));
    if (info.num_classes < 1 || info.num_classes > 10'000'000)
        return invalid_argument("{}: /num_classes must be in 1..10000000, got {}", manifest_path, info.num_classes);
    STRATO_ASSIGN_OR_RETURN(info.labels, get<std::vector<std::string>>(m, "labels", manifest_path));
    if (!info.labels.empty() && static_cast<int64_t>(info.labels.size()) != info.num_classes)
        return invalid_argument("{}: /labels has {} names for {} classes (/num_classes)", manifest_path,
                                info.labels.size(), info.num_classes);
    if (m.contains("features")) {  // (packages before it have none: not checked)
        STRATO_ASSIGN_OR_RETURN(info.features, get<std::vector<std::string>>(m, "features", manifest_path));
    }
    STRATO_ASSIGN_OR_RETURN(json inputs, get<json>(m, "inputs", manifest_path));
    std::vector<int64_t> shape;
    if (!inputs.is_array() || inputs.empty()) return invalid_argument("{}: /inputs must be a non-empty array", manifest_path);
    STRATO_ASSIGN_OR_RETURN(shape, get<std::vector<int64_t>>(inputs[0], "shape", manifest_path + " /inputs/0"));
    if (shape.size() != 4 || shape[0] != -1 || shape[1] <= 0 || shape[2] <= 0 || shape[3] <= 0) {
        return invalid_argument("{}: /inputs/0/shape must be [-1, C, H, W]", manifest_path);
    }
    // Sides past 2^16 (or 2^24 channels: a CSV's features) are no input shape: their product could
    // wrap around to a plausible size (a hand-edited [-1, 16, 2^60+49, 1] passed as 784 values).
    if (shape[1] > (int64_t{1} << 24) || shape[2] > (int64_t{1} << 16) || shape[3] > (int64_t{1} << 16))
        return invalid_argument("{}: /inputs/0/shape [-1, {}, {}, {}] is no image shape (channels up to 2^24, sides up "
                                "to 65536)",
                                manifest_path, shape[1], shape[2], shape[3]);
    info.input_shape = {shape[1], shape[2], shape[3]};
    if (!info.features.empty() && (static_cast<int64_t>(info.features.size()) != shape[1] || shape[2] != 1 || shape[3] != 1))
        return invalid_argument("{}: /features names {} columns, but the input is {}x{}x{}", manifest_path,
                                info.features.size(), shape[1], shape[2], shape[3]);
    // The signature servers and other tools read (Triton's config, KServe's metadata) must say what
    // the network gives: [-1, num_classes] logits (a hand-edited [-1, 7] was served as the truth).
    if (m.contains("outputs")) {
        const json& outputs = m["outputs"];
        const json want = {-1, info.num_classes};
        if (!outputs.is_array() || outputs.size() != 1 || !outputs[0].is_object() || !outputs[0].contains("shape") ||
            outputs[0]["shape"] != want)
            return invalid_argument("{}: /outputs must be one output of shape [-1, {}] (the logits of /num_classes "
                                    "classes), got {}",
                                    manifest_path, info.num_classes, json_text(outputs));
    }
    if (m.contains("quantization")) {
        if (!m["quantization"].is_object()) return invalid_argument("{}: /quantization must be an object", manifest_path);
        info.quantization = m["quantization"];
    }
    STRATO_ASSIGN_OR_RETURN(json pre, get<json>(m, "preprocessing", manifest_path));
    STRATO_ASSIGN_OR_RETURN(info.mean, get<std::vector<double>>(pre, "mean", manifest_path + " /preprocessing"));
    STRATO_ASSIGN_OR_RETURN(info.std, get<std::vector<double>>(pre, "std", manifest_path + " /preprocessing"));
    if (pre.contains("transforms")) {
        STRATO_ASSIGN_OR_RETURN(info.test_transforms,
                                get<std::vector<std::string>>(pre, "transforms", manifest_path + " /preprocessing"));
    }
    const auto channels = static_cast<size_t>(info.input_shape.channels);
    if (info.mean.size() != channels || info.std.size() != channels)
        return invalid_argument("{}: /preprocessing/mean and /std need {} values (one per input channel), got {} and {}",
                                manifest_path, channels, info.mean.size(), info.std.size());
    for (size_t c = 0; c < channels; ++c)
        if (!std::isfinite(info.mean[c]) || !(info.std[c] > 0 && std::isfinite(info.std[c])))
            return invalid_argument("{}: /preprocessing channel {}: mean {} and std {} (std must be > 0)", manifest_path,
                                    c, info.mean[c], info.std[c]);
    if (m.contains("precision") && m["precision"] != (info.quantized() ? "int8" : "fp32"))
        return invalid_argument("{}: /precision is {} but the package {} /quantization", manifest_path,
                                json_text(m["precision"]), info.quantized() ? "has" : "has no");

    STRATO_ASSIGN_OR_RETURN(json files, get<json>(m, "files", manifest_path));
    if (!files.contains(kPackageWeights)) return invalid_argument("{}: /files lists no {}", manifest_path, kPackageWeights);
    if (!files.is_object()) return invalid_argument("{}: /files must be an object", manifest_path);
    for (const auto& [name, entry] : files.items()) {
        // The package's own files, by plain names: not "../x", "/etc/x" or "sub/x".
        if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
            return invalid_argument("{}: /files/{}: expected the name of a file in the package", manifest_path,
                                    json_text(name));
        const std::string path = (stdfs::path(dir) / name).string();
        STRATO_ASSIGN_OR_RETURN(std::string want, get<std::string>(entry, "sha256", manifest_path + " /files/" + name));
        auto bytes = fs::read_file(path);
        if (!bytes) return data_loss("model package {}: {} is missing ({})", dir, name, bytes.status().message());
        std::string got = fs::sha256_hex(*bytes);
        // Hex digits in either case: sha256sum and hashlib write lowercase, PowerShell's
        // Get-FileHash and many manifests made by hand uppercase.
        std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::tolower(c); });
        if (got != want) {
            return data_loss("model package {}: {} is corrupt (sha256 {}, manifest says {})", dir, name,
                             got.substr(0, 12), want.substr(0, 12));
        }
        if (name == "metrics.json") info.metrics = parse_json_bounded(*bytes);
        if (name == kPackageWeights) {
            // The manifest is not covered by a checksum: a corrupt or hand-edited shape must not
            // build a network of many GB before the weights fail to fit it.
            STRATO_ASSIGN_OR_RETURN(double params, count_parameters(info.model, info.input_shape, info.num_classes));
            if (params > static_cast<double>(bytes->size()))
                return data_loss("model package {}: {} describes a {} of {:.3g} parameters (input {}x{}x{}, {} classes), "
                                 "and {} holds {} bytes, fewer than one per parameter: the manifest does not belong "
                                 "to these weights",
                                 dir, kPackageManifest, info.model.arch, params, info.input_shape.channels,
                                 info.input_shape.height, info.input_shape.width, info.num_classes, name, bytes->size());
            STRATO_ASSIGN_OR_RETURN(out.net, create_model(info.model, info.input_shape, info.num_classes));
            if (info.quantized()) {
#ifdef STRATO_WITH_INT8
                // The float network only gives the graph its shape; the archive holds the int8 net.
                auto q = QuantizedNet::lower(info.model, *out.net);
                if (!q) return Status(q.status().code(), fmt::format("{}: {}", path, q.status().message()));
                STRATO_RETURN_IF_ERROR(module_from_bytes(**q, *bytes, path));
                STRATO_RETURN_IF_ERROR((*q)->prepack().with_context(path));
                out.net = *q;
#else
                return Status(StatusCode::kUnimplemented,
                              fmt::format("model package {}: an int8 package, and this strato was built without INT8 "
                                          "support (-DSTRATO_WITH_INT8=OFF)",
                                          dir));
#endif
            } else {
                STRATO_RETURN_IF_ERROR(module_from_bytes(*out.net, *bytes, path));
            }
        }
    }
    out.net->eval();
    return out;
}

InferenceNet inference_net(LoadedPackage& pkg, bool fuse, bool bf16) {
    InferenceNet out;
#ifndef STRATO_WITH_INT8
    fuse = false;  // the fused lowering runs on oneDNN directly, built with STRATO_WITH_INT8
#endif
    if (fuse && !pkg.info.quantized()) {
#ifdef STRATO_WITH_INT8
        const auto& in = pkg.info.input_shape;
        auto fused = FusedNet::lower(pkg.info.model, *pkg.net, {.input = {in.channels, in.height, in.width}, .bf16 = bf16});
        if (fused) {
            out.net = *fused;
            out.fused = true;
            out.bf16 = bf16;
            return out;
        }
        log::warn("running the eager network{}: {}", bf16 ? " under bf16 autocast" : "", fused.status().message());
#endif
    }
    out.net = pkg.net;
    out.bf16_autocast = bf16;
    out.channels_last = is_convolutional(pkg.info.model);
    if (out.channels_last) to_channels_last(*out.net);
    return out;
}

}  // namespace strato::models
