#include "strato/report/tune_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "strato/core/json.h"
#include "strato/report/page.h"
#include "strato/report/svg_chart.h"

namespace strato::report {
using json = nlohmann::json;

namespace {

// t[key], or null when t is no object or has no such key. (`const json::operator[]` on a missing
// key is undefined behaviour, not an exception: a trial without "best" or "params" crashed.)
const json& field(const json& t, const char* key) {
    static const json kNull;
    if (!t.is_object()) return kNull;
    const auto it = t.find(key);
    return it == t.end() ? kNull : *it;
}

// A trial's objective: a number that is not NaN (NaN broke the ordering of the leaderboard sort).
bool has_best(const json& t) {
    const json& b = field(t, "best");
    return b.is_number() && !std::isnan(b.get<double>());
}

// A parameter's value as the leaderboard shows it (strato writes strings; a number is shown too).
std::string param_text(const json& v) { return v.is_string() ? v.get<std::string>() : json_text(v); }

Result<std::string> render(const json& st);

}  // namespace

Result<std::string> render_tune_report(const json& st) {
    if (!st.is_object() || st.value("kind", json()) != "strato-tune" || !st.contains("trials") ||
        !st["trials"].is_array())
        return invalid_argument("not a tuning study (expected \"kind\": \"strato-tune\" with trials, got {})",
                                describe_kind(st));
    try {  // a last resort: the fields are read by their types
        return render(st);
    } catch (const json::exception& e) {
        return invalid_argument("a field of this study has an unexpected type ({}); expected what `strato tune` "
                                "writes",
                                e.what());
    }
}

namespace {

Result<std::string> render(const json& st) {
    const std::string metric = st.value("metric", "metric");
    const bool maximize = st.value("mode", "max") == "max";
    std::vector<json> trials(st["trials"].begin(), st["trials"].end());
    std::stable_sort(trials.begin(), trials.end(), [&](const json& a, const json& b) {
        // As the leaderboard: trials with a result that did not fail first, then failed trials
        // with a result, then those without one.
        const auto rank = [](const json& t) { return !has_best(t) ? 2 : field(t, "state") == "failed" ? 1 : 0; };
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        if (rank(a) == 2) return false;
        const double x = field(a, "best").get<double>(), y = field(b, "best").get<double>();
        return maximize ? x > y : x < y;
    });
    std::string html = page_head("strato tune: " + st.value("name", ""));
    // (in a <header>, as the other reports: a long study name in a bare <h1> ran off the page)
    html += fmt::format("<header><h1>Study {}</h1><p class=\"sub\">{} sampler · {} scheduler ({}) · {} trials · "
                        "objective {} ({})</p></header>\n",
                        html_escape(st.value("name", "")), html_escape(st.value("sampler", "")),
                        html_escape(st.value("scheduler", "")), html_escape(st.value("variant", "")), trials.size(),
                        html_escape(metric), maximize ? "higher is better" : "lower is better");
    // The objective over epochs, the 12 best trials.
    std::vector<Series> curves;
    for (size_t i = 0; i < trials.size() && i < 12; ++i) {
        const json& name = field(trials[i], "name");
        Series s{name.is_string() ? name.get<std::string>() : "", {}, {}};
        const json& results = field(trials[i], "results");
        for (const auto& r : results.is_array() ? results : json::array())
            if (r.is_array() && r.size() == 2 && r[0].is_number() && r[1].is_number())
                s.x.push_back(r[0].get<double>()), s.y.push_back(r[1].get<double>());
        curves.push_back(std::move(s));
    }
    html += "<section><h2>Trials</h2><div class=\"charts\">\n<figure>" +
            line_chart_svg(curves, {.title = metric + " per epoch (12 best trials)", .x_label = "epoch", .y_label = metric}) +
            "</figure>\n";
    // Each numeric parameter against the objective.
    std::map<std::string, std::vector<std::pair<double, double>>> by_param;
    for (const auto& t : trials) {
        if (!has_best(t) || !field(t, "params").is_object()) continue;
        for (auto it = field(t, "params").begin(); it != field(t, "params").end(); ++it) {
            const std::string v = param_text(*it);
            char* end = nullptr;
            double x = std::strtod(v.c_str(), &end);
            // (a choice of "nan" or "inf" is no number to place: NaN would also break the sort below)
            if (end && *end == '\0' && !v.empty() && std::isfinite(x))
                by_param[it.key()].emplace_back(x, field(t, "best").get<double>());
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
    // The best kLeaderboardRows: a study of 10,000 trials listed them all (1.5 MB of table).
    constexpr size_t kLeaderboardRows = 500;
    int rank = 0;
    for (const auto& t : trials) {
        if (static_cast<size_t>(rank) == kLeaderboardRows) {
            html += fmt::format("<tr class=\"gap\"><td></td><td colspan=\"5\" class=\"muted\">… {} more trials not "
                                "shown (`strato tune status --top N` lists them all)</td></tr>\n",
                                trials.size() - kLeaderboardRows);
            break;
        }
        std::string params;
        if (const json& ps = field(t, "params"); ps.is_object())
            for (auto it = ps.begin(); it != ps.end(); ++it)
                params += (params.empty() ? "" : ", ") + it.key() + "=" + param_text(*it);
        const json& name = field(t, "name");
        const json& state = field(t, "state");
        const json& epochs = field(t, "epochs");
        html += fmt::format("<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                            "<td>{}</td><td>{}</td></tr>\n",
                            ++rank, html_escape(name.is_string() ? name.get<std::string>() : ""),
                            has_best(t) ? format_fixed(field(t, "best").get<double>(), 4) : "–",
                            epochs.is_number() ? format_fixed(epochs.get<double>(), 0) : "–",
                            html_escape(state.is_string() ? state.get<std::string>() : ""), html_escape(params));
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

}  // namespace

}  // namespace strato::report
