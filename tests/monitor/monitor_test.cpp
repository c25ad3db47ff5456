// Monitor: alert rule parsing and `for` semantics on synthetic snapshots, the exposition format,
// procfs values, and NVML through a stand-in driver library.

#include "strato/monitor/monitor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/oip_target.h"
#include "strato/monitor/alerts.h"
#include "strato/monitor/jsonl_sink.h"
#include "strato/monitor/nvml.h"
#include "strato/monitor/procfs.h"

namespace strato::monitor {
namespace {

Snapshot gpus(double t, std::vector<double> utils) {
    Snapshot s;
    s.unix_s = t;
    for (size_t i = 0; i < utils.size(); ++i)
        s.add("DCGM_FI_DEV_GPU_UTIL", "gpu_util", "GPU utilization (in %).", utils[i], {{"gpu", std::to_string(i)}});
    return s;
}

TEST(AlertRule, ParsesConditions) {
    auto r = parse_condition("gpu_util < 20 for 10m");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->metric, "gpu_util");
    EXPECT_EQ(r->op, "<");
    EXPECT_EQ(r->threshold, 20);
    EXPECT_EQ(r->for_s, 600);
    auto a = parse_condition("avg(DCGM_FI_DEV_GPU_UTIL) >= 90.5");
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->aggregate, "avg");
    EXPECT_EQ(a->metric, "DCGM_FI_DEV_GPU_UTIL");
    EXPECT_EQ(a->for_s, 0);
    for (const char* bad : {"", "gpu_util", "gpu_util < x", "gpu_util ~ 3", "median(x) > 1", "avg(x > 1",
                            "gpu_util < 20 during 5m", "gpu_util < 20 for 5y"})
        EXPECT_FALSE(parse_condition(bad).is_ok()) << bad;
    EXPECT_NE(parse_condition("gpu_util < x").status().message().find("'x' is not a finite number"), std::string::npos);
    // Found by review: thresholds that never compare, and a message that lost the word it names.
    for (const char* never : {"gpu_util > nan", "gpu_util > inf"})
        EXPECT_NE(parse_condition(never).status().message().find("is not a finite number"), std::string::npos) << never;
    EXPECT_NE(parse_condition("cpu_util > 1 junk").status().message().find("unexpected 'junk'"), std::string::npos)
        << parse_condition("cpu_util > 1 junk").status().message();
    // A duration without a unit was seconds; Prometheus refuses it (minutes may have been meant).
    EXPECT_NE(parse_condition("gpu_util < 20 for 10").status().message().find("'for 10' needs a unit, such as 10s or 10m"),
              std::string::npos)
        << parse_condition("gpu_util < 20 for 10").status().message();
    EXPECT_EQ(parse_condition("gpu_util < 20 for 1m30s")->for_s, 90);
}

TEST(AlertRule, RulesFileErrorsNameTheRule) {
    auto ok = parse_rules("[[rule]]\nname = \"idle\"\nwhen = \"gpu_util < 20 for 10m\"\naction = \"exit\"\n", "a.toml");
    ASSERT_TRUE(ok.is_ok()) << ok.status().message();
    EXPECT_EQ(ok->at(0).action, "exit");
    EXPECT_NE(parse_rules("[[rule]]\nname = \"x\"\n", "a.toml").status().message().find("a.toml rule 1: missing 'when'"),
              std::string::npos);
    EXPECT_NE(parse_rules("[[rule]]\nwhen = \"cpu_util > 1\"\naction = \"page\"\n", "a.toml").status().message().find(
                  "action must be log, webhook or exit"),
              std::string::npos);
    EXPECT_NE(parse_rules("[[rule]]\nwhen = \"cpu_util > 1\"\naction = \"webhook\"\n", "a.toml").status().message().find(
                  "needs webhook"),
              std::string::npos);
    // Found by review: a webhook without action = "webhook" was accepted and never called.
    for (const char* action : {"", "action = \"log\"\n", "action = \"exit\"\n"}) {
        auto quiet = parse_rules(std::string("[[rule]]\nname = \"w\"\nwhen = \"cpu_util > 1\"\n") + action +
                                     "webhook = \"http://127.0.0.1:5001/alerts\"\n",
                                 "a.toml");
        ASSERT_FALSE(quiet.is_ok()) << action;
        EXPECT_NE(quiet.status().message().find("a.toml rule 1 (w): webhook is set but action is"), std::string::npos)
            << quiet.status().message();
    }
    EXPECT_NE(parse_rules("[[rule]]\nwhen = \"cpu_util >\"\n", "a.toml").status().message().find("a.toml rule 1"),
              std::string::npos);
    EXPECT_FALSE(parse_rules("[[rule]]\nwhen = \"cpu_util > 1\"\ncolour = \"red\"\n", "a.toml").is_ok());
    EXPECT_FALSE(parse_rules("rules = 3\n", "a.toml").is_ok());
    EXPECT_FALSE(parse_rules("[[rule]\n", "a.toml").is_ok());
    // [rule] (one table, not an array of them) read as no rules at all: an alert that never fired.
    EXPECT_NE(parse_rules("[rule]\nwhen = \"cpu_util > 1\"\n", "a.toml").status().message().find("write [[rule]]"),
              std::string::npos);
    EXPECT_NE(parse_rules("[[rule]]\nname = \"a\"\nwhen = \"cpu_util > 1\"\n[[rule]]\nname = \"a\"\nwhen = \"cpu_util > 2\"\n",
                          "a.toml")
                  .status()
                  .message()
                  .find("a second rule named 'a'"),
              std::string::npos);
    // A default name ("rule2") meeting a written one: the message says which rule was unnamed.
    EXPECT_NE(parse_rules("[[rule]]\nname = \"rule2\"\nwhen = \"cpu_util > 1\"\n[[rule]]\nwhen = \"cpu_util > 2\"\n", "a.toml")
                  .status()
                  .message()
                  .find("a.toml rule 2: a second rule named 'rule2' (the name an unnamed rule 2 gets; name it)"),
              std::string::npos);
    EXPECT_NE(parse_rules("[[rule]]\nwhen = \"cpu_util > 1\"\n[[rule]]\nname = \"rule1\"\nwhen = \"cpu_util > 2\"\n", "a.toml")
                  .status()
                  .message()
                  .find("a.toml rule 2: a second rule named 'rule1' (the name unnamed rule 1 got; name that one)"),
              std::string::npos);
}

TEST(AlertEngine, FiresAfterTheDurationPerSeriesAndResolves) {
    AlertEngine e({*parse_condition("gpu_util < 20 for 10m")}, /*max_gap_s=*/3600);
    e.evaluate(gpus(0, {5, 50}));
    EXPECT_TRUE(e.evaluate(gpus(300, {5, 50})).empty());  // pending
    auto fired = e.evaluate(gpus(600, {5, 50}));
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_TRUE(fired[0].firing);
    EXPECT_EQ(fired[0].series(), "gpu=0");
    EXPECT_EQ(fired[0].since_unix_s, 0);
    EXPECT_TRUE(e.evaluate(gpus(700, {5, 50})).empty());  // fires once
    EXPECT_EQ(e.firing(), 1u);
    auto resolved = e.evaluate(gpus(710, {40, 50}));
    ASSERT_EQ(resolved.size(), 1u);
    EXPECT_FALSE(resolved[0].firing);
    EXPECT_EQ(e.firing(), 0u);
    // A blip above the threshold restarts the clock.
    e.evaluate(gpus(800, {5, 50}));
    e.evaluate(gpus(1300, {25, 50}));
    EXPECT_TRUE(e.evaluate(gpus(1400, {5, 50})).empty());
    EXPECT_TRUE(e.evaluate(gpus(1900, {5, 50})).empty());
    EXPECT_EQ(e.evaluate(gpus(2000, {5, 50})).size(), 1u);
}

TEST(AlertEngine, ResolvesWhenTheSeriesIsGone) {
    AlertEngine e({*parse_condition("gpu_util < 20"), *parse_condition("avg(gpu_util) < 20")});
    ASSERT_EQ(e.evaluate(gpus(0, {50, 5})).size(), 1u);
    auto gone = e.evaluate(gpus(10, {50}));  // GPU 1 fell off the bus
    ASSERT_EQ(gone.size(), 1u);
    EXPECT_FALSE(gone[0].firing);
    EXPECT_EQ(gone[0].series(), "gpu=1");
    EXPECT_EQ(gone[0].at_unix_s, 10);
    EXPECT_NE(gone[0].describe().find("gpu_util{gpu=1} is no longer sampled"), std::string::npos) << gone[0].describe();
    EXPECT_EQ(nlohmann::json::parse(gone[0].webhook_json())["status"], "resolved");
    EXPECT_EQ(e.firing(), 0u);
    // The aggregate's one series goes with the metric.
    ASSERT_EQ(e.evaluate(gpus(20, {5})).size(), 2u);
    EXPECT_EQ(e.firing(), 2u);
    auto none = e.evaluate(gpus(30, {}));
    ASSERT_EQ(none.size(), 2u);
    EXPECT_FALSE(none[0].firing || none[1].firing);
    EXPECT_EQ(e.firing(), 0u);
}

TEST(AlertEngine, AggregatesOverSeries) {
    AlertEngine e({*parse_condition("avg(gpu_util) > 90 for 10m")}, /*max_gap_s=*/3600);
    e.evaluate(gpus(0, {95, 92}));
    auto fired = e.evaluate(gpus(600, {95, 89}));
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_DOUBLE_EQ(fired[0].value, 92);
    EXPECT_EQ(fired[0].series(), "");
    EXPECT_TRUE(fired[0].labels.empty());
    auto j = nlohmann::json::parse(fired[0].webhook_json());
    EXPECT_EQ(j["version"], "4");
    EXPECT_EQ(j["alerts"][0]["status"], "firing");
    EXPECT_EQ(j["alerts"][0]["startsAt"], "1970-01-01T00:00:00Z");
}

// Found by review: "for" compared sample times only, so two logs joined (t = 1000, 1001,
// 90000) fired a "for 10m" after three samples, a clock that went back never fired, and a
// live wall-clock step fired early.
TEST(AlertEngine, AGapOrABackwardClockRestartsThePendingDuration) {
    AlertEngine e({*parse_condition("gpu_util < 20 for 10m")});  // gaps past 300 s
    e.evaluate(gpus(1000, {5}));
    e.evaluate(gpus(1001, {5}));
    EXPECT_TRUE(e.evaluate(gpus(90000, {5})).empty()) << "a gap is no ten minutes of samples";
    for (double t = 90060; t < 90600; t += 60) EXPECT_TRUE(e.evaluate(gpus(t, {5})).empty()) << t;
    EXPECT_EQ(e.evaluate(gpus(90600, {5})).size(), 1u);

    AlertEngine back({*parse_condition("gpu_util < 20 for 1m")});
    back.evaluate(gpus(1000, {5}));
    back.evaluate(gpus(1030, {5}));
    EXPECT_TRUE(back.evaluate(gpus(500, {5})).empty()) << "the clock went back: pending again";
    EXPECT_TRUE(back.evaluate(gpus(530, {5})).empty());
    auto fired = back.evaluate(gpus(560, {5}));
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(fired[0].since_unix_s, 500);

    // A log sampled every 6 minutes has no gaps at 6 minutes: its "for 10m" fires after 10 minutes.
    AlertEngine sparse({*parse_condition("gpu_util < 20 for 10m")});
    size_t fired_at = 0;
    for (int i = 0; i < 8 && fired_at == 0; ++i)
        if (!sparse.evaluate(gpus(360.0 * i, {5})).empty()) fired_at = static_cast<size_t>(i);
    // (its first gap, with none to compare, is judged by the 5 minutes alone: the duration starts
    // at the second sample)
    EXPECT_EQ(fired_at, 3u) << "at 1080 s, the first sample 10 minutes after the second";

    // Live samples measure on the monotonic clock: a wall-clock step of an hour changes nothing.
    AlertEngine live({*parse_condition("gpu_util < 20 for 10m")});
    Snapshot a = gpus(1000, {5}), b = gpus(4600, {5});
    a.mono_s = 50;
    b.mono_s = 51;
    live.evaluate(a);
    EXPECT_TRUE(live.evaluate(b).empty());
}

TEST(Conditions, TabsUpperCaseForAndLabelSelectors) {
    auto tab = parse_condition("cpu_util\t>=\t0\tFOR 1s");
    ASSERT_TRUE(tab.is_ok()) << tab.status().message();
    EXPECT_EQ(tab->metric, "cpu_util");
    EXPECT_EQ(tab->for_s, 1);
    auto labels = parse_condition("gpu_util{gpu=\"0\"} < 20");
    ASSERT_FALSE(labels.is_ok());
    EXPECT_NE(labels.status().message().find("label selectors ({...}) are not supported"), std::string::npos)
        << labels.status().message();
    // A webhook URL is checked with the rules, naming the file and the rule.
    auto hook = parse_rules("[[rule]]\nname = \"h\"\nwhen = \"cpu_util > 1\"\naction = \"webhook\"\n"
                            "webhook = \"http://127.0.0.1:9/x y\"\n",
                            "r.toml");
    ASSERT_FALSE(hook.is_ok());
    EXPECT_EQ(hook.status().message().rfind("r.toml rule 1 (h): webhook: URL", 0), 0u) << hook.status().message();
    EXPECT_NE(hook.status().message().find("percent-encode"), std::string::npos);
}

TEST(Exposition, PrometheusTextAndJsonRoundTrip) {
    Snapshot s = gpus(1.5, {7, 8});
    s.add("strato_disk_read_bytes_total", "disk_read_bytes", "Bytes read", 1024, {{"device", "v\"da"}}, true);
    std::string text = to_prometheus(s);
    EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 7\n"
                        "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 8\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("# TYPE strato_disk_read_bytes_total counter\n"), std::string::npos);
    EXPECT_NE(text.find("device=\"v\\\"da\""), std::string::npos);
    // A process named in bytes that are not UTF-8: U+FFFD, or Prometheus refuses the whole page.
    s.add("strato_process_cpu_seconds_total", "process_cpu", "CPU", 1, {{"name", "sl\xff\xfe\"q\\ \xc3\xa9"}}, true);
    text = to_prometheus(s);
    EXPECT_NE(text.find("name=\"sl\xEF\xBF\xBD\xEF\xBF\xBD\\\"q\\\\ \xc3\xa9\""), std::string::npos) << text;
    Snapshot back;
    std::string err;
    ASSERT_TRUE(from_json(to_json(s), &back, &err)) << err;
    EXPECT_EQ(back.unix_s, 1.5);
    EXPECT_EQ(back.find("gpu_util").size(), 2u);
    EXPECT_FALSE(from_json(nlohmann::json::parse("{\"cpu_util\": 3}"), &back, &err));
    EXPECT_FALSE(from_json(nlohmann::json::parse("{\"t\": 1, \"cpu_util\": \"high\"}"), &back, &err));
}

// Found by review: a replay exported its log's keys as metric names: `cpu_util`, not the live
// `strato_cpu_utilization_percent`, counters typed as gauges, and a stray key such as "bad name"
// written as is, which made Prometheus refuse the whole page.
TEST(Exposition, AReplayExportsTheLiveNamesTypesAndOnlyValidNames) {
    Snapshot live;
    ProcSampler().sample(live);
    auto nvml = Nvml::open(FAKE_NVML);
    ASSERT_TRUE(nvml.is_ok()) << nvml.status().message();
    (*nvml)->sample(live);
    Snapshot back;
    std::string err;
    ASSERT_TRUE(from_json(to_json(live), &back, &err)) << err;
    size_t checked = 0;
    for (const Metric& m : live.metrics) {
        if (m.alias.empty()) continue;
        auto replayed = back.find(m.alias);
        ASSERT_FALSE(replayed.empty()) << m.alias;
        for (const Metric* r : replayed) {
            EXPECT_EQ(r->name, m.name) << m.alias;
            EXPECT_EQ(r->help, m.help) << m.alias;
            EXPECT_EQ(r->counter, m.counter) << m.alias;
            ++checked;
        }
    }
    EXPECT_GT(checked, 10u);
    EXPECT_EQ(back.find("DCGM_FI_DEV_GPU_UTIL").size(), 2u);  // a rule may name it in a replay too
    const std::string text = to_prometheus(back);
    EXPECT_NE(text.find("# TYPE strato_disk_read_bytes_total counter\n"), std::string::npos) << text;

    Snapshot odd;
    ASSERT_TRUE(
        from_json(nlohmann::json::parse(R"({"t": 1, "bad name": 3, "1abc": 4, "x\"y": 2, "loss": 0.5})"), &odd, &err))
        << err;
    const std::string page = to_prometheus(odd);
    EXPECT_EQ(page,
              "# HELP loss Replayed from the log's key loss\n# TYPE loss gauge\nloss 0.5\n");  // (promtool wants help)
}

TEST(ProcSampler, ReadsThisMachine) {
    ProcSampler p;
    Snapshot s;
    p.sample(s);
    ASSERT_EQ(s.find("mem_total_bytes").size(), 1u);
    EXPECT_GT(s.find("mem_total_bytes")[0]->value, 1e8);
    EXPECT_GE(s.find("cpu_util")[0]->value, 0);
    EXPECT_LE(s.find("cpu_util")[0]->value, 100);
    bool self = false;
    for (const Metric* m : s.find("proc_rss_bytes"))
        for (const auto& [k, v] : m->labels) self |= k == "pid" && v == std::to_string(getpid());
    EXPECT_TRUE(self);
    EXPECT_FALSE(s.find("net_rx_bytes").empty());
}

TEST(Nvml, NoDriverIsACleanNoGpu) {
    auto n = Nvml::open("/nonexistent/libnvidia-ml.so.1");
    ASSERT_FALSE(n.is_ok());
    EXPECT_EQ(n.status().message().rfind("no GPU: cannot load NVML", 0), 0u);
}

TEST(Nvml, ReadsGpusThroughTheDriverLibrary) {
    std::string state = testing::TempDir() + "/nvml_state";
    std::ofstream(state) << "3 17 4\n";
    setenv("FAKE_NVML_STATE", state.c_str(), 1);
    auto n = Nvml::open(FAKE_NVML);
    ASSERT_TRUE(n.is_ok()) << n.status().message();
    EXPECT_EQ((*n)->gpus().size(), 3u);
    EXPECT_EQ((*n)->driver_version(), "999.99-fake");
    EXPECT_NEAR((*n)->gpus()[0].memory_total_mib, 144384, 1e-9);
    Snapshot s;
    (*n)->sample(s);
    auto util = s.find("DCGM_FI_DEV_GPU_UTIL");
    ASSERT_EQ(util.size(), 3u);
    EXPECT_EQ(util[2]->value, 17);
    EXPECT_EQ(s.find("gpu_power_w")[0]->value, 123.456);
    EXPECT_EQ(util[1]->labels[1], (std::pair<std::string, std::string>("uuid", "GPU-fake-2")));
    (*n)->set_dcgm_labels(true);
    Snapshot dcgm;
    (*n)->sample(dcgm);
    EXPECT_EQ(dcgm.metrics[0].labels[3].first, "modelName");
    unsetenv("FAKE_NVML_STATE");
}

TEST(Monitor, ReplayRunsTheRulesAndStopsOnAnExitAlert) {
    std::string log = testing::TempDir() + "/replay.jsonl";
    {
        std::ofstream out(log);
        for (int t = 0; t <= 20; ++t) out << "{\"t\": " << t * 60 << ", \"gpu_util\": {\"0\": " << (t < 5 ? 80 : 3) << "}}\n";
    }
    MonitorOptions o;
    o.port = -1;
    o.replay = log;
    o.rules = *parse_rules("[[rule]]\nname = \"idle\"\nwhen = \"gpu_util < 20 for 10m\"\naction = \"exit\"\n", "r");
    auto m = Monitor::create(o);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    auto summary = (*m)->run();
    ASSERT_TRUE(summary.is_ok()) << summary.status().message();
    EXPECT_EQ(summary->samples, 16);  // util drops at t = 300 s; fires at t = 900 s, the 16th line
    // Found by review: a replay named the series "series=0", the live monitor "gpu=0".
    EXPECT_NE(summary->exit_alert.find("idle firing: gpu_util{gpu=0} = 3 < 20"), std::string::npos)
        << summary->exit_alert;

    std::ofstream(log, std::ios::app) << "{\"t\": \"later\"}\n";
    o.rules[0].action = "log";
    auto bad = (*Monitor::create(o))->run();
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("replay.jsonl:22"), std::string::npos) << bad.status().message();
}

// Found by review: `when = "cpu_util > +1"` was refused (from_chars takes no '+').
TEST(AlertRule, AThresholdMayHaveOneLeadingPlus) {
    auto r = parse_condition("cpu_util > +1.5");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->threshold, 1.5);
    for (const char* bad : {"cpu_util > ++1", "cpu_util > +-1", "cpu_util > +"})
        EXPECT_NE(parse_condition(bad).status().message().find("is not a finite number"), std::string::npos) << bad;
}

// Found by review: a replayed log whose t is negative never fired a "for" rule (-1 marked "not
// holding yet" and "no sample yet").
TEST(AlertEngine, ForRulesFireOnANegativeClock) {
    AlertEngine e({*parse_condition("gpu_util < 20 for 10m")});
    std::vector<AlertEvent> fired;
    double at = 0;
    for (double t = -1200; t <= 0 && fired.empty(); t += 60) {
        fired = e.evaluate(gpus(t, {5}));
        at = t;
    }
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(at, -600);
    EXPECT_EQ(fired[0].since_unix_s, -1200);
    // A gap still restarts the duration there.
    AlertEngine gap({*parse_condition("gpu_util < 20 for 10m")});
    gap.evaluate(gpus(-5000, {5}));
    gap.evaluate(gpus(-4990, {5}));
    EXPECT_TRUE(gap.evaluate(gpus(-1000, {5})).empty());
    EXPECT_TRUE(gap.evaluate(gpus(-500, {5})).empty());
}

// Found by review: alerts carried their series as one label series="gpu=0" (Alertmanager routes
// and group_by could not match gpu), and a replay gave series=0. Both now carry gpu="0".
TEST(AlertEngine, AlertsCarryTheSeriesLabelsLiveAndReplayed) {
    const AlertRule rule = *parse_condition("gpu_util < 20");
    Snapshot live;
    live.unix_s = 10;
    live.add("DCGM_FI_DEV_GPU_UTIL", "gpu_util", "", 5,
             {{"gpu", "1"}, {"uuid", "GPU-x"}, {"device", "nvidia1"}, {"model_name", "H200"}});
    live.add("strato_disk_read_bytes_total", "disk_read_bytes", "", 5, {{"device", "sda"}}, true);
    live.add("strato_process_threads", "proc_threads", "", 5, {{"pid", "42"}, {"comm", "python"}});
    Snapshot replayed;
    std::string err;
    ASSERT_TRUE(from_json(to_json(live), &replayed, &err)) << err;
    for (const char* when : {"gpu_util < 20", "disk_read_bytes < 20", "proc_threads < 20"}) {
        AlertEngine a({*parse_condition(when)}), b({*parse_condition(when)});
        auto l = a.evaluate(live), r = b.evaluate(replayed);
        ASSERT_EQ(l.size(), 1u) << when;
        ASSERT_EQ(r.size(), 1u) << when;
        EXPECT_EQ(l[0].labels, r[0].labels) << when;
        EXPECT_EQ(l[0].describe(), r[0].describe()) << when;
    }
    AlertEngine e({rule});
    auto fired = e.evaluate(replayed);
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(fired[0].labels, (SeriesLabels{{"gpu", "1"}}));
    auto j = nlohmann::json::parse(fired[0].webhook_json());
    EXPECT_EQ(j["alerts"][0]["labels"], (nlohmann::json{{"alertname", fired[0].rule->name}, {"severity", "warning"},
                                                        {"gpu", "1"}}))
        << j.dump();
    EXPECT_EQ(j["commonLabels"]["gpu"], "1");
    EXPECT_FALSE(j["alerts"][0]["labels"].contains("series"));
    EXPECT_NE(fired[0].describe().find("gpu_util{gpu=1} = 5 < 20"), std::string::npos) << fired[0].describe();
    AlertEngine d({*parse_condition("proc_threads < 20")});
    EXPECT_EQ(d.evaluate(live).at(0).labels, (SeriesLabels{{"pid", "42"}}));
}

// Found by review: /proc/stat counters that went back (a container's virtualised /proc/stat after
// its CPU set shrank; an idle count that went back) wrapped the unsigned differences: cpu_util read
// ~100 % or 200 %, and fired "cpu_util > 95" rules on an idle machine.
TEST(ProcSampler, CpuCountersThatGoBackAreNoReading) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(testing::TempDir()) / ("procstat-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto util_after = [&](ProcSampler& p, const char* stat) {
        std::ofstream(dir / "stat") << stat;
        Snapshot s;
        p.sample(s);
        return s.find("cpu_util").at(0)->value;
    };
    std::ofstream(dir / "stat") << "cpu  100 0 100 800 0 0 0 0\n";
    ProcSampler p({.root = dir.string(), .sys_root = (dir / "sys").string()});
    EXPECT_EQ(util_after(p, "cpu  200 0 100 900 0 0 0 0\n"), 50);  // busy +100 of +200
    EXPECT_EQ(util_after(p, "cpu  50 0 50 400 0 0 0 0\n"), 50);    // all went back: no new reading
    EXPECT_EQ(util_after(p, "cpu  80 0 50 470 0 0 0 0\n"), 30);    // measured from there
    EXPECT_EQ(util_after(p, "cpu  180 0 50 420 0 0 0 0\n"), 100);  // idle went back: at most 100 %
    EXPECT_EQ(util_after(p, "cpu  170 0 50 520 0 0 0 0\n"), 100);  // busy went back: no new reading
    EXPECT_EQ(util_after(p, "cpu  190 0 50 600 0 0 0 0\n"), 20);
    fs::remove_all(dir);
}

// Found by review: a --pid process that exited, its id given by the kernel to another process,
// went on being reported with the newcomer's CPU time and memory. The start time tells them apart.
TEST(ProcSampler, AReusedPidIsAnotherProcess) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(testing::TempDir()) / ("procpid-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "4242");
    auto stat = [&](const char* comm, const char* start) {
        std::ofstream(dir / "4242/stat") << "4242 (" << comm << ") S 1 1 1 0 -1 0 0 0 0 0 300 100 0 0 20 0 3 0 "
                                         << start << " 1000 10 0\n";
        std::ofstream(dir / "4242/statm") << "100 10 5 1 0 50 0\n";
    };
    ProcSampler p({.root = dir.string(), .sys_root = (dir / "sys").string(), .pids = {4242}});
    auto threads = [&](Snapshot& s) {
        p.sample(s);
        for (const Metric* m : s.find("proc_threads"))
            if (m->labels.at(0).second == "4242") return m->value;
        return -1.0;
    };
    stat("train) x", "5000");
    Snapshot a, b, c, d;
    EXPECT_EQ(threads(a), 3);
    stat("python3", "5000");  // the same process after an exec
    EXPECT_EQ(threads(b), 3);
    stat("other", "9000");  // the id now names another process
    EXPECT_EQ(threads(c), -1);
    EXPECT_NE(std::find(c.notes.begin(), c.notes.end(), "process 4242 is gone (its id now names another process)"),
              c.notes.end());
    stat("train) x", "5000");
    EXPECT_EQ(threads(d), 3);
    fs::remove_all(dir);
}

// Found by review: a --pid process that exited but was not yet reaped by its parent (a zombie:
// its /proc entry stays, state Z, no memory) went on being reported as live with 0 bytes
// resident. It is gone; a leader thread that exited while the others run (Z, with memory) is not.
TEST(ProcSampler, AZombieIsGone) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(testing::TempDir()) / ("proczombie-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "4243");
    auto stat = [&](const char* state, const char* statm) {
        std::ofstream(dir / "4243/stat") << "4243 (train) " << state
                                         << " 1 1 1 0 -1 0 0 0 0 0 300 100 0 0 20 0 3 0 5000 1000 10 0\n";
        std::ofstream(dir / "4243/statm") << statm;
    };
    ProcSampler p({.root = dir.string(), .sys_root = (dir / "sys").string(), .pids = {4243}});
    auto watched = [&](Snapshot& s) {
        p.sample(s);
        for (const Metric* m : s.find("proc_rss_bytes"))
            if (m->labels.at(0).second == "4243") return true;
        return false;
    };
    Snapshot live, leader_gone, zombie;
    stat("S", "100 10 5 1 0 50 0\n");
    EXPECT_TRUE(watched(live));
    stat("Z", "100 10 5 1 0 50 0\n");  // the main thread exited, the others run
    EXPECT_TRUE(watched(leader_gone));
    stat("Z", "0 0 0 0 0 0 0\n");
    EXPECT_FALSE(watched(zombie));
    EXPECT_NE(std::find(zombie.notes.begin(), zombie.notes.end(), "process 4243 is gone"), zombie.notes.end());
    fs::remove_all(dir);
}

// Found by review: /proc/diskstats' partitions (sda and sda1), device-mapper volumes and zram
// were each counted, so sum(disk_read_bytes) counted bytes two or three times.
TEST(ProcSampler, CountsWholeDisksOnly) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(testing::TempDir()) / ("procfs-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "proc");
    for (const char* d : {"sda", "nvme0n1", "dm-0/slaves/sda2", "zram0", "loop0", "md0/slaves"})
        fs::create_directories(dir / "sys/block" / d);
    std::ofstream(dir / "proc/diskstats") << "   8       0 sda 10 0 100 0 10 0 1000 0 0 0 0\n"
                                             "   8       1 sda1 5 0 40 0 5 0 400 0 0 0 0\n"
                                             "   8       2 sda2 5 0 60 0 5 0 600 0 0 0 0\n"
                                             " 259       0 nvme0n1 1 0 8 0 1 0 16 0 0 0 0\n"
                                             " 259       1 nvme0n1p1 1 0 8 0 1 0 16 0 0 0 0\n"
                                             " 253       0 dm-0 5 0 60 0 5 0 600 0 0 0 0\n"
                                             "   9       0 md0 1 0 2 0 1 0 2 0 0 0 0\n"
                                             " 252       0 zram0 1 0 2 0 1 0 2 0 0 0 0\n"
                                             "   7       0 loop0 1 0 2 0 1 0 2 0 0 0 0\n";
    ProcSampler p({.root = (dir / "proc").string(), .sys_root = (dir / "sys").string()});
    Snapshot s;
    p.sample(s);
    std::vector<std::string> devices;
    double read = 0;
    for (const Metric* m : s.find("disk_read_bytes")) {
        devices.push_back(m->labels.at(0).second);
        read += m->value;
    }
    // (md0 has no slaves: a disk of its own here)
    EXPECT_EQ(devices, (std::vector<std::string>{"sda", "nvme0n1", "md0"}));
    EXPECT_EQ(read, (100 + 8 + 2) * 512.0);
    fs::remove_all(dir);
}

// Found by review: after logrotate renamed the log (no copytruncate), every later sample went on
// into the renamed file, and after its compression into a deleted one: the log at the path never
// came back. A moved or removed log is started anew at its path.
TEST(JsonlSink, ARotatedLogStartsAnewAtItsPath) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(testing::TempDir()) / ("rotate-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string log = (dir / "m.jsonl").string();
    auto read = [](const fs::path& p) {
        std::ifstream in(p);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    auto sink = JsonlSink::open(log);
    ASSERT_TRUE(sink.is_ok()) << sink.status().message();
    ASSERT_TRUE((*sink)->append("{\"t\": 1}\n").is_ok());
    fs::rename(log, log + ".1");
    ASSERT_TRUE((*sink)->append("{\"t\": 2}\n").is_ok());
    EXPECT_EQ(read(log + ".1"), "{\"t\": 1}\n");
    EXPECT_EQ(read(log), "{\"t\": 2}\n");
    fs::remove(log);
    ASSERT_TRUE((*sink)->append("{\"t\": 3}\n").is_ok());
    EXPECT_EQ(read(log), "{\"t\": 3}\n");
    ASSERT_TRUE((*sink)->append("{\"t\": 4}\n").is_ok());  // the same file again: no reopening
    EXPECT_EQ(read(log), "{\"t\": 3}\n{\"t\": 4}\n");
    fs::remove(log);
    fs::create_directory(log);  // something else in its place: an error, not a hang or a loss
    auto replaced = (*sink)->append("{\"t\": 5}\n");
    ASSERT_FALSE(replaced.is_ok());
    EXPECT_NE(replaced.message().find("not a regular file"), std::string::npos) << replaced.message();
    fs::remove_all(dir);
}

// Found by review: --jsonl on a FIFO without a reader blocked for ever in open(), deaf to
// SIGTERM and --duration; a reader that stopped reading could stall the loop the same way.
TEST(JsonlSink, AFifoNeverBlocks) {
    const std::string fifo = testing::TempDir() + "/sink-" + std::to_string(getpid()) + ".fifo";
    ::unlink(fifo.c_str());
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto sink = JsonlSink::open(fifo);
    ASSERT_TRUE(sink.is_ok()) << sink.status().message();
    JsonlSink& k = **sink;
    EXPECT_FALSE(k.regular());
    EXPECT_FALSE(k.is_open());  // no reader: waiting, not blocked
    ASSERT_TRUE(k.append("{\"t\": 1}\n").is_ok());
    EXPECT_EQ(k.dropped(), 1);
    const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(reader, 0);
    ASSERT_TRUE(k.append("{\"t\": 2}\n").is_ok());
    EXPECT_TRUE(k.is_open());
    char buf[256];
    ASSERT_EQ(::read(reader, buf, sizeof buf), 9);
    EXPECT_EQ(std::string(buf, 9), "{\"t\": 2}\n");
    // A reader that stops reading: the pipe fills, later lines are dropped, none blocks.
    const std::string big(3000, 'x');
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(k.append("{\"x\": \"" + big + "\"}\n").is_ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    EXPECT_GT(k.dropped(), 50);
    // What was written is whole lines only.
    std::string got;
    for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    EXPECT_FALSE(got.empty());
    // (the pipe took a line's start; its rest waits in the sink for the next append: every line
    // ended so far is one of those appended, never two run together or a cut one)
    const std::string line = "{\"x\": \"" + big + "\"}";
    size_t lines = 0;
    for (size_t at = 0, nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1, ++lines)
        EXPECT_EQ(got.compare(at, nl - at, line), 0) << "line " << lines;
    EXPECT_GT(lines, 0u);
    // The reader goes away: no SIGPIPE, the sink waits for the next one.
    ::close(reader);
    ASSERT_TRUE(k.append("{\"t\": 3}\n").is_ok());
    ASSERT_TRUE(k.append("{\"t\": 4}\n").is_ok());
    EXPECT_FALSE(k.is_open());
    k.finish(std::chrono::milliseconds(100));
    ::unlink(fifo.c_str());
}

// Found by review: `--jsonl -` where standard output is a socket (a systemd service's journal, a
// socketpair a supervisor made) failed with "is a socket": open() cannot open one. The process's
// own descriptor is written instead, without waiting, and a reader that goes away is no SIGPIPE.
TEST(JsonlSink, StandardOutputThatIsASocket) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    std::fflush(stdout);
    const int saved = ::dup(STDOUT_FILENO);
    ASSERT_GE(saved, 0);
    ASSERT_EQ(::dup2(sv[1], STDOUT_FILENO), STDOUT_FILENO);
    auto sink = JsonlSink::open("/dev/stdout");
    Status first = sink.is_ok() ? (*sink)->append("{\"t\": 1}\n") : sink.status();
    char buf[64] = {};
    const ssize_t got = ::recv(sv[0], buf, sizeof buf, MSG_DONTWAIT);
    ::close(sv[0]);  // the reader goes away: the next lines are dropped, the sink goes on
    Status after = sink.is_ok() ? (*sink)->append("{\"t\": 2}\n") : Status::ok();
    Status later = sink.is_ok() ? (*sink)->append("{\"t\": 3}\n") : Status::ok();
    ::dup2(saved, STDOUT_FILENO);  // (gtest's own output needs it back before any check)
    ::close(saved);
    ::close(sv[1]);
    ASSERT_TRUE(sink.is_ok()) << sink.status().message();
    EXPECT_TRUE(first.is_ok()) << first.message();
    ASSERT_EQ(got, 9);
    EXPECT_EQ(std::string(buf, 9), "{\"t\": 1}\n");
    EXPECT_TRUE(after.is_ok()) << after.message();
    EXPECT_TRUE(later.is_ok()) << later.message();
    EXPECT_FALSE((*sink)->regular());
    EXPECT_EQ((*sink)->dropped(), 2);
    (*sink)->finish(std::chrono::milliseconds(10));
    // A socket that is not this process's output cannot be opened: still an error.
    const std::string path = testing::TempDir() + "/sink-" + std::to_string(getpid()) + ".sock";
    ::unlink(path.c_str());
    const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    auto other = JsonlSink::open(path);
    ASSERT_FALSE(other.is_ok());
    EXPECT_NE(other.status().message().find("is a socket"), std::string::npos) << other.status().message();
    ::close(l);
    ::unlink(path.c_str());
}

// Found by review: a GPU that stopped answering (off the bus, NVML_ERROR_GPU_IS_LOST) lost its
// series from /metrics and the log without a word; a note names it and NVML's error.
TEST(Nvml, AGpuThatAnswersNoQueryIsNoted) {
    std::string state = testing::TempDir() + "/nvml_state_lost";
    std::ofstream(state) << "2 50 10\n";
    setenv("FAKE_NVML_STATE", state.c_str(), 1);
    auto n = Nvml::open(FAKE_NVML);
    ASSERT_TRUE(n.is_ok()) << n.status().message();
    Snapshot fine;
    (*n)->sample(fine);
    EXPECT_TRUE(fine.notes.empty());
    std::ofstream(state) << "2 50 10 15\n";  // every device query: NVML_ERROR_GPU_IS_LOST
    Snapshot lost;
    (*n)->sample(lost);
    unsetenv("FAKE_NVML_STATE");
    EXPECT_TRUE(lost.find("gpu_util").empty());
    ASSERT_EQ(lost.notes.size(), 2u);
    EXPECT_EQ(lost.notes[0], "GPU 0 (GPU-fake-1): NVML answers no query: GPU is lost");
}

// Found by review: a GPU NVML counts but gives no handle to (lost before the start) was left out
// without a word, and with every GPU so the monitor said "0 GPUs: " and sampled nothing.
TEST(Nvml, AGpuWithoutAHandleIsNoted) {
    std::string state = testing::TempDir() + "/nvml_state_nohandle";
    setenv("FAKE_NVML_STATE", state.c_str(), 1);
    std::ofstream(state) << "2 50 10 0 15\n";  // GPU 0: NVML_ERROR_GPU_IS_LOST for its handle
    auto one = Nvml::open(FAKE_NVML);
    std::ofstream(state) << "2 50 10 0 115\n";  // every GPU
    auto none = Nvml::open(FAKE_NVML);
    unsetenv("FAKE_NVML_STATE");
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    ASSERT_EQ((*one)->gpus().size(), 1u);
    EXPECT_EQ((*one)->gpus()[0].index, 1);
    Snapshot s;
    (*one)->sample(s);
    EXPECT_EQ(s.find("gpu_util").size(), 1u);
    EXPECT_EQ(s.notes, std::vector<std::string>{"GPU 0: NVML gives no handle to it: GPU is lost"});
    ASSERT_FALSE(none.is_ok());
    EXPECT_EQ(none.status().message(), "no GPU: NVML counts 2 devices but gives a handle to none: GPU is lost");
}

TEST(Monitor, DurationOrStopEndsARunWhoseFifoHasNoReader) {
    const std::string fifo = testing::TempDir() + "/mon-" + std::to_string(getpid()) + ".fifo";
    ::unlink(fifo.c_str());
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    MonitorOptions o;
    o.port = -1;
    o.interval_s = 0.05;
    o.duration_s = 1.0;  // (0.4 s took one sample only, under a sanitizer on a loaded machine)
    o.jsonl = fifo;
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    auto m = Monitor::create(o);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    auto run = std::async(std::launch::async, [&] { return (*m)->run(); });
    const bool ended = run.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    if (!ended) {  // blocked in open(): a reader lets it go, so the test can end
        const int unblock = ::open(fifo.c_str(), O_RDONLY);
        run.wait();
        ::close(unblock);
    }
    ASSERT_TRUE(ended) << "--duration 1s with no reader on the FIFO did not end in 10 s";
    auto summary = run.get();
    ASSERT_TRUE(summary.is_ok()) << summary.status().message();
    EXPECT_GE(summary->samples, 2);
    // Without --duration: stop() (SIGINT/SIGTERM) ends it.
    o.duration_s = 0;
    auto m2 = Monitor::create(o);
    ASSERT_TRUE(m2.is_ok()) << m2.status().message();
    auto run2 = std::async(std::launch::async, [&] { return (*m2)->run(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (*m2)->stop();
    const bool stopped = run2.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    if (!stopped) {
        const int unblock = ::open(fifo.c_str(), O_RDONLY);
        run2.wait();
        ::close(unblock);
    }
    EXPECT_TRUE(stopped) << "stop() did not end a run whose FIFO has no reader";
    ::unlink(fifo.c_str());
}

// Found by review: `monitor --replay FILE --port P` exited before anyone could scrape P.
TEST(Monitor, AReplayWithAnExporterServesItsLastSampleUntilStopped) {
    const std::string log = testing::TempDir() + "/replay-serve.jsonl";
    std::ofstream(log) << "{\"t\": 0, \"gpu_util\": {\"0\": 40}}\n{\"t\": 60, \"gpu_util\": {\"0\": 42}}\n";
    MonitorOptions o;
    o.port = 0;
    o.replay = log;
    auto m = Monitor::create(o);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    auto run = std::async(std::launch::async, [&] { return (*m)->run(); });
    auto url = loadgen::parse_url("http://127.0.0.1:" + std::to_string((*m)->port()));
    std::string body;
    for (int i = 0; i < 100 && body.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 42") == std::string::npos; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto reply = loadgen::http_request(*url, "GET", "/metrics", {}, 2000);
        if (reply.is_ok() && reply->status == 200) body = reply->body;
    }
    EXPECT_NE(body.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 42"), std::string::npos) << body;
    EXPECT_EQ(run.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout) << "the replay did not wait";
    (*m)->stop();
    ASSERT_EQ(run.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    auto summary = run.get();
    ASSERT_TRUE(summary.is_ok()) << summary.status().message();
    EXPECT_EQ(summary->samples, 2);
}

// Found by review: --address localhost was refused as "not an IP address".
TEST(Monitor, LocalhostIsLoopback) {
    MonitorOptions o;
    o.port = 0;
    o.address = "localhost";
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    auto m = Monitor::create(o);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_GT((*m)->port(), 0);
}

TEST(Monitor, RemoteWebhooksNeedConsent) {
    MonitorOptions o;
    o.port = -1;
    o.rules = *parse_rules("[[rule]]\nwhen = \"cpu_util > 1\"\naction = \"webhook\"\nwebhook = \"http://192.0.2.1/x\"\n", "r");
    auto m = Monitor::create(o);
    ASSERT_FALSE(m.is_ok());
    EXPECT_NE(m.status().message().find("--allow-remote-webhooks"), std::string::npos);
}

}  // namespace
}  // namespace strato::monitor
