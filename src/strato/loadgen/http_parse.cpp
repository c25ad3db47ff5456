#include "strato/loadgen/http_parse.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "strato/core/parse.h"

namespace strato::loadgen {
namespace {

constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kMaxLine = 1024;

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

bool icontains(std::string_view haystack, std::string_view needle) {
    if (needle.size() > haystack.size()) return false;
    for (size_t i = 0; i + needle.size() <= haystack.size(); ++i)
        if (iequals(haystack.substr(i, needle.size()), needle)) return true;
    return false;
}

// The first bytes of `s`, non-printable ones as '.', for an error message.
std::string printable(std::string_view s) {
    std::string out(s.substr(0, 16));
    for (char& c : out)
        if (c < 0x20 || c > 0x7e) c = '.';
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

}  // namespace

Result<Url> parse_url(std::string_view url) {
    Url out;
    constexpr std::string_view kScheme = "http://";
    if (url.substr(0, 8) == "https://")
        return invalid_argument("URL '{}': https is not supported; strato's HTTP client speaks plain http://", url);
    // A space or a control character would end the request line early or start a header of its
    // own ("/x y\r\nX-Injected: 1"): percent-encode them.
    for (size_t i = 0; i < url.size(); ++i) {
        const auto c = static_cast<unsigned char>(url[i]);
        if (c <= 0x20 || c == 0x7f)
            return invalid_argument("URL '{}': a space or control character at position {}; percent-encode it (%20)",
                                    url, i + 1);
    }
    if (url.substr(0, kScheme.size()) != kScheme)
        return invalid_argument("URL '{}': expected http://host[:port][/path]", url);
    std::string_view rest = url.substr(kScheme.size());
    size_t slash = rest.find_first_of("/?");
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) {
        out.target = std::string(rest.substr(slash));
        if (out.target.front() == '?') out.target.insert(out.target.begin(), '/');
    }
    if (authority.find('@') != std::string_view::npos)
        return invalid_argument("URL '{}': user info (user@host) is not supported", url);
    std::string_view port_text;
    if (!authority.empty() && authority.front() == '[') {
        size_t close = authority.find(']');
        if (close == std::string_view::npos) return invalid_argument("URL '{}': unterminated IPv6 literal", url);
        out.host = std::string(authority.substr(1, close - 1));
        std::string_view after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') return invalid_argument("URL '{}': expected ':port' after ']'", url);
            port_text = after.substr(1);
        }
    } else {
        size_t colon = authority.rfind(':');
        out.host = std::string(authority.substr(0, colon));
        if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
    }
    if (out.host.empty()) return invalid_argument("URL '{}': no host", url);
    if (!port_text.empty() || authority.ends_with(':')) {
        unsigned port = 0;
        auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
        if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
            return invalid_argument("URL '{}': port '{}' is not a number in 1..65535", url, port_text);
        out.port = static_cast<uint16_t>(port);
    }
    out.host_header = host_port_text(out.host, out.port);
    return out;
}

void ResponseParser::reset() {
    state_ = State::kHead;
    head_.clear();
    line_.clear();
    body_.clear();
    headers_.clear();
    started_ = false;
    head_request_ = false;
    keep_alive_ = true;
    status_ = 0;
    remaining_ = 0;
    body_size_ = 0;
    bytes_ = 0;
    error_.clear();
}

size_t ResponseParser::fail(std::string message) {
    state_ = State::kFailed;
    error_ = std::move(message);
    return 0;
}

bool ResponseParser::parse_head() {
    // head_ holds "HTTP/1.x NNN reason\r\n" headers "\r\n\r\n"
    std::string_view head(head_);
    size_t eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1." || status_line[8] != ' ') {
        fail("malformed status line");
        return false;
    }
    bool http10 = status_line[7] == '0';
    int code = 0;
    auto [p, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, code);
    if (ec != std::errc() || p != status_line.data() + 12 || code < 100 || code > 999) {
        fail("malformed status code");
        return false;
    }
    status_ = code;
    bool chunked = false, has_length = false, close = http10, keep = false, coded = false;
    std::string codings;  // every Transfer-Encoding line, in order, as one list (RFC 9110 5.3)
    int64_t length = 0;
    size_t pos = eol + 2;
    while (pos < head.size()) {
        size_t end = head.find("\r\n", pos);
        if (end == std::string_view::npos || end == pos) break;
        std::string_view line = head.substr(pos, end - pos);
        pos = end + 2;
        size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
        if (keep_body_) headers_.emplace_back(name, value);
        if (iequals(name, "content-length")) {
            // A list of one value repeated ("5, 5", RFC 9110 8.6, what a proxy joining two lines
            // makes) is that value; different values are unrecoverable (RFC 9112 6.3: it hung to
            // the timeout).
            if (value.empty()) {
                fail("malformed Content-Length");
                return false;
            }
            for (size_t from = 0; from != std::string_view::npos;) {
                const size_t comma = value.find(',', from);
                const std::string_view item = trim(value.substr(from, comma == std::string_view::npos ? comma : comma - from));
                from = comma == std::string_view::npos ? comma : comma + 1;
                int64_t this_length = -1;
                auto [q, e] = std::from_chars(item.data(), item.data() + item.size(), this_length);
                if (item.empty() || e != std::errc() || q != item.data() + item.size() || this_length < 0) {
                    fail("malformed Content-Length");
                    return false;
                }
                if (has_length && this_length != length) {
                    fail("two different Content-Length values");
                    return false;
                }
                length = this_length;
                has_length = true;
            }
        } else if (iequals(name, "transfer-encoding")) {
            coded = true;
            if (!codings.empty()) codings += ',';
            codings.append(value);
        } else if (iequals(name, "connection")) {
            if (icontains(value, "close")) close = true;
            if (icontains(value, "keep-alive")) keep = true;
        }
    }
    if (coded) {
        // Chunked only when it is the last coding; otherwise the body runs to the close (RFC 9112
        // 6.3), whatever a Content-Length says ("chunked, gzip" was read as chunk sizes).
        const size_t comma = codings.rfind(',');
        chunked = iequals(trim(std::string_view(codings).substr(comma == std::string::npos ? 0 : comma + 1)), "chunked");
        has_length = false;
        if (!chunked) close = true;
    }
    keep_alive_ = !close || (http10 && keep);
    if (code < 200) {  // 1xx: an interim response; the real one follows
        head_.clear();
        headers_.clear();
        return true;
    }
    if (code == 204 || code == 304 || head_request_) {
        state_ = State::kDone;
    } else if (chunked) {
        state_ = State::kChunkSize;
    } else if (has_length) {
        remaining_ = length;
        state_ = length == 0 ? State::kDone : State::kBody;
    } else {
        state_ = State::kUntilClose;
        keep_alive_ = false;
    }
    return true;
}

size_t ResponseParser::feed(const char* data, size_t size) {
    if (size) started_ = true;
    size_t i = 0;
    while (i < size && state_ != State::kDone && state_ != State::kFailed) {
        switch (state_) {
            case State::kHead: {
                // Append until the blank line; look for it across the boundary with what we have.
                size_t before = head_.size();
                size_t take = std::min(size - i, kMaxHead + 4 - before);
                head_.append(data + i, take);
                // Bytes that are not an HTTP/1.x status line fail at once, not at the close or the
                // timeout (a TLS or SSH server, a reply to another protocol, stray bytes).
                if (const size_t n = std::min<size_t>(head_.size(), 5); head_.compare(0, n, "HTTP/", n) != 0)
                    return fail(fmt::format("the response does not start with 'HTTP/' but '{}'", printable(head_)));
                size_t from = before >= 3 ? before - 3 : 0;
                size_t end = head_.find("\r\n\r\n", from);
                if (end == std::string::npos) {
                    if (head_.size() > kMaxHead) return fail("response head larger than 64 KiB");
                    i += take;
                    break;
                }
                size_t used = end + 4 - before;
                head_.resize(end + 4);
                i += used;
                if (!parse_head()) return i;
                break;
            }
            case State::kBody:
            case State::kChunkData: {
                size_t take = static_cast<size_t>(std::min<int64_t>(remaining_, static_cast<int64_t>(size - i)));
                if (keep_body_) body_.append(data + i, take);
                body_size_ += static_cast<int64_t>(take);
                remaining_ -= static_cast<int64_t>(take);
                i += take;
                if (remaining_ == 0) state_ = state_ == State::kBody ? State::kDone : State::kChunkDataEnd;
                break;
            }
            case State::kUntilClose:
                if (keep_body_) body_.append(data + i, size - i);
                body_size_ += static_cast<int64_t>(size - i);
                i = size;
                break;
            case State::kChunkSize:
            case State::kChunkDataEnd:
            case State::kTrailer: {
                size_t nl = std::string_view(data + i, size - i).find('\n');
                size_t take = nl == std::string_view::npos ? size - i : nl + 1;
                line_.append(data + i, take);
                i += take;
                if (line_.size() > kMaxLine) return fail("chunk line longer than 1 KiB");
                if (line_.back() != '\n') break;
                std::string_view line = trim(std::string_view(line_).substr(0, line_.size() - 1));
                if (state_ == State::kChunkDataEnd) {
                    if (!line.empty()) return fail("missing CRLF after chunk data");
                    state_ = State::kChunkSize;
                } else if (state_ == State::kTrailer) {
                    if (line.empty()) state_ = State::kDone;
                } else {
                    std::string_view hex = line.substr(0, line.find(';'));
                    int64_t n = 0;
                    auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), n, 16);
                    if (hex.empty() || ec != std::errc() || p != hex.data() + hex.size() || n < 0)
                        return fail("malformed chunk size");
                    remaining_ = n;
                    state_ = n == 0 ? State::kTrailer : State::kChunkData;
                }
                line_.clear();
                break;
            }
            case State::kDone:
            case State::kFailed:
                break;
        }
    }
    bytes_ += static_cast<int64_t>(i);
    return i;
}

void ResponseParser::finish_on_eof() {
    switch (state_) {
        case State::kUntilClose: state_ = State::kDone; break;
        case State::kDone:
        case State::kFailed: break;
        case State::kHead:
            fail(!started_ ? "connection closed before a response"
                           : fmt::format("connection closed in the response head, after {} bytes", head_.size()));
            break;
        case State::kBody:
            fail(fmt::format("truncated body: connection closed after {} of the {} bytes Content-Length promised",
                             body_size_, body_size_ + remaining_));
            break;
        default:
            fail(fmt::format("truncated chunked body: connection closed after {} body bytes, before the last chunk",
                             body_size_));
            break;
    }
}

}  // namespace strato::loadgen
