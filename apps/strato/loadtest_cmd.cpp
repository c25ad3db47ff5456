// strato loadtest [URL] [--model M] [--concurrency N | --request-rate R | ranges | --users U] ...

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <tuple>

#include "commands.h"
#include "strato/core/cgroup.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/parse.h"
#include "strato/core/signals.h"
#include "strato/loadgen/runner.h"
#include "strato/report/loadtest_report.h"

namespace strato::cli {
namespace {

struct LoadtestFlags {
    std::string url, model, version, input_data = "random", tensor_format = "binary", method, body, body_file;
    std::vector<std::string> headers, shapes;
    int64_t batch = 1, string_length = 128, requests = -1;
    int concurrency = 0, users = 0, threads = 0, max_connections = 256, max_trials = 10;
    double rate = 0, spawn_rate = 0, stability = 0;
    std::string concurrency_range, rate_range, distribution = "constant";
    std::string duration = "10s", warmup = "1s", window = "5s", timeout = "30s", grace = "2s", slo, max_rate = "1000000", busy_poll = "0";
    std::string csv, json_out, report_out;
    std::string trace, intervals;
    double trace_speedup = 1, trace_rate_scale = 1;
    uint64_t seed = 1;
    bool allow_remote = false;
    bool duration_set = false, warmup_set = false, window_set = false;  // given on the command line
};

Result<std::map<std::string, std::vector<int64_t>>> parse_shapes(const std::vector<std::string>& flags) {
    std::map<std::string, std::vector<int64_t>> out;
    for (const auto& f : flags) {
        size_t colon = f.rfind(':');
        if (colon == std::string::npos || colon == 0)
            return invalid_argument("--shape '{}': expected NAME:d1,d2,... (without the batch dimension)", f);
        std::vector<int64_t> dims;
        std::string rest = f.substr(colon + 1);
        size_t pos = 0;
        while (pos <= rest.size()) {
            size_t comma = rest.find(',', pos);
            std::string d = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
            auto v = parse_int(d, 1);
            if (!v) return invalid_argument("--shape '{}': '{}' is not a positive integer", f, d);
            dims.push_back(*v);
            if (comma == std::string::npos) break;
            pos = comma + 1;
        }
        out[f.substr(0, colon)] = dims;
    }
    return out;
}

Status run_loadtest(const LoadtestFlags& f, const GlobalFlags& g, bool* all_failed) {
    using namespace loadgen;
    for (const auto& [out, kind, flag] : {std::tuple{f.json_out, fs::OutputKind::kText, "--json"},
                                          std::tuple{f.csv, fs::OutputKind::kText, "--csv"},
                                          std::tuple{f.report_out, fs::OutputKind::kHtml, "--report"}})
        if (!out.empty()) STRATO_RETURN_IF_ERROR(fs::check_output_file(out, kind, flag));
    // Two outputs on one path kept only the last; an output on an input (--csv body.json)
    // replaced the request body.
    STRATO_RETURN_IF_ERROR(check_distinct_files({{f.json_out, "--json", true},
                                                 {f.csv, "--csv", true},
                                                 {f.report_out, "--report", true},
                                                 {f.body_file, "--body-file", false},
                                                 // (zero and random are no files; a plain HTTP target reads none)
                                                 {f.model.empty() || f.input_data == "zero" || f.input_data == "random"
                                                      ? std::string()
                                                      : f.input_data,
                                                  "--input-data", false},
                                                 {f.trace, "--trace", false},
                                                 {f.intervals, "--request-intervals", false}}));
    std::string url_text = f.url.empty() ? (f.model.empty() ? "" : "http://127.0.0.1:8000") : f.url;
    if (url_text.empty()) return invalid_argument("no target");  // (the command refuses it first, as a usage error)
    STRATO_ASSIGN_OR_RETURN(Url url, parse_url(url_text));
    STRATO_ASSIGN_OR_RETURN(bool loopback, is_loopback_host(url.host));
    if (!loopback && !f.allow_remote)
        return invalid_argument("{} is not a loopback address; pass --allow-remote to load-test another machine", url.host);

    if (!f.model.empty() && f.input_data != "zero" && f.input_data != "random" && !f.input_data.empty()) {
        std::error_code ec;
        if (!std::filesystem::exists(f.input_data, ec))
            return invalid_argument("--input-data {}: no such file (expected zero, random, a perf_analyzer JSON file or "
                                    "an IDX file)", f.input_data);
    }

    // the plan
    RunOptions ro;
    std::vector<double> levels;
    int modes = (f.concurrency > 0) + !f.concurrency_range.empty() + (f.rate > 0) + !f.rate_range.empty() + (f.users > 0) +
                !f.trace.empty() + !f.intervals.empty();
    if (modes > 1)
        return invalid_argument("choose one of --concurrency, --concurrency-range, --request-rate, --request-rate-range, "
                                "--users, --trace, --request-intervals");
    if (!f.trace.empty() || !f.intervals.empty()) {
        // Open loop on a recording: its clock starts with the load, so no warm-up unless asked;
        // a rate trace is measured for one pass unless -d says otherwise.
        if (!f.slo.empty()) return invalid_argument("--slo-p99 searches over request rates; drop --trace/--request-intervals");
        const std::string& path = f.trace.empty() ? f.intervals : f.trace;
        // (the flag named: "/x does not exist" left the user to guess which file was meant)
        auto read = fs::read_file(path, fs::kTextFileLimit);
        if (!read.is_ok()) return read.status().with_context(f.trace.empty() ? "--request-intervals" : "--trace");
        std::string text = std::move(*read);
        STRATO_ASSIGN_OR_RETURN(Schedule sched, f.trace.empty() ? Schedule::from_intervals(text, path)
                                                                : Schedule::from_rate_trace(text, path, f.trace_speedup,
                                                                                            f.trace_rate_scale));
        ro.load.schedule = std::make_shared<const Schedule>(std::move(sched));  // (a copy: 0.8 GB more for 33M intervals)
        ro.load.mode = LoadOptions::Mode::kOpen;
    }
    if (!f.rate_range.empty() || f.rate > 0 || !f.slo.empty()) ro.load.mode = LoadOptions::Mode::kOpen;
    if (!f.slo.empty() && (f.concurrency > 0 || !f.concurrency_range.empty() || f.users > 0))
        return invalid_argument("--slo-p99 searches over request rates; drop --concurrency/--users");
    if (!f.concurrency_range.empty()) {
        STRATO_ASSIGN_OR_RETURN(levels, parse_range(f.concurrency_range, true, 100000));
    } else if (ro.load.schedule) {
        levels = {ro.load.schedule->mean_rate()};  // one level, labelled by the recording's mean rate
    } else if (!f.rate_range.empty()) {
        STRATO_ASSIGN_OR_RETURN(levels, parse_range(f.rate_range, false));
    } else if (f.rate > 0) {
        levels = {f.rate};
    } else if (f.users > 0) {
        levels = {static_cast<double>(f.users)};
        ro.load.spawn_rate = f.spawn_rate;
    } else {
        levels = {static_cast<double>(f.concurrency > 0 ? f.concurrency : 1)};
    }
    ro.load.poisson = f.distribution == "poisson";
    ro.load.max_connections = f.max_connections;
    const int cores = cgroup::usable_cpus();
    ro.load.threads = f.threads > 0 ? f.threads : std::max(1, cores / 2);
    ro.load.seed = f.seed;
    // (--timeout and --busy-poll were checked by their flags' validators, before any connection)
    STRATO_ASSIGN_OR_RETURN(ro.load.timeout_ns, parse_duration_ns(f.timeout));
    STRATO_ASSIGN_OR_RETURN(ro.load.busy_poll_ns, parse_busy_poll_ns(f.busy_poll));
    STRATO_ASSIGN_OR_RETURN(int64_t dur, parse_duration_ns(f.duration));
    STRATO_ASSIGN_OR_RETURN(int64_t warm, parse_duration_ns(f.warmup));
    STRATO_ASSIGN_OR_RETURN(int64_t window, parse_duration_ns(f.window, "ms"));
    STRATO_ASSIGN_OR_RETURN(int64_t grace, parse_duration_ns(f.grace));
    if (dur <= 0 && f.requests <= 0) return invalid_argument("--duration must be > 0");
    if (window <= 0) return invalid_argument("--measurement-interval must be > 0");
    ro.duration_s = static_cast<double>(dur) / 1e9;
    ro.warmup_s = static_cast<double>(warm) / 1e9;
    if (ro.load.schedule) {
        if (!f.warmup_set) ro.warmup_s = 0;
        if (!f.duration_set && !f.trace.empty()) ro.duration_s = ro.load.schedule->period_s() - ro.warmup_s;
        if (ro.duration_s <= 0) return invalid_argument("--warmup {} leaves nothing of the {:.1f} s trace to measure", f.warmup, ro.load.schedule->period_s());
        if (!f.window_set) window = std::max<int64_t>(window, static_cast<int64_t>(ro.duration_s / 100 * 1e9));
    }
    // With --users the ramp is part of the warm-up: measure once everyone has spawned.
    if (f.users > 0 && f.spawn_rate > 0) ro.warmup_s += f.users / f.spawn_rate;
    ro.window_s = static_cast<double>(window) / 1e9;
    ro.grace_s = static_cast<double>(grace) / 1e9;
    ro.requests = f.requests;
    ro.stability_pct = f.stability;
    ro.max_trials = f.max_trials;
    int64_t slo_ns = 0;
    std::vector<double> max_rate;
    if (!f.slo.empty()) {
        STRATO_ASSIGN_OR_RETURN(slo_ns, parse_duration_ns(f.slo, "ms"));
        STRATO_ASSIGN_OR_RETURN(max_rate, parse_range(f.max_rate, false));
        // (found before the server is asked anything; and a --max-rate below the default start, 10,
        // is where the search starts: "--slo-p99 1s --max-rate 5" failed with "starts at 10 req/s")
        if (f.rate > max_rate.back())
            return invalid_argument("--request-rate {:g} starts the SLO search above its --max-rate {:g}", f.rate,
                                    max_rate.back());
    }

    // The target, once every flag is checked: building it asks the server for the model (a typo in
    // --duration was reported only when a server answered, as "Connection refused" otherwise).
    Target target;
    if (!f.model.empty()) {
        if (!f.body.empty() || !f.body_file.empty() || !f.method.empty())
            return invalid_argument("--model builds inference requests itself; --method/--body/--body-file are for plain HTTP targets");
        InferTargetOptions io;
        io.model = f.model;
        io.version = f.version;
        io.batch_size = f.batch;
        STRATO_ASSIGN_OR_RETURN(io.shapes, parse_shapes(f.shapes));
        io.input_data = f.input_data;
        io.binary = f.tensor_format == "binary";
        io.string_length = f.string_length;
        io.seed = f.seed;
        io.headers = f.headers;  // (they were dropped: an Authorization never reached a gateway)
        io.interrupted = [] { return signals::stop_requested(); };
        STRATO_ASSIGN_OR_RETURN(target, build_infer_target(url, io));
    } else {
        std::string body = f.body;
        if (!f.body_file.empty()) {
            // (read whole, without a limit: a --body-file /dev/zero took 1.5 GB before it was refused,
            // a 20 GB file all the memory there was; Triton takes 64 MB bodies by default)
            constexpr uint64_t kBodyMax = 256ull << 20;
            auto read = fs::read_file(f.body_file, kBodyMax);
            if (!read.is_ok()) return read.status().with_context("--body-file");
            body = std::move(*read);
        }
        std::string method = f.method.empty() ? (body.empty() ? "GET" : "POST") : f.method;
        // The body's framing is strato's: another length, or a chunked coding, put the server out
        // of step with the bytes sent (every request timed out, or was read as two).
        for (const auto& h : f.headers) {
            const std::string_view name(h.data(), h.find(':'));
            std::string_view value = std::string_view(h).substr(name.size() + 1);
            while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
            while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
            if (loadgen::header_is(h, "transfer-encoding"))
                return invalid_argument("-H '{}': strato sends the body with a Content-Length; drop the header", h);
            if (loadgen::header_is(h, "content-length") && value != std::to_string(body.size()))
                return invalid_argument("-H '{}': the body has {} bytes; drop the header (strato sets Content-Length)", h,
                                        body.size());
        }
        target.url = url;
        target.requests.push_back(build_request(url, method, f.headers, body));
        target.head = method == "HEAD";
        target.description = fmt::format("{} {}{}", method, url.target, body.empty() ? "" : fmt::format(" ({} bytes)", body.size()));
    }

    ro.batch_size = target.batch;
    if (!f.model.empty())
        ro.server_stats = [url, m = f.model, v = f.version, h = f.headers]() -> Result<ServerStats> {
            // (a second Ctrl-C: hurry, no more requests to a server that may be hung)
            if (signals::signal_count() > 1) return Status(StatusCode::kCancelled, "interrupted");
            return fetch_server_stats(url, m, v, h);
        };
    ro.interrupted = [] { return signals::stop_requested(); };
    if (!g.quiet) ro.progress = [](const std::string& line) { put(stderr, line + "\n"); };

    // A reader that went away (`| head`, a closed terminal) must not cost what was measured:
    // SIGPIPE killed the process with the table half written and no --json, --csv or --report
    // (and fmt::print throws on EPIPE: the output goes through put()).
    ::signal(SIGPIPE, SIG_IGN);
    if (!g.quiet)
        put(stderr, fmt::format("strato loadtest: http://{}{}\n  {}\n", url.host_header, target.url.target, target.description));
    // From here a second Ctrl-C does not exit at once (a third does): the first already ends the
    // measuring and its grace wait, and what was measured is printed and written in any case (a
    // second Ctrl-C during the grace used to _exit with no table and no --json).
    signals::SecondSignalGuard hold_second_signal;
    // (destroyed first, before the guard: stdout into a pipe is buffered, and a second Ctrl-C just
    // after the return _exit()ed with the table still in the buffer)
    struct FlushStdout {
        ~FlushStdout() { std::fflush(stdout); }
    } flush_stdout_on_return;
    std::vector<PointResult> points;
    std::optional<SloResult> slo;
    Status sweep_failed;  // a level that failed after others were measured: said after they are written
    if (!f.slo.empty()) {
        STRATO_ASSIGN_OR_RETURN(slo, slo_search(target, ro, slo_ns, f.rate > 0 ? f.rate : std::min(10.0, max_rate.back()),
                                                     max_rate.back()));
        points = slo->probes;
        std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.level < b.level; });
        sweep_failed = slo->failed;  // a probe that could not start: said after the others are written
    } else {
        STRATO_ASSIGN_OR_RETURN(points, run_sweep(target, ro, levels, &sweep_failed));
    }

    std::string text = format_table(points);
    // Ctrl-C in a level's warm-up, before anything of it was measured: no row is marked, and the
    // table and the JSON ("interrupted": false) read as a finished run without the levels left out.
    const bool cut_short = !slo && points.size() < levels.size() && signals::stop_requested() &&
                           (points.empty() || !points.back().interrupted);
    if (cut_short)
        text += fmt::format("interrupted before {} was measured: {} of {} level(s) measured (partial)\n",
                            ro.load.mode == LoadOptions::Mode::kOpen
                                ? fmt::format("{:g} req/s", levels[points.size()])
                                : fmt::format("concurrency {:g}", levels[points.size()]),
                            points.size(), levels.size());
    if (slo) {
        if (slo->found)
            text += fmt::format("highest request rate with p99 <= {:.2f} ms and no errors: {:.1f} req/s (p99 {:.2f} ms){}\n",
                       slo->slo_p99_ns / 1e6, slo->best_rate, slo->best->m.latency.percentile(99) / 1e6,
                       slo->interrupted          ? "; the search was interrupted: the limit may lie higher"
                       : !slo->failed.is_ok()    ? "; the search stopped early (below): the limit may lie higher"
                       : slo->capped             ? "; that is --max-rate: the limit may lie beyond it"
                                                 : "");
        else if (slo->interrupted)
            text += fmt::format("SLO search interrupted before a complete probe met p99 <= {:.2f} ms\n", slo->slo_p99_ns / 1e6);
        else if (!slo->failed.is_ok())
            text += fmt::format("SLO search stopped early (below) before a probe met p99 <= {:.2f} ms\n", slo->slo_p99_ns / 1e6);
        else
            text += fmt::format("no request rate met p99 <= {:.2f} ms\n", slo->slo_p99_ns / 1e6);
    }
    // With an output on standard output (`--json - | jq`), the table goes to stderr: the pipe
    // carries the data alone.
    put(text_stream({f.json_out, f.csv, f.report_out}), text);
    auto j = to_json(points, fmt::format("http://{}{}", url.host_header, target.url.target), ro, slo);
    if (cut_short) j["interrupted"] = true;
    if (!f.json_out.empty()) STRATO_RETURN_IF_ERROR(fs::atomic_write(f.json_out, json_text(j, 1) + "\n"));
    if (!f.csv.empty()) STRATO_RETURN_IF_ERROR(fs::atomic_write(f.csv, format_csv(points, target.batch)));
    if (!f.report_out.empty()) {
        STRATO_ASSIGN_OR_RETURN(auto html, report::render_loadtest_report(j));
        STRATO_RETURN_IF_ERROR(fs::atomic_write(f.report_out, html));
        if (!g.quiet) put(stderr, fmt::format("report: {}\n", f.report_out));
    }
    if (signals::stop_requested()) return Status(StatusCode::kCancelled, "interrupted; the table shows what was measured");
    if (!sweep_failed.is_ok())
        return sweep_failed.with_context(fmt::format("after {} {} measured (in the table and outputs)", points.size(),
                                                     slo ? "SLO probe(s)" : "level(s)"));
    int64_t ok = 0;
    for (const auto& p : points) ok += p.m.ok;
    *all_failed = ok == 0;
    if (slo && !slo->found) return Status(StatusCode::kUnavailable, "no request rate met the objective");
    return Status::ok();
}

/// --timeout: a duration of at least 1 ms (deadlines are checked every millisecond: 1ns was not
/// enforced); a usage error, found before the target is contacted. (CLI11 names the flag.)
CLI::Validator timeout_flag() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            auto ns = parse_duration_ns(text);
            if (!ns) return ns.status().message();
            if (*ns < 1'000'000) return fmt::format("{} is below 1 ms, the finest the client enforces", text);
            return {};
        },
        "DURATION >= 1ms (bare numbers: s)");
}

}  // namespace

void add_loadtest_command(CLI::App& app, const GlobalFlags& g, int* exit_code) {
    auto f = std::make_shared<LoadtestFlags>();
    auto* cmd = app.add_subcommand("loadtest", "Load-test an HTTP endpoint or an Open Inference Protocol model (closed/open loop, sweeps, SLO search)");
    cmd->option_defaults()->always_capture_default();
    cmd->add_option("url", f->url, "Target URL (http://host:port/path); with --model, the server (default http://127.0.0.1:8000)");
    auto* tgt = "Inference target (Open Inference Protocol)";
    cmd->add_option("-m,--model", f->model, "Model to infer on: inputs come from /v2/models/NAME metadata")->group(tgt);
    cmd->add_option("-x,--model-version", f->version, "Model version (default: the server's choice)")->group(tgt);
    cmd->add_option("-b,--batch-size", f->batch, "Rows per request")->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->group(tgt);
    cmd->add_option("--shape", f->shapes, "NAME:d1,d2,... for inputs with variable dimensions (batch excluded)")->group(tgt);
    cmd->add_option("--input-data", f->input_data, "zero | random | FILE.json (perf_analyzer format) | IDX file (.idx/.gz, e.g. Fashion-MNIST)")->group(tgt);
    cmd->add_option("--tensor-format", f->tensor_format, "binary (binary tensor extension) or json")->check(CLI::IsMember({"binary", "json"}))->group(tgt);
    cmd->add_option("--string-length", f->string_length, "Length of generated BYTES elements")->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->group(tgt);
    auto* plain = "Plain HTTP target";
    cmd->add_option("-X,--method", f->method, "HTTP method (default GET, POST with a body)")->group(plain);
    cmd->add_option("-H,--header", f->headers, "Extra header 'Name: value' (repeatable; with --model on every request, the metadata's too)")
        ->check(status_flag("--header", [](const std::string& h) { return loadgen::check_header(h); }, "'NAME: VALUE'"))
        ->group(plain);
    cmd->add_option("--body", f->body, "Request body")->group(plain);
    cmd->add_option("--body-file", f->body_file, "Request body from a file")->group(plain);
    auto* load = "Load";
    cmd->add_option("--concurrency", f->concurrency, "Closed loop: N requests outstanding (default 1)")->check(CLI::Range(1, 100000))->default_str("")->group(load);
    cmd->add_option("--concurrency-range", f->concurrency_range, "Sweep: START:END[:STEP] or START:END:xFACTOR (1:64:x2), or a list 1,4,16")
        ->check(status_flag("--concurrency-range", [](const std::string& t) { return loadgen::parse_range(t, true, 100000).status(); }, "RANGE"))
        ->group(load);
    cmd->add_option("--request-rate", f->rate, "Open loop: requests per second (latency from the intended send time; default: none, closed loop)")->check(finite_range(loadgen::kMinRate, loadgen::kMaxRate))->default_str("")->group(load);
    cmd->add_option("--request-rate-range", f->rate_range, "Sweep request rates: START:END[:STEP|xFACTOR] or a list")
        ->check(status_flag("--request-rate-range", [](const std::string& t) { return loadgen::parse_range(t, false).status(); }, "RANGE"))
        ->group(load);
    cmd->add_option("--request-distribution", f->distribution, "Open-loop gaps: constant or poisson")->check(CLI::IsMember({"constant", "poisson"}))->group(load);
    cmd->add_option("-u,--users", f->users, "Locust-style: U users, each waiting for its answer (closed loop; default: none)")->check(CLI::Range(1, 100000))->default_str("")->group(load);
    cmd->add_option("-r,--spawn-rate", f->spawn_rate, "Users started per second (the ramp is not measured; default: all at once)")->check(finite_range(0, 1e6))->default_str("")->group(load);
    cmd->add_option("--max-connections", f->max_connections, "Open loop: most connections opened (more due requests wait and count as delayed)")->check(CLI::Range(1, 100000))->group(load);
    cmd->add_option("--threads", f->threads, "Client threads (default: half the cores)")->check(CLI::Range(0, 1024))->group(load);
    cmd->add_option("--timeout", f->timeout, "Per-request timeout (counted as an error; at least 1ms)")->check(timeout_flag())->group(load);
    cmd->add_option("--seed", f->seed, "Seed for random inputs and Poisson gaps")->group(load);
    cmd->add_option("--busy-poll", f->busy_poll, "Poll for responses this long before sleeping (bare numbers are us; 0: off). Against a fast local server: fewer wake-ups on both sides, higher max req/s, more client CPU")->check(busy_poll_flag())->group(load);
    cmd->add_option("--trace", f->trace, "Open loop replaying a rate trace: CSV with time_s and rate columns (requests/s from that time on; the format of `strato autoscale simulate --trace`); measured for one pass in --measurement-interval windows")->group(load);
    cmd->add_option("--trace-speedup", f->trace_speedup, "Replay the trace this many times faster (rates kept): 24 plays a day in an hour")->check(finite_range(1e-6, 1e6))->group(load);
    cmd->add_option("--trace-rate-scale", f->trace_rate_scale, "Multiply the trace's rates by this")->check(finite_range(1e-9, 1e9))->group(load);
    cmd->add_option("--request-intervals", f->intervals, "Open loop with perf_analyzer's intervals file: one gap in microseconds per line, cycled")->group(load);
    auto* meas = "Measurement";
    // (-d 0 was found only after parsing: exit 1, where every other value out of range is a usage error)
    cmd->add_option("-d,--duration", f->duration, "Measured time per level (after the warm-up)")->check(duration_flag("s", true))->group(meas);
    cmd->add_option("-n,--requests", f->requests, "Measure this many requests per level instead of a duration (default: none, --duration)")->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->default_str("")->group(meas);
    cmd->add_option("--warmup", f->warmup, "Load before measuring (not counted)")->check(duration_flag("s", false))->group(meas);
    // (windows of a fixed count of requests: the count ran out after the first, and three empty
    // windows "agreed" on 0 req/s)
    cmd->add_option("--stability-percentage", f->stability, "perf_analyzer's rule: measure windows until 3 agree within this % (0: off)")->check(finite_range(0, 100))->group(meas)->excludes("--requests");
    cmd->add_option("-p,--measurement-interval", f->window, "Stability window length; with --trace/--request-intervals, the timeline's (default: 5s or 1/100 of the run) (bare numbers are ms)")->check(duration_flag("ms", true))->group(meas);
    cmd->add_option("--max-trials", f->max_trials, "Stability windows at most")->check(CLI::Range(3, 1000))->group(meas);
    cmd->add_option("--grace", f->grace, "After the deadline, wait this long for outstanding requests")->check(duration_flag("s", false))->group(meas);
    cmd->add_option("--slo-p99", f->slo, "Find the highest request rate with p99 at most this (e.g. 50ms); starts at --request-rate, or 10 (--max-rate when lower)")->check(duration_flag("ms", true))->group(meas);
    cmd->add_option("--max-rate", f->max_rate, "Highest rate the SLO search tries")
        ->check(status_flag("--max-rate",
                            [](const std::string& t) {
                                // One rate: a range (10:100) was taken as its last value without a word.
                                auto r = loadgen::parse_range(t, false);
                                if (r.is_ok() && r->size() != 1)
                                    return invalid_argument("--max-rate {}: expected one rate (a number > 0), not a range", t);
                                return r.status();
                            },
                            "RATE"))
        ->group(meas);
    auto* outg = "Output";
    cmd->add_option("--csv", f->csv, "perf_analyzer-style CSV (µs columns, rows sorted by throughput; - for stdout)")->group(outg);
    cmd->add_option("--json", f->json_out, "Everything measured, as JSON (render with `strato report FILE.json`; - for stdout, the table then on stderr)")->group(outg);
    cmd->add_option("--report", f->report_out, "Self-contained HTML report with latency charts (- for stdout)")->group(outg);
    cmd->add_flag("--allow-remote", f->allow_remote, "Allow a target that is not a loopback address");
    cmd->footer(
        "Examples:\n"
        "  strato loadtest --model fashion_mnist_cnn --concurrency-range 1:32:x2 --csv perf.csv\n"
        "  strato loadtest --model fashion_mnist_cnn --request-rate 500 --request-distribution poisson -d 30s\n"
        "  strato loadtest --model fashion_mnist_cnn --slo-p99 20ms --report slo.html\n"
        "  strato loadtest http://127.0.0.1:8080/index.html --concurrency 64 --threads 2\n"
        "  strato loadtest http://127.0.0.1:8089/api -X POST --body-file req.json -u 100 -r 10 -d 1m\n"
        "  strato loadtest --model fashion_mnist_cnn --trace bench/cloud/week_trace.csv --trace-speedup 1008 -p 10s --json week.json\n"
        "Latency is from the intended send time in open loop (no coordinated omission). Details: docs/loadtest.md");
    cmd->callback([f, &g, exit_code, cmd] {
        f->duration_set = cmd->count("--duration") > 0;
        f->warmup_set = cmd->count("--warmup") > 0;
        f->window_set = cmd->count("--measurement-interval") > 0;
        if (f->url.empty() && f->model.empty()) {  // a usage error, as a missing argument is
            return void(*exit_code = report_usage_error("loadtest", "no target: give a URL (http://host:port/path) or "
                                                                    "--model NAME for a server on 127.0.0.1:8000"));
        }
        // With --model strato frames every request (the metadata GETs too): a -H Content-Length or
        // Transfer-Encoding made the GETs wait for a body that never came (found by review).
        if (!f->model.empty())
            for (const auto& h : f->headers)
                if (loadgen::header_is(h, "content-length") || loadgen::header_is(h, "transfer-encoding"))
                    return void(*exit_code = report_usage_error(
                                    "loadtest", fmt::format("-H '{}': with --model strato frames every request itself; "
                                                            "drop the header", h)));
        // Flags that only shape a model's inference requests, or one load mode, did nothing silently
        // elsewhere (-b 8 against a URL measured batch 1 and the CSV's inferences/s said so).
        if (f->model.empty())
            for (const char* flag : {"--batch-size", "--shape", "--input-data", "--tensor-format", "--string-length",
                                     "--model-version"})
                if (cmd->count(flag) > 0)
                    return void(*exit_code = report_usage_error(
                                    "loadtest", fmt::format("{} shapes the requests of an inference target: give "
                                                            "--model NAME, or drop it for a plain HTTP URL",
                                                            flag)));
        if (cmd->count("--spawn-rate") > 0 && f->users <= 0)
            return void(*exit_code = report_usage_error("loadtest", "--spawn-rate ramps up --users; give -u/--users N"));
        // (-u 100000 -r 1e-5: a ramp of 317 years overflowed the clock's nanoseconds)
        if (f->users > 0 && f->spawn_rate > 0 && f->users / f->spawn_rate > 365.25 * 86400)
            return void(*exit_code = report_usage_error(
                            "loadtest", fmt::format("--users {} at --spawn-rate {:g} would ramp up for {:.0f} days; "
                                                    "expected a ramp of at most a year",
                                                    f->users, f->spawn_rate, f->users / f->spawn_rate / 86400)));
        // Found by review: more flags that act only with another did nothing without it (--max-rate
        // 500 on a rate sweep, --trace-speedup without --trace, --max-connections in a closed loop),
        // and --slo-p99 ignored a --request-rate-range.
        const bool open_loop =
            f->rate > 0 || !f->rate_range.empty() || !f->slo.empty() || !f->trace.empty() || !f->intervals.empty();
        const struct {
            const char* flag;
            bool acts;
            const char* what;
        } dependent[] = {
            {"--max-rate", !f->slo.empty(), "bounds the --slo-p99 search: give --slo-p99"},
            {"--trace-speedup", !f->trace.empty(), "replays a --trace faster: give --trace FILE"},
            {"--trace-rate-scale", !f->trace.empty(), "scales the rates of a --trace: give --trace FILE"},
            {"--max-trials", f->stability > 0, "bounds the windows of --stability-percentage: give it"},
            {"--max-connections", open_loop,
             "caps the connections of an open loop (a closed loop opens --concurrency or --users of them): give "
             "--request-rate, --request-rate-range, --slo-p99, --trace or --request-intervals"},
            {"--request-rate-range", f->slo.empty(),
             "is a sweep, and --slo-p99 chooses its rates itself, from --request-rate (10) up to --max-rate: drop one"},
        };
        for (const auto& d : dependent)
            if (cmd->count(d.flag) > 0 && !d.acts)
                return void(*exit_code = report_usage_error("loadtest", fmt::format("{} {}", d.flag, d.what)));
        if (cmd->count("--request-distribution") > 0 && f->distribution == "poisson" && f->rate <= 0 &&
            f->rate_range.empty() && f->slo.empty() && f->trace.empty())
            return void(*exit_code = report_usage_error("loadtest", "--request-distribution poisson spaces an open loop's "
                                                                    "requests: give --request-rate, --request-rate-range, "
                                                                    "--slo-p99 or --trace"));
        signals::install_stop_handlers();
        bool all_failed = false;
        Status st = run_loadtest(*f, g, &all_failed);
        if (!st.is_ok()) {
            const int code = report_error("loadtest", st);
            // Stopped by a signal: 128 + its number (SIGTERM from a scheduler or `timeout`: 143, not
            // Ctrl-C's 130), as `strato serve` and `strato launch` exit.
            const int sig = signals::stop_signal();
            return void(*exit_code = st.code() == StatusCode::kCancelled && sig > 0 ? 128 + sig : code);
        }
        if (all_failed) return void(*exit_code = report_error("loadtest", Status(StatusCode::kUnavailable, "no request succeeded")));
        *exit_code = 0;
    });
}

}  // namespace strato::cli
