#include "strato/loadgen/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <thread>

#include "strato/core/log.h"

namespace strato::loadgen {
using json = nlohmann::json;

namespace {

// Sleeps until `deadline_ns` or until `done` says so; false when interrupted.
bool wait_until(int64_t deadline_ns, const RunOptions& o, const std::function<bool()>& done = {}) {
    while (now_ns() < deadline_ns) {
        if (o.interrupted && o.interrupted()) return false;
        if (done && done()) return true;
        int64_t left = deadline_ns - now_ns();
        std::this_thread::sleep_for(std::chrono::nanoseconds(std::clamp<int64_t>(left, 0, 5'000'000)));
    }
    return !(o.interrupted && o.interrupted());
}

std::string level_text(const PointResult& p) {
    return p.rate_mode ? fmt::format("{:g} req/s", p.level) : fmt::format("concurrency {:g}", p.level);
}

std::string ms(int64_t ns) { return fmt::format("{:.2f}", static_cast<double>(ns) / 1e6); }
// A latency of `h` in ms, "-" when nothing was answered 2xx: a level or window of only errors or
// unanswered requests read "p99 0.00 ms", the best latency of the run.
std::string ms(const LatencyHistogram& h, double pct) { return h.count() ? ms(h.percentile(pct)) : "-"; }

bool within(const std::vector<double>& v, double pct) {
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    if (*hi <= 0) return *lo == *hi;
    return (*hi - *lo) / *hi * 100.0 <= pct;
}

// A run on a schedule (--trace, --request-intervals): measured window by window, so the output
// shows the latency as the load changes. `t0` is when the schedule's clock started (with the
// session; the warm-up is part of it). Stops the session at the end.
void follow_schedule(LoadSession& session, const RunOptions& o, const Schedule& schedule, int64_t t0, int64_t grace,
                     PointResult* out) {
    const int64_t end = now_ns() + static_cast<int64_t>(o.duration_s * 1e9);
    const auto window = std::max<int64_t>(1'000'000, static_cast<int64_t>(o.window_s * 1e9));
    int64_t from = now_ns();
    for (bool more = true; more;) {
        const int64_t to = std::min(end, from + window);
        more = wait_until(to, o) && to < end;
        // (the window ends here, not after the last one's grace: the grace's asked requests, never
        // sent, were in its asked rate)
        const int64_t at = now_ns();
        Measurement m = more ? session.snapshot() : session.stop(grace, o.interrupted);
        TimelineEntry e;
        e.t_s = static_cast<double>(at - t0) / 1e9;
        e.asked = at > from ? (schedule.count_at(at - t0) - schedule.count_at(from - t0)) /
                                  (static_cast<double>(at - from) / 1e9)
                            : 0;
        e.throughput = m.throughput();
        e.p50_ns = m.latency.percentile(50);
        e.p99_ns = m.latency.percentile(99);
        e.errors = m.errors();
        out->timeline.push_back(e);
        if (o.progress)
            // (windows under a second: "t = 1 s" twice read as a repeated line)
            o.progress(fmt::format("  t = {:.{}f} s: asked {:.1f} req/s, answered {:.1f} req/s, p50 {} ms, p99 {} ms, {} errors",
                                   e.t_s, o.window_s >= 1 ? 0 : o.window_s >= 0.1 ? 1 : 3, e.asked, e.throughput,
                                   ms(m.latency, 50), ms(m.latency, 99), e.errors));
        const double secs = out->m.seconds + m.seconds;
        out->m.merge(m);
        out->m.seconds = secs;
        from = at;
    }
    out->windows = static_cast<int>(out->timeline.size());
}

}  // namespace

Result<PointResult> run_point(const Target& target, const RunOptions& o, double level) {
    PointResult out;
    out.rate_mode = o.load.mode == LoadOptions::Mode::kOpen;
    out.level = level;
    LoadOptions lo = o.load;
    if (out.rate_mode) {
        lo.rate = level;  // with a schedule, only its label
    } else {
        lo.concurrency = static_cast<int>(level);
    }
    if (o.requests > 0 && o.warmup_s <= 0) lo.request_budget = o.requests;
    // A recording sends exactly what falls due before the end, not one more that a late stop lets out.
    if (lo.schedule && o.requests <= 0)
        lo.request_budget = static_cast<int64_t>(
            std::ceil(lo.schedule->count_at(static_cast<int64_t>((o.warmup_s + o.duration_s) * 1e9) - 1) - 1e-9));
    STRATO_ASSIGN_OR_RETURN(auto session, LoadSession::start(target, lo));
    int64_t start = now_ns();
    if (o.warmup_s > 0) {
        if (!wait_until(start + static_cast<int64_t>(o.warmup_s * 1e9), o)) {
            // Ctrl-C in the warm-up: nothing of this level was measured (the warm-up's requests
            // are not counted).
            (void)session->stop(0);
            out.interrupted = true;
            return out;
        }
        (void)session->snapshot();
        // --requests counts from here: N more are sent (it measured 130-140 of 100 while the
        // count was only polled).
        if (o.requests > 0) session->set_budget(o.requests);  // (give or take what is sent between the two)
    }
    std::optional<ServerStats> before;
    if (o.server_stats)
        if (auto s = o.server_stats(); s.is_ok()) before = *s;
    auto grace = static_cast<int64_t>(o.grace_s * 1e9);

    if (o.stability_pct > 0) {
        std::vector<Measurement> windows;
        std::vector<std::optional<ServerStats>> readings{before};
        out.stable = false;
        for (int w = 0; w < o.max_trials; ++w) {
            bool ok = wait_until(now_ns() + static_cast<int64_t>(o.window_s * 1e9), o);
            windows.push_back(w + 1 == o.max_trials || !ok ? session->stop(grace, o.interrupted) : session->snapshot());
            const Measurement& m = windows.back();
            if (o.progress)
                o.progress(fmt::format("  {} window {}: {:.1f} req/s, mean {} ms, p99 {} ms", level_text(out), w + 1,
                                       m.throughput(), m.ok ? ms(static_cast<int64_t>(m.latency.mean())) : "-",
                                       ms(m.latency, 99)));
            if (o.server_stats) {
                auto s = o.server_stats();
                readings.push_back(s.is_ok() ? std::optional<ServerStats>(*s) : std::nullopt);
            }
            if (!ok) break;
            if (windows.size() >= 3) {
                std::vector<double> tput, lat;
                for (size_t k = windows.size() - 3; k < windows.size(); ++k) {
                    tput.push_back(windows[k].throughput());
                    lat.push_back(windows[k].latency.mean());
                }
                // (windows that answered nothing agree on nothing: against a server that never
                // answers, three empty ones were "stable" at 0 req/s and a mean of 0 ms)
                const bool answered = std::all_of(windows.end() - 3, windows.end(), [](const Measurement& w) { return w.ok > 0; });
                if (answered && within(tput, o.stability_pct) && within(lat, o.stability_pct)) {
                    out.stable = true;
                    break;
                }
            }
        }
        // What ended after the last window counts as late, failed or unfinished, as after a
        // duration (it was dropped, and the counts did not add up to what was sent).
        Measurement after = session->stop(grace, o.interrupted);
        size_t first = windows.size() >= 3 ? windows.size() - 3 : 0;
        for (size_t k = first; k < windows.size(); ++k) {
            out.m.merge(windows[k]);
            out.m.seconds += windows[k].seconds;
        }
        out.m.merge_after_window(std::move(after));
        out.windows = static_cast<int>(windows.size());
        out.interrupted = o.interrupted && o.interrupted();
        if (o.server_stats && readings[first] && readings.back())
            out.server = server_breakdown(*readings[first], *readings.back());
        return out;
    }

    if (lo.schedule && o.requests <= 0) {
        follow_schedule(*session, o, *lo.schedule, start, grace, &out);
    } else {
        int64_t base_done = session->requests_done();
        int64_t deadline = o.requests > 0 ? std::numeric_limits<int64_t>::max() : now_ns() + static_cast<int64_t>(o.duration_s * 1e9);
        // A count that stops advancing for longer than a request may take ends the point: the run is
        // bounded even if a response is lost for good (its request counts as unfinished).
        int64_t last_done = base_done, last_progress = now_ns();
        // (plus two intervals of an open loop's schedule: at 0.1 req/s the next request is 10 s away)
        const double rate_gap_s = lo.rate > 0 ? 2.0 / lo.rate : 0.0;
        const int64_t stall_ns = o.load.timeout_ns + 5'000'000'000 + static_cast<int64_t>(std::min(rate_gap_s, 86400.0) * 1e9);
        bool all_done = false;
        wait_until(deadline, o, [&] {
            if (o.requests <= 0) return false;
            // Every budgeted request answered (with the warm-up's last ones, which also count).
            if (session->idle_after_budget()) return all_done = true;
            const int64_t done = session->requests_done();
            // Failures that take no budget (a refused connect) end it too: N of them, plus as many
            // as the warm-up can have had in flight (it ran until killed against a dead port).
            const int64_t in_flight_max = out.rate_mode ? lo.max_connections : lo.concurrency;
            if (done - base_done >= o.requests + in_flight_max) return true;
            if (done != last_done) last_done = done, last_progress = now_ns();
            if (now_ns() - last_progress > stall_ns) {
                log::warn("loadtest: no request finished for {:.0f} s ({} of {} done); ending this point",
                          static_cast<double>(stall_ns) / 1e9, done - base_done, o.requests);
                return true;
            }
            return false;
        });
        const int64_t from = session->window_start_ns();
        out.m = session->stop(grace, o.interrupted);
        // The window of -n N ends with its last answer, not when the 5 ms poll above saw it: -n 10
        // against a server of 30,000 req/s measured 11 ms, 976 req/s.
        if (const int64_t last = session->last_done_ns(); all_done && last > from)
            out.m.seconds = static_cast<double>(last - from) / 1e9;
    }
    // (a Ctrl-C in the grace too: what was still outstanding is unfinished, not late or failed)
    out.interrupted = o.interrupted && o.interrupted();
    if (before)
        if (auto after = o.server_stats(); after.is_ok()) out.server = server_breakdown(*before, *after);
    return out;
}

Result<std::vector<PointResult>> run_sweep(const Target& target, const RunOptions& o, const std::vector<double>& levels,
                                           Status* failed) {
    std::vector<PointResult> points;
    for (double level : levels) {
        if (o.interrupted && o.interrupted()) break;
        auto measured = run_point(target, o, level);
        if (!measured.is_ok() && failed && !points.empty()) {
            *failed = measured.status();
            break;
        }
        STRATO_ASSIGN_OR_RETURN(auto p, std::move(measured));
        // Interrupted before anything was measured (Ctrl-C in the warm-up): no row of 0 req/s.
        if (p.interrupted && p.m.ok == 0 && p.m.errors() == 0 && p.m.unfinished == 0 && p.m.late == 0) break;
        if (o.progress)
            o.progress(fmt::format("{}: {:.1f} req/s, p50 {} ms, p99 {} ms, {} errors{}", level_text(p), p.m.throughput(),
                                   ms(p.m.latency, 50), ms(p.m.latency, 99), p.m.errors(),
                                   p.interrupted ? fmt::format(" (interrupted after {:.2f} s)", p.m.seconds) : ""));
        const bool last = p.interrupted;
        points.push_back(std::move(p));
        if (last) break;
    }
    return points;
}

std::string slo_miss_reason(const PointResult& p, int64_t slo) {
    if (p.m.ok == 0) return "no successful request";
    if (p.m.errors() > 0) return fmt::format("{} errors", p.m.errors());
    // A request never answered (or never sent) is slower than any objective: counted so, more than
    // 1 % of them put p99 above it however good the answered ones' p99 is.
    if (const int64_t all = p.m.ok + p.m.unfinished; p.m.unfinished > 0) {
        if (p.m.unfinished * 100 > all)
            return fmt::format("{} of {} requests unanswered or never sent (p99 counts them as slower than the objective)",
                               p.m.unfinished, all);
        // The p99 of all requests is the answered ones' quantile 99 * all / ok.
        const double q = std::min(100.0, 99.0 * static_cast<double>(all) / static_cast<double>(p.m.ok));
        if (p.m.latency.percentile(q) > slo)
            return fmt::format("p99 {} ms > {} ms (the {} unanswered requests counted as slower)",
                               ms(p.m.latency.percentile(q)), ms(slo), p.m.unfinished);
    }
    if (p.m.latency.percentile(99) > slo)
        return fmt::format("p99 {} ms > {} ms", ms(p.m.latency.percentile(99)), ms(slo));
    if (p.rate_mode && p.m.throughput() < 0.9 * p.level)
        return fmt::format("delivered {:.1f} of {:g} req/s", p.m.throughput(), p.level);
    return "";
}

Result<SloResult> slo_search(const Target& target, const RunOptions& o, int64_t slo, double start_rate, double max_rate) {
    if (!(start_rate > 0)) return invalid_argument("SLO search needs a start rate > 0, got {}", start_rate);
    SloResult r;
    r.slo_p99_ns = slo;
    RunOptions ro = o;
    ro.load.mode = LoadOptions::Mode::kOpen;
    // A request still in flight at a level's end gets at least the objective (twice) to finish:
    // one slower than --grace but within the objective is no miss.
    ro.grace_s = std::max(ro.grace_s, 2.0 * static_cast<double>(slo) / 1e9);
    // False for a miss, and for a probe cut short by Ctrl-C: that one is too short to judge, is
    // neither a pass nor the answer, and ends the search (r.interrupted). It measured 0.25 s of a
    // 1 s probe, "met" the objective and was reported as the highest rate.
    // A probe that cannot start (out of file descriptors, the name no longer resolving) ends the
    // search as Ctrl-C does, in r.failed: the probes measured before it were thrown away with the
    // error, and the command printed nothing of them. Only a first probe's error is returned.
    auto probe = [&](double rate) -> Result<bool> {
        auto started = run_point(target, ro, rate);
        if (!started.is_ok()) {
            if (r.probes.empty()) return started.status();
            r.failed = started.status().with_context(fmt::format("SLO probe at {:g} req/s", rate));
            if (o.progress) o.progress(fmt::format("SLO probe {:.1f} req/s: cannot start: {}", rate, started.status().message()));
            return false;
        }
        PointResult p = std::move(*started);
        if (p.interrupted) {
            r.interrupted = true;
            if (o.progress)
                o.progress(fmt::format("SLO probe {:.1f} req/s: interrupted after {:.2f} s, not judged", rate, p.m.seconds));
            if (p.m.ok + p.m.errors() + p.m.unfinished + p.m.late > 0) r.probes.push_back(std::move(p));
            return false;
        }
        std::string why = slo_miss_reason(p, slo);
        if (o.progress) o.progress(fmt::format("SLO probe {:.1f} req/s: {}", rate, why.empty() ? "meets" : why));
        bool ok = why.empty();
        if (ok && (!r.best || rate > r.best_rate)) {
            r.found = true;
            r.best_rate = rate;
            r.best = p;
        }
        r.probes.push_back(std::move(p));
        return ok;
    };
    if (start_rate > max_rate)
        return invalid_argument("the SLO search starts at {:g} req/s, above its --max-rate {:g}", start_rate, max_rate);
    double lo = 0, hi = 0, rate = start_rate;
    while (true) {  // grow until a miss; the last probe is --max-rate itself
        if (o.interrupted && o.interrupted()) r.interrupted = true;
        if (r.interrupted) return r;
        STRATO_ASSIGN_OR_RETURN(bool ok, probe(rate));
        if (r.interrupted || !r.failed.is_ok()) return r;
        if (!ok) {
            hi = rate;
            break;
        }
        lo = rate;
        if (rate >= max_rate) break;
        rate = std::min(rate * 2, max_rate);
    }
    if (hi == 0) {  // met the objective up to max_rate
        r.capped = true;
        return r;
    }
    if (lo == 0) lo = 0;    // even the start rate misses: bisect below it
    for (int i = 0; i < 8 && (hi - lo) > 0.05 * std::max(lo, 1.0); ++i) {
        if (o.interrupted && o.interrupted()) {
            r.interrupted = true;
            break;
        }
        double mid = lo > 0 ? (lo + hi) / 2 : hi / 2;
        if (mid < kMinRate) break;  // (a probe there cannot start)
        STRATO_ASSIGN_OR_RETURN(bool ok, probe(mid));
        if (r.interrupted || !r.failed.is_ok()) break;
        (ok ? lo : hi) = mid;
        if (!ok && mid < 1) break;
    }
    return r;
}

Result<std::vector<double>> parse_range(const std::string& text, bool integer, double max) {
    std::vector<double> out;
    auto num = [&](std::string_view s) -> Result<double> {
        double v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !(v > 0) || !std::isfinite(v) ||
            (integer && v != std::floor(v)))
            return invalid_argument("'{}' in '{}' is not a positive {}", s, text, integer ? "integer" : "number");
        if (v > max) return invalid_argument("'{}' in '{}' is above the most allowed, {:g}", s, text, max);
        // A rate of 1e-300 req/s made the gap between requests infinite, its int64 cast undefined:
        // requests went out every nanosecond (1.8e9 in a second). --request-rate's own floor.
        if (!integer && v < kMinRate)
            return invalid_argument("'{}' in '{}' is below the least allowed, {:g}", s, text, kMinRate);
        return v;
    };
    if (text.find(':') == std::string::npos) {
        std::string_view rest(text);
        while (!rest.empty()) {
            size_t comma = rest.find(',');
            STRATO_ASSIGN_OR_RETURN(double v, num(rest.substr(0, comma)));
            out.push_back(v);
            if (comma == std::string_view::npos) break;
            rest.remove_prefix(comma + 1);
        }
        if (out.empty()) return invalid_argument("empty level list");
        return out;
    }
    std::vector<std::string_view> parts;
    std::string_view rest(text);
    for (size_t c; (c = rest.find(':')) != std::string_view::npos; rest.remove_prefix(c + 1)) parts.push_back(rest.substr(0, c));
    parts.push_back(rest);
    if (parts.size() < 2 || parts.size() > 3)
        return invalid_argument("range '{}': expected start:end[:step] or start:end:xFACTOR", text);
    STRATO_ASSIGN_OR_RETURN(double start, num(parts[0]));
    STRATO_ASSIGN_OR_RETURN(double end, num(parts[1]));
    if (end < start) return invalid_argument("range '{}': end {} is below start {}", text, end, start);
    bool factor = parts.size() == 3 && !parts[2].empty() && parts[2][0] == 'x';
    double step = 1;
    if (parts.size() == 3) {
        STRATO_ASSIGN_OR_RETURN(step, num(factor ? parts[2].substr(1) : parts[2]));
        if (factor && step <= 1) return invalid_argument("range '{}': a factor must be > 1", text);
    }
    for (double v = start; v <= end * (1 + 1e-9); v = factor ? v * step : v + step) {
        out.push_back(integer ? std::round(v) : v);
        if (out.size() > 10000) return invalid_argument("range '{}' has more than 10000 levels", text);
    }
    if (factor && out.back() < end) out.push_back(end);  // 1:48:x2 ends at 48 too
    return out;
}

std::string format_table(const std::vector<PointResult>& points) {
    std::string out;
    bool rate = !points.empty() && points[0].rate_mode;
    out += fmt::format("{:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}\n", rate ? "rate" : "concurrency",
                       "req/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms", "errors");
    for (const auto& p : points) {
        const auto& h = p.m.latency;
        out += fmt::format("{:>12g} {:>10.1f} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}{}\n", p.level, p.m.throughput(),
                           ms(h, 50), ms(h, 90), ms(h, 95), ms(h, 99), ms(h, 99.9), ms(h, 100), p.m.errors(),
                           p.interrupted ? fmt::format("  (interrupted after {:.2f} s: partial)", p.m.seconds)
                                         : p.stable ? "" : "  (not stable)");
    }
    for (const auto& p : points) {
        const auto& m = p.m;
        std::string errs;
        auto add = [&](int64_t n, std::string_view what) {
            if (n) errs += fmt::format("{}{} {}", errs.empty() ? "" : ", ", n, what);
        };
        add(m.connect_errors, "connect");
        add(m.reset_errors, "reset/closed");
        add(m.timeouts, "timeout");
        add(m.protocol_errors, m.protocol_example.empty() ? std::string("bad response")
                                                          : fmt::format("bad response (first: {})", m.protocol_example));
        for (const auto& [code, n] : m.http) add(n, fmt::format("HTTP {}", code));
        if (!errs.empty()) out += fmt::format("  {:g}: errors: {}\n", p.level, errs);
        if (m.delayed) out += fmt::format("  {:g}: {} requests sent more than 1 ms late (the client could not keep up, or every connection was busy)\n", p.level, m.delayed);
        if (m.unfinished) out += fmt::format("  {:g}: {} requests unanswered at the end or never sent: not in the latencies\n", p.level, m.unfinished);
        if (m.late) out += fmt::format("  {:g}: {} requests answered in the grace after the measurement ended: not in the latencies or the throughput\n", p.level, m.late);
        if (m.latency.clamped())
            out += fmt::format("  {:g}: {} latencies above 60 s are counted as 60 s (the histogram's top)\n", p.level,
                               m.latency.clamped());
        if (p.server && p.server->requests > 0) {
            const auto& s = *p.server;
            out += fmt::format(
                "  {:g}: server: request {:.0f} us = queue {:.0f} + compute input {:.0f} + infer {:.0f} + output {:.0f} + overhead {:.0f}; batch {:.2f}\n",
                p.level, s.request_us, s.queue_us, s.compute_input_us, s.compute_infer_us, s.compute_output_us,
                s.overhead_us(), s.avg_batch);
        }
    }
    return out;
}

std::string format_csv(const std::vector<PointResult>& points, int64_t batch_size) {
    bool rate = !points.empty() && points[0].rate_mode;
    std::string out = fmt::format(
        "{},Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
        "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
        "Avg latency,Errors\n",
        rate ? "Request Rate" : "Concurrency");
    std::vector<const PointResult*> rows;
    for (const auto& p : points) rows.push_back(&p);
    std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->m.throughput() < b->m.throughput(); });
    for (const auto* p : rows) {
        const auto& h = p->m.latency;
        double avg = h.mean() / 1e3, q = 0, ci = 0, inf = 0, co = 0;
        if (p->server) q = p->server->queue_us, ci = p->server->compute_input_us, inf = p->server->compute_infer_us,
                        co = p->server->compute_output_us;
        double network = std::max(0.0, avg - q - ci - inf - co);
        auto us = [&](double pct) { return h.percentile(pct) / 1000; };
        out += fmt::format("{:g},{:.2f},0,{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},0,{},{},{},{},{:.0f},{}\n", p->level,
                           p->m.throughput() * static_cast<double>(batch_size), network, q, ci, inf, co, us(50), us(90),
                           us(95), us(99), avg, p->m.errors());
    }
    return out;
}

namespace {

json point_json(const PointResult& p) {
    const auto& m = p.m;
    const auto& h = m.latency;
    json lat = {{"min", h.min() / 1e3},         {"mean", h.mean() / 1e3},          {"stddev", h.stddev() / 1e3},
                {"p50", h.percentile(50) / 1e3}, {"p90", h.percentile(90) / 1e3},   {"p95", h.percentile(95) / 1e3},
                {"p99", h.percentile(99) / 1e3}, {"p99_9", h.percentile(99.9) / 1e3}, {"max", h.max() / 1e3}};
    json dist = json::array();
    for (const auto& [pct, ns] : h.distribution()) dist.push_back({pct, ns / 1e3});
    json http = json::object();
    for (const auto& [code, n] : m.http) http[std::to_string(code)] = n;
    json j = {{p.rate_mode ? "request_rate" : "concurrency", p.level},
              {"seconds", m.seconds},
              {"ok", m.ok},
              {"throughput", m.throughput()},
              {"latency_us", lat},
              {"distribution_us", dist},
              {"errors", {{"total", m.errors()}, {"connect", m.connect_errors}, {"reset", m.reset_errors},
                          {"timeout", m.timeouts}, {"protocol", m.protocol_errors},
                          {"protocol_example", m.protocol_example}, {"http", http}}},
              {"delayed", m.delayed},
              {"unfinished", m.unfinished},
              {"late", m.late},
              {"latencies_over_60s", m.latency.clamped()},
              {"bytes_received", m.bytes_received},
              {"windows", p.windows},
              {"stable", p.stable},
              {"interrupted", p.interrupted}};
    if (!p.timeline.empty()) {
        json tl = json::array();
        for (const auto& e : p.timeline)
            tl.push_back({{"t_s", e.t_s}, {"asked", e.asked}, {"throughput", e.throughput}, {"p50_us", e.p50_ns / 1e3},
                          {"p99_us", e.p99_ns / 1e3}, {"errors", e.errors}});
        j["timeline"] = tl;
    }
    if (p.server)
        j["server_us"] = {{"requests", p.server->requests},         {"request", p.server->request_us},
                          {"queue", p.server->queue_us},            {"compute_input", p.server->compute_input_us},
                          {"compute_infer", p.server->compute_infer_us}, {"compute_output", p.server->compute_output_us},
                          {"overhead", p.server->overhead_us()},    {"avg_batch", p.server->avg_batch}};
    return j;
}

}  // namespace

json to_json(const std::vector<PointResult>& points, const std::string& target, const RunOptions& o,
             const std::optional<SloResult>& slo) {
    json pts = json::array();
    for (const auto& p : points) pts.push_back(point_json(p));
    json j = {{"kind", "strato-loadtest"},
              {"version", 1},
              {"target", target},
              {"mode", o.load.mode == LoadOptions::Mode::kOpen ? "request_rate" : "concurrency"},
              {"threads", o.load.threads},
              {"poisson", o.load.poisson},
              {"busy_poll_us", static_cast<double>(o.load.busy_poll_ns) / 1e3},
              {"duration_s", o.duration_s},
              {"warmup_s", o.warmup_s},
              {"batch_size", o.batch_size},
              {"interrupted", std::any_of(points.begin(), points.end(), [](const auto& p) { return p.interrupted; }) ||
                                  (slo && slo->interrupted)},
              {"points", pts}};
    if (slo) {
        json probes = json::array();
        for (const auto& p : slo->probes) probes.push_back(point_json(p));
        j["slo"] = {{"p99_ms", slo->slo_p99_ns / 1e6}, {"found", slo->found}, {"best_rate", slo->best_rate},
                    {"at_max_rate", slo->capped}, {"interrupted", slo->interrupted}, {"probes", probes}};
        if (!slo->failed.is_ok()) j["slo"]["failed"] = slo->failed.message();  // why the search stopped early
    }
    return j;
}

}  // namespace strato::loadgen
