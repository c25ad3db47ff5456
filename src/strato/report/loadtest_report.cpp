#include "strato/report/loadtest_report.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/report/autoscale_report.h"
#include "strato/report/page.h"
#include "strato/report/svg_chart.h"

namespace strato::report {
using json = nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double num(const json& j, const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return kNaN;
    return j[key].get<double>();
}

std::string cell(double v, int decimals) { return format_fixed(v, decimals); }

bool rate_mode(const json& lt) { return lt.value("mode", std::string()) == "request_rate"; }

double level_of(const json& p) {
    double v = num(p, "concurrency");
    return std::isfinite(v) ? v : num(p, "request_rate");
}

/// The point's load level as text ("–" when the file has none).
std::string level_text(const json& p) {
    const double v = level_of(p);
    return std::isfinite(v) ? fmt::format("{:g}", v) : std::string("–");
}

// A hand-edited file: each field this page reads must have the type `strato loadtest --json` writes,
// else an error naming the field (points[2].latency_us), not nlohmann's bare message.
std::string with_article(std::string_view type_name) {
    return fmt::format("{} {}", type_name[0] == 'a' || type_name[0] == 'o' ? "an" : "a", type_name);
}

Status check_field(const json& parent, const char* key, json::value_t type, const std::string& where) {
    if (!parent.contains(key)) return Status::ok();
    const json& v = parent[key];
    if (v.type() == type) return Status::ok();
    return invalid_argument("field {}{} is {}, expected {}", where, key, with_article(v.type_name()),
                            with_article(json(type).type_name()));
}

Status check_types(const json& lt) {
    using vt = json::value_t;
    for (const char* key : {"target", "mode"}) STRATO_RETURN_IF_ERROR(check_field(lt, key, vt::string, ""));
    STRATO_RETURN_IF_ERROR(check_field(lt, "points", vt::array, ""));
    STRATO_RETURN_IF_ERROR(check_field(lt, "slo", vt::object, ""));
    STRATO_RETURN_IF_ERROR(check_field(lt, "interrupted", vt::boolean, ""));
    if (lt.contains("slo"))
        for (const char* key : {"found", "at_max_rate", "interrupted"})
            STRATO_RETURN_IF_ERROR(check_field(lt["slo"], key, vt::boolean, "slo."));
    if (!lt.contains("points")) return Status::ok();
    for (size_t i = 0; i < lt["points"].size(); ++i) {
        const json& p = lt["points"][i];
        const std::string where = fmt::format("points[{}]", i);
        if (!p.is_object()) return invalid_argument("field {} is {}, expected an object", where, with_article(p.type_name()));
        for (const char* key : {"latency_us", "errors", "server_us"})
            STRATO_RETURN_IF_ERROR(check_field(p, key, vt::object, where + "."));
        for (const char* key : {"distribution_us", "timeline"})
            STRATO_RETURN_IF_ERROR(check_field(p, key, vt::array, where + "."));
        STRATO_RETURN_IF_ERROR(check_field(p, "interrupted", vt::boolean, where + "."));
    }
    return Status::ok();
}

}  // namespace

Result<std::string> loadtest_section_html(const json& lt) {
    if (Status typed = check_types(lt); !typed.is_ok())
        return invalid_argument("{} (a hand-edited file? expected what `strato loadtest --json` writes)", typed.message());
    const json points = lt.contains("points") && lt["points"].is_array() ? lt["points"] : json::array();
    const bool rate = rate_mode(lt);
    std::string html = "<section><h2>Load test</h2>\n";
    html += fmt::format("<p class=\"muted\">{} · {} mode · {} point(s)</p>\n", html_escape(lt.value("target", "")),
                        rate ? "open loop (request rate)" : "closed loop (concurrency)", points.size());
    if (lt.value("interrupted", false))
        html += "<p><b>Interrupted</b> (Ctrl-C or a signal): a level marked <i>interrupted</i> ran only part of "
                "its time; its numbers are partial.</p>\n";
    if (points.empty()) return html + "<p class=\"muted\">No measurement.</p></section>\n";

    // latency (p50, p90, p99) against achieved throughput
    Series p50{"p50", {}, {}}, p90{"p90", {}, {}}, p99{"p99", {}, {}};
    std::vector<Series> dists;
    for (const auto& p : points) {
        double t = num(p, "throughput");
        const json lat = p.value("latency_us", json::object());
        p50.x.push_back(t), p50.y.push_back(num(lat, "p50") / 1e3);
        p90.x.push_back(t), p90.y.push_back(num(lat, "p90") / 1e3);
        p99.x.push_back(t), p99.y.push_back(num(lat, "p99") / 1e3);
        // distribution: x in "nines" (1 = p90, 2 = p99, 3 = p99.9), y in ms
        Series d{fmt::format("{} {}", rate ? "rate" : "c", level_text(p)), {}, {}};
        if (p.contains("distribution_us") && p["distribution_us"].is_array())
            for (const auto& e : p["distribution_us"]) {
                if (!e.is_array() || e.size() != 2 || !e[0].is_number() || !e[1].is_number()) continue;
                double pct = e[0].get<double>();
                if (pct >= 100.0) continue;
                d.x.push_back(-std::log10(1.0 - pct / 100.0));
                d.y.push_back(e[1].get<double>() / 1e3);
            }
        dists.push_back(std::move(d));
    }
    html += "<div class=\"charts\">\n<figure>" +
            line_chart_svg({p50, p90, p99}, {.title = "Latency vs throughput", .x_label = "requests/s",
                                             .y_label = "latency (ms)", .log_y = true}) +
            "</figure>\n<figure>" +
            line_chart_svg(dists, {.title = "Latency distribution", .x_label = "percentile (1 = p90, 2 = p99, 3 = p99.9)",
                                   .y_label = "latency (ms)", .log_y = true}) +
            "</figure>\n</div>\n";

    // A trace or intervals run: the rate asked and answered, and the latency, window by window.
    for (const auto& p : points) {
        if (!p.contains("timeline") || !p["timeline"].is_array() || p["timeline"].empty()) continue;
        Series asked{"asked", {}, {}}, answered{"answered", {}, {}}, t50{"p50", {}, {}}, t99{"p99", {}, {}};
        for (const auto& e : p["timeline"]) {
            const double t = num(e, "t_s");
            asked.x.push_back(t), asked.y.push_back(num(e, "asked"));
            answered.x.push_back(t), answered.y.push_back(num(e, "throughput"));
            t50.x.push_back(t), t50.y.push_back(num(e, "p50_us") / 1e3);
            t99.x.push_back(t), t99.y.push_back(num(e, "p99_us") / 1e3);
        }
        html += "<div class=\"charts\" style=\"margin-top: 12px\">\n<figure>" +
                line_chart_svg({asked, answered}, {.title = "Rate over time", .x_label = "seconds", .y_label = "requests/s"}) +
                "</figure>\n<figure>" +
                line_chart_svg({t50, t99}, {.title = "Latency over time", .x_label = "seconds", .y_label = "latency (ms)",
                                            .log_y = true}) +
                "</figure>\n</div>\n";
    }

    html += fmt::format(
        "<div class=\"scroll\" style=\"margin-top: 12px\"><table class=\"epochs\"><thead><tr><th>{}</th><th class=\"num\">req/s</th>"
        "<th class=\"num\">p50 ms</th><th class=\"num\">p90 ms</th><th class=\"num\">p99 ms</th>"
        "<th class=\"num\">p99.9 ms</th><th class=\"num\">max ms</th><th class=\"num\">errors</th>"
        "<th class=\"num\" title=\"answered after the level ended\">late</th>"
        "<th class=\"num\" title=\"never answered within the grace\">unfinished</th>"
        "<th class=\"num\">server queue µs</th><th class=\"num\">server compute µs</th></tr></thead><tbody>\n",
        rate ? "rate" : "concurrency");
    for (const auto& p : points) {
        const json lat = p.value("latency_us", json::object());
        const json err = p.value("errors", json::object());
        const json srv = p.value("server_us", json::object());
        double compute = num(srv, "compute_input") + num(srv, "compute_infer") + num(srv, "compute_output");
        html += fmt::format(
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
            p.value("interrupted", false) ? level_text(p) + " <i>interrupted</i>" : level_text(p),
            cell(num(p, "throughput"), 1), cell(num(lat, "p50") / 1e3, 2), cell(num(lat, "p90") / 1e3, 2),
            cell(num(lat, "p99") / 1e3, 2), cell(num(lat, "p99_9") / 1e3, 2), cell(num(lat, "max") / 1e3, 2),
            cell(num(err, "total"), 0), cell(num(p, "late"), 0), cell(num(p, "unfinished"), 0), cell(num(srv, "queue"), 0),
            cell(compute, 0));
    }
    html += "</tbody></table></div>\n";
    if (lt.contains("slo") && lt["slo"].is_object()) {
        const json& s = lt["slo"];
        html += s.value("found", false)
                    ? fmt::format("<p>Highest request rate meeting p99 ≤ {} ms: <b>{} req/s</b>{}.</p>\n",
                                  cell(num(s, "p99_ms"), 1), cell(num(s, "best_rate"), 1),
                                  s.value("at_max_rate", false) ? " (the highest rate probed: the limit may lie beyond)" : "")
                    : fmt::format("<p>No probed request rate met p99 ≤ {} ms.</p>\n", cell(num(s, "p99_ms"), 1));
        if (s.value("interrupted", false))
            html += "<p>The search was <b>interrupted</b>: the probe it cut short is judged neither way.</p>\n";
        // (a probe that could not start: the search ended there, the limit may lie higher)
        if (s.contains("failed") && s["failed"].is_string())
            html += fmt::format("<p>The search <b>stopped early</b>, the limit may lie higher: {}</p>\n",
                                html_escape(s["failed"].get<std::string>()));
    }
    return html + "</section>\n";
}

Result<std::string> render_loadtest_report(const json& lt) {
    if (!lt.is_object() || !lt.contains("kind") || lt["kind"] != "strato-loadtest")
        return invalid_argument("not a strato load test (expected {{\"kind\": \"strato-loadtest\", ...}}, got {})",
                                describe_kind(lt));
    try {  // a last resort: check_types covers every field this page reads
        STRATO_ASSIGN_OR_RETURN(std::string section, loadtest_section_html(lt));
        std::string html = page_head("strato load test");
        html += fmt::format("<header><h1>Load test</h1><p class=\"sub\">{}</p></header>\n", html_escape(lt.value("target", "")));
        return html + section + page_foot();
    } catch (const json::exception& e) {
        return invalid_argument("a field of this load test has an unexpected type ({}); expected what `strato "
                                "loadtest --json` writes",
                                e.what());
    }
}

Status write_loadtest_report(const std::string& json_path, const std::string& out_path) {
    STRATO_ASSIGN_OR_RETURN(auto text, fs::read_file(json_path));
    STRATO_ASSIGN_OR_RETURN(json j, parse_json_named(text, json_path));
    auto html = render_loadtest_report(j);
    if (!html) return html.status().with_context(json_path);
    return fs::atomic_write(out_path, *html);
}

Status write_json_report(const std::string& json_path, const std::string& out_path) {
    STRATO_ASSIGN_OR_RETURN(auto text, fs::read_file(json_path));
    STRATO_ASSIGN_OR_RETURN(json j, parse_json_named(text, json_path));
    const bool object = j.is_object();
    const auto kind = object ? j.find("kind") : j.end();
    Result<std::string> html = invalid_argument("");
    if (kind != j.end() && *kind == "strato-autoscale-sim") {
        html = render_autoscale_report(j);
    } else if (kind != j.end() && *kind == "strato-loadtest") {
        html = render_loadtest_report(j);
    } else {
        return invalid_argument(
            "{}: not a result strato report reads (expected \"kind\": \"strato-loadtest\" from `strato loadtest "
            "--json` or \"strato-autoscale-sim\" from `strato autoscale simulate --json`, got {})",
            json_path, describe_kind(j));
    }
    if (!html) return html.status().with_context(json_path);
    return fs::atomic_write(out_path, *html);
}

}  // namespace strato::report
