#pragma once
// Numbers and addresses in text a user or a peer wrote: command-line values, environment
// variables, table fields, protocol lines. Every parser takes all of the text or fails; none
// wraps, saturates or stops at the first odd character the way atoi does.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "strato/core/status.h"

namespace strato {

/// `s` without the spaces and tabs around it.
std::string_view trim_blanks(std::string_view s);

/// `text` as a whole number in [lo, hi]: all of it, decimal, an optional '-', no spaces;
/// nullopt otherwise (empty, other characters, out of range).
std::optional<int64_t> parse_int(std::string_view text, int64_t lo = std::numeric_limits<int64_t>::min(),
                                 int64_t hi = std::numeric_limits<int64_t>::max());

/// Parses a number field (spaces and tabs around it ignored): empty gives `missing`; anything
/// else must be a finite number. Errors read "<what>: expected a number, got '<text>'".
Result<double> parse_number(std::string_view text, double missing, std::string_view what);

/// Why `value` cannot go into a line of a script strato writes (an #SBATCH line, a command
/// word, a Kubernetes name): "" when it can. A control character is always refused (a newline
/// ends the line and the rest runs as a shell command); with `one_word` so are empty text,
/// blanks, quotes and backslashes.
std::string why_not_script_text(std::string_view value, bool one_word);

struct HostPort {
    std::string host;
    int port = 0;
};

/// "HOST:PORT", "HOST" (port `default_port`; 0 makes the port required) or ":PORT" (host
/// `default_host`; empty makes the host required). The port is a whole number in 1..65535.
/// Errors name `what`: "<what> 'text': expected HOST:PORT with a port in 1..65535".
Result<HostPort> parse_host_port(std::string_view text, std::string_view what, int default_port = 0,
                                 std::string_view default_host = {});
/// "HOST:PORT" as a URL's authority: an IPv6 address in brackets ("[::1]:8000"; "::1:8000" is
/// no URL a client can use).
std::string host_port_text(std::string_view host, int port);

}  // namespace strato
