#include "strato/core/toml_guard.h"
#include "strato/core/config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "strato/core/fs.h"

namespace strato::config {

bool Range::contains(double x) const {
    // No config value is infinite: "lr = inf" is a typo that passes every "> 0" (found by review).
    if (!std::isfinite(x)) return false;
    if (min_exclusive ? !(x > min) : !(x >= min)) return false;
    if (max_exclusive ? !(x < max) : !(x <= max)) return false;
    return true;
}

std::string Range::describe(bool integer) const {
    std::string what = integer ? "an integer" : "a number";
    bool has_min = std::isfinite(min), has_max = std::isfinite(max);
    if (has_min && has_max) {
        return fmt::format("{} in {}{}, {}{}", what, min_exclusive ? "(" : "[", min, max, max_exclusive ? ")" : "]");
    }
    if (has_min) return fmt::format("{} {} {}", what, min_exclusive ? ">" : ">=", min);
    if (has_max) return fmt::format("{} {} {}", what, max_exclusive ? "<" : "<=", max);
    return what;
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

namespace {

std::string where(const toml::node& node, const std::string& fallback) {
    const auto& src = node.source();
    std::string file = src.path ? *src.path : fallback;
    if (file.rfind("--set", 0) == 0) return file;
    if (file.find(" /") != std::string::npos) return file;  // a JSON object: "pkg/strato-model.json /model"
    if (src.begin.line == 0) return file;
    return fmt::format("{}:{}", file, src.begin.line);
}

std::string type_name(const toml::node& node) {
    switch (node.type()) {
        case toml::node_type::string: return "a string";
        case toml::node_type::integer: return "an integer";
        case toml::node_type::floating_point: return "a number";
        case toml::node_type::boolean: return "a boolean";
        case toml::node_type::array: return "an array";
        case toml::node_type::table: return "a table";
        default: return "a date/time";
    }
}

std::string render(const toml::node& node) {
    std::ostringstream os;
    node.visit([&](auto&& n) { os << n; });
    std::string s = os.str();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return s;
}

class Reader final : public Visitor {
public:
    Reader(const toml::table& root, std::string source) : source_(std::move(source)) { stack_.push_back({&root, ""}); }

    void section(std::string_view name, const std::function<void()>& body) override {
        Frame& top = stack_.back();
        std::string path = join(name);
        top.known.emplace_back(name);
        static const toml::table kEmpty;
        const toml::table* table = &kEmpty;
        if (top.table) {
            if (const toml::node* n = top.table->get(name)) {
                if (const auto* t = n->as_table()) {
                    table = t;
                } else {
                    error(*n, path, fmt::format("expected a table [{}], got {}", path, type_name(*n)));
                }
            }
        }
        stack_.push_back({table, path});
        body();
        check_unknown(stack_.back());
        stack_.pop_back();
    }

    void field(std::string_view key, int64_t& value, Range range) override {
        if (const toml::node* n = lookup(key)) {
            auto v = n->value_exact<int64_t>();
            if (!v) return error(*n, join(key), fmt::format("expected {}, got {} {}", range.describe(true),
                                                                type_name(*n), render(*n)));
            if (!range.contains(static_cast<double>(*v)))
                return error(*n, join(key), fmt::format("expected {}, got {}", range.describe(true), *v));
            value = *v;
        }
    }

    void field(std::string_view key, double& value, Range range) override {
        if (const toml::node* n = lookup(key)) {
            std::optional<double> v;
            if (n->is_integer()) v = static_cast<double>(*n->value<int64_t>());
            if (n->is_floating_point()) v = *n->value<double>();
            if (!v) return error(*n, join(key), fmt::format("expected {}, got {} {}", range.describe(false),
                                                                type_name(*n), render(*n)));
            if (!range.contains(*v))
                return error(*n, join(key), fmt::format("expected {}, got {}", range.describe(false), *v));
            value = *v;
        }
    }

    void field(std::string_view key, bool& value) override {
        if (const toml::node* n = lookup(key)) {
            auto v = n->value_exact<bool>();
            if (!v) return error(*n, join(key), fmt::format("expected true or false, got {} {}", type_name(*n), render(*n)));
            value = *v;
        }
    }

    void field(std::string_view key, std::string& value, const Choices& choices) override {
        if (const toml::node* n = lookup(key)) {
            auto v = n->value_exact<std::string>();
            // `--set run.name=nan` (or =2024, =true) reads as a number or a boolean in TOML; for a
            // string setting the flag's own text is meant.
            // (Only the flag's own value, parsed as "v = VALUE": it starts at line 1, column 5; a
            // value nested in an inline table there is the table's, not the flag's text.)
            if (!v && n->is_value() && n->source().path && n->source().path->rfind("--set ", 0) == 0 &&
                n->source().begin.line == 1 && n->source().begin.column == 5) {
                const std::string& flag = *n->source().path;
                if (size_t eq = flag.find('='); eq != std::string::npos) v = flag.substr(eq + 1);
            }
            if (!v) return error(*n, join(key), fmt::format("expected a string, got {} {}", type_name(*n), render(*n)));
            if (!check_choice(*n, join(key), *v, choices)) return;
            value = *v;
        }
    }

    void field(std::string_view key, std::vector<std::string>& value, const Choices& choices) override {
        if (const toml::node* n = lookup(key)) {
            const auto* arr = n->as_array();
            if (!arr) return error(*n, join(key), fmt::format("expected an array of strings, got {}", type_name(*n)));
            std::vector<std::string> out;
            for (const auto& e : *arr) {
                auto v = e.value_exact<std::string>();
                if (!v) return error(e, join(key), fmt::format("expected strings in the array, got {}", type_name(e)));
                if (!check_choice(e, join(key), *v, choices)) return;
                out.push_back(*v);
            }
            value = std::move(out);
        }
    }

    void field(std::string_view key, std::vector<double>& value, Range range) override {
        if (const toml::node* n = lookup(key)) {
            const auto* arr = n->as_array();
            if (!arr) return error(*n, join(key), fmt::format("expected an array of numbers, got {}", type_name(*n)));
            std::vector<double> out;
            for (const auto& e : *arr) {
                std::optional<double> v;
                if (e.is_integer()) v = static_cast<double>(*e.value<int64_t>());
                if (e.is_floating_point()) v = *e.value<double>();
                if (!v || !range.contains(*v))
                    return error(e, join(key), fmt::format("expected array elements to be {}, got {}",
                                                           range.describe(false), render(e)));
                out.push_back(*v);
            }
            value = std::move(out);
        }
    }

    void field(std::string_view key, std::vector<int64_t>& value, Range range) override {
        if (const toml::node* n = lookup(key)) {
            const auto* arr = n->as_array();
            if (!arr) return error(*n, join(key), fmt::format("expected an array of integers, got {}", type_name(*n)));
            std::vector<int64_t> out;
            for (const auto& e : *arr) {
                auto v = e.value_exact<int64_t>();
                if (!v || !range.contains(static_cast<double>(*v)))
                    return error(e, join(key), fmt::format("expected array elements to be {}, got {}",
                                                           range.describe(true), render(e)));
                out.push_back(*v);
            }
            value = std::move(out);
        }
    }

    void finish() { check_unknown(stack_.front()); }

    Status status() const {
        if (errors_.empty()) return Status::ok();
        std::string msg;
        for (size_t i = 0; i < errors_.size(); ++i) msg += (i ? "\n" : "") + errors_[i];
        return {StatusCode::kInvalidArgument, msg};
    }

private:
    struct Frame {
        const toml::table* table;
        std::string path;
        std::vector<std::string> known;
    };

    std::string join(std::string_view key) const {
        const std::string& p = stack_.back().path;
        return p.empty() ? std::string(key) : p + "." + std::string(key);
    }

    const toml::node* lookup(std::string_view key) {
        Frame& top = stack_.back();
        top.known.emplace_back(key);
        return top.table ? top.table->get(key) : nullptr;
    }

    bool check_choice(const toml::node& n, const std::string& path, const std::string& v, const Choices& choices) {
        if (choices.empty()) return true;
        for (const auto& c : choices)
            if (c == v) return true;
        std::string list;
        for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
        error(n, path, fmt::format("expected one of {}, got \"{}\"", list, v));
        return false;
    }

    void check_unknown(const Frame& f) {
        if (!f.table) return;
        for (const auto& [k, node] : *f.table) {
            std::string key(k.str());
            bool known = false;
            for (const auto& kn : f.known) known |= kn == key;
            if (known) continue;
            std::string best;
            size_t best_d = 3;
            for (const auto& kn : f.known) {
                size_t d = edit_distance(kn, key);
                if (d < best_d) best_d = d, best = kn;
            }
            std::string list;
            for (const auto& kn : f.known) list += (list.empty() ? "" : ", ") + kn;
            std::string path = f.path.empty() ? key : f.path + "." + key;
            std::string hint = best.empty() ? fmt::format("known keys{}: {}", f.path.empty() ? "" : " in [" + f.path + "]", list)
                                            : fmt::format("did you mean '{}'?", f.path.empty() ? best : f.path + "." + best);
            errors_.push_back(fmt::format("{}: unknown key '{}' ({})", where(node, source_), path, hint));
        }
    }

    void error(const toml::node& n, const std::string& path, const std::string& what) {
        errors_.push_back(fmt::format("{}: {}: {}", where(n, source_), path, what));
    }

    std::string source_;
    std::vector<Frame> stack_;
    std::vector<std::string> errors_;
};

class Writer final : public Visitor {
public:
    toml::table root;

    Writer() { stack_.push_back(&root); }

    void section(std::string_view name, const std::function<void()>& body) override {
        auto [it, _] = stack_.back()->insert_or_assign(name, toml::table{});
        stack_.push_back(it->second.as_table());
        body();
        stack_.pop_back();
    }
    void field(std::string_view key, int64_t& v, Range) override { stack_.back()->insert_or_assign(key, v); }
    void field(std::string_view key, double& v, Range) override { stack_.back()->insert_or_assign(key, v); }
    void field(std::string_view key, bool& v) override { stack_.back()->insert_or_assign(key, v); }
    void field(std::string_view key, std::string& v, const Choices&) override {
        stack_.back()->insert_or_assign(key, v);
    }
    void field(std::string_view key, std::vector<std::string>& v, const Choices&) override {
        toml::array a;
        for (const auto& s : v) a.push_back(s);
        stack_.back()->insert_or_assign(key, std::move(a));
    }
    void field(std::string_view key, std::vector<double>& v, Range) override {
        toml::array a;
        for (double d : v) a.push_back(d);
        stack_.back()->insert_or_assign(key, std::move(a));
    }
    void field(std::string_view key, std::vector<int64_t>& v, Range) override {
        toml::array a;
        for (int64_t d : v) a.push_back(d);
        stack_.back()->insert_or_assign(key, std::move(a));
    }

private:
    std::vector<toml::table*> stack_;
};

}  // namespace

struct Document::Impl {
    toml::table root;
    std::string source;
};

Result<Document> Document::from_file(const std::string& path) {
    auto text = fs::read_file(path, fs::kTextFileLimit);  // (a directory or a read error is a Status, not an exception)
    if (!text) {
        if (text.status().code() == StatusCode::kNotFound)
            return not_found("config file {} cannot be read (does it exist?)", path);
        return Status(text.status().code(), "config file " + text.status().message());
    }
    return from_string(*text, path);
}

Result<Document> Document::from_string(std::string_view text, const std::string& source_name) {
    Document doc;
    doc.impl_ = std::make_shared<Impl>();
    doc.impl_->source = source_name;
    STRATO_ASSIGN_OR_RETURN(doc.impl_->root, parse_toml_named(text, source_name));
    return doc;
}

const std::string& Document::source_name() const { return impl_->source; }

Status Document::apply_override(std::string_view assignment) {
    size_t eq = assignment.find('=');
    if (eq == std::string_view::npos || eq == 0) {
        return invalid_argument("--set {}: expected section.key=value", assignment);
    }
    std::string key(assignment.substr(0, eq));
    std::string value(assignment.substr(eq + 1));
    std::string label = fmt::format("--set {}", assignment);
    // (the value may be an inline table, whose keys are measured as a file's are; so is the key)
    STRATO_RETURN_IF_ERROR(check_toml_keys("v = " + value, label));
    if (std::count(key.begin(), key.end(), '.') >= kMaxTomlKeyParts)
        return invalid_argument("{}: a key of more than {} dotted parts; expected section.key", label, kMaxTomlKeyParts);
    toml::table parsed;
    try {
        parsed = toml::parse("v = " + value, label);
    } catch (const toml::parse_error&) {
        // Digits TOML cannot hold (past 64-bit integers) are a number too large, not a string.
        const size_t first_digit = value.find_first_not_of("+-") == 0 ? 0 : 1;
        if (value.size() > first_digit && value.find_first_not_of("0123456789", first_digit) == std::string::npos)
            return invalid_argument("{}: {} is too large a number (integers are 64-bit)", label, value);
        // Not TOML: a bare string (`--set model.arch=resnet`). Quote it so the node keeps the
        // flag as its source and errors point at it.
        std::string quoted = "\"";
        for (char c : value) {
            if (c == '"' || c == '\\') quoted += '\\';
            if (static_cast<unsigned char>(c) < 0x20) return invalid_argument("{}: control character in value", label);
            quoted += c;
        }
        quoted += '"';
        try {
            parsed = toml::parse("v = " + quoted, label);
        } catch (const toml::parse_error& e) {
            return invalid_argument("{}: cannot parse value: {}", label, e.description());
        }
    }
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
        size_t dot = key.find('.', start);
        parts.push_back(key.substr(start, dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    toml::table* t = &impl_->root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        if (parts[i].empty()) return invalid_argument("--set {}: empty key part in '{}'", assignment, key);
        toml::node* n = t->get(parts[i]);
        if (!n) {
            // A section the config did not have, made by this flag: parsed with the flag as its
            // source, so an unknown one is blamed on the flag, not on the config file.
            toml::table made = toml::parse("v = {}", label);
            t->insert(parts[i], std::move(*made.get("v")));
            n = t->get(parts[i]);
        }
        if (!n->is_table()) return invalid_argument("--set {}: '{}' is not a section", assignment, parts[i]);
        t = n->as_table();
    }
    // Moved, not copied: a moved node keeps its source (the --set flag) for error messages.
    t->insert_or_assign(parts.back(), std::move(*parsed.get("v")));
    return Status::ok();
}

Status Document::bind(const VisitFn& visit) const {
    Reader reader(impl_->root, impl_->source);
    visit(reader);
    reader.finish();
    return reader.status();
}

namespace {

// The shortest text that reads back as the same double ("0.05", not toml++'s 17 digits
// "0.050000000000000003"), with ".0" on a whole number as TOML floats need.
std::string float_text(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof(buf), d).ptr;
    std::string text(buf, end);
    if (text.find_first_of(".eE") == std::string::npos) text += ".0";
    return text;
}

void append_value(std::string& out, const toml::node& n) {
    if (const auto* d = n.as_floating_point()) {
        out += float_text(d->get());
    } else if (const auto* a = n.as_array()) {
        if (a->empty()) {
            out += "[]";
            return;
        }
        out += "[ ";
        for (size_t i = 0; i < a->size(); ++i) {
            if (i > 0) out += ", ";
            append_value(out, (*a)[i]);
        }
        out += " ]";
    } else {  // strings (quoted and escaped as toml++ does), integers, booleans
        std::ostringstream os;
        n.visit([&](const auto& v) { os << v; });
        out += os.str();
    }
}

std::string key_text(std::string_view k) {
    const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (bare) return std::string(k);
    std::ostringstream os;
    os << toml::value<std::string>(std::string(k));
    return os.str();
}

// toml++'s layout ("key = value" lines, then "[a.b]" sections indented by depth, a table of only
// tables without a header of its own), with floats written shortest.
void append_table(std::string& out, const toml::table& t, const std::string& path, int depth) {
    const std::string indent(static_cast<size_t>(4 * std::max(0, depth)), ' ');
    for (const auto& [k, v] : t) {
        if (v.is_table()) continue;
        out += indent + key_text(k.str()) + " = ";
        append_value(out, v);
        out += "\n";
    }
    for (const auto& [k, v] : t) {
        if (!v.is_table()) continue;
        const toml::table& child = *v.as_table();
        const std::string name = (path.empty() ? "" : path + ".") + key_text(k.str());
        const bool only_tables = !child.empty() && std::all_of(child.begin(), child.end(), [](const auto& kv) {
            return kv.second.is_table();
        });
        if (!only_tables) {
            if (!out.empty()) out += "\n";
            out += std::string(static_cast<size_t>(4 * (depth + 1)), ' ') + "[" + name + "]\n";
        }
        append_table(out, child, name, only_tables ? depth : depth + 1);
    }
}

}  // namespace

std::string to_toml(const VisitFn& visit) {
    Writer w;
    visit(w);
    std::string out;
    append_table(out, w.root, "", -1);
    return out;
}

std::string to_json(const VisitFn& visit) {
    Writer w;
    visit(w);
    std::ostringstream os;
    os << toml::json_formatter{w.root};
    return os.str();
}

namespace {

Status json_to_toml(const nlohmann::json& obj, const std::string& prefix, std::string& out, const std::string& source) {
    std::string tables;
    for (const auto& [k, v] : obj.items()) {
        if (v.is_object()) {
            std::string name = (prefix.empty() ? "" : prefix + ".") + nlohmann::json(k).dump();
            tables += "[" + name + "]\n";
            STRATO_RETURN_IF_ERROR(json_to_toml(v, name, tables, source));
        } else if (v.is_null()) {
            return invalid_argument("{}: {}: null is not a valid value", source, k);
        } else {
            out += nlohmann::json(k).dump() + " = " + v.dump() + "\n";
        }
    }
    out += tables;
    return Status::ok();
}

}  // namespace

Status bind_json(std::string_view json_object, const std::string& source, const VisitFn& visit) {
    nlohmann::json j = nlohmann::json::parse(json_object, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument("{}: expected a JSON object", source);
    std::string text;
    STRATO_RETURN_IF_ERROR(json_to_toml(j, "", text, source));
    auto doc = Document::from_string(text, source);
    if (!doc) return doc.status();
    return doc->bind(visit);
}

}  // namespace strato::config
