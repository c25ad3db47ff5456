#pragma once
// The autoscaling policy engine shared by the cluster simulator and the real providers. Policies
// (TOML, see docs/autoscale.md):
//
//     [autoscale]
//     min_nodes = 1
//     max_nodes = 8
//     cooldown_up = "1m"          # after any scale-up, no further scale-up for this long
//     cooldown_down = "5m"        # after any change, no scale-down for this long
//     down_after = "5m"           # a scale-down must be wanted for this long (hysteresis)
//     [[policy]]                  # horizontal on backlog (the seeds' "more than 10,000 samples waiting")
//     kind = "backlog"
//     per_node = 10000            # one node per this much waiting work
//     [[policy]]                  # Kubernetes-HPA style target utilisation
//     kind = "utilization"
//     target = 70
//     [[policy]]                  # vertical: a bigger instance when GPUs stay busy
//     kind = "vertical"
//     above = 90                  # GPU utilisation percent ...
//     for = "10m"                 # ... held this long
//     ladder = ["g5.xlarge", "g5.12xlarge", "g5.48xlarge"]
//     [[policy]]                  # schedule floor: 4 nodes on weekdays 09:00-18:00, else 1
//     kind = "schedule"
//     days = "mon-fri"
//     from = "09:00"
//     to = "18:00"
//     nodes = 4
//     otherwise = 1
//     [spot]
//     enabled = true              # spot nodes; a preempted one is replaced
//     fallback_ondemand = true    # a type with no spot market runs on-demand (false: an error)
//
// The desired node count is the largest any horizontal policy asks for, clamped to
// [min_nodes, max_nodes]; scale-ups wait out cooldown_up, scale-downs cooldown_down and must be
// wanted for down_after, and go to the highest count wanted within that window (the HPA's
// stabilisation window). Not thread-safe: one Autoscaler per control loop.

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"

namespace strato::cloud {

struct ScalePolicy {
    std::string kind;             // backlog | utilization | vertical | schedule
    double per_node = 0;          // backlog: waiting work one node should absorb
    double target = 0;            // utilization: percent
    std::string metric = "gpu_util";
    double above = 0, for_s = 0;  // vertical: metric > above for for_s
    std::vector<std::string> ladder;
    int days_mask = 0;            // schedule: bit d = day d (0 = Monday)
    double from_h = 0, to_h = 0;  // schedule: hours of the day, local to the trace clock
    int nodes = 0, otherwise = 0;
};

struct AutoscaleConfig {
    int min_nodes = 1, max_nodes = 8;
    double cooldown_up_s = 60, cooldown_down_s = 300, down_after_s = 300;
    std::vector<ScalePolicy> policies;
    bool spot = false, fallback_ondemand = true;

    static Result<AutoscaleConfig> parse(std::string_view toml_text, const std::string& source);
    static Result<AutoscaleConfig> load(const std::string& path);
};

/// What the control loop sees at one instant.
struct Observation {
    double t_s = 0;            // seconds since the trace start
    double weekday_hour = 0;   // hours since Monday 00:00 of the week containing t (the schedule clock)
    int nodes = 0;             // running or booting
    int ready = -1;            // of those, running (-1: as many as nodes)
    std::string instance;      // current node type (vertical policy)
    double backlog = 0;        // work waiting (samples, requests)
    double utilization = 0;    // percent of capacity in use (GPU utilisation)
    // False while nodes cannot be added (autoscale local's back-off after replicas that crashed
    // while starting): no scale-up is decided, so none starts the cooldown_up it would then wait.
    bool may_scale_up = true;
};

struct Decision {
    int nodes = 0;                      // desired count
    std::optional<std::string> resize;  // vertical: move every node to this type
    std::string reason;                 // "backlog 23000 > 2 x 10000", "schedule: weekday 09:00-18:00", ...
};

class Autoscaler {
public:
    explicit Autoscaler(AutoscaleConfig config) : c_(std::move(config)) {}
    /// The decision at `o`; returns the current count when cooldowns or hysteresis hold it.
    Decision decide(const Observation& o);
    const AutoscaleConfig& config() const { return c_; }

private:
    AutoscaleConfig c_;
    double last_up_ = -1e300, last_change_ = -1e300;
    double down_wanted_since_ = -1;
    /// The counts wanted within the last down_after seconds of the scale-down wish, as a
    /// decreasing monotonic queue (front: the highest): a scale-down goes to that highest one, as
    /// the HPA's stabilisation window (at most max_nodes + 1 entries).
    struct Wanted {
        double t_s;
        int nodes;
        std::string why;
    };
    std::deque<Wanted> down_window_;
    double busy_since_ = -1;  // vertical condition holding since
};

/// "09:30" -> 9.5; errors name the text.
Result<double> parse_clock(std::string_view text);
/// "mon-fri", "sat,sun", "mon-sun" -> bit mask (bit 0 = Monday).
Result<int> parse_days(std::string_view text);

}  // namespace strato::cloud
