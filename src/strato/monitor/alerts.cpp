#include "strato/core/toml_guard.h"
#include "strato/monitor/alerts.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "strato/core/duration.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/loadgen/http_parse.h"

namespace strato::monitor {

bool AlertRule::holds(double v) const {
    if (std::isnan(v)) return false;
    if (op == "<") return v < threshold;
    if (op == "<=") return v <= threshold;
    if (op == ">") return v > threshold;
    if (op == ">=") return v >= threshold;
    if (op == "==") return v == threshold;
    return v != threshold;
}

Result<AlertRule> parse_condition(std::string_view expr) {
    AlertRule r;
    r.expr = std::string(expr);
    auto bad = [&](std::string_view why) {
        return invalid_argument("condition '{}': {} (expected METRIC OP NUMBER [for DURATION], e.g. "
                                "\"gpu_util < 20 for 10m\")",
                                expr, why);
    };
    std::string s(expr);
    size_t pos = 0;
    auto blank = [&](size_t i) { return s[i] == ' ' || s[i] == '\t'; };
    auto skip = [&] {
        while (pos < s.size() && blank(pos)) ++pos;
    };
    auto word = [&] {
        skip();
        size_t b = pos;
        while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_' || s[pos] == ':'))
            ++pos;
        return s.substr(b, pos - b);
    };
    std::string w = word();
    skip();
    if (pos < s.size() && s[pos] == '(') {
        if (w != "avg" && w != "min" && w != "max" && w != "sum") return bad("unknown aggregate '" + w + "'");
        r.aggregate = w;
        ++pos;
        r.metric = word();
        skip();
        if (pos >= s.size() || s[pos] != ')') return bad("missing ')'");
        ++pos;
    } else {
        r.metric = w;
    }
    if (r.metric.empty()) return bad("no metric name");
    skip();
    if (pos < s.size() && s[pos] == '{')
        return bad("label selectors ({...}) are not supported: a rule watches every series of its metric; combine "
                   "them with avg(), min(), max() or sum()");
    for (const char* op : {"<=", ">=", "==", "!=", "<", ">"}) {
        if (s.compare(pos, std::strlen(op), op) == 0) {
            r.op = op;
            pos += std::strlen(op);
            break;
        }
    }
    if (r.op.empty()) return bad("no comparison (<, <=, >, >=, ==, !=)");
    skip();
    size_t b = pos;
    while (pos < s.size() && !blank(pos)) ++pos;
    std::string num = s.substr(b, pos - b);
    // One leading '+' as Prometheus takes it ("> +1"); from_chars takes none.
    const char* first = num.data() + (num.size() > 1 && num[0] == '+' && num[1] != '+' && num[1] != '-');
    auto [p, ec] = std::from_chars(first, num.data() + num.size(), r.threshold);
    if (num.empty() || ec != std::errc() || p != num.data() + num.size() || !std::isfinite(r.threshold))
        return bad("'" + num + "' is not a finite number");
    skip();
    if (pos < s.size()) {
        const size_t at = pos;
        std::string f = word();
        std::transform(f.begin(), f.end(), f.begin(), [](unsigned char c) { return std::tolower(c); });
        if (f != "for") return bad("unexpected '" + s.substr(at) + "'");
        skip();
        std::string d = s.substr(pos);
        while (!d.empty() && (d.back() == ' ' || d.back() == '\t')) d.pop_back();
        // A unit is required, as Prometheus requires one: "for 10" could be meant as minutes.
        if (!d.empty() && d.find_first_not_of("0123456789.") == std::string::npos)
            return bad("'for " + d + "' needs a unit, such as " + d + "s or " + d + "m");
        auto secs = parse_duration_s(d, "s");
        if (!secs.is_ok()) return bad(secs.status().message());
        r.for_s = *secs;
    }
    return r;
}

Result<std::vector<AlertRule>> parse_rules(std::string_view toml_text, const std::string& source) {
    STRATO_ASSIGN_OR_RETURN(toml::table doc, parse_toml_named(toml_text, source));
    for (auto&& [k, v] : doc)
        if (k.str() != "rule") return invalid_argument("{}: unknown key '{}' (rules are [[rule]] tables)", source, k.str());
    std::vector<AlertRule> rules;
    if (doc.contains("rule") && !doc["rule"].as_array())
        return invalid_argument("{}: 'rule' must be an array of tables: write [[rule]], not [rule]", source);
    auto* arr = doc["rule"].as_array();
    if (!arr) return rules;
    int i = 0;
    std::vector<bool> unnamed;  // per rule so far: its name is the default "rule<N>"
    for (auto& node : *arr) {
        ++i;
        auto* t = node.as_table();
        std::string where = fmt::format("{} rule {}", source, i);
        if (!t) return invalid_argument("{}: expected a table", where);
        auto str = [&](const char* key) -> std::optional<std::string> {
            auto v = (*t)[key].value<std::string>();
            return v;
        };
        for (auto&& [k, v] : *t) {
            std::string key(k.str());
            if (key != "name" && key != "when" && key != "action" && key != "webhook" && key != "severity")
                return invalid_argument("{}: unknown key '{}' (expected name, when, action, webhook, severity)", where, key);
            if (!v.is_string()) return invalid_argument("{}: '{}' must be a string", where, key);
        }
        auto when = str("when");
        if (!when) return invalid_argument("{}: missing 'when' (e.g. when = \"gpu_util < 20 for 10m\")", where);
        auto r = parse_condition(*when);
        if (!r.is_ok()) return r.status().with_context(where);
        AlertRule rule = std::move(*r);
        rule.name = str("name").value_or(fmt::format("rule{}", i));
        if (rule.name.empty()) return invalid_argument("{}: name must not be empty", where);
        const bool defaulted = !str("name").has_value();
        for (size_t k = 0; k < rules.size(); ++k) {
            if (rules[k].name != rule.name) continue;
            // ("a second rule named 'rule2'" when neither the user wrote twice: one was unnamed)
            const std::string why = defaulted     ? fmt::format(" (the name an unnamed rule {} gets; name it)", i)
                                    : unnamed[k] ? fmt::format(" (the name unnamed rule {} got; name that one)", k + 1)
                                                 : std::string();
            return invalid_argument("{}: a second rule named '{}'{}", where, rule.name, why);
        }
        unnamed.push_back(defaulted);
        rule.action = str("action").value_or("log");
        rule.webhook = str("webhook").value_or("");
        rule.severity = str("severity").value_or("warning");
        if (rule.action != "log" && rule.action != "webhook" && rule.action != "exit")
            return invalid_argument("{} ({}): action must be log, webhook or exit, got '{}'", where, rule.name, rule.action);
        if (rule.action == "webhook" && rule.webhook.empty())
            return invalid_argument("{} ({}): action = \"webhook\" needs webhook = \"http://127.0.0.1:PORT/path\"", where,
                                    rule.name);
        // A webhook with the default action was never called: an alert that went nowhere.
        if (!rule.webhook.empty() && rule.action != "webhook")
            return invalid_argument(
                "{} ({}): webhook is set but action is '{}', so it would never be called; add "
                "action = \"webhook\" (or remove webhook)",
                where, rule.name, rule.action);
        if (!rule.webhook.empty())
            if (auto url = loadgen::parse_url(rule.webhook); !url.is_ok())
                return url.status().with_context(fmt::format("{} ({}): webhook", where, rule.name));
        rules.push_back(std::move(rule));
    }
    return rules;
}

Result<std::vector<AlertRule>> load_rules(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path, fs::kTextFileLimit));
    return parse_rules(text, path);
}

namespace {

std::string iso_time(double unix_s) {
    // A replayed log's "t" is anything; gmtime cannot place years past 9999 (1e300 printed a
    // negative year).
    if (!(unix_s >= 0 && unix_s < 253402300800.0)) return fmt::format("t={:g}", unix_s);
    std::time_t t = static_cast<std::time_t>(unix_s);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// The series' identifying label, as the JSONL keeps it: what a replay can give back.
SeriesLabels series_labels(const Labels& labels) {
    auto [k, v] = series_label(labels);
    if (k.empty()) return {};
    return {{k, v}};
}

}  // namespace

std::string AlertEvent::series() const {
    std::string out;
    for (const auto& [k, v] : labels) out += (out.empty() ? "" : ",") + k + "=" + v;
    return out;
}

std::string AlertEvent::describe() const {
    std::string metric = rule->aggregate.empty() ? rule->metric : rule->aggregate + "(" + rule->metric + ")";
    if (!labels.empty()) metric += "{" + series() + "}";
    if (std::isnan(value))
        return fmt::format("{} resolved: {} is no longer sampled (since {})", rule->name, metric,
                           iso_time(since_unix_s));
    return fmt::format("{} {}: {} = {:g} {} {:g}{} (since {})", rule->name, firing ? "firing" : "resolved", metric, value,
                       firing ? rule->op : "no longer " + rule->op, rule->threshold,
                       rule->for_s > 0 ? fmt::format(" for {:g}s", rule->for_s) : "", iso_time(since_unix_s));
}

std::string AlertEvent::webhook_json() const {
    // The series' labels as labels of their own (one "series=gpu=0" string matched no route).
    nlohmann::json all = {{"alertname", rule->name}, {"severity", rule->severity}};
    for (const auto& [k, v] : labels)
        if (k != "alertname" && k != "severity") all[k] = v;
    nlohmann::json alert = {{"status", firing ? "firing" : "resolved"},
                            {"labels", all},
                            // annotations are strings in Alertmanager's model (a number breaks typed receivers)
                            {"annotations", {{"summary", describe()}, {"value", fmt::format("{:g}", value)}, {"expr", rule->expr}}},
                            {"startsAt", iso_time(since_unix_s)},
                            {"endsAt", firing ? "0001-01-01T00:00:00Z" : iso_time(at_unix_s)},
                            {"generatorURL", ""}};  // (a URL; strato has no page for the rule)
    nlohmann::json j = {{"version", "4"},
                        {"status", firing ? "firing" : "resolved"},
                        {"receiver", "strato"},
                        {"groupLabels", {{"alertname", rule->name}}},
                        {"commonLabels", all},
                        {"alerts", nlohmann::json::array({alert})}};
    return json_text(j);
}

std::vector<AlertEvent> AlertEngine::evaluate(const Snapshot& s) {
    state_.resize(rules_.size());
    std::vector<AlertEvent> events;
    const double clock = s.mono_s >= 0 ? s.mono_s : s.unix_s;
    if (last_clock_) {
        const double gap = clock - *last_clock_;
        double limit = max_gap_s_;
        if (!gaps_.empty()) {
            std::vector<double> sorted = gaps_;
            const size_t mid = (sorted.size() - 1) / 2;  // (the lower median: one long gap of two is no norm)
            std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(mid), sorted.end());
            limit = std::max(limit, 3 * sorted[mid]);
        }
        if (gap < 0 || gap > limit)
            for (auto& states : state_)
                for (auto& [series, st] : states)
                    if (!st.firing) st.since.reset();
        if (gap >= 0) {
            if (gaps_.size() == kGapHistory) gaps_.erase(gaps_.begin());
            gaps_.push_back(gap);
        }
    }
    last_clock_ = clock;
    for (size_t i = 0; i < rules_.size(); ++i) {
        const AlertRule& r = rules_[i];
        std::vector<std::pair<SeriesLabels, double>> values;
        auto found = s.find(r.metric);
        if (!r.aggregate.empty()) {
            if (!found.empty()) {
                double acc = r.aggregate == "min" ? INFINITY : r.aggregate == "max" ? -INFINITY : 0;
                for (const Metric* m : found) {
                    if (r.aggregate == "min") acc = std::min(acc, m->value);
                    else if (r.aggregate == "max") acc = std::max(acc, m->value);
                    else acc += m->value;
                }
                if (r.aggregate == "avg") acc /= static_cast<double>(found.size());
                values.emplace_back(SeriesLabels{}, acc);
            }
        } else {
            for (const Metric* m : found) values.emplace_back(series_labels(m->labels), m->value);
        }
        auto& states = state_[i];
        for (const auto& [series, v] : values) {
            State& st = states[series];
            if (r.holds(v)) {
                if (!st.since) st.since = clock, st.since_unix = s.unix_s;
                if (!st.firing && clock - *st.since >= r.for_s) {
                    st.firing = true;
                    events.push_back({&r, series, true, v, st.since_unix, s.unix_s});
                }
            } else {
                if (st.firing) events.push_back({&r, series, false, v, st.since_unix, s.unix_s});
                st = State{};
            }
            st.seen = true;
        }
        // A series no longer sampled (a GPU gone, a process exited) resolves: nothing holds for it.
        for (auto it = states.begin(); it != states.end();) {
            if (it->second.seen) {
                it->second.seen = false;
                ++it;
                continue;
            }
            if (it->second.firing) events.push_back({&r, it->first, false, NAN, it->second.since_unix, s.unix_s});
            it = states.erase(it);
        }
    }
    return events;
}

size_t AlertEngine::firing() const {
    size_t n = 0;
    for (const auto& states : state_)
        for (const auto& [k, st] : states) n += st.firing;
    return n;
}

}  // namespace strato::monitor
