#pragma once
// Inline SVG line charts for self-contained HTML reports: no scripts, no external fonts or
// stylesheets, so a file opens the same in any browser, offline.

#include <string>
#include <string_view>
#include <vector>

namespace strato::report {

/// One line on a chart: points (x[i], y[i]) for i < min(x.size(), y.size()). A NaN or infinite
/// coordinate breaks the line there (nothing is drawn for that point).
struct Series {
    std::string name;
    std::vector<double> x, y;
};

/// Size and labels of a chart. With `log_y` (`log_x`), points with y (x) <= 0 are left out.
/// Without `lines`, each point is a marker and nothing joins them: a scatter plot (points that
/// fall on the same pixel are drawn once).
struct ChartOptions {
    std::string title, x_label, y_label;
    bool log_y = false;
    bool log_x = false;
    bool lines = true;
    int width = 640;
    int height = 320;
};

/// Renders `series` as an `<svg>` element with a title, axes with "nice" tick labels (1, 2, 5
/// times a power of ten), light grid lines, and a legend when there is more than one series.
/// Each series gets its own colour; series of few points also get markers with a hover tooltip.
/// Degenerate input is drawn, never rejected: no series or no finite point shows "no data",
/// one point is a marker, and a constant series gets a range around its value. Every text is
/// HTML-escaped. The element scales down with its container (`max-width: 100%`).
///
///     Series loss{"train", {1, 2, 3}, {0.9, 0.5, 0.4}};
///     std::string svg = line_chart_svg({loss}, {.title = "Loss", .x_label = "step"});
///
/// Pure function; safe to call from any thread.
std::string line_chart_svg(const std::vector<Series>& series, const ChartOptions& options);

/// Escapes `text` for HTML and XML text or attribute values: & < > " ' become entities; control
/// characters (but tab, CR, LF) and each byte that is not part of well-formed UTF-8 become U+FFFD.
std::string html_escape(std::string_view text);

namespace detail {

/// Tick values covering [lo, hi] at a "nice" step (1, 2 or 5 times a power of ten), about
/// `target` of them; the first tick is <= lo and the last >= hi. Needs finite lo < hi.
std::vector<double> nice_ticks(double lo, double hi, int target);

/// A tick label: as many decimals as `step` needs; k/M suffixes for large magnitudes and
/// scientific notation for very small or very large ones. `magnitude` is the largest |tick|.
std::string format_tick(double value, double step, double magnitude);

}  // namespace detail

}  // namespace strato::report
