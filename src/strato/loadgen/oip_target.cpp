#include "strato/loadgen/oip_target.h"

#include <strings.h>

#include <algorithm>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>

#include "strato/core/fs.h"
#include "strato/core/json_depth.h"
#include "strato/serve/protocol/codec.h"

namespace strato::loadgen {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using serve::DataType;
using serve::Tensor;

Result<HttpReply> http_request(const Url& base, std::string_view method, const std::string& target,
                               std::string_view body, int64_t timeout_ms, const std::vector<std::string>& extra,
                               const std::function<bool()>& cancelled) {
    Url url = base;
    url.target = target;
    std::vector<std::string> headers = extra;
    bool typed = std::any_of(extra.begin(), extra.end(), [](const std::string& h) {
        return h.size() > 13 && strncasecmp(h.c_str(), "content-type:", 13) == 0;
    });
    if (!body.empty() && !typed) headers.emplace_back("Content-Type: application/json");
    std::string request = build_request(url, method, headers, body);
    asio::io_context io;
    tcp::socket sock(io);
    tcp::resolver resolver(io);
    ResponseParser parser;
    parser.keep_body(true);
    parser.answers_head(method == "HEAD");  // a Content-Length and no body: else it waits out the timeout
    std::array<char, 16384> buf{};
    boost::system::error_code error;
    bool finished = false, too_big = false;
    // The reply is kept whole: an endless body held 1.3 GB before the timeout.
    constexpr size_t kMaxReply = 64 << 20;
    size_t received = 0;
    std::function<void()> read_more = [&] {
        sock.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
            if ((received += n) > kMaxReply) {
                too_big = finished = true;
                return;
            }
            parser.feed(buf.data(), n);
            if (ec == asio::error::eof) parser.finish_on_eof();
            if (parser.done() || parser.failed() || ec) {
                // (a close mid-reply: the parser's reason, "truncated body: ... 8 of the 500 bytes", not
                // the socket's bare "End of file")
                if (!parser.done() && !parser.failed() && ec) error = ec;
                finished = true;
                return;
            }
            read_more();
        });
    };
    resolver.async_resolve(url.host, std::to_string(url.port), [&](boost::system::error_code ec, auto results) {
        if (ec) {
            error = ec;
            finished = true;
            return;
        }
        asio::async_connect(sock, results, [&](boost::system::error_code ec2, const tcp::endpoint&) {
            if (ec2) {
                error = ec2;
                finished = true;
                return;
            }
            asio::async_write(sock, asio::buffer(request), [&](boost::system::error_code ec3, size_t) {
                if (ec3) {
                    error = ec3;
                    finished = true;
                }
            });
            read_more();
        });
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (auto now = std::chrono::steady_clock::now(); !finished && !io.stopped() && now < deadline;
         now = std::chrono::steady_clock::now()) {
        if (cancelled && cancelled())
            return Status(StatusCode::kCancelled, fmt::format("{} http://{}{}: interrupted", method, url.host_header, target));
        io.run_for(std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(50)));
    }
    if (!finished)
        return Status(StatusCode::kUnavailable, fmt::format("{} http://{}{}: no answer within {} ms", method,
                                                            url.host_header, target, timeout_ms));
    if (too_big)
        return Status(StatusCode::kUnavailable, fmt::format("{} http://{}{}: the reply is larger than {} MiB", method,
                                                            url.host_header, target, kMaxReply >> 20));
    if (error)
        return Status(StatusCode::kUnavailable,
                      fmt::format("{} http://{}{}: {}", method, url.host_header, target, error.message()));
    if (parser.failed())
        return Status(StatusCode::kUnavailable,
                      fmt::format("{} http://{}{}: bad response: {}", method, url.host_header, target, parser.error()));
    return HttpReply{parser.status(), parser.body(), parser.headers()};
}

namespace {

// A model name or version as one path segment: bytes other than RFC 3986's unreserved ones
// percent-encoded (strato serve and Triton decode them). A space ended the request line early (the
// server's 400), a '?' or '/' moved the name's end, and a CR/LF sent a header of its own.
std::string path_segment(std::string_view name) {
    std::string out;
    for (const char ch : name) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') out += ch;
        else out += fmt::format("%{:02X}", c);
    }
    return out;
}

std::string model_path(const std::string& model, const std::string& version) {
    std::string p = "/v2/models/" + path_segment(model);
    if (!version.empty()) p += "/versions/" + path_segment(version);
    return p;
}

std::string model_path(const InferTargetOptions& o) { return model_path(o.model, o.version); }

Result<json> get_json(const Url& base, const std::string& target, const std::vector<std::string>& headers,
                      const std::function<bool()>& cancelled = {}) {
    STRATO_ASSIGN_OR_RETURN(auto reply, http_request(base, "GET", target, {}, 5000, headers, cancelled));
    json j = parse_json_bounded(reply.body);
    if (reply.status != 200) {
        std::string why = j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>()
                                                                                          : reply.body.substr(0, 200);
        // One line: a gateway's HTML error page came out as a dozen lines of markup.
        for (char& c : why)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
        why.erase(std::unique(why.begin(), why.end(), [](char a, char b) { return a == ' ' && b == ' '; }), why.end());
        // A redirect (an ingress sending http to https) said "answered 301: " and nothing more.
        if (reply.status >= 300 && reply.status < 400)
            for (const auto& [name, value] : reply.headers)
                if (strcasecmp(name.c_str(), "location") == 0)
                    why = fmt::format("a redirect to {} (not followed: give that server's URL; strato speaks plain "
                                      "http://){}{}", value.substr(0, 200), why.empty() ? "" : "; ", why);
        return Status(reply.status == 404 || reply.status == 400 ? StatusCode::kNotFound : StatusCode::kUnavailable,
                      fmt::format("GET {} answered {}: {}", target, reply.status, why));
    }
    if (j.is_discarded() || !j.is_object()) return invalid_argument("GET {}: the answer is not a JSON object", target);
    return j;
}

struct InputSpec {
    std::string name;
    DataType dtype = DataType::kInvalid;
    std::vector<int64_t> shape;  // full request shape, batch included when the model batches
    std::vector<int64_t> declared;  // the shape in the model's metadata (-1: variable)
};

// One sample's data source for every input: returns the bytes of input i for variant v.
using Filler = std::function<Result<std::string>(const InputSpec&, int variant)>;

std::string random_bytes_elements(int64_t n, int64_t len, std::mt19937_64& rng, bool zero) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) {
        auto l = static_cast<uint32_t>(len);
        out.append(reinterpret_cast<const char*>(&l), 4);
        for (int64_t k = 0; k < len; ++k) out.push_back(zero ? '0' : static_cast<char>('a' + rng() % 26));
    }
    return out;
}

template <class T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Converts a double to the wire element of `t`, appended little-endian.
void put_number(std::string& out, DataType t, double v) {
    switch (t) {
        case DataType::kBool: put<uint8_t>(out, v != 0); break;
        case DataType::kUint8: put<uint8_t>(out, static_cast<uint8_t>(v)); break;
        case DataType::kUint16: put<uint16_t>(out, static_cast<uint16_t>(v)); break;
        case DataType::kUint32: put<uint32_t>(out, static_cast<uint32_t>(v)); break;
        case DataType::kUint64: put<uint64_t>(out, static_cast<uint64_t>(v)); break;
        case DataType::kInt8: put<int8_t>(out, static_cast<int8_t>(v)); break;
        case DataType::kInt16: put<int16_t>(out, static_cast<int16_t>(v)); break;
        case DataType::kInt32: put<int32_t>(out, static_cast<int32_t>(v)); break;
        case DataType::kInt64: put<int64_t>(out, static_cast<int64_t>(v)); break;
        case DataType::kFp32: put<float>(out, static_cast<float>(v)); break;
        case DataType::kFp64: put<double>(out, v); break;
        case DataType::kFp16:
        case DataType::kBf16: {
            float f = static_cast<float>(v);
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            if (t == DataType::kBf16) {
                put<uint16_t>(out, static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16));
            } else {  // fp16, round to nearest; the generated values are small and finite
                uint32_t sign = (bits >> 16) & 0x8000;
                int exp = static_cast<int>((bits >> 23) & 0xFF) - 127 + 15;
                uint32_t mant = bits & 0x7FFFFF;
                uint16_t h = exp <= 0 ? static_cast<uint16_t>(sign)
                             : exp >= 31
                                 ? static_cast<uint16_t>(sign | 0x7C00)
                                 : static_cast<uint16_t>(sign | (exp << 10) | ((mant + 0x1000) >> 13));
                put<uint16_t>(out, h);
            }
            break;
        }
        default: break;
    }
}

Result<std::string> read_maybe_gzip(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) return not_found("input data file '{}' cannot be opened", path);
    std::string out;
    char buf[65536];
    int n;
    while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    bool bad = n < 0;
    gzclose(f);
    if (bad) return data_loss("input data file '{}': truncated or corrupt gzip", path);
    return out;
}

// IDX (MNIST-style) uint8 files: magic 0x0000080N, N big-endian dims, then the bytes.
Result<Filler> idx_filler(const std::string& path, const std::vector<InputSpec>& inputs, int64_t batch) {
    if (inputs.size() != 1) return invalid_argument("input data '{}': IDX files feed one-input models; this one has {}", path, inputs.size());
    STRATO_ASSIGN_OR_RETURN(auto raw, read_maybe_gzip(path));
    auto u32 = [&](size_t off) {
        return (uint32_t{static_cast<uint8_t>(raw[off])} << 24) | (uint32_t{static_cast<uint8_t>(raw[off + 1])} << 16) |
               (uint32_t{static_cast<uint8_t>(raw[off + 2])} << 8) | uint32_t{static_cast<uint8_t>(raw[off + 3])};
    };
    if (raw.size() < 8 || raw[0] != 0 || raw[1] != 0 || raw[2] != 8 || raw[3] < 1 || raw[3] > 4)
        return invalid_argument("input data '{}': not an IDX file of unsigned bytes (magic 0x000008NN)", path);
    int ndim = raw[3];
    size_t header = 4 + 4 * static_cast<size_t>(ndim);
    if (raw.size() < header) return data_loss("input data '{}': truncated IDX header", path);
    int64_t count = u32(4), sample = 1;
    for (int d = 1; d < ndim; ++d) sample *= u32(4 + 4 * static_cast<size_t>(d));
    if (count == 0 || sample == 0)
        return invalid_argument("input data '{}': the IDX file holds no samples ({} of {} bytes)", path, count, sample);
    if (static_cast<int64_t>(raw.size() - header) < count * sample)
        return data_loss("input data '{}': {} samples of {} bytes announced, {} bytes present", path, count, sample,
                         raw.size() - header);
    const InputSpec& in = inputs[0];
    int64_t per_row = serve::shape_numel(in.shape) / batch;
    if (per_row != sample)
        return invalid_argument("input data '{}': samples have {} values, input '{}' {} takes {} per row", path, sample,
                                in.name, serve::shape_string(in.shape), per_row);
    bool scale = in.dtype == DataType::kFp32 || in.dtype == DataType::kFp64 || in.dtype == DataType::kFp16 ||
                 in.dtype == DataType::kBf16;
    auto data = std::make_shared<std::string>(std::move(raw));
    return Filler([data, header, count, sample, batch, scale](const InputSpec& spec, int variant) -> Result<std::string> {
        std::string out;
        for (int64_t r = 0; r < batch; ++r) {
            int64_t idx = (static_cast<int64_t>(variant) * batch + r) % count;
            const auto* p = reinterpret_cast<const uint8_t*>(data->data() + header + idx * sample);
            for (int64_t k = 0; k < sample; ++k) put_number(out, spec.dtype, scale ? p[k] / 255.0 : p[k]);
        }
        return out;
    });
}

// The values of a (nested) JSON array in order. (json::flatten() keys them "/0", "/1", "/10", ...
// and iterates them sorted as text: an image of 784 values went out scrambled.)
void json_leaves(const json& v, std::vector<const json*>* out) {
    if (!v.is_array()) return out->push_back(&v);
    for (const auto& e : v) json_leaves(e, out);
}

// A data file's number as the wire element of `t`: integers exactly, and only whole numbers in the
// type's range (300 as INT8 went out as 44, 3e9 as INT32 as -2147483648). The reason when not.
std::optional<std::string> put_json_number(std::string& out, DataType t, const json& v) {
    if (v.is_boolean()) {
        put_number(out, t, v.get<bool>() ? 1.0 : 0.0);
        return std::nullopt;
    }
    double lo = 0, hi = 0;  // the integer type's range, [lo, hi)
    switch (t) {
        case DataType::kBool: lo = 0, hi = 2; break;
        case DataType::kUint8: lo = 0, hi = 0x1p8; break;
        case DataType::kUint16: lo = 0, hi = 0x1p16; break;
        case DataType::kUint32: lo = 0, hi = 0x1p32; break;
        case DataType::kUint64: lo = 0, hi = 0x1p64; break;
        case DataType::kInt8: lo = -0x1p7, hi = 0x1p7; break;
        case DataType::kInt16: lo = -0x1p15, hi = 0x1p15; break;
        case DataType::kInt32: lo = -0x1p31, hi = 0x1p31; break;
        case DataType::kInt64: lo = -0x1p63, hi = 0x1p63; break;
        default: put_number(out, t, v.get<double>()); return std::nullopt;  // (floating point)
    }
    // 64-bit integers written as integers are compared as integers (9223372036854775807 is 2^63 as
    // a double, past the range).
    if (t == DataType::kInt64 && v.is_number_unsigned()) {
        if (v.get<uint64_t>() > uint64_t{INT64_MAX}) return fmt::format("{} is not in the range of INT64", v.dump());
        put<int64_t>(out, static_cast<int64_t>(v.get<uint64_t>()));
        return std::nullopt;
    }
    if (t == DataType::kInt64 && v.is_number_integer()) {
        put<int64_t>(out, v.get<int64_t>());
        return std::nullopt;
    }
    if (t == DataType::kUint64 && v.is_number_unsigned()) {
        put<uint64_t>(out, v.get<uint64_t>());
        return std::nullopt;
    }
    const double d = v.get<double>();
    if (!(d >= lo && d < hi) || d != std::floor(d))
        return fmt::format("{} is not {} {}", v.dump(), v.is_number_integer() ? "in the range of" : "a whole number for",
                           datatype_name(t));
    put_number(out, t, d);
    return std::nullopt;
}

// perf_analyzer's input data JSON: {"data": [{"INPUT": [..] | {"content": [..], "shape": [..]}}, ...]}.
// A data file's shape for one input must be one the model takes: its metadata's rank, its fixed
// dimensions, and a batch in 1..max_batch_size when the model batches (otherwise every request
// of the run gets a 400 and the user learns it after the run).
static Status check_file_shape(const std::string& path, size_t sample, const InputSpec& in,
                               const std::vector<int64_t>& shape, int64_t max_batch) {
    auto refuse = [&](std::string_view why) {
        return invalid_argument("input data '{}': data[{}].{} has shape {}, but the model's input is {}{}: {}", path,
                                sample, in.name, serve::shape_string(shape), serve::shape_string(in.declared),
                                max_batch > 0 ? fmt::format(" (max_batch_size {})", max_batch) : "", why);
    };
    if (shape.size() != in.declared.size())
        return refuse(fmt::format("{} dimensions, expected {}", shape.size(), in.declared.size()));
    for (size_t i = 0; i < shape.size(); ++i) {
        if (max_batch > 0 && i == 0) {
            if (shape[0] < 1 || shape[0] > max_batch)
                return refuse(fmt::format("a batch of {}, expected 1..{}", shape[0], max_batch));
        } else if (shape[i] < 0) {
            return refuse(fmt::format("dimension {} is {}", i, shape[i]));
        } else if (in.declared[i] >= 0 && shape[i] != in.declared[i]) {
            return refuse(fmt::format("dimension {} is {}, expected {}", i, shape[i], in.declared[i]));
        }
    }
    return Status::ok();
}

Result<Filler> json_filler(const std::string& path, std::vector<InputSpec>& inputs, int64_t max_batch, int* variants) {
    STRATO_ASSIGN_OR_RETURN(auto text, fs::read_file(path));
    STRATO_ASSIGN_OR_RETURN(json j, parse_json_named(text, fmt::format("input data '{}'", path)));
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
        return invalid_argument("input data '{}': expected {{\"data\": [{{\"<input>\": [...]}}, ...]}} (perf_analyzer's format)", path);
    auto samples = std::make_shared<std::vector<std::map<std::string, Tensor>>>();
    for (size_t s = 0; s < j["data"].size(); ++s) {
        const json& entry = j["data"][s];
        if (!entry.is_object()) return invalid_argument("input data '{}': data[{}] is not an object", path, s);
        std::map<std::string, Tensor> sample;
        for (auto& in : inputs) {
            if (!entry.contains(in.name))
                return invalid_argument("input data '{}': data[{}] has no input '{}'", path, s, in.name);
            const json& v = entry[in.name];
            // (perf_analyzer's base64 form was refused as "not an array", which read as a broken file)
            if (v.is_object() && v.contains("b64") && !v.contains("content"))
                return invalid_argument("input data '{}': data[{}].{} gives \"b64\" content, which strato does not read; "
                                        "give the values as \"content\": [...]",
                                        path, s, in.name);
            const json& content = v.is_object() ? v.value("content", json()) : v;
            if (!content.is_array())
                return invalid_argument("input data '{}': data[{}].{} is not an array (expected [...] or "
                                        "{{\"content\": [...], \"shape\": [...]}})",
                                        path, s, in.name);
            Tensor t;
            t.name = in.name;
            t.dtype = in.dtype;
            t.shape = in.shape;
            if (v.is_object() && v.contains("shape")) {
                try {
                    t.shape = v["shape"].get<std::vector<int64_t>>();
                } catch (const json::exception&) {
                    return invalid_argument("input data '{}': data[{}].{}.shape is not a list of integers", path, s, in.name);
                }
                STRATO_RETURN_IF_ERROR(check_file_shape(path, s, in, t.shape, max_batch));
            } else {
                for (int64_t d : t.shape)
                    if (d < 0)
                        return invalid_argument("input data '{}': data[{}].{} gives no \"shape\" and the model's input {} "
                                                "has a variable dimension; add \"shape\": [...] to the sample or give "
                                                "--shape {}:d1,d2,...",
                                                path, s, in.name, serve::shape_string(in.declared), in.name);
            }
            std::vector<const json*> values;
            json_leaves(content, &values);
            int64_t want = serve::shape_numel(t.shape);
            if (static_cast<int64_t>(values.size()) != want)
                return invalid_argument("input data '{}': data[{}].{} has {} values, shape {} needs {}", path, s, in.name,
                                        values.size(), serve::shape_string(t.shape), want);
            for (size_t k = 0; k < values.size(); ++k) {
                const json& val = *values[k];
                if (in.dtype == DataType::kBytes) {
                    std::string str = val.is_string() ? val.get<std::string>() : val.dump();
                    auto len = static_cast<uint32_t>(str.size());
                    t.data.append(reinterpret_cast<const char*>(&len), 4);
                    t.data += str;
                } else if (val.is_number() || val.is_boolean()) {
                    if (auto why = put_json_number(t.data, in.dtype, val))
                        return invalid_argument("input data '{}': data[{}].{} value {}: {}", path, s, in.name, k, *why);
                } else {
                    return invalid_argument("input data '{}': data[{}].{} value {} is not a number: {}", path, s, in.name, k,
                                            val.dump().substr(0, 60));
                }
            }
            // Each request carries its input's one shape (sample 0's): a sample of another shape
            // went out under it and every such request got a 400.
            if (!samples->empty() && t.shape != (*samples)[0].at(in.name).shape)
                return invalid_argument("input data '{}': data[{}].{} has shape {}, data[0] has {}; every sample of an "
                                        "input must have one shape",
                                        path, s, in.name, serve::shape_string(t.shape),
                                        serve::shape_string((*samples)[0].at(in.name).shape));
            sample[in.name] = std::move(t);
        }
        samples->push_back(std::move(sample));
    }
    *variants = static_cast<int>(samples->size());
    // shapes may come from the file
    for (auto& in : inputs) in.shape = (*samples)[0][in.name].shape;
    return Filler([samples](const InputSpec& spec, int variant) -> Result<std::string> {
        return (*samples)[static_cast<size_t>(variant) % samples->size()].at(spec.name).data;
    });
}

}  // namespace

constexpr double kMaxInputElements = 1 << 28;  // 1 GiB of FP32 per input and request
constexpr double kMaxRequestBytes = double(1 << 30);  // per request body
constexpr double kMaxBodiesBytes = double(1 << 30);   // all the distinct bodies built ahead

static std::vector<std::string> shapes_of(const std::vector<InputSpec>& inputs) {
    std::vector<std::string> out;
    for (const auto& spec : inputs)
        out.push_back(fmt::format("{} {}{}", spec.name, serve::datatype_name(spec.dtype), serve::shape_string(spec.shape)));
    return out;
}

Result<Target> build_infer_target(const Url& base, const InferTargetOptions& o) {
    if (o.model.empty()) return invalid_argument("no model named (--model)");
    if (o.batch_size < 1) return invalid_argument("batch size must be >= 1, got {}", o.batch_size);
    STRATO_ASSIGN_OR_RETURN(auto meta, get_json(base, model_path(o), o.headers, o.interrupted));
    int64_t max_batch = 0;
    auto config = get_json(base, model_path(o) + "/config", o.headers, o.interrupted);
    if (!config.is_ok() && config.status().code() == StatusCode::kCancelled) return config.status();
    if (config.is_ok() && config->contains("max_batch_size")) {
        const json& mb = (*config)["max_batch_size"];
        if (!mb.is_number_integer() || mb.get<int64_t>() < 0)
            return invalid_argument("model '{}': the server's config has max_batch_size {}, expected a whole number >= 0",
                                    o.model, mb.dump());
        max_batch = mb.get<int64_t>();
    }
    if (o.batch_size > 1 && max_batch == 0)
        return invalid_argument("model '{}' does not batch (max_batch_size 0); use --batch-size 1", o.model);
    if (max_batch > 0 && o.batch_size > max_batch)
        return invalid_argument("batch size {} is above model '{}''s max_batch_size {}", o.batch_size, o.model, max_batch);
    if (!meta.contains("inputs") || !meta["inputs"].is_array() || meta["inputs"].empty())
        return invalid_argument("model '{}': metadata lists no inputs", o.model);
    std::vector<InputSpec> inputs;
    for (const auto& in : meta["inputs"]) {
        InputSpec spec;
        try {
            spec.name = in.at("name").get<std::string>();
            spec.dtype = serve::parse_datatype(in.at("datatype").get<std::string>());
            spec.shape = in.at("shape").get<std::vector<int64_t>>();
            spec.declared = spec.shape;
        } catch (const json::exception&) {
            return invalid_argument("model '{}': an input in the metadata lacks name, datatype or shape", o.model);
        }
        if (spec.dtype == DataType::kInvalid)
            return invalid_argument("model '{}' input '{}': unknown datatype", o.model, spec.name);
        if (auto it = o.shapes.find(spec.name); it != o.shapes.end()) {
            // --shape fills the variable dimensions: another rank, or another value for a fixed
            // dimension, got a 400 for every request of the run (--shape input:5,5 on [-1,1,28,28]).
            const auto& given = it->second;
            const size_t skip = max_batch > 0 ? 1 : 0;  // the batch dimension, not in --shape
            const std::string flag = fmt::format("--shape {}:{}", spec.name, fmt::join(given, ","));
            const std::string model_input = fmt::format("model '{}' input '{}' is {}{}", o.model, spec.name,
                                                        serve::shape_string(spec.declared),
                                                        skip ? " (the batch dimension first, not in --shape)" : "");
            if (spec.declared.size() != given.size() + skip)
                return invalid_argument("{}: {} dimension(s), but {}: expected {}", flag, given.size(), model_input,
                                        spec.declared.size() >= skip ? spec.declared.size() - skip : 0);
            for (size_t i = 0; i < given.size(); ++i)
                if (const int64_t fixed = spec.declared[i + skip]; fixed >= 0 && given[i] != fixed)
                    return invalid_argument("{}: dimension {} is {}, but {}, fixed at {} there", flag, i + 1, given[i],
                                            model_input, fixed);
            spec.shape = it->second;
            if (max_batch > 0) spec.shape.insert(spec.shape.begin(), o.batch_size);
        } else {
            if (max_batch > 0 && !spec.shape.empty()) spec.shape[0] = o.batch_size;
            // A perf_analyzer data file may give the shape per sample (checked as it is read).
            for (int64_t d : spec.shape)
                if (d < 0 && !o.input_data.ends_with(".json"))
                    return invalid_argument("model '{}' input '{}' has a variable dimension {}; give it with --shape {}:d1,d2,...",
                                            o.model, spec.name, serve::shape_string(spec.shape), spec.name);
        }
        // The shape comes from the server: a request of gigabytes (or an element count that
        // overflows) is a misconfigured model, not something to allocate.
        double elements = 1;
        for (int64_t d : spec.shape) elements *= static_cast<double>(std::max<int64_t>(d, 1));
        if (elements > kMaxInputElements)
            return invalid_argument("model '{}' input '{}' of shape {} has {:.3g} elements per request, more than the "
                                    "{:.3g} a load test sends; give a smaller one with --shape {}:d1,d2,...",
                                    o.model, spec.name, serve::shape_string(spec.shape), elements, kMaxInputElements,
                                    spec.name);
        inputs.push_back(std::move(spec));
    }
    for (const auto& [name, shape] : o.shapes) {
        bool known = std::any_of(inputs.begin(), inputs.end(), [&](const InputSpec& s) { return s.name == name; });
        if (!known) return invalid_argument("--shape names '{}', which is not an input of model '{}'", name, o.model);
    }

    // Bytes, not only elements: BYTES inputs carry --string-length each, and up to `variants`
    // bodies are built ahead (a server's [1, 100000] BYTES input at 1 MiB strings was 100 GB).
    double request_bytes = 0;
    for (const auto& spec : inputs) {
        double elements = 1;
        for (int64_t d : spec.shape) elements *= static_cast<double>(std::max<int64_t>(d, 1));
        const double each = spec.dtype == DataType::kBytes ? 4.0 + static_cast<double>(o.string_length)
                                                           : static_cast<double>(serve::datatype_size(spec.dtype));
        request_bytes += elements * each;
    }
    if (request_bytes > kMaxRequestBytes)
        return invalid_argument("model '{}': a request of its inputs ({}) is {:.3g} bytes, more than the {:.3g} a load "
                                "test sends; give smaller shapes with --shape NAME:d1,d2,... (or a shorter "
                                "--string-length)",
                                o.model, fmt::join(shapes_of(inputs), ", "), request_bytes, kMaxRequestBytes);
    int variants = std::max(1, std::min(o.variants, static_cast<int>(std::max(1.0, kMaxBodiesBytes / std::max(1.0, request_bytes)))));
    Filler fill;
    const std::string& d = o.input_data;
    if (d == "zero" || d == "random") {
        auto rng = std::make_shared<std::mt19937_64>(o.seed);
        bool zero = d == "zero";
        int64_t len = o.string_length;
        if (zero) variants = 1;
        fill = [rng, zero, len](const InputSpec& spec, int) -> Result<std::string> {
            int64_t n = serve::shape_numel(spec.shape);
            if (spec.dtype == DataType::kBytes) return random_bytes_elements(n, len, *rng, zero);
            std::string out;
            std::uniform_real_distribution<double> unit(0.0, 1.0);
            for (int64_t i = 0; i < n; ++i) {
                double v = zero ? 0.0 : unit(*rng);
                bool integer = spec.dtype != DataType::kFp32 && spec.dtype != DataType::kFp64 &&
                               spec.dtype != DataType::kFp16 && spec.dtype != DataType::kBf16;
                if (integer && spec.dtype != DataType::kBool) v = std::floor(v * 100);
                if (spec.dtype == DataType::kBool) v = v < 0.5 ? 0 : 1;
                put_number(out, spec.dtype, v);
            }
            return out;
        };
    } else if (d.ends_with(".json")) {
        STRATO_ASSIGN_OR_RETURN(fill, json_filler(d, inputs, max_batch, &variants));
    } else if (d.ends_with(".idx") || d.ends_with(".gz") || d.find("ubyte") != std::string::npos) {
        STRATO_ASSIGN_OR_RETURN(fill, idx_filler(d, inputs, o.batch_size));
    } else {
        return invalid_argument("--input-data '{}': expected zero, random, a .json file (perf_analyzer's format) or an IDX file (.idx, .gz)", d);
    }

    Url url = base;
    url.target = model_path(o) + "/infer";
    Target target;
    target.url = url;
    size_t body_bytes = 0;
    for (int v = 0; v < variants; ++v) {
        serve::InferRequest req;
        req.binary_output = o.binary;
        for (const auto& spec : inputs) {
            Tensor t;
            t.name = spec.name;
            t.dtype = spec.dtype;
            t.shape = spec.shape;
            STRATO_ASSIGN_OR_RETURN(t.data, fill(spec, v));
            req.inputs.push_back(std::move(t));
        }
        bool binary = o.binary;
        for (const auto& t : req.inputs)
            if (t.dtype == DataType::kFp16 || t.dtype == DataType::kBf16) binary = true;  // JSON cannot carry them
        auto encoded = serve::encode_infer_request(req, binary);
        std::vector<std::string> headers;
        if (encoded.has_binary) {
            headers.push_back("Content-Type: application/octet-stream");
            headers.push_back(fmt::format("Inference-Header-Content-Length: {}", encoded.header_length));
        } else {
            headers.push_back("Content-Type: application/json");
        }
        headers.insert(headers.end(), o.headers.begin(), o.headers.end());
        body_bytes = encoded.body.size();
        target.requests.push_back(build_request(url, "POST", headers, encoded.body));
    }
    target.description = fmt::format("POST {} ({} {}, {} bytes, {} distinct bodies, inputs: {})", url.target,
                                     o.binary ? "binary" : "JSON", d, body_bytes, target.requests.size(),
                                     fmt::join(shapes_of(inputs), ", "));
    // What each request carries: the first dimension sent to a batching model (an --input-data
    // file's shape may set it, whatever -b says).
    target.batch = max_batch > 0 && !inputs[0].shape.empty() ? std::max<int64_t>(1, inputs[0].shape[0]) : 1;
    return target;
}

Result<ServerStats> fetch_server_stats(const Url& base, const std::string& model, const std::string& version,
                                       const std::vector<std::string>& headers) {
    std::string target = model_path(model, version) + "/stats";
    STRATO_ASSIGN_OR_RETURN(auto j, get_json(base, target, headers));
    ServerStats s;
    try {
        for (const auto& m : j.at("model_stats")) {
            const json& is = m.at("inference_stats");
            auto ns = [&](const char* key) { return is.contains(key) ? is[key].value("ns", int64_t{0}) : 0; };
            s.success += is.at("success").value("count", int64_t{0});
            s.request_ns += ns("success");
            s.queue_ns += ns("queue");
            s.compute_input_ns += ns("compute_input");
            s.compute_infer_ns += ns("compute_infer");
            s.compute_output_ns += ns("compute_output");
            s.inference_count += m.value("inference_count", int64_t{0});
            s.execution_count += m.value("execution_count", int64_t{0});
        }
    } catch (const json::exception& e) {
        return invalid_argument("GET {}: not in the statistics extension's shape ({})", target, e.what());
    }
    return s;
}

ServerBreakdown server_breakdown(const ServerStats& a, const ServerStats& b) {
    ServerBreakdown out;
    out.requests = b.success - a.success;
    if (out.requests <= 0) return out;
    auto avg = [&](int64_t x, int64_t y) { return static_cast<double>(y - x) / 1e3 / static_cast<double>(out.requests); };
    out.request_us = avg(a.request_ns, b.request_ns);
    out.queue_us = avg(a.queue_ns, b.queue_ns);
    out.compute_input_us = avg(a.compute_input_ns, b.compute_input_ns);
    out.compute_infer_us = avg(a.compute_infer_ns, b.compute_infer_ns);
    out.compute_output_us = avg(a.compute_output_ns, b.compute_output_ns);
    int64_t execs = b.execution_count - a.execution_count;
    if (execs > 0) out.avg_batch = static_cast<double>(b.inference_count - a.inference_count) / static_cast<double>(execs);
    return out;
}

}  // namespace strato::loadgen
