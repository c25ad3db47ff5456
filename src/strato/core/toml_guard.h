#pragma once
// toml++ parses a dotted key ("a.b.c = 1", "[a.b.c]") recursively, one frame per part: a line of
// 50,000 parts overflowed the stack (a 100 KB policy file crashed `strato autoscale`). Text from
// outside is measured before it is parsed, as JSON is (json_depth.h). parse_toml_named() does
// both, for every TOML file strato reads.

#include <fmt/format.h>
#include <toml++/toml.h>

#include <string>
#include <string_view>

#include "strato/core/status.h"

namespace strato {

/// More dotted parts in one key than any config strato reads needs.
constexpr int kMaxTomlKeyParts = 128;

/// An error naming `source` and the line where `text` (TOML) has a key of more than
/// kMaxTomlKeyParts dotted parts; ok otherwise. Keys are where TOML has them: before a line's
/// `=`, in `[table]` headers, and before each `=` of an inline table; dots in strings, comments
/// and values (1.5, 07:32:00.999) do not count, and all-digit parts (`0.0.0 = 1`) do.
inline Status check_toml_keys(std::string_view text, const std::string& source) {
    int line = 1, dots = 0;
    bool key = true;          // at a key: the start of a line, a header, after '{' or ',' in an inline table
    std::string nesting;      // the open '{' (inline tables) and '[' (arrays) of the value being read
    auto fail = [&] {
        return invalid_argument("{}:{}: a key of more than {} dotted parts; expected a config key", source, line,
                                kMaxTomlKeyParts);
    };
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\n') {
            ++line;
            if (nesting.empty()) key = true, dots = 0;  // (inside a multi-line array the value goes on)
        } else if (c == '#') {
            while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        } else if (c == '"' || c == '\'') {
            // A string: basic ("...", with escapes) or literal ('...'), single or triple quoted.
            const bool triple = text.substr(i, 3) == std::string_view(c == '"' ? "\"\"\"" : "\'\'\'");
            const std::string_view close = triple ? text.substr(i, 3) : text.substr(i, 1);
            for (i += close.size(); i < text.size(); ++i) {
                if (c == '"' && text[i] == '\\') {
                    if (i + 1 < text.size() && text[i + 1] == '\n') ++line;
                    ++i;
                } else if (text.substr(i, close.size()) == close) {
                    i += close.size() - 1;
                    break;
                } else if (text[i] == '\n') {
                    if (!triple) break;  // (an unclosed string: the parser says so)
                    ++line;
                }
            }
        } else if (key) {
            if (c == '.' && ++dots > kMaxTomlKeyParts) return fail();
            if (c == '=') key = false, dots = 0;
        } else if (c == '{' || c == '[') {
            nesting.push_back(c);
            if (c == '{') key = true, dots = 0;
        } else if ((c == '}' || c == ']') && !nesting.empty()) {
            nesting.pop_back();
        } else if (c == ',' && !nesting.empty() && nesting.back() == '{') {
            key = true, dots = 0;
        }
    }
    return Status::ok();
}

/// `text` (TOML from `source`, a file name for messages) parsed after check_toml_keys(); a syntax
/// error names the file, line and column.
inline Result<toml::table> parse_toml_named(std::string_view text, const std::string& source) {
    // UTF-16 (Windows PowerShell 5 writes it for `>` and Out-File): said to be, not "invalid utf-8
    // sequence" at 1:1 (found by review).
    if (text.substr(0, 2) == "\xFF\xFE" || text.substr(0, 2) == "\xFE\xFF")
        return invalid_argument("{}:1:1: the file is UTF-16 (it starts with a UTF-16 byte-order mark); TOML is UTF-8: "
                                "save it as UTF-8",
                                source);
    STRATO_RETURN_IF_ERROR(check_toml_keys(text, source));
    try {
        return toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        return invalid_argument("{}:{}:{}: TOML syntax error: {}", source, e.source().begin.line, e.source().begin.column,
                                e.description());
    }
}

}  // namespace strato
