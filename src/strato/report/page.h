#pragma once
// The shared frame of strato's HTML reports: one inline stylesheet, no scripts, no external
// resources, so every report opens the same in any browser, offline.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace strato::report {

/// "<!DOCTYPE html>...<main>" with the title (escaped here) and the stylesheet.
std::string page_head(std::string_view title);
/// The footer and the closing tags.
std::string page_foot();

/// `v` with `decimals` decimals, "–" when it is not finite. From 1e9 on (a diverged or damaged
/// value) in scientific notation, "3e+25", not as 26 digits.
std::string format_fixed(double v, int decimals);

/// What a JSON result is, for "not a ... (expected \"kind\": ..., got X)": "kind \"x\"", "no kind"
/// or the type of a value that is no object.
std::string describe_kind(const nlohmann::json& j);

}  // namespace strato::report
