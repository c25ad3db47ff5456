#pragma once
// The inference server: the Open Inference Protocol v2 routes (Triton's HTTP API) on one port and
// Prometheus metrics on another, over the model repository and its batchers.

#include <chrono>
#include <memory>
#include <string>

#include "strato/serve/http/server.h"
#include "strato/serve/metrics/metrics.h"
#include "strato/serve/repository/repository.h"

namespace strato::serve {

struct ServeOptions {
    http::ServerOptions http;             // inference API (default port 8000)
    http::ServerOptions metrics_http;     // /metrics (default port 8002)
    bool allow_metrics = true;
    RepositoryOptions repository;
    std::string infer_token;       // "Authorization: Bearer <token>" for /v2 (health probes stay open)
    std::string repository_token;  // for /v2/repository/* (falls back to infer_token)
    std::string version = "0.1.0";
};

class InferenceServer {
public:
    explicit InferenceServer(ServeOptions options);
    ~InferenceServer();

    /// Loads the repository and starts listening.
    Status start();
    uint16_t http_port() const;
    uint16_t metrics_port() const;  // 0 when metrics are off
    /// Graceful stop: stop accepting, answer everything accepted (up to `timeout`), unload.
    /// Returns the number of requests still unanswered at the deadline.
    int64_t shutdown(std::chrono::milliseconds timeout);

    Repository& repository();
    std::string render_metrics();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace strato::serve
