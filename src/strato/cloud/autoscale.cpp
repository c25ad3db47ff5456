#include "strato/core/toml_guard.h"
#include "strato/cloud/autoscale.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <toml++/toml.h>

#include "strato/core/duration.h"
#include "strato/core/fs.h"

namespace strato::cloud {

Result<double> parse_clock(std::string_view text) {
    int h = -1, m = -1;
    if (text.size() == 5 && text[2] == ':' && std::isdigit(static_cast<unsigned char>(text[0])) &&
        std::isdigit(static_cast<unsigned char>(text[1])) && std::isdigit(static_cast<unsigned char>(text[3])) &&
        std::isdigit(static_cast<unsigned char>(text[4]))) {
        h = (text[0] - '0') * 10 + (text[1] - '0');
        m = (text[3] - '0') * 10 + (text[4] - '0');
    }
    if (h < 0 || h > 24 || m < 0 || m > 59 || (h == 24 && m != 0))
        return invalid_argument("time of day '{}': expected HH:MM (00:00 to 24:00)", text);
    return h + m / 60.0;
}

Result<int> parse_days(std::string_view text) {
    static const char* kDays[] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};
    auto day = [&](std::string_view d) -> int {
        for (int i = 0; i < 7; ++i)
            if (d == kDays[i]) return i;
        return -1;
    };
    int mask = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t comma = text.find(',', pos);
        std::string_view part = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
        size_t dash = part.find('-');
        int a = day(part.substr(0, dash)), b = dash == std::string_view::npos ? a : day(part.substr(dash + 1));
        if (a < 0 || b < 0) return invalid_argument("days '{}': expected names like mon-fri or sat,sun", text);
        for (int d = a;; d = (d + 1) % 7) {
            mask |= 1 << d;
            if (d == b) break;
        }
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
    }
    return mask;
}

namespace {

Result<double> duration_field(const toml::table& t, const char* key, double def, const std::string& where) {
    auto* n = t.get(key);
    if (!n) return def;
    if (auto v = n->value<std::string>()) {
        auto s = parse_duration_s(*v);
        if (!s.is_ok()) return s.status().with_context(fmt::format("{} {}", where, key));
        return *s;
    }
    if (auto v = n->value<double>(); v && *v >= 0 && *v <= 1e9) return *v;
    return invalid_argument("{}: {} must be a duration such as \"5m\" (or seconds, up to 1e9)", where, key);
}

constexpr int kMaxNodes = 10000;  // the simulator passes over every node each tick

// (1e9 by default: node counts and seconds far above any real one, far below int's limit; a
// percent says 100, or target = -5 was told "[1, 1e+09]")
Result<double> number_field(const toml::table& t, const char* key, double def, double min, const std::string& where,
                            double max = 1e9) {
    auto* n = t.get(key);
    if (!n) return def;
    auto v = n->value<double>();
    if (!v || !std::isfinite(*v) || *v < min || *v > max)
        return invalid_argument("{}: {} must be a number in [{}, {:g}]", where, key, min, max);
    return *v;
}

/// A node count: a whole number in [min, max] (1.9 nodes is a typo, not 1).
Result<int> count_field(const toml::table& t, const char* key, int def, int min, int max, const std::string& where) {
    auto* n = t.get(key);
    if (!n) return def;
    auto v = n->value<double>();
    if (!v || !(*v >= min && *v <= max) || *v != std::floor(*v))
        return invalid_argument("{}: {} must be a whole number in [{}, {}]", where, key, min, max);
    return static_cast<int>(*v);
}

Result<bool> bool_field(const toml::table& t, const char* key, bool def, const std::string& where) {
    auto* n = t.get(key);
    if (!n) return def;
    if (auto v = n->value<bool>()) return *v;
    return invalid_argument("{}: {} must be true or false", where, key);
}

Status only_keys(const toml::table& t, std::initializer_list<std::string_view> keys, const std::string& where) {
    for (auto&& [k, v] : t) {
        if (std::find(keys.begin(), keys.end(), k.str()) == keys.end())
            return invalid_argument("{}: unknown key '{}' (expected {})", where, k.str(),
                                    fmt::join(keys.begin(), keys.end(), ", "));
    }
    return Status::ok();
}

}  // namespace

Result<AutoscaleConfig> AutoscaleConfig::parse(std::string_view toml_text, const std::string& source) {
    STRATO_ASSIGN_OR_RETURN(toml::table doc, parse_toml_named(toml_text, source));
    STRATO_RETURN_IF_ERROR(only_keys(doc, {"autoscale", "policy", "spot"}, source));
    // Each in its shape: [autoscale] and [spot] tables, [[policy]] an array of tables (another
    // shape was skipped without a word and the defaults ran).
    for (const auto& [key, shape] : {std::pair<const char*, const char*>{"autoscale", "a table, [autoscale]"},
                                     {"spot", "a table, [spot]"}}) {
        if (const toml::node* n = doc.get(key); n && !n->is_table())
            return invalid_argument("{}: '{}' must be {}, not {}", source, key, shape,
                                    n->is_array_of_tables() ? "an array of tables ([[...]])" : "a value");
    }
    if (const toml::node* n = doc.get("policy"); n && !n->is_array_of_tables())
        return invalid_argument("{}: 'policy' must be an array of tables, [[policy]] (one per policy), not {}", source,
                                n->is_table() ? "a single [policy] table" : "a value");
    AutoscaleConfig c;
    if (auto* a = doc["autoscale"].as_table()) {
        std::string where = source + " [autoscale]";
        STRATO_RETURN_IF_ERROR(
            only_keys(*a, {"min_nodes", "max_nodes", "cooldown_up", "cooldown_down", "down_after"}, where));
        STRATO_ASSIGN_OR_RETURN(c.min_nodes, count_field(*a, "min_nodes", 1, 0, kMaxNodes, where));
        STRATO_ASSIGN_OR_RETURN(c.max_nodes, count_field(*a, "max_nodes", 8, 1, kMaxNodes, where));
        if (c.min_nodes > c.max_nodes)  // (min_nodes = 10 alone was told "above max_nodes 8", a number it never wrote)
            return invalid_argument("{}: min_nodes {} is above max_nodes {}{}", where, c.min_nodes, c.max_nodes,
                                    a->contains("max_nodes") ? "" : " (the default: set max_nodes)");
        STRATO_ASSIGN_OR_RETURN(c.cooldown_up_s, duration_field(*a, "cooldown_up", 60, where));
        STRATO_ASSIGN_OR_RETURN(c.cooldown_down_s, duration_field(*a, "cooldown_down", 300, where));
        STRATO_ASSIGN_OR_RETURN(c.down_after_s, duration_field(*a, "down_after", 300, where));
    }
    if (auto* s = doc["spot"].as_table()) {
        STRATO_RETURN_IF_ERROR(only_keys(*s, {"enabled", "fallback_ondemand"}, source + " [spot]"));
        STRATO_ASSIGN_OR_RETURN(c.spot, bool_field(*s, "enabled", false, source + " [spot]"));
        STRATO_ASSIGN_OR_RETURN(c.fallback_ondemand, bool_field(*s, "fallback_ondemand", true, source + " [spot]"));
    }
    if (auto* arr = doc["policy"].as_array()) {
        int i = 0;
        for (auto& node : *arr) {
            std::string where = fmt::format("{} policy {}", source, ++i);
            auto* t = node.as_table();
            if (!t) return invalid_argument("{}: expected a [[policy]] table", where);
            ScalePolicy p;
            if (t->contains("kind") && !(*t)["kind"].is_string())  // (kind = 5 was "got ''")
                return invalid_argument("{}: kind must be a string: backlog, utilization, vertical or schedule", where);
            p.kind = (*t)["kind"].value_or(std::string());
            if (p.kind == "backlog") {
                STRATO_RETURN_IF_ERROR(only_keys(*t, {"kind", "per_node"}, where));
                STRATO_ASSIGN_OR_RETURN(p.per_node, number_field(*t, "per_node", 0, 1e-9, where));
                if (!(p.per_node > 0)) return invalid_argument("{}: backlog needs per_node > 0", where);
            } else if (p.kind == "utilization") {
                STRATO_RETURN_IF_ERROR(only_keys(*t, {"kind", "target"}, where));
                STRATO_ASSIGN_OR_RETURN(p.target, number_field(*t, "target", 70, 1, where, 100));  // (a percent)
            } else if (p.kind == "vertical") {
                STRATO_RETURN_IF_ERROR(only_keys(*t, {"kind", "above", "for", "ladder"}, where));
                STRATO_ASSIGN_OR_RETURN(p.above, number_field(*t, "above", 90, 0, where, 100));  // (a percent)
                STRATO_ASSIGN_OR_RETURN(p.for_s, duration_field(*t, "for", 600, where));
                if (t->contains("ladder") && !(*t)["ladder"].as_array())
                    return invalid_argument("{}: ladder must be an array of instance types", where);
                if (auto* l = (*t)["ladder"].as_array()) {
                    for (size_t k = 0; k < l->size(); ++k) {
                        auto v = (*l)[k].value<std::string>();
                        if (!v || v->empty())
                            return invalid_argument("{}: ladder[{}] must be an instance type name", where, k);
                        if (std::find(p.ladder.begin(), p.ladder.end(), *v) != p.ladder.end())
                            return invalid_argument("{}: ladder lists {} twice (a step to itself only reboots)", where, *v);
                        p.ladder.push_back(*v);
                    }
                }
                if (p.ladder.size() < 2)
                    return invalid_argument("{}: vertical needs a ladder of at least two instance types", where);
            } else if (p.kind == "schedule") {
                STRATO_RETURN_IF_ERROR(only_keys(*t, {"kind", "days", "from", "to", "nodes", "otherwise"}, where));
                for (const char* k : {"days", "from", "to"})
                    if (t->contains(k) && !(*t)[k].is_string())
                        return invalid_argument("{}: {} must be a string such as \"mon-fri\" or \"18:00\"", where, k);
                auto days = parse_days((*t)["days"].value_or(std::string("mon-sun")));
                if (!days) return days.status().with_context(where);
                p.days_mask = *days;
                auto from = parse_clock((*t)["from"].value_or(std::string("00:00")));
                if (!from) return from.status().with_context(where + " from");
                auto to = parse_clock((*t)["to"].value_or(std::string("24:00")));
                if (!to) return to.status().with_context(where + " to");
                p.from_h = *from;
                p.to_h = *to;
                if (p.from_h == p.to_h) return invalid_argument("{}: from and to are the same time: an empty window", where);
                if (!t->contains("nodes")) return invalid_argument("{}: schedule needs nodes", where);
                STRATO_ASSIGN_OR_RETURN(p.nodes, count_field(*t, "nodes", 0, 0, kMaxNodes, where));
                STRATO_ASSIGN_OR_RETURN(p.otherwise, count_field(*t, "otherwise", 0, 0, kMaxNodes, where));
            } else {
                return invalid_argument("{}: kind must be backlog, utilization, vertical or schedule, got '{}'", where,
                                        p.kind);
            }
            c.policies.push_back(std::move(p));
        }
    }
    if (c.policies.empty()) return invalid_argument("{}: no [[policy]]: nothing would ever scale", source);
    // Utilisation is measured on running nodes: from zero nodes only a backlog or a schedule can
    // start one.
    const bool from_zero = std::any_of(c.policies.begin(), c.policies.end(), [](const ScalePolicy& p) {
        return p.kind == "backlog" || (p.kind == "schedule" && (p.nodes > 0 || p.otherwise > 0));
    });
    if (c.min_nodes == 0 && !from_zero)
        return invalid_argument("{}: min_nodes = 0, but no policy can start a node from zero (utilisation is measured "
                                "on running nodes); set min_nodes >= 1, or add a backlog policy or a schedule with nodes > 0",
                                source);
    return c;
}

Result<AutoscaleConfig> AutoscaleConfig::load(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path, fs::kTextFileLimit));
    return parse(text, path);
}

namespace {

// ceil(x) nodes, held within int: a backlog of 1e6 at per_node 0.001 cast to INT_MIN and never scaled.
int nodes_for(double x) {
    if (!(x > 0)) return 0;  // (NaN too)
    // (a ratio that is a whole number on paper, 4.9 / 0.7 = 7.000000000000001, is not one more node)
    return x >= 1e9 ? 1'000'000'000 : static_cast<int>(std::ceil(x * (1 - 1e-12)));
}

}  // namespace

Decision Autoscaler::decide(const Observation& o) {
    Decision d;
    d.nodes = o.nodes;
    int want = c_.min_nodes;
    std::string why = fmt::format("no policy asks for more than min_nodes ({})", c_.min_nodes);
    auto propose = [&](int n, std::string reason) {
        if (n > want) want = n, why = std::move(reason);
    };
    for (const auto& p : c_.policies) {
        if (p.kind == "backlog") {
            int n = nodes_for(o.backlog / p.per_node);
            // (a mean backlog below one, 0.2 requests in flight, read "backlog 0 needs 1 node(s)")
            propose(n, o.backlog >= 1 ? fmt::format("backlog {:.0f} needs {} node(s) at {:g} each", o.backlog, n, p.per_node)
                                      : fmt::format("backlog {:.2g} needs {} node(s) at {:g} each", o.backlog, n, p.per_node));
        } else if (p.kind == "utilization") {
            // As Kubernetes' HPA: ceil(nodes x utilisation / target), held within a 10 % tolerance.
            // Utilisation is measured on the ready nodes. Scaling up, booting nodes count as idle,
            // as the HPA counts pods that are not ready (a boot does not compound into another
            // scale-up); scaling down, they are kept (the HPA would leave them out: strato does
            // not take back capacity it has just started).
            const double ratio = o.utilization / p.target;
            const int ready = o.ready < 0 ? o.nodes : std::min(o.ready, o.nodes);
            const int n = std::abs(ratio - 1) <= 0.1 ? o.nodes
                          : ratio > 1              ? std::max(o.nodes, nodes_for(ready * ratio - 1e-9))
                                                   : std::min(o.nodes, nodes_for(ready * ratio - 1e-9) + (o.nodes - ready));
            propose(n, fmt::format("utilization {:.0f}% of {} node(s), target {:g}%", o.utilization, o.nodes, p.target));
        } else if (p.kind == "schedule") {
            double wh = std::fmod(o.weekday_hour, 168.0);
            int day = static_cast<int>(wh / 24);
            double h = wh - day * 24;
            // A window that crosses midnight (18:00 to 09:00) belongs to the day it starts on.
            bool in = p.from_h < p.to_h ? (p.days_mask >> day & 1) && h >= p.from_h && h < p.to_h
                                        : ((p.days_mask >> day & 1) && h >= p.from_h) ||
                                              ((p.days_mask >> ((day + 6) % 7) & 1) && h < p.to_h);
            propose(in ? p.nodes : p.otherwise, in ? "schedule window" : "schedule outside the window");
        } else if (p.kind == "vertical") {
            // GPUs that are not running are not busy: with no ready node (scaled to zero, every
            // node booting) the utilisation is no measurement (the simulator says 100 % for work
            // arriving at no capacity), and a resize then stepped up the ladder with no node on it.
            const int ready = o.ready < 0 ? o.nodes : std::min(o.ready, o.nodes);
            if (ready > 0 && o.utilization > p.above) {
                if (busy_since_ < 0) busy_since_ = o.t_s;
                auto it = std::find(p.ladder.begin(), p.ladder.end(), o.instance);
                if (o.t_s - busy_since_ >= p.for_s && it != p.ladder.end() && it + 1 != p.ladder.end() &&
                    o.t_s - last_change_ >= c_.cooldown_up_s) {
                    d.resize = *(it + 1);
                    busy_since_ = -1;
                    last_up_ = last_change_ = o.t_s;
                    d.reason = fmt::format("vertical: utilization above {:g}% for {:g} s: {} -> {}", p.above, p.for_s,
                                           o.instance, *d.resize);
                }
            } else {
                busy_since_ = -1;
            }
        }
    }
    // The reason names the count the policy asked for; a clamp says so ("needs 6 node(s)" with
    // 3 started read as a bug).
    const int asked = want;
    want = std::clamp(want, c_.min_nodes, c_.max_nodes);
    if (want < asked) why += fmt::format(" (clamped to max_nodes {})", c_.max_nodes);
    else if (want > asked) why += fmt::format(" (clamped to min_nodes {})", c_.min_nodes);
    if (want > o.nodes) {
        down_wanted_since_ = -1;
        down_window_.clear();
        if (o.may_scale_up && o.t_s - last_up_ >= c_.cooldown_up_s) {
            d.nodes = want;
            last_up_ = last_change_ = o.t_s;
            d.reason = d.reason.empty() ? "up: " + why : d.reason + "; up: " + why;
        }
    } else if (want < o.nodes) {
        if (down_wanted_since_ < 0) down_wanted_since_ = o.t_s;
        // The highest count wanted within down_after, not the one of this instant: ten minutes at
        // 9 of 10 nodes and one quiet tick at the end went down to 1.
        while (!down_window_.empty() && down_window_.back().nodes <= want) down_window_.pop_back();
        down_window_.push_back({o.t_s, want, std::move(why)});  // (why is not read below)
        while (down_window_.front().t_s < o.t_s - c_.down_after_s) down_window_.pop_front();
        const Wanted& peak = down_window_.front();
        if (o.t_s - down_wanted_since_ >= c_.down_after_s && o.t_s - last_change_ >= c_.cooldown_down_s &&
            peak.nodes < o.nodes) {
            d.nodes = peak.nodes;
            last_change_ = o.t_s;
            down_wanted_since_ = -1;
            const std::string down =
                "down: " + peak.why +
                (peak.t_s < o.t_s ? fmt::format(" ({:g} s ago: the most wanted within down_after)", o.t_s - peak.t_s) : "");
            d.reason = d.reason.empty() ? down : d.reason + "; " + down;
            down_window_.clear();
        }
    } else {
        down_wanted_since_ = -1;
        down_window_.clear();
    }
    return d;
}

}  // namespace strato::cloud
