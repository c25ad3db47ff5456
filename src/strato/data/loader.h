#pragma once
// A multi-threaded batch loader with bounded prefetch and exact resume.
//
// The order of samples in an epoch and every random augmentation decision are pure functions
// of (seed, epoch, position), so the batches do not depend on the number of worker threads or
// on timing, and a loader seeked to a saved position yields exactly the batches an
// uninterrupted run would have seen. Pixels are converted to float and normalised while the
// batch is assembled (one pass over the bytes).
//
//   auto loader = Loader::create(train_set, opts).value();
//   loader->seek({epoch, 0});
//   Batch b;
//   while (loader->next(b).value()) train_step(b);
//
// Not thread-safe: one consumer thread calls seek/next; the workers are internal.

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "strato/core/status.h"
#include "strato/data/dataset.h"

namespace strato::data {

struct LoaderOptions {
    int64_t batch_size = 128;
    bool shuffle = true;
    bool drop_last = false;
    uint64_t seed = 0;
    int64_t workers = 2;   // 0 loads in the calling thread
    int64_t prefetch = 4;  // batches assembled ahead, at most
    std::vector<double> mean;  // per channel, on [0, 1] pixels; empty = 0
    std::vector<double> std;   // per channel; empty = 1
    bool hflip = false;         // random horizontal flip, p = 0.5
    int64_t crop_padding = 0;   // random crop of the original size from a zero-padded image; 0 = off
    // Distributed data parallelism (PyTorch's DistributedSampler): this loader yields samples
    // rank, rank + count, rank + 2 count, ... of each epoch's order, so the ranks' batches t
    // together are the contiguous global batch t of batch_size x count. With pad, the order is
    // first extended (repeating its start) to a multiple of count so every rank has as many
    // batches; without (evaluation), the last ranks may have one sample fewer.
    int64_t shard_rank = 0, shard_count = 1;
    bool shard_pad = true;
    // Datasets read in groups (tar shards): the epoch order shuffles the groups, then the samples
    // within each window of this many consecutive groups, so reads stay sequential-ish.
    int64_t group_window = 4;
    // A sample that fails to decode (corrupt, truncated, not an image): false = the error stops
    // the run; true = it is counted, reported (bad_samples()) and its slot takes the next sample
    // of the epoch's order that loads, so every batch keeps its size.
    bool skip_bad = false;
};

/// Samples left out because they could not be loaded (skip_bad). Each sample counts once,
/// however many epochs (or evaluations) met it.
struct BadSamples {
    int64_t count = 0;
    std::vector<std::string> first;  // the first few messages
};

/// std::allocator without value-initialisation: resize() leaves new floats unwritten (the
/// loader writes every one), saving a memset of each batch.
template <typename T>
struct UninitAllocator : std::allocator<T> {
    template <typename U>
    struct rebind {
        using other = UninitAllocator<U>;
    };
    UninitAllocator() = default;
    template <typename U>
    UninitAllocator(const UninitAllocator<U>&) noexcept {}
    template <typename U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

using FloatBuffer = std::vector<float, UninitAllocator<float>>;

struct Batch {
    int64_t epoch = 0;
    int64_t index = 0;  // batch number within the epoch
    int64_t size = 0;
    ImageShape shape;
    FloatBuffer images;           // [size, C, H, W], normalised
    std::vector<int64_t> labels;  // [size]
    // Slots holding a replacement for a bad sample (data.on_bad_sample = "skip"): training takes
    // them, so batches keep their size; an evaluation leaves them out of its scores.
    std::vector<int64_t> replaced;
};

struct LoaderPosition {
    int64_t epoch = 0;
    int64_t batch = 0;  // the next batch to be returned
};

class Loader {
public:
    static Result<std::unique_ptr<Loader>> create(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
    ~Loader();
    Loader(const Loader&) = delete;
    Loader& operator=(const Loader&) = delete;

    int64_t batches_per_epoch() const;
    /// The samples of an epoch this process reads (its shard's, padded as shard_pad says).
    int64_t samples_per_epoch() const;
    /// Samples in the last batch of an epoch (the batch size unless drop_last is off and the
    /// samples of this process do not divide into whole batches); 0 when there is no batch.
    int64_t last_batch_size() const;
    const Dataset& dataset() const { return *dataset_; }

    /// Positions the loader; the next call to next() returns batch `pos.batch` of epoch `pos.epoch`.
    void seek(LoaderPosition pos);
    /// Fills `out` with the next batch of the epoch and returns true, or returns false at the end
    /// of the epoch. A dataset error (unreadable file) is returned as a Status.
    Result<bool> next(Batch& out);
    LoaderPosition position() const { return {epoch_, next_deliver_}; }

    /// The sample order of an epoch (a seeded permutation, or the identity without shuffle).
    std::vector<int64_t> epoch_order(int64_t epoch) const;
    /// Samples skipped so far (skip_bad), over the loader's life, each counted once.
    BadSamples bad_samples() const;

private:
    Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
    Result<Batch> assemble(int64_t batch) const;
    Result<Batch> assemble_unchecked(int64_t batch) const;
    void stop_workers();
    void worker_loop();

    std::shared_ptr<const Dataset> dataset_;
    LoaderOptions opts_;
    std::vector<float> scale_, shift_;  // per channel: x * scale + shift

    int64_t epoch_ = 0;
    int64_t end_ = 0;
    std::vector<int64_t> order_;

    mutable std::mutex mu_;
    std::condition_variable cv_ready_, cv_space_;
    int64_t next_claim_ = 0;
    int64_t next_deliver_ = 0;
    bool stop_ = false;
    std::map<int64_t, Result<Batch>> ready_;
    std::vector<std::thread> threads_;
    // Image buffers of batches the consumer is done with (next() takes back the previous one),
    // reused by the workers: no allocation or page faults per batch.
    mutable std::vector<FloatBuffer> spare_;
    mutable std::mutex bad_mu_;
    mutable BadSamples bad_;
    mutable std::set<int64_t> bad_seen_;  // the samples counted in bad_
};

/// splitmix64: a well-mixed 64-bit hash, used to derive independent seeds.
uint64_t mix64(uint64_t x);

}  // namespace strato::data
