#include "strato/monitor/snapshot.h"

#include <fmt/format.h>

#include <cctype>
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

// [a-zA-Z_:][a-zA-Z0-9_:]*: a replayed log's keys are anything, and one bad name in the page makes
// the scraper refuse all of it.
bool valid_metric_name(const std::string& name) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
    for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':') return false;
    return true;
}

// What a log keeps of each metric is its alias; a replay gives back the name, help, type and label
// the live monitor exports (a dashboard or a rule on DCGM_FI_DEV_GPU_UTIL reads a replay as the live
// page). ProcSampler and Nvml write the same (a test checks the round trip).
struct KnownMetric {
    const char* alias;
    const char* name;
    const char* help;
    bool counter;
};
constexpr KnownMetric kKnown[] = {
    {"cpu_util", "strato_cpu_utilization_percent", "Busy CPU time since the previous sample, percent of all cores",
     false},
    {"cpu_cores", "strato_cpu_cores", "Online CPU cores", false},
    {"load1", "strato_load1", "One-minute load average", false},
    {"mem_total_bytes", "strato_memory_total_bytes", "Physical memory", false},
    {"mem_used_bytes", "strato_memory_used_bytes", "Physical memory not available to new processes", false},
    {"mem_used_pct", "strato_memory_used_percent", "Memory in use, percent", false},
    {"disk_read_bytes", "strato_disk_read_bytes_total", "Bytes read from the device", true},
    {"disk_written_bytes", "strato_disk_written_bytes_total", "Bytes written to the device", true},
    {"net_rx_bytes", "strato_network_receive_bytes_total", "Bytes received on the interface", true},
    {"net_tx_bytes", "strato_network_transmit_bytes_total", "Bytes sent on the interface", true},
    {"proc_cpu_seconds", "strato_process_cpu_seconds_total", "User and system CPU time of the process", true},
    {"proc_rss_bytes", "strato_process_resident_memory_bytes", "Resident memory of the process", false},
    {"proc_threads", "strato_process_threads", "Threads of the process", false},
    {"gpu_util", "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", false},
    {"gpu_mem_util", "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", false},
    {"gpu_mem_used_mib", "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", false},
    {"gpu_mem_free_mib", "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", false},
    {"gpu_power_w", "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", false},
    {"gpu_temp_c", "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", false},
    {"gpu_sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", false},
    {"gpu_mem_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", false},
};

const KnownMetric* known_metric(const std::string& alias) {
    for (const auto& k : kKnown)
        if (alias == k.alias) return &k;
    return nullptr;
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
        if (!valid_metric_name(name)) continue;
        const auto& f = families[name];
        if (!f.front()->help.empty()) out += fmt::format("# HELP {} {}\n", name, f.front()->help);
        out += fmt::format("# TYPE {} {}\n", name, f.front()->counter ? "counter" : "gauge");
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
        const KnownMetric* known = known_metric(it.key());
        const std::string name = known ? known->name : it.key();
        const std::string help = known ? known->help : "Replayed from the log's key " + it.key();
        const bool counter = known && known->counter;
        if (it->is_number()) {
            out->add(name, it.key(), help, it->get<double>(), {}, counter);
        } else if (it->is_object()) {
            for (auto s = it->begin(); s != it->end(); ++s) {
                if (!s->is_number()) continue;
                out->add(name, it.key(), help, s->get<double>(), {{series_label_name(it.key()), s.key()}}, counter);
            }
        } else if (!it->is_null()) {
            *error = fmt::format("\"{}\" is a {}, expected a number or an object of numbers", it.key(), it->type_name());
            return false;
        }
    }
    return true;
}

}  // namespace strato::monitor
