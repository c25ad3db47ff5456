#pragma once
// toml++ parses a dotted key ("a.b.c = 1", "[a.b.c]") recursively, one frame per part: a line of
// 50,000 parts overflowed the stack (a 100 KB policy file crashed `strato autoscale`). Text from
// outside is measured before it is parsed, as JSON is (json_depth.h).

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "strato/core/status.h"

namespace strato {

/// More dotted parts in one key than any config strato reads needs.
constexpr int kMaxTomlKeyParts = 128;

/// An error naming `source` and the line where `text` (TOML) has a key of more than
/// kMaxTomlKeyParts dotted parts; ok otherwise. Dots inside strings, comments and numbers
/// (1.5, 07:32:00.999) do not count.
inline Status check_toml_keys(std::string_view text, const std::string& source) {
    int line = 1, dots = 0;
    auto digit = [&](size_t i) { return i < text.size() && text[i] >= '0' && text[i] <= '9'; };
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\n') {
            ++line;
            dots = 0;
        } else if (c == '#') {
            while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        } else if (c == '"' || c == '\'') {
            // A string: basic ("...", with escapes) or literal ('...'), single or triple quoted.
            const bool triple = text.substr(i, 3) == std::string_view(c == '"' ? "\"\"\"" : "'''");
            const std::string_view close = triple ? text.substr(i, 3) : text.substr(i, 1);
            for (i += close.size(); i < text.size(); ++i) {
                if (c == '"' && text[i] == '\\') {
                    ++i;
                } else if (text.substr(i, close.size()) == close) {
                    i += close.size() - 1;
                    break;
                } else if (text[i] == '\n') {
                    if (!triple) break;  // (an unclosed string: the parser says so)
                    ++line;
                }
            }
        } else if (c == '.' && !(i > 0 && digit(i - 1) && digit(i + 1))) {
            if (++dots > kMaxTomlKeyParts)
                return invalid_argument("{}:{}: a key of more than {} dotted parts; expected a config key", source,
                                        line, kMaxTomlKeyParts);
        }
    }
    return Status::ok();
}

}  // namespace strato
