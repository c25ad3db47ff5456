#pragma once
// The autoscaling simulation report: what `strato autoscale simulate --json` wrote, drawn as node
// count, arriving work against capacity, queueing delay against the objective, and utilisation
// over time, with the summary and every scaling action. Reads the JSON only (the report library
// does not depend on cloud).

#include <nlohmann/json.hpp>

#include <string>

#include "strato/core/status.h"

namespace strato::report {

/// A whole page for a {"kind": "strato-autoscale-sim"} object; kInvalidArgument for anything else.
Result<std::string> render_autoscale_report(const nlohmann::json& sim);

}  // namespace strato::report
