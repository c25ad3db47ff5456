#include "strato/data/csv.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include "strato/core/fs.h"

namespace strato::data {
namespace {

constexpr int64_t kMaxIntegerClasses = 1000000;

struct Field {
    std::string value;
    int64_t line = 0, column = 0;  // where the field starts, 1-based (column in bytes)
    bool quoted = false;
};

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

/// Reads RFC 4180 records one at a time.
class CsvReader {
  public:
    CsvReader(std::string_view text, std::string source, char delim)
        : text_(text), source_(std::move(source)), delim_(delim) {
        if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte-order mark
    }

    /// Reads the next record into `out`; false at the end of the text.
    Result<bool> next(std::vector<Field>* out) {
        out->clear();
        if (pos_ >= text_.size()) return false;
        for (;;) {
            Field f;
            f.line = line_;
            f.column = static_cast<int64_t>(pos_ - line_start_) + 1;
            if (pos_ < text_.size() && text_[pos_] == '"') {
                f.quoted = true;
                ++pos_;
                for (;;) {
                    if (pos_ >= text_.size()) {
                        return invalid_argument("{}:{}:{}: the quote opened here is never closed", source_, f.line,
                                                f.column);
                    }
                    const char c = text_[pos_];
                    if (c == '"') {
                        if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '"') {
                            f.value.push_back('"');
                            pos_ += 2;
                            continue;
                        }
                        ++pos_;
                        break;
                    }
                    if (c == '\n') {
                        ++line_;
                        line_start_ = pos_ + 1;
                    }
                    f.value.push_back(c);
                    ++pos_;
                }
                if (pos_ < text_.size() && text_[pos_] != delim_ && text_[pos_] != '\r' && text_[pos_] != '\n') {
                    return invalid_argument(
                        "{}:{}:{}: '{}' after a closing quote; a quoted field ends at the quote "
                        "(double a quote inside it: \"\")",
                        source_, line_, column(), text_[pos_]);
                }
            } else {
                const size_t start = pos_;
                while (pos_ < text_.size() && text_[pos_] != delim_ && text_[pos_] != '\r' && text_[pos_] != '\n') {
                    if (text_[pos_] == '"') {
                        return invalid_argument(
                            "{}:{}:{}: a quote inside an unquoted field; quote the whole field and "
                            "double the quote (\"a \"\"b\"\"\")",
                            source_, line_, column());
                    }
                    ++pos_;
                }
                f.value.assign(text_.substr(start, pos_ - start));
            }
            out->push_back(std::move(f));
            if (pos_ < text_.size() && text_[pos_] == delim_) {
                ++pos_;
                continue;
            }
            if (pos_ < text_.size() && text_[pos_] == '\r') ++pos_;
            if (pos_ < text_.size() && text_[pos_] == '\n') ++pos_;
            ++line_;
            line_start_ = pos_;
            return true;
        }
    }

  private:
    int64_t column() const { return static_cast<int64_t>(pos_ - line_start_) + 1; }

    std::string_view text_;
    std::string source_;
    char delim_;
    size_t pos_ = 0, line_start_ = 0;
    int64_t line_ = 1;
};

bool blank(const std::vector<Field>& rec) { return rec.size() == 1 && !rec[0].quoted && trim(rec[0].value).empty(); }

// One sign at most: "+5" is 5, "+-5" is no number (from_chars took the '-' after the '+').
std::string_view unsigned_part(std::string_view s) {
    if (s.empty() || s.front() != '+') return s;
    s.remove_prefix(1);
    return !s.empty() && s.front() == '-' ? std::string_view() : s;
}

bool parse_integer(std::string_view s, int64_t* v) {
    s = unsigned_part(s);
    if (s.empty()) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Result<std::shared_ptr<CsvDataset>> CsvDataset::open(const std::string& path, const CsvOptions& options) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path));
    return parse(text, path, options);
}

Result<std::shared_ptr<CsvDataset>> CsvDataset::parse(std::string_view text, const std::string& source,
                                                      const CsvOptions& options) {
    if (options.delimiter == '"' || options.delimiter == '\n' || options.delimiter == '\r') {
        return invalid_argument("{}: the delimiter cannot be a quote or a line break", source);
    }
    CsvReader reader(text, source, options.delimiter);
    std::vector<Field> rec;
    // Header.
    for (;;) {
        STRATO_ASSIGN_OR_RETURN(bool more, reader.next(&rec));
        if (!more) return invalid_argument("{}: empty; expected a header row naming the columns", source);
        if (!blank(rec)) break;
    }
    std::vector<std::string> header;
    for (const Field& f : rec) header.emplace_back(trim(f.value));
    const int64_t header_line = rec.front().line;
    int64_t label_col = -1;
    for (size_t c = 0; c < header.size(); ++c) {
        if (header[c] != options.label_column) continue;
        if (label_col >= 0) {
            return invalid_argument(
                "{}:{}: two columns are named '{}' (columns {} and {}); the label column must be unique", source,
                header_line, options.label_column, label_col + 1, c + 1);
        }
        label_col = static_cast<int64_t>(c);
    }
    if (label_col < 0) {
        std::string cols;
        for (const auto& h : header) cols += (cols.empty() ? "" : ", ") + h;
        return invalid_argument("{}:{}: no label column '{}' in the header (columns: {}); name the label column",
                                source, header_line, options.label_column, cols);
    }
    if (header.size() < 2)
        return invalid_argument("{}:{}: no feature columns besides the label '{}'", source, header_line,
                                options.label_column);

    auto ds = std::shared_ptr<CsvDataset>(new CsvDataset());
    ds->source_ = source;
    for (size_t c = 0; c < header.size(); ++c)
        if (static_cast<int64_t>(c) != label_col) ds->feature_names_.push_back(header[c]);
    auto col_name = [&](size_t c) {
        return header[c].empty() ? fmt::format("column {}", c + 1) : fmt::format("column '{}'", header[c]);
    };

    std::vector<Field> label_fields;
    for (;;) {
        STRATO_ASSIGN_OR_RETURN(bool more, reader.next(&rec));
        if (!more) break;
        if (blank(rec)) continue;
        if (rec.size() != header.size()) {
            return invalid_argument("{}:{}: the row has {} fields, the header has {}{}", source, rec.front().line,
                                    rec.size(), header.size(),
                                    rec.size() > header.size() ? " (an unquoted delimiter in a value?)" : "");
        }
        for (size_t c = 0; c < rec.size(); ++c) {
            const Field& f = rec[c];
            if (static_cast<int64_t>(c) == label_col) {
                label_fields.push_back(f);
                continue;
            }
            std::string_view s = trim(f.value);
            const std::string where = fmt::format("{}:{}:{}: {}", source, f.line, f.column, col_name(c));
            if (s.empty()) return invalid_argument("{}: empty value, expected a number", where);
            std::string_view digits = unsigned_part(s);
            double v = 0;
            auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
            if (digits.empty() || ec == std::errc::invalid_argument || p != digits.data() + digits.size()) {
                return invalid_argument("{}: '{}' is not a number", where, s);
            }
            // Too small for a double (1e-400) is 0, as 1e-50 is once it is a float; too large stays an error.
            if (ec == std::errc::result_out_of_range && std::fabs(std::strtod(std::string(digits).c_str(), nullptr)) < 1) {
                ec = std::errc();
                v = 0;
            }
            if (ec == std::errc::result_out_of_range || !std::isfinite(v) ||
                std::fabs(v) > std::numeric_limits<float>::max()) {
                return invalid_argument("{}: '{}' is not a finite 32-bit float", where, s);
            }
            ds->features_.push_back(static_cast<float>(v));
        }
    }
    if (label_fields.empty()) return invalid_argument("{}: a header but no data rows", source);

    // Labels: integers (class indices) or strings (sorted class names).
    auto where = [&](const Field& f) {
        return fmt::format("{}:{}:{}: {}", source, f.line, f.column, col_name(static_cast<size_t>(label_col)));
    };
    bool all_int = true;
    int64_t max_label = 0;
    for (const Field& f : label_fields) {
        std::string_view s = trim(f.value);
        if (s.empty()) return invalid_argument("{}: empty label", where(f));
        int64_t v = 0;
        if (!parse_integer(s, &v)) {
            all_int = false;
            continue;
        }
        max_label = std::max(max_label, v);
    }
    if (!options.class_names.empty()) {
        std::map<std::string, int64_t> index;
        for (size_t c = 0; c < options.class_names.size(); ++c) index[options.class_names[c]] = static_cast<int64_t>(c);
        // Integer classes ("0", "1", ...) take "01" as 1; string classes keep "007" as it is written.
        const bool integer_classes = std::all_of(options.class_names.begin(), options.class_names.end(), [](const std::string& n) {
            int64_t v = 0;
            return parse_integer(n, &v) && std::to_string(v) == n;
        });
        for (const Field& f : label_fields) {
            std::string s(trim(f.value));
            int64_t v = 0;
            if (integer_classes && parse_integer(s, &v)) s = std::to_string(v);
            auto it = index.find(s);
            if (it == index.end()) {
            {
                // (the classes are the training file's, or a package's when evaluating one)
                const auto& names = options.class_names;
                const size_t shown = std::min<size_t>(names.size(), 10);
                return invalid_argument("{}: label '{}' is not one of the {} known classes ({}{}: the training data's, "
                                        "or the model's when evaluating a package)",
                                        where(f), trim(f.value), names.size(),
                                        fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                                        names.size() > shown ? ", ..." : "");
            }
            }
            ds->labels_.push_back(it->second);
        }
        ds->class_names_ = options.class_names;
    } else if (all_int) {
        for (const Field& f : label_fields) {
            int64_t v = 0;
            parse_integer(trim(f.value), &v);
            if (v < 0)
                return invalid_argument("{}: label {} is negative; integer labels are class indices >= 0", where(f), v);
            if (v >= kMaxIntegerClasses) {
                return invalid_argument("{}: label {} is too large for a class index (at most {} classes)", where(f), v,
                                        kMaxIntegerClasses);
            }
            ds->labels_.push_back(v);
        }
        for (int64_t c = 0; c <= max_label; ++c) ds->class_names_.push_back(std::to_string(c));
    } else {
        std::map<std::string, int64_t> index;
        for (const Field& f : label_fields) index[std::string(trim(f.value))] = 0;
        int64_t c = 0;
        for (auto& [name, i] : index) {
            i = c++;
            ds->class_names_.push_back(name);
        }
        for (const Field& f : label_fields) ds->labels_.push_back(index[std::string(trim(f.value))]);
    }
    return ds;
}

Status CsvDataset::load(int64_t index, uint8_t* dst, int64_t* label) const {
    (void)index;
    (void)dst;
    (void)label;
    return invalid_argument("{}: a CSV dataset holds float features, not uint8 images (load it with load_float)",
                            source_);
}

Status CsvDataset::load_float(int64_t index, float* dst, int64_t* label) const {
    if (index < 0 || index >= size())
        return invalid_argument("{}: sample index {} out of range [0, {})", source_, index, size());
    const auto nf = static_cast<size_t>(num_features());
    std::memcpy(dst, features_.data() + static_cast<size_t>(index) * nf, nf * sizeof(float));
    *label = labels_[static_cast<size_t>(index)];
    return Status::ok();
}

Status feature_stats(const Dataset& ds, std::vector<double>* mean, std::vector<double>* std) {
    if (!ds.is_float()) return invalid_argument("feature_stats needs a float dataset (a CSV table)");
    if (ds.size() == 0) return invalid_argument("feature_stats: the dataset is empty");
    const auto nf = static_cast<size_t>(ds.shape().numel());
    std::vector<float> row(nf);
    std::vector<double> m(nf, 0.0), m2(nf, 0.0);  // Welford
    for (int64_t i = 0; i < ds.size(); ++i) {
        int64_t label = 0;
        STRATO_RETURN_IF_ERROR(ds.load_float(i, row.data(), &label));
        const double n = static_cast<double>(i + 1);
        for (size_t f = 0; f < nf; ++f) {
            const double d = row[f] - m[f];
            m[f] += d / n;
            m2[f] += d * (row[f] - m[f]);
        }
    }
    mean->assign(m.begin(), m.end());
    std->resize(nf);
    for (size_t f = 0; f < nf; ++f) {
        const double sd = std::sqrt(m2[f] / static_cast<double>(ds.size()));
        (*std)[f] = sd > 0 ? sd : 1.0;
    }
    return Status::ok();
}

void CsvDataset::truncate(int64_t n) {
    if (n < 0 || n >= size()) return;
    labels_.resize(static_cast<size_t>(n));
    features_.resize(static_cast<size_t>(n * num_features()));
}

}  // namespace strato::data
