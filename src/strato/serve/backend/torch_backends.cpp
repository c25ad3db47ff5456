#include "strato/serve/backend/torch_backends.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <dlfcn.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "strato/core/cgroup.h"
#include "strato/core/fs.h"
#include "strato/core/json_depth.h"
#include "strato/models/package.h"
#include "strato/models/torch_compat.h"
#include "strato/serve/backend/backend.h"

namespace strato::serve {
namespace {

namespace stdfs = std::filesystem;

Result<c10::ScalarType> to_scalar(DataType t) {
    switch (t) {
        case DataType::kBool: return c10::ScalarType::Bool;
        case DataType::kUint8: return c10::ScalarType::Byte;
        case DataType::kInt8: return c10::ScalarType::Char;
        case DataType::kInt16: return c10::ScalarType::Short;
        case DataType::kInt32: return c10::ScalarType::Int;
        case DataType::kInt64: return c10::ScalarType::Long;
        case DataType::kFp16: return c10::ScalarType::Half;
        case DataType::kFp32: return c10::ScalarType::Float;
        case DataType::kFp64: return c10::ScalarType::Double;
        case DataType::kBf16: return c10::ScalarType::BFloat16;
        default: return Status{StatusCode::kUnimplemented, fmt::format("datatype {} has no libtorch equivalent", datatype_name(t))};
    }
}

torch::Tensor as_tensor(const Tensor& t, c10::ScalarType st) {
    // The request buffer outlives execute(), so no copy is needed.
    return torch::from_blob(const_cast<char*>(t.data.data()), t.shape, torch::TensorOptions().dtype(st));
}

torch::Device torch_device(Device d) { return d.is_gpu() ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.gpu)) : torch::kCPU; }

/// On a GPU, makes one execution's copies and kernels run on a stream of their own from libtorch's
/// pool (round robin), as Triton gives each instance a stream: executions on one GPU overlap
/// instead of queueing on the default stream. The device-to-host copy of the outputs waits for
/// that stream. Nothing on the CPU. Through c10's device-generic interface, so the CPU build compiles it.
class ExecutionStream {
public:
    explicit ExecutionStream(const torch::Device& d) {
        if (!d.is_cuda()) return;
        try {
            guard_.emplace(c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d));
        } catch (const c10::Error&) {  // a libtorch without a stream pool: the default stream, in order
        }
    }

private:
    std::optional<c10::StreamGuard> guard_;
};

/// Waits for what loading put on `d`'s default stream (weights copied over), which the pool's
/// streams do not wait for by themselves: a device-to-host copy there returns when it is done.
void wait_for_loading(const torch::Device& d) {
    if (d.is_cuda()) (void)torch::zeros({1}, torch::TensorOptions().device(d)).to(torch::kCPU);
}

/// Frees the calling thread's OpenMP worker pool, which its first parallel region started and which
/// otherwise lives as long as the thread: for a loading thread after the warm-up run, which will not
/// run the model again (see Model::intra_op_threads). OpenMP 5's omp_pause_resource, looked up in
/// the process so that the runtime freed is the one libtorch and oneDNN run on.
void release_openmp_pool() {
    using Pause = int (*)(int kind, int device);
    using Device = int (*)();
    static const auto pause = reinterpret_cast<Pause>(dlsym(RTLD_DEFAULT, "omp_pause_resource"));
    static const auto host = reinterpret_cast<Device>(dlsym(RTLD_DEFAULT, "omp_get_initial_device"));
    if (pause && host) (void)pause(/*omp_pause_soft=*/1, host());
}

/// Model::intra_op_threads of a copy on `d`: libtorch's intra-op threads on the CPU; a GPU copy's
/// host side runs on the calling thread.
int execution_threads(Device d) { return d.is_gpu() ? 1 : at::get_num_threads(); }

Result<Tensor> from_tensor(torch::Tensor x, const TensorSpec& spec) {
    STRATO_ASSIGN_OR_RETURN(c10::ScalarType st, to_scalar(spec.dtype));
    x = x.to(torch::kCPU, st).contiguous();
    Tensor out;
    out.name = spec.name;
    out.dtype = spec.dtype;
    out.shape.assign(x.sizes().begin(), x.sizes().end());
    out.data.assign(static_cast<const char*>(x.data_ptr()), x.numel() * x.element_size());
    return out;
}

int64_t parameter_bytes(const std::vector<torch::Tensor>& ps) {
    int64_t n = 0;
    for (const auto& p : ps) n += p.numel() * static_cast<int64_t>(p.element_size());
    return n;
}

std::string model_file(const ModelConfig& c, const std::string& version_dir, const char* fallback) {
    return (stdfs::path(version_dir) / (c.default_model_filename.empty() ? fallback : c.default_model_filename)).string();
}

// ---- strato packages ----

class PackageModel : public Model {
public:
    /// `precision`: kFloat, kBFloat16 or kHalf (GPU). `batched`: the config's max_batch_size > 0 (else
    /// a request is one image, [C,H,W], and the outputs are [classes]).
    PackageModel(models::LoadedPackage pkg, bool uint8_input, bool normalize, bool fuse, Device device, at::ScalarType precision,
                 bool batched)
        : pkg_(std::move(pkg)), uint8_(uint8_input), batched_(batched), device_(torch_device(device)), autocast_(precision) {
        // On the CPU the fused graph runs on oneDNN in FP32 or bf16; a GPU copy, fp16, or a CPU
        // without bf16 kernels get the eager network, channels-last, under autocast.
        const bool bf16 = precision == at::kBFloat16;
        run_ = models::inference_net(pkg_, fuse && !device.is_gpu() && (precision == at::kFloat || bf16), bf16);
        if (bf16 && !run_.bf16_autocast) autocast_ = at::kFloat;  // the graph is bf16 itself
        if (device.is_gpu()) run_.net->to(device_);
        int64_t c = pkg_.info.input_shape.channels;
        std::vector<float> mean(c, 0.f), inv_std(c, 1.f);
        for (int64_t i = 0; i < c; ++i) {
            if (normalize && i < static_cast<int64_t>(pkg_.info.mean.size())) mean[i] = static_cast<float>(pkg_.info.mean[i]);
            if (normalize && i < static_cast<int64_t>(pkg_.info.std.size()) && pkg_.info.std[i] != 0)
                inv_std[i] = static_cast<float>(1.0 / pkg_.info.std[i]);
        }
        mean_ = torch::tensor(mean).view({1, c, 1, 1}).to(device_);
        inv_std_ = torch::tensor(inv_std).view({1, c, 1, 1}).to(device_);
        bytes_ = parameter_bytes(run_.net->parameters());
        threads_ = execution_threads(device);
        wait_for_loading(device_);
    }

    Status execute(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) override {
        c10::InferenceMode guard;
        ExecutionStream stream(device_);
        const Tensor& in = inputs.at(0);
        // (a config may call the input optional; a model that does not batch then sees requests without it)
        if (in.shape.empty()) return invalid_argument("a strato package needs its input in every request");
        torch::Tensor x = as_tensor(in, uint8_ ? torch::kByte : torch::kFloat);
        if (!batched_) x = x.unsqueeze(0);  // x: [C,H,W] -> [1,C,H,W]
        if (device_.is_cuda()) x = x.to(device_);  // one copy of the batch; the rest runs there
        if (uint8_) x = x.to(torch::kFloat).div_(255.f);
        // (x - mean) / std in one pass into a fresh (channels-last for CNNs) buffer.
        auto fmt = run_.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
        torch::Tensor y = torch::empty(x.sizes(), x.options().dtype(torch::kFloat).memory_format(fmt));
        torch::sub_out(y, x, mean_).mul_(inv_std_);
        torch::Tensor logits;
        {
            compat::AutocastGuard cast(device_.type(), autocast_, autocast_ != at::kFloat);
            logits = run_.net->forward(y);
        }
        logits = logits.to(torch::kFloat);
        torch::Tensor probabilities = torch::softmax(logits, 1);
        if (!batched_) {  // [1,classes] -> [classes], the shape the config gives a model that does not batch
            logits = logits.squeeze(0);
            probabilities = probabilities.squeeze(0);
        }
        TensorSpec ls{"logits", DataType::kFp32, {}, false, ""};
        TensorSpec ps{"probabilities", DataType::kFp32, {}, false, ""};
        STRATO_ASSIGN_OR_RETURN(Tensor l, from_tensor(logits, ls));
        STRATO_ASSIGN_OR_RETURN(Tensor p, from_tensor(probabilities, ps));
        outputs->push_back(std::move(l));
        outputs->push_back(std::move(p));
        return Status::ok();
    }
    std::vector<std::string> labels() const override { return pkg_.info.labels; }
    int64_t memory_bytes() const override { return bytes_; }
    int intra_op_threads() const override { return threads_; }
    std::string describe() const override {
        const char* how = pkg_.info.quantized() ? "INT8"
                          : run_.fused          ? (run_.bf16 ? "oneDNN graph, bf16" : "oneDNN graph, fp32")
                          : autocast_ == at::kBFloat16 ? "eager, bf16 autocast"
                          : autocast_ == at::kHalf     ? "eager, fp16 autocast"
                                                       : "eager, fp32";
        return fmt::format("{}, {} thread{}", how, threads_, threads_ == 1 ? "" : "s");
    }

private:
    models::LoadedPackage pkg_;
    models::InferenceNet run_;
    bool uint8_;
    bool batched_;
    torch::Device device_;
    at::ScalarType autocast_;
    torch::Tensor mean_, inv_std_;
    int64_t bytes_ = 0;
    int threads_ = 1;
};

Status package_autocomplete(ModelConfig* c, const std::string& version_dir) {
    std::string manifest = (stdfs::path(version_dir) / models::kPackageManifest).string();
    auto text = fs::read_file(manifest);
    if (!text) return text.status();
    auto j = parse_json_bounded(*text);
    if (j.is_discarded() || !j.is_object()) return data_loss("{}: not a JSON object", manifest);
    auto shape = j.value("/inputs/0/shape"_json_pointer, nlohmann::json::array());
    auto out_shape = j.value("/outputs/0/shape"_json_pointer, nlohmann::json::array());
    auto ints = [](const nlohmann::json& a, size_t from) {
        for (size_t i = from; i < a.size(); ++i)
            if (!a[i].is_number_integer() || a[i].get<int64_t>() < 1) return false;
        return true;
    };
    if (!shape.is_array() || !out_shape.is_array() || shape.size() != 4 || out_shape.size() != 2 || !ints(shape, 1) ||
        !ints(out_shape, 1))
        return data_loss("{}: /inputs and /outputs do not describe an image classifier ([-1,C,H,W] -> [-1,classes])", manifest);
    bool filled = false;
    if (c->inputs.empty()) {
        c->inputs.push_back({"input", DataType::kFp32, {shape[1].get<int64_t>(), shape[2].get<int64_t>(), shape[3].get<int64_t>()}, false, ""});
        filled = true;
    }
    if (c->outputs.empty()) {
        int64_t k = out_shape[1].get<int64_t>();
        c->outputs.push_back({"logits", DataType::kFp32, {k}, false, ""});
        c->outputs.push_back({"probabilities", DataType::kFp32, {k}, false, ""});
    }
    // An INT8 package runs on oneDNN: KIND_AUTO (and no instance_group) keeps it on the CPU.
    if (j.contains("quantization")) {
        if (c->instance_group.empty()) c->instance_group.push_back({});
        for (auto& g : c->instance_group)
            if (g.kind == "KIND_AUTO") g.kind = "KIND_CPU";
    }
    if (filled && c->max_batch_size == 0) {
        c->max_batch_size = 64;
        if (!c->dynamic_batching) c->dynamic_batching = DynamicBatching{};
    }
    return Status::ok();
}

Result<std::shared_ptr<Model>> package_load(const ModelConfig& c, const std::string& version_dir, Device device) {
    if (c.inputs.size() != 1 || (c.inputs[0].dtype != DataType::kFp32 && c.inputs[0].dtype != DataType::kUint8))
        return invalid_argument("a strato package takes one input of TYPE_FP32 (pixels in [0,1]) or TYPE_UINT8 (0..255)");
    for (size_t i = 0; i < c.outputs.size(); ++i) {
        static const char* kNames[] = {"logits", "probabilities"};
        if (i >= 2 || c.outputs[i].name != kNames[i] || c.outputs[i].dtype != DataType::kFp32)
            return invalid_argument("a strato package has the outputs 'logits' and 'probabilities' (TYPE_FP32), in that order");
    }
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage pkg, models::load_package(version_dir));
    if (pkg.info.quantized() && device.is_gpu())
        return Status{StatusCode::kUnimplemented,
                fmt::format("{}: an INT8 package runs on the CPU (oneDNN); serve it with instance_group kind KIND_CPU, or serve "
                            "the float package on {}", version_dir, device.name())};
    const auto& s = pkg.info.input_shape;
    if (c.inputs[0].dims != std::vector<int64_t>{s.channels, s.height, s.width})
        return invalid_argument("input dims {} do not match the package's input shape [{},{},{}]", shape_string(c.inputs[0].dims),
                                s.channels, s.height, s.width);
    for (const auto& o : c.outputs)  // (metadata would advertise them; every reply would differ)
        if (o.dims != std::vector<int64_t>{pkg.info.num_classes})
            return invalid_argument("output '{}' dims {} do not match the package's {} classes ([{}])", o.name, shape_string(o.dims),
                                    pkg.info.num_classes, pkg.info.num_classes);
    auto flag = [&](const char* key) {
        auto it = c.parameters.find(key);
        return it == c.parameters.end() || it->second != "false";
    };
    // parameters { key: "precision" value: { string_value: "bf16" } }: the network under autocast.
    at::ScalarType autocast = at::kFloat;
    if (auto it = c.parameters.find("precision"); it != c.parameters.end() && it->second != "fp32") {
        if (it->second == "bf16") {
            autocast = at::kBFloat16;
        } else if (it->second == "fp16") {
            if (!device.is_gpu())
                return invalid_argument("parameter precision \"fp16\" is for GPU instances (KIND_GPU); on the CPU use \"bf16\"");
            autocast = at::kHalf;
        } else {
            return invalid_argument("parameter precision \"{}\" is not one of \"fp32\", \"bf16\", \"fp16\"", it->second);
        }
        if (pkg.info.quantized())
            return invalid_argument("{}: an INT8 package runs as quantized; parameter precision \"{}\" is for float packages",
                                    version_dir, it->second);
    }
    std::shared_ptr<PackageModel> model;
    try {
        model = std::make_shared<PackageModel>(std::move(pkg), c.inputs[0].dtype == DataType::kUint8, flag("normalize"),
                                               flag("fuse"), device, autocast, c.max_batch_size > 0);
    } catch (const c10::Error& e) {
        return internal_error("moving the network to {} failed: {}", device.name(), models::torch_error_message(e));
    }
    // Warm-up: oneDNN builds its kernels on the first call (~100 ms); do it before the model is
    // reported ready rather than on a client's first request.
    Tensor in{c.inputs[0].name, c.inputs[0].dtype, {s.channels, s.height, s.width}, {}};
    if (c.max_batch_size > 0) in.shape.insert(in.shape.begin(), 1);
    in.data.assign(static_cast<size_t>(in.numel() * static_cast<int64_t>(datatype_size(in.dtype))), '\0');
    std::vector<Tensor> out;
    STRATO_RETURN_IF_ERROR(model->execute({in}, &out).with_context("warm-up run"));
    release_openmp_pool();
    return std::shared_ptr<Model>(std::move(model));
}

// ---- TorchScript ----

/// The index in `name` by Triton's `<name>__<index>` convention ("INPUT__1" -> 1); none otherwise.
std::optional<size_t> named_index(const std::string& name) {
    const size_t at = name.find("__");
    if (at == std::string::npos) return std::nullopt;
    const std::string digits = name.substr(at + 2);
    if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        return std::nullopt;
    return static_cast<size_t>(std::stoul(digits));
}

/// Where each config tensor goes, as Triton's PyTorch backend decides it (pytorch_backend
/// GetNamingConvention): inputs by forward()'s argument names when every config input is one, else
/// by `<name>__<index>` when every name has one, else in config order; outputs by `<name>__<index>`,
/// else in config order. `args`: forward()'s argument names (empty for outputs).
std::vector<size_t> triton_positions(const std::vector<TensorSpec>& specs, const std::vector<std::string>& args) {
    std::vector<size_t> pos(specs.size());
    bool by_arg = !args.empty();
    for (const auto& s : specs) by_arg = by_arg && std::find(args.begin(), args.end(), s.name) != args.end();
    bool by_index = true;
    for (const auto& s : specs) by_index = by_index && named_index(s.name).has_value();
    for (size_t k = 0; k < specs.size(); ++k)
        pos[k] = by_arg     ? static_cast<size_t>(std::find(args.begin(), args.end(), specs[k].name) - args.begin())
                 : by_index ? *named_index(specs[k].name)
                            : k;
    return pos;
}

std::optional<DataType> from_scalar(c10::ScalarType st) {
    for (DataType t : {DataType::kBool, DataType::kUint8, DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64,
                       DataType::kFp16, DataType::kFp32, DataType::kFp64, DataType::kBf16})
        if (auto s = to_scalar(t); s && *s == st) return t;
    return std::nullopt;
}

/// The message of an exception from a TorchScript forward: the error itself (its last line), not
/// the interpreter's traceback of serialized code around it.
std::string forward_error(const std::exception& e) {
    std::string msg = e.what();
    if (auto at = msg.find("\nException raised from "); at != std::string::npos) msg.resize(at);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    if (msg.find("Traceback of TorchScript") != std::string::npos)
        if (auto nl = msg.rfind('\n'); nl != std::string::npos) msg = msg.substr(nl + 1);
    return msg;
}

class TorchScriptModel : public Model {
public:
    /// `in_pos` / `out_pos`: the forward() argument of each config input, the element of forward()'s
    /// result of each config output (triton_positions).
    TorchScriptModel(torch::jit::Module m, ModelConfig c, Device device, std::vector<size_t> in_pos, std::vector<size_t> out_pos)
        : module_(std::move(m)), config_(std::move(c)), device_(torch_device(device)), in_pos_(std::move(in_pos)),
          out_pos_(std::move(out_pos)) {
        std::vector<torch::Tensor> ps;
        for (const auto& p : module_.parameters()) ps.push_back(p);
        for (const auto& b : module_.buffers()) ps.push_back(b);
        bytes_ = parameter_bytes(ps);
        threads_ = execution_threads(device);
        wait_for_loading(device_);
    }

    Status execute(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) override {
        c10::InferenceMode guard;
        ExecutionStream stream(device_);
        std::vector<c10::IValue> args(inputs.size());
        int64_t rows = -1;  // the batch (from the inputs) that every output must have
        for (size_t k = 0; k < inputs.size(); ++k) {
            const Tensor& t = inputs[k];
            if (t.shape.empty()) continue;  // an optional input the request left out: None
            STRATO_ASSIGN_OR_RETURN(c10::ScalarType st, to_scalar(t.dtype));
            torch::Tensor x = as_tensor(t, st);
            args.at(in_pos_.at(k)) = device_.is_cuda() ? x.to(device_) : x;
            if (config_.max_batch_size > 0) rows = t.shape[0];
        }
        c10::IValue result;
        try {
            result = module_.forward(args);
        } catch (const std::exception& e) {  // c10::Error, and the JITException of a TorchScript `raise`
            return internal_error("TorchScript forward failed: {}", forward_error(e));
        }
        std::vector<c10::IValue> values;
        if (result.isTuple()) {
            values = result.toTupleRef().elements().vec();
        } else if (result.isList()) {
            for (const auto& v : result.toListRef()) values.push_back(v);
        } else if (!result.isGenericDict()) {
            values.push_back(result);
        }
        for (size_t i = 0; i < config_.outputs.size(); ++i) {
            const TensorSpec& spec = config_.outputs[i];
            c10::IValue v;
            if (result.isGenericDict()) {
                auto dict = result.toGenericDict();
                auto it = dict.find(spec.name);
                if (it == dict.end())
                    return internal_error("the TorchScript model returned a dict without the key '{}' (output '{}')", spec.name, spec.name);
                v = it->value();
            } else if (out_pos_[i] < values.size()) {
                v = values[out_pos_[i]];
            } else {
                return internal_error("the TorchScript model returned {} value{}; output '{}' is value {} of them", values.size(),
                                      values.size() == 1 ? "" : "s", spec.name, out_pos_[i]);
            }
            if (!v.isTensor())
                return internal_error("output '{}': the TorchScript model returned a value of type {} there, not a tensor", spec.name,
                                      v.tagKind());
            const torch::Tensor& x = v.toTensor();
            // As Triton's PyTorch backend: no silent conversion (a float64 cast to INT8 is garbage).
            std::optional<DataType> got = from_scalar(x.scalar_type());
            if (got != spec.dtype)
                return internal_error("configuration expects datatype {} for output '{}', model provides {}",
                                      datatype_config_name(spec.dtype), spec.name,
                                      got ? std::string(datatype_config_name(*got)) : std::string(c10::toString(x.scalar_type())));
            STRATO_RETURN_IF_ERROR(
                check_output_shape(config_, spec, std::vector<int64_t>(x.sizes().begin(), x.sizes().end()), rows));
            STRATO_ASSIGN_OR_RETURN(Tensor o, from_tensor(x, spec));
            outputs->push_back(std::move(o));
        }
        return Status::ok();
    }
    int64_t memory_bytes() const override { return bytes_; }
    int intra_op_threads() const override { return threads_; }
    std::string describe() const override { return fmt::format("TorchScript, {} thread{}", threads_, threads_ == 1 ? "" : "s"); }

private:
    torch::jit::Module module_;
    ModelConfig config_;
    torch::Device device_;
    std::vector<size_t> in_pos_, out_pos_;
    int64_t bytes_ = 0;
    int threads_ = 1;
};

Status torchscript_autocomplete(ModelConfig* c, const std::string&) {
    if (c->inputs.empty() || c->outputs.empty())
        return invalid_argument(
            "a TorchScript model.pt carries no input/output names or shapes: add config.pbtxt (or config.toml) with "
            "'input [ {{ name: \"INPUT__0\" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]' and the matching 'output'");
    return Status::ok();
}

/// Checks the config's inputs against forward()'s signature (as Triton's PyTorch backend does at
/// load) and returns the argument of each config input.
Result<std::vector<size_t>> torchscript_inputs(const torch::jit::Module& m, const ModelConfig& c, const std::string& path) {
    auto method = m.find_method("forward");
    if (!method) return invalid_argument("{}: the TorchScript module has no forward() method", path);
    const auto& arguments = method->function().getSchema().arguments();
    size_t first = !arguments.empty() && arguments[0].type()->kind() == c10::TypeKind::ClassType ? 1 : 0;  // self
    std::vector<std::string> names;
    size_t required = 0;
    for (size_t i = first; i < arguments.size(); ++i) {
        names.push_back(arguments[i].name());
        if (!arguments[i].default_value()) required = names.size();
    }
    std::string signature;
    for (size_t i = first; i < arguments.size(); ++i)
        signature += fmt::format("{}{}: {}", signature.empty() ? "" : ", ", arguments[i].name(), arguments[i].type()->annotation_str());
    if (c.inputs.size() > names.size() || c.inputs.size() < required)
        return invalid_argument("{}: configuration expects {} inputs, model provides {} (forward({}))", path, c.inputs.size(),
                                names.size(), signature);
    std::vector<size_t> pos = triton_positions(c.inputs, names);
    std::vector<bool> taken(names.size(), false);
    for (size_t k = 0; k < c.inputs.size(); ++k) {
        const TensorSpec& spec = c.inputs[k];
        if (pos[k] >= c.inputs.size() || taken[pos[k]])
            return invalid_argument("{}: input '{}' would be forward() argument {}, but the {} config inputs must be its first {} "
                                    "arguments, each once (forward({}))", path, spec.name, pos[k], c.inputs.size(), c.inputs.size(), signature);
        taken[pos[k]] = true;
        const c10::Argument& arg = arguments[first + pos[k]];
        const auto kind = arg.type()->kind();
        const bool optional = kind == c10::TypeKind::OptionalType;
        if (kind != c10::TypeKind::TensorType && !(optional && arg.type()->containedType(0)->kind() == c10::TypeKind::TensorType))
            return invalid_argument("{}: input '{}' is forward() argument '{}' of type {}; strato passes tensors (forward({}))", path,
                                    spec.name, arg.name(), arg.type()->annotation_str(), signature);
        if (spec.optional && !optional)
            return invalid_argument("{}: input '{}' is optional in the config, but forward() argument '{}' is {}, not "
                                    "Optional[Tensor] (a request that leaves it out passes None)", path, spec.name, arg.name(),
                                    arg.type()->annotation_str());
    }
    return pos;
}

Result<std::shared_ptr<Model>> torchscript_load(const ModelConfig& c, const std::string& version_dir, Device device) {
    std::string path = model_file(c, version_dir, "model.pt");
    for (const auto& t : c.inputs) STRATO_RETURN_IF_ERROR(to_scalar(t.dtype).status().with_context("input '" + t.name + "'"));
    for (const auto& t : c.outputs) STRATO_RETURN_IF_ERROR(to_scalar(t.dtype).status().with_context("output '" + t.name + "'"));
    STRATO_RETURN_IF_ERROR(strato::fs::check_regular_file(path));
    torch::jit::Module m;
    try {
        m = torch::jit::load(path, torch_device(device));
    } catch (const c10::Error& e) {
        return data_loss("{}: not a loadable TorchScript file: {}", path, models::torch_error_message(e));
    } catch (const std::exception& e) {
        return data_loss("{}: not a loadable TorchScript file: {}", path, e.what());
    }
    try {
        m.eval();
        STRATO_ASSIGN_OR_RETURN(std::vector<size_t> in_pos, torchscript_inputs(m, c, path));
        auto model = std::make_shared<TorchScriptModel>(std::move(m), c, device, std::move(in_pos), triton_positions(c.outputs, {}));
        release_openmp_pool();
        return std::shared_ptr<Model>(std::move(model));
    } catch (const c10::Error& e) {
        return internal_error("{}: preparing the TorchScript module on {} failed: {}", path, device.name(), models::torch_error_message(e));
    }
}

}  // namespace

void register_torch_backends(int intra_op_threads) {
    int n = intra_op_threads > 0 ? intra_op_threads : cgroup::usable_cpus();
    at::set_num_threads(n);
    register_backend({"strato", {"strato_package"}, models::kPackageManifest, package_autocomplete, package_load, /*gpu=*/true});
    register_backend({"pytorch", {"pytorch_libtorch"}, "model.pt", torchscript_autocomplete, torchscript_load, /*gpu=*/true});
    set_gpu_probe([] { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; });
}

}  // namespace strato::serve
