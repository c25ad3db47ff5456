#include "strato/report/autoscale_report.h"

#include <fmt/format.h>

#include <cmath>

#include "strato/core/json.h"
#include "strato/report/page.h"
#include "strato/report/svg_chart.h"

namespace strato::report {
using json = nlohmann::json;

namespace {

double num(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

std::string cell(double v, int decimals = 2) { return format_fixed(v, decimals); }

// A text field; "" when missing or of another type (a hand-edited file: `strato report sim.json`).
std::string text(const json& j, const char* key, const char* missing = "") {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string(missing);
}

// The page; render_autoscale_report checked the kind.
Result<std::string> render(const json& sim) {
    Series nodes{"nodes", {}, {}}, ready{"ready", {}, {}}, rate{"arriving", {}, {}}, cap{"capacity", {}, {}},
        wait{"queueing delay", {}, {}}, slo{"objective", {}, {}}, util{"utilization", {}, {}};
    const double slo_s = num(sim, "slo_wait_s");
    if (sim.contains("timeline") && sim["timeline"].is_array()) {
        for (const auto& p : sim["timeline"]) {
            if (!p.is_array() || p.size() < 8) continue;
            auto at = [&](size_t i) { return p[i].is_number() ? p[i].get<double>() : NAN; };
            double h = at(0) / 3600;
            nodes.x.push_back(h), nodes.y.push_back(at(1));
            ready.x.push_back(h), ready.y.push_back(at(2));
            rate.x.push_back(h), rate.y.push_back(at(3));
            cap.x.push_back(h), cap.y.push_back(at(4));
            util.x.push_back(h), util.y.push_back(at(6));
            wait.x.push_back(h), wait.y.push_back(at(7));
            slo.x.push_back(h), slo.y.push_back(slo_s);
        }
    }
    std::string html = page_head("strato autoscale simulation");
    // (in a <header>, as the other reports: a bare <h1> had the browser's size and margins)
    html += fmt::format("<header><h1>Autoscaling simulation</h1><p class=\"sub\">{} · {} events in {} s ({} M "
                        "events/s)</p></header>\n",
                        html_escape(text(sim, "instance")), cell(num(sim, "events"), 0), cell(num(sim, "wall_s"), 3),
                        cell(num(sim, "events_per_s") / 1e6, 2));
    const std::string cur = text(sim, "currency", "USD");
    html += "<section><h2>Summary</h2><div class=\"kv\"><table>\n";
    auto row = [&](const std::string& k, const std::string& v) {
        html += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", html_escape(k), html_escape(v));
    };
    row("cost", cell(num(sim, "cost")) + " " + cur);
    row("node-hours", cell(num(sim, "node_hours")));
    row("SLO violation", fmt::format("{} s of {} s above {} s queueing delay", cell(num(sim, "slo_violation_s"), 0),
                                     cell(num(sim, "duration_s"), 0),
                                     std::isfinite(slo_s) ? fmt::format("{:g}", slo_s) : std::string("–")));
    row("mean utilization", cell(num(sim, "mean_utilization"), 1) + " %");
    row("max nodes", cell(num(sim, "max_nodes"), 0));
    row("spot preemptions", cell(num(sim, "preemptions"), 0));
    row("scaling actions", cell(num(sim, "scale_actions"), 0));
    html += "</table></div></section>\n<section><h2>Timelines</h2><div class=\"charts\">\n<figure>";
    html += line_chart_svg({nodes, ready}, {.title = "Nodes", .x_label = "hours", .y_label = "nodes"});
    html += "</figure>\n<figure>";
    html += line_chart_svg({rate, cap}, {.title = "Work arriving vs capacity", .x_label = "hours", .y_label = "units/s"});
    html += "</figure>\n<figure>";
    html += line_chart_svg({wait, slo}, {.title = "Queueing delay", .x_label = "hours", .y_label = "seconds"});
    html += "</figure>\n<figure>";
    html += line_chart_svg({util}, {.title = "Utilization", .x_label = "hours", .y_label = "percent"});
    html += "</figure>\n</div></section>\n<section><h2>Scaling actions</h2>\n<div class=\"scroll\"><table class=\"epochs\">"
            "<thead><tr><th class=\"num\">hour</th><th>action</th></tr></thead><tbody>\n";
    if (sim.contains("actions") && sim["actions"].is_array())
        for (const auto& a : sim["actions"])
            html += fmt::format("<tr><td class=\"num\">{}</td><td>{}</td></tr>\n", cell(num(a, "t_s") / 3600),
                                html_escape(text(a, "what")));
    if (const double dropped = num(sim, "actions_dropped"); dropped > 0)
        html += fmt::format("<tr class=\"gap\"><td></td><td class=\"muted\">… {} later actions not kept (the "
                            "simulation keeps the first {})</td></tr>\n",
                            cell(dropped, 0),
                            sim.contains("actions") && sim["actions"].is_array() ? sim["actions"].size() : 0);
    html += "</tbody></table></div></section>\n";
    return html + page_foot();
}

}  // namespace

Result<std::string> render_autoscale_report(const json& sim) {
    if (!sim.is_object() || !sim.contains("kind") || sim["kind"] != "strato-autoscale-sim")
        return invalid_argument("not an autoscaling simulation (expected \"kind\": \"strato-autoscale-sim\", got {})",
                                describe_kind(sim));
    try {  // a last resort: every field is read by its type
        return render(sim);
    } catch (const json::exception& e) {
        return invalid_argument("a field of this simulation has an unexpected type ({}); expected what `strato "
                                "autoscale simulate --json` writes",
                                e.what());
    }
}

}  // namespace strato::report
