#pragma once
// The load-test report: what `strato loadtest --json` wrote, drawn as latency against
// throughput, the latency distribution of each load level, and a table. Reads the JSON only, so
// the report library does not depend on the load generator.

#include <nlohmann/json.hpp>

#include <string>

#include "strato/core/status.h"

namespace strato::report {

/// A `<section>` for a load test ({"kind": "strato-loadtest", "points": [...]}); also embedded
/// in the run report when the run directory holds loadtest.json. Missing fields show as "–"; a
/// field of another type (a hand-edited file) is kInvalidArgument naming it (points[2].errors).
Result<std::string> loadtest_section_html(const nlohmann::json& loadtest);

/// A whole page for one load test. kInvalidArgument when `loadtest` is not a strato-loadtest
/// object (names what it found instead).
Result<std::string> render_loadtest_report(const nlohmann::json& loadtest);

/// Reads `json_path` (written by `strato loadtest --json`) and writes its report to `out_path`
/// atomically.
Status write_loadtest_report(const std::string& json_path, const std::string& out_path);

/// What `strato report FILE.json` does: reads `json_path` and writes the page of its "kind" to
/// `out_path` atomically: "strato-loadtest" (`strato loadtest --json`) or "strato-autoscale-sim"
/// (`strato autoscale simulate --json`, render_autoscale_report). Another kind or no JSON is
/// kInvalidArgument naming the file and the kinds it reads; so is a field of an unexpected type.
///
///     Status st = strato::report::write_json_report("sim.json", "sim.html");
Status write_json_report(const std::string& json_path, const std::string& out_path);

}  // namespace strato::report
