#pragma once
// Network checks for distributed jobs (`strato doctor --peers`, `strato doctor --listen`): the
// round-trip time to each peer (the seeds' "< 2 ms between nodes" check) — over an echo when
// the peer runs `strato doctor --listen`, else the TCP handshake to any listening port — and
// the environment and interfaces that decide where collectives go.

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strato/core/parse.h"
#include "strato/core/status.h"

namespace strato::dist {

struct PeerProbe {
    std::string target;   // host:port
    bool reachable = false;
    bool echo = false;    // answered strato's ping (else: TCP connect time)
    // Why the peer is unreachable, or why the first failed sample failed (with how many failed
    // and how many were not tried); empty when every sample was measured.
    std::string error;
    int requested = 0;    // samples asked for
    int samples = 0;      // round trips measured
    int failed = 0;       // samples not measured: those that failed and those not tried
    double min_ms = 0, median_ms = 0, max_ms = 0;

    /// Unreachable, or more than half of the samples not measured.
    bool failing() const { return !reachable || samples == 0 || 2 * failed > requested; }
};

/// Probes each "host:port" `samples` times; never throws. A round trip (or handshake) that takes
/// longer than `timeout_s` in all is a failed sample; the probe goes on after it (an echo over a
/// new connection, since the old one may still deliver the late answer) and stops after 3
/// failed in a row, so a silent peer costs three timeouts, not one per sample.
std::vector<PeerProbe> probe_peers(const std::vector<std::string>& targets, int samples, double timeout_s);

/// One line for `strato doctor`: the round trip, why the peer is unreachable, or how many of the
/// samples were measured and why the next failed. Example: "1 of 5 samples measured: no pong
/// within 3 s on sample 2 (samples 3..5 not tried); round trip median 0.051 ms (min 0.051, max
/// 0.051; 1 samples, echo)".
std::string describe(const PeerProbe& p);

/// `--listen [HOST:]PORT`: HOST an IPv4 address (default 0.0.0.0), PORT in 0..65535 (0: any
/// free port). Errors read "'text': expected [HOST:]PORT ...".
Result<HostPort> parse_listen_address(std::string_view text);

/// Answers probes on host:port until `stop()` returns true. Returns the bound port through `bound`.
/// One thread serves every client: sockets are non-blocking, a client whose unsent answers pass
/// 64 KiB (it sends and never reads) or whose line passes 1 KiB is dropped, so no client can
/// stall the others.
Status serve_echo(const std::string& host, int port, const std::function<bool()>& stop,
                  const std::function<void(int)>& bound = nullptr);

/// The variables that steer distributed jobs, as set here (MASTER_*, RANK..., NCCL_*, GLOO_*,
/// TP_SOCKET_IFNAME, SLURM_*, OMPI_COMM_WORLD_*, PET_*, TORCHELASTIC_*).
std::vector<std::pair<std::string, std::string>> dist_environment();

/// IPv4 interfaces: name -> address.
std::vector<std::pair<std::string, std::string>> interfaces();

}  // namespace strato::dist
