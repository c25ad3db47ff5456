#pragma once
// Network checks for distributed jobs (`strato doctor --peers`, `strato doctor --listen`): the
// round-trip time to each peer (the seeds' "< 2 ms between nodes" check) — over an echo when
// the peer runs `strato doctor --listen`, else the TCP handshake to any listening port — and
// the environment and interfaces that decide where collectives go.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "strato/core/status.h"

namespace strato::dist {

struct PeerProbe {
    std::string target;   // host:port
    bool reachable = false;
    bool echo = false;    // answered strato's ping (else: TCP connect time)
    std::string error;
    int samples = 0;
    double min_ms = 0, median_ms = 0, max_ms = 0;
};

/// Probes each "host:port" `samples` times; never throws, unreachable peers carry an error.
std::vector<PeerProbe> probe_peers(const std::vector<std::string>& targets, int samples, double timeout_s);

/// Answers probes on host:port until `stop()` returns true. Returns the bound port through `bound`.
Status serve_echo(const std::string& host, int port, const std::function<bool()>& stop,
                  const std::function<void(int)>& bound = nullptr);

/// The variables that steer distributed jobs, as set here (MASTER_*, RANK..., NCCL_*, GLOO_*,
/// TP_SOCKET_IFNAME, SLURM_*, OMPI_COMM_WORLD_*, PET_*, TORCHELASTIC_*).
std::vector<std::pair<std::string, std::string>> dist_environment();

/// IPv4 interfaces: name -> address.
std::vector<std::pair<std::string, std::string>> interfaces();

}  // namespace strato::dist
