#include "strato/monitor/snapshot.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "strato/core/json.h"

namespace strato::monitor {

void Snapshot::add(std::string name, std::string alias, std::string help, double value, Labels labels, bool counter) {
    metrics.push_back({std::move(name), std::move(alias), std::move(help), counter, std::move(labels), value});
}

std::vector<const Metric*> Snapshot::find(const std::string& key) const {
    std::vector<const Metric*> out;
    for (const auto& m : metrics)
        if (m.name == key || m.alias == key) out.push_back(&m);
    return out;
}

namespace {

// The text format's label escapes; bytes that are not UTF-8 (a process named so) become U+FFFD,
// or the scraper refuses the whole page.
std::string escape_label(const std::string& v) {
    std::string out;
    for (size_t i = 0; i < v.size();) {
        const char c = v[i];
        const size_t n = utf8_length_at(v, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
            continue;
        }
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out.append(v, i, n);
        i += n;
    }
    return out;
}

std::string format_value(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
    return fmt::format("{}", v);
}

}  // namespace

std::pair<std::string, std::string> series_label(const Labels& labels) {
    for (const char* k : {"gpu", "device", "pid", "mountpoint"})
        for (const auto& l : labels)
            if (l.first == k) return l;
    return labels.empty() ? std::pair<std::string, std::string>() : labels.front();
}

std::string series_label_name(std::string_view alias) {
    if (alias.starts_with("gpu_")) return "gpu";
    if (alias.starts_with("disk_") || alias.starts_with("net_")) return "device";
    if (alias.starts_with("proc_")) return "pid";
    return "series";
}

std::string to_prometheus(const Snapshot& s) {
    std::vector<std::string> order;
    std::map<std::string, std::vector<const Metric*>> families;
    for (const auto& m : s.metrics) {
        auto& f = families[m.name];
        if (f.empty()) order.push_back(m.name);
        f.push_back(&m);
    }
    std::string out;
    for (const auto& name : order) {
        const auto& f = families[name];
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.front()->help, name,
                           f.front()->counter ? "counter" : "gauge");
        for (const Metric* m : f) {
            out += name;
            if (!m->labels.empty()) {
                out += '{';
                for (size_t i = 0; i < m->labels.size(); ++i)
                    out += fmt::format("{}{}=\"{}\"", i ? "," : "", m->labels[i].first, escape_label(m->labels[i].second));
                out += '}';
            }
            out += ' ' + format_value(m->value) + '\n';
        }
    }
    return out;
}

nlohmann::json to_json(const Snapshot& s) {
    nlohmann::json j = nlohmann::json::object();
    j["t"] = s.unix_s;
    for (const auto& m : s.metrics) {
        if (m.alias.empty()) continue;
        nlohmann::json v = std::isfinite(m.value) ? nlohmann::json(m.value) : nlohmann::json(nullptr);
        if (m.labels.empty()) j[m.alias] = v;
        else j[m.alias][series_label(m.labels).second] = v;
    }
    if (!s.notes.empty()) j["notes"] = s.notes;
    return j;
}

bool from_json(const nlohmann::json& j, Snapshot* out, std::string* error) {
    if (!j.is_object() || !j.contains("t") || !j["t"].is_number()) {
        *error = "expected an object with a numeric \"t\" (as `strato monitor --jsonl` writes)";
        return false;
    }
    out->unix_s = j["t"].get<double>();
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "t" || it.key() == "notes" || it.key() == "kind" || it.key() == "step") continue;
        if (it->is_number()) {
            out->add(it.key(), it.key(), "", it->get<double>());
        } else if (it->is_object()) {
            for (auto s = it->begin(); s != it->end(); ++s) {
                if (!s->is_number()) continue;
                out->add(it.key(), it.key(), "", s->get<double>(), {{series_label_name(it.key()), s.key()}});
            }
        } else if (!it->is_null()) {
            *error = fmt::format("\"{}\" is a {}, expected a number or an object of numbers", it.key(), it->type_name());
            return false;
        }
    }
    return true;
}

}  // namespace strato::monitor
