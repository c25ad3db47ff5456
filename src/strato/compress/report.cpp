#include "strato/compress/report.h"

#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include "strato/core/check.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/models/package.h"
#include "strato/models/torch_compat.h"
#include "strato/train/trainer.h"

namespace strato::compress {
namespace stdfs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kForm = "LABEL=DIR, LABEL=DIR@bf16, LABEL=DIR@eager or LABEL=DIR@bf16-eager, e.g. teacher=runs/fashion_mnist_cnn/model";

/// The median (mean of the two middle values for an even count) and the nearest-rank p90.
std::pair<double, double> median_p90(std::vector<double> v) {
    STRATO_ASSERT(!v.empty());
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));
    return {median, v[std::max<size_t>(rank, 1) - 1]};
}

/// Times one row's forward pass as the server runs it (see report.h), a slice at a time.
class ForwardTimer {
public:
    ForwardTimer(models::LoadedPackage pkg, bool bf16, bool eager, int64_t batch) : pkg_(std::move(pkg)) {
        run_ = models::inference_net(pkg_, /*fuse=*/!eager, bf16);  // as serve's PackageModel
        const bool channels_last = run_.channels_last;
        // Normalised images look like standard normal noise to the timer; values do not change the time.
        auto input = [&](int64_t b) {
            const auto& s = pkg_.info.input_shape;
            auto x = torch::randn({b, s.channels, s.height, s.width});
            return channels_last ? models::channels_last_copy(x) : x;  // as the server builds its batch
        };
        one_ = input(1);
        batch_ = input(batch);
    }
    /// `n` batch-1 passes (latencies in ms) and `m` batch passes (images/s); untimed when `keep` is
    /// false. Stops early (some passes not run) once a stop signal arrived.
    void run(int64_t n, int64_t m, bool keep) {
        c10::InferenceMode inference;
        compat::AutocastGuard autocast(c10::DeviceType::CPU, at::kBFloat16, run_.bf16_autocast);
        for (int64_t i = 0; i < n && !signals::stop_requested(); ++i) {
            const double s = seconds(one_);
            if (keep) ms_.push_back(1e3 * s);
        }
        for (int64_t i = 0; i < m && !signals::stop_requested(); ++i) {
            const double s = seconds(batch_);
            if (keep) rates_.push_back(static_cast<double>(batch_.size(0)) / std::max(1e-12, s));
        }
    }
    const std::vector<double>& latencies_ms() const { return ms_; }
    const std::vector<double>& rates() const { return rates_; }

private:
    double seconds(const torch::Tensor& x) {
        const auto t0 = Clock::now();
        auto y = run_.net->forward(x);
        (void)y;
        return std::chrono::duration<double>(Clock::now() - t0).count();
    }
    models::LoadedPackage pkg_;
    models::InferenceNet run_;
    torch::Tensor one_, batch_;
    std::vector<double> ms_, rates_;
};

/// Passes `total` spread over `rounds`: round r's share (the first rounds take the remainder).
int64_t share(int64_t total, int64_t rounds, int64_t r) { return total / rounds + (r < total % rounds ? 1 : 0); }

/// Times every row, interleaved round by round, and fills their latency and throughput.
/// Returns the number of rounds, or kCancelled (`interrupted` says what was measured) after a stop signal.
Result<int64_t> time_rows(std::vector<ForwardTimer>& timers, std::vector<VariantReport>& rows,
                          const CompareOptions& o, const std::function<Status(const std::string&)>& interrupted) {
    for (auto& t : timers) t.run(o.warmup_runs, std::max<int64_t>(2, o.warmup_runs / 10), /*keep=*/false);
    STRATO_RETURN_IF_ERROR(interrupted("while warming up for the timing"));
    const int64_t rounds = std::max<int64_t>(1, std::min(o.rounds, std::min(o.latency_runs, o.throughput_runs)));
    log::info("timing {} row{} in {} interleaved round{}", rows.size(), rows.size() == 1 ? "" : "s", rounds,
              rounds == 1 ? "" : "s");
    for (int64_t r = 0; r < rounds; ++r) {
        for (auto& t : timers) t.run(share(o.latency_runs, rounds, r), share(o.throughput_runs, rounds, r), true);
        // A partial timing would print medians of fewer passes than the table says (and rows timed
        // unequally): none is reported.
        STRATO_RETURN_IF_ERROR(interrupted(fmt::format("while timing (round {} of {})", r + 1, rounds)));
    }
    for (size_t i = 0; i < timers.size(); ++i) {
        std::tie(rows[i].latency_ms_p50, rows[i].latency_ms_p90) = median_p90(timers[i].latencies_ms());
        rows[i].throughput = median_p90(timers[i].rates()).first;
    }
    return rounds;
}

/// Parameters, and those not exactly zero (int8 parameters by their integer values).
std::pair<int64_t, int64_t> count_parameters(const torch::nn::Module& m) {
    int64_t all = 0, nonzero = 0;
    for (const auto& p : m.parameters()) {
        all += p.numel();
        const auto v = p.is_quantized() ? p.int_repr() : p;
        nonzero += v.count_nonzero().item<int64_t>();
    }
    return {all, nonzero};
}

/// Everything but the timing; the loaded package goes to `timers`.
Result<VariantReport> measure(const Variant& v, const CompareOptions& o, std::vector<ForwardTimer>& timers) {
    VariantReport r;
    r.variant = v;
    STRATO_ASSIGN_OR_RETURN(models::LoadedPackage pkg, models::load_package(v.dir));
    r.arch = pkg.info.model.arch;
    r.quantized = pkg.info.quantized();
    if (r.quantized && (v.bf16 || v.eager))
        return invalid_argument(
            "@{0} applies to float packages; this one is INT8\nhint: drop @{0} for an INT8 package",
            v.bf16 ? "bf16" : "eager");
    if (pkg.info.metrics.is_object() && pkg.info.metrics.contains("compression"))
        r.compression = pkg.info.metrics["compression"];

    // Accuracy exactly as `strato eval` computes it (a stop signal ends it between batches).
    STRATO_ASSIGN_OR_RETURN(train::PackageEval ev, train::evaluate_package(v.dir, o.data, v.bf16, !v.eager, [] {
                                return signals::stop_requested();
                            }));
    r.accuracy = ev.result.accuracy;
    r.loss = ev.result.loss;
    r.samples = ev.result.count;

    STRATO_ASSIGN_OR_RETURN(std::tie(r.size_bytes, r.files), directory_size(v.dir));
    std::tie(r.parameters, r.nonzero_parameters) = count_parameters(*pkg.net);

    timers.emplace_back(std::move(pkg), v.bf16, v.eager, o.throughput_batch);
    return r;
}

std::string thousands(int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return n < 0 ? "-" + out : out;
}

double megabytes(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

std::string precision(const VariantReport& r) {
    if (r.quantized) return "int8";
    return fmt::format("{}{}", r.variant.bf16 ? "bf16" : "fp32", r.variant.eager ? " eager" : "");
}

std::string delta(const CompareReport& rep, size_t i) {
    return i == 0 ? std::string("—") : fmt::format("{:+.2f}", rep.rows[i].accuracy_delta_pt);
}

std::string measured_how(const CompareReport& r) {
    return fmt::format(
        "accuracy on the {}; latency: median and p90 of {} forward passes at batch 1; throughput: median "
        "of {} passes at batch {}; the rows timed in turn over {} round{}; {} intra-op thread{}, CPU, InferenceMode, "
        "FP32, bf16 and INT8 rows through their inference graphs on oneDNN primitives (BatchNorm folded, ReLU and residual adds "
        "fused) as the server runs them, eager rows through the eager network (under bf16 autocast for bf16); size: every "
        "file of the package (MB = 10^6 bytes); ratios against the first row",
        r.dataset, r.latency_runs, r.throughput_runs, r.throughput_batch, r.rounds, r.rounds == 1 ? "" : "s",
        r.threads, r.threads == 1 ? "" : "s");
}

}  // namespace

Result<Variant> parse_variant(const std::string& spec) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos) return invalid_argument("variant '{}': no '=' (expected {})", spec, kForm);
    Variant v;
    v.label = spec.substr(0, eq);
    std::string rest = spec.substr(eq + 1);
    if (v.label.empty())
        return invalid_argument("variant '{}': the label before '=' is empty (expected {})", spec, kForm);
    const auto at = rest.rfind('@');
    if (at != std::string::npos && rest.find('/', at) == std::string::npos) {
        const std::string p = rest.substr(at + 1);
        if (p == "bf16" || p == "bf16-eager") {
            v.bf16 = true;
            v.eager = p == "bf16-eager";
        } else if (p == "eager") {
            v.eager = true;
        } else if (p != "fp32") {
            return invalid_argument("variant '{}': unknown precision '@{}' (expected @bf16, @bf16-eager, @eager or @fp32)", spec, p);
        }
        rest.resize(at);
    }
    if (rest.empty())
        return invalid_argument("variant '{}': the package directory after '=' is empty (expected {})", spec, kForm);
    v.dir = rest;
    return v;
}

Result<std::pair<int64_t, int64_t>> directory_size(const std::string& dir) {
    std::error_code ec;
    int64_t bytes = 0, files = 0;
    for (stdfs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        const auto n = it->file_size(ec);
        if (ec) break;
        bytes += static_cast<int64_t>(n);
        ++files;
    }
    if (ec) return io_error("{}: cannot list: {}", dir, ec.message());
    return std::pair{bytes, files};
}

Result<CompareReport> compare(const std::vector<Variant>& variants, const CompareOptions& opts) {
    if (variants.empty()) return invalid_argument("no variants to compare\nhint: --model {} (repeatable)", kForm);
    std::set<std::string> labels;
    for (const auto& v : variants) {
        if (!labels.insert(v.label).second)
            return invalid_argument("variant label '{}' is given twice; labels name the rows, so each must be unique",
                                    v.label);
    }
    if (opts.latency_runs < 1 || opts.throughput_runs < 1 || opts.throughput_batch < 1 || opts.warmup_runs < 0 ||
        opts.rounds < 1)
        return invalid_argument(
            "runs, rounds and batch sizes must be positive (latency runs {}, throughput runs {}, batch {}, rounds {})",
            opts.latency_runs, opts.throughput_runs, opts.throughput_batch, opts.rounds);
    CompareReport out;
    out.threads = train::configure_threads(opts.threads);
    out.latency_runs = opts.latency_runs;
    out.throughput_runs = opts.throughput_runs;
    out.throughput_batch = opts.throughput_batch;
    // Ctrl-C (SIGINT) or SIGTERM, once signals::install_stop_handlers() ran: kCancelled, naming
    // where it stopped and the accuracies measured so far (no table: the timing is incomplete).
    auto interrupted = [&](const std::string& where) -> Status {
        if (!signals::stop_requested()) return Status::ok();
        std::vector<std::string> done;
        for (const auto& r : out.rows)
            done.push_back(fmt::format("{} {:.2f}% ({} samples)", r.variant.label, 100 * r.accuracy, r.samples));
        return signals::stopped(fmt::format(
            "{}; no table printed, nothing written; accuracy measured so far: {}", where,
            done.empty() ? std::string("none") : fmt::format("{}", fmt::join(done, ", "))));
    };
    try {
        std::vector<ForwardTimer> timers;
        for (size_t i = 0; i < variants.size(); ++i) {
            const auto& v = variants[i];
            log::info("measuring {} ({}{}{})", v.label, v.dir, v.bf16 ? ", bf16" : "", v.eager ? ", eager" : "");
            const std::string where = fmt::format("while measuring row {} of {} ({})", i + 1, variants.size(), v.label);
            STRATO_RETURN_IF_ERROR(interrupted(where));
            auto r = measure(v, opts, timers);
            STRATO_RETURN_IF_ERROR(interrupted(where));
            if (!r) return r.status().with_context(fmt::format("{} ({})", v.label, v.dir));
            out.rows.push_back(std::move(r).value());
        }
        STRATO_ASSIGN_OR_RETURN(out.rounds, time_rows(timers, out.rows, opts, interrupted));
    } catch (const c10::Error& e) {
        return internal_error("libtorch: {}", models::torch_error_message(e));
    }
    out.dataset = fmt::format("{} test split ({} samples)", opts.data.dataset, out.rows.front().samples);
    const VariantReport& base = out.rows.front();
    for (auto& r : out.rows) {
        r.accuracy_delta_pt = 100 * (r.accuracy - base.accuracy);
        r.size_ratio = r.size_bytes > 0 ? static_cast<double>(base.size_bytes) / static_cast<double>(r.size_bytes) : 0;
        r.latency_speedup = r.latency_ms_p50 > 0 ? base.latency_ms_p50 / r.latency_ms_p50 : 0;
        r.throughput_speedup = base.throughput > 0 ? r.throughput / base.throughput : 0;
    }
    return out;
}

json to_json(const CompareReport& rep) {
    json rows = json::array();
    for (const auto& r : rep.rows) {
        rows.push_back({{"label", r.variant.label},
                        {"dir", r.variant.dir},
                        {"precision", precision(r)},
                        {"arch", r.arch},
                        {"quantized", r.quantized},
                        {"compression", r.compression},
                        {"accuracy", r.accuracy},
                        {"loss", r.loss},
                        {"samples", r.samples},
                        {"size_bytes", r.size_bytes},
                        {"size_mb", megabytes(r.size_bytes)},
                        {"files", r.files},
                        {"parameters", r.parameters},
                        {"nonzero_parameters", r.nonzero_parameters},
                        {"latency_ms_p50", r.latency_ms_p50},
                        {"latency_ms_p90", r.latency_ms_p90},
                        {"throughput", r.throughput},
                        {"accuracy_delta_pt", r.accuracy_delta_pt},
                        {"size_ratio", r.size_ratio},
                        {"latency_speedup", r.latency_speedup},
                        {"throughput_speedup", r.throughput_speedup}});
    }
    return {{"rows", rows},
            {"threads", rep.threads},
            {"latency_runs", rep.latency_runs},
            {"throughput_runs", rep.throughput_runs},
            {"throughput_batch", rep.throughput_batch},
            {"rounds", rep.rounds},
            {"dataset", rep.dataset}};
}

std::string format_table(const CompareReport& rep) {
    size_t w = 5, pw = 4;
    for (const auto& r : rep.rows) w = std::max(w, r.variant.label.size()), pw = std::max(pw, precision(r).size());
    std::string out =
        fmt::format("{:<{}}  {:>{}}  {:>8}  {:>7}  {:>6}  {:>10}  {:>10}  {:>10}  {:>8}  {:>8}  {:>7}  {:>9}  {:>7}\n",
                    "model", w, "prec", pw, "acc %", "Δ pt", "MB", "smaller", "params", "non-zero", "p50 ms", "p90 ms",
                    "faster", "img/s", "faster");
    for (size_t i = 0; i < rep.rows.size(); ++i) {
        const auto& r = rep.rows[i];
        out += fmt::format(
            "{:<{}}  {:>{}}  {:>8.2f}  {:>7}  {:>6.2f}  {:>9.2f}×  {:>10}  {:>10}  {:>8.3f}  {:>8.3f}  "
            "{:>6.2f}×  {:>9.0f}  {:>6.2f}×\n",
            r.variant.label, w, precision(r), pw, 100 * r.accuracy, delta(rep, i), megabytes(r.size_bytes), r.size_ratio,
            thousands(r.parameters), thousands(r.nonzero_parameters), r.latency_ms_p50, r.latency_ms_p90,
            r.latency_speedup, r.throughput, r.throughput_speedup);
    }
    out += fmt::format("({})\n", measured_how(rep));
    return out;
}

namespace {
/// A label as one Markdown table cell: a '|' would open another column (found by review: the row
/// `a|b` had 12 cells under an 11-column header), a line break would end the row.
std::string markdown_cell(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '|') out += "\\|";
        else if (c == '\n' || c == '\r') out += ' ';
        else out += c;
    }
    return out;
}
}  // namespace

std::string format_markdown(const CompareReport& rep) {
    std::string out = fmt::format(
        "| model | precision | accuracy | Δ accuracy | size | smaller | parameters (non-zero) | latency p50 / p90, "
        "batch 1 "
        "| faster | throughput, batch {} | faster |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        rep.throughput_batch);
    for (size_t i = 0; i < rep.rows.size(); ++i) {
        const auto& r = rep.rows[i];
        const std::string params =
            r.nonzero_parameters == r.parameters
                ? thousands(r.parameters)
                : fmt::format("{} ({})", thousands(r.parameters), thousands(r.nonzero_parameters));
        out += fmt::format(
            "| {} | {} | {:.2f} % | {} | {:.2f} MB | {:.2f}× | {} | {:.3f} / {:.3f} ms | {:.2f}× | {}/s | "
            "{:.2f}× |\n",
            markdown_cell(r.variant.label), precision(r), 100 * r.accuracy, i == 0 ? "—" : fmt::format("{} pt", delta(rep, i)),
            megabytes(r.size_bytes), r.size_ratio, params, r.latency_ms_p50, r.latency_ms_p90, r.latency_speedup,
            thousands(std::llround(r.throughput)), r.throughput_speedup);
    }
    out += fmt::format("\n{}.\n", measured_how(rep));
    return out;
}

}  // namespace strato::compress
