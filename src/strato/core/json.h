#pragma once
// JSON text of documents that carry outside bytes -- file, folder and class names, a worker's
// output, command-line values -- which need not be UTF-8: nlohmann's dump() throws on invalid
// UTF-8; json_text writes such bytes as U+FFFD, so saving a package or an error report never
// fails over a Latin-1 file name. Where a name must come back byte for byte (a manifest's
// paths), check it with utf8_length_at first.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace strato {

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The length of the well-formed UTF-8 character starting at s[i] (1-4), or 0 where the bytes
/// there are not one (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF,
/// cut short).
inline size_t utf8_length_at(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = b(0);
    if (c < 0x80) return 1;
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;  // not overlong
        if (c == 0xED) hi = 0x9F;  // not a surrogate
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;  // not past U+10FFFF
    } else {
        return 0;
    }
    if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
    for (size_t k = 2; k < n; ++k)
        if ((b(k) & 0xC0) != 0x80) return 0;
    return n;
}

inline bool is_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8_length_at(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

}  // namespace strato
