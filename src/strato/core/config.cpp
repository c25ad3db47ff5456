#include "strato/core/toml_guard.h"
#include "strato/core/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "strato/core/fs.h"
#include "strato/core/json_depth.h"
#include "strato/core/parse.h"

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
        all_known_.push_back(path);
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

    void finish() {
        check_unknown(stack_.front());
        // Hints, now that every section's keys are known: a typo of a key of its section (one edit
        // away); else the same key in another section (found by review: `epochs = 10` at the top, as
        // flat Lightning or argparse configs have it, or `lr` under [train], got the list of the
        // keys where it was); else a looser match in its section; else that list.
        for (const auto& u : unknown_) {
            std::vector<std::string> there;
            for (const auto& k : all_known_) {
                const size_t dot = k.rfind('.');
                if (k != u.path && (dot == std::string::npos ? k : k.substr(dot + 1)) == u.key)
                    there.push_back("'" + k + "'");
            }
            std::string hint;
            if (!u.near.empty() && (u.near_d <= 1 || there.empty())) {
                hint = fmt::format("did you mean '{}'?", u.near);
            } else if (!there.empty()) {
                hint = fmt::format("did you mean {}?", fmt::join(there, " or "));
            } else {
                hint = u.known;
            }
            errors_[u.error] += hint + ")";
        }
    }

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
        all_known_.push_back(join(key));
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
            if (best.empty()) best = similar_key(key, f.known);
            std::string list;
            for (const auto& kn : f.known) list += (list.empty() ? "" : ", ") + kn;
            const std::string path = f.path.empty() ? key : f.path + "." + key;
            // (the hint is added by finish(), when every section's keys are known)
            unknown_.push_back({errors_.size(), key, path,
                                best.empty()     ? ""
                                : f.path.empty() ? best
                                                 : f.path + "." + best,
                                best_d,
                                fmt::format("known keys{}: {}", f.path.empty() ? "" : " in [" + f.path + "]", list)});
            errors_.push_back(fmt::format("{}: unknown key '{}' (", where(node, source_), path));
        }
    }

    // A known key that the unknown one contains or is contained in (`optimizer`, `max_epochs`,
    // `num_workers`, `dataset`: the names Lightning and Hydra configs use for strato's `optim`,
    // `epochs`, `workers`, `data`), the longest; or `lr` for a (misspelt) `learning_rate`. Found by
    // review: these were answered with the list of known keys only.
    static std::string similar_key(const std::string& key, const std::vector<std::string>& known) {
        std::string best;
        for (const auto& kn : known) {
            if (kn.size() < 3 || kn.size() <= best.size()) continue;
            if (key.find(kn) != std::string::npos || (key.size() >= 3 && kn.find(key) != std::string::npos)) best = kn;
        }
        if (best.empty() && edit_distance(key, "learning_rate") <= 2 &&
            std::find(known.begin(), known.end(), "lr") != known.end())
            best = "lr";
        return best;
    }

    void error(const toml::node& n, const std::string& path, const std::string& what) {
        errors_.push_back(fmt::format("{}: {}: {}", where(n, source_), path, what));
    }

    std::string source_;
    std::vector<Frame> stack_;
    std::vector<std::string> errors_;
    std::vector<std::string> all_known_;  // the dotted paths of every key and section visited
    struct Unknown {
        size_t error;           // its entry in errors_, finished by finish()
        std::string key, path;  // "lr", "train.lr"
        std::string near;       // a similar key of its section ("optim.lr"), or ""
        size_t near_d;          // near's edit distance (3: a looser match)
        std::string known;      // "known keys in [optim]: ..."
    };
    std::vector<Unknown> unknown_;
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

namespace {

// Hydra merges a dict given on the command line into the config's (`optim={lr:0.1}` keeps the
// file's other optim keys); so does `--set optim={lr=0.1}`. Moved nodes keep their source (the
// --set flag) for error messages.
void merge_table(toml::table& into, toml::table& from) {
    for (auto&& [k, v] : from) {
        toml::node* have = into.get(k.str());
        if (have && have->is_table() && v.is_table()) {
            merge_table(*have->as_table(), *v.as_table());
        } else {
            into.insert_or_assign(k.str(), std::move(v));
        }
    }
}

// `[hflip, random-crop]` -- also what the shell leaves of an unquoted `["hflip"]` -- with its bare
// words quoted, as Hydra reads words in a list: `["hflip", "random-crop"]`. Only a flat list;
// nullopt when `value` is not one or holds a control character.
std::optional<std::string> quote_list_words(std::string_view value) {
    value = trim_blanks(value);
    if (value.size() < 2 || value.front() != '[' || value.back() != ']') return std::nullopt;
    std::string_view inner = value.substr(1, value.size() - 2);
    if (inner.find_first_of("[]{}\"'#") != std::string_view::npos) return std::nullopt;
    std::string out = "[";
    for (size_t start = 0;;) {
        const size_t comma = inner.find(',', start);
        const std::string_view word = trim_blanks(inner.substr(start, comma - start));
        if (start > 0) out += ", ";
        bool is_toml = word.empty();  // ("[]", or a trailing comma)
        if (!is_toml) {
            try {
                is_toml = toml::parse("v = " + std::string(word)).size() == 1;
            } catch (const toml::parse_error&) {
            }
        }
        if (is_toml) {
            out += word;
        } else {
            for (char c : word)
                if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;
            out += "\"" + std::string(word) + "\"";
        }
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return out + "]";
}

}  // namespace

Status Document::apply_override(std::string_view assignment) {
    // One line (found by review: `--set 'optim.lr=0.1<newline>optim.eps=1'` parsed both lines and
    // dropped the second without a word).
    for (char c : assignment) {
        const auto u = static_cast<unsigned char>(c);
        if ((u < 0x20 && c != '\t') || u == 0x7f) {
            std::string shown;
            for (char d : assignment)
                shown +=
                    static_cast<unsigned char>(d) < 0x20 || d == 0x7f ? fmt::format("\\x{:02x}", d) : std::string(1, d);
            return invalid_argument(
                "--set {}: control character 0x{:02x} in the flag; expected section.key=value on one line", shown, u);
        }
    }
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
    } catch (const toml::parse_error& first) {
        // Digits TOML cannot hold (past 64-bit integers) are a number too large, not a string.
        const size_t first_digit = value.find_first_not_of("+-") == 0 ? 0 : 1;
        if (value.size() > first_digit && value.find_first_not_of("0123456789", first_digit) == std::string::npos)
            return invalid_argument("{}: {} is too large a number (integers are 64-bit)", label, value);
        // So is 1e400 (found by review: it was the string "1e400", "expected a number, got a string").
        std::string digits;
        for (char c : value.substr(value.size() > 1 && value[0] == '+' && value[1] != '-' ? 1 : 0))
            if (c != '_') digits += c;
        double d = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d);
        if (!digits.empty() && end == digits.data() + digits.size() && ec == std::errc::result_out_of_range)
            return invalid_argument("{}: {} is out of range for a number (64-bit floats)", label, value);
        // A list of words is a list of strings (found by review: `--set data.augment=["hflip"]`, whose
        // quotes the shell removes, was the string "[hflip]": "expected an array of strings, got a string").
        if (auto words = quote_list_words(value)) {
            try {
                parsed = toml::parse("v = " + *words, label);
            } catch (const toml::parse_error&) {
                parsed.clear();
            }
        }
        // Another list or table that is not TOML is a mistake, not a string.
        const std::string_view v = trim_blanks(value);
        if (parsed.empty() && !v.empty() && (v.front() == '[' || v.front() == '{'))
            return invalid_argument("{}: the value is not a TOML {} ({}); expected such as {}", label,
                                    v.front() == '[' ? "array" : "inline table", first.description(),
                                    v.front() == '[' ? "[0.9, 0.99] or [\"hflip\", \"random-crop\"]"
                                                     : "{lr = 0.1, momentum = 0.9}");
    }
    if (parsed.empty()) {
        // Not TOML: a bare string (`--set model.arch=resnet`). Quote it so the node keeps the
        // flag as its source and errors point at it.
        std::string quoted = "\"";
        for (char c : value) {
            if (c == '"' || c == '\\') quoted += '\\';
            quoted += c;
        }
        quoted += '"';
        try {
            parsed = toml::parse("v = " + quoted, label);
        } catch (const toml::parse_error& e) {
            return invalid_argument("{}: cannot parse value: {}", label, e.description());
        }
    }
    if (parsed.size() != 1 || !parsed.get("v")) return invalid_argument("{}: expected one value", label);
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
    // Moved, not copied: a moved node keeps its source (the --set flag) for error messages. A
    // table given to a section is merged into it (found by review: `--set optim={lr=0.1}` dropped
    // every other optim key of the file, where Hydra merges).
    toml::node& v = *parsed.get("v");
    toml::node* have = t->get(parts.back());
    if (have && have->is_table() && v.is_table()) {
        merge_table(*have->as_table(), *v.as_table());
    } else {
        t->insert_or_assign(parts.back(), std::move(v));
    }
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

// JSON values as TOML nodes, built directly (found by review: the JSON used to be written out as
// TOML text and parsed again, so 18446744073709551615, a "\u007f" in a string or an array of
// objects in a model package were "TOML syntax error" at a line and column of text the user never
// saw). `path` is the JSON pointer of `v`, for errors.
Status json_to_node(const nlohmann::json& v, const std::string& path, const std::string& source,
                    const std::function<void(toml::node&&)>& put) {
    using Type = nlohmann::json::value_t;
    switch (v.type()) {
        case Type::object: {
            toml::table t;
            for (const auto& item : v.items()) {
                const std::string& key = item.key();  // (clang 14 cannot capture a structured binding)
                STRATO_RETURN_IF_ERROR(json_to_node(item.value(), path + "/" + key, source, [&](toml::node&& n) {
                    t.insert_or_assign(key, std::move(n));
                }));
            }
            put(std::move(t));
            return Status::ok();
        }
        case Type::array: {
            toml::array a;
            for (size_t i = 0; i < v.size(); ++i) {
                STRATO_RETURN_IF_ERROR(json_to_node(v[i], fmt::format("{}/{}", path, i), source,
                                                    [&](toml::node&& n) { a.push_back(std::move(n)); }));
            }
            put(std::move(a));
            return Status::ok();
        }
        case Type::string: put(toml::value<std::string>(v.get<std::string>())); return Status::ok();
        case Type::boolean: put(toml::value<bool>(v.get<bool>())); return Status::ok();
        case Type::number_integer: put(toml::value<int64_t>(v.get<int64_t>())); return Status::ok();
        case Type::number_unsigned:
            if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                return invalid_argument("{}{}: {} is too large a number (integers are 64-bit)", source, path,
                                        v.get<uint64_t>());
            put(toml::value<int64_t>(v.get<int64_t>()));
            return Status::ok();
        case Type::number_float: put(toml::value<double>(v.get<double>())); return Status::ok();
        case Type::null: return invalid_argument("{}{}: null is not a valid value", source, path);
        default: return invalid_argument("{}{}: expected a JSON value", source, path);
    }
}

}  // namespace

Status bind_json(std::string_view json_object, const std::string& source, const VisitFn& visit) {
    STRATO_ASSIGN_OR_RETURN(nlohmann::json j, parse_json_named(json_object, source));
    if (!j.is_object()) return invalid_argument("{}: expected a JSON object", source);
    toml::table root;
    STRATO_RETURN_IF_ERROR(json_to_node(j, "", source, [&](toml::node&& n) { root = std::move(*n.as_table()); }));
    // (Nodes made here have no source: errors name `source`.)
    Reader reader(root, source);
    visit(reader);
    reader.finish();
    return reader.status();
}

}  // namespace strato::config
