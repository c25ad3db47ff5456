#include "strato/serve/backend/onnx_backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <opencv2/core.hpp>
#include <opencv2/dnn.hpp>

#include "strato/core/fs.h"
#include "strato/serve/backend/backend.h"

namespace strato::serve {
namespace {

// OpenCV's message without the newline it ends in (it is a reason in the index, one line).
std::string message(const cv::Exception& e) {
    std::string m = e.what();
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return m;
}

// cv::dnn::Net is not safe to run from two threads at once: one per instance, lent out per call.
class OnnxModel : public Model {
public:
    OnnxModel(std::vector<cv::dnn::Net> nets, ModelConfig c) : nets_(std::move(nets)), busy_(nets_.size(), false), config_(std::move(c)) {
        for (const auto& o : config_.outputs) out_names_.push_back(o.name);
    }

    Status execute(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) override {
        size_t k = acquire();
        Status st = run(nets_[k], inputs, outputs);
        release(k);
        return st;
    }

private:
    Status run(cv::dnn::Net& net, const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) {
        try {
            for (const auto& t : inputs) {
                std::vector<int> dims(t.shape.begin(), t.shape.end());
                // OpenCV reads the request buffer in place; setInput copies it into the network.
                cv::Mat blob(static_cast<int>(dims.size()), dims.data(), CV_32F, const_cast<char*>(t.data.data()));
                net.setInput(blob, t.name);
            }
            int64_t rows = -1;  // the batch (from the inputs) that every output must have
            if (config_.max_batch_size > 0 && !inputs.empty() && !inputs.front().shape.empty())
                rows = inputs.front().shape[0];
            std::vector<cv::Mat> outs;
            net.forward(outs, out_names_);
            for (size_t i = 0; i < config_.outputs.size(); ++i) {
                cv::Mat m = outs.at(i).isContinuous() ? outs[i] : outs[i].clone();
                if (m.type() != CV_32F) m.convertTo(m, CV_32F);
                Tensor o;
                o.name = config_.outputs[i].name;
                o.dtype = DataType::kFp32;
                for (int d = 0; d < m.dims; ++d) o.shape.push_back(m.size[d]);
                // As the TorchScript backend: an output the config contradicts (dims [5] for a
                // graph returning 10 logits) is an error, not a reply with another shape (found by review).
                STRATO_RETURN_IF_ERROR(check_output_shape(config_, config_.outputs[i], o.shape, rows));
                o.data.assign(reinterpret_cast<const char*>(m.data), m.total() * m.elemSize());
                outputs->push_back(std::move(o));
            }
        } catch (const cv::Exception& e) {
            return internal_error("OpenCV DNN failed to run the ONNX model: {}", message(e));
        }
        return Status::ok();
    }

    size_t acquire() {
        std::unique_lock lock(mu_);
        while (true) {
            for (size_t i = 0; i < busy_.size(); ++i)
                if (!busy_[i]) {
                    busy_[i] = true;
                    return i;
                }
            cv_.wait(lock);
        }
    }
    void release(size_t k) {
        {
            std::lock_guard lock(mu_);
            busy_[k] = false;
        }
        cv_.notify_one();
    }

    std::vector<cv::dnn::Net> nets_;
    std::vector<bool> busy_;
    std::mutex mu_;
    std::condition_variable cv_;
    ModelConfig config_;
    std::vector<std::string> out_names_;
};

Status onnx_autocomplete(ModelConfig* c, const std::string&) {
    if (c->inputs.empty() || c->outputs.empty())
        return invalid_argument(
            "ONNX models are run by OpenCV DNN here, which does not report the graph's input/output names and shapes: "
            "add config.pbtxt (or config.toml) with 'input [ {{ name: \"input\" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] }} ]' "
            "and the matching 'output', using the names given at export");
    return Status::ok();
}

// OpenCV does not tell a graph's input shapes, so a config that contradicts the graph (dims [5]
// for a graph of 4, a second graph input the config leaves out, an output of another shape)
// failed every request with a 500 while the model showed READY. As Triton's ONNX Runtime backend
// refuses such a config at load, one run on zeros of the config's shapes (a batch of 1) does
// here. A config with variable (-1) dimensions is left to the requests: no one size is sure to fit.
Status check_graph_against_config(Model& model, const ModelConfig& c, const std::string& path) {
    std::vector<Tensor> zeros;
    for (const auto& t : c.inputs) {
        Tensor z{t.name, DataType::kFp32, {}, {}};
        if (c.max_batch_size > 0) z.shape.push_back(1);
        z.shape.insert(z.shape.end(), t.dims.begin(), t.dims.end());
        const int64_t n = z.numel();
        if (n < 0) return Status::ok();
        // (a config of a gigantic input is for the request that sends one to try)
        if (n > (int64_t{1} << 26)) return Status::ok();
        z.data.assign(static_cast<size_t>(n) * sizeof(float), '\0');
        zeros.push_back(std::move(z));
    }
    std::vector<Tensor> outputs;
    Status st = model.execute(zeros, &outputs);
    if (st.is_ok()) return st;
    std::string hint;
    // (OpenCV's words for a graph input that was given no data)
    if (st.message().find("!inp.empty()") != std::string::npos)
        hint = " — the graph has an input the config does not name: list every input given at export";
    std::vector<std::string> shapes;
    for (const auto& z : zeros) shapes.push_back(fmt::format("'{}' {}", z.name, shape_string(z.shape)));
    return invalid_argument("{}: the ONNX graph does not run as the config describes it (inputs {}): {}{}", path,
                            shapes.empty() ? std::string("none") : fmt::format("{}", fmt::join(shapes, ", ")), st.message(), hint);
}

Result<std::shared_ptr<Model>> onnx_load(const ModelConfig& c, const std::string& version_dir, Device) {
    for (const auto* list : {&c.inputs, &c.outputs})
        for (const auto& t : *list)
            if (t.dtype != DataType::kFp32)
                return Status{StatusCode::kUnimplemented,
                              fmt::format("'{}': the OpenCV DNN runtime serves TYPE_FP32 tensors only", t.name)};
    // A cv::dnn::Net keeps the last blob set for each input: an input a request left out would run
    // with another request's data.
    for (const auto& t : c.inputs)
        if (t.optional)
            return Status{StatusCode::kUnimplemented,
                          fmt::format("input '{}': optional inputs are not supported by the OpenCV DNN runtime (it needs every "
                                      "graph input in every request)", t.name)};
    std::string path = (std::filesystem::path(version_dir) / (c.default_model_filename.empty() ? "model.onnx" : c.default_model_filename)).string();
    STRATO_RETURN_IF_ERROR(strato::fs::check_regular_file(path));
    std::vector<cv::dnn::Net> nets;
    try {
        for (int64_t i = 0; i < c.instance_count(); ++i) {
            cv::dnn::Net net = cv::dnn::readNetFromONNX(path);
            if (net.empty()) return data_loss("{}: OpenCV read no network from the file", path);
            net.setPreferableBackend(cv::dnn::DNN_BACKEND_OPENCV);
            net.setPreferableTarget(cv::dnn::DNN_TARGET_CPU);
            nets.push_back(std::move(net));
        }
    } catch (const cv::Exception& e) {
        return data_loss("{}: not an ONNX model OpenCV DNN can load: {}", path, message(e));
    }
    // Names the graph does not have fail the load, not every request. (forward() reads an output
    // name with a '.' as "layer.output": those are left to it.)
    for (const auto& t : c.outputs)
        if (t.name.find('.') == std::string::npos && nets.front().getLayerId(t.name) < 0)
            return invalid_argument("{}: output '{}' is not a tensor of the ONNX graph (use the output names given at export)",
                                    path, t.name);
    for (const auto& t : c.inputs) {
        try {
            nets.front().setInput(cv::Mat(), t.name);  // (replaced by the first request's data)
        } catch (const cv::Exception&) {
            return invalid_argument("{}: input '{}' is not an input of the ONNX graph (use the input names given at export)", path,
                                    t.name);
        }
    }
    auto model = std::make_shared<OnnxModel>(std::move(nets), c);
    STRATO_RETURN_IF_ERROR(check_graph_against_config(*model, c, path));
    return std::shared_ptr<Model>(model);
}

}  // namespace

void register_onnx_backend(int threads) {
    if (threads > 0) cv::setNumThreads(threads);
    register_backend({"onnxruntime", {"onnxruntime_onnx"}, "model.onnx", onnx_autocomplete, onnx_load});
}

}  // namespace strato::serve
