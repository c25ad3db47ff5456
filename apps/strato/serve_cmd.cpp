// strato serve --model-repository DIR | --model [NAME=]PACKAGE  [tritonserver-compatible flags]

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "strato/core/cgroup.h"
#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/core/parse.h"
#include "strato/core/signals.h"
#ifndef STRATO_MINIMAL  // ONNX through OpenCV DNN: not in the minimal subset (a GPU node)
#include "strato/serve/backend/onnx_backend.h"
#endif
#include "strato/serve/backend/torch_backends.h"
#include "strato/serve/server.h"

namespace strato::cli {
namespace {

Result<std::string> read_token(const std::string& path, const char* flag) {
    if (path.empty()) return std::string();
    auto text = fs::read_file(path, 1 << 20);  // a token, not a file that happens to be there
    if (!text) return text.status().with_context(flag);
    std::string t = *text;
    // Blanks around it are the file's, not the token's (an editor's newline, a pasted space); one
    // inside could never arrive in an Authorization header, so every client would get 401.
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!t.empty() && blank(t.back())) t.pop_back();
    t.erase(0, std::find_if_not(t.begin(), t.end(), blank) - t.begin());
    if (t.size() < 16) return invalid_argument("{} {}: the token must be at least 16 characters", flag, path);
    for (unsigned char c : t)
        if (c <= 0x20 || c >= 0x7f)
            return invalid_argument("{} {}: the token holds a blank, a line break or a byte outside printable ASCII, which "
                                    "no Authorization header can carry (one token of 16+ printable characters expected)",
                                    flag, path);
    return t;
}

// "name=dir", or a package directory: runs/NAME/model -> NAME, else the directory's own name.
std::pair<std::string, std::string> split_model_flag(const std::string& v) {
    auto eq = v.find('=');
    if (eq != std::string::npos) return {v.substr(0, eq), v.substr(eq + 1)};
    std::filesystem::path p = std::filesystem::path(v).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    std::string name = p.filename().string();
    if (name == "model" && p.has_parent_path()) name = p.parent_path().filename().string();
    return {name, v};
}

}  // namespace

void add_serve_command(CLI::App& app, const GlobalFlags&, int* exit_code) {
    struct Opts {
        std::vector<std::string> repos, models, load_models;
        std::string address = "127.0.0.1", control = "none", infer_token_file, repo_token_file;
        int port = 8000, metrics_port = 8002, threads = 0, poll_secs = 15, exit_timeout = 30;
        int header_timeout = 30, body_timeout = 60, intra_threads = 0;
        std::string busy_poll = "0";
        bool allow_metrics = true, strict_readiness = true, exit_on_error = true;
        // tritonserver flags that launch scripts and serving runtimes (KServe's Triton runtime:
        // --model-store --grpc-port --allow-grpc --allow-http) pass: accepted, and said what they do here.
        bool allow_http = true, allow_grpc = true, strict_model_config = false, no_auto_complete = false;
        int grpc_port = 8001, log_verbose = 0;
        int64_t max_input = int64_t{64} << 20, max_queue = 4096;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("serve", "Serve models over the Open Inference Protocol v2 (Triton/KServe HTTP API)");
    cmd->option_defaults()->always_capture_default();
    cmd->add_option("--model-repository,--model-store", o->repos, "Triton-layout repository: <repo>/<model>/[config.pbtxt|config.toml] and <model>/<version>/");
    cmd->add_option("--model", o->models, "Serve a strato package directly: [NAME=]DIR (repeatable; version 1)");
    cmd->add_option("--http-address", o->address, "Address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
        ->check(listen_address_flag());
    cmd->add_option("--http-port", o->port, "Inference API port (0 = pick a free one)")->check(CLI::Range(0, 65535));
    cmd->add_option("--metrics-port", o->metrics_port, "Prometheus /metrics port (0 = pick a free one)")->check(CLI::Range(0, 65535));
    cmd->add_option("--allow-metrics", o->allow_metrics, "Serve /metrics (true|false)")
        ->check(CLI::IsMember({"true", "false", "1", "0"}, CLI::ignore_case));
    cmd->add_option("--model-control-mode", o->control, "none: load all at start; poll: also rescan; explicit: load via API / --load-model")
        ->check(CLI::IsMember({"none", "poll", "explicit"}));
    cmd->add_option("--load-model", o->load_models, "Model to load at start in explicit mode ('*' = all; repeatable)");
    cmd->add_option("--repository-poll-secs", o->poll_secs, "Rescan interval in poll mode")->check(CLI::Range(1, 86400));
    cmd->add_option("--strict-readiness", o->strict_readiness, "Ready only when every model is ready (true|false)")
        ->check(CLI::IsMember({"true", "false", "1", "0"}, CLI::ignore_case));
    cmd->add_option("--allow-http", o->allow_http, "tritonserver's flag: HTTP is what strato serves (false is refused)");
    auto* allow_grpc = cmd->add_option("--allow-grpc", o->allow_grpc,
                                       "tritonserver's flag, accepted: strato serves no gRPC (a warning says so when it is asked for)");
    auto* grpc_port = cmd->add_option("--grpc-port", o->grpc_port, "tritonserver's flag, accepted: no gRPC port is opened (a warning says so)")
                          ->check(CLI::Range(0, 65535));
    cmd->add_option("--strict-model-config", o->strict_model_config,
                    "tritonserver's flag, accepted: false (the usual) is what strato does, completing a config from the "
                    "package; true warns that it still does");
    cmd->add_flag("--disable-auto-complete-config", o->no_auto_complete,
                  "tritonserver's flag, accepted with a warning: strato completes a config from the package all the same");
    cmd->add_option("--log-verbose", o->log_verbose, "tritonserver's flag: 1 or more logs at debug level (as -v)")->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--exit-on-error", o->exit_on_error,
                    "Exit 1 when a model fails to load at start (true|false; false: serve the others, the failed ones "
                    "UNAVAILABLE with their reason)");
    cmd->add_option("--http-thread-count", o->threads, "HTTP I/O threads, each an event loop that keeps the connections dealt to it (default: one per usable CPU; a lone request runs its model on one)")->check(CLI::Range(0, 256));
    cmd->add_option("--http-max-input-size", o->max_input, "Largest request body in bytes (larger: 413)")->check(CLI::Range(int64_t{1024}, int64_t{1} << 34));
    cmd->add_option("--http-header-timeout-secs", o->header_timeout, "Deadline for a request's headers (a slower client is disconnected)")->check(CLI::Range(1, 3600));
    cmd->add_option("--http-body-timeout-secs", o->body_timeout, "Deadline for a request's body")->check(CLI::Range(1, 3600));
    cmd->add_option("--max-queue-size", o->max_queue, "Queued requests per model version when its config sets none (full: 503)")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
    cmd->add_option("--exit-timeout-secs", o->exit_timeout, "On SIGTERM/SIGINT: how long to wait for requests in flight")->check(CLI::Range(0, 3600));
    // An empty value (an unset variable in a launch script) would start a server without the token.
    const CLI::Validator token_file = cli::file_path_flag("an empty one would turn the token off");
    cmd->add_option("--infer-token-file", o->infer_token_file, "File holding a bearer token required on /v2 (health probes stay open)")
        ->check(token_file);
    cmd->add_option("--repository-token-file", o->repo_token_file, "File holding a bearer token required on /v2/repository/*")
        ->check(token_file);
    cmd->add_option("--intra-op-threads", o->intra_threads, "libtorch threads per model execution (0 = one per usable CPU)")
        ->check(CLI::Range(0, 1024));
    cmd->add_option("--busy-poll", o->busy_poll, "HTTP I/O threads poll for the next request this long before sleeping (bare numbers are us; 0: off). Lower latency at low load, most of all in VMs whose idle vCPUs wake slowly; costs that much CPU per idle gap, and wants a core the intra-op threads do not use")
        ->check(busy_poll_flag());
    cmd->footer(
        "Examples:\n"
        "  strato serve --model runs/fashion_mnist_cnn/model\n"
        "  strato serve --model-repository models/ --http-port 8000 --metrics-port 8002\n"
        "  strato serve --model-repository models/ --model-control-mode=explicit --load-model resnet18\n"
        "Then: curl localhost:8000/v2/models/fashion_mnist_cnn ; curl localhost:8002/metrics\n"
        "Where a model runs: its config's instance_group, as in Triton — KIND_CPU, KIND_GPU (gpus: [0, 1]; a CUDA\n"
        "build), KIND_AUTO or none: one instance per visible GPU, else one on the CPU (--model packages: KIND_AUTO).\n"
        "Protocol, repository layout and config fields: docs/serve.md");
    cmd->callback([o, exit_code, allow_grpc, grpc_port] {
        using namespace serve;
        // First: a SIGTERM while the flags are checked and the backends registered (a pod deleted
        // at once) is this command's to handle, not the default action's (found by review).
        signals::install_stop_handlers();
        // The soft descriptor limit raised to the hard one, as Go's runtime and nginx's
        // worker_rlimit_nofile do: the connection cap comes from it, and systemd's soft 1,024 capped
        // a server on a machine that allows far more (at most 2^20).
        if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
                          lim.rlim_cur < lim.rlim_max) {
            lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, rlim_t{1} << 20);
            (void)::setrlimit(RLIMIT_NOFILE, &lim);
        }
        auto fail = [&](const Status& s) { *exit_code = report_error("serve", s); };
        if (!o->allow_http)
            return void(*exit_code = report_usage_error("serve", "--allow-http=false leaves nothing to serve: strato "
                                                                 "serve answers the HTTP/REST protocol only (no gRPC)"));
        if (o->allow_grpc && (grpc_port->count() > 0 || allow_grpc->count() > 0))
            log::warn("serve: gRPC is not implemented; {} is not listened on: clients use HTTP on --http-port (the same "
                      "Open Inference Protocol)",
                      grpc_port->count() > 0 ? fmt::format("--grpc-port {}", o->grpc_port) : std::string("port 8001"));
        if (o->log_verbose > 0) log::set_level(log::Level::kDebug);
        if (o->strict_model_config || o->no_auto_complete)
            log::warn("serve: {}: strato still completes a model's config from its package (inputs, outputs, "
                      "max_batch_size); a config.pbtxt that gives them is used as written",
                      o->no_auto_complete ? "--disable-auto-complete-config" : "--strict-model-config=true");
        if (o->repos.empty() && o->models.empty())  // a usage error, as a missing argument is
            return void(*exit_code = report_usage_error(
                            "serve", "nothing to serve: give --model-repository DIR or --model [NAME=]PACKAGE_DIR"));
        ServeOptions so;
        so.http.address = so.metrics_http.address = o->address;
        so.http.port = static_cast<uint16_t>(o->port);
        so.metrics_http.port = static_cast<uint16_t>(o->metrics_port);
        so.http.threads = o->threads > 0 ? o->threads : cgroup::usable_cpus();
        so.metrics_http.threads = 1;
        so.metrics_http.thread_name = "metrics";
        so.http.body_limit = static_cast<uint64_t>(o->max_input);
        so.metrics_http.body_limit = 1 << 16;
        so.http.header_timeout = so.metrics_http.header_timeout = std::chrono::seconds(o->header_timeout);
        so.http.body_timeout = so.metrics_http.body_timeout = std::chrono::seconds(o->body_timeout);
        auto busy = parse_busy_poll_ns(o->busy_poll);
        if (!busy) return fail(busy.status());
        so.http.busy_poll = std::chrono::microseconds(*busy / 1000);
        so.allow_metrics = o->allow_metrics;
        so.repository.paths = o->repos;
        for (const auto& m : o->models) so.repository.packages.push_back(split_model_flag(m));
        so.repository.mode = o->control == "poll" ? ControlMode::kPoll : o->control == "explicit" ? ControlMode::kExplicit : ControlMode::kNone;
        so.repository.startup_models = o->load_models;
        so.repository.poll_interval = std::chrono::seconds(o->poll_secs);
        so.repository.strict_readiness = o->strict_readiness;
        so.repository.default_max_queue_size = o->max_queue;
        auto it = read_token(o->infer_token_file, "--infer-token-file");
        if (!it) return fail(it.status());
        auto rt = read_token(o->repo_token_file, "--repository-token-file");
        if (!rt) return fail(rt.status());
        so.infer_token = *it;
        so.repository_token = *rt;

        register_torch_backends(o->intra_threads);
#ifndef STRATO_MINIMAL
        register_onnx_backend(o->intra_threads);
#endif
        so.repository.interrupted = [] { return signals::stop_requested(); };
        InferenceServer server(so);
        Status st = server.start();
        if (!st.is_ok() && signals::stop_requested()) {  // Ctrl-C / SIGTERM while the models loaded
            log::info("serve: signal {} received while loading; stopped", signals::stop_signal());
            *exit_code = 128 + signals::stop_signal();
            return;
        }
        if (!st.is_ok()) return fail(st);
        // A package named by --model that did not load: nothing of what was asked is served (as
        // tritonserver's --exit-on-error). A run directory given for its package is the usual slip.
        for (const auto& [name, dir] : so.repository.packages) {
            for (const auto& e : server.repository().index(false)) {
                if (e.name != name || e.state == "READY") continue;
                std::error_code ec;
                const bool run_dir = std::filesystem::exists(std::filesystem::path(dir) / "model" / "strato-model.json", ec);
                server.shutdown(std::chrono::seconds(0));
                const std::string package = (std::filesystem::path(dir) / "model").string();
                return fail(invalid_argument("--model {}: model '{}' did not load: {}{}", dir, name, e.reason,
                                             run_dir ? fmt::format("\nhint: {} is a run directory; serve its package: "
                                                                   "--model {}", dir, package)
                                                     : ""));
            }
        }
        // A repository's models that failed at start: tritonserver's --exit-on-error (default true)
        // ends the start ("failed to load all models"); with false the others are served.
        if (o->exit_on_error) {
            std::string names, reasons;
            for (const auto& e : server.repository().index(false)) {
                if (e.state != "UNAVAILABLE" || e.reason.empty()) continue;
                const std::string name = e.name + (e.version.empty() ? "" : " v" + e.version);
                names += (names.empty() ? "" : ", ") + name;
                reasons += fmt::format("\n  {}: {}", name, e.reason);
            }
            if (!names.empty()) {
                server.shutdown(std::chrono::seconds(0));
                return fail(Status(StatusCode::kInvalidArgument,
                                   fmt::format("failed to load at start: {}{}\nhint: fix them, or pass "
                                               "--exit-on-error=false to serve the others (the failed ones "
                                               "UNAVAILABLE, as tritonserver does)",
                                               names, reasons)));
            }
        }
        std::string models;
        for (const auto& e : server.repository().index(false))
            models += fmt::format("{}{}{}{}", models.empty() ? "" : ", ", e.name, e.version.empty() ? "" : " v" + e.version,
                                  e.state == "READY" || e.state.empty() ? "" : " (" + e.state + ")");
        fmt::print("strato serve: ready http://{} metrics={} models: {}\n", host_port_text(o->address, server.http_port()),
                   o->allow_metrics ? fmt::format("http://{}/metrics", host_port_text(o->address, server.metrics_port())) : "off",
                   models.empty() ? "none" : models);
        std::fflush(stdout);
        while (!signals::stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        log::info("serve: signal {} received; draining (up to {} s)", signals::stop_signal(), o->exit_timeout);
        int64_t left = server.shutdown(std::chrono::seconds(o->exit_timeout));
        if (left > 0) {
            log::warn("serve: {} requests were still in flight at the exit timeout", left);
            *exit_code = 1;
            return;
        }
        log::info("serve: stopped cleanly");
        *exit_code = 0;
    });
}

}  // namespace strato::cli
