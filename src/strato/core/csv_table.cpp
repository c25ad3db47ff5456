#include "strato/core/csv_table.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strato {

namespace {

const std::string kEmpty;

/// Splits one record starting at `pos`; advances `pos` past its line end and `line` by the
/// newlines consumed (quoted fields may span lines).
Result<std::vector<std::string>> read_record(std::string_view text, size_t& pos, int& line,
                                             const std::string& source) {
    std::vector<std::string> fields(1);
    bool quoted = false;
    bool closed = false;  // the field's closing quote was read: only blanks may follow it
    const int start_line = line;
    while (pos < text.size()) {
        char c = text[pos++];
        if (quoted) {
            if (c == '"') {
                if (pos < text.size() && text[pos] == '"') {
                    fields.back() += '"';
                    ++pos;
                } else {
                    quoted = false;
                    closed = true;
                }
            } else {
                if (c == '\n') ++line;
                fields.back() += c;
            }
        } else if (c == '"' && trim_blanks(fields.back()).empty() && !closed) {
            // Blanks before a quoted field are not part of it: `aws, "us-east-1"` is us-east-1.
            fields.back().clear();
            quoted = true;
        } else if (c == ',') {
            fields.emplace_back();
            closed = false;
        } else if (c == '\n' || c == '\r') {
            // A line ends at LF, CRLF or a lone CR (old Mac exports).
            if (c == '\r' && pos < text.size() && text[pos] == '\n') ++pos;
            ++line;
            return fields;
        } else if (closed && c != ' ' && c != '\t') {
            return invalid_argument("{}:{}: field {}: after its closing quote, expected ',' or the end of the line, got "
                                    "'{}' (a quote inside a quoted field is written \"\")",
                                    source, line, fields.size(), c);
        } else if (!closed) {
            fields.back() += c;
        }
    }
    if (quoted) return invalid_argument("{}:{}: a quoted field is not closed", source, start_line);
    ++line;
    return fields;
}

}  // namespace

Result<CsvTable> CsvTable::parse(std::string_view text, const std::string& source) {
    CsvTable t;
    t.source_ = source;
    size_t pos = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;  // a UTF-8 byte-order mark (spreadsheet exports)
    int line = 1;
    bool have_header = false;
    size_t width = 0;
    while (pos < text.size()) {
        int row_line = line;
        STRATO_ASSIGN_OR_RETURN(std::vector<std::string> fields, read_record(text, pos, line, source));
        // Blanks around a field are not part of it: "time_s, rate" names the column rate, and
        // "aws, us-east-1" is the region us-east-1.
        for (auto& f : fields) f = std::string(trim_blanks(f));
        // A blank line, one of blanks, or one of commas only (spreadsheets export empty rows as
        // ",,,,"): no record.
        if (std::all_of(fields.begin(), fields.end(), [](const std::string& f) { return f.empty(); })) continue;
        if (!have_header) {
            for (size_t i = 0; i < fields.size(); ++i) {
                if (!t.columns_.emplace(fields[i], i).second)
                    return invalid_argument("{}:{}: column '{}' appears twice in the header", source, row_line, fields[i]);
            }
            width = fields.size();
            have_header = true;
            t.header_line_ = row_line;
            continue;
        }
        if (fields.size() != width)
            return invalid_argument("{}:{}: expected {} fields as in the header, got {}", source, row_line, width,
                                    fields.size());
        t.rows_.push_back(std::move(fields));
        t.lines_.push_back(row_line);
    }
    if (!have_header) return invalid_argument("{}: empty file (expected a header row)", source);
    return t;
}

Status CsvTable::require_columns(const std::vector<std::string>& names) const {
    for (const auto& n : names) {
        if (columns_.count(n)) continue;
        std::vector<std::string> header(columns_.size());
        for (const auto& [name, i] : columns_) header[i] = "'" + name + "'";
        return invalid_argument("{}:{}: missing column '{}' in the header (expected {}; the header names {})", source_,
                                header_line_, n, fmt::join(names, ", "), fmt::join(header, ", "));
    }
    return Status::ok();
}

Status CsvTable::only_columns(const std::vector<std::string>& known) const {
    std::vector<std::string> header(columns_.size());
    for (const auto& [name, i] : columns_) header[i] = name;
    for (const auto& name : header)  // (in header order: the first unknown one is named)
        if (std::find(known.begin(), known.end(), name) == known.end())
            return invalid_argument("{}:{}: unknown column '{}' in the header (expected only {})", source_, header_line_,
                                    name, fmt::join(known, ", "));
    return Status::ok();
}

const std::string& CsvTable::at(size_t row, std::string_view column) const {
    auto it = columns_.find(std::string(column));
    if (it == columns_.end()) return kEmpty;
    return rows_[row][it->second];
}

}  // namespace strato
