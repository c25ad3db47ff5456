#include "strato/monitor/monitor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <fstream>
#include <thread>

#include <time.h>

#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/core/log.h"
#include "strato/core/serial_worker.h"
#include "strato/core/signals.h"
#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/load.h"
#include "strato/loadgen/oip_target.h"
#include "strato/monitor/jsonl_sink.h"
#include "strato/serve/http/server.h"

namespace strato::monitor {

struct Monitor::Exporter {
    std::unique_ptr<serve::http::Server> server;
};

// Alert notifications, POSTed one at a time by a thread of their own: a receiver that hangs (5 s
// each) used to stop sampling, the exporter's freshness and --duration with it. A bounded queue; at
// the end of run() what is queued gets a few seconds to go out.
struct Monitor::Webhooks {
    SerialWorker worker{"webhooks", 256};
    int64_t dropped = 0;

    void push(std::string rule, std::string url_text, std::string body) {
        const bool kept = worker.submit([rule = std::move(rule), url_text = std::move(url_text),
                                         body = std::move(body)](bool run) {
            if (!run) return;
            auto url = loadgen::parse_url(url_text);  // (checked at create())
            auto reply = url ? loadgen::http_request(*url, "POST", url->target, body, 5000)
                             : Result<loadgen::HttpReply>(url.status());
            if (!reply.is_ok()) log::warn("alert {}: webhook {} failed: {}", rule, url_text, reply.status().message());
            else if (reply->status >= 300) log::warn("alert {}: webhook {} answered HTTP {}", rule, url_text, reply->status);
        });
        if (!kept && (++dropped == 1 || dropped % 100 == 0))  // the receiver is far behind: the oldest went
            log::warn("alert webhooks: {} notification(s) dropped, the receiver does not keep up", dropped);
    }

    // Waits until everything queued was sent, at most `limit`.
    void flush(std::chrono::milliseconds limit) {
        if (!worker.flush(limit))
            log::warn("alert webhooks: {} notification(s) not sent within {} s at exit", worker.pending(),
                      limit.count() / 1000);
    }
};

namespace {

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Result<std::unique_ptr<Monitor>> Monitor::create(MonitorOptions options) {
    if (!(options.interval_s > 0)) return invalid_argument("--interval must be > 0");
    for (const auto& r : options.rules) {
        if (r.action != "webhook") continue;
        STRATO_ASSIGN_OR_RETURN(loadgen::Url url, loadgen::parse_url(r.webhook));
        STRATO_ASSIGN_OR_RETURN(bool loopback, loadgen::is_loopback_host(url.host));
        if (!loopback && !options.allow_remote_webhooks)
            return invalid_argument("rule {}: webhook {} is not on this machine; pass --allow-remote-webhooks to send "
                                    "alerts off it",
                                    r.name, r.webhook);
    }
    std::unique_ptr<Monitor> m(new Monitor);
    m->options_ = options;
    m->proc_ = ProcSampler({.root = "/proc", .pids = options.pids});
    // A gap past Prometheus's 5-minute staleness (or three intervals) restarts pending "for"s.
    m->alerts_ = std::make_unique<AlertEngine>(options.rules, std::max(300.0, 3 * options.interval_s));
    if (options.replay.empty()) {
        auto nvml = Nvml::open(options.nvml_library);
        if (nvml.is_ok()) {
            m->nvml_ = *nvml;
            m->nvml_->set_dcgm_labels(options.dcgm_labels);
            const auto& g = m->nvml_->gpus();
            m->gpu_summary_ = fmt::format("{} GPU{}: {}{}", g.size(), g.size() == 1 ? "" : "s",
                                          g.empty() ? "" : g.front().name,
                                          m->nvml_->driver_version().empty()
                                              ? ""
                                              : fmt::format(" (driver {})", m->nvml_->driver_version()));
        } else {
            m->gpu_summary_ = nvml.status().message();
        }
    } else {
        std::error_code ec;
        if (!std::filesystem::exists(options.replay, ec))
            return not_found("--replay {}: no such file", options.replay);
        if (!std::filesystem::is_regular_file(options.replay, ec))
            return invalid_argument("--replay {}: not a file (expected a JSONL log from --jsonl or a metrics.jsonl)",
                                    options.replay);
        m->gpu_summary_ = "replaying " + options.replay;
    }
    if (options.port >= 0) {
        m->exporter_ = std::make_unique<Exporter>();
        serve::http::ServerOptions so;
        so.address = options.address;
        so.port = static_cast<uint16_t>(options.port);
        so.threads = 1;
        so.max_connections = 256;  // a scraper needs one; idle ones must not take the descriptors /proc reads need
        so.idle_timeout = std::chrono::seconds(75);  // longer than the common 60 s scrape interval
        so.server_name = "strato-monitor";
        so.body_limit_flag = "";  // no flag sets it here
        so.thread_name = "monitor-http";
        Monitor* self = m.get();
        m->exporter_->server = std::make_unique<serve::http::Server>(so, [self](serve::http::Request&& req,
                                                                                serve::http::Reply reply) {
            serve::http::Response r;
            std::string path = req.target.substr(0, req.target.find('?'));
            if (req.method != "GET" && req.method != "HEAD") {
                r.status = 405;
                r.headers.emplace_back("Allow", "GET, HEAD");
                r.body = "only GET and HEAD\n";
            } else if (path == "/metrics") {
                r.content_type = "text/plain; version=0.0.4; charset=utf-8";
                std::lock_guard<std::mutex> lock(self->text_mu_);
                r.body = self->text_;
                if (r.body.empty()) {
                    // Before the first sample: an empty 200 reads as "every series gone".
                    r.status = 503;
                    r.content_type = "text/plain";
                    r.headers.emplace_back("Retry-After", "1");
                    r.body = "no sample yet; the first comes within a second\n";
                }
            } else if (path == "/" || path == "/health") {
                r.content_type = "text/plain";
                r.body = "strato monitor: metrics at /metrics\n";
            } else {
                r.status = 404;
                r.body = "not found; metrics are at /metrics\n";
            }
            reply(std::move(r));
        });
        Status s = m->exporter_->server->start();
        if (!s.is_ok()) return s.with_context(fmt::format("exporter on {}:{}", options.address, options.port));
    }
    return m;
}

Monitor::~Monitor() {
    if (exporter_ && exporter_->server) exporter_->server->stop();
}

int Monitor::port() const { return exporter_ ? exporter_->server->port() : -1; }

void Monitor::stop() { stop_ = true; }

Snapshot Monitor::sample() {
    Snapshot s;
    s.unix_s = unix_now();
    // CLOCK_BOOTTIME: monotonic, and counting a suspend (steady_clock's CLOCK_MONOTONIC stops),
    // so a machine asleep is a gap between samples.
    timespec ts{};
    ::clock_gettime(CLOCK_BOOTTIME, &ts);
    s.mono_s = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    proc_.sample(s);
    if (nvml_) nvml_->sample(s);
    else s.notes.push_back(gpu_summary_);
    return s;
}

void Monitor::publish(const Snapshot& s) {
    std::string text = to_prometheus(s);
    std::lock_guard<std::mutex> lock(text_mu_);
    text_ = std::move(text);
}

// A rule on a metric the first sample does not have can never fire: a typo (gpu_utl), or a GPU
// metric on a machine without one. Said once, with the names there are.
void Monitor::warn_unknown_metrics(const Snapshot& s) const {
    std::set<std::string> names;
    for (const auto& m : s.metrics) names.insert(m.alias.empty() ? m.name : m.alias);
    for (const auto& r : options_.rules)
        if (s.find(r.metric).empty())
            log::warn("rule {}: no metric '{}' in {}, so it never fires here (metrics: {})", r.name, r.metric,
                      options_.replay.empty() ? "this machine's samples" : "the replayed log",
                      fmt::join(names, ", "));
}

Status Monitor::fire(const AlertEvent& e, MonitorSummary& summary) {
    if (e.firing) ++summary.alerts_fired;
    std::string line = e.describe();
    if (e.firing) log::warn("alert {}", line);
    else log::info("alert {}", line);
    if (e.rule->action == "webhook") {
        if (!webhooks_) webhooks_ = std::make_unique<Webhooks>();
        webhooks_->push(e.rule->name, e.rule->webhook, e.webhook_json());
    }
    if (e.firing && e.rule->action == "exit") summary.exit_alert = line;
    return Status::ok();
}

Result<MonitorSummary> Monitor::run() {
    MonitorSummary summary;
    // (a FIFO without a reader is waited for at each sample, never in open(): see JsonlSink)
    std::unique_ptr<JsonlSink> jsonl;
    if (!options_.jsonl.empty()) {
        STRATO_ASSIGN_OR_RETURN(jsonl, JsonlSink::open(options_.jsonl));
    }
    std::ifstream replay;
    int64_t replay_line = 0, skipped = 0;
    if (!options_.replay.empty()) {
        replay.open(options_.replay);
        if (!replay) return not_found("cannot read {}", options_.replay);
    }
    const auto start = std::chrono::steady_clock::now();
    auto next = start;
    const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(options_.interval_s));
    while (!stop_ && !signals::stop_requested()) {
        Snapshot s;
        if (replay.is_open()) {
            std::string line;
            if (!std::getline(replay, line)) break;
            ++replay_line;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            auto j = parse_json_bounded(line);
            std::string err;
            if (j.is_discarded()) {
                // A line cut off when a monitor was killed, with the next run's lines after it.
                if (++skipped <= 3)
                    log::warn("monitor: {}:{}: not JSON (a line cut off by a killed run?); skipped", options_.replay,
                              replay_line);
                continue;
            }
            // A training run's metrics.jsonl: only its "monitor" lines are samples.
            if (j.is_object() && j.contains("kind") && j["kind"] != "monitor") continue;
            if (!from_json(j, &s, &err)) return data_loss("{}:{}: {}", options_.replay, replay_line, err);
        } else {
            // (CPU utilisation is a difference: the first sample gets 100 ms since the sampler began;
            // the schedule starts there, or a short interval's second sample counted as missed)
            if (summary.samples == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
            s = sample();
            if (summary.samples == 0) next = std::chrono::steady_clock::now();
            // A watched process that exited ("process 4242 is gone") only left the page and the
            // log's "notes", without a word: each condition is said once as it appears.
            for (const auto& note : s.notes)
                if (note != gpu_summary_ && said_notes_.insert(note).second) log::warn("monitor: {}", note);
        }
        ++summary.samples;
        if (summary.samples == 1) warn_unknown_metrics(s);
        publish(s);
        if (jsonl) STRATO_RETURN_IF_ERROR(jsonl->append(json_text(to_json(s)) + '\n'));
        for (const AlertEvent& e : alerts_->evaluate(s)) STRATO_RETURN_IF_ERROR(fire(e, summary));
        if (!summary.exit_alert.empty()) break;
        if (options_.duration_s > 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= options_.duration_s)
            break;
        if (replay.is_open()) continue;  // replay as fast as the file reads
        next += interval;
        // Behind (the process was stopped, the machine slept): skip the missed samples rather
        // than take them back to back.
        if (const auto now = std::chrono::steady_clock::now(); next <= now && interval.count() > 0)
            next += ((now - next) / interval + 1) * interval;
        // --duration ends the run on time, not at the next sample after it
        const auto wake = options_.duration_s > 0
                              ? std::min(next, start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                           std::chrono::duration<double>(options_.duration_s)))
                              : next;
        while (!stop_ && !signals::stop_requested() && std::chrono::steady_clock::now() < wake)
            std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
                wake - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
        if (options_.duration_s > 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= options_.duration_s)
            break;
    }
    // A replay with an exporter keeps serving its last sample until stopped or --duration: it
    // ended before anyone could scrape it. (Not after an exit rule fired: that ends the run.)
    if (replay.is_open() && exporter_ && summary.samples > 0 && summary.exit_alert.empty() && !stop_ &&
        !signals::stop_requested()) {
        const bool timed = options_.duration_s > 0;
        log::info("monitor: replay done ({} samples); serving the last one at /metrics {}", summary.samples,
                  timed ? fmt::format("until {:g} s after the start", options_.duration_s)
                        : std::string("until Ctrl-C or SIGTERM"));
        while (!stop_ && !signals::stop_requested() &&
               (!timed || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
                              options_.duration_s))
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (jsonl) {
        // A stalled reader holds the end up a moment at most.
        jsonl->finish(std::chrono::milliseconds(static_cast<int64_t>(std::min(1.0, options_.interval_s) * 1000)));
        if (jsonl->dropped() > 0)
            log::warn("monitor: --jsonl {}: {} sample(s) not written (no reader, or the reader did not keep up)",
                      options_.jsonl, jsonl->dropped());
    }
    if (webhooks_) webhooks_->flush(std::chrono::seconds(5));
    if (replay.is_open() && summary.samples == 0)
        return data_loss("{}: no samples in it (expected JSON lines with a numeric \"t\", as --jsonl writes{})",
                         options_.replay, skipped > 0 ? fmt::format("; {} lines were not JSON", skipped) : "");
    if (skipped > 3) log::warn("monitor: {} lines of {} were not JSON and were skipped", skipped, options_.replay);
    return summary;
}

}  // namespace strato::monitor
