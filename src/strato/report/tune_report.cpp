#include "strato/report/tune_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "strato/report/page.h"
#include "strato/report/svg_chart.h"

namespace strato::report {
using json = nlohmann::json;

Result<std::string> render_tune_report(const json& st) {
    if (!st.is_object() || st.value("kind", "") != "strato-tune" || !st.contains("trials") || !st["trials"].is_array())
        return invalid_argument("not a tuning study (expected \"kind\": \"strato-tune\" with trials)");
    const std::string metric = st.value("metric", "metric");
    const bool maximize = st.value("mode", "max") == "max";
    std::vector<json> trials(st["trials"].begin(), st["trials"].end());
    std::stable_sort(trials.begin(), trials.end(), [&](const json& a, const json& b) {
        // As the leaderboard: trials with a result that did not fail first, then failed trials
        // with a result, then those without one.
        const auto rank = [](const json& t) {
            return !(t.contains("best") && t["best"].is_number()) ? 2 : t.value("state", "") == "failed" ? 1 : 0;
        };
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        if (rank(a) == 2) return false;
        double x = a["best"].get<double>(), y = b["best"].get<double>();
        return maximize ? x > y : x < y;
    });
    std::string html = page_head("strato tune: " + st.value("name", ""));
    html += fmt::format("<h1>Study {}</h1>\n<p class=\"muted\">{} sampler · {} scheduler ({}) · {} trials · objective "
                        "{} ({})</p>\n",
                        html_escape(st.value("name", "")), html_escape(st.value("sampler", "")),
                        html_escape(st.value("scheduler", "")), html_escape(st.value("variant", "")), trials.size(),
                        html_escape(metric), maximize ? "higher is better" : "lower is better");
    // The objective over epochs, the 12 best trials.
    std::vector<Series> curves;
    for (size_t i = 0; i < trials.size() && i < 12; ++i) {
        Series s{trials[i].value("name", ""), {}, {}};
        for (const auto& r : trials[i]["results"])
            if (r.is_array() && r.size() == 2) s.x.push_back(r[0].get<double>()), s.y.push_back(r[1].get<double>());
        curves.push_back(std::move(s));
    }
    html += "<section><h2>Trials</h2><div class=\"charts\">\n<figure>" +
            line_chart_svg(curves, {.title = metric + " per epoch (12 best trials)", .x_label = "epoch", .y_label = metric}) +
            "</figure>\n";
    // Each numeric parameter against the objective.
    std::map<std::string, std::vector<std::pair<double, double>>> by_param;
    for (const auto& t : trials) {
        if (!t["best"].is_number()) continue;
        for (auto it = t["params"].begin(); it != t["params"].end(); ++it) {
            const std::string v = it->get<std::string>();
            char* end = nullptr;
            double x = std::strtod(v.c_str(), &end);
            // (a choice of "nan" or "inf" is no number to place: NaN would also break the sort below)
            if (end && *end == '\0' && !v.empty() && std::isfinite(x))
                by_param[it.key()].emplace_back(x, t["best"].get<double>());
        }
    }
    // Each trial a point (no line: the objective is no function of one parameter); a parameter
    // spread over two decades or more (a log-uniform learning rate) on a log axis.
    for (auto& [k, pts] : by_param) {
        std::sort(pts.begin(), pts.end());
        Series s{k, {}, {}};
        for (auto [x, y] : pts) s.x.push_back(x), s.y.push_back(y);
        const bool log_x = !pts.empty() && pts.front().first > 0 && pts.back().first >= 100 * pts.front().first;
        html += "<figure>" +
                line_chart_svg({s}, {.title = k + " vs best " + metric, .x_label = log_x ? k + " (log scale)" : k,
                                     .y_label = metric, .log_x = log_x, .lines = false}) +
                "</figure>\n";
    }
    html += "</div></section>\n<section><h2>Leaderboard</h2><div class=\"scroll\"><table class=\"epochs\"><thead><tr>"
            "<th class=\"num\">rank</th><th>trial</th><th class=\"num\">best " + html_escape(metric) +
            "</th><th class=\"num\">epochs</th><th>state</th><th>parameters</th></tr></thead><tbody>\n";
    int rank = 0;
    for (const auto& t : trials) {
        std::string params;
        for (auto it = t["params"].begin(); it != t["params"].end(); ++it)
            params += (params.empty() ? "" : ", ") + it.key() + "=" + it->get<std::string>();
        html += fmt::format("<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                            "<td>{}</td><td>{}</td></tr>\n",
                            ++rank, html_escape(t.value("name", "")),
                            t["best"].is_number() ? format_fixed(t["best"].get<double>(), 4) : "–",
                            t.value("epochs", 0), html_escape(t.value("state", "")), html_escape(params));
    }
    html += "</tbody></table></div></section>\n";
    if (st.contains("rungs") && st["rungs"].is_array() && !st["rungs"].empty()) {
        const bool brackets = st.value("brackets", 1) > 1;
        html += fmt::format("<section><h2>ASHA rungs</h2><table class=\"epochs\"><thead><tr>{}<th class=\"num\">rung</th>"
                            "<th class=\"num\">epochs</th><th class=\"num\">trials that reached it</th>"
                            "<th class=\"num\">promoted</th></tr></thead><tbody>\n",
                            brackets ? "<th class=\"num\">bracket</th>" : "");
        for (const auto& r : st["rungs"])
            html += fmt::format("<tr>{}<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                                "<td class=\"num\">{}</td></tr>\n",
                                brackets ? fmt::format("<td class=\"num\">{}</td>", r.value("bracket", 0)) : "",
                                r.value("rung", 0), r.value("epochs", 0), r.value("entries", 0), r.value("promoted", 0));
        html += "</tbody></table></section>\n";
    }
    return html + page_foot();
}

}  // namespace strato::report
