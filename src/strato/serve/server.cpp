#include "strato/serve/server.h"

#include <fmt/format.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>

#include <zlib.h>

#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/serial_worker.h"
#include "strato/serve/protocol/codec.h"

namespace strato::serve {
namespace {

using json = nlohmann::json;

http::Response json_response(unsigned status, std::string body) {
    http::Response r;
    r.status = status;
    r.content_type = "application/json";
    r.body = std::move(body);
    return r;
}

http::Response error_response(unsigned status, std::string_view message) {
    return json_response(status, fmt::format("{{\"error\":{}}}", json_quote(message)));
}

http::Response status_response(const Status& s) { return error_response(static_cast<unsigned>(status_code_to_http(s.code())), s.message()); }

http::Response empty_response(unsigned status) {
    http::Response r;
    r.status = status;
    return r;
}

// Splits the path (without query) into percent-decoded segments; false when malformed.
bool split_path(const std::string& target, std::vector<std::string>* out) {
    // absolute-form (`GET http://host:8000/v2 HTTP/1.1`, as proxies send it) names the same path
    // (RFC 9112 3.2.2: a server MUST accept it); the query (and a stray fragment) are not the path.
    size_t start = 0;
    for (const char* scheme : {"http://", "https://"}) {
        const size_t n = std::strlen(scheme);
        if (target.size() >= n && strncasecmp(target.c_str(), scheme, n) == 0) {
            start = target.find_first_of("/?#", n);  // the authority ends at the path, or at a query (empty path)
            if (start == std::string::npos) start = target.size();
        }
    }
    std::string path = target.substr(start, target.find_first_of("?#", start) - start);
    size_t pos = 0;
    while (pos < path.size()) {
        if (path[pos] == '/') {
            ++pos;
            continue;
        }
        size_t end = path.find('/', pos);
        if (end == std::string::npos) end = path.size();
        std::string seg;
        for (size_t i = pos; i < end; ++i) {
            if (path[i] == '%') {
                auto hex = [](char c) -> int {
                    if (c >= '0' && c <= '9') return c - '0';
                    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
                    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
                    return -1;
                };
                if (i + 2 >= end) return false;
                int hi = hex(path[i + 1]), lo = hex(path[i + 2]);
                if (hi < 0 || lo < 0) return false;
                seg += static_cast<char>(hi * 16 + lo);
                i += 2;
            } else {
                seg += path[i];
            }
        }
        out->push_back(std::move(seg));
        pos = end;
    }
    return true;
}

// How many times a header (case-insensitive name) appears in the request.
size_t header_count(const http::Request& r, std::string_view name) {
    size_t n = 0;
    for (const auto& [k, v] : r.headers)
        if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) ++n;
    return n;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    unsigned char d = 0;
    for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
    return d == 0;
}

uint64_t now_ms() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

int64_t resident_bytes() {
    std::ifstream f("/proc/self/statm");
    int64_t pages = 0, rss = 0;
    f >> pages >> rss;
    return rss * sysconf(_SC_PAGESIZE);
}

// gzip or zlib ("deflate" in HTTP) bodies, capped at `limit` bytes against decompression bombs.
// Concatenated gzip members are one body (RFC 1952 2.2, as `gzip -d` reads them); bytes after the
// last stream that are not another one are an error, not silently dropped.
Result<std::string> inflate_body(const std::string& in, uint64_t limit, bool* too_large) {
    z_stream z{};
    if (inflateInit2(&z, 15 + 32) != Z_OK) return internal_error("zlib inflateInit2 failed");
    struct End {
        z_stream* z;
        ~End() { inflateEnd(z); }
    } end{&z};
    const auto* next = reinterpret_cast<const Bytef*>(in.data());
    size_t left = in.size();
    auto feed = [&] {  // avail_in is 32 bits: a body past 4 GiB goes in pieces
        const size_t n = std::min<size_t>(left, size_t{1} << 30);
        z.next_in = const_cast<Bytef*>(next);
        z.avail_in = static_cast<uInt>(n);
        next += n;
        left -= n;
    };
    feed();
    std::string out;
    char buf[65536];
    while (true) {
        z.next_out = reinterpret_cast<Bytef*>(buf);
        z.avail_out = sizeof buf;
        const int rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END)
            return invalid_argument("the request body is not valid gzip/deflate data ({})", z.msg ? z.msg : "truncated");
        out.append(buf, sizeof buf - z.avail_out);
        if (out.size() > limit) {
            *too_large = true;
            return Status{StatusCode::kInvalidArgument,
                          fmt::format("the decompressed request body exceeds the limit of {} bytes (--http-max-input-size)", limit)};
        }
        if (z.avail_in == 0 && left > 0) feed();
        if (rc == Z_STREAM_END) {
            if (z.avail_in == 0) return out;
            if (inflateReset(&z) != Z_OK) return internal_error("zlib inflateReset failed");  // the next member
            continue;
        }
        if (z.avail_in == 0 && z.avail_out != 0)
            return invalid_argument("the request body is not valid gzip/deflate data (truncated)");
    }
}

json tensor_metadata(const ModelConfig& c, const std::vector<TensorSpec>& list) {
    json a = json::array();
    for (const auto& t : list)
        a.push_back({{"name", t.name}, {"datatype", std::string(datatype_name(t.dtype))}, {"shape", c.full_shape(t)}});
    return a;
}

// Checks a decoded request against the model and puts its inputs into config order.
Status bind_inputs(const ModelVersion& mv, InferRequest& req, std::vector<Tensor>* ordered, int64_t* rows) {
    const ModelConfig& c = mv.config;
    const std::string& m = mv.name;
    bool batches = c.max_batch_size > 0;
    if (req.raw) {
        if (c.inputs.size() != 1)
            return invalid_argument("raw binary request (Inference-Header-Content-Length: 0) needs a model with one input; '{}' has {}", m,
                                    c.inputs.size());
        const TensorSpec& spec = c.inputs[0];
        Tensor& t = req.inputs[0];
        t.name = spec.name;
        t.dtype = spec.dtype;
        t.shape = spec.dims;
        int64_t known = 1, variable = -1;
        for (size_t i = 0; i < spec.dims.size(); ++i) {
            if (spec.dims[i] < 0) {
                if (variable >= 0) return invalid_argument("raw binary request: input '{}' has more than one variable dimension", spec.name);
                variable = static_cast<int64_t>(i);
            } else {
                known *= spec.dims[i];
            }
        }
        size_t es = datatype_size(spec.dtype);
        if (es == 0) {
            t.shape = {1};
        } else if (variable >= 0) {
            int64_t per = known * static_cast<int64_t>(es);
            if (per == 0 || t.data.size() % static_cast<size_t>(per) != 0)
                return invalid_argument("raw binary request: {} bytes is not a whole number of rows of input '{}'", t.data.size(), spec.name);
            t.shape[variable] = static_cast<int64_t>(t.data.size()) / per;
        }
        if (batches) t.shape.insert(t.shape.begin(), 1);
        if (es == 0 ? count_bytes_elements(t.data) != 1 : static_cast<int64_t>(t.data.size()) != t.numel() * static_cast<int64_t>(es))
            return invalid_argument("raw binary request: input '{}' of shape {} needs {} bytes, the body has {}", spec.name,
                                    shape_string(spec.dims), es == 0 ? std::string("one BYTES element")
                                                                     : std::to_string(t.numel() * static_cast<int64_t>(es)),
                                    t.data.size());
    }
    size_t required = 0;
    for (const auto& s : c.inputs)
        if (!s.optional) ++required;
    ordered->assign(c.inputs.size(), Tensor{});
    std::vector<bool> present(c.inputs.size(), false);
    *rows = batches ? -1 : 1;
    for (auto& t : req.inputs) {
        size_t k = 0;
        while (k < c.inputs.size() && c.inputs[k].name != t.name) ++k;
        if (k == c.inputs.size()) return invalid_argument("unexpected inference input '{}' for model '{}'", t.name, m);
        const TensorSpec& spec = c.inputs[k];
        if (t.dtype != spec.dtype)
            return invalid_argument("inference input '{}' data-type is '{}', but model '{}' expects '{}'", t.name,
                                    datatype_name(t.dtype), m, datatype_name(spec.dtype));
        std::vector<int64_t> want = c.full_shape(spec);
        bool ok = t.shape.size() == want.size();
        for (size_t i = 0; ok && i < want.size(); ++i)
            if (want[i] >= 0 && want[i] != t.shape[i]) ok = false;
        if (!ok)
            return invalid_argument("unexpected shape for input '{}' for model '{}'. Expected {}, got {}", t.name, m,
                                    shape_string(want), shape_string(t.shape));
        // The decoder checked bytes against the request's own shape; keep that invariant here
        // too, since a batch concatenates every request's bytes.
        if (size_t es = datatype_size(t.dtype); es > 0 && static_cast<int64_t>(t.data.size()) != t.numel() * static_cast<int64_t>(es))
            return internal_error("input '{}' holds {} bytes for shape {}", t.name, t.data.size(), shape_string(t.shape));
        if (batches) {
            int64_t b = t.shape[0];
            if (b < 1)  // (an empty batch has no rows to run; Triton's "must be <= N" would mislead)
                return invalid_argument("input '{}' for model '{}' has batch size 0 (shape {}): the first dimension is the "
                                        "batch and must be between 1 and max_batch_size {}",
                                        t.name, m, shape_string(t.shape), c.max_batch_size);
            if (b > c.max_batch_size)
                return invalid_argument("inference request batch-size must be <= {} for '{}' (input '{}' has batch size {})",
                                        c.max_batch_size, m, t.name, b);
            if (*rows >= 0 && *rows != b)
                return invalid_argument("input '{}' has batch size {} but the other inputs have {}; all inputs must agree", t.name, b, *rows);
            *rows = b;
        }
        present[k] = true;
        (*ordered)[k] = std::move(t);
    }
    size_t given = 0;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
        if (present[k]) {
            ++given;
        } else if (!c.inputs[k].optional) {
            return invalid_argument("expected {} inputs but got {} inputs for model '{}' (missing '{}')", required,
                                    req.inputs.size(), m, c.inputs[k].name);
        }
    }
    for (const auto& o : req.outputs) {
        bool found = false;
        for (const auto& s : c.outputs) found = found || s.name == o.name;
        if (!found) return invalid_argument("unexpected inference output '{}' for model '{}'", o.name, m);
    }
    if (given == 0 && batches)  // (a batch's rows come from its inputs)
        return invalid_argument("expected at least 1 input for model '{}' but got none: a batching model takes the "
                                "batch size from its inputs", m);
    if (*rows < 0) *rows = 1;
    return Status::ok();
}

}  // namespace

struct InferenceServer::Impl {
    ServeOptions opt;
    metrics::Registry registry;
    std::unique_ptr<Repository> repo;
    std::unique_ptr<http::Server> http;
    std::unique_ptr<http::Server> metrics_http;
    std::atomic<bool> live{false};
    // Repository load/unload, one at a time on a thread of its own: a load can take seconds, and
    // each HTTP connection lives on one I/O thread, whose other connections would wait.
    SerialWorker manager{"repo-manager"};

    bool authorized(const http::Request& r, const std::string& token) const {
        if (token.empty()) return true;
        const std::string* h = r.header("Authorization");
        if (!h || h->size() < 7 || strncasecmp(h->c_str(), "Bearer ", 7) != 0) return false;
        std::string_view given = std::string_view(*h).substr(7);
        while (!given.empty() && (given.front() == ' ' || given.front() == '\t')) given.remove_prefix(1);  // 1*SP (RFC 9110 11.4)
        return constant_time_equal(given, token);
    }

    void handle(http::Request&& req, http::Reply reply) {
        std::vector<std::string> seg;
        if (!split_path(req.target, &seg)) return reply(error_response(400, "malformed percent-encoding in the request path"));
        const std::string& method = req.method;
        auto need = [&](const char* m) -> bool {
            // HEAD is GET without the body (RFC 9110 9.3.2: a server supports both; the HTTP layer drops the body)
            if (method == m || (method == "HEAD" && std::strcmp(m, "GET") == 0)) return true;
            reply(error_response(405, "Method Not Allowed"));
            return false;
        };
        if (seg.empty() || seg[0] != "v2") return reply(error_response(404, "Not Found"));
        // Health probes stay open so Kubernetes needs no token.
        if (seg.size() == 3 && seg[1] == "health") {
            if (!need("GET")) return;
            if (seg[2] == "live") return reply(empty_response(live ? 200 : 400));
            if (seg[2] == "ready") return reply(empty_response(live && repo->ready() ? 200 : 400));
            return reply(error_response(404, "Not Found"));
        }
        bool repo_api = seg.size() >= 2 && seg[1] == "repository";
        const std::string& token = repo_api && !opt.repository_token.empty() ? opt.repository_token : opt.infer_token;
        if (!authorized(req, token)) {
            http::Response r = error_response(401, "missing or invalid bearer token (send 'Authorization: Bearer <token>')");
            r.headers.emplace_back("WWW-Authenticate", "Bearer");
            return reply(std::move(r));
        }
        if (seg.size() == 1) {
            if (!need("GET")) return;
            json j = {{"name", "strato"},
                      {"version", opt.version},
                      {"extensions", {"binary_tensor_data", "classification", "model_configuration", "model_repository",
                                      "schedule_policy", "statistics"}}};
            return reply(json_response(200, json_text(j)));
        }
        if (repo_api) return handle_repository(seg, req, reply);
        if (seg[1] != "models") return reply(error_response(404, "Not Found"));
        if (seg.size() == 3 && seg[2] == "stats") {
            if (!need("GET")) return;
            return reply(stats("", ""));
        }
        if (seg.size() < 3) return reply(error_response(404, "Not Found"));
        const std::string& model = seg[2];
        std::string version;
        size_t next = 3;
        if (seg.size() >= 5 && seg[3] == "versions") {
            version = seg[4];
            if (version.empty() || version.find_first_not_of("0123456789") != std::string::npos)
                return reply(error_response(404, "Not Found"));
            next = 5;
        }
        if (seg.size() > next + 1) return reply(error_response(404, "Not Found"));
        std::string action = seg.size() == next + 1 ? seg[next] : "";
        if (!valid_model_name(model)) return reply(error_response(400, fmt::format("invalid model name '{}'", model)));
        if (action == "infer") {
            if (!need("POST")) return;
            return infer(model, version, std::move(req), std::move(reply));
        }
        if (action == "stats") {
            if (!need("GET")) return;
            return reply(stats(model, version));
        }
        if (!need("GET")) return;
        auto mv = repo->get(model, version);
        if (action == "ready") {
            if (!mv) return reply(error_response(400, mv.status().code() == StatusCode::kInvalidArgument
                                                          ? mv.status().message()
                                                          : "Model version not ready"));
            return reply(empty_response(200));
        }
        if (!mv) return reply(status_response(mv.status()));
        const ModelVersion& v = **mv;
        if (action.empty()) {
            json versions = json::array();
            for (const auto& x : repo->versions(model)) versions.push_back(std::to_string(x->version));
            std::reverse(versions.begin(), versions.end());
            json j = {{"name", model},
                      {"versions", versions},
                      {"platform", v.platform},
                      {"inputs", tensor_metadata(v.config, v.config.inputs)},
                      {"outputs", tensor_metadata(v.config, v.config.outputs)}};
            return reply(json_response(200, json_text(j)));
        }
        if (action == "config") return reply(json_response(200, json_text(model_config_to_json(v.config))));
        return reply(error_response(404, "Not Found"));
    }

    void handle_repository(const std::vector<std::string>& seg, http::Request& req, const http::Reply& reply) {
        if (req.method != "POST" && !(req.method == "GET" && seg.size() == 3 && seg[2] == "index"))
            return reply(error_response(405, "Method Not Allowed"));
        json body = json::object();
        if (!req.body.empty()) {
            if (json_too_deep(req.body) != std::string_view::npos)
                return reply(error_response(400, fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth)));
            body = parse_json_bounded(req.body);
            if (body.is_discarded() || !body.is_object())
                return reply(error_response(400, "the request body must be a JSON object"));
        }
        // Triton's routes take a repository name (/v2/repository/REPO/index, .../REPO/models/M/load)
        // and refuse it: UNSUPPORTED, as here.
        if ((seg.size() == 4 && seg[3] == "index") || (seg.size() == 6 && seg[3] == "models" && (seg[5] == "load" || seg[5] == "unload")))
            return reply(error_response(501, "'repository_name' specification is not supported"));
        if (seg.size() == 3 && seg[2] == "index") {
            // (Triton refuses a "ready" that is no boolean; "yes" read as false listed every model)
            if (body.contains("ready") && !body["ready"].is_boolean())
                return reply(error_response(400, fmt::format("'ready' must be true or false, got a JSON {}", body["ready"].type_name())));
            bool ready_only = body.contains("ready") && body["ready"].get<bool>();
            json a = json::array();
            for (const auto& e : repo->index(ready_only)) {
                json o = {{"name", e.name}};
                if (!e.version.empty()) o["version"] = e.version;
                if (!e.state.empty()) o["state"] = e.state;
                if (!e.state.empty()) o["reason"] = e.reason;
                a.push_back(std::move(o));
            }
            return reply(json_response(200, json_text(a)));
        }
        if (seg.size() == 5 && seg[2] == "models" && (seg[4] == "load" || seg[4] == "unload")) {
            const std::string& model = seg[3];
            if (!valid_model_name(model)) return reply(error_response(400, fmt::format("invalid model name '{}'", model)));
            std::optional<json> config;
            if (seg[4] == "unload") {  // (Triton refuses these too rather than reading them as false)
                if (auto p = body.find("parameters"); p != body.end()) {
                    if (!p->is_object()) return reply(error_response(400, "'parameters' must be a JSON object"));
                    if (auto u = p->find("unload_dependents"); u != p->end() && !u->is_boolean())
                        return reply(error_response(400, fmt::format("parameter 'unload_dependents' must be true or false, got a JSON {}",
                                                                     u->type_name())));
                }
            }
            if (seg[4] == "load") {
                if (auto p = body.find("parameters"); p != body.end() && !p->is_object())
                    return reply(error_response(400, "'parameters' must be a JSON object"));
                if (auto p = body.find("parameters"); p != body.end()) {
                    for (auto it = p->begin(); it != p->end(); ++it)
                        if (it.key().rfind("file:", 0) == 0)
                            return reply(error_response(501, "loading model files through the API ('file:' parameters) is not supported"));
                    if (auto c = p->find("config"); c != p->end()) {
                        if (!c->is_string()) return reply(error_response(400, "parameter 'config' must be a string holding the model config as JSON"));
                        const std::string& text = c->get<std::string>();
                        if (json_too_deep(text) != std::string_view::npos)
                            return reply(error_response(400, fmt::format("parameter 'config' nests deeper than {} levels",
                                                                         kMaxJsonDepth)));
                        // (a parse error says where, rather than "not a JSON object" for a missing quote)
                        auto cj = parse_json_named(text, "parameter 'config'");
                        if (!cj) return reply(status_response(cj.status()));
                        if (!cj->is_object())
                            return reply(error_response(400, fmt::format("parameter 'config' must hold a JSON object (the model "
                                                                         "config), got a JSON {}", cj->type_name())));
                        config = std::move(cj).value();
                    }
                }
            }
            manager.submit([this, model, config = std::move(config), load = seg[4] == "load", reply](bool run) {
                if (!run) return reply(error_response(503, "the server is shutting down"));
                Status st = load ? repo->load(model, config) : repo->unload(model);
                reply(st.is_ok() ? json_response(200, "") : status_response(st));
            });
            return;
        }
        reply(error_response(404, "Not Found"));
    }

    http::Response stats(const std::string& model, const std::string& version) {
        std::vector<std::shared_ptr<ModelVersion>> list;
        if (model.empty()) {
            list = repo->all_versions();
        } else if (version.empty()) {
            list = repo->versions(model);
            if (list.empty()) {
                auto r = repo->get(model, "");
                return status_response(r ? Status(StatusCode::kNotFound, "no ready versions") : r.status());
            }
        } else {
            auto r = repo->get(model, version);
            if (!r) return status_response(r.status());
            list.push_back(*r);
        }
        auto pair = [](const StatCounter& c) { return json{{"count", c.count.load()}, {"ns", c.ns.load()}}; };
        json a = json::array();
        for (const auto& mv : list) {
            auto& s = mv->stats;
            json batch = json::array();
            {
                std::lock_guard lock(s.mu);
                for (const auto& [size, b] : s.batch_stats)
                    batch.push_back({{"batch_size", size},
                                     {"compute_input", {{"count", b.count}, {"ns", b.input_ns}}},
                                     {"compute_infer", {{"count", b.count}, {"ns", b.infer_ns}}},
                                     {"compute_output", {{"count", b.count}, {"ns", b.output_ns}}}});
            }
            json memory = json::array();
            for (const auto& [d, m] : mv->copies)
                memory.push_back({{"type", d.is_gpu() ? "GPU" : "CPU"}, {"id", std::max(d.gpu, 0)}, {"byte_size", m->memory_bytes()}});
            a.push_back({{"name", mv->name},
                         {"version", std::to_string(mv->version)},
                         {"last_inference", s.last_inference_ms.load()},
                         {"inference_count", s.inference_count.load()},
                         {"execution_count", s.execution_count.load()},
                         {"inference_stats",
                          {{"success", pair(s.success)},
                           {"fail", pair(s.fail)},
                           {"queue", pair(s.queue)},
                           {"compute_input", pair(s.compute_input)},
                           {"compute_infer", pair(s.compute_infer)},
                           {"compute_output", pair(s.compute_output)},
                           {"cache_hit", {{"count", 0}, {"ns", 0}}},
                           {"cache_miss", {{"count", 0}, {"ns", 0}}}}},
                         {"response_stats", json::object()},
                         {"batch_stats", batch},
                         {"memory_usage", memory}});
        }
        return json_response(200, json_text(json{{"model_stats", a}}));
    }

    void infer(const std::string& model, const std::string& version, http::Request&& req, http::Reply reply) {
        auto received = req.received;
        // Several Content-Encoding fields are one list (RFC 9110 5.3), codings applied in order;
        // only one is supported, so a list is refused rather than its first coding taken.
        if (size_t n = header_count(req, "Content-Encoding"); n > 1)
            return reply(error_response(415, fmt::format("the Content-Encoding header is given {} times; send one coding "
                                                         "(gzip, deflate or identity)", n)));
        if (const std::string* enc = req.header("Content-Encoding")) {
            if (strcasecmp(enc->c_str(), "gzip") == 0 || strcasecmp(enc->c_str(), "deflate") == 0) {
                bool too_large = false;
                auto plain = inflate_body(req.body, opt.http.body_limit, &too_large);
                if (!plain) return reply(too_large ? error_response(413, plain.status().message()) : status_response(plain.status()));
                req.body = std::move(plain).value();
            } else if (strcasecmp(enc->c_str(), "identity") != 0) {
                return reply(error_response(415, fmt::format("unsupported Content-Encoding '{}' (expected gzip, deflate or identity)", *enc)));
            }
        }
        std::optional<size_t> hl;
        if (size_t n = header_count(req, "Inference-Header-Content-Length"); n > 1)
            return reply(error_response(400, fmt::format("the Inference-Header-Content-Length header is given {} times; send it "
                                                         "once (the length of the JSON part of the body)", n)));
        if (const std::string* h = req.header("Inference-Header-Content-Length")) {
            auto v = parse_header_length(*h, req.body.size());
            if (!v) return reply(status_response(v.status()));
            hl = *v;
        }
        // Look the model up before decoding so an unknown model is reported as such.
        auto found = repo->get(model, version);
        if (!found) return reply(status_response(found.status()));
        std::shared_ptr<ModelVersion> mv = *found;
        auto fail = [&](const Status& s, const std::shared_ptr<metrics::Counter>& reason) {
            mv->stats.fail.add((Clock::now() - received).count());
            reason->add();
            reply(status_response(s));
        };
        auto decoded = decode_infer_request(req.body, hl);
        if (!decoded) return fail(decoded.status(), mv->metrics.fail_rejected);
        auto ireq = std::make_shared<InferRequest>(std::move(decoded).value());
        Job job;
        Status bound = bind_inputs(*mv, *ireq, &job.inputs, &job.rows);
        if (!bound.is_ok()) return fail(bound, mv->metrics.fail_rejected);
        ireq->inputs.clear();
        job.enqueued = Clock::now();
        int64_t timeout_us = 0;
        if (mv->config.dynamic_batching) {
            timeout_us = mv->config.dynamic_batching->default_timeout_us;
            if (ireq->timeout_us > 0 && mv->config.dynamic_batching->allow_timeout_override) timeout_us = ireq->timeout_us;
        } else {
            timeout_us = ireq->timeout_us;
        }
        // A timeout past ~11 days (2^64-1 is a common "none") is no deadline: added to the clock's
        // nanoseconds it would wrap into the past and expire every request at once.
        constexpr int64_t kNoDeadlineUs = 1'000'000'000'000;
        if (timeout_us > 0 && timeout_us < kNoDeadlineUs) job.deadline = job.enqueued + std::chrono::microseconds(timeout_us);
        job.cancelled = req.cancelled;
        auto make_done = [ireq, reply, received](std::shared_ptr<ModelVersion> target) {
          return [mv = std::move(target), ireq, reply, received](Status st, std::vector<Tensor> outputs, const Timing& t) {
            auto& s = mv->stats;
            auto& m = mv->metrics;
            int64_t total = (Clock::now() - received).count();
            if (!st.is_ok()) {
                s.fail.add(total);
                (st.code() == StatusCode::kCancelled ? m.fail_canceled
                 : st.code() == StatusCode::kUnavailable ? m.fail_rejected
                                                        : m.fail_backend)->add();
                return reply(status_response(st));
            }
            InferResponse resp;
            resp.model_name = mv->name;
            resp.model_version = std::to_string(mv->version);
            resp.id = ireq->id;
            const auto& specs = mv->config.outputs;
            auto emit = [&](size_t k, const RequestedOutput* ro) -> Status {
                if (k >= outputs.size()) return internal_error("the backend returned {} outputs, the config has {}", outputs.size(), specs.size());
                Tensor& o = outputs[k];
                o.name = specs[k].name;
                if (ro && ro->classification > 0) {
                    auto c = classify(o, ro->classification, mv->config.max_batch_size > 0, mv->labels);
                    if (!c) return c.status();
                    resp.outputs.push_back(std::move(c).value());
                } else {
                    resp.outputs.push_back(std::move(o));
                }
                resp.binary.push_back(ro ? ro->binary : ireq->binary_output);
                return Status::ok();
            };
            Status es;
            if (ireq->outputs.empty()) {
                for (size_t k = 0; k < specs.size() && es.is_ok(); ++k) es = emit(k, nullptr);
            } else {
                for (const auto& ro : ireq->outputs) {
                    size_t k = 0;
                    while (k < specs.size() && specs[k].name != ro.name) ++k;
                    es = emit(k, &ro);
                    if (!es.is_ok()) break;
                }
            }
            if (!es.is_ok()) {
                s.fail.add(total);
                m.fail_other->add();
                return reply(status_response(es));
            }
            EncodedBody body = encode_infer_response(resp);
            http::Response r;
            r.status = 200;
            if (body.has_binary) {
                r.content_type = "application/octet-stream";
                r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(body.header_length));
            } else {
                r.content_type = "application/json";
            }
            r.body = std::move(body.body);
            int64_t rows = 1;
            if (mv->config.max_batch_size > 0 && !resp.outputs.empty() && !resp.outputs[0].shape.empty())
                rows = resp.outputs[0].shape[0];
            total = (Clock::now() - received).count();
            s.success.add(total);
            s.queue.add(t.queue_ns);
            s.compute_input.add(t.compute_input_ns);
            s.compute_infer.add(t.compute_infer_ns);
            s.compute_output.add(t.compute_output_ns);
            s.inference_count.fetch_add(static_cast<uint64_t>(rows));
            s.last_inference_ms.store(now_ms());
            m.success->add();
            m.inference_count->add(static_cast<uint64_t>(rows));
            m.request_us->add(static_cast<uint64_t>(total / 1000));
            m.queue_us->add(static_cast<uint64_t>(t.queue_ns / 1000));
            m.input_us->add(static_cast<uint64_t>(t.compute_input_ns / 1000));
            m.infer_us->add(static_cast<uint64_t>(t.compute_infer_ns / 1000));
            m.output_us->add(static_cast<uint64_t>(t.compute_output_ns / 1000));
            m.request_hist->observe(static_cast<uint64_t>(total));
            m.queue_hist->observe(static_cast<uint64_t>(t.queue_ns));
            reply(std::move(r));
          };
        };
        job.done = make_done(mv);
        // A reload may retire this version between lookup and submit: take the new one then.
        for (int attempt = 0;; ++attempt) {
            Status st = mv->batcher->submit(std::move(job), /*may_run_inline=*/http->in_flight() <= 1);
            if (st.is_ok()) return;
            if (attempt < 3 && mv->batcher->stopping()) {
                auto again = repo->get(model, version);
                if (again && *again != mv) {
                    // A refused submit leaves the job intact; its done callback finds the
                    // version through the captured pointer, so rebuild the job for the new one.
                    mv = *again;
                    job.done = make_done(mv);
                    continue;
                }
            }
            mv->stats.fail.add((Clock::now() - received).count());
            mv->metrics.fail_rejected->add();
            return reply(status_response(st));
        }
    }
};

InferenceServer::InferenceServer(ServeOptions options) : impl_(std::make_unique<Impl>()) { impl_->opt = std::move(options); }

InferenceServer::~InferenceServer() { shutdown(std::chrono::milliseconds(0)); }

Status InferenceServer::start() {
    Impl& s = *impl_;
    s.repo = std::make_unique<Repository>(s.opt.repository, &s.registry);
    STRATO_RETURN_IF_ERROR(s.repo->start());
    s.http = std::make_unique<http::Server>(s.opt.http, [this](http::Request&& r, http::Reply reply) {
        impl_->handle(std::move(r), std::move(reply));
    });
    STRATO_RETURN_IF_ERROR(s.http->start().with_context("--http-port"));
    if (s.opt.allow_metrics) {
        s.metrics_http = std::make_unique<http::Server>(s.opt.metrics_http, [this](http::Request&& r, http::Reply reply) {
            std::string path = r.target.substr(0, r.target.find('?'));
            if (path != "/metrics") return reply(error_response(404, "Not Found"));
            if (r.method != "GET") return reply(error_response(405, "Method Not Allowed"));
            http::Response resp;
            resp.content_type = "text/plain; version=0.0.4; charset=utf-8";
            resp.body = render_metrics();
            reply(std::move(resp));
        });
        STRATO_RETURN_IF_ERROR(s.metrics_http->start().with_context("--metrics-port"));
    }
    s.live = true;
    return Status::ok();
}

uint16_t InferenceServer::http_port() const { return impl_->http ? impl_->http->port() : 0; }
uint16_t InferenceServer::metrics_port() const { return impl_->metrics_http ? impl_->metrics_http->port() : 0; }
Repository& InferenceServer::repository() { return *impl_->repo; }

std::string InferenceServer::render_metrics() {
    Impl& s = *impl_;
    for (const auto& mv : s.repo->all_versions()) mv->metrics.pending->set(mv->batcher->pending());
    s.registry.gauge("process_resident_memory_bytes", "Resident memory of the server process in bytes", {})->set(resident_bytes());
    return s.registry.render();
}

int64_t InferenceServer::shutdown(std::chrono::milliseconds timeout) {
    Impl& s = *impl_;
    int64_t left = 0;
    if (s.http) left = s.http->drain(timeout);
    s.manager.stop();
    if (s.repo) s.repo->stop();  // runs what is queued
    // What is left once the queued requests ran and their replies had a second to go out: a request
    // answered after the timeout is not lost (the exit code says whether any was).
    if (s.http) left = s.http->drain(std::chrono::milliseconds(1000));
    if (s.metrics_http) s.metrics_http->stop();
    if (s.http) s.http->stop();
    s.http.reset();
    s.metrics_http.reset();
    s.repo.reset();
    s.live = false;
    return left;
}

}  // namespace strato::serve
