#include "strato/core/parse.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace strato {

std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::string why_not_script_text(std::string_view value, bool one_word) {
    if (one_word && value.empty()) return "must not be empty";
    for (char c : value) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f)
            return fmt::format("{}holds the control character 0x{:02x} (a script's line cannot carry it)",
                               one_word ? "must be one word: it " : "", u);
        if (!one_word) continue;
        if (c == ' ') return "must be one word: it holds a blank";
        if (c == '\'' || c == '"' || c == '`' || c == '\\')
            return fmt::format("must be one word without quotes: it holds {}", c);
    }
    return "";
}

std::optional<int64_t> parse_int(std::string_view text, int64_t lo, int64_t hi) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return std::nullopt;
    return v;
}

Result<double> parse_number(std::string_view text, double missing, std::string_view what) {
    text = trim_blanks(text);
    if (text.empty()) return missing;
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
        return invalid_argument("{}: expected a number, got '{}'", what, text);
    return v;
}

Result<HostPort> parse_host_port(std::string_view text, std::string_view what, int default_port,
                                 std::string_view default_host) {
    HostPort hp;
    // Sockets here are IPv4: an IPv6 address ("::1", "[::1]:29400") is said to be one, not
    // misread as host ":" or "[::1]".
    if (text.find('[') != std::string_view::npos || text.find(':') != text.rfind(':'))
        return invalid_argument("{} '{}': IPv6 addresses are not supported; give an IPv4 address or a host name", what,
                                text);
    const size_t colon = text.rfind(':');
    hp.host = std::string(text.substr(0, colon));
    std::optional<int64_t> port = default_port;
    if (colon != std::string_view::npos) port = parse_int(text.substr(colon + 1), 1, 65535);
    if (hp.host.empty()) hp.host = std::string(default_host);
    if (!port || *port < 1 || *port > 65535 || hp.host.empty() ||
        hp.host.find_first_of(" \t\r\n") != std::string::npos)
        return invalid_argument("{} '{}': expected {}PORT with a port in 1..65535", what, text,
                                default_host.empty() ? "HOST:" : "[HOST:]");
    hp.port = static_cast<int>(*port);
    return hp;
}

std::string host_port_text(std::string_view host, int port) {
    const bool v6 = host.find(':') != std::string_view::npos && !host.starts_with('[');
    return fmt::format("{}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

}  // namespace strato
