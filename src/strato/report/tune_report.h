#pragma once
// The tuning-study report: what `strato tune report` reads from the study store, as JSON
// ({"kind": "strato-tune", ...}): the leaderboard, the objective per trial over epochs, each
// parameter against the objective, and the ASHA rungs. JSON only: the report library does not
// depend on tune.

#include <nlohmann/json.hpp>

#include <string>

#include "strato/core/status.h"

namespace strato::report {

Result<std::string> render_tune_report(const nlohmann::json& study);

}  // namespace strato::report
