#include "strato/data/loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strato::data {

uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

namespace {

/// A tiny counter-based generator: deterministic and cheap to create per sample.
struct SampleRng {
    uint64_t state;
    uint64_t next() { return state = mix64(state); }
    /// Uniform integer in [0, n), unbiased enough for n << 2^32 (multiply-high).
    uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<__uint128_t>(next()) * n) >> 64); }
};

}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), opts_(std::move(options)) {}

Result<std::unique_ptr<Loader>> Loader::create(std::shared_ptr<const Dataset> dataset, LoaderOptions options) {
    if (!dataset) return invalid_argument("loader: no dataset");
    if (options.batch_size <= 0) return invalid_argument("loader: batch_size must be > 0, got {}", options.batch_size);
    if (options.workers < 0) return invalid_argument("loader: workers must be >= 0, got {}", options.workers);
    if (options.prefetch < 1) return invalid_argument("loader: prefetch must be >= 1, got {}", options.prefetch);
    if (options.crop_padding < 0) return invalid_argument("loader: crop_padding must be >= 0");
    if (options.shard_count < 1 || options.shard_rank < 0 || options.shard_rank >= options.shard_count)
        return invalid_argument("loader: shard {} of {} does not exist", options.shard_rank, options.shard_count);
    if (dataset->size() == 0) return invalid_argument("loader: the dataset is empty");
    const auto channels = static_cast<size_t>(dataset->shape().channels);
    for (auto* v : {&options.mean, &options.std}) {
        if (!v->empty() && v->size() != channels && v->size() != 1) {
            return invalid_argument("loader: mean/std have {} values, the images have {} channels", v->size(), channels);
        }
    }
    if (dataset->is_float() && (options.hflip || options.crop_padding > 0))
        return invalid_argument("loader: flips and crops apply to images, not to the float features of this dataset");
    std::unique_ptr<Loader> l(new Loader(std::move(dataset), std::move(options)));
    for (size_t c = 0; c < channels; ++c) {
        double mean = l->opts_.mean.empty() ? 0.0 : l->opts_.mean[std::min(c, l->opts_.mean.size() - 1)];
        double sd = l->opts_.std.empty() ? 1.0 : l->opts_.std[std::min(c, l->opts_.std.size() - 1)];
        if (!(sd > 0)) return invalid_argument("loader: std must be > 0, got {}", sd);
        // Float datasets (CSV) are standardised as they are; pixels are first scaled to [0, 1].
        const double range = l->dataset_->is_float() ? 1.0 : 255.0;
        l->scale_.push_back(static_cast<float>(1.0 / (range * sd)));
        l->shift_.push_back(static_cast<float>(-mean / sd));
    }
    return l;
}

Loader::~Loader() { stop_workers(); }

int64_t Loader::samples_per_epoch() const {
    const int64_t total = dataset_->size(), w = opts_.shard_count, r = opts_.shard_rank;
    return w <= 1 ? total : opts_.shard_pad ? (total + w - 1) / w : (total - r + w - 1) / w;
}

int64_t Loader::batches_per_epoch() const {
    const int64_t n = samples_per_epoch(), b = opts_.batch_size;
    return opts_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t Loader::last_batch_size() const {
    const int64_t n = samples_per_epoch(), b = opts_.batch_size;
    if (batches_per_epoch() == 0) return 0;
    return opts_.drop_last || n % b == 0 ? b : n % b;
}

std::vector<int64_t> Loader::epoch_order(int64_t epoch) const {
    std::vector<int64_t> order(static_cast<size_t>(dataset_->size()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    if (opts_.shuffle) {
        SampleRng rng{mix64(opts_.seed ^ mix64(static_cast<uint64_t>(epoch) + 0x5eed))};
        std::vector<int64_t> starts = dataset_->group_starts();
        if (starts.size() <= 1) {
            for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
        } else {
            // Shuffle the groups, then the samples within windows of group_window groups.
            std::vector<size_t> groups(starts.size());
            for (size_t g = 0; g < groups.size(); ++g) groups[g] = g;
            for (size_t i = groups.size(); i > 1; --i) std::swap(groups[i - 1], groups[rng.below(i)]);
            starts.push_back(dataset_->size());
            order.clear();
            const auto window = static_cast<size_t>(std::max<int64_t>(1, opts_.group_window));
            for (size_t w = 0; w < groups.size(); w += window) {
                const size_t first = order.size();
                for (size_t g = w; g < std::min(groups.size(), w + window); ++g)
                    for (int64_t i = starts[groups[g]]; i < starts[groups[g] + 1]; ++i) order.push_back(i);
                for (size_t i = order.size() - first; i > 1; --i)
                    std::swap(order[first + i - 1], order[first + rng.below(i)]);
            }
        }
    }
    const size_t w = static_cast<size_t>(opts_.shard_count), r = static_cast<size_t>(opts_.shard_rank);
    if (w <= 1 || order.empty()) return order;
    if (opts_.shard_pad)
        for (size_t i = 0; order.size() % w != 0; ++i) order.push_back(order[i]);
    std::vector<int64_t> mine;
    for (size_t i = r; i < order.size(); i += w) mine.push_back(order[i]);
    return mine;
}

void Loader::stop_workers() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_space_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    ready_.clear();
    stop_ = false;
}

void Loader::seek(LoaderPosition pos) {
    stop_workers();
    if (pos.epoch != epoch_ || order_.empty()) order_ = epoch_order(pos.epoch);
    epoch_ = pos.epoch;
    end_ = batches_per_epoch();
    next_deliver_ = next_claim_ = std::clamp<int64_t>(pos.batch, 0, end_);
    dataset_->will_read(order_, std::min<int64_t>(next_deliver_ * opts_.batch_size, static_cast<int64_t>(order_.size())));
    for (int64_t i = 0; i < opts_.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

void Loader::worker_loop() {
    for (;;) {
        int64_t b;
        {
            std::unique_lock lock(mu_);
            cv_space_.wait(lock, [&] { return stop_ || next_claim_ >= end_ || next_claim_ < next_deliver_ + opts_.prefetch; });
            if (stop_ || next_claim_ >= end_) return;
            b = next_claim_++;
        }
        Result<Batch> batch = assemble(b);
        {
            std::lock_guard lock(mu_);
            ready_.emplace(b, std::move(batch));
        }
        cv_ready_.notify_all();
    }
}

Result<bool> Loader::next(Batch& out) {
    if (order_.empty()) seek({epoch_, 0});
    if (out.images.capacity() > 0) {  // the consumer is done with the previous batch
        std::lock_guard lock(mu_);
        if (static_cast<int64_t>(spare_.size()) < opts_.prefetch + 1) spare_.push_back(std::move(out.images));
        out.images = {};
    }
    if (next_deliver_ >= end_) return false;
    if (opts_.workers == 0) {
        Result<Batch> b = assemble(next_deliver_);
        ++next_deliver_;  // past a failed batch too, as with workers
        if (!b.is_ok()) return b.status();
        out = std::move(b).value();
        return true;
    }
    std::unique_lock lock(mu_);
    cv_ready_.wait(lock, [&] { return ready_.count(next_deliver_) > 0; });
    auto node = ready_.extract(next_deliver_);
    ++next_deliver_;
    lock.unlock();
    cv_space_.notify_all();
    if (!node.mapped().is_ok()) return node.mapped().status();
    out = std::move(node.mapped()).value();
    return true;
}

BadSamples Loader::bad_samples() const {
    std::lock_guard lock(bad_mu_);
    return bad_;
}

Result<Batch> Loader::assemble(int64_t b) const {
    // No exception may leave a worker thread (std::terminate): turn them into a Status.
    try {
        return assemble_unchecked(b);
    } catch (const std::exception& e) {
        return internal_error("assembling batch {} of epoch {}: {}", b, epoch_, e.what());
    }
}

Result<Batch> Loader::assemble_unchecked(int64_t b) const {
    const ImageShape s = dataset_->shape();
    const int64_t n_total = static_cast<int64_t>(order_.size());
    const int64_t begin = b * opts_.batch_size, end = std::min(n_total, begin + opts_.batch_size);
    Batch batch;
    batch.epoch = epoch_;
    batch.index = b;
    batch.size = end - begin;
    batch.shape = s;
    {
        std::lock_guard lock(mu_);
        if (!spare_.empty()) {
            batch.images = std::move(spare_.back());
            spare_.pop_back();
        }
    }
    batch.images.resize(static_cast<size_t>(batch.size * s.numel()));
    batch.labels.resize(static_cast<size_t>(batch.size));
    batch.replaced.clear();
    const bool floats = dataset_->is_float();
    std::vector<uint8_t> raw(floats ? 0 : static_cast<size_t>(s.numel()));
    const int64_t plane = s.height * s.width, pad = opts_.crop_padding;
    for (int64_t k = begin; k < end; ++k) {
        const int64_t i = k - begin;
        const int64_t idx = order_[static_cast<size_t>(k)];
        // Keyed by the position in the whole epoch, so a sharded run augments each sample as
        // an unsharded one does.
        const uint64_t pos = static_cast<uint64_t>(k * std::max<int64_t>(1, opts_.shard_count) + opts_.shard_rank);
        SampleRng rng{mix64(opts_.seed ^ mix64((static_cast<uint64_t>(epoch_) << 32) ^ pos))};
        float* dst = batch.images.data() + i * s.numel();
        int64_t* label = &batch.labels[static_cast<size_t>(i)];
        const uint64_t sample_seed = mix64(rng.state ^ 0xda7a);
        auto load = [&](int64_t sample) {
            return floats ? dataset_->load_float(sample, dst, label) : dataset_->load_random(sample, sample_seed, raw.data(), label);
        };
        Status st = load(idx);
        if (!st.is_ok()) {
            if (!opts_.skip_bad || !is_bad_sample(st)) return st.with_context(fmt::format("loading sample {}", idx));
            {
                // (found by review: counted per read, a test loader said "3 sample(s) skipped" of
                // one bad file after three evaluations)
                std::lock_guard lock(bad_mu_);
                if (bad_seen_.insert(idx).second && ++bad_.count <= 5) bad_.first.push_back(st.message());
            }
            // The slot takes the next samples of the epoch's order until one loads, so batches
            // keep their size (the ranks of a distributed run stay in step) and the choice depends
            // on the order alone. A run of more bad samples than this is an error.
            const int64_t kTries = std::min<int64_t>(64, n_total - 1);  // (a small dataset: each other sample once)
            for (int64_t j = 1; j <= kTries && !st.is_ok(); ++j) {
                st = load(order_[static_cast<size_t>((k + j) % n_total)]);
                if (!st.is_ok() && !is_bad_sample(st))
                    return st.with_context(fmt::format("loading a replacement for bad sample {}", idx));
            }
            batch.replaced.push_back(i);
            if (!st.is_ok())
                return invalid_argument(
                    "{} (data.on_bad_sample = \"skip\" replaces bad samples, but this is no longer a few bad files): {}",
                    kTries + 1 >= n_total ? fmt::format("all {} samples are unreadable", n_total)
                                          : fmt::format("sample {} and the {} after it in the epoch's order are all unreadable",
                                                        idx, kTries),
                    st.message());
        }
        int64_t dy = 0, dx = 0;
        if (pad > 0) {
            dy = static_cast<int64_t>(rng.below(static_cast<uint64_t>(2 * pad + 1))) - pad;
            dx = static_cast<int64_t>(rng.below(static_cast<uint64_t>(2 * pad + 1))) - pad;
        }
        if (floats) {  // features: standardise in place
            for (int64_t c = 0; c < s.channels; ++c) {
                const float v = dst[c] * scale_[static_cast<size_t>(c)] + shift_[static_cast<size_t>(c)];
                // (found by review: a test value of 1e36 against a training std of 1e-3 went on as
                // inf, and quantize failed in torch.histc without a word about the sample)
                if (!std::isfinite(v))
                    return invalid_argument("sample {}, feature {}: {:g} standardises to {:g} (mean {:g}, std {:g} of the "
                                            "training data), beyond a 32-bit float: far outside the data the model "
                                            "learnt from",
                                            idx, c + 1, dst[c], v, -shift_[static_cast<size_t>(c)] / scale_[static_cast<size_t>(c)],
                                            1.0 / scale_[static_cast<size_t>(c)]);
                dst[c] = v;
            }
            continue;
        }
        const bool flip = opts_.hflip && (rng.next() & 1);
        for (int64_t c = 0; c < s.channels; ++c) {
            const float scale = scale_[static_cast<size_t>(c)], shift = shift_[static_cast<size_t>(c)];
            const uint8_t* src = raw.data() + c * plane;
            float* d = dst + c * plane;
            if (dy == 0 && dx == 0 && !flip) {
                for (int64_t p = 0; p < plane; ++p) d[p] = static_cast<float>(src[p]) * scale + shift;
                continue;
            }
            for (int64_t y = 0; y < s.height; ++y) {
                const int64_t sy = y + dy;
                for (int64_t x = 0; x < s.width; ++x) {
                    const int64_t sx0 = x + dx;
                    const int64_t sx = flip ? s.width - 1 - sx0 : sx0;
                    const bool inside = sy >= 0 && sy < s.height && sx0 >= 0 && sx0 < s.width;
                    const float v = inside ? static_cast<float>(src[sy * s.width + sx]) : 0.0f;
                    d[y * s.width + x] = v * scale + shift;
                }
            }
        }
    }
    return batch;
}

}  // namespace strato::data
