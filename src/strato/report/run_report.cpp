#include "strato/report/run_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/report/loadtest_report.h"
#include "strato/report/page.h"
#include "strato/report/svg_chart.h"

namespace strato::report {

namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One "kind":"train" line: a window of steps ending at `step`.
struct TrainPoint {
    double step = kNaN, epoch = kNaN, loss = kNaN, acc = kNaN, lr = kNaN, samples_per_s = kNaN;
};

// One "kind":"eval" line: the end of an epoch.
struct EvalPoint {
    double step = kNaN, epoch = kNaN, train_loss = kNaN, train_acc = kNaN, test_loss = kNaN, test_acc = kNaN,
           epoch_time_s = kNaN, eval_time_s = kNaN;
    bool partial = false;  // an epoch cut short or resumed mid-way: epoch_time_s is not an epoch's
};

// One "kind":"monitor" line (train.monitor_every): the machine's utilisation at a step, percent.
struct MonitorPoint {
    double step = kNaN, cpu = kNaN, mem = kNaN;
    std::vector<std::pair<std::string, double>> gpu;  // by the sample's GPU label ("0", "1", ...)
};

struct RunMetrics {
    std::vector<TrainPoint> train;
    std::vector<EvalPoint> eval;
    std::vector<MonitorPoint> monitor;
    bool torn_last_line = false;
    int64_t nonfinite_lines = 0;  // lines with NaN or Infinity, read as null
};

// A monitor sample's number; NaN when missing or of another type (system samples are extra: a
// sample of another shape never fails the report).
double sample_number(const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

// A numeric field; missing or null (how JSON writers spell NaN) is NaN, any other type an error.
Status read_number(const json& j, const char* key, const std::string& where, double& out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        out = kNaN;
        return Status::ok();
    }
    if (!it->is_number()) return data_loss("{}: \"{}\" is a {}, expected a number", where, key, it->type_name());
    out = it->get<double>();
    return Status::ok();
}

// Python's json module (and so many a logging script) writes NaN, Infinity and -Infinity, which
// JSON has no spelling for: `line` with each such token outside strings as null (missing, as
// strato writes a NaN), or "" when it has none. A diverged loss failed the whole report.
std::string nonfinite_as_null(std::string_view line) {
    std::string out;
    bool in_string = false, changed = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (in_string) {
            out += c;
            if (c == '\\' && i + 1 < line.size()) out += line[++i];
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        bool replaced = false;
        for (std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
            if (line.substr(i, token.size()) == token) {
                out += "null";
                i += token.size() - 1;
                replaced = changed = true;
                break;
            }
        }
        if (!replaced) out += c;
    }
    return changed ? out : std::string();
}

// Reads metrics.jsonl line by line (parse_line), keeping only the numbers the page needs.
class MetricsParser {
public:
    explicit MetricsParser(std::string path) : path_(std::move(path)) {}

    // One complete line (without its '\n'), the `line_no`-th of the file.
    Status parse_line(std::string_view line, int64_t line_no) {
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) return Status::ok();

        const std::string where = fmt::format("{}:{}", path_, line_no);
        json j = parse_object(line);
        if (!j.is_object()) {
            const std::string_view head = line.substr(0, 60);
            return data_loss("{}: not a JSON object: {}{}", where, json_text(std::string(head)),  // bytes shown escaped
                             line.size() > head.size() ? "..." : "");
        }
        return add(j, where);
    }

    // What follows the last '\n', the `line_no`-th line. A JSON object there is a whole line that
    // only lacks its newline (a log written by hand or by "\n".join(...): its last evaluation, a
    // one-line log's only one, was left out as torn): read as any line. Anything else is a line
    // being written, or cut by a crash, and is dropped as the trainer's own reader drops it.
    Status parse_tail(std::string_view line, int64_t line_no) {
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) return Status::ok();
        if (json j = parse_object(line); j.is_object()) return add(j, fmt::format("{}:{}", path_, line_no));
        m_.torn_last_line = true;
        return Status::ok();
    }
    RunMetrics take() { return std::move(m_); }

private:
    // `line` as JSON; a line with NaN or Infinity (Python's spelling) is read with those as null.
    json parse_object(std::string_view line) {
        json j = parse_json_bounded(line);
        if (j.is_discarded()) {
            if (const std::string spelled = nonfinite_as_null(line); !spelled.empty()) {
                j = parse_json_bounded(spelled);
                if (j.is_object()) ++m_.nonfinite_lines;
            }
        }
        return j;
    }

    // The numbers of one line's object that the page needs.
    Status add(const json& j, const std::string& where) {
        const auto kind = j.find("kind");
        if (kind == j.end() || !kind->is_string()) return Status::ok();
        if (*kind == "train") {
            TrainPoint p;
            STRATO_RETURN_IF_ERROR(read_number(j, "step", where, p.step));
            STRATO_RETURN_IF_ERROR(read_number(j, "epoch", where, p.epoch));
            STRATO_RETURN_IF_ERROR(read_number(j, "loss", where, p.loss));
            STRATO_RETURN_IF_ERROR(read_number(j, "acc", where, p.acc));
            STRATO_RETURN_IF_ERROR(read_number(j, "lr", where, p.lr));
            STRATO_RETURN_IF_ERROR(read_number(j, "samples_per_s", where, p.samples_per_s));
            m_.train.push_back(p);
        } else if (*kind == "eval") {
            EvalPoint p;
            STRATO_RETURN_IF_ERROR(read_number(j, "step", where, p.step));
            STRATO_RETURN_IF_ERROR(read_number(j, "epoch", where, p.epoch));
            STRATO_RETURN_IF_ERROR(read_number(j, "train_loss", where, p.train_loss));
            STRATO_RETURN_IF_ERROR(read_number(j, "train_acc", where, p.train_acc));
            STRATO_RETURN_IF_ERROR(read_number(j, "test_loss", where, p.test_loss));
            STRATO_RETURN_IF_ERROR(read_number(j, "test_acc", where, p.test_acc));
            STRATO_RETURN_IF_ERROR(read_number(j, "epoch_time_s", where, p.epoch_time_s));
            STRATO_RETURN_IF_ERROR(read_number(j, "eval_time_s", where, p.eval_time_s));
            if (auto it = j.find("partial"); it != j.end()) {
                if (!it->is_boolean()) return data_loss("{}: 'partial' must be true or false", where);
                p.partial = it->get<bool>();
            }
            m_.eval.push_back(p);
        } else if (*kind == "monitor") {
            MonitorPoint p;
            p.step = sample_number(j, "step");
            p.cpu = sample_number(j, "cpu_util");
            p.mem = sample_number(j, "mem_used_pct");
            if (auto it = j.find("gpu_util"); it != j.end() && it->is_object())
                for (const auto& [label, v] : it->items())
                    if (v.is_number()) p.gpu.emplace_back(label, v.get<double>());
            m_.monitor.push_back(std::move(p));
        }
        return Status::ok();
    }

    std::string path_;
    RunMetrics m_;
};

Result<RunMetrics> parse_metrics(std::string_view text, const std::string& path) {
    MetricsParser parser(path);
    size_t pos = 0;
    int64_t line_no = 0;
    while (pos < text.size()) {
        const size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) {
            STRATO_RETURN_IF_ERROR(parser.parse_tail(text.substr(pos), ++line_no));
            break;
        }
        STRATO_RETURN_IF_ERROR(parser.parse_line(text.substr(pos, nl - pos), ++line_no));
        pos = nl + 1;
    }
    return parser.take();
}

// No metrics line comes near this; a file with a longer one is not a metrics log (a binary file,
// one without line ends), and reading on would hold all of it.
constexpr size_t kMetricsLineMax = size_t{16} << 20;

// metrics.jsonl read a block at a time: memory follows the points kept, not the file (a long
// run's log of 1e6 lines took 400 MB for its 150 MB read whole). Other than a regular file (a
// FIFO) it is read whole, by fs::read_file, which does not hang on a pipe without a writer.
Result<RunMetrics> read_metrics_file(const stdfs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        if (err == ENOENT) return not_found("{} does not exist", path.string());
        return io_error("cannot open {}: {}", path.string(), std::strerror(err));
    }
    const auto closer = std::unique_ptr<const int, void (*)(const int*)>(&fd, [](const int* f) { ::close(*f); });
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path));
        return parse_metrics(text, path.string());
    }
    MetricsParser parser(path.string());
    std::vector<char> buf(size_t{1} << 20);
    std::string carry;  // the start of a line that the next block ends
    int64_t line_no = 0;
    auto too_long = [&] {
        return data_loss("{}:{}: a line longer than {} MiB, expected one JSON object per line (is it a metrics.jsonl?)",
                         path.string(), line_no + 1, kMetricsLineMax >> 20);
    };
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error("cannot read {}: {}", path.string(), std::strerror(errno));
        if (n == 0) break;
        const std::string_view block(buf.data(), static_cast<size_t>(n));
        size_t pos = 0;
        for (;;) {
            const size_t nl = block.find('\n', pos);
            const std::string_view piece = block.substr(pos, nl == std::string_view::npos ? block.npos : nl - pos);
            if (carry.size() + piece.size() > kMetricsLineMax) return too_long();
            if (nl == std::string_view::npos) {
                carry.append(piece);
                break;
            }
            ++line_no;
            if (carry.empty()) {
                STRATO_RETURN_IF_ERROR(parser.parse_line(piece, line_no));
            } else {
                carry.append(piece);
                STRATO_RETURN_IF_ERROR(parser.parse_line(carry, line_no));
                carry.clear();
            }
            pos = nl + 1;
        }
    }
    if (!carry.empty()) STRATO_RETURN_IF_ERROR(parser.parse_tail(carry, line_no + 1));
    return parser.take();
}

// An optional JSON file: nullopt-like null when absent; a note when present but unreadable.
json read_optional_json(const stdfs::path& path, std::vector<std::string>& notes) {
    std::error_code ec;
    if (!stdfs::exists(path, ec)) return nullptr;
    auto text = fs::read_file(path);
    if (!text) {
        notes.push_back(text.status().message());
        return nullptr;
    }
    json j = parse_json_bounded(*text);
    if (j.is_discarded() || !j.is_object()) {
        notes.push_back(fmt::format("{} is not a valid JSON object; its contents are left out", path.string()));
        return nullptr;
    }
    return j;
}

const json* find_pointer(const json& j, const char* pointer) {
    try {
        return &j.at(json::json_pointer(pointer));
    } catch (const json::exception&) {
        return nullptr;
    }
}

// ---- value formatting ----

std::string fmt_percent(double v) { return std::isfinite(100 * v) ? format_fixed(100 * v, 2) + "%" : "–"; }
// (a loss of 3e-6 is no "0.0000")
std::string fmt_fixed(double v, int decimals) {
    if (v != 0 && std::abs(v) < 0.5 * std::pow(10.0, -decimals)) return fmt::format("{:.3g}", v);
    return format_fixed(v, decimals);
}
std::string fmt_general(double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : "–"; }

std::string fmt_count(double v) {
    if (!std::isfinite(v)) return "–";
    if (std::abs(v) >= 1e15) return fmt::format("{:.3g}", v);  // (1e300 printed 300 digits with commas)
    std::string digits = fmt::format("{:.0f}", std::abs(v));
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

// An epoch count: whole as a count, a part of one (a run stopped by train.max_steps) with two decimals.
std::string fmt_epochs(double v) { return v == std::floor(v) ? fmt_count(v) : fmt_fixed(v, 2); }

std::string fmt_duration(double s) {
    if (!std::isfinite(s)) return "–";
    if (s < 60) return fmt::format("{:.1f} s", s);
    if (s >= 1e9) return fmt::format("{:.3g} s", s);  // no run takes 30 years: a damaged file, shown as it is
    const auto total = static_cast<int64_t>(std::llround(s));
    const int64_t h = total / 3600, min = total / 60 % 60, sec = total % 60;
    if (h > 0) return fmt::format("{} h {:02} min {:02} s", h, min, sec);
    return fmt::format("{} min {:02} s", min, sec);
}

std::string fmt_json_value(const json& v) {
    if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
    if (v.is_number_integer()) return fmt_count(v.get<double>());
    if (v.is_number()) return fmt_general(v.get<double>());
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) return "–";
    return json_text(v);
}

double json_number(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && it->is_number() ? it->get<double>() : kNaN;
}

double median(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    if (v.empty()) return kNaN;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

using Rows = std::vector<std::pair<std::string, std::string>>;  // label, text (not yet escaped)

std::string kv_table(const std::string& heading, const Rows& rows) {
    std::string out = fmt::format("<div class=\"kv\"><h3>{}</h3><table>\n", html_escape(heading));
    if (rows.empty()) out += "<tr><td class=\"muted\">nothing recorded</td></tr>\n";
    for (const auto& [k, v] : rows) {
        out += fmt::format("<tr><th scope=\"row\">{}</th><td>{}</td></tr>\n", html_escape(k), html_escape(v));
    }
    return out + "</table></div>\n";
}

// ---- page sections ----

Rows result_rows(const json& final_metrics, const RunMetrics& m) {
    Rows rows;
    if (final_metrics.is_object()) {
        // Known keys first, in reading order, then anything else the trainer recorded.
        static const std::pair<const char*, const char*> kKnown[] = {
            {"test_acc", "test accuracy"}, {"best_test_acc", "best test accuracy"},
            {"test_loss", "test loss"},    {"test_samples", "test samples"},
            {"epochs", "epochs"},          {"steps", "steps"},
            {"wall_time_s", "wall time"},  {"precision", "precision"}};
        for (const auto& [key, label] : kKnown) {
            auto it = final_metrics.find(key);
            if (it == final_metrics.end()) continue;
            std::string text;
            const std::string_view k = key;
            if (it->is_number() && (k == "test_acc" || k == "best_test_acc")) {
                text = fmt_percent(it->get<double>());
            } else if (it->is_number() && k == "test_loss") {
                text = fmt_fixed(it->get<double>(), 4);
            } else if (it->is_number() && k == "wall_time_s") {
                text = fmt_duration(it->get<double>());
            } else {
                text = fmt_json_value(*it);
            }
            rows.emplace_back(label, text);
        }
        for (const auto& [key, value] : final_metrics.items()) {
            const bool known =
                std::any_of(std::begin(kKnown), std::end(kKnown), [&](const auto& kv) { return key == kv.first; });
            if (!known) rows.emplace_back(key, fmt_json_value(value));
        }
        return rows;
    }
    if (m.eval.empty()) return rows;
    const EvalPoint& last = m.eval.back();
    double best = kNaN;
    for (const auto& e : m.eval) {
        if (std::isfinite(e.test_acc) && !(best >= e.test_acc)) best = e.test_acc;
    }
    rows = {{"test accuracy", fmt_percent(last.test_acc)},
            {"best test accuracy", fmt_percent(best)},
            {"test loss", fmt_fixed(last.test_loss, 4)},
            {"epochs", fmt_epochs(last.epoch)},
            {"steps", fmt_count(last.step)}};
    return rows;
}

Rows model_rows(const json& manifest) {
    Rows rows;
    if (!manifest.is_object()) return rows;
    if (const json* arch = find_pointer(manifest, "/model/arch"))
        rows.emplace_back("architecture", fmt_json_value(*arch));
    if (const json* model = find_pointer(manifest, "/model"); model && model->is_object()) {
        std::string hp;
        for (const auto& [key, value] : model->items()) {
            if (key == "arch") continue;
            hp += fmt::format("{}{} = {}", hp.empty() ? "" : ", ", key,
                              value.is_string() ? value.get<std::string>() : json_text(value));
        }
        if (!hp.empty()) rows.emplace_back("hyper-parameters", hp);
    }
    if (const json* p = find_pointer(manifest, "/parameters")) rows.emplace_back("parameters", fmt_json_value(*p));
    if (const json* shape = find_pointer(manifest, "/inputs/0/shape"); shape && shape->is_array()) {
        std::string text = "[";
        for (size_t i = 0; i < shape->size(); ++i) text += (i ? ", " : "") + (*shape)[i].dump();
        rows.emplace_back("input shape", text + "]");
    }
    if (const json* n = find_pointer(manifest, "/num_classes")) rows.emplace_back("classes", fmt_json_value(*n));
    return rows;
}

Rows training_rows(const RunMetrics& m) {
    Rows rows;
    std::vector<double> sps, epoch_times;
    for (const auto& t : m.train) sps.push_back(t.samples_per_s);
    for (const auto& e : m.eval)
        if (!e.partial) epoch_times.push_back(e.epoch_time_s);
    if (!m.train.empty()) {
        rows.emplace_back("last logged step", fmt_count(m.train.back().step));
        rows.emplace_back("final train loss", fmt_fixed(m.train.back().loss, 4));
        rows.emplace_back("final learning rate", fmt_general(m.train.back().lr));
        rows.emplace_back("throughput (median)", fmt::format("{} samples/s", fmt_count(median(sps))));
    }
    if (!m.eval.empty()) rows.emplace_back("epoch time (median)", fmt_duration(median(epoch_times)));
    rows.emplace_back("logged lines", fmt::format("{} train, {} eval", m.train.size(), m.eval.size()));
    return rows;
}

std::string charts_html(const RunMetrics& m) {
    // Each chart's series are made just before it is drawn and freed after it: a long run's
    // points were held eight times over at once.
    auto train = [&](const char* name, const double TrainPoint::*x, double TrainPoint::*y, double scale) {
        Series s{name, {}, {}};
        s.x.reserve(m.train.size());
        s.y.reserve(m.train.size());
        for (const auto& t : m.train) s.x.push_back(t.*x), s.y.push_back(scale * (t.*y));
        return s;
    };
    // Loss and accuracy go by epoch; a log with steps but no epochs (another program's: step and
    // loss only) by step, which all its lines have (by epoch both charts said "no data").
    const auto steps_only = [](const auto& p) { return std::isfinite(p.step) && !std::isfinite(p.epoch); };
    const bool by_epoch = std::none_of(m.train.begin(), m.train.end(), steps_only) &&
                          std::none_of(m.eval.begin(), m.eval.end(), steps_only);
    const double TrainPoint::*train_x = by_epoch ? &TrainPoint::epoch : &TrainPoint::step;
    const double EvalPoint::*eval_x = by_epoch ? &EvalPoint::epoch : &EvalPoint::step;
    const char* x_label = by_epoch ? "epoch" : "step";
    auto eval = [&](const char* name, double EvalPoint::*y, double scale) {
        Series s{name, {}, {}};
        s.x.reserve(m.eval.size());
        s.y.reserve(m.eval.size());
        for (const auto& e : m.eval) s.x.push_back(e.*eval_x), s.y.push_back(scale * (e.*y));
        return s;
    };
    auto loss = [&] {
        std::vector<Series> out;
        if (!m.train.empty()) out.push_back(train("train (per step)", train_x, &TrainPoint::loss, 1));
        if (!m.eval.empty()) {
            out.push_back(eval("train (epoch)", &EvalPoint::train_loss, 1));
            out.push_back(eval("test (epoch)", &EvalPoint::test_loss, 1));
        }
        return out;
    };
    auto acc = [&] {
        std::vector<Series> out;
        if (!m.train.empty()) out.push_back(train("train (per step)", train_x, &TrainPoint::acc, 100));
        if (!m.eval.empty()) {
            out.push_back(eval("train (epoch)", &EvalPoint::train_acc, 100));
            out.push_back(eval("test (epoch)", &EvalPoint::test_acc, 100));
        }
        return out;
    };
    // A log scale only pays when the loss falls by more than an order of magnitude.
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    auto range = [&](double v) {
        if (!std::isfinite(v)) return;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    };
    for (const auto& t : m.train) range(t.loss);
    for (const auto& e : m.eval) range(e.train_loss), range(e.test_loss);
    const bool loss_log = lo > 0 && hi / lo >= 20;

    const int w = 560, h = 300;
    std::string out = "<div class=\"charts\">\n";
    auto figure = [&](const std::vector<Series>& s, ChartOptions o) {
        o.width = w;
        o.height = h;
        out += "<figure>" + line_chart_svg(s, o) + "</figure>\n";
    };
    figure(loss(),
           {.title = loss_log ? "Loss (log scale)" : "Loss", .x_label = x_label, .y_label = "loss", .log_y = loss_log});
    figure(acc(), {.title = "Accuracy", .x_label = x_label, .y_label = "accuracy (%)"});
    // (moved in: a braced list would copy the series)
    auto by_step = [&](const char* name, double TrainPoint::*y) {
        std::vector<Series> one;
        if (!m.train.empty()) one.push_back(train(name, &TrainPoint::step, y, 1));
        return one;
    };
    figure(by_step("learning rate", &TrainPoint::lr), {.title = "Learning rate", .x_label = "step", .y_label = "learning rate"});
    figure(by_step("samples/s", &TrainPoint::samples_per_s), {.title = "Throughput", .x_label = "step", .y_label = "samples/s"});
    if (!m.monitor.empty()) {
        // CPU, memory and each GPU (in the order first seen), each point at its own step.
        std::vector<Series> sys{{"CPU", {}, {}}, {"memory", {}, {}}};
        std::map<std::string, size_t> gpu_series;
        for (const auto& p : m.monitor) {
            sys[0].x.push_back(p.step), sys[0].y.push_back(p.cpu);
            sys[1].x.push_back(p.step), sys[1].y.push_back(p.mem);
            for (const auto& [label, v] : p.gpu) {
                auto [it, added] = gpu_series.emplace(label, sys.size());
                if (added) sys.push_back({"GPU " + label, {}, {}});
                sys[it->second].x.push_back(p.step), sys[it->second].y.push_back(v);
            }
        }
        figure(sys, {.title = "System utilization", .x_label = "step", .y_label = "percent"});
    }
    return out + "</div>\n";
}

std::string epoch_table(const RunMetrics& m) {
    if (m.eval.empty()) return "<p class=\"muted\">No evaluation recorded yet.</p>\n";
    // The best finite accuracy (an epoch without one, NaN, never wins); none: no row is marked.
    size_t best = m.eval.size();
    for (size_t i = 0; i < m.eval.size(); ++i)
        if (std::isfinite(m.eval[i].test_acc) && (best == m.eval.size() || m.eval[i].test_acc > m.eval[best].test_acc))
            best = i;
    std::string out =
        "<div class=\"scroll\"><table class=\"epochs\">\n<thead><tr><th class=\"num\">epoch</th><th "
        "class=\"num\">step</th><th class=\"num\">train loss</th><th class=\"num\">train acc</th><th "
        "class=\"num\">test loss</th><th class=\"num\">test acc</th><th class=\"num\">epoch time</th><th "
        "class=\"num\">eval time</th></tr></thead>\n<tbody>\n";
    // A run of thousands of evaluations made a page of megabytes: the first and last kEdgeRows and
    // the best are shown, each gap as one row saying how many it holds.
    constexpr size_t kEdgeRows = 100;
    const size_t n = m.eval.size();
    auto shown = [&](size_t i) { return i < kEdgeRows || i + kEdgeRows >= n || i == best; };
    for (size_t i = 0; i < n; ++i) {
        if (!shown(i)) {
            size_t gap = 0;
            while (i + gap < n && !shown(i + gap)) ++gap;
            out += fmt::format("<tr class=\"gap\"><td colspan=\"8\" class=\"muted\">… {} evaluations not shown "
                               "(metrics.jsonl has them all) …</td></tr>\n",
                               gap);
            i += gap - 1;
            continue;
        }
        const auto& e = m.eval[i];
        out += fmt::format(
            "<tr{}><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td "
            "class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td "
            "class=\"num\">{}</td></tr>\n",
            i == best && m.eval.size() > 1 ? " class=\"best\"" : "",
            fmt_epochs(e.epoch), fmt_count(e.step),
            fmt_fixed(e.train_loss, 4), fmt_percent(e.train_acc), fmt_fixed(e.test_loss, 4), fmt_percent(e.test_acc),
            e.partial ? fmt_duration(e.epoch_time_s) + " (part)" : fmt_duration(e.epoch_time_s), fmt_duration(e.eval_time_s));
    }
    return out + "</tbody></table></div>\n";
}

std::string run_name(const std::string& run_dir) {
    std::error_code ec;
    stdfs::path p = stdfs::absolute(run_dir, ec);
    if (ec) p = run_dir;
    p = p.lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    std::string name = p.filename().string();
    return name.empty() ? "run" : name;
}

// Why the directory `dir`, which has no metrics.jsonl, is no run, and what to give instead: a
// study, a model package or a directory of runs each said only "is it a run directory?".
std::string not_a_run(const stdfs::path& dir) {
    std::error_code ec;
    const std::string d = dir.string();
    if (stdfs::exists(dir / "study.db", ec))
        return fmt::format("{} is a tuning study, not a run: `strato tune report STUDY.toml` makes its report, and "
                           "each trial is a run in {}",
                           d, (dir / "trials").string());
    if (stdfs::exists(dir / "strato-model.json", ec)) {
        stdfs::path package = dir.lexically_normal();
        if (package.filename().empty()) package = package.parent_path();  // (runs/x/model/)
        const stdfs::path parent = package.parent_path().empty() ? stdfs::path(".") : package.parent_path();
        if (stdfs::exists(parent / "metrics.jsonl", ec))
            return fmt::format("{} is a model package, not a run; the run it came from is {}", d, parent.string());
        return fmt::format("{} is a model package, not a run (no metrics.jsonl): a run directory holds it in model/",
                           d);
    }
    // A directory of runs (runs/): name a few of them.
    std::vector<std::string> runs;
    for (auto it = stdfs::directory_iterator(dir, ec); !ec && it != stdfs::directory_iterator(); it.increment(ec)) {
        std::error_code ec2;
        if (it->is_directory(ec2) && stdfs::exists(it->path() / "metrics.jsonl", ec2) &&
            !stdfs::is_directory(it->path() / "metrics.jsonl", ec2))
            runs.push_back(it->path().string());
    }
    if (!runs.empty()) {
        std::sort(runs.begin(), runs.end());
        const size_t shown = std::min<size_t>(runs.size(), 3);
        return fmt::format("{} has no metrics.jsonl: it holds runs, give one of them: {}{}", d,
                           fmt::join(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                           runs.size() > shown ? fmt::format(" (and {} more)", runs.size() - shown) : "");
    }
    return fmt::format("{} has no metrics.jsonl (is it a run directory?)", d);
}

Result<RunMetrics> read_run_metrics(const stdfs::path& dir) {
    std::error_code ec;
    if (!stdfs::is_directory(dir, ec) && dir.filename() == "metrics.jsonl" && stdfs::exists(dir, ec))
        return invalid_argument("{} is the metrics log of a run: give the run's directory, {}", dir.string(),
                                dir.parent_path().empty() ? "." : dir.parent_path().string());
    if (!stdfs::is_directory(dir, ec))
        return stdfs::exists(dir, ec)
                   ? invalid_argument("{} is a file: expected a run directory (runs/NAME) or a .json of `strato loadtest` "
                                      "or `strato autoscale simulate`",
                                      dir.string())
                   : not_found("run directory {} does not exist", dir.string());
    const stdfs::path metrics_path = dir / "metrics.jsonl";
    if (!stdfs::exists(metrics_path, ec)) return not_found("{}", not_a_run(dir));
    return read_metrics_file(metrics_path);
}

}  // namespace

Result<RunSpeed> read_run_speed(const std::string& run_dir) {
    STRATO_ASSIGN_OR_RETURN(RunMetrics m, read_run_metrics(run_dir));
    RunSpeed s;
    std::vector<double> sps, epoch_times;
    for (const auto& t : m.train) sps.push_back(t.samples_per_s);
    for (const auto& e : m.eval)
        if (!e.partial) epoch_times.push_back(e.epoch_time_s);
    s.samples_per_s = median(sps);
    s.epoch_time_s = median(epoch_times);
    if (!std::isfinite(s.samples_per_s) && !std::isfinite(s.epoch_time_s))
        return not_found("{}/metrics.jsonl has no train or eval line with a speed (has the run trained?)", run_dir);
    double step = kNaN, epoch = kNaN;
    if (!m.train.empty()) step = m.train.back().step, epoch = m.train.back().epoch;
    if (!m.eval.empty() && (!(epoch > 0) || m.eval.back().step > step)) step = m.eval.back().step, epoch = m.eval.back().epoch;
    if (epoch > 0 && std::isfinite(step)) s.steps_per_epoch = step / epoch;
    return s;
}

Result<std::string> render_run_report(const std::string& run_dir) {
    std::error_code ec;
    const stdfs::path dir(run_dir);
    STRATO_ASSIGN_OR_RETURN(RunMetrics m, read_run_metrics(dir));

    std::vector<std::string> notes;
    if (m.torn_last_line)
        notes.push_back("The last line of metrics.jsonl is incomplete (the run may still be going); it is left out.");
    if (m.nonfinite_lines > 0)
        notes.push_back(fmt::format("{} line(s) of metrics.jsonl hold NaN or Infinity, which JSON has no spelling for "
                                    "(Python's json writes them); those values are shown as missing.",
                                    m.nonfinite_lines));
    const json final_metrics = read_optional_json(dir / "model" / "metrics.json", notes);
    const json manifest = read_optional_json(dir / "model" / "strato-model.json", notes);
    if (!final_metrics.is_object() && !m.eval.empty()) {
        notes.push_back("model/metrics.json not found: results are from the last evaluation in metrics.jsonl.");
    }
    std::string config_text;
    bool have_config = false;
    if (stdfs::exists(dir / "config.toml", ec)) {
        auto text = fs::read_file(dir / "config.toml");
        if (text) {
            config_text = std::move(*text);
            have_config = true;
        } else {
            notes.push_back(text.status().message());
        }
    }

    const std::string name = run_name(run_dir);
    std::string html;
    html.reserve(64 * 1024);
    html += page_head(name + " · strato run report");
    html += fmt::format("<header><h1>{}</h1><p class=\"sub\">strato training run · {}</p></header>\n",
                        html_escape(name), html_escape(run_dir));

    // Headline cards: final accuracy and loss, epochs, wall time.
    double acc = json_number(final_metrics.is_object() ? final_metrics : json::object(), "test_acc");
    double loss = json_number(final_metrics.is_object() ? final_metrics : json::object(), "test_loss");
    double epochs = json_number(final_metrics.is_object() ? final_metrics : json::object(), "epochs");
    const double wall = json_number(final_metrics.is_object() ? final_metrics : json::object(), "wall_time_s");
    if (!final_metrics.is_object() && !m.eval.empty()) {
        acc = m.eval.back().test_acc;
        loss = m.eval.back().test_loss;
        epochs = m.eval.back().epoch;
    }
    html += "<div class=\"cards\">\n";
    auto card = [&](const char* label, const std::string& value) {
        html += fmt::format("<div class=\"card\"><div class=\"label\">{}</div><div class=\"value\">{}</div></div>\n",
                            label, html_escape(value));
    };
    card("test accuracy", fmt_percent(acc));
    card("test loss", fmt_fixed(loss, 4));
    card("epochs", fmt_epochs(epochs));
    card("wall time", fmt_duration(wall));
    html += "</div>\n";
    if (!notes.empty()) {
        html += "<div class=\"notes\">\n";
        for (const auto& n : notes) html += "<p>" + html_escape(n) + "</p>\n";
        html += "</div>\n";
    }

    html += "<section><h2>Summary</h2><div class=\"summary\">\n";
    html += kv_table("Results", result_rows(final_metrics, m));
    html += kv_table("Model", model_rows(manifest));
    html += kv_table("Training", training_rows(m));
    html += "</div></section>\n";
    html += "<section><h2>Training curves</h2>\n" + charts_html(m) + "</section>\n";
    html += "<section><h2>Per-epoch results</h2>\n" + epoch_table(m) + "</section>\n";
    // A load test of the served model (the quick start writes RUN_DIR/loadtest.json).
    if (stdfs::exists(dir / "loadtest.json", ec)) {
        auto lt = fs::read_file(dir / "loadtest.json");
        json j = lt ? parse_json_bounded(*lt) : json();
        Result<std::string> section = invalid_argument("it is not a JSON object");
        if (!lt) section = lt.status();
        try {
            if (j.is_object()) section = loadtest_section_html(j);
        } catch (const json::exception& e) {  // a last resort: the run's report still renders
            section = invalid_argument("{}", e.what());
        }
        html += section ? *section
                        : fmt::format("<section><h2>Load test</h2><p class=\"muted\">loadtest.json could not be read: "
                                      "{}</p></section>\n",
                                      html_escape(section.status().message()));
    }
    html += "<section><h2>Configuration</h2>\n";
    html += have_config ? "<pre>" + html_escape(config_text) + "</pre>\n"
                        : "<p class=\"muted\">config.toml not found in the run directory.</p>\n";
    html += "</section>\n";
    html += page_foot();
    return html;
}

Status write_run_report(const std::string& run_dir, const std::string& out_path) {
    STRATO_ASSIGN_OR_RETURN(std::string html, render_run_report(run_dir));
    return fs::atomic_write(out_path, html);
}

}  // namespace strato::report
