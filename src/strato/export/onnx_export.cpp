#include "strato/export/onnx_export.h"

#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/models/package.h"
#include "strato/models/zoo.h"

namespace strato::exporter {
namespace {
namespace nn = torch::nn;
namespace stdfs = std::filesystem;
using nlohmann::json;

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> child_names(nn::Module& m) {
    std::vector<std::string> names;
    for (const auto& item : m.named_children()) names.push_back(item.key());
    return names;
}

std::vector<int64_t> hw(const torch::ExpandingArray<2>& a) { return {a->at(0), a->at(1)}; }
/// ONNX pads: [begin of each axis..., end of each axis...]; libtorch pads both ends alike.
std::vector<int64_t> pads(const torch::ExpandingArray<2>& a) { return {a->at(0), a->at(1), a->at(0), a->at(1)}; }

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

Status unsupported(const std::string& path, const nn::Module& m, const std::string& why = "") {
    return {StatusCode::kUnimplemented,
            fmt::format("module '{}' ({}) cannot be exported to ONNX{}{}; the writer knows Sequential, Linear, Conv2d, "
                        "BatchNorm2d, ReLU, MaxPool2d, Flatten, Dropout and the zoo's residual blocks",
                        path, m.name(), why.empty() ? "" : ": ", why)};
}

/// Builds one GraphProto: initializers named after the module paths (as PyTorch names them), one
/// node per layer; `x` is the name of the value flowing through.
class GraphWriter {
  public:
    explicit GraphWriter(onnx::GraphProto* g) : g_(g) {}

    void initializer(const std::string& name, const torch::Tensor& t) {
        torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
        onnx::TensorProto* p = g_->add_initializer();
        p->set_name(name);
        p->set_data_type(onnx::TensorProto::FLOAT);
        for (int64_t d : c.sizes()) p->add_dims(d);
        p->set_raw_data(std::string(static_cast<const char*>(c.data_ptr()), c.numel() * sizeof(float)));
    }

    onnx::NodeProto* node(const std::string& op, const std::string& name, std::vector<std::string> inputs) {
        onnx::NodeProto* n = g_->add_node();
        n->set_op_type(op);
        n->set_name(name);
        for (const auto& i : inputs) n->add_input(i);
        n->add_output(name);
        if (std::find(ops_.begin(), ops_.end(), op) == ops_.end()) ops_.push_back(op);
        return n;
    }

    static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, float v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : v) a->add_ints(x);
    }

    /// Emits the eval-mode forward pass of `m` (at `path`) applied to `*x`; `*x` becomes its output.
    Status module(const std::string& path, nn::Module& m, std::string* x) {
        if (auto* seq = m.as<nn::Sequential>()) {
            for (const auto& item : seq->named_children()) {
                STRATO_RETURN_IF_ERROR(module(path + "." + item.key(), *item.value(), x));
            }
            return Status::ok();
        }
        if (auto* lin = m.as<nn::Linear>()) {
            // y = x W^T + b; x: [B, in], W: [out, in]
            initializer(path + ".weight", lin->weight);
            std::vector<std::string> in = {*x, path + ".weight"};
            if (lin->options.bias()) {
                initializer(path + ".bias", lin->bias);
                in.push_back(path + ".bias");
            }
            attr(node("Gemm", path, in), "transB", int64_t{1});
            *x = path;
            return Status::ok();
        }
        if (auto* cv = m.as<nn::Conv2d>()) return conv(path, *cv, x);
        if (auto* bn = m.as<nn::BatchNorm2d>()) return batch_norm(path, *bn, x);
        if (auto* mp = m.as<nn::MaxPool2d>()) return max_pool(path, *mp, x);
        if (auto* fl = m.as<nn::Flatten>()) {
            const auto& o = fl->options;
            if (o.start_dim() != 1 || o.end_dim() != -1) {
                return unsupported(
                    path, m, fmt::format("only flatten(1, -1) is supported, got ({}, {})", o.start_dim(), o.end_dim()));
            }
            *x = flatten(path, *x);
            return Status::ok();
        }
        if (m.as<nn::ReLU>()) {
            *x = relu(path, *x);
            return Status::ok();
        }
        if (auto* f = m.as<nn::Functional>()) {
            // nn::Functional wraps an opaque callable: accept it as ReLU only if it computes ReLU.
            torch::NoGradGuard no_grad;
            torch::Tensor probe = torch::tensor({-1.5f, -0.0f, 0.25f, 3.0f});
            torch::Tensor got;
            try {
                got = f->forward(probe);
            } catch (const c10::Error& e) {
                return unsupported(path, m, "its function fails on a probe tensor: " + models::torch_error_message(e));
            }
            if (!got.sizes().equals(probe.sizes()) || !torch::equal(got, torch::relu(probe))) {
                return unsupported(path, m, "only a Functional computing ReLU is supported");
            }
            *x = relu(path, *x);
            return Status::ok();
        }
        if (m.as<nn::Dropout>() || m.as<nn::Dropout2d>() || m.as<nn::Identity>())
            return Status::ok();  // eval: identity
        const std::string type = m.name();
        if (ends_with(type, "BasicBlockImpl") || ends_with(type, "BottleneckImpl")) return residual_block(path, m, x);
        return unsupported(path, m);
    }

    std::string relu(const std::string& name, const std::string& x) {
        node("Relu", name, {x});
        return name;
    }
    std::string flatten(const std::string& name, const std::string& x) {
        attr(node("Flatten", name, {x}), "axis", int64_t{1});
        return name;
    }
    std::string global_average_pool(const std::string& name, const std::string& x) {
        node("GlobalAveragePool", name, {x});
        return name;
    }

    const std::vector<std::string>& ops() const { return ops_; }

  private:
    Status conv(const std::string& path, nn::Conv2dImpl& c, std::string* x) {
        const auto& o = c.options;
        if (!c10::holds_alternative<torch::enumtype::kZeros>(o.padding_mode())) {
            return unsupported(path, c, "only zero padding is supported");
        }
        const auto* pad = c10::get_if<torch::ExpandingArray<2>>(&o.padding());
        if (!pad) return unsupported(path, c, "padding 'same'/'valid' is not supported; give the padding in pixels");
        // x: [B, Cin, H, W], weight: [Cout, Cin/groups, kH, kW]
        initializer(path + ".weight", c.weight);
        std::vector<std::string> in = {*x, path + ".weight"};
        if (o.bias()) {
            initializer(path + ".bias", c.bias);
            in.push_back(path + ".bias");
        }
        onnx::NodeProto* n = node("Conv", path, in);
        attr(n, "kernel_shape", hw(o.kernel_size()));
        attr(n, "strides", hw(o.stride()));
        attr(n, "pads", pads(*pad));
        attr(n, "dilations", hw(o.dilation()));
        attr(n, "group", o.groups());
        *x = path;
        return Status::ok();
    }

    Status batch_norm(const std::string& path, nn::BatchNorm2dImpl& b, std::string* x) {
        const auto& o = b.options;
        if (!o.track_running_stats())
            return unsupported(path, b, "it keeps no running statistics (eval mode needs them)");
        // Eval mode: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel.
        const int64_t c = o.num_features();
        initializer(path + ".weight", o.affine() ? b.weight : torch::ones({c}));
        initializer(path + ".bias", o.affine() ? b.bias : torch::zeros({c}));
        initializer(path + ".running_mean", b.running_mean);
        initializer(path + ".running_var", b.running_var);
        onnx::NodeProto* n =
            node("BatchNormalization", path,
                 {*x, path + ".weight", path + ".bias", path + ".running_mean", path + ".running_var"});
        attr(n, "epsilon", static_cast<float>(o.eps()));
        *x = path;
        return Status::ok();
    }

    Status max_pool(const std::string& path, nn::MaxPool2dImpl& p, std::string* x) {
        const auto& o = p.options;
        onnx::NodeProto* n = node("MaxPool", path, {*x});
        attr(n, "kernel_shape", hw(o.kernel_size()));
        attr(n, "strides", hw(o.stride()));
        attr(n, "pads", pads(o.padding()));
        if ((*o.dilation())[0] != 1 || (*o.dilation())[1] != 1) {
            attr(n, "dilations", hw(o.dilation()));
        }
        if (o.ceil_mode()) attr(n, "ceil_mode", int64_t{1});
        *x = path;
        return Status::ok();
    }

    /// The zoo's BasicBlock / Bottleneck (zoo.cpp): relu(bn(conv(...)) chain + shortcut(x)).
    Status residual_block(const std::string& path, nn::Module& m, std::string* x) {
        const bool bottleneck = ends_with(m.name(), "BottleneckImpl");
        const std::vector<std::string> want =
            bottleneck ? std::vector<std::string>{"conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "shortcut"}
                       : std::vector<std::string>{"conv1", "bn1", "conv2", "bn2", "shortcut"};
        if (child_names(m) != want) {
            return unsupported(path, m,
                               fmt::format("expected the children [{}], found [{}]", join(want), join(child_names(m))));
        }
        auto children = m.named_children();
        const int stages = bottleneck ? 3 : 2;
        std::string y = *x;
        for (int i = 1; i <= stages; ++i) {
            const std::string conv_name = fmt::format("conv{}", i), bn_name = fmt::format("bn{}", i);
            auto* c = children[conv_name]->as<nn::Conv2d>();
            auto* b = children[bn_name]->as<nn::BatchNorm2d>();
            if (!c)
                return unsupported(path + "." + conv_name, *children[conv_name],
                                   "expected a Conv2d in a residual block");
            if (!b)
                return unsupported(path + "." + bn_name, *children[bn_name],
                                   "expected a BatchNorm2d in a residual block");
            STRATO_RETURN_IF_ERROR(conv(path + "." + conv_name, *c, &y));
            STRATO_RETURN_IF_ERROR(batch_norm(path + "." + bn_name, *b, &y));
            if (i < stages) y = relu(path + "." + bn_name + ".relu", y);
        }
        std::string s = *x;
        auto* shortcut = children["shortcut"]->as<nn::Sequential>();
        if (!shortcut) return unsupported(path + ".shortcut", *children["shortcut"], "expected a Sequential shortcut");
        if (!shortcut->is_empty()) STRATO_RETURN_IF_ERROR(module(path + ".shortcut", *shortcut, &s));
        node("Add", path + ".add", {y, s});
        *x = relu(path + ".relu", path + ".add");
        return Status::ok();
    }

    onnx::GraphProto* g_;
    std::vector<std::string> ops_;
};

void set_tensor_type(onnx::ValueInfoProto* v, const std::string& name, const std::string& batch,
                     const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = t->mutable_shape();
    shape->add_dim()->set_dim_param(batch);
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

/// The zoo network's top-level layout: which children, in which order, with what between them.
Status write_body(GraphWriter& w, models::NetImpl& net, const std::string& arch, std::string* x) {
    static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> kLayouts = {
        {"mlp", {"MlpImpl", {"body"}}},
        {"cnn", {"CnnImpl", {"features", "classifier"}}},
        {"resnet", {"ResNetImpl", {"stem", "stages", "head"}}}};
    auto it = kLayouts.find(arch);
    if (it == kLayouts.end()) {
        return invalid_argument("model.arch: '{}' has no ONNX writer (expected mlp, cnn or resnet)", arch);
    }
    const auto& [type, children] = it->second;
    if (!ends_with(net.name(), type) || child_names(net) != children) {
        return invalid_argument("the network ({}, children [{}]) is not the zoo's '{}' ({} with children [{}])",
                                net.name(), join(child_names(net)), arch, type, join(children));
    }
    auto c = net.named_children();
    if (arch == "mlp") {  // flatten -> body
        *x = w.flatten("flatten", *x);
        return w.module("body", *c["body"], x);
    }
    if (arch == "cnn") {  // features -> classifier (which starts with Flatten)
        STRATO_RETURN_IF_ERROR(w.module("features", *c["features"], x));
        return w.module("classifier", *c["classifier"], x);
    }
    // resnet: stem -> stages -> adaptive_avg_pool2d(1) -> flatten -> head
    STRATO_RETURN_IF_ERROR(w.module("stem", *c["stem"], x));
    STRATO_RETURN_IF_ERROR(w.module("stages", *c["stages"], x));
    *x = w.flatten("pool.flatten", w.global_average_pool("pool", *x));
    return w.module("head", *c["head"], x);
}

/// Shape inference on a copy whose output shape is left open: the inferred output must be
/// [batch, classes] (the batch axis symbolic or unknown, never a fixed size).
Status check_inferred_output(const onnx::ModelProto& model, const OnnxSpec& spec) {
    onnx::ModelProto copy = model;
    copy.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    try {
        onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(),
                                           onnx::ShapeInferenceOptions(/*check_type=*/true, /*error_mode=*/1));
    } catch (const std::exception& e) {
        return internal_error("ONNX shape inference failed on the written graph: {}", e.what());
    }
    const auto& t = copy.graph().output(0).type().tensor_type();
    if (!t.has_shape()) return internal_error("ONNX shape inference found no shape for output '{}'", spec.output_name);
    const auto& s = t.shape();
    auto dim_str = [](const onnx::TensorShapeProto_Dimension& d) {
        return d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : std::string("?");
    };
    std::string got;
    for (const auto& d : s.dim()) got += (got.empty() ? "" : ", ") + dim_str(d);
    const bool batch_ok = s.dim_size() == 2 && !s.dim(0).has_dim_value();
    const bool classes_ok = s.dim_size() == 2 && s.dim(1).has_dim_value() && s.dim(1).dim_value() == spec.classes;
    if (!batch_ok || !classes_ok) {
        return internal_error("ONNX shape inference gives output '{}' the shape [{}], expected [{}, {}]",
                              spec.output_name, got, spec.batch_dim, spec.classes);
    }
    return Status::ok();
}

}  // namespace

Result<OnnxModelBytes> net_to_onnx(models::NetImpl& net, const OnnxSpec& spec) {
    if (spec.opset < kOnnxOpsetMin || spec.opset > kOnnxOpsetMax) {
        return invalid_argument("opset {} is not supported (expected {}..{})", spec.opset, kOnnxOpsetMin,
                                kOnnxOpsetMax);
    }
    if (spec.classes < 1) return invalid_argument("the model has {} classes, expected at least 1", spec.classes);
    if (spec.input_name.empty() || spec.output_name.empty() || spec.input_name == spec.output_name) {
        return invalid_argument("input and output names must be non-empty and distinct, got '{}' and '{}'",
                                spec.input_name, spec.output_name);
    }
    onnx::ModelProto model;
    model.set_ir_version(onnx::IR_VERSION);
    model.set_producer_name("strato");
    model.set_producer_version("0.1.0");
    model.set_doc_string(fmt::format("strato model zoo '{}', eval-mode forward pass", spec.arch));
    auto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(spec.opset);
    for (const auto& [k, v] : spec.metadata) {
        auto* p = model.add_metadata_props();
        p->set_key(k);
        p->set_value(v);
    }
    onnx::GraphProto* g = model.mutable_graph();
    g->set_name("strato_" + spec.arch);
    const auto& s = spec.input_shape;
    set_tensor_type(g->add_input(), spec.input_name, spec.batch_dim, {s.channels, s.height, s.width});

    GraphWriter w(g);
    std::string x = spec.input_name;
    try {
        STRATO_RETURN_IF_ERROR(write_body(w, net, spec.arch, &x));
    } catch (const c10::Error& e) {
        return internal_error("cannot read the network's weights: {}", models::torch_error_message(e));
    }
    // The last node's output is the graph output; a network of only identities gets an Identity node.
    if (x == spec.input_name) x = w.node("Identity", "identity", {x})->output(0);
    for (auto& n : *g->mutable_node()) {
        for (auto& o : *n.mutable_output()) {
            if (o == x) o = spec.output_name;
        }
    }
    set_tensor_type(g->add_output(), spec.output_name, spec.batch_dim, {spec.classes});

    try {
        onnx::checker::check_model(model);
    } catch (const std::exception& e) {
        return internal_error("the written ONNX graph fails onnx::checker: {}", e.what());
    }
    STRATO_RETURN_IF_ERROR(check_inferred_output(model, spec));

    OnnxModelBytes out;
    if (!model.SerializeToString(&out.bytes)) return internal_error("cannot serialize the ONNX model (over 2 GB?)");
    out.nodes = g->node_size();
    out.initializers = g->initializer_size();
    out.ops = w.ops();
    return out;
}

namespace {

// Refuses to write over what is not an ONNX model: a device or FIFO (as root, /dev/null was
// replaced by a file), a report, another package's weights or manifest. An ONNX ModelProto
// starts with its ir_version field (tag 0x08).
Status check_onnx_destination(const stdfs::path& out) {
    std::error_code ec;
    const auto st = stdfs::status(out, ec);
    if (ec || st.type() == stdfs::file_type::not_found) return Status::ok();
    if (stdfs::is_directory(st)) return invalid_argument("--output {} is a directory, expected a file name", out.string());
    if (!stdfs::is_regular_file(st))
        return invalid_argument("--output {}: exists and is not a regular file; not writing over it", out.string());
    std::ifstream f(out, std::ios::binary);
    const int first = f.get();
    if (f && first != 0x08)
        return invalid_argument("--output {}: the file exists and is not an ONNX model; not writing over it (remove it "
                                "or choose another name)",
                                out.string());
    return Status::ok();
}

/// Ctrl-C (SIGINT) or SIGTERM, once signals::install_stop_handlers() ran: the export stops
/// between its steps, before the file is written (the manifest is put back as it was read).
Status check_stop(const char* after, const stdfs::path& out) {
    return signals::stopped(fmt::format("{}; nothing written ({} left as it was)", after, out.string()));
}

}  // namespace

Result<OnnxExportResult> export_package_onnx(const std::string& dir, const OnnxExportOptions& options) {
    if (options.opset < kOnnxOpsetMin || options.opset > kOnnxOpsetMax) {
        return invalid_argument("--opset {} is not supported (expected {}..{})", options.opset, kOnnxOpsetMin,
                                kOnnxOpsetMax);
    }
    std::error_code ec;
    // What is there instead of a package (a file of one, a run directory) is said as every command says it.
    const auto not_a_package = [&dir](const std::string& fallback) -> Status {
        auto pkg = models::load_package(dir);
        return pkg.is_ok() ? not_found("{}", fallback) : pkg.status();
    };
    if (!stdfs::is_directory(dir, ec)) return not_a_package(fmt::format("model package {} is not a directory", dir));
    // One export of a package at a time: each rewrites its manifest, and two at once could leave
    // it listing one's file with the other's checksum. (A lock on the directory: the manifest
    // itself is replaced by rename.)
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return io_error("cannot open {}: {}", dir, std::strerror(errno));
    const std::unique_ptr<int, void (*)(int*)> dir_lock(new int(dir_fd), [](int* fd) {
        ::close(*fd);  // (releases the flock)
        delete fd;
    });
    // Waiting for another export's turn, a Ctrl-C still stops this one (a blocking flock restarts
    // after the signal handler).
    int locked = -1;
    for (bool said = false;
         (locked = ::flock(dir_fd, LOCK_EX | LOCK_NB)) != 0 && (errno == EWOULDBLOCK || errno == EINTR);) {
        STRATO_RETURN_IF_ERROR(signals::stopped(fmt::format("while waiting for another export of {}; nothing written", dir)));
        if (!std::exchange(said, true)) log::info("export: waiting for another export of {} to finish", dir);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (locked != 0)  // (a filesystem without flock: go on, as one export at a time is the common case)
        log::warn("export: cannot lock {} ({}); another export of it at the same time could mix their manifests", dir,
                  std::strerror(errno));
    const stdfs::path manifest_path = stdfs::path(dir) / models::kPackageManifest;
    // An export killed while it rewrote the manifest left its temp file in the package (under
    // the lock: a live export's own is left alone, as is a process's that still runs).
    fs::remove_stale_temps(manifest_path);
    auto text = fs::read_file(manifest_path);
    if (!text) return not_a_package(fmt::format("{} is not a model package: {}", dir, text.status().message()));
    STRATO_ASSIGN_OR_RETURN(json manifest, parse_json_named(*text, manifest_path.string(), StatusCode::kDataLoss));
    if (!manifest.is_object())
        return data_loss("{}: expected a JSON object, got {}", manifest_path.string(), manifest.type_name());

    // "-" (or /dev/stdout): the bytes go to standard output as a stream -- no file, no folder to
    // check, never listed in the manifest (found by review: `--output -` run inside the package
    // listed a file "-" there, and the package no longer loaded; /dev/stdout on a pipe was
    // followed to "pipe:[N]" and failed).
    const bool to_stdout = fs::is_stdout(options.output);
    // Written where a link points, as `>` would; the link stays.
    stdfs::path out = options.output;
    if (!to_stdout) {
        auto followed =
            fs::follow_links(options.output.empty() ? stdfs::path(dir) / kOnnxFile : stdfs::path(options.output));
        if (!followed) return invalid_argument("--output {}", followed.status().message());
        out = *followed;
    }
    const stdfs::path out_dir = out.parent_path().empty() ? stdfs::path(".") : out.parent_path();
    if (!to_stdout && !stdfs::is_directory(out_dir, ec)) {
        return not_found("cannot write {}: directory {} does not exist", out.string(), out_dir.string());
    }
    // A folder that takes no new files (a read-only mount) is found before the package is loaded
    // and the graph built, not by the temp file's name at the end.
    if (!to_stdout) STRATO_RETURN_IF_ERROR(fs::check_writable_dir(out_dir).with_context(out.string()));
    const bool in_package = !to_stdout && stdfs::equivalent(out_dir, stdfs::path(dir), ec);
    // Another package's folder: its manifest lists its files with checksums, and a file written
    // over one of them (its own model.onnx) broke that package without a word.
    if (!to_stdout && !in_package && stdfs::exists(out_dir / models::kPackageManifest, ec))
        return invalid_argument("--output {}: {} is another model package; not writing into it (export that package "
                                "with --model {}, or choose a place outside packages)",
                                out.string(), out_dir.string(), out_dir.string());
    const std::string name = out.filename().string();
    json& files = manifest["files"];
    const bool listed = in_package && files.is_object() && files.contains(name);
    if (!listed && !to_stdout) STRATO_RETURN_IF_ERROR(check_onnx_destination(out));  // (a listed copy is checked below)
    if (in_package && (name == models::kPackageManifest || (listed && out.extension() != ".onnx"))) {
        return invalid_argument("--output {} would replace the package's own {}; choose another name", out.string(),
                                name);
    }
    // Whatever fails from here on leaves the manifest as it was read (a failed export changes
    // nothing); a crash mid-way leaves it in one of the orders described in docs/export.md.
    bool manifest_changed = false, succeeded = false;
    const auto restore = [&](void*) {
        if (manifest_changed && !succeeded) (void)fs::atomic_write(manifest_path, *text);
    };
    const std::unique_ptr<void, decltype(restore)> restore_on_failure(reinterpret_cast<void*>(1), restore);
    if (listed) {
        // The file is about to be replaced: a listed copy that no longer matches its checksum
        // (truncated, edited) is unlisted now, so the package loads and the export can go on.
        auto have = fs::sha256_file(out);
        if (!have || !files[name].is_object() || files[name].value("sha256", "") != *have) {
            files.erase(name);
            manifest_changed = true;
            STRATO_RETURN_IF_ERROR(fs::atomic_write(manifest_path, json_text(manifest, 2) + "\n"));
        }
    }
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage pkg, models::load_package(dir));
    log::debug("export: loaded {} ({}, {} parameters)", dir, pkg.info.model.arch, models::parameter_count(*pkg.net));
    STRATO_RETURN_IF_ERROR(check_stop("after loading the package", out));
    if (pkg.info.quantized()) {
        return invalid_argument("{} is an INT8 package (strato compress quantize); ONNX export writes float graphs: "
                                "export its float package ({})",
                                dir, pkg.info.quantization.value("source", "the --model it was quantized from"));
    }

    OnnxSpec spec;
    spec.arch = pkg.info.model.arch;
    spec.input_shape = pkg.info.input_shape;
    spec.classes = pkg.info.num_classes;
    spec.opset = options.opset;
    for (auto [key, slot] : {std::pair{"inputs", &spec.input_name}, std::pair{"outputs", &spec.output_name}}) {
        const json& list = manifest.value(key, json::array());
        if (!list.is_array() || list.empty() || !list[0].is_object() || !list[0].contains("name") ||
            !list[0]["name"].is_string()) {
            return invalid_argument("{}: /{}/0/name is missing or not a string", manifest_path.string(), key);
        }
        *slot = list[0]["name"].get<std::string>();
    }
    json model_cfg = manifest.value("model", json::object());
    spec.metadata = {{"strato.arch", spec.arch},
                     {"strato.model", json_text(model_cfg)},
                     {"strato.labels", json_text(json(pkg.info.labels))},
                     {"strato.preprocessing", json_text(manifest.value("preprocessing", json::object()))}};
    // A table's model: which column goes where in the input (C = the features, H = W = 1).
    if (!pkg.info.features.empty()) spec.metadata["strato.features"] = json_text(json(pkg.info.features));
    STRATO_ASSIGN_OR_RETURN(OnnxModelBytes onnx_model, net_to_onnx(*pkg.net, spec));
    log::debug("export: graph built and checked ({} nodes, {} bytes)", onnx_model.nodes, onnx_model.bytes.size());
    STRATO_RETURN_IF_ERROR(check_stop("after building the ONNX graph", out));

    if (files.is_object() && files.contains(name) && in_package) {
        // Unlist the old file first: a crash while the new one is written must not leave a
        // manifest whose checksum no longer matches.
        files.erase(name);
        manifest_changed = true;
        STRATO_RETURN_IF_ERROR(fs::atomic_write(manifest_path, json_text(manifest, 2) + "\n"));
    }
    if (!to_stdout) fs::remove_stale_temps(out);  // an export killed mid-write left its partial copy
    // The last safe point: a signal during the write (atomic) lets it and the manifest finish.
    STRATO_RETURN_IF_ERROR(check_stop("before writing the file", out));
    {
        const Status written = fs::atomic_write(out, onnx_model.bytes);
        // In place although the write says otherwise (the directory's fsync after the rename
        // failed): the old file is gone, so the old manifest must not come back.
        // (Standard output is never read back: on a pipe that would read the command's own output.)
        if (to_stdout) {
            succeeded = written.is_ok();
        } else if (auto have = fs::sha256_file(out); have && *have == fs::sha256_hex(onnx_model.bytes)) {
            succeeded = true;
        }
        STRATO_RETURN_IF_ERROR(written);
    }

    OnnxExportResult r;
    r.path = out.string();
    r.bytes = static_cast<int64_t>(onnx_model.bytes.size());
    r.sha256 = fs::sha256_hex(onnx_model.bytes);
    r.opset = spec.opset;
    r.nodes = onnx_model.nodes;
    r.ops = onnx_model.ops;
    r.arch = spec.arch;
    r.input_name = spec.input_name;
    r.output_name = spec.output_name;
    r.input_shape = {-1, spec.input_shape.channels, spec.input_shape.height, spec.input_shape.width};
    r.output_shape = {-1, spec.classes};
    // The new file is in place: from here the manifest must list it, not the old one's checksum.
    succeeded = true;
    if (in_package) {
        files[name] = {{"sha256", r.sha256}, {"bytes", r.bytes}};
        STRATO_RETURN_IF_ERROR(fs::atomic_write(manifest_path, json_text(manifest, 2) + "\n"));
        r.in_manifest = true;
    }
    return r;
}

}  // namespace strato::exporter
