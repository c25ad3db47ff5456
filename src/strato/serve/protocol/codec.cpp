#include "strato/serve/protocol/codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "strato/core/json_depth.h"

namespace strato::serve {
namespace {

using json = nlohmann::json;

Result<json> parse_json(std::string_view text, std::string_view what) {
    // NOTE: nlohmann's lexer takes a NUL byte for the end of its input: `{...}\0anything` parsed,
    // the rest ignored.
    if (size_t nul = text.find('\0'); nul != std::string_view::npos)
        return invalid_argument("the {} holds a NUL byte at byte {}, inside or after its JSON", what, nul);
    if (size_t at = json_too_deep(text); at != std::string_view::npos)
        return invalid_argument("JSON nests deeper than {} levels at byte {}", kMaxJsonDepth, at);
    json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        // Re-parse with exceptions only to get the position for the message.
        try {
            const json again = json::parse(text.begin(), text.end());  // ([[nodiscard]]: a (void) cast still warns)
            (void)again;
        } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e99999
            return invalid_argument("failed to parse the {} as JSON: {}", what, e.what());
        }
        return invalid_argument("failed to parse the {} as JSON", what);
    }
    return j;
}

template <typename T>
void append_pod(std::string& out, T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.append(buf, sizeof(T));
}

// A client's value in an error message: its JSON, cut short (an object could be megabytes).
std::string shown(const json& e) {
    std::string text = e.dump();
    if (text.size() <= 64) return text;
    size_t cut = 61;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    return text.substr(0, cut) + "...";
}

template <typename T>
Status append_integer(std::string& out, const json& e, std::string_view input) {
    if (e.is_number_unsigned()) {
        uint64_t u = e.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<T>::max()))
            return invalid_argument("{}: value {} is out of range for its datatype", input, u);
        append_pod<T>(out, static_cast<T>(u));
    } else if (e.is_number_integer()) {
        int64_t s = e.get<int64_t>();
        if (s < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            (s > 0 && static_cast<uint64_t>(s) > static_cast<uint64_t>(std::numeric_limits<T>::max())))
            return invalid_argument("{}: value {} is out of range for its datatype", input, s);
        append_pod<T>(out, static_cast<T>(s));
    } else {
        return invalid_argument("{}: expected an integer, got {}", input, shown(e));
    }
    return Status::ok();
}

Status append_element(std::string& out, DataType t, const json& e, std::string_view input) {
    switch (t) {
        case DataType::kBool:
            if (!e.is_boolean()) return invalid_argument("{}: expected true or false, got {}", input, shown(e));
            out.push_back(e.get<bool>() ? 1 : 0);
            return Status::ok();
        case DataType::kUint8: return append_integer<uint8_t>(out, e, input);
        case DataType::kUint16: return append_integer<uint16_t>(out, e, input);
        case DataType::kUint32: return append_integer<uint32_t>(out, e, input);
        case DataType::kUint64: return append_integer<uint64_t>(out, e, input);
        case DataType::kInt8: return append_integer<int8_t>(out, e, input);
        case DataType::kInt16: return append_integer<int16_t>(out, e, input);
        case DataType::kInt32: return append_integer<int32_t>(out, e, input);
        case DataType::kInt64: return append_integer<int64_t>(out, e, input);
        case DataType::kFp32:
        case DataType::kFp64: {
            if (!e.is_number()) return invalid_argument("{}: expected a number, got {}", input, shown(e));
            double d = e.get<double>();
            if (t == DataType::kFp32) append_pod<float>(out, static_cast<float>(d));
            else append_pod<double>(out, d);
            return Status::ok();
        }
        case DataType::kBytes: {
            if (!e.is_string()) return invalid_argument("{}: expected a string for BYTES, got {}", input, shown(e));
            const auto& s = e.get_ref<const std::string&>();
            append_pod<uint32_t>(out, static_cast<uint32_t>(s.size()));
            out.append(s);
            return Status::ok();
        }
        default:
            return invalid_argument("{}: datatype {} cannot be sent as JSON; use the binary tensor data extension",
                                    input, datatype_name(t));
    }
}

// Flattens nested arrays (row-major) into `out`, counting elements.
Status append_json_data(std::string& out, int64_t* count, DataType t, const json& data, std::string_view input) {
    if (data.is_array()) {
        for (const auto& e : data) STRATO_RETURN_IF_ERROR(append_json_data(out, count, t, e, input));
        return Status::ok();
    }
    ++*count;
    return append_element(out, t, data, input);
}

Result<std::vector<int64_t>> parse_shape(const json& j, std::string_view what) {
    if (!j.is_array()) return invalid_argument("{}: 'shape' must be an array of integers", what);
    std::vector<int64_t> shape;
    for (const auto& d : j) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0)
            return invalid_argument("{}: 'shape' must hold non-negative integers, got {}", what, j.dump());
        shape.push_back(d.get<int64_t>());
    }
    if (shape_numel(shape) < 0) return invalid_argument("{}: shape {} is too large", what, j.dump());
    return shape;
}

Result<int64_t> binary_size_param(const json& params, std::string_view what) {
    if (!params.is_object()) return int64_t{-1};
    auto it = params.find("binary_data_size");
    if (it == params.end()) return int64_t{-1};
    if (!it->is_number_unsigned()) return invalid_argument("{}: 'binary_data_size' must be a non-negative integer", what);
    // (2^63 and more wrapped negative and read as "no binary_data_size")
    if (it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return invalid_argument("{}: 'binary_data_size' {} is larger than any request body", what, it->get<uint64_t>());
    return static_cast<int64_t>(it->get<uint64_t>());
}

// Element bytes implied by the shape; -1 for BYTES.
int64_t expected_bytes(const Tensor& t) {
    if (t.dtype == DataType::kBytes) return -1;
    return t.numel() * static_cast<int64_t>(datatype_size(t.dtype));
}

Status check_tensor_data(const Tensor& t, std::string_view kind) {
    int64_t want = expected_bytes(t);
    if (want >= 0) {
        if (static_cast<int64_t>(t.data.size()) != want)
            return invalid_argument("{} '{}': shape {} of {} needs {} bytes, got {}", kind, t.name, shape_string(t.shape),
                                    datatype_name(t.dtype), want, t.data.size());
        return Status::ok();
    }
    int64_t n = count_bytes_elements(t.data);
    if (n < 0) return invalid_argument("{} '{}': malformed BYTES data (a length prefix runs past the end)", kind, t.name);
    if (n != t.numel())
        return invalid_argument("{} '{}': shape {} has {} elements, got {}", kind, t.name, shape_string(t.shape), t.numel(), n);
    return Status::ok();
}

Status parse_request_parameters(const json& params, InferRequest* req) {
    if (!params.is_object()) return invalid_argument("request 'parameters' must be an object");
    for (auto it = params.begin(); it != params.end(); ++it) {
        const std::string& k = it.key();
        if (k.rfind("triton_", 0) == 0)
            return invalid_argument("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified");
        const json& v = it.value();
        if (!(v.is_string() || v.is_number() || v.is_boolean()))
            return invalid_argument("parameter '{}' must be a string, number or boolean", k);
        if (k == "binary_data_output") {
            if (!v.is_boolean()) return invalid_argument("parameter 'binary_data_output' must be a boolean");
            req->binary_output = v.get<bool>();
        } else if (k == "timeout") {
            if (!v.is_number_unsigned()) return invalid_argument("parameter 'timeout' must be a non-negative integer (microseconds)");
            req->timeout_us = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), uint64_t{1} << 62));
        } else if (k == "priority") {
            if (!v.is_number_unsigned()) return invalid_argument("parameter 'priority' must be a non-negative integer");
            req->priority = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), 1u << 30));
        } else if (k == "sequence_id" || k == "sequence_start" || k == "sequence_end") {
            return Status{StatusCode::kUnimplemented, fmt::format("parameter '{}': sequence batching is not supported", k)};
        }
    }
    req->parameters = params;
    return Status::ok();
}

void write_float(fmt::memory_buffer& out, double v, bool single) {
    if (!std::isfinite(v)) {
        fmt::format_to(std::back_inserter(out), "null");
    } else if (single) {
        fmt::format_to(std::back_inserter(out), "{}", static_cast<float>(v));
    } else {
        fmt::format_to(std::back_inserter(out), "{}", v);
    }
}

template <typename T>
T load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Writes the elements of a tensor as a flat JSON array.
void write_json_data(fmt::memory_buffer& out, const Tensor& t) {
    auto it = std::back_inserter(out);
    out.push_back('[');
    const char* p = t.data.data();
    size_t n = t.data.size();
    size_t es = datatype_size(t.dtype);
    if (t.dtype == DataType::kBytes) {
        size_t pos = 0;
        bool first = true;
        while (pos + 4 <= n) {
            uint32_t len = load<uint32_t>(p + pos);
            pos += 4;
            len = static_cast<uint32_t>(std::min<size_t>(len, n - pos));
            if (!first) out.push_back(',');
            first = false;
            std::string q = json_quote(std::string_view(p + pos, len));
            out.append(q.data(), q.data() + q.size());
            pos += len;
        }
    } else {
        for (size_t i = 0; es && i + es <= n; i += es) {
            if (i) out.push_back(',');
            const char* e = p + i;
            switch (t.dtype) {
                case DataType::kBool: fmt::format_to(it, "{}", *e ? "true" : "false"); break;
                case DataType::kUint8: fmt::format_to(it, "{}", load<uint8_t>(e)); break;
                case DataType::kUint16: fmt::format_to(it, "{}", load<uint16_t>(e)); break;
                case DataType::kUint32: fmt::format_to(it, "{}", load<uint32_t>(e)); break;
                case DataType::kUint64: fmt::format_to(it, "{}", load<uint64_t>(e)); break;
                case DataType::kInt8: fmt::format_to(it, "{}", load<int8_t>(e)); break;
                case DataType::kInt16: fmt::format_to(it, "{}", load<int16_t>(e)); break;
                case DataType::kInt32: fmt::format_to(it, "{}", load<int32_t>(e)); break;
                case DataType::kInt64: fmt::format_to(it, "{}", load<int64_t>(e)); break;
                case DataType::kFp32: write_float(out, load<float>(e), true); break;
                case DataType::kFp64: write_float(out, load<double>(e), false); break;
                default: fmt::format_to(it, "null"); break;  // FP16/BF16 always go binary
            }
        }
    }
    out.push_back(']');
}

bool json_encodable(DataType t) { return t != DataType::kFp16 && t != DataType::kBf16; }

}  // namespace

std::string json_quote(std::string_view s) {
    return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<size_t> parse_header_length(std::string_view value, size_t body_size) {
    size_t n = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || p != value.data() + value.size() || value.empty())
        return invalid_argument("Inference-Header-Content-Length must be a non-negative integer, got '{}'", value);
    if (n > body_size)
        return invalid_argument("Inference-Header-Content-Length {} is larger than the body ({} bytes)", n, body_size);
    return n;
}

Result<InferRequest> decode_infer_request(std::string_view body, std::optional<size_t> header_length) {
    InferRequest req;
    if (header_length && *header_length == 0) {
        req.raw = true;
        Tensor t;
        t.data.assign(body.data(), body.size());
        req.inputs.push_back(std::move(t));
        req.binary_output = true;
        return req;
    }
    size_t hl = header_length.value_or(body.size());
    if (hl > body.size()) return invalid_argument("Inference-Header-Content-Length {} is larger than the body", hl);
    // Binary tensors sent without the header that says where the JSON ends (a client's usual
    // mistake) read as "binary_data_size runs past the end of the body (0 binary bytes left)".
    if (size_t nul = body.find('\0'); !header_length && nul != std::string_view::npos)
        return invalid_argument(
            "the request body holds a NUL byte at byte {} but no Inference-Header-Content-Length "
            "header: binary tensor data after the JSON needs that header (the JSON's length in bytes)",
            nul);
    STRATO_ASSIGN_OR_RETURN(json j, parse_json(body.substr(0, hl), header_length ? "JSON header" : "request body"));
    if (!j.is_object()) return invalid_argument("the request body must be a JSON object");
    std::string_view binary = body.substr(hl);
    size_t binary_pos = 0;

    if (auto it = j.find("id"); it != j.end()) {
        if (!it->is_string()) return invalid_argument("request 'id' must be a string");
        req.id = it->get<std::string>();
    }
    if (auto it = j.find("parameters"); it != j.end()) STRATO_RETURN_IF_ERROR(parse_request_parameters(*it, &req));

    auto inputs = j.find("inputs");
    if (inputs == j.end() || !inputs->is_array()) return invalid_argument("the request needs an 'inputs' array");
    std::unordered_set<std::string> input_names;  // (a scan per input made 100k inputs take 22 s)
    for (size_t i = 0; i < inputs->size(); ++i) {
        const json& in = (*inputs)[i];
        std::string what = fmt::format("inputs[{}]", i);
        if (!in.is_object()) return invalid_argument("{} must be an object", what);
        Tensor t;
        auto name = in.find("name");
        if (name == in.end() || !name->is_string()) return invalid_argument("{} needs a string 'name'", what);
        t.name = name->get<std::string>();
        what = fmt::format("input '{}'", t.name);
        if (!input_names.insert(t.name).second) return invalid_argument("input '{}' is given twice", t.name);
        auto dt = in.find("datatype");
        if (dt == in.end() || !dt->is_string()) return invalid_argument("{} needs a string 'datatype'", what);
        t.dtype = parse_datatype(dt->get<std::string>());
        if (t.dtype == DataType::kInvalid)
            return invalid_argument("{}: unknown datatype '{}' (expected BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BF16 or BYTES)",
                                    what, dt->get<std::string>());
        auto shape = in.find("shape");
        if (shape == in.end()) return invalid_argument("{} needs a 'shape'", what);
        STRATO_ASSIGN_OR_RETURN(t.shape, parse_shape(*shape, what));
        int64_t bsize = -1;
        if (auto p = in.find("parameters"); p != in.end()) {
            if (!p->is_object()) return invalid_argument("{}: 'parameters' must be an object", what);
            if (p->contains("shared_memory_region"))
                return Status{StatusCode::kUnimplemented, fmt::format("{}: shared memory inputs are not supported", what)};
            STRATO_ASSIGN_OR_RETURN(bsize, binary_size_param(*p, what));
        }
        auto data = in.find("data");
        if (bsize >= 0) {
            if (data != in.end()) return invalid_argument("{} has both 'data' and 'binary_data_size'", what);
            if (static_cast<uint64_t>(bsize) > binary.size() - binary_pos)
                return invalid_argument("{}: binary_data_size {} runs past the end of the body ({} binary bytes left)",
                                        what, bsize, binary.size() - binary_pos);
            t.data.assign(binary.data() + binary_pos, static_cast<size_t>(bsize));
            binary_pos += static_cast<size_t>(bsize);
        } else {
            if (data == in.end()) return invalid_argument("{} has neither 'data' nor 'binary_data_size'", what);
            if (!json_encodable(t.dtype))
                return invalid_argument("{}: datatype {} cannot be sent as JSON; use the binary tensor data extension",
                                        what, datatype_name(t.dtype));
            int64_t count = 0;
            size_t es = std::max<size_t>(datatype_size(t.dtype), 1);
            // Reserve only what a request could plausibly hold: the shape is the client's claim and
            // is checked against the data below (a fuzzer found [888888888880] with 2 elements).
            if (t.numel() > 0 && static_cast<uint64_t>(t.numel()) <= (uint64_t{64} << 20) / es) t.data.reserve(t.numel() * es);
            STRATO_RETURN_IF_ERROR(append_json_data(t.data, &count, t.dtype, *data, what));
            if (count != t.numel())
                return invalid_argument("{}: shape {} has {} elements but 'data' holds {}", what, shape_string(t.shape), t.numel(), count);
        }
        STRATO_RETURN_IF_ERROR(check_tensor_data(t, "input"));
        req.inputs.push_back(std::move(t));
    }
    if (binary_pos != binary.size())
        return invalid_argument("the body has {} bytes after the JSON header that no input's binary_data_size accounts for",
                                binary.size() - binary_pos);

    if (auto outs = j.find("outputs"); outs != j.end()) {
        if (!outs->is_array()) return invalid_argument("request 'outputs' must be an array");
        std::unordered_set<std::string> output_names;
        for (size_t i = 0; i < outs->size(); ++i) {
            const json& o = (*outs)[i];
            if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
                return invalid_argument("outputs[{}] needs a string 'name'", i);
            RequestedOutput r;
            r.name = o["name"].get<std::string>();
            r.binary = req.binary_output;
            if (!output_names.insert(r.name).second) return invalid_argument("output '{}' is requested twice", r.name);
            if (auto p = o.find("parameters"); p != o.end()) {
                if (!p->is_object()) return invalid_argument("output '{}': 'parameters' must be an object", r.name);
                if (p->contains("shared_memory_region"))
                    return Status{StatusCode::kUnimplemented, fmt::format("output '{}': shared memory outputs are not supported", r.name)};
                if (auto b = p->find("binary_data"); b != p->end()) {
                    if (!b->is_boolean()) return invalid_argument("output '{}': 'binary_data' must be a boolean", r.name);
                    r.binary = b->get<bool>();
                }
                if (auto c = p->find("classification"); c != p->end()) {
                    if (!c->is_number_unsigned() || c->get<uint64_t>() == 0 || c->get<uint64_t>() > 1u << 20)
                        return invalid_argument("output '{}': 'classification' must be a positive integer", r.name);
                    r.classification = static_cast<int64_t>(c->get<uint64_t>());
                }
            }
            req.outputs.push_back(std::move(r));
        }
    }
    return req;
}

EncodedBody encode_infer_response(const InferResponse& r) {
    fmt::memory_buffer out;
    auto it = std::back_inserter(out);
    fmt::format_to(it, R"({{"model_name":{},"model_version":{})", json_quote(r.model_name), json_quote(r.model_version));
    if (!r.id.empty()) fmt::format_to(it, R"(,"id":{})", json_quote(r.id));
    fmt::format_to(it, R"(,"outputs":[)");
    bool any_binary = false;
    for (size_t i = 0; i < r.outputs.size(); ++i) {
        const Tensor& t = r.outputs[i];
        bool bin = (i < r.binary.size() && r.binary[i]) || !json_encodable(t.dtype);
        if (i) out.push_back(',');
        fmt::format_to(it, R"({{"name":{},"datatype":"{}","shape":{})", json_quote(t.name), datatype_name(t.dtype),
                       shape_string(t.shape));
        if (bin) {
            any_binary = true;
            fmt::format_to(it, R"(,"parameters":{{"binary_data_size":{}}}}})", t.data.size());
        } else {
            fmt::format_to(it, R"(,"data":)");
            write_json_data(out, t);
            out.push_back('}');
        }
    }
    fmt::format_to(it, "]}}");
    EncodedBody e;
    e.body.assign(out.data(), out.size());
    e.header_length = e.body.size();
    e.has_binary = any_binary;
    if (any_binary) {
        for (size_t i = 0; i < r.outputs.size(); ++i) {
            bool bin = (i < r.binary.size() && r.binary[i]) || !json_encodable(r.outputs[i].dtype);
            if (bin) e.body += r.outputs[i].data;
        }
    }
    return e;
}

EncodedBody encode_infer_request(const InferRequest& r, bool binary_inputs) {
    json j = json::object();
    if (!r.id.empty()) j["id"] = r.id;
    json params = r.parameters.is_object() ? r.parameters : json::object();
    if (r.binary_output) params["binary_data_output"] = true;
    if (r.timeout_us > 0) params["timeout"] = r.timeout_us;
    if (!params.empty()) j["parameters"] = params;
    json inputs = json::array();
    std::string tail;
    for (const auto& t : r.inputs) {
        json in = {{"name", t.name}, {"datatype", std::string(datatype_name(t.dtype))}, {"shape", t.shape}};
        if (binary_inputs || !json_encodable(t.dtype)) {
            in["parameters"] = {{"binary_data_size", t.data.size()}};
            tail += t.data;
        } else {
            fmt::memory_buffer buf;
            write_json_data(buf, t);
            in["data"] = json::parse(buf.data(), buf.data() + buf.size());
        }
        inputs.push_back(std::move(in));
    }
    j["inputs"] = std::move(inputs);
    if (!r.outputs.empty()) {
        json outs = json::array();
        for (const auto& o : r.outputs) {
            json oj = {{"name", o.name}};
            json p = json::object();
            if (o.binary) p["binary_data"] = true;
            if (o.classification > 0) p["classification"] = o.classification;
            if (!p.empty()) oj["parameters"] = p;
            outs.push_back(std::move(oj));
        }
        j["outputs"] = std::move(outs);
    }
    EncodedBody e;
    e.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
    e.header_length = e.body.size();
    e.has_binary = !tail.empty();
    e.body += tail;
    return e;
}

Result<InferResponse> decode_infer_response(std::string_view body, std::optional<size_t> header_length) {
    size_t hl = header_length.value_or(body.size());
    if (hl > body.size()) return invalid_argument("Inference-Header-Content-Length {} is larger than the body", hl);
    STRATO_ASSIGN_OR_RETURN(json j, parse_json(body.substr(0, hl), "response body"));
    if (!j.is_object()) return invalid_argument("the response body must be a JSON object");
    if (j.contains("error")) return invalid_argument("the server answered an error: {}", j["error"].dump());
    InferResponse r;
    r.model_name = j.value("model_name", "");
    r.model_version = j.value("model_version", "");
    r.id = j.value("id", "");
    std::string_view binary = body.substr(hl);
    size_t pos = 0;
    auto outs = j.find("outputs");
    if (outs == j.end() || !outs->is_array()) return invalid_argument("the response has no 'outputs' array");
    for (const auto& o : *outs) {
        if (!o.is_object()) return invalid_argument("a response output is not an object");
        Tensor t;
        t.name = o.value("name", "");
        t.dtype = parse_datatype(o.value("datatype", ""));
        if (t.dtype == DataType::kInvalid) return invalid_argument("output '{}' has an unknown datatype", t.name);
        STRATO_ASSIGN_OR_RETURN(t.shape, parse_shape(o.value("shape", json::array()), "output '" + t.name + "'"));
        STRATO_ASSIGN_OR_RETURN(int64_t bsize, binary_size_param(o.value("parameters", json::object()), "output"));
        if (bsize >= 0) {
            if (static_cast<uint64_t>(bsize) > binary.size() - pos)
                return invalid_argument("output '{}': binary_data_size runs past the end of the body", t.name);
            t.data.assign(binary.data() + pos, static_cast<size_t>(bsize));
            pos += static_cast<size_t>(bsize);
            r.binary.push_back(true);
        } else {
            int64_t count = 0;
            STRATO_RETURN_IF_ERROR(
                append_json_data(t.data, &count, t.dtype, o.value("data", json::array()), fmt::format("output '{}'", t.name)));
            r.binary.push_back(false);
        }
        STRATO_RETURN_IF_ERROR(check_tensor_data(t, "output"));
        r.outputs.push_back(std::move(t));
    }
    return r;
}

Result<Tensor> classify(const Tensor& scores, int64_t n, bool batched, const std::vector<std::string>& labels) {
    // Triton's types and text: floats as C's "%f" (six decimals), integers as they are.
    const DataType dt = scores.dtype;
    const bool floating = dt == DataType::kFp32 || dt == DataType::kFp64;
    const bool integral = dt == DataType::kInt8 || dt == DataType::kInt16 || dt == DataType::kInt32 ||
                          dt == DataType::kInt64 || dt == DataType::kUint8 || dt == DataType::kUint16 ||
                          dt == DataType::kUint32 || dt == DataType::kUint64;
    if (!floating && !integral)
        return invalid_argument("output '{}': classification needs numeric scores (FP32, FP64 or an integer type), the "
                                "output is {}", scores.name, datatype_name(dt));
    if (scores.shape.empty() || (batched && scores.shape.size() != 2) || (!batched && scores.shape.size() != 1))
        return invalid_argument("output '{}': classification needs a vector of class scores per row, got shape {}",
                                scores.name, shape_string(scores.shape));
    int64_t rows = batched ? scores.shape[0] : 1;
    int64_t classes = scores.shape.back();
    int64_t k = std::min(n, classes);
    size_t es = datatype_size(dt);
    // One score: a double to rank by (exact for the integers a class score holds in practice) and its text.
    auto score = [dt](const char* p, std::string* text) -> double {
        auto integer = [text](auto v) {
            *text = fmt::format("{}", v);
            return static_cast<double>(v);
        };
        switch (dt) {
            case DataType::kFp32: *text = fmt::format("{:f}", static_cast<double>(load<float>(p))); return load<float>(p);
            case DataType::kFp64: *text = fmt::format("{:f}", load<double>(p)); return load<double>(p);
            case DataType::kInt8: return integer(static_cast<int>(load<int8_t>(p)));
            case DataType::kInt16: return integer(load<int16_t>(p));
            case DataType::kInt32: return integer(load<int32_t>(p));
            case DataType::kInt64: return integer(load<int64_t>(p));
            case DataType::kUint8: return integer(static_cast<unsigned>(load<uint8_t>(p)));
            case DataType::kUint16: return integer(load<uint16_t>(p));
            case DataType::kUint32: return integer(load<uint32_t>(p));
            default: return integer(load<uint64_t>(p));
        }
    };
    Tensor out;
    out.name = scores.name;
    out.dtype = DataType::kBytes;
    out.shape = batched ? std::vector<int64_t>{rows, k} : std::vector<int64_t>{k};
    std::vector<int64_t> idx(static_cast<size_t>(classes));
    std::vector<double> v(static_cast<size_t>(classes));
    std::vector<std::string> text(static_cast<size_t>(classes));
    for (int64_t r = 0; r < rows; ++r) {
        const char* row = scores.data.data() + r * classes * es;
        for (int64_t c = 0; c < classes; ++c) v[c] = score(row + c * es, &text[c]);
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
        for (int64_t i = 0; i < k; ++i) {
            int64_t c = idx[i];
            std::string s = fmt::format("{}:{}", text[c], c);
            if (c < static_cast<int64_t>(labels.size())) s += ":" + labels[c];
            append_pod<uint32_t>(out.data, static_cast<uint32_t>(s.size()));
            out.data += s;
        }
    }
    return out;
}

}  // namespace strato::serve
