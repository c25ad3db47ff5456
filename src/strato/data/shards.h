#pragma once
// Packed shards: an image folder rewritten as a few large tar files, so training reads big
// sequential files (local disk, object store, HTTP) instead of millions of small ones.
//
// The layout is WebDataset's: each sample is two consecutive members, `<key>.jpg` (or `.png`,
// the original file's bytes) and `<key>.cls` (the class index as decimal text), with keys like
// `cat/img_0001` (no dot in the key's base name, since WebDataset splits there). Shards are
// `shard-000000.tar`, `shard-000001.tar`, ... next to an `index.json` that lists the classes and,
// per shard, its size, SHA-256, and per sample the offset and size of the image bytes, the label
// and the key (as parallel arrays), so a sample is one pread:
//
//   {"format": "strato-shards", "version": 1, "classes": ["cat", "dog"], "samples": 3,
//    "shards": [{"name": "shard-000000.tar", "bytes": 10240, "sha256": "9f2c...", "samples": 3,
//                "keys": ["cat/a", "dog/b", "cat/c"], "offsets": [512, 2048, 4096],
//                "sizes": [1187, 1200, 990], "labels": [0, 1, 0]}]}
//
//   auto split = pack_image_folder("photos", "photos-shards", {}).value();   // train/ test/ too
//   auto src = ShardSource::open(std::make_shared<LocalStore>("photos-shards/train")).value();
//   EncodedSample s;
//   src->read(7, &s);

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "strato/core/status.h"
#include "strato/data/source.h"

namespace strato::data {

inline constexpr const char* kShardIndexFormat = "strato-shards";
inline constexpr int kShardIndexVersion = 1;
inline constexpr const char* kShardIndexName = "index.json";
/// A pack's record of its finished shards, beside them until the next pack (no index.json
/// beside it: a pack that did not finish).
inline constexpr const char* kPackJournalName = ".pack-journal.json";
/// The smallest shard size a pack takes: one member of a byte, its .cls, the tar end.
inline constexpr int64_t kShardSizeMin = 2048;

// ---- image folders ---------------------------------------------------------------------------

/// One image of an image folder.
struct ImageFile {
    std::string path;  // relative to the folder: "cat/001.jpg"
    int64_t label = 0;
    int64_t bytes = 0;
    int64_t mtime_ns = 0;
};

/// The images of a folder with one subfolder per class (searched recursively, as torchvision's
/// ImageFolder), `.jpg`/`.jpeg`/`.png` in any case, sorted by path.
struct FolderIndex {
    std::string root;
    std::vector<std::string> class_names;
    std::vector<ImageFile> files;
    /// Every folder below the class folders (relative to root) with its mtime in ns, read as the
    /// walk entered it: a cached listing is valid while none of them (nor the class folders) changed.
    std::vector<std::pair<std::string, int64_t>> dirs;
};

/// The folder of class `name`: the name with each '/' as '_' (Fashion-MNIST's "T-shirt/top" is
/// the folder T-shirt_top). Names that cannot be a folder ("", ".", "..", a NUL) are refused.
Result<std::string> class_folder(const std::string& name);

/// class_folder() of each name, in order; two names of one folder ("a/b" and "a_b") are an error.
Result<std::vector<std::string>> class_folders(const std::vector<std::string>& names);

/// The subfolders of `root`, sorted: an image folder's classes when none are given. Hidden
/// folders are no classes: Jupyter's .ipynb_checkpoints (torchvision's ImageFolder's best-known
/// trap: a class of its own), .git, a sync tool's .cache. `ec` is set when `root` cannot be listed.
std::vector<std::string> list_class_folders(const std::string& root, std::error_code& ec);

/// Indexes `root`. With `class_names` given (the training split's or a model's), a class folder
/// not among them (as class_folder() names them) is an error; a listed class without a folder
/// has no samples.
Result<FolderIndex> index_image_folder(const std::string& root, const std::vector<std::string>& class_names = {});

/// The splits of a dataset root: {"train", "val", "test"} (those present) when `root/train` and
/// `root/test` or `root/val` are directories, or `root/train` is its only folder (hidden ones
/// aside); else {""} (the root is the only split, its folders the classes).
std::vector<std::string> dataset_splits(const std::string& root);

// ---- packing ---------------------------------------------------------------------------------

struct PackProgress {
    std::string split;
    int64_t bytes_done = 0, bytes_total = 0;
    int64_t shards_done = 0, shards_total = 0;
};

struct PackOptions {
    int64_t shard_size = int64_t{256} << 20;  // bytes per shard at most (one bigger sample gets a shard alone)
    int64_t workers = 0;                      // threads writing shards; 0 = one per core
    bool shuffle = true;                      // mix the classes within shards
    uint64_t seed = 0;
    /// Called from the calling thread about five times a second, and once per split at its end.
    std::function<void(const PackProgress&)> progress;
};

struct PackedSplit {
    std::string name;  // "train", "test", "val", or "" when the source has no splits
    std::string dir;   // its shards and index.json
    int64_t samples = 0, shards = 0, bytes = 0;
    int64_t shards_kept = 0;  // finished by an earlier, interrupted run and kept
};

/// Packs the image folder `src` (or each split of it) into shards under `dst` (`dst/<split>`).
/// Shards are planned from the file sizes, written in parallel (temp file, fsync, rename) while
/// their SHA-256 is computed, and recorded in a journal as they finish; index.json is written
/// last. Rerunning an interrupted pack keeps the shards that match the plan and were finished.
/// The output depends only on the source files and the options, not on the number of workers.
/// A SIGINT/SIGTERM (signals::install_stop_handlers) stops it with kCancelled.
Result<std::vector<PackedSplit>> pack_image_folder(const std::string& src, const std::string& dst,
                                                   const PackOptions& options);

// ---- reading ---------------------------------------------------------------------------------

/// index.json, validated: every field checked, errors name the field ("shards[2].offsets[17]").
struct ShardIndex {
    std::vector<std::string> class_names;
    std::vector<ShardInfo> shards;
    std::vector<int64_t> shard_starts;  // first sample of each shard, plus the total at the end
    std::vector<std::string> keys;      // per sample, in shard order
    std::vector<int64_t> offsets, sizes, labels;

    int64_t size() const { return static_cast<int64_t>(keys.size()); }
    /// The shard holding sample `index`.
    int64_t shard_of(int64_t index) const;
};

Result<ShardIndex> parse_shard_index(std::string_view json, const std::string& what);

/// Shards in a local directory.
class LocalStore final : public ShardStore {
  public:
    explicit LocalStore(std::string dir) : dir_(std::move(dir)) {}
    Result<std::string> read_meta(const std::string& name) const override;
    /// DIR/name, once it exists with the expected size (the checksum is `strato data verify`'s job).
    Result<std::string> local_path(const ShardInfo& shard) override;
    std::string describe() const override { return dir_; }

  private:
    std::string dir_;
};

/// The samples of a shard dataset, read from shards that a ShardStore makes local. Keeps one
/// open file per shard in use; a shard whose samples in the current will_read() hint have all
/// been read is closed and released to the store. Thread-safe.
class ShardSource final : public SampleSource {
  public:
    static Result<std::shared_ptr<ShardSource>> open(std::shared_ptr<ShardStore> store);
    ~ShardSource() override;

    int64_t size() const override { return index_.size(); }
    const std::vector<std::string>& class_names() const override { return index_.class_names; }
    int64_t label(int64_t index) const override;
    /// "shard-000003.tar:cat/001"
    std::string name(int64_t index) const override;
    Status read(int64_t index, EncodedSample* out) const override;
    std::vector<int64_t> group_starts() const override;
    void will_read(const std::vector<int64_t>& order, int64_t from) const override;

    const ShardIndex& index() const { return index_; }
    ShardStore& store() const { return *store_; }

  private:
    struct Shard;
    ShardSource() = default;
    void release_shard(int64_t shard) const;

    std::shared_ptr<ShardStore> store_;
    ShardIndex index_;
    std::unique_ptr<Shard[]> shards_;
    mutable std::mutex hint_mu_;
    mutable std::vector<int32_t> hint_sample_;  // reads of each sample still ahead in the hint
    mutable std::vector<int64_t> hint_shard_;   // the same summed per shard
};

}  // namespace strato::data
