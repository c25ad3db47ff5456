#pragma once
// Where encoded samples come from, separated from how they are decoded and transformed
// (image_dataset.h). A SampleSource hands out the bytes of one image file and its label by
// index: an image folder reads files, a shard source reads members of tar shards, which a
// ShardStore makes available as local files (a directory, or an HTTP(S) server through a
// local cache).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strato/core/status.h"

namespace strato::data {

/// One encoded sample: the file's bytes (JPEG or PNG), its label and a name for messages
/// ("train/cat/001.jpg", "shard-000003.tar:cat/001.jpg").
struct EncodedSample {
    std::string bytes;
    int64_t label = -1;
    std::string name;
};

/// Encoded samples by index. Every method is safe to call from several threads at once.
class SampleSource {
public:
    virtual ~SampleSource() = default;
    virtual int64_t size() const = 0;
    virtual const std::vector<std::string>& class_names() const = 0;
    /// The label of sample `index` without reading its bytes (class balance, stats).
    virtual int64_t label(int64_t index) const = 0;
    /// A name for messages: a path relative to the dataset root, or shard:member.
    virtual std::string name(int64_t index) const = 0;
    /// Reads sample `index`. Errors name the sample and say what went wrong.
    virtual Status read(int64_t index, EncodedSample* out) const = 0;

    /// Index ranges that are cheaper to read together (the samples of one shard are
    /// contiguous indices): the start index of each group, ascending, the first being 0.
    /// Empty when every sample is as cheap as any other (files on a local disk).
    virtual std::vector<int64_t> group_starts() const { return {}; }
    /// A hint: samples will be read in this order from position `from` on (a remote source
    /// fetches the groups they live in ahead of use). Replaces any earlier hint.
    virtual void will_read(const std::vector<int64_t>& order, int64_t from) const {
        (void)order;
        (void)from;
    }
};

/// What a ShardStore needs to know about a shard to fetch and check it.
struct ShardInfo {
    std::string name;  // file name relative to the dataset root: "shard-000003.tar"
    int64_t bytes = 0;
    std::string sha256;  // hex, of the whole file
};

/// Makes shard files available as local files. `local_path` blocks until the shard is present
/// and verified (size and checksum), fetching it if needed; `prefetch` asks for shards ahead of
/// use, in that order, without blocking. Safe to call from several threads at once.
class ShardStore {
public:
    virtual ~ShardStore() = default;
    /// Reads a small metadata file of the dataset (the index) in full: "index.json".
    virtual Result<std::string> read_meta(const std::string& name) const = 0;
    virtual Result<std::string> local_path(const ShardInfo& shard) = 0;
    virtual void prefetch(const std::vector<ShardInfo>& shards) {
        (void)shards;
    }
    /// Says the caller no longer needs `shard` for now (a cache may evict it).
    virtual void release(const ShardInfo& shard) {
        (void)shard;
    }
    /// "/data/shards" or "http://127.0.0.1:8080/shards", for messages.
    virtual std::string describe() const = 0;
};

}  // namespace strato::data
