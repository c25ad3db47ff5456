#include "strato/report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <utility>

namespace strato::report {

namespace {

// Tableau 10: distinct hues that stay apart for most kinds of colour blindness.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
                                    "#9c755f", "#ff9da7", "#76b7b2", "#edc948", "#bab0ac"};
constexpr int kPaletteSize = static_cast<int>(sizeof(kPalette) / sizeof(kPalette[0]));

constexpr double kTickFont = 11;
constexpr double kLabelFont = 12;
constexpr double kTitleFont = 14;
constexpr int kMarkerPointsMax = 40;  // series with at most this many points get markers
constexpr size_t kTooltipMarkersMax = 500;  // markers beyond this many (a scatter plot's) get no tooltip
constexpr double kHuge = 1e300;       // beyond this, ranges overflow: treated like infinity
constexpr double kTiny = 1e-300;      // below this, log10 and 1-2-5 steps underflow (5e-324 looped)
constexpr int kLegendRowsMax = 4;     // more series than fit are summed up as "+N more"
constexpr double kPointsPerPixel = 4; // denser series are reduced per pixel column (first/min/max/last)

// A rough width of `text` in a sans-serif font of size `font` (no font metrics in an SVG writer).
double text_width(std::string_view text, double font) { return 0.6 * font * static_cast<double>(text.size()); }

std::string px(double v) { return fmt::format("{:.1f}", v); }

bool usable(double v, bool log) { return std::isfinite(v) && std::abs(v) < kHuge && (!log || v >= kTiny); }

// 1, 2 or 5 times a power of ten: the largest <= v (down) or the smallest >= v (up); v > 0.
double nice125(double v, bool up) {
    const double e = std::floor(std::log10(v));
    const double p = std::pow(10.0, e);
    const double f = v / p;
    static constexpr double kSteps[] = {1, 2, 5, 10};
    if (up) {
        for (double s : kSteps) {
            if (f <= s * (1 + 1e-9)) return s * p;
        }
        return 10 * p;
    }
    double best = 1;
    for (double s : kSteps) {
        if (s <= f * (1 + 1e-9)) best = s;
    }
    return best * p;
}

// The 1-2-5 value next to a 1-2-5 value v > 0: above it (dir > 0) or below it (dir < 0).
double step125(double v, int dir) {
    const double p = std::pow(10.0, std::floor(std::log10(v) + 1e-9));
    const double m = std::round(v / p);
    if (dir > 0) return (m < 1.5 ? 2 : m < 3.5 ? 5 : 10) * p;
    return (m < 1.5 ? 0.5 : m < 3.5 ? 1 : 2) * p;
}

std::string trim_zeros(std::string s) {
    if (s.find('.') == std::string::npos) return s;
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

std::string scientific(double v, int digits) {
    std::string s = fmt::format("{:.{}e}", v, std::max(0, digits));
    const auto e = s.find('e');
    std::string mant = trim_zeros(s.substr(0, e));
    const int exp = std::atoi(s.c_str() + e + 1);
    return mant + "e" + std::to_string(exp);
}

std::string point_label(double v) {
    if (v == 0) return "0";
    const double a = std::abs(v);
    if (a >= 1e6 || a < 1e-3) return scientific(v, 3);
    return trim_zeros(fmt::format("{:.4f}", v).substr(0, 12));
}

// A linear or log10 axis mapping data values onto pixels [p0, p1].
struct Axis {
    double lo = 0, hi = 1;  // data range shown
    bool log = false;
    std::vector<double> ticks;
    std::vector<std::string> labels;

    double t(double v) const { return log ? std::log10(v) : v; }
    double map(double v, double p0, double p1) const {
        const double span = t(hi) - t(lo);
        const double f = span > 0 ? (t(v) - t(lo)) / span : 0.5;
        return p0 + f * (p1 - p0);
    }
};

// Linear axis; `tight` keeps the data range unless widening to the nearest ticks costs little.
Axis linear_axis(double lo, double hi, int target, bool tight) {
    // NOTE: a span below ~1e-12 of the magnitude is a constant for doubles; ticks cannot split it.
    // A span of denormals cannot be ticked either (its step underflows to 0).
    if (!(hi - lo > 1e-12 * std::max(std::abs(lo), std::abs(hi))) || hi - lo < kTiny) {
        const double pad = std::abs(lo) < kTiny ? 1 : std::abs(lo) * 0.05;
        lo -= pad;
        hi += pad;
    }
    Axis a;
    auto ticks = detail::nice_ticks(lo, hi, target);
    const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : hi - lo;
    a.lo = lo;
    a.hi = hi;
    if (!tight || lo - ticks.front() <= 0.1 * (hi - lo)) a.lo = ticks.front();
    if (!tight || ticks.back() - hi <= 0.1 * (hi - lo)) a.hi = ticks.back();
    if (!tight) {
        // Data on the outermost tick would put markers on the frame: leave a little room there.
        const double span = a.hi - a.lo;
        if (lo - a.lo < 0.01 * span) a.lo -= 0.03 * span;
        if (a.hi - hi < 0.01 * span) a.hi += 0.03 * span;
    }
    const double eps = step * 1e-6;
    double mag = 0;
    for (double v : ticks) {
        if (v >= a.lo - eps && v <= a.hi + eps) {
            a.ticks.push_back(v);
            mag = std::max(mag, std::abs(v));
        }
    }
    for (double v : a.ticks) a.labels.push_back(detail::format_tick(v, step, mag));
    return a;
}

// Log axis from 1-2-5 values around [lo, hi] (both > 0); ticks at 1-2-5 values when at most
// `target` of them fit, else at decades (every k-th one when there are many).
Axis log_axis(double lo, double hi, int target) {
    Axis a;
    a.log = true;
    a.lo = nice125(lo, false);
    a.hi = nice125(hi, true);
    if (!(a.lo < a.hi)) {
        a.lo = step125(a.lo, -1);
        a.hi = step125(a.hi, +1);
    }
    std::vector<double> all;
    for (double v = a.lo; v <= a.hi * (1 + 1e-9) && all.size() < 64; v = step125(v, +1)) all.push_back(v);
    const int decades = static_cast<int>(std::round(std::log10(a.hi) - std::log10(a.lo)));
    if (static_cast<int>(all.size()) <= target) {
        a.ticks = all;
    } else {
        const int every = std::max(1, (decades + target - 1) / std::max(1, target));
        const double d0 = std::ceil(std::log10(a.lo) - 1e-9);
        for (double d = d0; d <= std::log10(a.hi) + 1e-9 && a.ticks.size() < 64; d += every)
            a.ticks.push_back(std::pow(10.0, d));
    }
    if (a.ticks.size() < 2) a.ticks = {a.lo, a.hi};
    for (double v : a.ticks) {
        const double a_v = std::abs(v);
        a.labels.push_back(a_v >= 1e5 || a_v < 1e-3 ? scientific(v, 0) : trim_zeros(fmt::format("{:.3f}", v)));
    }
    return a;
}

}  // namespace

namespace detail {

std::vector<double> nice_ticks(double lo, double hi, int target) {
    target = std::max(2, target);
    // Heckbert's rounding: the 1-2-5 step nearest to an even split into `target` ticks.
    const double raw = (hi - lo) / static_cast<double>(target - 1);
    const double p = std::pow(10.0, std::floor(std::log10(raw)));
    const double f = raw / p;
    const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
    const double first = std::floor(lo / step + 1e-9);
    const double last = std::ceil(hi / step - 1e-9);
    std::vector<double> ticks;
    for (double i = first; i <= last && ticks.size() < 1000; i += 1) {
        double v = i * step;
        if (std::abs(v) < step * 1e-9) v = 0;
        ticks.push_back(v);
    }
    if (ticks.size() < 2) ticks = {first * step, (first + 1) * step};
    return ticks;
}

std::string format_tick(double value, double step, double magnitude) {
    if (value == 0) return "0";
    const int step_exp = static_cast<int>(std::floor(std::log10(step) + 1e-9));
    if (magnitude >= 1e10 || step_exp < -4) {
        const int value_exp = static_cast<int>(std::floor(std::log10(std::abs(value)) + 1e-9));
        return scientific(value, value_exp - step_exp);
    }
    double div = 1;
    const char* suffix = "";
    if (magnitude >= 1e7) {
        div = 1e6;
        suffix = "M";
    } else if (magnitude >= 1e4) {
        div = 1e3;
        suffix = "k";
    }
    const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step / div) + 1e-9)));
    return fmt::format("{:.{}f}{}", value / div, decimals, suffix);
}

}  // namespace detail

namespace {

// The length of the well-formed UTF-8 sequence at text[i] (a lead byte >= 0x80), or 0 when it is
// not one: a stray continuation byte, an overlong form, a surrogate, beyond U+10FFFF, cut short.
size_t utf8_sequence(std::string_view text, size_t i) {
    const auto byte = [&](size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u; };
    const unsigned b0 = byte(0);
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (b0 >= 0xc2 && b0 <= 0xdf) {
        n = 2;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
        n = 3;
        if (b0 == 0xe0) lo = 0xa0;  // overlong
        if (b0 == 0xed) hi = 0x9f;  // surrogates
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
        n = 4;
        if (b0 == 0xf0) lo = 0x90;  // overlong
        if (b0 == 0xf4) hi = 0x8f;  // beyond U+10FFFF
    } else {
        return 0;
    }
    if (byte(1) < lo || byte(1) > hi) return 0;
    for (size_t k = 2; k < n; ++k)
        if (byte(k) < 0x80 || byte(k) > 0xbf) return 0;
    return n;
}

}  // namespace

std::string html_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size() + text.size() / 8);
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                if (static_cast<unsigned char>(c) >= 0x80) {
                    // NOTE: the page says UTF-8; a byte of another encoding (a Latin-1 config.toml
                    // or directory name) is no character there, nor in an SVG (XML) of it.
                    const size_t n = utf8_sequence(text, i);
                    if (n == 0) {
                        out += "&#xFFFD;";
                    } else {
                        out.append(text.substr(i, n));
                        i += n - 1;
                    }
                } else if ((static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
                    // Control characters are not allowed in XML (SVG) and a NUL marks a file as
                    // binary: the replacement character shows where one was.
                    out += "&#xFFFD;";
                } else {
                    out += c;
                }
        }
    }
    return out;
}

std::string line_chart_svg(const std::vector<Series>& series, const ChartOptions& options) {
    const double width = std::max(200, options.width);
    double height = std::max(140, options.height);
    const bool log = options.log_y;
    const bool log_x = options.log_x;

    // Data ranges over the points that can be drawn.
    double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
    size_t drawable = 0;
    for (const auto& s : series) {
        const size_t n = std::min(s.x.size(), s.y.size());
        for (size_t i = 0; i < n; ++i) {
            if (!usable(s.x[i], log_x) || !usable(s.y[i], log)) continue;
            x_lo = std::min(x_lo, s.x[i]);
            x_hi = std::max(x_hi, s.x[i]);
            y_lo = std::min(y_lo, s.y[i]);
            y_hi = std::max(y_hi, s.y[i]);
            ++drawable;
        }
    }
    const bool no_data = drawable == 0;
    if (no_data) {
        x_lo = log_x ? 1 : 0;
        x_hi = log_x ? 10 : 1;
        y_lo = log ? 1 : 0;
        y_hi = log ? 10 : 1;
    }

    // Legend rows (only for more than one series), laid out left to right and wrapped.
    const bool legend = series.size() > 1;
    struct LegendItem {
        double x, y;
    };
    std::vector<LegendItem> legend_pos;
    size_t legend_more = 0;  // series left out of the legend (its rows are capped)
    LegendItem more_pos{0, 0};
    double top = 14 + kTitleFont;
    if (legend) {
        const double row0 = top + 10;
        double lx = 12, ly = row0;
        std::vector<double> ends;  // where each placed item ends
        for (const auto& s : series) {
            const double w = 22 + text_width(s.name, kTickFont) + 16;
            if (lx > 12 && lx + w > width - 12) {
                if (ly + 17 > row0 + 17 * (kLegendRowsMax - 1)) break;
                lx = 12;
                ly += 17;
            }
            legend_pos.push_back({lx, ly});
            lx += w;
            ends.push_back(lx);
        }
        legend_more = series.size() - legend_pos.size();
        if (legend_more > 0) {
            // "+N more" after the last item that leaves room for it.
            for (;;) {
                const double w = text_width(fmt::format("+{} more", legend_more), kTickFont) + 4;
                const LegendItem last = legend_pos.back();
                if (ends.back() + w <= width - 12 || legend_pos.size() == 1) {
                    more_pos = {ends.back(), last.y};
                    break;
                }
                legend_pos.pop_back();
                ends.pop_back();
                ++legend_more;
            }
        }
        top = ly + 6;
    }
    top += 14;

    // The y axis first: its label widths decide the left margin.
    const double bottom_margin = 24 + (options.x_label.empty() ? 0 : 18);
    height = std::max(height, top + bottom_margin + 60);  // room for a plot below the legend
    const double plot_h_guess = std::max(40.0, height - top - bottom_margin);
    const Axis y_axis = log ? log_axis(y_lo, y_hi, std::max(2, static_cast<int>(plot_h_guess / 22)))
                            : linear_axis(y_lo, y_hi, std::max(2, static_cast<int>(plot_h_guess / 40)), false);
    double y_label_w = 0;
    for (const auto& l : y_axis.labels) y_label_w = std::max(y_label_w, text_width(l, kTickFont));
    const double left = 10 + (options.y_label.empty() ? 0 : 20) + y_label_w + 8;
    const double right_guess = 20;
    const double plot_w_guess = std::max(40.0, width - left - right_guess);
    const int x_ticks = std::max(2, static_cast<int>(plot_w_guess / 90));
    const Axis x_axis = log_x ? log_axis(x_lo, x_hi, x_ticks) : linear_axis(x_lo, x_hi, x_ticks, true);
    const double last_label_w = x_axis.labels.empty() ? 0 : text_width(x_axis.labels.back(), kTickFont);
    const double right = std::max(right_guess, last_label_w / 2 + 6);

    const double x0 = left, x1 = width - right;
    const double y0 = height - bottom_margin, y1 = top;  // y0: bottom of the plot, y1: its top
    auto sx = [&](double v) { return x_axis.map(v, x0, x1); };
    auto sy = [&](double v) { return y_axis.map(v, y0, y1); };

    std::string out;
    const std::string title = html_escape(options.title);
    out += fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" "
        "height=\"{1}\" role=\"img\" aria-label=\"{2}\" style=\"max-width:100%;height:auto;"
        "font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif\">\n",
        width, height, title);
    out += fmt::format("<title>{}</title>\n", title);
    out += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", width, height);
    if (!options.title.empty()) {
        out += fmt::format("<text x=\"12\" y=\"{}\" font-size=\"{}\" font-weight=\"600\" fill=\"#222\">{}</text>\n",
                           px(10 + kTitleFont), kTitleFont, title);
    }

    // Grid lines and tick labels.
    out += "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
    for (double v : y_axis.ticks)
        out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>\n", px(x0), px(sy(v)), px(x1));
    for (double v : x_axis.ticks)
        out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", px(sx(v)), px(y1), px(y0));
    out += "</g>\n";
    out += fmt::format("<g class=\"ticks\" font-size=\"{}\" fill=\"#555\">\n", kTickFont);
    for (size_t i = 0; i < y_axis.ticks.size(); ++i) {
        out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n",
                           px(x0 - 6), px(sy(y_axis.ticks[i])), html_escape(y_axis.labels[i]));
    }
    for (size_t i = 0; i < x_axis.ticks.size(); ++i) {
        out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(sx(x_axis.ticks[i])),
                           px(y0 + 16), html_escape(x_axis.labels[i]));
    }
    out += "</g>\n";
    out += fmt::format(
        "<g stroke=\"#888\" stroke-width=\"1\"><line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>"
        "<line x1=\"{0}\" y1=\"{3}\" x2=\"{0}\" y2=\"{1}\"/></g>\n",
        px(x0), px(y0), px(x1), px(y1));
    if (!options.x_label.empty()) {
        out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" fill=\"#333\" text-anchor=\"middle\">{}</text>\n",
                           px((x0 + x1) / 2), px(height - 8), kLabelFont, html_escape(options.x_label));
    }
    if (!options.y_label.empty()) {
        const double cx = 10 + kLabelFont / 2 + 2, cy = (y0 + y1) / 2;
        out += fmt::format(
            "<text x=\"{0}\" y=\"{1}\" font-size=\"{2}\" fill=\"#333\" text-anchor=\"middle\" "
            "dominant-baseline=\"middle\" transform=\"rotate(-90 {0} {1})\">{3}</text>\n",
            px(cx), px(cy), kLabelFont, html_escape(options.y_label));
    }

    // The series: a path broken at unusable points, and markers where points are few or isolated.
    for (size_t k = 0; k < series.size(); ++k) {
        const auto& s = series[k];
        const char* colour = kPalette[k % kPaletteSize];
        const bool dashed = static_cast<int>(k) >= kPaletteSize;
        const size_t n = std::min(s.x.size(), s.y.size());
        auto ok = [&](size_t i) { return i < n && usable(s.x[i], log_x) && usable(s.y[i], log); };
        size_t count = 0;
        for (size_t i = 0; i < n; ++i) count += ok(i) ? 1 : 0;
        if (count == 0) continue;
        // Far more points than pixels (a long run's every step): per pixel column of a stretch,
        // its first, lowest, highest and last point draw the same line in a fraction of the bytes.
        const bool reduce = static_cast<double>(count) > kPointsPerPixel * (x1 - x0);
        std::string d;
        bool pen_down = false;
        size_t subpath_vertices = 0;
        auto vertex = [&](size_t i) {
            d += fmt::format("{}{},{}", pen_down ? " L" : (d.empty() ? "M" : " M"), px(sx(s.x[i])), px(sy(s.y[i])));
            pen_down = true;
            ++subpath_vertices;
        };
        // Lifts the pen. In a reduced series (no markers) a stretch of one vertex, which has no
        // segment to stroke, becomes a dot (a zero-length segment with a round cap).
        auto pen_up = [&] {
            if (reduce && pen_down && subpath_vertices == 1) d += " h0";
            pen_down = false;
            subpath_vertices = 0;
        };
        long column = 0;
        size_t first = 0, low = 0, high = 0, last = 0;
        bool open = false;
        bool gap = false;  // unusable points since the last usable one (reduced series)
        auto flush = [&] {
            if (!open) return;
            size_t picks[] = {first, low, high, last};
            std::sort(std::begin(picks), std::end(picks));
            for (size_t j = 0; j < 4; ++j)
                if (j == 0 || picks[j] != picks[j - 1]) vertex(picks[j]);
            open = false;
        };
        for (size_t i = 0; i < n; ++i) {
            if (!ok(i)) {
                if (reduce)
                    gap = true;
                else
                    pen_up();
                continue;
            }
            if (!reduce) {
                vertex(i);
                continue;
            }
            // NOTE: a gap is only visible where it leaves a whole pixel column empty; one that
            // does not (every other loss null, 200k lines) broke the line 100k times (14 MB).
            const long c = std::lround(sx(s.x[i]));
            if (open && c != column) {
                const long prev = column;
                flush();
                if (gap && std::abs(c - prev) > 1) pen_up();
            }
            gap = false;
            if (!open) {
                open = true;
                column = c;
                first = low = high = i;
            }
            if (s.y[i] < s.y[low]) low = i;
            if (s.y[i] > s.y[high]) high = i;
            last = i;
        }
        flush();
        pen_up();
        out += fmt::format("<g class=\"series\" data-name=\"{}\">\n", html_escape(s.name));
        if (options.lines) {
            out += fmt::format(
                "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-linejoin=\"round\" "
                "stroke-linecap=\"round\"{}/>\n",
                d, colour, dashed ? " stroke-dasharray=\"6 3\"" : "");
        }
        std::set<std::pair<long, long>> dots;  // (a scatter plot: the pixels that have a marker)
        std::vector<size_t> marked;
        // (a reduced series has no markers: its lone points are dots of the path)
        for (size_t i = 0; i < n && (!reduce || !options.lines); ++i) {
            if (!ok(i)) continue;
            if (options.lines) {
                const bool isolated = (i == 0 || !ok(i - 1)) && !ok(i + 1);
                if (count > static_cast<size_t>(kMarkerPointsMax) && !isolated) continue;
            } else if (!dots.emplace(std::lround(sx(s.x[i])), std::lround(sy(s.y[i]))).second) {
                continue;
            }
            marked.push_back(i);
        }
        if (marked.size() <= kTooltipMarkersMax) {
            for (size_t i : marked)
                out += fmt::format(
                    "<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\" stroke=\"#fff\" stroke-width=\"1\"><title>{}: "
                    "{}, {}</title></circle>\n",
                    px(sx(s.x[i])), px(sy(s.y[i])), colour, html_escape(s.name), point_label(s.x[i]),
                    point_label(s.y[i]));
        } else {
            // Thousands of markers (a scatter of a study's 10,000 trials): no tooltip each (nobody
            // hovers over them one by one), and their common attributes once, on a group: a
            // sixth of the bytes (5 parameter charts of 10,000 trials made a page of 7 MB).
            out += fmt::format("<g fill=\"{}\" stroke=\"#fff\" stroke-width=\"1\">\n", colour);
            for (size_t i : marked)
                out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\"/>\n", px(sx(s.x[i])), px(sy(s.y[i])));
            out += "</g>\n";
        }
        out += "</g>\n";
    }
    if (no_data) {
        out += fmt::format(
            "<text x=\"{}\" y=\"{}\" font-size=\"{}\" fill=\"#999\" text-anchor=\"middle\">no data</text>\n",
            px((x0 + x1) / 2), px((y0 + y1) / 2), kLabelFont + 1);
    }

    if (legend) {
        out += fmt::format("<g class=\"legend\" font-size=\"{}\" fill=\"#333\">\n", kTickFont);
        for (size_t k = 0; k < legend_pos.size(); ++k) {
            const auto& p = legend_pos[k];
            const bool dashed = static_cast<int>(k) >= kPaletteSize;
            out += fmt::format(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\" "
                "stroke-linecap=\"round\"{}/><text x=\"{}\" y=\"{}\" dominant-baseline=\"middle\">{}</text>\n",
                px(p.x), px(p.y), px(p.x + 16), px(p.y), kPalette[k % kPaletteSize],
                dashed ? " stroke-dasharray=\"6 3\"" : "", px(p.x + 22), px(p.y), html_escape(series[k].name));
        }
        if (legend_more > 0)
            out += fmt::format("<text x=\"{}\" y=\"{}\" dominant-baseline=\"middle\" fill=\"#777\">+{} more</text>\n",
                               px(more_pos.x), px(more_pos.y), legend_more);
        out += "</g>\n";
    }
    out += "</svg>\n";
    return out;
}

}  // namespace strato::report
