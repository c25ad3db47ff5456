#pragma once
// A tabular dataset from a CSV file (RFC 4180): a header row naming the columns, one row per
// sample, numeric feature columns and one label column. Samples are float feature vectors of
// shape {features, 1, 1}, so the loader's per-channel normalisation is a per-feature
// standardisation (feature_stats gives the mean and standard deviation).
//
//   sepal_length,sepal_width,petal_length,petal_width,species
//   5.1,3.5,1.4,0.2,setosa
//
//   auto train = CsvDataset::open("iris_train.csv", {.label_column = "species"}).value();
//   auto test = CsvDataset::open("iris_test.csv", {.label_column = "species",
//                                                  .class_names = train->class_names()}).value();
//
// Labels are integers >= 0 (class names "0", "1", ... up to the largest) or strings (class names
// are the distinct strings, sorted). Quoted fields may hold commas, doubled quotes and line
// breaks; CRLF and LF line ends, a UTF-8 byte-order mark and blank lines are accepted. Every
// problem is an error naming file:line:column and the column: an empty or non-numeric feature,
// a row with more or fewer fields than the header, an unterminated quote.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strato/data/dataset.h"

namespace strato::data {

struct CsvOptions {
    std::string label_column = "label";
    char delimiter = ',';
    /// The training file's classes, for a test file: its labels must be among them, and get the
    /// same indices. Empty: taken from this file's labels.
    std::vector<std::string> class_names;
};

class CsvDataset final : public Dataset {
  public:
    static Result<std::shared_ptr<CsvDataset>> open(const std::string& path, const CsvOptions& options = {});
    /// Parses CSV text; `source` names it in errors (a file name).
    static Result<std::shared_ptr<CsvDataset>> parse(std::string_view text, const std::string& source,
                                                     const CsvOptions& options = {});

    int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
    ImageShape shape() const override { return {num_features(), 1, 1}; }
    const std::vector<std::string>& class_names() const override { return class_names_; }
    /// Fails: the samples are floats (load_float).
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override;
    bool is_float() const override { return true; }
    Status load_float(int64_t index, float* dst, int64_t* label) const override;

    int64_t num_features() const { return static_cast<int64_t>(feature_names_.size()); }
    const std::vector<std::string>& feature_names() const { return feature_names_; }
    /// Row-major [size, features].
    const std::vector<float>& features() const { return features_; }
    const std::vector<int64_t>& labels() const { return labels_; }
    /// Keeps the first `n` rows (data.limit_train / limit_test).
    void truncate(int64_t n);

  private:
    CsvDataset() = default;
    std::string source_;
    std::vector<std::string> feature_names_;
    std::vector<std::string> class_names_;
    std::vector<float> features_;
    std::vector<int64_t> labels_;
};

/// Per-feature mean and (population) standard deviation of a float dataset (is_float()), over
/// all its samples. A constant feature gets a standard deviation of 1, so standardising it gives
/// 0 rather than a division by zero.
Status feature_stats(const Dataset& ds, std::vector<double>* mean, std::vector<double>* std);

}  // namespace strato::data
