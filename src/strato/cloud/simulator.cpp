#include "strato/cloud/simulator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>

#include "strato/core/csv_table.h"
#include "strato/core/fs.h"

namespace strato::cloud {

namespace {
// time_s at or above this (the year 5138 as Unix seconds) is refused: no trace lasts 3,000 years,
// and a Unix time in milliseconds (1.7e12) is above it.
constexpr double kTraceTimeMax = 1e11;
}  // namespace

Result<Trace> parse_trace(std::string_view csv, const std::string& source) {
    STRATO_ASSIGN_OR_RETURN(CsvTable t, CsvTable::parse(csv, source));
    STRATO_RETURN_IF_ERROR(t.require_columns({"time_s", "rate"}));
    STRATO_RETURN_IF_ERROR(t.only_columns({"time_s", "rate", "preempt"}));  // ("preemt": no preemptions, silently)
    Trace tr;
    tr.source = source;
    for (size_t r = 0; r < t.rows(); ++r) {
        auto where = [&](const char* col) { return fmt::format("{}:{} {}", source, t.line(r), col); };
        TracePoint p;
        STRATO_ASSIGN_OR_RETURN(p.t_s, parse_number(t.at(r, "time_s"), kUnknown, where("time_s")));
        STRATO_ASSIGN_OR_RETURN(p.rate, parse_number(t.at(r, "rate"), kUnknown, where("rate")));
        STRATO_ASSIGN_OR_RETURN(double pre, parse_number(t.at(r, "preempt"), 0, where("preempt")));
        if (!std::isfinite(p.t_s) || p.t_s < 0) return invalid_argument("{}: expected seconds >= 0", where("time_s"));
        // Unix time in milliseconds (what many exporters write) read as seconds is a trace of
        // 1,000 times its length, its schedule clock in the year 56,000: 1e11 s is the year 5138.
        if (p.t_s >= kTraceTimeMax)
            return invalid_argument("{}: {:.0f} s is after the year 5000 as Unix time; time_s is in seconds (a "
                                    "timestamp in milliseconds? divide by 1000)",
                                    where("time_s"), p.t_s);
        if (!(p.rate >= 0 && p.rate <= 1e12)) return invalid_argument("{}: expected a rate in [0, 1e12]", where("rate"));
        if (pre < 0 || pre > 1e6 || pre != std::floor(pre))
            return invalid_argument("{}: expected a whole number in [0, 1e6]", where("preempt"));
        if (!tr.points.empty() && p.t_s < tr.points.back().t_s)
            return invalid_argument("{}: time goes backwards ({} after {})", where("time_s"), p.t_s, tr.points.back().t_s);
        p.preempt = static_cast<int>(pre);
        tr.points.push_back(p);
    }
    if (tr.points.empty()) return invalid_argument("{}: the trace has no rows", source);
    return tr;
}

Result<Trace> load_trace(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path, fs::kTextFileLimit));
    return parse_trace(text, path);
}

namespace {

enum class Ev : uint8_t { kTrace, kTick, kReady, kPreempt, kEnd };

struct Event {
    double t;
    uint64_t seq;  // FIFO among equal times: deterministic
    Ev kind;
    int32_t arg;   // trace index or node id
    uint32_t gen;  // node generation, to ignore events of nodes already gone
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Node {
    const Instance* type;
    bool spot;
    bool ready = false;
    bool alive = false;
    double launched = 0;
    uint32_t gen = 0;
    bool retire_when_replaced = false;  // old size during a vertical resize
    int replaces = -1;                  // new size: the old-size node it retires once ready
    uint32_t replaces_gen = 0;
};

class Sim {
public:
    Sim(const Trace& tr, const Catalog& cat, const SimOptions& o, const Instance* start)
        : tr_(tr), cat_(cat), o_(o), scaler_(o.config), type_(start), rng_(o.seed) {}

    SimResult run();

private:
    void push(double t, Ev k, int32_t arg = 0, uint32_t gen = 0) { q_.push({t, seq_++, k, arg, gen}); }
    double hazard(const Instance* in) const {
        if (std::isfinite(o_.spot_hazard_per_h)) return o_.spot_hazard_per_h / 3600;
        double m = std::isfinite(in->spot_interruptions_per_month) ? in->spot_interruptions_per_month : 0.2;
        return hazard_per_hour(m) / 3600;
    }
    bool use_spot(const Instance* in) const { return o_.config.spot && in->has_spot(); }
    double price(const Node& n) const { return cat_.currency().convert(n.spot ? n.type->spot_usd_h : n.type->ondemand_usd_h); }
    int launch(const Instance* type, int replaces = -1);
    int replaced(const Node& n) const;
    void stop(int id);
    void preempt(int id);
    void advance(double t);
    int count_alive() const;
    int count_ready() const;
    double capacity() const;

    const Trace& tr_;
    const Catalog& cat_;
    const SimOptions& o_;
    Autoscaler scaler_;
    const Instance* type_;
    std::mt19937_64 rng_;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> q_;
    uint64_t seq_ = 0;
    std::vector<Node> nodes_;
    double now_ = 0, rate_ = 0, backlog_ = 0;
    double tick_served_ = 0, tick_capacity_ = 0;
    double cap_time_ = 0;  // integral of capacity
    int64_t ticks_ = 0, timeline_stride_ = 1;
    // Slots of stopped nodes, the lowest reused first (as a scan from the start found them).
    std::priority_queue<int, std::vector<int>, std::greater<>> free_;
    SimResult r_;

    void act(std::string what) {
        if (r_.actions.size() < SimResult::kMaxActions) r_.actions.emplace_back(now_, std::move(what));
        else ++r_.actions_dropped;
    }
};

int Sim::launch(const Instance* type, int replaces) {
    Node n;
    n.type = type;
    n.spot = use_spot(type);
    n.alive = true;
    n.launched = now_;
    n.replaces = replaces;
    if (replaces >= 0) n.replaces_gen = nodes_[replaces].gen;
    // A stopped node's slot (a scan of every node per launch made a scale-up to 10,000 nodes
    // quadratic).
    int id = -1;
    if (!free_.empty()) {
        id = free_.top();
        free_.pop();
    }
    if (id < 0) {
        id = static_cast<int>(nodes_.size());
        nodes_.push_back(n);
    } else {
        n.gen = nodes_[id].gen + 1;
        nodes_[id] = n;
    }
    push(now_ + o_.boot_s, Ev::kReady, id, nodes_[id].gen);
    if (nodes_[id].spot && hazard(type) > 0) {
        std::exponential_distribution<double> life(hazard(type));
        push(now_ + life(rng_), Ev::kPreempt, id, nodes_[id].gen);
    }
    return id;
}

/// The node `n` is to retire once ready, while that one still runs; -1 when none.
int Sim::replaced(const Node& n) const {
    if (n.replaces < 0) return -1;
    const Node& old = nodes_[n.replaces];
    return old.alive && old.gen == n.replaces_gen ? n.replaces : -1;
}

void Sim::stop(int id) {
    Node& n = nodes_[id];
    if (!n.alive) return;
    r_.cost += price(n) * (now_ - n.launched) / 3600;
    r_.node_hours += (now_ - n.launched) / 3600;
    n.alive = false;
    n.ready = false;
    free_.push(id);
}

void Sim::preempt(int id) {
    ++r_.preemptions;
    bool retiring = nodes_[id].retire_when_replaced;
    int old = replaced(nodes_[id]);
    stop(id);
    act("spot node preempted; replacement launched");
    if (!retiring) launch(type_, old);  // spot again (or on-demand when the type has no spot market)
}

int Sim::count_alive() const {
    int c = 0;
    for (const auto& n : nodes_) c += n.alive && !n.retire_when_replaced;
    return c;
}

int Sim::count_ready() const {
    int c = 0;
    for (const auto& n : nodes_) c += n.ready;
    return c;
}

double Sim::capacity() const {
    double c = 0;
    for (const auto& n : nodes_)
        if (n.ready) c += n.type->gpus * o_.per_gpu_capacity;
    return c;
}

void Sim::advance(double t) {
    double dt = t - now_;
    if (dt <= 0) return;
    double c = capacity();
    double b0 = backlog_;
    double b1 = std::max(0.0, b0 + (rate_ - c) * dt);
    // Served: every unit of capacity while work waited, or all the work when the queue emptied.
    // (b0 + rate dt - b1 cancelled: a backlog of 6e14 against 0.03 served a tick gave 104 %
    // utilisation per tick and 11 % over the run.)
    double served = b1 > 0 ? c * dt : b0 + rate_ * dt;
    // Queueing delay b / c above the objective: b above slo_wait x c. b is linear in t until it
    // reaches zero, so the time above the line is found exactly.
    double line = o_.slo_wait_s * c;
    double above = 0;
    if (c <= 0) {
        above = (b0 > 0 || rate_ > 0) ? dt : 0;
    } else {
        double slope = rate_ - c;
        if (b0 > line && b1 > line) above = dt;
        else if (b0 > line) above = slope < 0 ? std::min(dt, (b0 - line) / -slope) : dt;
        else if (b1 > line) above = slope > 0 ? std::max(0.0, dt - (line - b0) / slope) : 0;
    }
    r_.slo_violation_s += above;
    r_.arrived += rate_ * dt;
    r_.served += served;
    tick_served_ += served;
    tick_capacity_ += c * dt;
    cap_time_ += c * dt;
    backlog_ = b1;
    now_ = t;
}

SimResult Sim::run() {
    const double horizon = o_.horizon_s > 0 ? o_.horizon_s : tr_.points.back().t_s;
    for (size_t i = 0; i < tr_.points.size(); ++i)
        if (tr_.points[i].t_s <= horizon) push(tr_.points[i].t_s, Ev::kTrace, static_cast<int32_t>(i));
    push(0, Ev::kTick);
    push(horizon, Ev::kEnd);
    // The timeline keeps at most about kTimelinePoints points: on a longer run one point per k
    // ticks, with their peaks.
    timeline_stride_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(horizon / o_.tick_s / kTimelinePoints)));
    int start = o_.initial_nodes >= 0 ? o_.initial_nodes : o_.config.min_nodes;
    for (int i = 0; i < start; ++i) {
        int id = launch(type_);
        nodes_[id].ready = true;  // running before the trace starts
    }
    r_.max_nodes = start;
    while (!q_.empty()) {
        Event e = q_.top();
        q_.pop();
        ++r_.events;
        advance(e.t);
        if (e.kind == Ev::kEnd) break;
        switch (e.kind) {
            case Ev::kTrace: {
                const TracePoint& p = tr_.points[e.arg];
                rate_ = p.rate;
                // The trace reclaims the oldest live spot nodes, each at most once (their
                // replacements, launched here, are not reclaimed in the same row).
                if (p.preempt > 0) {
                    std::vector<int> spot;
                    for (size_t i = 0; i < nodes_.size(); ++i)
                        if (nodes_[i].alive && nodes_[i].spot) spot.push_back(static_cast<int>(i));
                    const size_t k = std::min(spot.size(), static_cast<size_t>(p.preempt));
                    std::partial_sort(spot.begin(), spot.begin() + static_cast<long>(k), spot.end(), [&](int a, int b) {
                        return nodes_[a].launched != nodes_[b].launched ? nodes_[a].launched < nodes_[b].launched : a < b;
                    });
                    for (size_t j = 0; j < k; ++j)
                        if (nodes_[spot[j]].alive) preempt(spot[j]);
                }
                break;
            }
            case Ev::kReady: {
                Node& n = nodes_[e.arg];
                if (!n.alive || n.gen != e.gen) break;
                n.ready = true;
                // A node of the new size retires the one of the old size it replaces (vertical resize).
                int old = replaced(n);
                n.replaces = -1;
                if (old >= 0) stop(old);
                break;
            }
            case Ev::kPreempt: {
                if (nodes_[e.arg].alive && nodes_[e.arg].gen == e.gen) preempt(e.arg);
                break;
            }
            case Ev::kTick: {
                Observation obs;
                obs.t_s = now_;
                obs.weekday_hour = o_.start_weekday_hour + now_ / 3600;
                obs.nodes = count_alive();
                obs.ready = count_ready();
                obs.instance = type_->type;
                obs.backlog = backlog_;
                // No capacity-time yet (the first tick): the load on the capacity there is now.
                double cap = capacity();
                obs.utilization = tick_capacity_ > 0 ? 100 * tick_served_ / tick_capacity_
                                  : cap > 0          ? std::min(100.0, 100 * rate_ / cap)
                                                     : (rate_ > 0 ? 100 : 0);
                Decision d = scaler_.decide(obs);
                if (d.resize) {
                    auto next = cat_.find(*d.resize, type_->region);
                    if (!next.is_ok()) next = cat_.find(*d.resize);
                    if (next.is_ok()) {
                        std::vector<int> old;
                        for (size_t i = 0; i < nodes_.size(); ++i)
                            if (nodes_[i].alive && !nodes_[i].retire_when_replaced) old.push_back(static_cast<int>(i));
                        for (auto& n : nodes_)
                            if (n.alive) n.retire_when_replaced = true;
                        type_ = *next;
                        for (int id : old) launch(type_, id);
                        ++r_.scale_actions;
                        act(d.reason);
                    }
                }
                int alive = count_alive();
                if (d.nodes > alive) {
                    for (int i = alive; i < d.nodes; ++i) launch(type_);
                    ++r_.scale_actions;
                    act(fmt::format("{} -> {} nodes: {}", alive, d.nodes, d.reason));
                } else if (d.nodes < alive) {
                    // Remove booting nodes first, then the newest (a real provider drains them
                    // first): one ordering of the candidates, not a scan per removed node.
                    std::vector<int> candidates;
                    for (size_t i = 0; i < nodes_.size(); ++i)
                        if (nodes_[i].alive && !nodes_[i].retire_when_replaced) candidates.push_back(static_cast<int>(i));
                    const size_t k = std::min(candidates.size(), static_cast<size_t>(alive - d.nodes));
                    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(k), candidates.end(),
                                      [&](int a, int b) {
                                          const Node &x = nodes_[a], &y = nodes_[b];
                                          if (x.ready != y.ready) return !x.ready;
                                          return x.launched != y.launched ? x.launched > y.launched : a < b;
                                      });
                    for (size_t j = 0; j < k; ++j) {
                        const int victim = candidates[j];
                        int old = replaced(nodes_[victim]);
                        stop(victim);
                        if (old >= 0) stop(old);  // the old-size node it was to replace goes with it
                    }
                    ++r_.scale_actions;
                    act(fmt::format("{} -> {} nodes: {}", alive, d.nodes, d.reason));
                }
                const int alive_now = count_alive();
                r_.max_nodes = std::max(r_.max_nodes, alive_now);
                if (o_.timeline) {
                    const double c = capacity();
                    const TimelinePoint p{now_, alive_now, count_ready(), rate_, c, backlog_, obs.utilization,
                                          c > 0 ? backlog_ / c : (backlog_ > 0 ? INFINITY : 0)};
                    if (ticks_++ % timeline_stride_ == 0) {
                        r_.timeline.push_back(p);
                    } else {  // a point stands for its ticks: their peaks of nodes, backlog and delay
                        TimelinePoint& w = r_.timeline.back();
                        w.nodes = std::max(w.nodes, p.nodes);
                        w.backlog = std::max(w.backlog, p.backlog);
                        w.wait_s = std::max(w.wait_s, p.wait_s);
                    }
                }
                tick_served_ = tick_capacity_ = 0;
                push(now_ + o_.tick_s, Ev::kTick);
                break;
            }
            default:
                break;
        }
    }
    for (size_t i = 0; i < nodes_.size(); ++i) stop(static_cast<int>(i));
    r_.duration_s = now_;
    r_.mean_utilization = cap_time_ > 0 ? 100 * r_.served / cap_time_ : 0;
    r_.currency = cat_.currency().code;
    return r_;
}

}  // namespace

Result<SimResult> simulate(const Trace& trace, const Catalog& catalog, const SimOptions& o) {
    if (trace.points.empty()) return invalid_argument("the trace has no rows");
    if (!(o.per_gpu_capacity > 0)) return invalid_argument("per-GPU capacity must be > 0 (work units per second)");
    if (!(o.tick_s > 0) || !(o.boot_s >= 0) || !(o.slo_wait_s > 0))
        return invalid_argument("tick, boot time and SLO must be positive");
    if (o.initial_nodes > o.config.max_nodes)
        return invalid_argument("--initial-nodes {} is more than the policy's max_nodes {}", o.initial_nodes,
                                o.config.max_nodes);
    if (std::isfinite(o.spot_hazard_per_h) && !(o.spot_hazard_per_h >= 0 && o.spot_hazard_per_h <= 3600))
        return invalid_argument("--spot-hazard {} is not a rate in [0, 3600] preemptions per node-hour",
                                o.spot_hazard_per_h);
    STRATO_ASSIGN_OR_RETURN(const Instance* start, catalog.find(o.instance, o.region));
    // With spot on, the cheapest region is the one with the cheapest spot price (find ranks by
    // on-demand price).
    if (o.region.empty() && o.config.spot)
        for (const auto& in : catalog.instances())
            if (in.type == start->type && in.has_spot() && (!start->has_spot() || in.spot_usd_h < start->spot_usd_h))
                start = &in;
    // Every node type the run may use (the start and the vertical ladder) must have a price in the
    // market it runs in: a ladder step without one made the cost NaN.
    auto priced = [&](const Instance* in) -> Status {
        if (o.config.spot && !in->has_spot() && !o.config.fallback_ondemand)
            return invalid_argument("{} has no spot price in the catalog and [spot] fallback_ondemand = false",
                                    in->key());
        if (!in->has_ondemand() && !(o.config.spot && in->has_spot()))
            return invalid_argument("{} has no {}price in the catalog", in->key(), o.config.spot ? "" : "on-demand ");
        return Status::ok();
    };
    STRATO_RETURN_IF_ERROR(priced(start));
    // The highest spot hazard per node-hour of the types the run may use (bounds the run below).
    const auto hazard_h = [&](const Instance* in) {
        if (!(o.config.spot && in->has_spot())) return 0.0;
        if (std::isfinite(o.spot_hazard_per_h)) return o.spot_hazard_per_h;
        const double per_month = in->spot_interruptions_per_month;
        return hazard_per_hour(std::isfinite(per_month) ? per_month : 0.2);
    };
    double hazard_max_h = hazard_h(start);
    for (const auto& p : o.config.policies) {
        // A vertical policy steps from the type the nodes run: off its ladder it never resized,
        // without a word, while the nodes stayed saturated.
        if (p.kind == "vertical" && std::find(p.ladder.begin(), p.ladder.end(), start->type) == p.ladder.end())
            return invalid_argument("--instance {} is not on the vertical policy's ladder ({}): it could never resize; "
                                    "start on a type of the ladder",
                                    start->type, fmt::join(p.ladder, ", "));
        // Step by step as the resizes will go: each looked up in the region of the type before it.
        std::string region = start->region;
        for (const auto& t : p.ladder) {
            auto step = catalog.find(t, region);
            if (!step.is_ok()) step = catalog.find(t);  // (as the resize looks it up)
            STRATO_RETURN_IF_ERROR(step.status().with_context("vertical ladder"));
            STRATO_RETURN_IF_ERROR(priced(*step).with_context("vertical ladder"));
            hazard_max_h = std::max(hazard_max_h, hazard_h(*step));
            region = (*step)->region;
        }
    }
    // Time runs from the trace's first row (a trace in Unix time starts at 1.7e9 s, not at 0: it
    // is not billed from 1970), and a run is bounded: one control-loop tick costs a pass over the
    // nodes, and the timeline keeps a point per tick.
    Trace shifted = trace;
    const double first = trace.points.front().t_s;
    for (auto& p : shifted.points) p.t_s -= first;
    // The run ends at the trace's last row (a tick more billed 25 h for a day, and 1,007 days for a
    // day with --tick 1000d); a trace of one instant has no end of its own.
    const double horizon = o.horizon_s > 0 ? o.horizon_s : shifted.points.back().t_s;
    if (!(horizon > 0))
        return invalid_argument("{}: every row is at time_s {:g}, so the trace has no duration; give --horizon or a "
                                "last row at the end time",
                                trace.source.empty() ? "the trace" : trace.source, trace.points.back().t_s);
    constexpr double kMaxTicks = 1e7;
    if (horizon / o.tick_s > kMaxTicks)
        return invalid_argument("{:.3g} s simulated in ticks of {:g} s is {:.3g} control-loop ticks, more than {:g}: "
                                "use a longer --tick or a shorter --horizon",
                                horizon, o.tick_s, horizon / o.tick_s, kMaxTicks);
    // A tick walks the nodes (about 10 M node-ticks a second): 10,000 nodes for 1e7 ticks was hours.
    constexpr double kMaxNodeTicks = 1e9;
    const double node_ticks = horizon / o.tick_s * std::max(o.config.max_nodes, 1);
    if (node_ticks > kMaxNodeTicks)
        return invalid_argument("{:.3g} control-loop ticks over up to {} nodes is {:.3g} node-ticks, more than {:g}: "
                                "use a longer --tick, a shorter --horizon or a smaller max_nodes",
                                horizon / o.tick_s, o.config.max_nodes, node_ticks, kMaxNodeTicks);
    // Preemptions are events of their own, not bounded by the ticks: --spot-hazard 3600 over a
    // week of 10,000 nodes was 6e9 of them (about an hour of running, the tick bound passed).
    constexpr double kMaxPreemptions = 1e8;
    const double preemptions = hazard_max_h * horizon / 3600 * o.config.max_nodes;
    if (preemptions > kMaxPreemptions)
        return invalid_argument("{:g} spot preemptions per node-hour over {:.3g} s on up to {} nodes is about {:.3g} "
                                "preemptions to simulate, more than {:g}: use a lower --spot-hazard, a shorter "
                                "--horizon or a smaller max_nodes",
                                hazard_max_h, horizon, o.config.max_nodes, preemptions, kMaxPreemptions);
    auto t0 = std::chrono::steady_clock::now();
    Sim sim(shifted, catalog, o, start);
    SimResult r = sim.run();
    r.region = start->region;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

SpotJobRun simulate_spot_job(const SpotJob& job, uint64_t seed) {
    SpotJobRun r;
    std::mt19937_64 rng(seed);
    const double lambda = job.hazard_per_s;
    std::exponential_distribution<double> next_failure(lambda > 0 ? lambda : 1.0);
    const double tau = job.interval_s > 0 ? std::min(job.interval_s, job.work_s)
                                          : young_interval(job.checkpoint_s, lambda, job.work_s);
    double done = 0;
    while (done < job.work_s) {
        double work = std::min(tau, job.work_s - done);
        double s = work + (done + work < job.work_s ? job.checkpoint_s : 0);
        for (;;) {
            ++r.events;
            double x = lambda > 0 ? next_failure(rng) : INFINITY;
            if (x >= s) {
                r.wall_s += s;
                break;
            }
            r.wall_s += x + job.restart_s;
            ++r.interruptions;
        }
        done += work;
    }
    return r;
}

nlohmann::json sim_to_json(const SimResult& r, const SimOptions& o) {
    nlohmann::json tl = nlohmann::json::array();
    for (const auto& p : r.timeline)
        tl.push_back({p.t_s, p.nodes, p.ready, p.rate, p.capacity, p.backlog, p.utilization,
                      std::isfinite(p.wait_s) ? nlohmann::json(p.wait_s) : nlohmann::json(nullptr)});
    nlohmann::json actions = nlohmann::json::array();
    for (const auto& [t, what] : r.actions) actions.push_back({{"t_s", t}, {"what", what}});
    nlohmann::json j = {{"kind", "strato-autoscale-sim"},
                        {"instance", o.instance},
                        {"region", r.region},
                        {"currency", r.currency},
                        {"cost", r.cost},
                        {"node_hours", r.node_hours},
                        {"slo_wait_s", o.slo_wait_s},
                        // What the run assumed (a --json file without them could not be read
                        // back: 1.2 nodes' worth of cost at which capacity, tick and boot?).
                        {"per_gpu_capacity", o.per_gpu_capacity},
                        {"tick_s", o.tick_s},
                        {"boot_s", o.boot_s},
                        {"spot", o.config.spot},
                        {"seed", o.seed},
                        {"slo_violation_s", r.slo_violation_s},
                        {"duration_s", r.duration_s},
                        {"arrived", r.arrived},
                        {"served", r.served},
                        {"mean_utilization", r.mean_utilization},
                        {"max_nodes", r.max_nodes},
                        {"preemptions", r.preemptions},
                        {"scale_actions", r.scale_actions},
                        {"actions_dropped", r.actions_dropped},
                        {"events", r.events},
                        {"wall_s", r.wall_s},
                        {"events_per_s", r.wall_s > 0 ? r.events / r.wall_s : 0},
                        {"timeline_columns", {"t_s", "nodes", "ready", "rate", "capacity", "backlog", "utilization", "wait_s"}},
                        {"timeline", tl},
                        {"actions", actions}};
    return j;
}

}  // namespace strato::cloud
