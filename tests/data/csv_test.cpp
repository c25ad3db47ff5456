// CSV tables: parsing (RFC 4180 quoting, line ends, labels) and every error case.

#include "strato/data/csv.h"
#include "strato/data/data_config.h"
#include "strato/data/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace strato::data {
namespace {

std::shared_ptr<CsvDataset> parse_ok(std::string_view text, CsvOptions o = {}) {
    auto r = CsvDataset::parse(text, "t.csv", o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? *r : nullptr;
}

std::vector<float> row(const CsvDataset& ds, int64_t i, int64_t* label) {
    std::vector<float> v(static_cast<size_t>(ds.num_features()));
    EXPECT_TRUE(ds.load_float(i, v.data(), label).is_ok());
    return v;
}

TEST(Csv, IntegerLabelsAnywhereInTheRow) {
    auto ds = parse_ok("a,label,b\n1.5,2,-3\n0,0,1e3\n+4,1,.5\n");
    ASSERT_TRUE(ds);
    EXPECT_EQ(ds->size(), 3);
    EXPECT_TRUE(ds->is_float());
    EXPECT_EQ(ds->shape(), (ImageShape{2, 1, 1}));
    EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"0", "1", "2"}));
    int64_t label = -1;
    EXPECT_EQ(row(*ds, 0, &label), (std::vector<float>{1.5f, -3.0f}));
    EXPECT_EQ(label, 2);
    EXPECT_EQ(row(*ds, 1, &label), (std::vector<float>{0.0f, 1000.0f}));
    EXPECT_EQ(row(*ds, 2, &label), (std::vector<float>{4.0f, 0.5f}));
    EXPECT_EQ(label, 1);
    std::vector<uint8_t> bytes(2);
    Status st = ds->load(0, bytes.data(), &label);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("float features"), std::string::npos) << st.message();
    EXPECT_FALSE(ds->load_float(3, nullptr, &label).is_ok());
}

TEST(Csv, StringLabelsAreSortedClassNames) {
    auto ds = parse_ok("x,species\n1,virginica\n2,setosa\n3, versicolor \n4,setosa\n", {.label_column = "species"});
    ASSERT_TRUE(ds);
    EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"setosa", "versicolor", "virginica"}));
    EXPECT_EQ(ds->labels(), (std::vector<int64_t>{2, 0, 1, 0}));
    // A test file with the training classes: same indices, even for a class it lacks.
    auto test = parse_ok("x,species\n9,virginica\n", {.label_column = "species", .class_names = ds->class_names()});
    ASSERT_TRUE(test);
    EXPECT_EQ(test->labels(), (std::vector<int64_t>{2}));
    EXPECT_EQ(test->num_classes(), 3);
    // Integer labels against integer class names: "02" is class "2".
    auto ints = parse_ok("x,label\n1,02\n", {.class_names = {"0", "1", "2"}});
    ASSERT_TRUE(ints);
    EXPECT_EQ(ints->labels(), (std::vector<int64_t>{2}));
}

TEST(Csv, QuotingLineEndsBomAndBlankLines) {
    const std::string text =
        "\xEF\xBB\xBF\"a, first\",\"b \"\"q\"\"\",label\r\n"
        "\"1\",2,\"multi\nline, label\"\r\n"
        "\r\n"
        "3 , 4,\"\"\"quoted\"\"\"\n"
        "\n"
        "5,6,plain";  // no final line break
    auto ds = parse_ok(text);
    ASSERT_TRUE(ds);
    EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"a, first", "b \"q\""}));
    EXPECT_EQ(ds->size(), 3);
    EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"\"quoted\"", "multi\nline, label", "plain"}));
    int64_t label = -1;
    EXPECT_EQ(row(*ds, 1, &label), (std::vector<float>{3.0f, 4.0f}));
    EXPECT_EQ(label, 0);
    // Another delimiter.
    auto semi = CsvDataset::parse("a;label\n1,5;x\n", "t.csv", {.delimiter = ';'});
    EXPECT_FALSE(semi.is_ok());  // "1,5" is not a number
    auto tab = parse_ok("a\tlabel\n1.5\tx\n", {.delimiter = '\t'});
    ASSERT_TRUE(tab);
    EXPECT_EQ(tab->features(), (std::vector<float>{1.5f}));
}

TEST(Csv, FeatureStatsStandardisePerFeature) {
    auto ds = parse_ok("a,b,c,label\n1,10,7,0\n3,10,7,1\n5,40,7,0\n");
    ASSERT_TRUE(ds);
    std::vector<double> mean, std;
    ASSERT_TRUE(feature_stats(*ds, &mean, &std).is_ok());
    EXPECT_DOUBLE_EQ(mean[0], 3.0);
    EXPECT_DOUBLE_EQ(mean[1], 20.0);
    EXPECT_NEAR(std[0], std::sqrt(8.0 / 3.0), 1e-12);
    EXPECT_NEAR(std[1], std::sqrt(600.0 / 3.0), 1e-12);
    EXPECT_EQ(std[2], 1.0);  // constant
}

// Found by review: a value far outside the training data (1e36 against a std of 1e-3) became inf
// in the batch, and `compress quantize` failed inside torch.histc without naming the sample.
TEST(Csv, AValueThatStandardisesBeyondAFloatNamesTheSample) {
    auto ds = parse_ok("a,b,label\n0.5,1,0\n0.5,1e36,1\n");
    ASSERT_TRUE(ds);
    LoaderOptions o;
    o.batch_size = 2;
    o.workers = 0;
    o.shuffle = false;
    o.mean = {0.5, 1};
    o.std = {1, 1e-3};
    auto loader = Loader::create(ds, o);
    ASSERT_TRUE(loader.is_ok()) << loader.status().message();
    Batch b;
    auto more = (*loader)->next(b);
    ASSERT_FALSE(more.is_ok());
    EXPECT_NE(more.status().message().find("sample 1, feature 2: 1e+36 standardises to inf (mean 1, std 0.001 of the "
                                           "training data), beyond a 32-bit float"),
              std::string::npos)
        << more.status().message();
}

TEST(Csv, OpensFilesAndNamesThemInErrors) {
    const auto path = std::filesystem::temp_directory_path() / ("strato-csv-" + std::to_string(::getpid()) + ".csv");
    std::ofstream(path) << "f,label\n1,0\n2\n";
    auto r = CsvDataset::open(path.string());
    std::filesystem::remove(path);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(path.string() + ":3: the row has 1 fields, the header has 2"),
              std::string::npos)
        << r.status().message();
    auto missing = CsvDataset::open("/nonexistent/x.csv");
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Csv, StringClassesKeepLeadingZerosIntegerClassesDropThem) {
    // "01" and "007" are names among string classes; among integer classes "01" is 1.
    auto strings = CsvDataset::parse("a,label\n1,01\n2,007\n", "t.csv", {.class_names = {"007", "01", "cat"}});
    ASSERT_TRUE(strings.is_ok()) << strings.status().message();
    EXPECT_EQ((*strings)->labels(), (std::vector<int64_t>{1, 0}));
    auto ints = CsvDataset::parse("a,label\n1,01\n2,0\n", "t.csv", {.class_names = {"0", "1"}});
    ASSERT_TRUE(ints.is_ok()) << ints.status().message();
    EXPECT_EQ((*ints)->labels(), (std::vector<int64_t>{1, 0}));
}

TEST(Csv, TestColumnsInAnotherOrderAreRefusedAndEvaluationUsesTheModelsClasses) {
    namespace stdfs = std::filesystem;
    const stdfs::path dir = stdfs::temp_directory_path() / ("strato-csvsplits-" + std::to_string(::getpid()));
    stdfs::create_directories(dir);
    std::ofstream(dir / "train.csv") << "a,b,label\n1,2,cat\n3,4,dog\n5,6,bird\n";
    std::ofstream(dir / "test.csv") << "b,a,label\n2,1,cat\n";
    DataConfig cfg;
    cfg.dataset = "csv";
    cfg.path = dir.string();
    auto swapped = open_datasets(cfg);
    ASSERT_FALSE(swapped.is_ok());
    EXPECT_NE(swapped.status().message().find("the feature columns are b, a, " + (dir / "train.csv").string() +
                                              " has a, b"),
              std::string::npos)
        << swapped.status().message();
    // Evaluation: test.csv alone, labels through the model's classes (train.csv's "bird" made
    // cat index 1, the model's dog).
    std::ofstream(dir / "test.csv") << "a,b,label\n1,2,cat\n3,4,dog\n";
    stdfs::remove(dir / "train.csv");
    auto test = open_evaluation_split(cfg, {"cat", "dog"}, {});
    stdfs::remove_all(dir);
    ASSERT_TRUE(test.is_ok()) << test.status().message();
    ASSERT_EQ((*test)->size(), 2);
    EXPECT_EQ((*test)->class_names(), (std::vector<std::string>{"cat", "dog"}));
    const auto* csv = dynamic_cast<const CsvDataset*>(test->get());
    ASSERT_NE(csv, nullptr);
    EXPECT_EQ(csv->labels(), (std::vector<int64_t>{0, 1}));
}

// data.limit_train / limit_test were refused for CSV tables (held in memory as IDX is): the first
// N rows, as for IDX; the statistics that standardise the features are of those rows.
TEST(Csv, LimitsKeepTheFirstRowsOfEachSplit) {
    namespace stdfs = std::filesystem;
    const stdfs::path dir = stdfs::temp_directory_path() / ("strato-csvlimit-" + std::to_string(::getpid()));
    stdfs::create_directories(dir);
    std::ofstream(dir / "train.csv") << "a,label\n1,x\n3,y\n100,x\n";
    std::ofstream(dir / "test.csv") << "a,label\n1,x\n2,y\n3,x\n";
    DataConfig cfg;
    cfg.dataset = "csv";
    cfg.path = dir.string();
    cfg.limit_train = 2;
    cfg.limit_test = 1;
    auto splits = open_datasets(cfg);
    auto whole_test = open_evaluation_split(cfg, {"x", "y"}, {});
    stdfs::remove_all(dir);
    ASSERT_TRUE(splits.is_ok()) << splits.status().message();
    EXPECT_EQ(splits->train->size(), 2);
    EXPECT_EQ(splits->test->size(), 1);
    ASSERT_EQ(splits->mean.size(), 1u);
    EXPECT_DOUBLE_EQ(splits->mean[0], 2.0);  // of rows 1 and 3, not of the 100 left out
    EXPECT_EQ(splits->train->class_names(), (std::vector<std::string>{"x", "y"}));
    ASSERT_TRUE(whole_test.is_ok()) << whole_test.status().message();
    EXPECT_EQ((*whole_test)->size(), 1);  // (limit_test limits `strato eval` too)
}

TEST(DataPath, AFileIsNotADatasetDirectoryNorMissing) {
    const auto file = std::filesystem::temp_directory_path() / ("strato-notadir-" + std::to_string(::getpid()) + ".toml");
    std::ofstream(file) << "[data]\n";
    for (const char* kind : {"csv", "image-folder", "idx"}) {
        DataConfig cfg;
        cfg.dataset = kind;
        cfg.path = file.string();
        auto r = open_evaluation_split(cfg, {"a", "b"}, {});
        ASSERT_FALSE(r.is_ok()) << kind;
        EXPECT_NE(r.status().message().find(file.string() + " is a file, not a dataset directory"), std::string::npos)
            << kind << ": " << r.status().message();
    }
    std::filesystem::remove(file);
}

struct ErrorCase {
    const char* what;
    std::string text;
    std::string expected;
    CsvOptions options = {};
};

TEST(Csv, EveryErrorSaysWhereAndWhat) {
    const std::vector<ErrorCase> cases = {
        {"empty file", "", "t.csv: empty; expected a header row"},
        {"only blank lines", "\n\n", "t.csv: empty; expected a header row"},
        {"header only", "a,label\n", "t.csv: a header but no data rows"},
        {"no label column", "a,b\n1,2\n", "t.csv:1: no label column 'label' in the header (columns: a, b)"},
        {"label column named", "a,y\n1,2\n", "no label column 'target'", {.label_column = "target"}},
        {"duplicate label column", "label,a,label\n1,2,3\n",
         "t.csv:1: two columns are named 'label' (columns 1 and 3)"},
        {"no features", "label\n1\n", "t.csv:1: no feature columns"},
        {"ragged short", "a,b,label\n1,2,0\n3,0\n", "t.csv:3: the row has 2 fields, the header has 3"},
        {"ragged long", "a,label\n1,2,3\n", "t.csv:2: the row has 3 fields, the header has 2 (an unquoted delimiter"},
        {"empty value", "a,b,label\n1,2,0\n4,,1\n", "t.csv:3:3: column 'b': empty value, expected a number"},
        {"quoted empty value", "a,label\n\"\",1\n", "t.csv:2:1: column 'a': empty value"},
        {"non-numeric", "a,b,label\n1,abc,0\n", "t.csv:2:3: column 'b': 'abc' is not a number"},
        {"trailing garbage", "a,label\n1.5x,0\n", "t.csv:2:1: column 'a': '1.5x' is not a number"},
        {"nan", "a,label\nnan,0\n", "t.csv:2:1: column 'a': 'nan' is not a finite 32-bit float"},
        {"inf", "a,label\n-inf,0\n", "'-inf' is not a finite 32-bit float"},
        {"too big for float", "a,label\n1e39,0\n", "'1e39' is not a finite 32-bit float"},
        {"too big for double", "a,label\n1e400,0\n", "'1e400' is not a finite 32-bit float"},
        // Found by review: "+-5" read as -5; "+" then another sign is no number.
        {"two signs", "a,label\n+-5,0\n", "t.csv:2:1: column 'a': '+-5' is not a number"},
        {"unnamed column", ",label\nx,0\n", "t.csv:2:1: column 1: 'x' is not a number"},
        {"line numbers count quoted line breaks", "a,label\n1,\"x\ny\"\nz,0\n", "t.csv:4:1: column 'a': 'z'"},
        {"unterminated quote", "a,label\n1,\"open\n2,3\n", "t.csv:2:3: the quote opened here is never closed"},
        {"quote inside unquoted field", "a,label\n1,ab\"c\n", "t.csv:2:5: a quote inside an unquoted field"},
        {"text after closing quote", "a,label\n1,\"ab\"c\n", "t.csv:2:7: 'c' after a closing quote"},
        {"empty label", "a,label\n1,\n", "t.csv:2:3: column 'label': empty label"},
        {"negative label", "a,label\n1,-1\n", "t.csv:2:3: column 'label': label -1 is negative"},
        {"huge label", "a,label\n1,5000000\n", "label 5000000 is too large for a class index"},
        {"unknown class",
         "a,label\n1,cat\n2,bird\n",
         "t.csv:3:3: column 'label': label 'bird' is not one of the 2 known classes (cat, dog: the training data's, "
         "or the model's when evaluating a package)",
         {.class_names = {"cat", "dog"}}},
        {"quote as delimiter", "a\"label\n", "the delimiter cannot be a quote", {.delimiter = '"'}},
    };
    // ... and a value too small for a double is 0, as one too small for a float is (it was refused).
    auto tiny = CsvDataset::parse("a,b,label\n1e-400,-1e-50,0\n+2,3,1\n", "t.csv", {});
    ASSERT_TRUE(tiny.is_ok()) << tiny.status().message();
    for (const ErrorCase& c : cases) {
        auto r = CsvDataset::parse(c.text, "t.csv", c.options);
        ASSERT_FALSE(r.is_ok()) << c.what;
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
        EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << c.what << ": " << r.status().message();
    }
}

}  // namespace
}  // namespace strato::data
