#pragma once
// A small RFC 4180 CSV reader for tables read whole (the cloud catalog, traffic traces): quoted
// fields with "" escapes, CRLF or LF, a UTF-8 byte-order mark skipped, a header row naming the
// columns, every field (names too) trimmed of blanks (also before an opening quote), lines of
// blanks or of commas only skipped. Errors name the source and the line.
// Datasets have their own streaming reader with typed columns (data/csv.h).

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "strato/core/parse.h"  // parse_number, for the fields
#include "strato/core/status.h"

namespace strato {

class CsvTable {
public:
    /// Parses `text`; the first row is the header. Rows with a different number of fields than
    /// the header, unterminated quotes and duplicate column names are errors naming the line.
    static Result<CsvTable> parse(std::string_view text, const std::string& source);

    /// Fails naming the first of `names` the header lacks.
    Status require_columns(const std::vector<std::string>& names) const;
    /// Fails naming the first column of the header that is not one of `known` (a misspelt
    /// optional column, "preemt", was read as absent without a word).
    Status only_columns(const std::vector<std::string>& known) const;

    size_t rows() const { return rows_.size(); }
    /// The field in `column` of row `row` (empty when the column does not exist).
    const std::string& at(size_t row, std::string_view column) const;
    /// 1-based line of a row in the source, for error messages.
    int line(size_t row) const { return lines_[row]; }
    const std::string& source() const { return source_; }

private:
    std::string source_;
    std::unordered_map<std::string, size_t> columns_;
    std::vector<std::vector<std::string>> rows_;
    std::vector<int> lines_;
    int header_line_ = 1;
};

}  // namespace strato
