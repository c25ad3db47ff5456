#pragma once
// Typed, validated configuration from TOML.
//
// A config struct describes its fields once, in `void visit(config::Visitor&)`; the same
// description reads a TOML document (with `--set section.key=value` overrides), checks types
// and ranges, rejects unknown keys, and writes the fully resolved config back out.
//
//   struct OptimConfig {
//       double lr = 0.1;
//       void visit(config::Visitor& v) { v.field("lr", lr, config::Range::positive()); }
//   };
//   struct Config { OptimConfig optim; void visit(config::Visitor& v) { v.section("optim", [&] { optim.visit(v); }); } };
//   Result<Config> cfg = config::load<Config>("train.toml", {"optim.lr=0.05"});
//
// Errors name the file and line (or the --set flag) and the dotted key, and say what was expected.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strato/core/status.h"

namespace strato::config {

struct Range {
    double min = -std::numeric_limits<double>::infinity();
    double max = std::numeric_limits<double>::infinity();
    bool min_exclusive = false;
    bool max_exclusive = false;

    static Range any() { return {}; }
    static Range positive() { return {0.0, std::numeric_limits<double>::infinity(), true, false}; }
    static Range non_negative() { return {0.0}; }
    static Range at_least(double lo) { return {lo}; }
    static Range between(double lo, double hi) { return {lo, hi}; }
    /// [lo, hi)
    static Range half_open(double lo, double hi) { return {lo, hi, false, true}; }

    bool contains(double x) const;
    /// "a number > 0", "an integer in [1, 64]"
    std::string describe(bool integer) const;
};

using Choices = std::vector<std::string>;

/// Walks the fields of a config struct. Implemented by the reader and the writer.
class Visitor {
public:
    virtual ~Visitor() = default;
    virtual void section(std::string_view name, const std::function<void()>& body) = 0;
    virtual void field(std::string_view key, int64_t& value, Range range = {}) = 0;
    virtual void field(std::string_view key, double& value, Range range = {}) = 0;
    virtual void field(std::string_view key, bool& value) = 0;
    virtual void field(std::string_view key, std::string& value, const Choices& choices = {}) = 0;
    virtual void field(std::string_view key, std::vector<std::string>& value, const Choices& choices = {}) = 0;
    virtual void field(std::string_view key, std::vector<double>& value, Range range = {}) = 0;
    virtual void field(std::string_view key, std::vector<int64_t>& value, Range range = {}) = 0;
};

using VisitFn = std::function<void(Visitor&)>;

/// A parsed TOML document plus overrides. Cheap to copy (shared, immutable after binding).
class Document {
public:
    static Result<Document> from_file(const std::string& path);
    static Result<Document> from_string(std::string_view text, const std::string& source_name);

    /// Applies one `dotted.key=value` override; the value is TOML (`0.1`, `true`, `[1, 2]`,
    /// `"x"`) or, when it does not parse as TOML, a bare string.
    Status apply_override(std::string_view assignment);

    /// Reads the document into the fields `visit` declares. Every problem is reported, one per line.
    Status bind(const VisitFn& visit) const;

    const std::string& source_name() const;

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

/// Serialises the fields `visit` declares as TOML.
std::string to_toml(const VisitFn& visit);
/// Serialises the fields `visit` declares as a JSON object.
std::string to_json(const VisitFn& visit);
/// Reads a JSON object (as to_json writes it) into the fields `visit` declares, with the same
/// checks as TOML; `source` names it in errors ("model/strato-model.json /model").
Status bind_json(std::string_view json_object, const std::string& source, const VisitFn& visit);

template <typename T>
Result<T> load(const std::string& path, const std::vector<std::string>& overrides = {}) {
    STRATO_ASSIGN_OR_RETURN(Document doc, Document::from_file(path));
    for (const auto& o : overrides) STRATO_RETURN_IF_ERROR(doc.apply_override(o));
    T cfg;
    STRATO_RETURN_IF_ERROR(doc.bind([&](Visitor& v) { cfg.visit(v); }));
    return cfg;
}

template <typename T>
Result<T> load_string(std::string_view text, const std::vector<std::string>& overrides = {}) {
    STRATO_ASSIGN_OR_RETURN(Document doc, Document::from_string(text, "<string>"));
    for (const auto& o : overrides) STRATO_RETURN_IF_ERROR(doc.apply_override(o));
    T cfg;
    STRATO_RETURN_IF_ERROR(doc.bind([&](Visitor& v) { cfg.visit(v); }));
    return cfg;
}

template <typename T>
std::string dump(const T& cfg) {
    T copy = cfg;
    return to_toml([&](Visitor& v) { copy.visit(v); });
}

/// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace strato::config
