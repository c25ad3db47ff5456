#include "strato/core/toml_guard.h"
#include "strato/serve/repository/model_config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <set>

namespace strato::serve {
namespace {

using json = nlohmann::json;

// A field tree: what pbtxt, TOML and JSON have in common.
struct Field;
struct Node {
    int line = 0;
    bool is_message = false;
    std::string scalar;
    std::vector<Field> fields;  // in order; repeated fields repeat
};
struct Field {
    Field(std::string k, Node v) : first(std::move(k)), second(std::move(v)) {}
    std::string first;
    Node second;
};

// ---- protobuf text format -------------------------------------------------------------------

class PbtxtParser {
public:
    PbtxtParser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

    Result<Node> parse() {
        Node root;
        root.is_message = true;
        root.line = 1;
        STRATO_RETURN_IF_ERROR(parse_fields(&root, '\0', 0));
        return root;
    }

private:
    Status error(const std::string& msg) const { return invalid_argument("{}:{}: {}", source_, line_, msg); }

    void skip() {
        while (pos_ < s_.size()) {
            char c = s_[pos_];
            if (c == '\n') {
                ++line_;
                ++pos_;
            } else if (std::isspace(static_cast<unsigned char>(c))) {
                ++pos_;
            } else if (c == '#') {
                while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
            } else {
                break;
            }
        }
    }
    bool peek(char c) {
        skip();
        return pos_ < s_.size() && s_[pos_] == c;
    }
    bool eat(char c) {
        if (!peek(c)) return false;
        ++pos_;
        return true;
    }

    Result<std::string> identifier() {
        skip();
        size_t b = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '.'))
            ++pos_;
        if (b == pos_) {
            if (pos_ >= s_.size()) return error("unexpected end of file, expected a field name");
            return error(fmt::format("unexpected '{}', expected a field name", s_[pos_]));
        }
        return std::string(s_.substr(b, pos_ - b));
    }

    Result<Node> scalar() {
        skip();
        Node n;
        n.line = line_;
        if (pos_ >= s_.size()) return error("unexpected end of file, expected a value");
        char q = s_[pos_];
        if (q == '"' || q == '\'') {
            ++pos_;
            // Adjacent string literals concatenate, as in protobuf.
            while (true) {
                while (pos_ < s_.size() && s_[pos_] != q) {
                    char c = s_[pos_++];
                    if (c == '\n') return error("newline inside a string");
                    if (c == '\\' && pos_ < s_.size()) {
                        STRATO_RETURN_IF_ERROR(escape(&n.scalar));
                    } else {
                        n.scalar += c;
                    }
                }
                if (pos_ >= s_.size()) return error("unterminated string");
                ++pos_;
                skip();
                // ('a' "b" is "ab" too: protobuf's tokenizer joins string literals of either quote)
                if (pos_ < s_.size() && (s_[pos_] == '"' || s_[pos_] == '\'')) {
                    q = s_[pos_++];
                    continue;
                }
                break;
            }
            return n;
        }
        size_t b = pos_;
        while (pos_ < s_.size() &&
               (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '-' ||
                s_[pos_] == '+' || s_[pos_] == '.'))
            ++pos_;
        if (b == pos_) return error(fmt::format("unexpected '{}', expected a value", s_[pos_]));
        n.scalar = std::string(s_.substr(b, pos_ - b));
        return n;
    }

    // The escape after a '\\' in a string, as protobuf's text format reads it: \n \t \r \a \b \f \v
    // \\ \' \" \?, octal \ooo, hex \xhh, and \uXXXX / \UXXXXXXXX as UTF-8.
    Status escape(std::string* out) {
        const char e = s_[pos_++];
        auto digits = [&](int base, size_t max) {
            uint32_t v = 0;
            size_t n = 0;
            for (; n < max && pos_ < s_.size(); ++n, ++pos_) {
                const char c = s_[pos_];
                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
                if (d >= base) break;
                v = v * static_cast<uint32_t>(base) + static_cast<uint32_t>(d);
            }
            return std::pair{v, n};
        };
        switch (e) {
            case 'n': *out += '\n'; return Status::ok();
            case 't': *out += '\t'; return Status::ok();
            case 'r': *out += '\r'; return Status::ok();
            case 'a': *out += '\a'; return Status::ok();
            case 'b': *out += '\b'; return Status::ok();
            case 'f': *out += '\f'; return Status::ok();
            case 'v': *out += '\v'; return Status::ok();
            case '\\': case '\'': case '"': case '?': *out += e; return Status::ok();
            case 'x': case 'X': {
                auto [v, n] = digits(16, 2);
                if (n == 0) return error("'\\x' needs hex digits");
                *out += static_cast<char>(v);
                return Status::ok();
            }
            case 'u': case 'U': {
                const size_t want = e == 'u' ? 4 : 8;
                auto [v, n] = digits(16, want);
                if (n != want || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                    return error(fmt::format("'\\{}' needs {} hex digits of a Unicode code point", e, want));
                if (v < 0x80) {
                    *out += static_cast<char>(v);
                } else if (v < 0x800) {
                    *out += static_cast<char>(0xc0 | (v >> 6));
                    *out += static_cast<char>(0x80 | (v & 0x3f));
                } else if (v < 0x10000) {
                    *out += static_cast<char>(0xe0 | (v >> 12));
                    *out += static_cast<char>(0x80 | ((v >> 6) & 0x3f));
                    *out += static_cast<char>(0x80 | (v & 0x3f));
                } else {
                    *out += static_cast<char>(0xf0 | (v >> 18));
                    *out += static_cast<char>(0x80 | ((v >> 12) & 0x3f));
                    *out += static_cast<char>(0x80 | ((v >> 6) & 0x3f));
                    *out += static_cast<char>(0x80 | (v & 0x3f));
                }
                return Status::ok();
            }
            default:
                if (e >= '0' && e <= '7') {
                    --pos_;
                    auto [v, n] = digits(8, 3);
                    if (v > 0xff) return error("an octal escape above \\377");
                    *out += static_cast<char>(v);
                    return Status::ok();
                }
                return error(fmt::format("unknown escape '\\{}' in a string", e));
        }
    }

    Result<Node> value(int depth) {
        skip();
        if (peek('{') || peek('<')) {
            char close = s_[pos_] == '{' ? '}' : '>';
            ++pos_;
            Node m;
            m.is_message = true;
            m.line = line_;
            STRATO_RETURN_IF_ERROR(parse_fields(&m, close, depth + 1));
            return m;
        }
        return scalar();
    }

    Status parse_fields(Node* msg, char close, int depth) {
        if (depth > 32) return error("messages nest deeper than 32 levels");
        while (true) {
            skip();
            if (pos_ >= s_.size()) {
                if (close) return error(fmt::format("unexpected end of file, expected '{}'", close));
                return Status::ok();
            }
            if (close && s_[pos_] == close) {
                ++pos_;
                return Status::ok();
            }
            int field_line = line_;
            STRATO_ASSIGN_OR_RETURN(std::string name, identifier());
            bool colon = eat(':');
            if (eat('[')) {
                if (!eat(']')) {
                    while (true) {
                        STRATO_ASSIGN_OR_RETURN(Node v, value(depth));
                        v.line = v.line ? v.line : field_line;
                        msg->fields.emplace_back(name, std::move(v));
                        if (eat(']')) break;
                        if (!eat(',')) return error(fmt::format("field '{}': expected ',' or ']' in the list", name));
                    }
                }
            } else {
                if (!colon && !(peek('{') || peek('<')))
                    return error(fmt::format("field '{}': expected ':' after the name", name));
                STRATO_ASSIGN_OR_RETURN(Node v, value(depth));
                msg->fields.emplace_back(name, std::move(v));
            }
            if (!eat(';')) eat(',');
        }
    }

    std::string_view s_;
    const std::string& source_;
    size_t pos_ = 0;
    int line_ = 1;
};

/// A relative path that stays below its directory: no '..' component, not absolute, not empty.
bool relative_inside(const std::string& path) {
    if (path.empty() || path[0] == '/' || path.find('\0') != std::string::npos) return false;
    for (const auto& part : std::filesystem::path(path)) if (part == "..") return false;
    return true;
}

// ---- TOML and JSON front-ends ---------------------------------------------------------------

// A repeated field is a flat list of values or messages: an array inside an array (which the
// flattening below would read as its innermost value) is an error, and so is nesting deeper than
// the pbtxt parser allows (a deep body must not recurse the stack away).
constexpr int kMaxDepth = 32;

Status nested_array(const std::string& source, const std::string& key) {
    return invalid_argument("{}: '{}' holds an array inside an array (a repeated field is a flat list of values or messages)",
                            source, key);
}

Result<Node> from_toml(const toml::node& n, int depth, const std::string& source);

Status add_toml_value(Node* parent, const std::string& key, const toml::node& v, int depth, const std::string& source) {
    if (const auto* arr = v.as_array()) {
        for (const auto& e : *arr) {
            if (e.is_array()) return nested_array(source, key);
            STRATO_RETURN_IF_ERROR(add_toml_value(parent, key, e, depth, source));
        }
        return Status::ok();
    }
    STRATO_ASSIGN_OR_RETURN(Node child, from_toml(v, depth + 1, source));
    parent->fields.emplace_back(key, std::move(child));
    return Status::ok();
}

Result<Node> from_toml(const toml::node& n, int depth, const std::string& source) {
    Node out;
    out.line = static_cast<int>(n.source().begin.line);
    if (const auto* t = n.as_table()) {
        out.is_message = true;
        if (depth > kMaxDepth) return invalid_argument("{}:{}: messages nest deeper than {} levels", source, out.line, kMaxDepth);
        for (const auto& [k, v] : *t) STRATO_RETURN_IF_ERROR(add_toml_value(&out, std::string(k.str()), v, depth, source));
    } else if (const auto* s = n.as_string()) {
        out.scalar = s->get();
    } else if (const auto* i = n.as_integer()) {
        out.scalar = std::to_string(i->get());
    } else if (const auto* f = n.as_floating_point()) {
        out.scalar = fmt::format("{}", f->get());
    } else if (const auto* b = n.as_boolean()) {
        out.scalar = b->get() ? "true" : "false";
    } else {
        return invalid_argument("{}:{}: a date or time is no value of a model config (expected a number, string or "
                                "boolean)", source, out.line);
    }
    return out;
}

Result<Node> from_json(const json& j, int depth, const std::string& source);

Status add_json_value(Node* parent, const std::string& key, const json& v, int depth, const std::string& source) {
    if (v.is_array()) {
        for (const auto& e : v) {
            if (e.is_array()) return nested_array(source, key);
            STRATO_RETURN_IF_ERROR(add_json_value(parent, key, e, depth, source));
        }
        return Status::ok();
    }
    STRATO_ASSIGN_OR_RETURN(Node child, from_json(v, depth + 1, source));
    parent->fields.emplace_back(key, std::move(child));
    return Status::ok();
}

Result<Node> from_json(const json& j, int depth, const std::string& source) {
    Node out;
    if (j.is_object()) {
        out.is_message = true;
        if (depth > kMaxDepth) return invalid_argument("{}: messages nest deeper than {} levels", source, kMaxDepth);
        for (auto it = j.begin(); it != j.end(); ++it)
            STRATO_RETURN_IF_ERROR(add_json_value(&out, it.key(), it.value(), depth, source));
    } else if (j.is_string()) {
        out.scalar = j.get<std::string>();
    } else if (j.is_boolean()) {
        out.scalar = j.get<bool>() ? "true" : "false";
    } else if (j.is_number_unsigned()) {  // (past INT64_MAX it is out of range for the field, not wrapped)
        out.scalar = std::to_string(j.get<uint64_t>());
    } else if (j.is_number_integer()) {
        out.scalar = std::to_string(j.get<int64_t>());
    } else if (j.is_number()) {
        out.scalar = fmt::format("{}", j.get<double>());
    }
    return out;
}

// ---- mapping the tree onto ModelConfig --------------------------------------------------------

/// Where a tree came from: the text format has its own literals (0x10, 010, t) and writes maps
/// as repeated key/value entries; TOML and JSON write maps as tables/objects.
enum class Form { kPbtxt, kToml, kJson };

class Mapper {
public:
    Mapper(std::string source, Form form) : source_(std::move(source)), form_(form) {}

    Status error(const Node& n, const std::string& msg) const {
        if (n.line > 0) return invalid_argument("{}:{}: {}", source_, n.line, msg);
        return invalid_argument("{}: {}", source_, msg);
    }

    Result<int64_t> to_int(const Node& n, const std::string& field) const {
        if (n.is_message) return error(n, fmt::format("'{}' must be an integer, not a message", field));
        const std::string& s = n.scalar;
        // The text format reads integers as C does: 0x10 is 16 and 010 is 8 (as Triton would).
        std::string_view digits = s;
        const bool negative = !digits.empty() && digits[0] == '-';
        if (negative) digits.remove_prefix(1);
        int base = 10;
        if (form_ == Form::kPbtxt && digits.size() > 1 && digits[0] == '0') {
            const bool hex = digits[1] == 'x' || digits[1] == 'X';
            base = hex ? 16 : 8;
            digits.remove_prefix(hex ? 2 : 1);
        }
        uint64_t magnitude = 0;
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
        const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
        if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || magnitude > limit)
            return error(n, fmt::format("'{}' must be an integer, got '{}'", field, s));
        return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    }
    Result<bool> to_bool(const Node& n, const std::string& field) const {
        const bool text = form_ == Form::kPbtxt;  // (t and f are the text format's too)
        if (!n.is_message && (n.scalar == "true" || n.scalar == "True" || n.scalar == "1" || (text && n.scalar == "t")))
            return true;
        if (!n.is_message && (n.scalar == "false" || n.scalar == "False" || n.scalar == "0" || (text && n.scalar == "f")))
            return false;
        return error(n, fmt::format("'{}' must be true or false, got '{}'", field, n.scalar));
    }

    /// A field that is not repeated may appear once in its message: protobuf refuses
    /// "max_batch_size: 8 max_batch_size: 16" (the last one would quietly win).
    Status once_each(const Node& msg, const std::string& where, std::initializer_list<std::string_view> repeated) const {
        std::set<std::string_view> seen;
        for (const auto& [k, v] : msg.fields)
            if (std::find(repeated.begin(), repeated.end(), k) == repeated.end() && !seen.insert(k).second)
                return error(v, fmt::format("'{}' is given twice in {} (it is not a repeated field)", k, where));
        return Status::ok();
    }

    /// The entries of a map field (parameters, model_warmup inputs) as (key, value) pairs. The
    /// text format writes each entry as `FIELD { key: "k" value: V }`, TOML and JSON as one
    /// table/object `FIELD { k: V, ... }`; `msg` is one such field's value.
    Result<std::vector<std::pair<std::string, const Node*>>> map_entries(const Node& msg, const std::string& field) const {
        STRATO_RETURN_IF_ERROR(want_message(msg, field));
        std::vector<std::pair<std::string, const Node*>> out;
        if (form_ != Form::kPbtxt) {
            for (const auto& [k, v] : msg.fields) out.emplace_back(k, &v);
            return out;
        }
        STRATO_RETURN_IF_ERROR(once_each(msg, field, {}));
        const Node* key = nullptr;
        const Node* value = nullptr;
        for (const auto& [k, v] : msg.fields) {
            if (k == "key") key = &v;
            else if (k == "value") value = &v;
            else return unknown(v, field + " (a map entry)", k, {"key", "value"});
        }
        if (!key || !value) return error(msg, fmt::format("an entry of '{}' needs both key and value", field));
        STRATO_ASSIGN_OR_RETURN(std::string name, to_string(*key, "key"));
        out.emplace_back(std::move(name), value);
        return out;
    }
    Result<std::string> to_string(const Node& n, const std::string& field) const {
        if (n.is_message) return error(n, fmt::format("'{}' must be a string, not a message", field));
        return n.scalar;
    }
    Status want_message(const Node& n, const std::string& field) const {
        if (!n.is_message) return error(n, fmt::format("'{}' must be a message ({{ ... }}), got '{}'", field, n.scalar));
        return Status::ok();
    }

    Status unknown(const Node& n, const std::string& where, const std::string& key, std::initializer_list<const char*> known) const {
        std::string list;
        for (const char* k : known) list += list.empty() ? std::string(k) : std::string(", ") + k;
        return error(n, fmt::format("unknown field '{}' in {} (expected one of: {})", key, where, list));
    }

    /// A data_type value: TYPE_FP32 (config form) or FP32 (protocol form).
    Result<DataType> data_type(const Node& v) const {
        STRATO_ASSIGN_OR_RETURN(std::string s, to_string(v, "data_type"));
        DataType t = parse_config_datatype(s);
        if (t == DataType::kInvalid) t = parse_datatype(s);
        if (t == DataType::kInvalid)
            return error(v, fmt::format("unknown data_type '{}' (expected TYPE_FP32, TYPE_INT64, TYPE_STRING, ...)", s));
        return t;
    }

    Result<TensorSpec> tensor(const Node& n, const std::string& kind) const {
        STRATO_RETURN_IF_ERROR(want_message(n, kind));
        STRATO_RETURN_IF_ERROR(once_each(n, kind, {"dims"}));
        TensorSpec t;
        for (const auto& [k, v] : n.fields) {
            if (k == "name") {
                STRATO_ASSIGN_OR_RETURN(t.name, to_string(v, k));
            } else if (k == "data_type") {
                STRATO_ASSIGN_OR_RETURN(t.dtype, data_type(v));
            } else if (k == "dims") {
                STRATO_ASSIGN_OR_RETURN(int64_t d, to_int(v, k));
                t.dims.push_back(d);
            } else if (k == "optional") {
                STRATO_ASSIGN_OR_RETURN(t.optional, to_bool(v, k));
            } else if (k == "label_filename") {
                STRATO_ASSIGN_OR_RETURN(t.label_filename, to_string(v, k));
            } else if (k == "format" || k == "reshape" || k == "is_shape_tensor" || k == "allow_ragged_batch" ||
                       k == "is_non_linear_format_io") {
                // Read as booleans are everywhere (1, t, True): `allow_ragged_batch: 1` asks for
                // what strato does not do and must not load as if it were off.
                bool on = k == "reshape";
                if (k == "is_shape_tensor" || k == "allow_ragged_batch") {
                    STRATO_ASSIGN_OR_RETURN(on, to_bool(v, k));
                }
                if (on)
                    return Status{StatusCode::kUnimplemented,
                            fmt::format("{}:{}: {} field '{}' is not supported by strato serve", source_, v.line, kind, k)};
            } else {
                return unknown(v, kind, k, {"name", "data_type", "dims", "optional", "label_filename"});
            }
        }
        return t;
    }

    Result<DynamicBatching> batching(const Node& n) const {
        STRATO_RETURN_IF_ERROR(want_message(n, "dynamic_batching"));
        STRATO_RETURN_IF_ERROR(once_each(n, "dynamic_batching", {"preferred_batch_size", "priority_queue_policy"}));
        DynamicBatching b;
        for (const auto& [k, v] : n.fields) {
            if (k == "preferred_batch_size") {
                STRATO_ASSIGN_OR_RETURN(int64_t s, to_int(v, k));
                b.preferred_batch_size.push_back(s);
            } else if (k == "max_queue_delay_microseconds") {
                STRATO_ASSIGN_OR_RETURN(b.max_queue_delay_us, to_int(v, k));
            } else if (k == "preserve_ordering") {
                STRATO_ASSIGN_OR_RETURN(b.preserve_ordering, to_bool(v, k));
            } else if (k == "default_queue_policy") {
                STRATO_RETURN_IF_ERROR(want_message(v, k));
                STRATO_RETURN_IF_ERROR(once_each(v, k, {}));
                for (const auto& [pk, pv] : v.fields) {
                    if (pk == "max_queue_size") {
                        STRATO_ASSIGN_OR_RETURN(b.max_queue_size, to_int(pv, pk));
                    } else if (pk == "default_timeout_microseconds") {
                        STRATO_ASSIGN_OR_RETURN(b.default_timeout_us, to_int(pv, pk));
                    } else if (pk == "allow_timeout_override") {
                        STRATO_ASSIGN_OR_RETURN(b.allow_timeout_override, to_bool(pv, pk));
                    } else if (pk == "timeout_action") {
                        if (pv.scalar != "REJECT" && !(form_ == Form::kPbtxt && pv.scalar == "0"))
                            return Status{StatusCode::kUnimplemented,
                                    fmt::format("{}:{}: timeout_action '{}' is not supported (only REJECT)", source_, pv.line, pv.scalar)};
                    } else {
                        return unknown(pv, "default_queue_policy", pk,
                                       {"max_queue_size", "default_timeout_microseconds", "allow_timeout_override", "timeout_action"});
                    }
                }
            } else if (k == "priority_levels" || k == "default_priority_level" || k == "priority_queue_policy") {
                // One priority level: requests keep arrival order.
            } else {
                return unknown(v, "dynamic_batching", k,
                               {"preferred_batch_size", "max_queue_delay_microseconds", "preserve_ordering", "default_queue_policy"});
            }
        }
        return b;
    }

    Result<VersionPolicy> version_policy(const Node& n) const {
        STRATO_RETURN_IF_ERROR(want_message(n, "version_policy"));
        VersionPolicy p;
        // An empty `version_policy { }` is every version in Triton (VersionsToLoad: neither latest
        // nor specific set means all), not a config error.
        if (n.fields.empty()) {
            p.kind = VersionPolicy::Kind::kAll;
            return p;
        }
        if (n.fields.size() != 1) return error(n, "version_policy needs exactly one of 'latest', 'all' or 'specific'");
        const auto& [k, v] = n.fields[0];
        STRATO_RETURN_IF_ERROR(want_message(v, k));
        STRATO_RETURN_IF_ERROR(once_each(v, "version_policy." + k, {"versions"}));
        if (k == "latest") {
            p.kind = VersionPolicy::Kind::kLatest;
            for (const auto& [lk, lv] : v.fields) {
                if (lk != "num_versions") return unknown(lv, "version_policy.latest", lk, {"num_versions"});
                STRATO_ASSIGN_OR_RETURN(p.num_versions, to_int(lv, lk));
            }
        } else if (k == "all") {
            p.kind = VersionPolicy::Kind::kAll;
        } else if (k == "specific") {
            p.kind = VersionPolicy::Kind::kSpecific;
            for (const auto& [sk, sv] : v.fields) {
                if (sk != "versions") return unknown(sv, "version_policy.specific", sk, {"versions"});
                STRATO_ASSIGN_OR_RETURN(int64_t ver, to_int(sv, sk));
                p.versions.push_back(ver);
            }
        } else {
            return unknown(v, "version_policy", k, {"latest", "all", "specific"});
        }
        return p;
    }

    Result<InstanceGroup> instance_group(const Node& n) const {
        STRATO_RETURN_IF_ERROR(want_message(n, "instance_group"));
        STRATO_RETURN_IF_ERROR(once_each(n, "instance_group", {"gpus", "profile", "secondary_devices"}));
        InstanceGroup g;
        for (const auto& [k, v] : n.fields) {
            if (k == "name") {
                STRATO_ASSIGN_OR_RETURN(g.name, to_string(v, k));
            } else if (k == "count") {
                STRATO_ASSIGN_OR_RETURN(g.count, to_int(v, k));
                if (g.count < 1) g.count = 1;  // as Triton's NormalizeInstanceGroup: at least one instance
            } else if (k == "kind") {
                STRATO_ASSIGN_OR_RETURN(g.kind, to_string(v, k));
                // The enum's number in the text format (model_config.proto: KIND_AUTO = 0 ... KIND_MODEL = 3).
                static constexpr const char* kKinds[] = {"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"};
                if (form_ == Form::kPbtxt && g.kind.size() == 1 && g.kind[0] >= '0' && g.kind[0] <= '3')
                    g.kind = kKinds[g.kind[0] - '0'];
                if (g.kind != "KIND_CPU" && g.kind != "KIND_GPU" && g.kind != "KIND_AUTO" && g.kind != "KIND_MODEL")
                    return error(v, fmt::format("unknown instance_group kind '{}' (expected KIND_CPU, KIND_GPU, KIND_AUTO or KIND_MODEL)",
                                                g.kind));
            } else if (k == "gpus") {
                STRATO_ASSIGN_OR_RETURN(int64_t gpu, to_int(v, k));
                if (gpu < 0) return error(v, fmt::format("instance_group gpus must be CUDA device numbers (0, 1, ...), got {}", gpu));
                g.gpus.push_back(gpu);
            } else if (k == "host_policy" || k == "rate_limiter" || k == "profile" || k == "passive" || k == "secondary_devices") {
            } else {
                return unknown(v, "instance_group", k, {"name", "count", "kind", "gpus"});
            }
        }
        return g;
    }

    Result<WarmupInput> warmup_input(const Node& n) const {
        STRATO_RETURN_IF_ERROR(want_message(n, "model_warmup input"));
        STRATO_RETURN_IF_ERROR(once_each(n, "model_warmup input", {"dims"}));
        WarmupInput in;
        int fills = 0;
        for (const auto& [k, v] : n.fields) {
            if (k == "data_type") {
                STRATO_ASSIGN_OR_RETURN(in.dtype, data_type(v));
            } else if (k == "dims") {
                STRATO_ASSIGN_OR_RETURN(int64_t d, to_int(v, k));
                in.dims.push_back(d);
            } else if (k == "zero_data" || k == "random_data") {
                STRATO_ASSIGN_OR_RETURN(bool on, to_bool(v, k));
                if (on) {
                    in.fill = k == "zero_data" ? WarmupInput::Fill::kZero : WarmupInput::Fill::kRandom;
                    ++fills;
                }
            } else if (k == "input_data_file") {
                STRATO_ASSIGN_OR_RETURN(in.input_data_file, to_string(v, k));
                in.fill = WarmupInput::Fill::kFile;
                ++fills;
            } else {
                return unknown(v, "model_warmup input", k, {"data_type", "dims", "zero_data", "random_data", "input_data_file"});
            }
        }
        if (fills != 1) return error(n, "a model_warmup input needs exactly one of zero_data: true, random_data: true, input_data_file");
        return in;
    }

    Result<WarmupSample> warmup(const Node& n) const {
        STRATO_RETURN_IF_ERROR(want_message(n, "model_warmup"));
        STRATO_RETURN_IF_ERROR(once_each(n, "model_warmup", {"inputs"}));
        WarmupSample w;
        for (const auto& [k, v] : n.fields) {
            if (k == "name") {
                STRATO_ASSIGN_OR_RETURN(w.name, to_string(v, k));
            } else if (k == "batch_size") {
                STRATO_ASSIGN_OR_RETURN(w.batch_size, to_int(v, k));
            } else if (k == "count") {
                STRATO_ASSIGN_OR_RETURN(w.count, to_int(v, k));
                if (w.count == 0) w.count = 1;  // Triton: 0 means once
            } else if (k == "inputs") {
                STRATO_ASSIGN_OR_RETURN(auto entries, map_entries(v, "model_warmup inputs"));
                for (const auto& [name, value] : entries) {
                    if (w.inputs.count(name)) return error(*value, fmt::format("model_warmup input '{}' is given twice", name));
                    STRATO_ASSIGN_OR_RETURN(w.inputs[name], warmup_input(*value));
                }
            } else {
                return unknown(v, "model_warmup", k, {"name", "batch_size", "inputs", "count"});
            }
        }
        return w;
    }

    Result<ModelConfig> config(const Node& root) const {
        STRATO_RETURN_IF_ERROR(once_each(root, "the model config",
                                         {"input", "output", "instance_group", "model_warmup", "parameters", "batch_input",
                                          "batch_output", "cc_model_filenames", "metric_tags", "model_repository_agents"}));
        ModelConfig c;
        for (const auto& [k, v] : root.fields) {
            if (k == "name") {
                STRATO_ASSIGN_OR_RETURN(c.name, to_string(v, k));
            } else if (k == "platform") {
                STRATO_ASSIGN_OR_RETURN(c.platform, to_string(v, k));
            } else if (k == "backend") {
                STRATO_ASSIGN_OR_RETURN(c.backend, to_string(v, k));
            } else if (k == "max_batch_size") {
                STRATO_ASSIGN_OR_RETURN(c.max_batch_size, to_int(v, k));
            } else if (k == "input") {
                STRATO_ASSIGN_OR_RETURN(TensorSpec t, tensor(v, "input"));
                c.inputs.push_back(std::move(t));
            } else if (k == "output") {
                STRATO_ASSIGN_OR_RETURN(TensorSpec t, tensor(v, "output"));
                c.outputs.push_back(std::move(t));
            } else if (k == "dynamic_batching") {
                STRATO_ASSIGN_OR_RETURN(c.dynamic_batching, batching(v));
            } else if (k == "instance_group") {
                STRATO_ASSIGN_OR_RETURN(InstanceGroup g, instance_group(v));
                c.instance_group.push_back(std::move(g));
            } else if (k == "version_policy") {
                STRATO_ASSIGN_OR_RETURN(c.version_policy, version_policy(v));
            } else if (k == "model_warmup") {
                STRATO_ASSIGN_OR_RETURN(WarmupSample w, warmup(v));
                c.model_warmup.push_back(std::move(w));
            } else if (k == "default_model_filename") {
                STRATO_ASSIGN_OR_RETURN(c.default_model_filename, to_string(v, k));
                // The load API takes a config from the client: a model file outside the version
                // directory would load (or probe for) any file the server can read.
                if (!c.default_model_filename.empty() && !relative_inside(c.default_model_filename))
                    return error(v, fmt::format("default_model_filename '{}' must name a file inside the version directory",
                                                c.default_model_filename));
            } else if (k == "parameters") {
                // pbtxt: parameters { key: "k" value: { string_value: "v" } }; JSON: {"k": {"string_value": "v"}};
                // TOML: [parameters] k = "v" or k = { string_value = "v" }.
                STRATO_ASSIGN_OR_RETURN(auto entries, map_entries(v, k));
                for (const auto& [name, value] : entries) {
                    std::string text;
                    if (value->is_message) {
                        STRATO_RETURN_IF_ERROR(once_each(*value, "parameter '" + name + "'", {}));
                        for (const auto& [vk, vv] : value->fields) {
                            if (vk != "string_value") return unknown(vv, "parameter '" + name + "'", vk, {"string_value"});
                            STRATO_ASSIGN_OR_RETURN(text, to_string(vv, vk));
                        }
                    } else if (form_ == Form::kToml) {
                        text = value->scalar;
                    } else {
                        return error(*value, fmt::format("parameter '{}' must be {{ string_value: \"...\" }}", name));
                    }
                    if (!c.parameters.emplace(name, std::move(text)).second)
                        return error(*value, fmt::format("parameter '{}' is given twice", name));
                }
            } else if (k == "sequence_batching" || k == "ensemble_scheduling") {
                return Status{StatusCode::kUnimplemented, fmt::format("{}:{}: '{}' is not supported by strato serve", source_, v.line, k)};
            } else if (k == "optimization" || k == "response_cache" || k == "model_transaction_policy" ||
                       k == "cc_model_filenames" || k == "metric_tags" || k == "model_operations" ||
                       k == "model_repository_agents" || k == "batch_input" || k == "batch_output" || k == "runtime" ||
                       k == "model_metrics" || k == "version" || k == "state") {
                // Accepted and ignored: these tune Triton's own backends or features strato does not have.
            } else {
                return unknown(v, "the model config", k,
                               {"name", "platform", "backend", "max_batch_size", "input", "output", "dynamic_batching",
                                "instance_group", "version_policy", "default_model_filename", "parameters", "model_warmup"});
            }
        }
        return c;
    }

private:
    std::string source_;
    Form form_;
};

bool valid_tensor_name(const std::string& n) { return !n.empty() && n.size() <= 256; }

constexpr int64_t kMaxElements = int64_t{1} << 40;  // of one row of a tensor (its products stay far from overflow)
constexpr double kMaxWarmupBytes = double(1 << 30);

}  // namespace

int64_t ModelConfig::instance_count() const {
    int64_t n = 0;
    for (const auto& g : instance_group) n += g.count * std::max<int64_t>(1, static_cast<int64_t>(g.gpus.size()));
    return std::max<int64_t>(n, 1);
}

std::vector<int64_t> ModelConfig::full_shape(const TensorSpec& t) const {
    std::vector<int64_t> s;
    if (max_batch_size > 0) s.push_back(-1);
    s.insert(s.end(), t.dims.begin(), t.dims.end());
    return s;
}

Result<ModelConfig> parse_model_config_pbtxt(std::string_view text, const std::string& source) {
    PbtxtParser p(text, source);
    STRATO_ASSIGN_OR_RETURN(Node root, p.parse());
    return Mapper(source, Form::kPbtxt).config(root);
}

Result<ModelConfig> parse_model_config_toml(std::string_view text, const std::string& source) {
    STRATO_ASSIGN_OR_RETURN(toml::table table, parse_toml_named(text, source));
    STRATO_ASSIGN_OR_RETURN(Node root, from_toml(table, 0, source));
    return Mapper(source, Form::kToml).config(root);
}

Result<ModelConfig> parse_model_config_json(const json& j, const std::string& source) {
    if (!j.is_object()) return invalid_argument("{}: the model config must be a JSON object", source);
    STRATO_ASSIGN_OR_RETURN(Node root, from_json(j, 0, source));
    return Mapper(source, Form::kJson).config(root);
}

Status validate_model_config(const ModelConfig& c, const std::string& source) {
    auto err = [&](const std::string& m) { return invalid_argument("{}: {}", source, m); };
    if (c.max_batch_size < 0) return err(fmt::format("max_batch_size must be >= 0, got {}", c.max_batch_size));
    if (c.max_batch_size > 1 << 20) return err(fmt::format("max_batch_size {} is unreasonably large", c.max_batch_size));
    if (c.inputs.empty()) return err("the model has no inputs (add 'input [ { name, data_type, dims } ]')");
    if (c.outputs.empty()) return err("the model has no outputs (add 'output [ { name, data_type, dims } ]')");
    std::set<std::string> names;
    for (const auto* list : {&c.inputs, &c.outputs}) {
        const char* kind = list == &c.inputs ? "input" : "output";
        std::set<std::string> seen;
        for (const auto& t : *list) {
            if (!valid_tensor_name(t.name)) return err(fmt::format("every {} needs a name", kind));
            if (!seen.insert(t.name).second) return err(fmt::format("{} '{}' is declared twice", kind, t.name));
            if (t.dtype == DataType::kInvalid) return err(fmt::format("{} '{}' needs a data_type", kind, t.name));
            if (t.dims.empty()) return err(fmt::format("{} '{}' needs dims (an empty shape is not allowed)", kind, t.name));
            int64_t elements = 1;
            for (int64_t d : t.dims) {
                if (d < -1 || d == 0) return err(fmt::format("{} '{}': dims must be positive or -1, got {}", kind, t.name, shape_string(t.dims)));
                if (d > 0 && elements > kMaxElements / d)
                    return err(fmt::format("{} '{}': dims {} hold more than 2^40 elements", kind, t.name, shape_string(t.dims)));
                if (d > 0) elements *= d;
            }
            // The load API takes a config from the client: a label file outside the model's
            // directory would hand any file the server can read back as class names.
            if (!t.label_filename.empty() && !relative_inside(t.label_filename))
                return err(fmt::format("{} '{}': label_filename '{}' must name a file inside the model's directory", kind,
                                       t.name, t.label_filename));
        }
    }
    if (c.dynamic_batching) {
        const auto& b = *c.dynamic_batching;
        // (max_batch_size 0 with dynamic_batching loads in Triton: requests queue under its
        // queue policy and run one at a time; only a preferred size can then never fit)
        for (int64_t p : b.preferred_batch_size)
            if (p < 1 || p > c.max_batch_size)
                return err(fmt::format("preferred_batch_size {} must be between 1 and max_batch_size {}", p, c.max_batch_size));
        if (b.max_queue_delay_us < 0 || b.max_queue_delay_us > 60'000'000)
            return err(fmt::format("max_queue_delay_microseconds must be 0..60000000, got {}", b.max_queue_delay_us));
        if (b.max_queue_size < 0) return err("max_queue_size must be >= 0");
        if (b.default_timeout_us < 0) return err("default_timeout_microseconds must be >= 0");
    }
    for (const auto& g : c.instance_group)
        if (g.count < 1 || g.count > 256) return err(fmt::format("instance_group count must be 1..256, got {}", g.count));
    if (c.instance_count() > 256)  // (each instance is a thread; many groups must not exhaust the machine's)
        return err(fmt::format("instance_group: {} instances in all, at most 256", c.instance_count()));
    if (c.version_policy.kind == VersionPolicy::Kind::kLatest && c.version_policy.num_versions < 1)
        return err("version_policy latest num_versions must be >= 1");
    for (const auto& w : c.model_warmup) {
        const std::string what = fmt::format("model_warmup '{}'", w.name);
        if (w.name.empty()) return err("every model_warmup entry needs a name");
        if (c.max_batch_size > 0 ? (w.batch_size < 1 || w.batch_size > c.max_batch_size) : w.batch_size > 1)
            return err(fmt::format("{}: batch_size {} must be {}", what, w.batch_size,
                                   c.max_batch_size > 0 ? fmt::format("between 1 and max_batch_size {}", c.max_batch_size) : std::string("0 or 1 (the model does not batch)")));
        if (w.count < 1 || w.count > 1000) return err(fmt::format("{}: count must be 1..1000, got {}", what, w.count));
        for (const auto& entry : w.inputs) {
            const std::string& name = entry.first;  // (clang 14 cannot capture a structured binding)
            const WarmupInput& in = entry.second;
            auto spec = std::find_if(c.inputs.begin(), c.inputs.end(), [&](const TensorSpec& t) { return t.name == name; });
            if (spec == c.inputs.end()) return err(fmt::format("{}: the model has no input '{}'", what, name));
            if (in.dtype != spec->dtype)
                return err(fmt::format("{}: input '{}' is {}, not {}", what, name, datatype_config_name(spec->dtype), datatype_config_name(in.dtype)));
            bool fits = in.dims.size() == spec->dims.size();
            for (size_t i = 0; fits && i < in.dims.size(); ++i) fits = in.dims[i] > 0 && (spec->dims[i] == -1 || spec->dims[i] == in.dims[i]);
            if (!fits)
                return err(fmt::format("{}: input '{}' dims {} do not match the input's {}", what, name, shape_string(in.dims), shape_string(spec->dims)));
            // Warm-up data is made in memory, batch_size rows of it: bounded before anything is allocated.
            double bytes = static_cast<double>(std::max<int64_t>(w.batch_size, 1)) *
                           static_cast<double>(in.dtype == DataType::kBytes ? 4 : datatype_size(in.dtype));
            for (int64_t d : in.dims) bytes *= static_cast<double>(d);
            if (bytes > kMaxWarmupBytes)
                return err(fmt::format("{}: input '{}' would be {:.3g} bytes of warm-up data for {} rows (at most 1 GiB)", what,
                                       name, bytes, std::max<int64_t>(w.batch_size, 1)));
            if (in.fill == WarmupInput::Fill::kRandom && in.dtype == DataType::kBytes)
                return err(fmt::format("{}: input '{}': random_data is for numeric inputs (use zero_data or input_data_file)", what, name));
            if (in.fill == WarmupInput::Fill::kFile && !relative_inside(in.input_data_file))
                return err(fmt::format("{}: input_data_file '{}' must name a file inside the model's warmup/ directory", what, in.input_data_file));
        }
        for (const auto& t : c.inputs)
            if (!t.optional && !w.inputs.count(t.name)) return err(fmt::format("{}: no data for input '{}'", what, t.name));
    }
    return Status::ok();
}

json model_config_to_json(const ModelConfig& c) {
    auto tensors = [&](const std::vector<TensorSpec>& list, bool input) {
        json a = json::array();
        for (const auto& t : list) {
            json o = {{"name", t.name},
                      {"data_type", std::string(datatype_config_name(t.dtype))},
                      {"dims", t.dims},
                      {"label_filename", t.label_filename},
                      {"is_shape_tensor", false}};
            if (input) {
                o["format"] = "FORMAT_NONE";
                o["optional"] = t.optional;
                o["allow_ragged_batch"] = false;
            }
            a.push_back(std::move(o));
        }
        return a;
    };
    json j = {{"name", c.name},
              {"platform", c.platform},
              {"backend", c.backend},
              {"runtime", ""},
              {"version_policy", json::object()},
              {"max_batch_size", c.max_batch_size},
              {"input", tensors(c.inputs, true)},
              {"output", tensors(c.outputs, false)},
              {"batch_input", json::array()},
              {"batch_output", json::array()},
              {"optimization", {{"priority", "PRIORITY_DEFAULT"}, {"input_pinned_memory", {{"enable", true}}}, {"output_pinned_memory", {{"enable", true}}}}},
              {"instance_group", json::array()},
              {"default_model_filename", c.default_model_filename},
              {"cc_model_filenames", json::object()},
              {"metric_tags", json::object()},
              {"parameters", json::object()},
              {"model_warmup", json::array()}};
    switch (c.version_policy.kind) {
        case VersionPolicy::Kind::kLatest: j["version_policy"] = {{"latest", {{"num_versions", c.version_policy.num_versions}}}}; break;
        case VersionPolicy::Kind::kAll: j["version_policy"] = {{"all", json::object()}}; break;
        case VersionPolicy::Kind::kSpecific: j["version_policy"] = {{"specific", {{"versions", c.version_policy.versions}}}}; break;
    }
    if (c.dynamic_batching) {
        const auto& b = *c.dynamic_batching;
        j["dynamic_batching"] = {{"preferred_batch_size", b.preferred_batch_size},
                                 {"max_queue_delay_microseconds", b.max_queue_delay_us},
                                 {"preserve_ordering", b.preserve_ordering},
                                 {"priority_levels", 0},
                                 {"default_priority_level", 0},
                                 {"default_queue_policy",
                                  {{"timeout_action", "REJECT"},
                                   {"default_timeout_microseconds", b.default_timeout_us},
                                   {"allow_timeout_override", b.allow_timeout_override},
                                   {"max_queue_size", b.max_queue_size}}},
                                 {"priority_queue_policy", json::object()}};
    }
    std::vector<InstanceGroup> groups = c.instance_group;
    if (groups.empty()) groups.push_back({});
    for (size_t i = 0; i < groups.size(); ++i) {
        const auto& g = groups[i];
        j["instance_group"].push_back({{"name", g.name.empty() ? fmt::format("{}_{}", c.name, i) : g.name},
                                       {"kind", g.kind == "KIND_AUTO" ? "KIND_CPU" : g.kind},
                                       {"count", g.count},
                                       {"gpus", g.gpus},
                                       {"secondary_devices", json::array()},
                                       {"profile", json::array()},
                                       {"passive", false},
                                       {"host_policy", ""}});
    }
    for (const auto& [k, v] : c.parameters) j["parameters"][k] = {{"string_value", v}};
    for (const auto& w : c.model_warmup) {
        json inputs = json::object();
        for (const auto& [name, in] : w.inputs) {
            json o = {{"data_type", std::string(datatype_config_name(in.dtype))}, {"dims", in.dims}};
            if (in.fill == WarmupInput::Fill::kZero) o["zero_data"] = true;
            if (in.fill == WarmupInput::Fill::kRandom) o["random_data"] = true;
            if (in.fill == WarmupInput::Fill::kFile) o["input_data_file"] = in.input_data_file;
            inputs[name] = std::move(o);
        }
        j["model_warmup"].push_back({{"name", w.name}, {"batch_size", w.batch_size}, {"inputs", inputs}, {"count", w.count}});
    }
    return j;
}

}  // namespace strato::serve
