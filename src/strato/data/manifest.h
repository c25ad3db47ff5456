#pragma once
// What a dataset holds, and whether it is still what it was: `strato data stats` and
// `strato data verify` over an image folder, a root with train/ (val/) test/ splits, or a shard
// directory written by `strato data pack` (with or without splits).
//
// Stats: samples per split, per class counts and their balance (smallest / largest), image
// sizes from the headers (min, median, max), bytes, formats, unreadable files with the first
// few names. With hashing on, also a content manifest: the SHA-256 of every file of the dataset
// (images; or index.json and shards) by path relative to the dataset root, and a dataset hash
// over them, so a dataset version can be pinned:
//
//   dataset hash = SHA-256 of the lines "<sha256>  <path>\n" sorted by path (bytewise), which is
//   what `sha256sum` prints, so `LC_ALL=C sort -k2 | sha256sum` over its output agrees. As there,
//   a path holding '\\', '\n' or '\r' makes the line "\\<sha256>  <path>" with those escaped
//   ("\\\\", "\\n", "\\r"): a name with a newline cannot forge another file's line.
//
//   auto st = dataset_stats("photos", {.hash = true}).value();
//   write_manifest("photos.manifest.json", *st.manifest);
//   ...
//   auto m = read_manifest("photos.manifest.json").value();
//   auto report = verify_dataset("photos", {.manifest = &m, .decode = true}).value();
//   if (!report.ok()) ...  // report.problems: missing, changed, extra, corrupt

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "strato/core/status.h"

namespace strato::data {

inline constexpr const char* kManifestFormat = "strato-manifest";

/// SHA-256 and size of every file of a dataset, by path relative to its root ("train/cat/1.jpg").
struct Manifest {
    std::string kind;  // "image-folder" or "shards"
    std::map<std::string, std::string> sha256;
    std::map<std::string, int64_t> bytes;
    std::string dataset_hash;
};

/// The dataset hash of a path → SHA-256 map (see above).
std::string dataset_hash(const std::map<std::string, std::string>& sha256);
nlohmann::json manifest_to_json(const Manifest& m);
Result<Manifest> manifest_from_json(const std::string& text, const std::string& what);
/// Fails unless `path` may take a manifest: it does not exist, is empty, or already holds a strato
/// manifest (an earlier one). Anything else (a shard index, a CSV table, a config) is refused,
/// naming the file and what it holds. With `dataset`, a path inside the dataset is refused too.
/// `flag` names the option in messages ("--manifest").
Status check_manifest_output(const std::string& path, const std::string& dataset = "",
                             const std::string& flag = "manifest");
/// Atomic write, one file per line (diffs well). Checks check_manifest_output() first.
Status write_manifest(const std::string& path, const Manifest& m);
Result<Manifest> read_manifest(const std::string& path);

struct SplitStats {
    std::string name;  // "train", "val", "test", or "" for a dataset without splits
    int64_t samples = 0;
    std::vector<std::string> class_names;
    std::vector<int64_t> class_counts;
    double balance = 0;  // smallest class count / largest: 1 = balanced, 0 = a class has no sample
    int64_t width_min = 0, width_median = 0, width_max = 0;
    int64_t height_min = 0, height_median = 0, height_max = 0;
    int64_t image_bytes = 0;                 // the encoded images
    int64_t shards = 0, shard_bytes = 0;     // a shard dataset's files
    std::map<std::string, int64_t> formats;  // "jpeg", "png"
    int64_t unreadable = 0;
    std::vector<std::string> unreadable_examples;  // the first few, "name: reason"
};

struct DatasetStats {
    std::string path;
    std::string kind;  // "image-folder" or "shards"
    std::vector<SplitStats> splits;
    std::optional<Manifest> manifest;  // with StatsOptions::hash
};

struct StatsOptions {
    bool hash = false;    // build the content manifest too (reads every byte)
    int64_t workers = 0;  // threads; 0 = one per core
    /// Called from worker threads, serialised: bytes done so far, total.
    std::function<void(int64_t done, int64_t total)> progress;
};

Result<DatasetStats> dataset_stats(const std::string& path, const StatsOptions& options = {});
nlohmann::json stats_to_json(const DatasetStats& s);
/// A few lines per split for people.
std::string format_stats(const DatasetStats& s);

struct VerifyOptions {
    const Manifest* manifest = nullptr;  // compare file hashes against it (missing, changed, extra)
    bool decode = false;                 // decode every image fully (else headers only)
    int64_t workers = 0;
    std::function<void(int64_t done, int64_t total)> progress;
};

struct VerifyProblem {
    std::string path;  // file or sample ("train/cat/1.jpg", "train/shard-000002.tar:cat/1")
    std::string kind;  // "missing", "changed", "extra", "corrupt"
    std::string detail;
};

struct VerifyReport {
    std::string path, kind;
    int64_t files = 0, samples = 0;       // checked
    std::string dataset_hash;             // of the files as they are now, when hashed
    std::vector<VerifyProblem> problems;  // sorted by path
    bool ok() const { return problems.empty(); }
    int64_t count(const std::string& kind) const;
};

/// Checks a dataset: against a manifest when given; for a shard dataset always every shard's
/// size and SHA-256 against index.json and every member against the index; every image's header
/// (or, with decode, all of it). Problems are collected, not returned as an error; an error is
/// returned only when the dataset cannot be found or its index cannot be read.
Result<VerifyReport> verify_dataset(const std::string& path, const VerifyOptions& options = {});
nlohmann::json verify_to_json(const VerifyReport& r);

/// "1.5 GiB", "312.0 KiB", "17 B".
std::string human_bytes(int64_t bytes);

}  // namespace strato::data
