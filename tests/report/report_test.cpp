#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "strato/core/fs.h"
#include "strato/report/autoscale_report.h"
#include "strato/report/run_report.h"
#include "strato/report/svg_chart.h"
#include "strato/report/tune_report.h"

namespace strato::report {
namespace {

namespace stdfs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

size_t count(const std::string& hay, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + needle.size())) ++n;
    return n;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

// "nan" or "inf" as a word (not inside "dominant"), as printf writes non-finite numbers.
bool has_non_number(const std::string& text) {
    static const std::regex kNonNumber("(^|[^a-z])(nan|inf)([^a-z]|$)", std::regex::icase);
    return std::regex_search(text, kNonNumber);
}

// A well-formed SVG never carries non-numbers into coordinates.
void expect_clean_svg(const std::string& svg) {
    EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 80);
    EXPECT_TRUE(contains(svg, "</svg>"));
    EXPECT_FALSE(has_non_number(svg)) << svg;
    EXPECT_EQ(count(svg, "<svg"), 1u);
}

// The stroke colours of the series paths, in order.
std::vector<std::string> path_colours(const std::string& svg) {
    std::vector<std::string> out;
    for (size_t pos = svg.find("<path "); pos != std::string::npos; pos = svg.find("<path ", pos + 1)) {
        const size_t s = svg.find("stroke=\"", pos) + 8;
        out.push_back(svg.substr(s, svg.find('"', s) - s));
    }
    return out;
}

// ---------------------------------------------------------------- charts

TEST(SvgChart, NoSeriesShowsNoData) {
    const std::string svg = line_chart_svg({}, {.title = "Empty", .x_label = "step", .y_label = "loss"});
    expect_clean_svg(svg);
    EXPECT_TRUE(contains(svg, "no data"));
    EXPECT_FALSE(contains(svg, "<path"));
    EXPECT_FALSE(contains(svg, "class=\"legend\""));
}

TEST(SvgChart, SeriesWithoutPointsShowsNoData) {
    const std::string svg = line_chart_svg({{"a", {}, {}}, {"b", {1, 2}, {kNaN, kNaN}}}, {.title = "t"});
    expect_clean_svg(svg);
    EXPECT_TRUE(contains(svg, "no data"));
    EXPECT_FALSE(contains(svg, "<path"));
}

TEST(SvgChart, SinglePointIsAMarker) {
    const std::string svg = line_chart_svg({{"only", {3}, {0.25}}}, {.title = "one"});
    expect_clean_svg(svg);
    EXPECT_FALSE(contains(svg, "no data"));
    EXPECT_EQ(count(svg, "<circle"), 1u);
    EXPECT_TRUE(contains(svg, "<title>only: 3, 0.25</title>"));
}

TEST(SvgChart, NonFiniteValuesBreakTheLine) {
    const std::string svg =
        line_chart_svg({{"s", {1, 2, 3, 4, 5, 6}, {1, kNaN, 3, 4, kInf, 2}}}, {.title = "gaps", .y_label = "y"});
    expect_clean_svg(svg);
    const size_t p = svg.find("<path d=\"");
    ASSERT_NE(p, std::string::npos);
    const std::string d = svg.substr(p + 9, svg.find('"', p + 9) - p - 9);
    EXPECT_EQ(count(d, "M"), 3u) << d;  // segments {1}, {3, 4}, {6}
    EXPECT_EQ(count(d, "L"), 1u) << d;
    EXPECT_EQ(count(svg, "<circle"), 4u);
}

TEST(SvgChart, ConstantValuesGetARange) {
    for (double v : {0.0, 0.5, -3.0, 1e6}) {
        SCOPED_TRACE(v);
        const std::string svg = line_chart_svg({{"flat", {0, 1, 2, 3}, {v, v, v, v}}}, {.title = "flat"});
        expect_clean_svg(svg);
        EXPECT_TRUE(contains(svg, "<path"));
        EXPECT_GE(count(svg, "text-anchor=\"end\""), 2u);  // at least two y tick labels
    }
    const std::string same_x = line_chart_svg({{"v", {5, 5, 5}, {1, 2, 3}}}, {.title = "vertical"});
    expect_clean_svg(same_x);
}

TEST(SvgChart, ExtremeValuesStayBounded) {
    for (const auto& ys : std::vector<std::vector<double>>{
             {1e-300, 1e299}, {1e6, 1e6 + 1e-9}, {-1e299, 1e299}, {1e308, 1}, {-kInf, kInf, 1}}) {
        SCOPED_TRACE(testing::Message() << ys[0] << " .. " << ys[1]);
        std::vector<double> xs(ys.size());
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(i);
        for (bool log_y : {false, true}) {
            const std::string svg = line_chart_svg({{"s", xs, ys}}, {.title = "t", .log_y = log_y});
            expect_clean_svg(svg);
            EXPECT_LT(svg.size(), 20000u);
        }
    }
}

TEST(SvgChart, LogScaleDropsNonPositiveValues) {
    const std::string svg =
        line_chart_svg({{"loss", {1, 2, 3, 4, 5}, {0, -1, 2.3, 0.4, 0.05}}}, {.title = "log", .log_y = true});
    expect_clean_svg(svg);
    EXPECT_EQ(count(svg, "<circle"), 3u);
    const std::string flat = line_chart_svg({{"c", {1, 2}, {0.3, 0.3}}}, {.title = "log", .log_y = true});
    expect_clean_svg(flat);
    const std::string none = line_chart_svg({{"c", {1, 2}, {0, -2}}}, {.title = "log", .log_y = true});
    expect_clean_svg(none);
    EXPECT_TRUE(contains(none, "no data"));
}

TEST(SvgChart, MismatchedLengthsUseTheShorter) {
    const std::string svg = line_chart_svg({{"s", {1, 2, 3}, {1, 2}}}, {.title = "t"});
    expect_clean_svg(svg);
    EXPECT_EQ(count(svg, "<circle"), 2u);
}

TEST(SvgChart, LegendOnlyForSeveralSeriesWithDistinctColours) {
    const std::string one = line_chart_svg({{"a", {1, 2}, {1, 2}}}, {.title = "t"});
    EXPECT_FALSE(contains(one, "class=\"legend\""));

    std::vector<Series> many;
    for (int i = 0; i < 4; ++i) many.push_back({"series " + std::to_string(i), {1, 2, 3}, {1.0 * i, 2.0 * i, 3.0}});
    const std::string svg = line_chart_svg(many, {.title = "t"});
    expect_clean_svg(svg);
    EXPECT_TRUE(contains(svg, "class=\"legend\""));
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(contains(svg, ">series " + std::to_string(i) + "</text>"));
    const auto colours = path_colours(svg);
    ASSERT_EQ(colours.size(), 4u);
    EXPECT_EQ(std::set<std::string>(colours.begin(), colours.end()).size(), 4u);
}

TEST(SvgChart, ManyPointsDrawNoMarkers) {
    Series s{"long", {}, {}};
    for (int i = 0; i < 500; ++i) {
        s.x.push_back(i);
        s.y.push_back(std::sin(i * 0.1));
    }
    const std::string svg = line_chart_svg({s}, {.title = "t"});
    expect_clean_svg(svg);
    EXPECT_EQ(count(svg, "<circle"), 0u);
}

// Found by review: a scatter plot gave every marker a tooltip and its own colour attributes, so
// the parameter charts of a study of 10,000 trials made a page of 7 MB. Past a few hundred
// markers they are bare circles in one coloured group; a few keep their tooltips.
TEST(SvgChart, AScatterOfThousandsOfPointsStaysSmall) {
    Series s{"trials", {}, {}};
    for (int i = 0; i < 5000; ++i) s.x.push_back(i % 100), s.y.push_back(i / 100);  // a grid: one pixel each
    std::string svg = line_chart_svg({s}, {.title = "t", .lines = false});
    expect_clean_svg(svg);
    EXPECT_EQ(count(svg, "<circle"), 5000u);
    EXPECT_EQ(count(svg, "<title>"), 1u) << "the chart's own";
    EXPECT_LT(svg.size(), 300'000u);
    EXPECT_TRUE(contains(svg, "<g fill=\"#4e79a7\" stroke=\"#fff\" stroke-width=\"1\">\n<circle cx=\""));
    s.x.resize(30), s.y.resize(30);
    svg = line_chart_svg({s}, {.title = "t", .lines = false});
    EXPECT_EQ(count(svg, "<title>"), 31u);
}

// Found by review: a positive denormal (5e-324) on a log axis made its 1-2-5 start 0 and the
// decade loop ran until memory ran out; a span of denormals gave an axis without ticks.
TEST(SvgChart, DenormalsNeitherLoopNorLoseTheTicks) {
    for (bool log_y : {true, false}) {
        const std::string svg = line_chart_svg({{"loss", {1, 2, 3}, {1.0, 5e-324, 3.0}}}, {.title = "t", .log_y = log_y});
        expect_clean_svg(svg);
        EXPECT_LT(svg.size(), 20000u);
    }
    const std::string flat = line_chart_svg({{"lr", {1, 2}, {5e-324, 5e-324}}}, {.title = "t"});
    expect_clean_svg(flat);
    EXPECT_GE(count(flat, "text-anchor=\"end\""), 2u) << "y tick labels";
    const std::string narrow = line_chart_svg({{"lr", {0, 5e-324}, {1, 2}}}, {.title = "t"});
    expect_clean_svg(narrow);
    EXPECT_GE(count(narrow, "text-anchor=\"middle\">"), 2u) << "x tick labels";
}

// Found by review: every point became a path vertex (200k steps: 10 MB for a 480-pixel plot).
// Per pixel column the first, lowest, highest and last point are kept: the same picture.
TEST(SvgChart, DenseSeriesAreReducedPerPixelColumnKeepingTheExtremes) {
    Series s{"loss", {}, {}};
    for (int i = 0; i < 200000; ++i) {
        s.x.push_back(i);
        s.y.push_back(1 + std::sin(i * 0.001));
    }
    s.y[123457] = 50;  // one spike must survive
    const std::string svg = line_chart_svg({s}, {.title = "t"});
    expect_clean_svg(svg);
    EXPECT_LT(svg.size(), 100000u);
    const size_t d = svg.find(" d=\"M");
    ASSERT_NE(d, std::string::npos);
    const std::string path = svg.substr(d, svg.find('"', d + 4) - d);
    // The spike is the lowest y pixel of the path: the top of the plot area.
    double min_y = 1e9;
    for (size_t pos = path.find(','); pos != std::string::npos; pos = path.find(',', pos + 1))
        min_y = std::min(min_y, std::stod(path.substr(pos + 1)));
    const std::string all = line_chart_svg({{"loss", {0, 1, 2}, {0, 50, 2}}}, {.title = "t"});  // the same y range
    const size_t c = all.find("<circle cx=\"", all.find("<circle cx=\"") + 1);
    const double spike_y = std::stod(all.substr(all.find("cy=\"", c) + 4));
    EXPECT_NEAR(min_y, spike_y, 0.15);
}

// Found by review: a dense series with gaps (every other loss null: 200k lines) drew each of its
// 100k points as an isolated marker, a 14 MB page. A gap inside one pixel column cannot be seen,
// so there the line goes on; a lone point of a dense series is a dot of the line, no marker.
TEST(SvgChart, DenseSeriesWithGapsStaySmall) {
    for (int period : {2, 3, 7}) {
        SCOPED_TRACE(period);
        Series s{"loss", {}, {}};
        for (int i = 0; i < 200000; ++i) {
            s.x.push_back(i);
            s.y.push_back(i % period == 0 ? kNaN : 1 + std::sin(i * 0.001) + (i % 5) * 0.01);
        }
        const std::string svg = line_chart_svg({s}, {.title = "t"});
        expect_clean_svg(svg);
        EXPECT_LT(svg.size(), 100000u);
        EXPECT_EQ(count(svg, "<circle"), 0u);
    }
    // A real gap (many pixel columns without data) still breaks the line; a lone point in a
    // dense series is still drawn, as a dot.
    Series s{"loss", {}, {}};
    for (int i = 0; i < 100000; ++i) {
        s.x.push_back(i);
        s.y.push_back(i >= 40000 && i < 60000 && i != 50000 ? kNaN : 1.0 + (i % 3));
    }
    const std::string svg = line_chart_svg({s}, {.title = "t"});
    expect_clean_svg(svg);
    const size_t p = svg.find("<path d=\"");
    ASSERT_NE(p, std::string::npos);
    const std::string d = svg.substr(p + 9, svg.find('"', p + 9) - p - 9);
    EXPECT_EQ(count(d, "M"), 3u) << "before the gap, the lone point, after the gap";
    EXPECT_EQ(count(d, " h0"), 1u) << d.substr(0, 200);
}

// Found by review: 120 series wrapped the legend past the chart and turned the plot upside
// down. The legend keeps at most 4 rows and says how many it leaves out.
TEST(SvgChart, ALongLegendIsCappedAndThePlotKeepsItsRoom) {
    std::vector<Series> many;
    for (int i = 0; i < 120; ++i) many.push_back({"concurrency " + std::to_string(i), {1, 2}, {1.0 * i, 2.0 * i}});
    const std::string svg = line_chart_svg(many, {.title = "t"});
    expect_clean_svg(svg);
    EXPECT_LE(count(svg, "stroke-width=\"3\""), 40u);
    const size_t more = svg.find(" more</text>");
    ASSERT_NE(more, std::string::npos);
    const size_t plus = svg.rfind('+', more);
    const int shown = static_cast<int>(count(svg, "stroke-width=\"3\""));
    EXPECT_EQ(std::stoi(svg.substr(plus + 1)), 120 - shown);
    // The y axis line runs from the plot's top (y1) down to its bottom (y0).
    const size_t axis = svg.find("<g stroke=\"#888\"");
    const size_t second = svg.find("<line ", svg.find("<line ", axis) + 1);
    const auto attr = [&](const char* name) {
        const size_t at = svg.find(name, second) + std::string(name).size();
        return std::stod(svg.substr(at));
    };
    EXPECT_GT(attr("y2=\"") - attr("y1=\""), 40) << "plot height";
}

TEST(SvgChart, TextIsEscaped) {
    const std::string svg = line_chart_svg({{"<b>&\"x\"", {1, 2}, {1, 2}}, {"y'", {1}, {1}}},
                                           {.title = "a<b", .x_label = "x&y", .y_label = ">"});
    EXPECT_TRUE(contains(svg, "a&lt;b"));
    EXPECT_TRUE(contains(svg, "x&amp;y"));
    EXPECT_TRUE(contains(svg, "&lt;b&gt;&amp;&quot;x&quot;"));
    EXPECT_TRUE(contains(svg, "y&#39;"));
    EXPECT_FALSE(contains(svg, "<b>"));
}

TEST(SvgChart, NiceTicksCoverTheRangeWithRoundSteps) {
    struct Case {
        double lo, hi;
        int target;
    };
    for (const Case c : {Case{0, 1, 5}, Case{0.013, 0.97, 6}, Case{-3.7, 12.2, 4}, Case{1e-5, 3e-4, 5},
                         Case{100, 100000, 8}, Case{2.31, 2.32, 5}}) {
        SCOPED_TRACE(testing::Message() << c.lo << " .. " << c.hi);
        const auto ticks = detail::nice_ticks(c.lo, c.hi, c.target);
        ASSERT_GE(ticks.size(), 2u);
        EXPECT_LE(ticks.size(), static_cast<size_t>(2 * c.target + 1));
        EXPECT_LE(ticks.front(), c.lo);
        EXPECT_GE(ticks.back(), c.hi);
        const double step = ticks[1] - ticks[0];
        const double mant = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        EXPECT_TRUE(std::abs(mant - 1) < 1e-6 || std::abs(mant - 2) < 1e-6 || std::abs(mant - 5) < 1e-6) << mant;
    }
    EXPECT_EQ(detail::nice_ticks(0, 1, 6), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
}

TEST(SvgChart, TickLabels) {
    EXPECT_EQ(detail::format_tick(0, 0.1, 1), "0");
    EXPECT_EQ(detail::format_tick(0.5, 0.1, 1), "0.5");
    EXPECT_EQ(detail::format_tick(0.25, 0.05, 1), "0.25");
    EXPECT_EQ(detail::format_tick(1000, 200, 1000), "1000");
    EXPECT_EQ(detail::format_tick(20000, 5000, 40000), "20k");
    EXPECT_EQ(detail::format_tick(2500, 500, 10000), "2.5k");
    EXPECT_EQ(detail::format_tick(3e7, 1e7, 5e7), "30M");
    EXPECT_EQ(detail::format_tick(1e-4, 2e-5, 1e-4), "1e-4");
    EXPECT_EQ(detail::format_tick(3e-5, 1e-5, 1e-4), "3e-5");
    EXPECT_EQ(detail::format_tick(-2, 1, 4), "-2");
}

// Found by review: a NUL from an input went into the page, and the next report refused to
// overwrite it as "not an HTML report"; control characters are not allowed in SVG either.
TEST(HtmlEscape, ControlCharactersBecomeReplacementCharacters) {
    EXPECT_EQ(html_escape(std::string("a\0b\x01" "c\x7f\td\n", 9)), "a&#xFFFD;b&#xFFFD;c&#xFFFD;\td\n");
}

// Found by review: a run directory or config.toml in Latin-1 ("caf\xe9") put bytes that are no
// UTF-8 into a page that declares UTF-8 (an SVG of it is no XML; Python's html.parser could not
// read it). Each byte of a broken sequence becomes a replacement character; UTF-8 passes.
TEST(HtmlEscape, InvalidUtf8BecomesReplacementCharacters) {
    EXPECT_EQ(html_escape("caf\xe9"), "caf&#xFFFD;");
    EXPECT_EQ(html_escape("\xe9t\xe9"), "&#xFFFD;t&#xFFFD;");
    EXPECT_EQ(html_escape("a\xe2\x82"), "a&#xFFFD;&#xFFFD;") << "a truncated 3-byte sequence";
    EXPECT_EQ(html_escape("\xc0\xaf"), "&#xFFFD;&#xFFFD;") << "an overlong '/'";
    EXPECT_EQ(html_escape("\xed\xa0\x80"), "&#xFFFD;&#xFFFD;&#xFFFD;") << "a surrogate";
    EXPECT_EQ(html_escape("\xf4\x90\x80\x80"), "&#xFFFD;&#xFFFD;&#xFFFD;&#xFFFD;") << "beyond U+10FFFF";
    EXPECT_EQ(html_escape("\xff<"), "&#xFFFD;&lt;");
    const std::string ok = "caf\xc3\xa9 \xe5\x90\x8d\xe5\x89\x8d \xf0\x9f\x9a\x80 \xef\xbf\xbd";  // café 名前 🚀 U+FFFD
    EXPECT_EQ(html_escape(ok), ok);
}

TEST(HtmlEscape, EscapesMarkupCharacters) {
    EXPECT_EQ(html_escape("a < b && c > \"d\" 'e'"), "a &lt; b &amp;&amp; c &gt; &quot;d&quot; &#39;e&#39;");
    EXPECT_EQ(html_escape(""), "");
    EXPECT_EQ(html_escape("plain text ü"), "plain text ü");
}

// ---------------------------------------------------------------- run report

class RunReportTest : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = stdfs::temp_directory_path() / ("strato-report-" + std::to_string(::getpid()) + "-" +
                                                testing::UnitTest::GetInstance()->current_test_info()->name());
        stdfs::remove_all(root_);
        dir_ = root_ / "fmnist-cnn";
        stdfs::create_directories(dir_ / "model");
    }
    void TearDown() override { stdfs::remove_all(root_); }

    void write(const std::string& rel, const std::string& text) {
        std::ofstream f(dir_ / rel, std::ios::binary);
        f << text;
    }

    // A run of 3 epochs, 10 steps each, a train line every 2 steps.
    static std::string metrics_lines() {
        std::string out;
        for (int epoch = 0; epoch < 3; ++epoch) {
            for (int b = 2; b <= 10; b += 2) {
                const int step = epoch * 10 + b;
                out += fmt::format(
                    "{{\"kind\":\"train\",\"step\":{},\"epoch\":{},\"loss\":{},\"acc\":{},\"lr\":{},"
                    "\"samples_per_s\":{}}}\n",
                    step, epoch + b / 10.0, 2.3 / (1 + step * 0.2), 0.1 + 0.8 * step / 30.0, 0.1 * (1 - step / 31.0),
                    4000 + 10 * b);
            }
            out += fmt::format(
                "{{\"kind\":\"eval\",\"step\":{},\"epoch\":{},\"train_loss\":{},\"train_acc\":{},\"test_loss\":{},"
                "\"test_acc\":{},\"epoch_time_s\":12.5,\"eval_time_s\":1.25}}\n",
                (epoch + 1) * 10, epoch + 1, 1.0 / (epoch + 1), 0.7 + 0.05 * epoch, 1.1 / (epoch + 1),
                0.8123 + 0.05 * epoch);
        }
        out += "{\"kind\":\"checkpoint\",\"step\":30}\n";  // unknown kinds are skipped
        return out;
    }

    void write_full_run() {
        write("metrics.jsonl", metrics_lines());
        write("config.toml", "[model]\narch = \"cnn\"\n\n[data]\nname = \"a<b & c\"\n");
        write("model/metrics.json",
              R"({"test_acc": 0.9123, "test_loss": 0.2345, "best_test_acc": 0.9150, "epochs": 3, "steps": 30,
                  "wall_time_s": 3725.0, "precision": "bf16", "test_samples": 10000, "early_stopped": false})");
        write("model/strato-model.json",
              R"({"format": "strato-model", "model": {"arch": "cnn", "width": 32, "depth": 2},
                  "parameters": 1234567, "num_classes": 10,
                  "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]})");
    }

    Result<std::string> render() { return render_run_report(dir_.string()); }

    stdfs::path root_, dir_;
};

// Every "http" in the page is the SVG namespace; nothing else could make the browser fetch.
void expect_self_contained(const std::string& html) {
    const std::string xmlns = "xmlns=\"http://www.w3.org/2000/svg\"";
    size_t http = 0;
    for (size_t pos = html.find("http"); pos != std::string::npos; pos = html.find("http", pos + 1)) {
        ++http;
        ASSERT_GE(pos, 7u);
        EXPECT_EQ(html.compare(pos - 7, xmlns.size(), xmlns), 0) << html.substr(pos - 20, 80);
    }
    EXPECT_EQ(http, count(html, "<svg"));
    const std::string l = lower(html);
    for (const char* bad : {"<script", "<link", "<img", "<iframe", "@import", "url(", "src=", "href=", "//cdn"}) {
        EXPECT_FALSE(contains(l, bad)) << bad;
    }
}

TEST_F(RunReportTest, FullRunHasSummaryChartsAndConfig) {
    write_full_run();
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    const std::string& h = *html;
    EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_TRUE(contains(h, "<title>fmnist-cnn · strato run report</title>"));
    EXPECT_TRUE(contains(h, "<h1>fmnist-cnn</h1>"));
    EXPECT_GE(count(h, "<svg"), 4u);
    for (const char* chart : {"aria-label=\"Loss", "aria-label=\"Accuracy\"", "aria-label=\"Learning rate\"",
                              "aria-label=\"Throughput\""}) {
        EXPECT_TRUE(contains(h, chart)) << chart;
    }
    EXPECT_TRUE(contains(h, "91.23%"));           // final test accuracy from model/metrics.json
    EXPECT_TRUE(contains(h, "91.50%"));           // best
    EXPECT_TRUE(contains(h, "0.2345"));           // test loss
    EXPECT_TRUE(contains(h, "1 h 02 min 05 s"));  // wall time
    EXPECT_TRUE(contains(h, "bf16"));
    EXPECT_TRUE(contains(h, "<td>cnn</td>"));  // arch from /model/arch
    EXPECT_TRUE(contains(h, "depth = 2, width = 32"));
    EXPECT_TRUE(contains(h, "1,234,567"));                          // parameters
    EXPECT_TRUE(contains(h, "[-1, 1, 28, 28]"));                    // /inputs/0/shape
    EXPECT_TRUE(contains(h, "name = &quot;a&lt;b &amp; c&quot;"));  // config, verbatim and escaped
    EXPECT_FALSE(contains(h, "a<b & c"));
    EXPECT_TRUE(contains(h, "91.23%"));
    EXPECT_TRUE(contains(h, "train (per step)"));
    EXPECT_TRUE(contains(h, "test (epoch)"));
    EXPECT_FALSE(contains(h, "class=\"notes\""));  // nothing to warn about
    expect_self_contained(h);

    // Deterministic: same input, same bytes.
    auto again = render();
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ(*again, h);
}

TEST_F(RunReportTest, WriteRunReportWritesTheFile) {
    write_full_run();
    const std::string out = (dir_ / "report.html").string();
    Status st = write_run_report(dir_.string(), out);
    ASSERT_TRUE(st.is_ok()) << st.message();
    auto text = fs::read_file(out);
    ASSERT_TRUE(text.is_ok());
    EXPECT_EQ(*text, *render());
    // A trailing slash names the same run.
    auto slash = render_run_report(dir_.string() + "/");
    ASSERT_TRUE(slash.is_ok());
    EXPECT_TRUE(contains(*slash, "<h1>fmnist-cnn</h1>"));
}

TEST_F(RunReportTest, ALoadTestOfAnotherShapeIsNamedAndTheRestRenders) {
    write_full_run();
    write("loadtest.json", R"({"kind": "strato-loadtest", "points": [{"throughput": 10, "latency_us": {"p50": 900}}]})");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "Latency vs throughput"));
    // A hand-edited field of another type: the section says which, the rest of the report is there.
    write("loadtest.json", R"({"kind": "strato-loadtest", "points": [{"throughput": 10, "errors": "none"}]})");
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "loadtest.json could not be read: field points[0].errors is a string, expected an object"))
        << *html;
    EXPECT_TRUE(contains(*html, "91.23%"));
    write("loadtest.json", "[1, 2]");
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "loadtest.json could not be read: it is not a JSON object"));
    // Found by review: a level or SLO rate that is no number printed "nan".
    write("loadtest.json", R"({"kind": "strato-loadtest", "points": [{"concurrency": "x", "throughput": 10}],
                               "slo": {"found": true, "best_rate": "fast"}})");
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_FALSE(has_non_number(*html)) << *html;
    // An SLO search that stopped early (a probe could not start) says so and why.
    write("loadtest.json", R"({"kind": "strato-loadtest", "points": [{"request_rate": 50, "throughput": 50}],
                               "slo": {"found": true, "best_rate": 50, "p99_ms": 20,
                                       "failed": "SLO probe at 75 req/s: too many <open> files"}})");
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "<b>stopped early</b>, the limit may lie higher: SLO probe at 75 req/s: too many "
                                "&lt;open&gt; files"))
        << *html;
}

TEST_F(RunReportTest, WriteIntoMissingDirectoryFails) {
    write_full_run();
    Status st = write_run_report(dir_.string(), (root_ / "nope" / "report.html").string());
    EXPECT_FALSE(st.is_ok());
}

// Found by review: 200k evaluations made a 56 MB page (one table row each). The table keeps
// the first and last 100 and the best; a row says how many are left out.
TEST_F(RunReportTest, ALongEvaluationTableKeepsItsEdgesAndTheBest) {
    write_full_run();
    std::string lines;
    for (int e = 1; e <= 5000; ++e)
        lines += fmt::format(R"({{"kind":"eval","step":{},"epoch":{},"train_loss":0.5,"train_acc":0.5,)"
                             R"("test_loss":0.5,"test_acc":{},"epoch_time_s":1,"eval_time_s":1}})"
                             "\n",
                             e, e, e == 2500 ? 0.9876 : 0.5);
    write("metrics.jsonl", lines);
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_LT(html->size(), 600000u);
    EXPECT_EQ(count(*html, "<tr class=\"gap\">"), 2u);
    EXPECT_TRUE(contains(*html, "… 2399 evaluations not shown")) << "101..2499";
    EXPECT_TRUE(contains(*html, "… 2400 evaluations not shown")) << "2501..4900";
    EXPECT_TRUE(contains(*html, "98.76%"));
    EXPECT_TRUE(contains(*html, "<td class=\"num\">5,000</td>") || contains(*html, "<td class=\"num\">5000</td>"));
}

TEST_F(RunReportTest, TornLastLineIsIgnored) {
    write_full_run();
    write("metrics.jsonl", metrics_lines() + R"({"kind":"train","step":31,"ep)");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_GE(count(*html, "<svg"), 4u);
    EXPECT_TRUE(contains(*html, "incomplete"));
    // Bytes a crash left (a block of zeros) are torn too, not an error.
    write("metrics.jsonl", metrics_lines() + std::string(100, '\0'));
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "incomplete"));
}

// Found by review: a last line that is a whole JSON object, only without its newline (a log
// written by hand or by Python's "\n".join), was dropped as torn: a one-line log's only
// evaluation, "No evaluation recorded yet". A JSON object cannot be cut short and stay one, so it
// is read; blanks after the last newline are no torn line either.
TEST_F(RunReportTest, ALastLineWithoutItsNewlineIsReadWhenItIsWhole) {
    const std::string eval = R"({"kind":"eval","step":40,"epoch":4,"train_loss":0.1,"train_acc":0.4242,)"
                             R"("test_loss":0.1,"test_acc":0.4242,"epoch_time_s":1,"eval_time_s":1})";
    for (const std::string& text : {eval, metrics_lines() + eval, metrics_lines() + eval + "\r", eval + "\n  "}) {
        write("metrics.jsonl", text);
        auto html = render();
        ASSERT_TRUE(html.is_ok()) << html.status().message();
        EXPECT_TRUE(contains(*html, "42.42%")) << text;
        EXPECT_FALSE(contains(*html, "incomplete")) << text;
        EXPECT_FALSE(contains(*html, "No evaluation recorded yet")) << text;
    }
    // ... and checked as any line: a field of the wrong type names it.
    write("metrics.jsonl", metrics_lines() + R"({"kind":"eval","step":"forty"})");
    auto html = render();
    ASSERT_FALSE(html.is_ok());
    EXPECT_NE(html.status().message().find("metrics.jsonl:20: \"step\" is a string"), std::string::npos)
        << html.status().message();
}

TEST_F(RunReportTest, MalformedLineNamesFileAndLine) {
    write_full_run();
    write("metrics.jsonl",
          "{\"kind\":\"train\",\"step\":1,\"epoch\":0.1,\"loss\":2,\"acc\":0.1,\"lr\":0.1,\"samples_per_s\":1}\n"
          "\n"
          "{\"kind\":\"train\",\"step\":2,\"epo\n"
          "{\"kind\":\"train\",\"step\":3,\"epoch\":0.3,\"loss\":2,\"acc\":0.1,\"lr\":0.1,\"samples_per_s\":1}\n");
    auto html = render();
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(contains(html.status().message(), (dir_ / "metrics.jsonl").string() + ":3:"))
        << html.status().message();

    write("metrics.jsonl", "[1, 2]\n");
    html = render();
    ASSERT_FALSE(html.is_ok());
    EXPECT_TRUE(contains(html.status().message(), "metrics.jsonl:1:")) << html.status().message();
}

TEST_F(RunReportTest, WrongFieldTypeNamesLineAndKey) {
    write("metrics.jsonl",
          "{\"kind\":\"eval\",\"step\":10,\"epoch\":1,\"test_acc\":0.5}\n"
          "{\"kind\":\"train\",\"step\":2,\"epoch\":0.2,\"loss\":\"high\",\"acc\":0.1}\n");
    auto html = render();
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(contains(html.status().message(), "metrics.jsonl:2:")) << html.status().message();
    EXPECT_TRUE(contains(html.status().message(), "\"loss\"")) << html.status().message();
}

TEST_F(RunReportTest, NullValuesAreGapsNotErrors) {
    // JSON writers spell NaN as null: a diverged loss must not break the report.
    write("metrics.jsonl",
          "{\"kind\":\"train\",\"step\":1,\"epoch\":0.5,\"loss\":null,\"acc\":0.1,\"lr\":0.1,\"samples_per_s\":10}\n"
          "{\"kind\":\"eval\",\"step\":2,\"epoch\":1,\"train_loss\":null,\"test_loss\":null,\"test_acc\":0.25}\n");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "25.00%"));
    EXPECT_FALSE(has_non_number(*html));
}

// Found by review: Python's json writes a diverged loss as NaN or Infinity (not JSON), and the
// whole report failed with "not a JSON object". Such values are gaps, and a note says so; a
// string that holds the word is left alone.
TEST_F(RunReportTest, NaNAndInfinityAsPythonWritesThemAreGaps) {
    write("metrics.jsonl",
          "{\"kind\":\"train\",\"step\":1,\"epoch\":0.5,\"loss\":NaN,\"acc\":0.1,\"lr\":0.1,\"samples_per_s\":10}\n"
          "{\"kind\":\"train\",\"step\":2,\"epoch\":0.6,\"loss\":Infinity,\"acc\":-Infinity,\"lr\":0.1,"
          "\"samples_per_s\":10,\"note\":\"NaN \\\" Infinity\"}\n"
          "{\"kind\":\"eval\",\"step\":2,\"epoch\":1,\"train_loss\":NaN,\"test_loss\":1.5,\"test_acc\":0.25}\n");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "25.00%"));
    EXPECT_TRUE(contains(*html, "2 train, 1 eval")) << *html;
    EXPECT_TRUE(contains(*html, "3 line(s) of metrics.jsonl hold NaN or Infinity"));
    const size_t notes = html->find("<div class=\"notes\">");
    ASSERT_NE(notes, std::string::npos);
    EXPECT_FALSE(has_non_number(html->substr(0, notes) + html->substr(html->find("</div>", notes))));

    // Only the tokens: a line that is broken otherwise is still an error at its line.
    write("metrics.jsonl", "{\"kind\":\"train\",\"step\":1,\"loss\":NaN\n");
    html = render();
    ASSERT_FALSE(html.is_ok());
    EXPECT_TRUE(contains(html.status().message(), "metrics.jsonl:1: not a JSON object")) << html.status().message();
}

// Found by review: metrics.jsonl was read whole before parsing, so a long run's log held all its
// bytes in memory at once (1e6 lines: 400 MB for a 150 MB file). It is read a block at a time:
// memory follows the points, not the file. Lines that cross a block boundary still parse.
TEST_F(RunReportTest, ALongLogIsReadWithoutHoldingItWhole) {
    const auto train_line = [](int step) {
        return fmt::format("{{\"kind\":\"train\",\"step\":{},\"epoch\":{},\"loss\":0.5,\"acc\":0.5,\"lr\":0.1,"
                           "\"samples_per_s\":1000}}\n",
                           step, step / 100.0);
    };
    {
        std::ofstream f(dir_ / "metrics.jsonl", std::ios::binary);
        f << train_line(1);
        // A line that ends just short of 1 MiB, so that the next one crosses that boundary.
        f << std::string((size_t{1} << 20) - train_line(1).size() - 20, ' ') << '\n' << train_line(2);
        const std::string blank(4095, ' ');
        for (int i = 0; i < 32 * 1024; ++i) f << blank << '\n';  // 128 MiB of blank lines
        f << train_line(777777);
    }
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    auto html = render();
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "3 train, 0 eval")) << html->substr(0, 3000);
    EXPECT_TRUE(contains(*html, "777,777"));
    // (ru_maxrss is in KiB; the file is 129 MiB)
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 48 * 1024)
        << "peak memory grew by " << (after.ru_maxrss - before.ru_maxrss) / 1024 << " MiB reading a 129 MiB log";
}

// A file without line ends is no metrics log: it is refused at the line, not held whole.
TEST_F(RunReportTest, ALineLongerThanAnyMetricsLineIsAnError) {
    {
        std::ofstream f(dir_ / "metrics.jsonl", std::ios::binary);
        f << "{\"kind\":\"train\",\"step\":1}\n" << std::string(size_t{17} << 20, 'x');
    }
    auto html = render();
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(contains(html.status().message(), "metrics.jsonl:2: a line longer than 16 MiB"))
        << html.status().message();
}

// Found by review: a damaged "steps": 1e300 printed as 300 digits with commas.
TEST_F(RunReportTest, AHugeCountIsShownShort) {
    write_full_run();
    write("model/metrics.json", R"({"test_acc": 0.9, "epochs": 3, "steps": 1e300, "wall_time_s": 10})");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "1e+300")) << html->substr(0, 4000);
    EXPECT_FALSE(contains(*html, "000,000,000,000,000,000"));
}

// Found by review: a diverging loss (3e25 before it became NaN) printed as 26 digits and four
// decimals in the summary, the cards and the epoch table ("-1e308": 309 digits); a loss of 3e-6
// printed as "0.0000". Such values are shown in scientific notation.
TEST_F(RunReportTest, HugeAndTinyValuesAreShownShort) {
    write("metrics.jsonl",
          "{\"kind\":\"train\",\"step\":1,\"epoch\":0.5,\"loss\":3e25,\"acc\":0.1,\"lr\":0.1,\"samples_per_s\":10}\n"
          "{\"kind\":\"eval\",\"step\":2,\"epoch\":1,\"train_loss\":-1e308,\"train_acc\":1e300,\"test_loss\":3e-6,"
          "\"test_acc\":0.25}\n");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_FALSE(std::regex_search(*html, std::regex("[0-9]{16}"))) << "a number of 16 digits or more";
    EXPECT_FALSE(contains(*html, ">0.0000<")) << "3e-6 is no zero";
    EXPECT_TRUE(contains(*html, "3e+25")) << "the final train loss";
    EXPECT_TRUE(contains(*html, "3e-06")) << "the test loss";
    EXPECT_TRUE(contains(*html, "25.00%"));
    // The load test's table: a damaged throughput of 1e300 req/s.
    write("loadtest.json", R"({"kind": "strato-loadtest", "points": [{"concurrency": 1, "throughput": 1e300}]})");
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_FALSE(std::regex_search(*html, std::regex("[0-9]{16}"))) << "a number of 16 digits or more";
}

// Found by review: a run stopped by max_steps at step 5 of 32 wrote "epoch": 1 with 0.04 s, and
// the report and plan --run took it as an epoch's time.
TEST_F(RunReportTest, APartialEpochIsShownAsSuchAndLeftOutOfTheEpochTime) {
    write("metrics.jsonl",
          "{\"kind\":\"eval\",\"step\":32,\"epoch\":1,\"train_loss\":1,\"train_acc\":0.5,\"test_loss\":1,\"test_acc\":0.5,"
          "\"epoch_time_s\":10,\"eval_time_s\":1}\n"
          "{\"kind\":\"eval\",\"step\":37,\"epoch\":1.15625,\"train_loss\":1,\"train_acc\":0.5,\"test_loss\":1,"
          "\"test_acc\":0.5,\"epoch_time_s\":0.04,\"eval_time_s\":1,\"partial\":true}\n");
    auto speed = read_run_speed(dir_.string());
    ASSERT_TRUE(speed.is_ok()) << speed.status().message();
    EXPECT_DOUBLE_EQ(speed->epoch_time_s, 10.0);
    EXPECT_DOUBLE_EQ(speed->steps_per_epoch, 32.0);
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, ">1.16<")) << *html;
    EXPECT_TRUE(contains(*html, "(part)"));
    write("metrics.jsonl", "{\"kind\":\"eval\",\"step\":1,\"epoch\":1,\"partial\":\"yes\"}\n");
    auto bad = render();
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("'partial' must be true or false"), std::string::npos) << bad.status().message();
}

// Found by review: a run stopped half-way through its first epoch (train.max_steps) showed
// "epochs 0" in the card and the results ({:.0f} of 0.5); the table said 0.50.
TEST_F(RunReportTest, APartOfAnEpochIsNotRoundedAway) {
    write("metrics.jsonl",
          "{\"kind\":\"eval\",\"step\":16,\"epoch\":0.5,\"train_loss\":1,\"train_acc\":0.5,\"test_loss\":1,"
          "\"test_acc\":0.5,\"epoch_time_s\":0.04,\"eval_time_s\":1,\"partial\":true}\n");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "<div class=\"label\">epochs</div><div class=\"value\">0.50</div>")) << *html;
    EXPECT_TRUE(contains(*html, "<th scope=\"row\">epochs</th><td>0.50</td>")) << *html;
    EXPECT_FALSE(contains(*html, "<div class=\"value\">0</div>"));
}

TEST_F(RunReportTest, AnEpochWithoutAccuracyIsNeverTheBestRow) {
    // Found by review: a null first accuracy was marked best (NaN never loses a '>' comparison).
    write("metrics.jsonl", "{\"kind\":\"eval\",\"step\":10,\"epoch\":1,\"test_acc\":null}\n"
                           "{\"kind\":\"eval\",\"step\":20,\"epoch\":2,\"test_acc\":0.9}\n"
                           "{\"kind\":\"eval\",\"step\":30,\"epoch\":3,\"test_acc\":0.8}\n");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    const size_t best = html->find("<tr class=\"best\">");
    ASSERT_NE(best, std::string::npos);
    EXPECT_EQ(html->substr(best, 39), "<tr class=\"best\"><td class=\"num\">2</td>");
    EXPECT_EQ(count(*html, "class=\"best\""), 1u);
}

TEST_F(RunReportTest, DeeplyNestedJsonIsAnErrorNotACrash) {
    // Found by review: 100,000 nested arrays in metrics.json overflowed the stack.
    write_full_run();
    write("model/metrics.json", "{\"test_acc\":0.5,\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
    auto html = render();
    if (html.is_ok()) {
        EXPECT_FALSE(contains(*html, "[[[[")) << "the nested value is not printed";
    }
}

TEST_F(RunReportTest, MissingRunDirectoryIsNotFound) {
    auto html = render_run_report((root_ / "no-such-run").string());
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(contains(html.status().message(), (root_ / "no-such-run").string()));

    Status st = write_run_report((root_ / "no-such-run").string(), (root_ / "r.html").string());
    EXPECT_EQ(st.code(), StatusCode::kNotFound);
    EXPECT_FALSE(stdfs::exists(root_ / "r.html"));
}

TEST_F(RunReportTest, DirectoryWithoutMetricsIsNotFound) {
    stdfs::remove_all(dir_ / "model");
    auto html = render();
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(contains(html.status().message(), dir_.string() + " has no metrics.jsonl")) << html.status().message();
}

// Found by review: a study's directory, a model package or a directory of runs given for a run
// each said only "has no metrics.jsonl (is it a run directory?)"; each now says what it is and
// what to give instead.
TEST_F(RunReportTest, ADirectoryThatIsNoRunSaysWhatItIsAndWhatToGive) {
    write("model/strato-model.json", "{}");
    write("metrics.jsonl", "");
    auto html = render_run_report((dir_ / "model").string());
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().message(),
              fmt::format("{0}/model is a model package, not a run; the run it came from is {0}", dir_.string()));
    html = render_run_report((dir_ / "model").string() + "/");  // (a trailing slash: the same)
    ASSERT_FALSE(html.is_ok());
    EXPECT_TRUE(contains(html.status().message(), "the run it came from is " + dir_.string()))
        << html.status().message();

    for (const char* run : {"b", "a", "c", "d"}) {
        stdfs::create_directories(root_ / run);
        std::ofstream(root_ / run / "metrics.jsonl") << "";
    }
    html = render_run_report(root_.string());
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(html.status().message(),
              fmt::format("{0} has no metrics.jsonl: it holds runs, give one of them: {0}/a, {0}/b, {0}/c (and 2 more)",
                          root_.string()));

    stdfs::create_directories(root_ / "study");
    std::ofstream(root_ / "study" / "study.db") << "";
    html = render_run_report((root_ / "study").string());
    ASSERT_FALSE(html.is_ok());
    EXPECT_TRUE(contains(html.status().message(), "is a tuning study, not a run: `strato tune report STUDY.toml`"))
        << html.status().message();

    html = render_run_report((dir_ / "metrics.jsonl").string());
    ASSERT_FALSE(html.is_ok());
    EXPECT_EQ(html.status().message(), fmt::format("{0}/metrics.jsonl is the metrics log of a run: give the run's "
                                                   "directory, {0}",
                                                   dir_.string()));
}

// Found by review: another program's log (step and loss, no epoch) drew "no data" in the loss
// and accuracy charts, which go by epoch; they go by step when the lines have no epoch.
TEST_F(RunReportTest, ALogWithoutEpochsIsChartedBySteps) {
    std::string lines;
    for (int step = 1; step <= 30; ++step)
        lines += fmt::format("{{\"kind\":\"train\",\"step\":{},\"loss\":{},\"acc\":{}}}\n", step, 2.0 / step,
                             0.02 * step);
    lines += R"({"kind":"eval","step":30,"test_loss":0.1,"test_acc":0.6})" "\n";
    write("metrics.jsonl", lines);
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    for (const std::string title : {"Loss (log scale)", "Accuracy"}) {
        const size_t at = html->find("aria-label=\"" + title + "\"");
        ASSERT_NE(at, std::string::npos) << title;
        const std::string svg = html->substr(at, html->find("</svg>", at) - at);
        EXPECT_FALSE(contains(svg, "no data")) << title;
        EXPECT_TRUE(contains(svg, ">step</text>")) << title;
        EXPECT_TRUE(contains(svg, "<path")) << title;
    }
    // A strato run's log keeps its epochs.
    write("metrics.jsonl", metrics_lines());
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    const size_t at = html->find("aria-label=\"Accuracy\"");
    EXPECT_TRUE(contains(html->substr(at, html->find("</svg>", at) - at), ">epoch</text>"));
}

TEST_F(RunReportTest, OnlyMetricsUsesTheLastEvaluation) {
    write("metrics.jsonl", metrics_lines());
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_GE(count(*html, "<svg"), 4u);
    EXPECT_TRUE(contains(*html, "91.23%"));  // last eval: 0.8123 + 0.1
    EXPECT_TRUE(contains(*html, "config.toml not found"));
    EXPECT_TRUE(contains(*html, "model/metrics.json not found"));
    expect_self_contained(*html);
}

TEST_F(RunReportTest, EmptyMetricsStillRenders) {
    write("metrics.jsonl", "");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_EQ(count(*html, "<svg"), 4u);
    EXPECT_EQ(count(*html, ">no data</text>"), 4u);
    expect_self_contained(*html);
}

TEST_F(RunReportTest, BrokenOptionalFilesAreNotedInThePage) {
    write_full_run();
    write("model/metrics.json", "{\"test_acc\": 0.9");
    write("model/strato-model.json", "[]");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "metrics.json is not a valid JSON object"));
    EXPECT_TRUE(contains(*html, "strato-model.json is not a valid JSON object"));
    EXPECT_TRUE(contains(*html, "91.23%"));  // falls back to the last eval line
}

// Found by review: `train.monitor_every` records CPU, memory and GPU samples in metrics.jsonl
// ("kind": "monitor", docs/monitor.md), and the report left them out: W&B charts a run's system
// metrics next to its loss. A run with such lines gets a chart of them, in percent over steps; a
// sample of an unexpected shape is left out, never an error.
TEST_F(RunReportTest, MonitorSamplesAreChartedOverSteps) {
    write("metrics.jsonl",
          "{\"kind\":\"train\",\"step\":10,\"epoch\":0.5,\"loss\":1,\"acc\":0.5,\"lr\":0.1,\"samples_per_s\":10}\n"
          "{\"kind\":\"monitor\",\"step\":10,\"t\":1.5e9,\"cpu_util\":55.5,\"mem_used_pct\":31,"
          "\"gpu_util\":{\"0\":90,\"<b>1</b>\":12}}\n"
          "{\"kind\":\"monitor\",\"step\":20,\"t\":1.5e9,\"cpu_util\":null,\"mem_used_pct\":\"x\",\"gpu_util\":[1]}\n"
          "{\"kind\":\"monitor\",\"step\":30,\"t\":1.5e9,\"cpu_util\":65,\"mem_used_pct\":33,\"gpu_util\":{\"0\":80}}\n");
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_EQ(count(*html, "<svg"), 5u);
    EXPECT_TRUE(contains(*html, ">System utilization</text>"));
    for (const char* name : {">CPU</text>", ">memory</text>", ">GPU 0</text>", ">GPU &lt;b&gt;1&lt;/b&gt;</text>"})
        EXPECT_TRUE(contains(*html, name)) << name;
    EXPECT_FALSE(contains(*html, "<b>1</b>"));
    // A run without monitor lines keeps its four charts.
    write("metrics.jsonl", metrics_lines());
    html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_EQ(count(*html, "<svg"), 4u);
}

TEST_F(RunReportTest, ManyStepsMakeALogScaleLossChart) {
    std::string lines;
    for (int step = 1; step <= 400; ++step) {
        lines += fmt::format(
            "{{\"kind\":\"train\",\"step\":{},\"epoch\":{},\"loss\":{},\"acc\":0.5,\"lr\":0.01,"
            "\"samples_per_s\":100}}\n",
            step, step / 100.0, 3.0 / step);
    }
    write("metrics.jsonl", lines);
    auto html = render();
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "Loss (log scale)"));
    expect_self_contained(*html);
}

// ---------------------------------------------------------------- tune report

// Found by review: a study's parameter charts drew a log-uniform learning rate (1e-4 .. 0.1) on a
// linear axis, all but the largest trials squeezed against its left edge, and joined the trials
// sorted by the parameter with a line, as if the objective were a function of it. A parameter
// spread over two decades or more gets a log axis, and each trial is a point. A diverged trial's
// objective (3e25) printed 26 digits in the leaderboard.
TEST(TuneReport, ParametersAreScatteredOnALogAxisWhenTheySpanDecades) {
    nlohmann::json st = {{"kind", "strato-tune"}, {"name", "s"},        {"metric", "val_loss"},
                         {"mode", "min"},         {"trials", nlohmann::json::array()}};
    for (int i = 0; i < 20; ++i) {
        const double lr = 1e-4 * std::pow(10.0, i * 3.0 / 19);
        st["trials"].push_back({{"name", fmt::format("trial_{:04}", i)},
                                {"params",
                                 {{"optim.lr", fmt::format("{:.3g}", lr)}, {"model.width", std::to_string(16 + i)}}},
                                {"state", "done"},
                                {"epochs", 3},
                                {"best", i == 7 ? 3e25 : 0.5 + 0.01 * i},
                                {"results", nlohmann::json::array({nlohmann::json::array({1, 0.6})})}});
    }
    auto html = render_tune_report(st);
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    const auto figure = [&](const std::string& title) {
        const size_t at = html->find(">" + title + "</text>");
        EXPECT_NE(at, std::string::npos) << title;
        if (at == std::string::npos) return std::string();
        const size_t begin = html->rfind("<svg", at);
        return html->substr(begin, html->find("</svg>", at) - begin);
    };
    const std::string lr = figure("optim.lr vs best val_loss");
    expect_clean_svg(lr + "</svg>");
    EXPECT_TRUE(contains(lr, ">0.001</text>") && contains(lr, ">0.01</text>")) << "decade ticks";
    EXPECT_FALSE(contains(lr, "<path")) << "trials are points";
    EXPECT_EQ(count(lr, "<circle"), 20u);
    // A parameter within one decade keeps its linear axis.
    const std::string width = figure("model.width vs best val_loss");
    EXPECT_TRUE(contains(width, ">20</text>")) << width;
    EXPECT_EQ(count(width, "<circle"), 20u);
    EXPECT_FALSE(std::regex_search(*html, std::regex("[0-9]{16}"))) << "a number of 16 digits or more";
    EXPECT_TRUE(contains(*html, "3e+25"));
}

// Found by review: render_tune_report read each trial with const operator[], undefined for a
// missing key (a trial without "best" or "params"), and get<> on fields of another type threw
// out of the report (terminate). A NaN objective broke the leaderboard's ordering. Such trials
// are shown with what they have, and a field of another type is an error naming it.
TEST(TuneReport, TrialsWithMissingOrOddFieldsDoNotCrash) {
    nlohmann::json st = {{"kind", "strato-tune"}, {"name", "s<b>"}, {"metric", "acc"}, {"mode", "max"}};
    st["trials"] = nlohmann::json::array(
        {nlohmann::json::object(),
         {{"name", "t1"}, {"best", 0.5}, {"params", {{"optim.lr", 0.01}, {"model.width", "16"}}}, {"epochs", 2}},
         {{"name", "t2"}, {"best", kNaN}, {"params", {{"optim.lr", "0.1"}}}, {"state", "done"}},
         {{"name", "t3"}, {"best", 0.7}, {"results", {{1, 0.6}, {"x", 0.7}, {2}, 3}}, {"params", 5}},
         7});
    auto html = render_tune_report(st);
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "optim.lr=0.01"));
    EXPECT_TRUE(contains(*html, "<header><h1>Study s&lt;b&gt;</h1>"));
    EXPECT_LT(html->find(">t3</td>"), html->find(">t1</td>")) << "0.7 before 0.5";
    EXPECT_LT(html->find(">t1</td>"), html->find(">t2</td>")) << "a NaN objective is no result";
    EXPECT_FALSE(has_non_number(*html));

    st["metric"] = 5;
    html = render_tune_report(st);
    ASSERT_FALSE(html.is_ok());
    EXPECT_TRUE(contains(html.status().message(), "unexpected type")) << html.status().message();
    EXPECT_FALSE(render_tune_report(nlohmann::json::array()).is_ok());
}

// Found by review: the leaderboard listed every trial, 1.5 MB of table for a study of 10,000;
// it lists the best 500 and says how many more there are and where to see them.
TEST(TuneReport, ALongStudyListsItsBestTrials) {
    nlohmann::json many = {{"kind", "strato-tune"}, {"name", "s"}, {"metric", "acc"}, {"mode", "max"}};
    many["trials"] = nlohmann::json::array();
    for (int i = 0; i < 600; ++i)
        many["trials"].push_back({{"name", fmt::format("trial-{:04}", i)}, {"best", i / 1000.0}, {"state", "done"}});
    auto html = render_tune_report(many);
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, ">trial-0599</td>"));  // the best
    EXPECT_TRUE(contains(*html, ">trial-0100</td>"));  // the 500th
    EXPECT_FALSE(contains(*html, ">trial-0099</td>"));
    EXPECT_TRUE(contains(*html, "… 100 more trials not shown (`strato tune status --top N` lists them all)"));
}

// Found by review: the tune and autoscale pages put their title in a bare <h1>, outside the
// <header> whose style the run and load-test reports use (the browser's own size and margins, and
// a long study name ran off the page instead of wrapping).
TEST(AutoscaleReport, TheTitleIsInTheHeaderAsInTheOtherReports) {
    auto html = render_autoscale_report({{"kind", "strato-autoscale-sim"}, {"instance", "g5<x>"}, {"events", 10}});
    ASSERT_TRUE(html.is_ok()) << html.status().message();
    EXPECT_TRUE(contains(*html, "<header><h1>Autoscaling simulation</h1><p class=\"sub\">g5&lt;x&gt; · 10 events"));
}

}  // namespace
}  // namespace strato::report
