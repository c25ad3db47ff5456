// The CSV table reader behind the cloud catalog and traffic traces.

#include "strato/core/csv_table.h"

#include <gtest/gtest.h>

namespace strato {
namespace {

TEST(Csv, QuotedFieldsAndErrors) {
    auto t = CsvTable::parse("a,b\n\"x,1\",\"say \"\"hi\"\"\"\r\n\n3,4\n", "t.csv");
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_EQ(t.value().rows(), 2u);
    EXPECT_EQ(t.value().at(0, "a"), "x,1");
    EXPECT_EQ(t.value().at(0, "b"), "say \"hi\"");
    EXPECT_EQ(t.value().line(1), 4);
    auto bad = CsvTable::parse("a,b\n1,2,3\n", "t.csv");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().message(), "t.csv:2: expected 2 fields as in the header, got 3");
    EXPECT_FALSE(CsvTable::parse("a\n\"open\n", "t.csv").is_ok());
    EXPECT_FALSE(CsvTable::parse("", "t.csv").is_ok());
}

TEST(Csv, ByteOrderMarkAndSpacedHeaderNamesAndDuplicates) {
    auto t = CsvTable::parse("\xEF\xBB\xBFtime_s, rate\n1, 2\n", "t.csv");
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_TRUE(t->require_columns({"time_s", "rate"}).is_ok());
    EXPECT_EQ(t->at(0, "rate"), "2");  // blanks around fields are dropped ("aws, us-east-1" is us-east-1)
    EXPECT_EQ(t->at(0, "missing"), "");
    EXPECT_EQ(t->require_columns({"time_s", "preempt"}).message(), "t.csv:1: missing column 'preempt' in the header (expected time_s, preempt; the header names 'time_s', 'rate')");
    EXPECT_TRUE(t->only_columns({"time_s", "rate", "preempt"}).is_ok());
    EXPECT_EQ(t->only_columns({"time_s"}).message(), "t.csv:1: unknown column 'rate' in the header (expected only time_s)");
    EXPECT_EQ(CsvTable::parse("a, a\n", "t.csv").status().message(), "t.csv:1: column 'a' appears twice in the header");
    EXPECT_EQ(CsvTable::parse("\n\n", "t.csv").status().message(), "t.csv: empty file (expected a header row)");
}

// Found by review: text after a closing quote was glued to the field ("g4dn"xlarge read as
// g4dnxlarge); a file with lone-CR line ends (old Mac exports) was one record, and its error
// spoke of a duplicate column; a line of blanks was a record of one empty field.
TEST(Csv, TextAfterAClosingQuoteLoneCrLinesAndBlankLines) {
    auto glued = CsvTable::parse("a,b\n\"g4dn\"xlarge,1\n", "t.csv");
    ASSERT_FALSE(glued.is_ok());
    EXPECT_EQ(glued.status().message(), "t.csv:2: field 1: after its closing quote, expected ',' or the end of the line, "
                                        "got 'x' (a quote inside a quoted field is written \"\")");
    auto spaced = CsvTable::parse("a,b\n\"x\" , 2\n", "t.csv");
    ASSERT_TRUE(spaced.is_ok()) << spaced.status().message();
    EXPECT_EQ(spaced->at(0, "a"), "x");
    auto cr = CsvTable::parse("a,b\r1,2\r3,4\r", "t.csv");
    ASSERT_TRUE(cr.is_ok()) << cr.status().message();
    EXPECT_EQ(cr->rows(), 2u);
    EXPECT_EQ(cr->at(1, "b"), "4");
    EXPECT_EQ(cr->line(1), 3);
    auto blanks = CsvTable::parse("a,b\n  \t\n1,2\n", "t.csv");
    ASSERT_TRUE(blanks.is_ok()) << blanks.status().message();
    EXPECT_EQ(blanks->rows(), 1u);
    EXPECT_EQ(blanks->line(0), 3);
}

}  // namespace
}  // namespace strato
