#pragma once
// nlohmann::json prints, copies and compares nested values recursively: a file of a hundred
// thousand '[' overflows the stack once it is used (a 200 KB run file crashed `strato report`).
// Text from outside -- files, request bodies -- is measured before it is parsed.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "strato/core/status.h"

namespace strato {

/// Deeper than any file or request strato reads or writes.
constexpr int kMaxJsonDepth = 64;

/// The byte offset where `text` (JSON) opens more than `max_depth` arrays and objects at once,
/// or npos when it never does (brackets inside strings do not count).
inline size_t json_too_deep(std::string_view text, int max_depth = kMaxJsonDepth) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return i;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return std::string_view::npos;
}

/// json::parse without exceptions, also refusing text nested deeper than kMaxJsonDepth: the
/// result is discarded (is_discarded()) for either.
inline nlohmann::json parse_json_bounded(std::string_view text) {
    if (json_too_deep(text) != std::string_view::npos) return nlohmann::json(nlohmann::json::value_t::discarded);
    return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

/// Parses JSON text from outside. An error (of `code`) names `what` and says where: the byte
/// where it nests deeper than kMaxJsonDepth, or the parser's line, column and what it expected.
inline Result<nlohmann::json> parse_json_named(std::string_view text, const std::string& what,
                                               StatusCode code = StatusCode::kInvalidArgument) {
    if (size_t at = json_too_deep(text); at != std::string_view::npos)
        return Status(code, fmt::format("{}: nested deeper than {} levels at byte {}", what, kMaxJsonDepth, at));
    try {
        return nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e99999
        std::string why = e.what();
        if (why.rfind("[json.exception.", 0) == 0 && why.find("] ") != std::string::npos)
            why = why.substr(why.find("] ") + 2);
        return Status(code, fmt::format("{}: not valid JSON ({})", what, why));
    }
}

}  // namespace strato
