#pragma once
// The `local` autoscaling provider: really starts and stops `strato serve` replicas as processes
// on this machine, behind a front-end HTTP proxy that spreads requests over the ready replicas
// (fewest in flight first). The autoscaler's backlog is the mean number of requests in flight at
// the proxy over a control period, so `kind = "backlog"` with `per_node = 4` keeps about four
// requests in flight per replica (Knative's concurrency target).
//
// Scale-up: spawn a replica on a free port, wait for /v2/health/ready, then route to it.
// Scale-down: stop routing to the newest replica, wait for its requests in flight to finish
// (drain), then SIGTERM it (strato serve drains again) and reap it. No request is lost.
//
//     LocalOptions o;  o.serve_args = {"--model", "runs/x/model"};  o.config = ...;
//     auto p = LocalProvider::create(o).value();
//     p->run();  // until SIGINT/SIGTERM or stop()

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strato/cloud/autoscale.h"
#include "strato/core/status.h"

namespace strato::cloud {

struct LocalOptions {
    std::string strato_binary;            // empty: this executable
    std::vector<std::string> serve_args;  // passed to every `strato serve` replica
    std::string address = "127.0.0.1";
    int port = 8000;                      // the front end; 0: any free port
    AutoscaleConfig config;
    double tick_s = 1.0;
    double ready_timeout_s = 120;
    double drain_timeout_s = 60;
    int proxy_threads = 32;
    std::string log_dir;                  // replica stdout/stderr; empty: a temporary directory
};

struct ReplicaStatus {
    pid_t pid = 0;
    int port = 0;
    std::string state;  // starting | ready | draining
    int64_t in_flight = 0;
    int64_t served = 0;
};

/// The `strato serve` flags the provider gives every replica itself (--http-address 127.0.0.1,
/// --http-port 0, --metrics-port 0: ports the kernel picks). A serve argument naming one is
/// refused: the replica's command line would repeat it, and serve refuses a repeated flag.
Status check_serve_arg(std::string_view arg);

class LocalProvider {
public:
    static Result<std::unique_ptr<LocalProvider>> create(LocalOptions options);
    ~LocalProvider();

    /// Starts min_nodes replicas, waits until one is ready, opens the front end.
    Status start();
    /// The control loop; returns after stop() or SIGINT/SIGTERM, with every replica stopped.
    Status run();
    void stop();
    int port() const;
    std::vector<ReplicaStatus> replicas() const;

    struct Impl;

private:
    explicit LocalProvider(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace strato::cloud
