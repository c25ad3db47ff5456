#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "strato/data/loader.h"

namespace strato::data {
namespace {

std::shared_ptr<InMemoryDataset> toy(int64_t n, ImageShape s = {1, 4, 4}) {
    std::vector<uint8_t> px(static_cast<size_t>(n * s.numel()));
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7 + 3);
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i;  // label = index, to track order
    std::vector<std::string> names(static_cast<size_t>(n), "c");
    return std::make_shared<InMemoryDataset>(s, std::move(px), std::move(y), std::move(names));
}

std::vector<Batch> epoch(Loader& l, int64_t e, int64_t from = 0) {
    l.seek({e, from});
    std::vector<Batch> out;
    Batch b;
    while (*l.next(b)) out.push_back(b);
    return out;
}

LoaderOptions opts(int64_t workers) {
    LoaderOptions o;
    o.batch_size = 8;
    o.seed = 1234;
    o.workers = workers;
    o.prefetch = 3;
    o.hflip = true;
    o.crop_padding = 1;
    o.mean = {0.5};
    o.std = {0.25};
    return o;
}

TEST(Loader, EpochIsAPermutationAndBatchesCoverIt) {
    auto l = Loader::create(toy(50), opts(2)).value();
    EXPECT_EQ(l->batches_per_epoch(), 7);
    auto batches = epoch(*l, 0);
    ASSERT_EQ(batches.size(), 7u);
    std::vector<int64_t> seen;
    for (auto& b : batches) seen.insert(seen.end(), b.labels.begin(), b.labels.end());
    EXPECT_EQ(batches.back().size, 2);
    EXPECT_EQ(l->last_batch_size(), 2);
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(50);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
    EXPECT_NE(seen, all);  // shuffled
}

TEST(Loader, LastBatchSizeFollowsDropLastAndTheShard) {
    LoaderOptions o = opts(0);
    EXPECT_EQ(Loader::create(toy(48), o).value()->last_batch_size(), 8);  // whole batches
    EXPECT_EQ(Loader::create(toy(49), o).value()->last_batch_size(), 1);
    o.drop_last = true;
    EXPECT_EQ(Loader::create(toy(49), o).value()->last_batch_size(), 8);
    EXPECT_EQ(Loader::create(toy(7), o).value()->last_batch_size(), 0);  // no batch at all
    o.drop_last = false;
    o.shard_count = 2;  // 49 padded to 25 per rank: 3 batches of 8 and 1
    o.shard_rank = 1;
    EXPECT_EQ(Loader::create(toy(49), o).value()->last_batch_size(), 1);
}

TEST(Loader, ShardsTogetherAreTheGlobalBatches) {
    // 2 ranks x batch 4 see, batch for batch, what 1 process with batch 8 sees (the DDP
    // equivalence), augmentation included; odd sizes are padded so both ranks have as many.
    auto global = Loader::create(toy(48), opts(0)).value();
    std::vector<std::vector<Batch>> ranks;
    for (int64_t r : {0, 1}) {
        auto o = opts(r + 1);
        o.batch_size = 4;
        o.shard_rank = r;
        o.shard_count = 2;
        ranks.push_back(epoch(*Loader::create(toy(48), o).value(), 1));
    }
    auto all = epoch(*global, 1);
    ASSERT_EQ(ranks[0].size(), all.size());
    ASSERT_EQ(ranks[1].size(), all.size());
    const size_t numel = 16;
    for (size_t t = 0; t < all.size(); ++t) {
        for (size_t j = 0; j < 8; ++j) {
            const Batch& mine = ranks[j % 2][t];
            EXPECT_EQ(all[t].labels[j], mine.labels[j / 2]) << "batch " << t << " sample " << j;
            EXPECT_TRUE(std::equal(all[t].images.begin() + static_cast<long>(j * numel),
                                   all[t].images.begin() + static_cast<long>((j + 1) * numel),
                                   mine.images.begin() + static_cast<long>(j / 2 * numel)));
        }
    }
    auto o = opts(0);
    o.shard_count = 3;
    o.shard_rank = 2;
    auto padded = Loader::create(toy(50), o).value();
    EXPECT_EQ(padded->epoch_order(0).size(), 17u);  // 50 -> 51 = 3 x 17
    o.shard_pad = false;
    auto exact = Loader::create(toy(50), o).value();
    EXPECT_EQ(exact->epoch_order(0).size(), 16u);  // positions 2, 5, ..., 47
    o.shard_rank = 3;
    EXPECT_FALSE(Loader::create(toy(50), o).is_ok());
}

TEST(Loader, SameBatchesWhateverTheWorkerCount) {
    for (int64_t workers : {1, 3, 4}) {
        auto ref = Loader::create(toy(61), opts(0)).value();
        auto l = Loader::create(toy(61), opts(workers)).value();
        for (int64_t e : {0, 1}) {
            auto a = epoch(*ref, e), b = epoch(*l, e);
            ASSERT_EQ(a.size(), b.size());
            for (size_t i = 0; i < a.size(); ++i) {
                EXPECT_EQ(a[i].labels, b[i].labels);
                EXPECT_EQ(a[i].images, b[i].images) << "workers " << workers << " epoch " << e << " batch " << i;
            }
        }
    }
}

TEST(Loader, EpochsDifferAndSeedsDiffer) {
    auto l = Loader::create(toy(40), opts(1)).value();
    EXPECT_NE(l->epoch_order(0), l->epoch_order(1));
    auto o = opts(1);
    o.seed = 99;
    auto l2 = Loader::create(toy(40), o).value();
    EXPECT_NE(l->epoch_order(0), l2->epoch_order(0));
}

TEST(Loader, ResumeMidEpochYieldsExactlyTheRemainingBatches) {
    auto l = Loader::create(toy(100), opts(2)).value();
    auto full = epoch(*l, 3);
    // A new loader, as after a restart, seeked to batch 5 of epoch 3.
    auto resumed = Loader::create(toy(100), opts(3)).value();
    auto tail = epoch(*resumed, 3, 5);
    ASSERT_EQ(tail.size(), full.size() - 5);
    for (size_t i = 0; i < tail.size(); ++i) {
        EXPECT_EQ(tail[i].index, full[i + 5].index);
        EXPECT_EQ(tail[i].labels, full[i + 5].labels);
        EXPECT_EQ(tail[i].images, full[i + 5].images);
    }
    EXPECT_EQ(resumed->position().batch, resumed->batches_per_epoch());
}

TEST(Loader, NormalisesPixels) {
    auto o = opts(0);
    o.shuffle = false;
    o.hflip = false;
    o.crop_padding = 0;
    auto ds = toy(2);
    auto l = Loader::create(ds, o).value();
    auto b = epoch(*l, 0)[0];
    const float px0 = static_cast<float>(ds->pixels()[0]);
    EXPECT_NEAR(b.images[0], (px0 / 255.0f - 0.5f) / 0.25f, 1e-5);
}

/// toy(n) whose samples in `bad` fail to decode (data.on_bad_sample's kind of error).
class BadToy final : public Dataset {
public:
    BadToy(int64_t n, std::vector<int64_t> bad) : inner_(toy(n)), bad_(std::move(bad)) {}
    int64_t size() const override { return inner_->size(); }
    ImageShape shape() const override { return inner_->shape(); }
    const std::vector<std::string>& class_names() const override { return inner_->class_names(); }
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override {
        if (std::find(bad_.begin(), bad_.end(), index) != bad_.end())
            return data_loss("sample {}: corrupt", index);
        return inner_->load(index, dst, label);
    }

private:
    std::shared_ptr<InMemoryDataset> inner_;
    std::vector<int64_t> bad_;
};

// Found by review: a test loader read again each epoch said "3 sample(s) skipped so far" of one
// bad file after three evaluations; the count is of samples, each once.
TEST(Loader, ABadSampleCountsOnceWhateverTheEpochsThatMeetIt) {
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = 2;
    o.skip_bad = true;
    o.shuffle = false;
    auto l = Loader::create(std::make_shared<BadToy>(10, std::vector<int64_t>{3, 7}), o).value();
    for (int64_t e = 0; e < 3; ++e) {
        int64_t seen = 0, replaced = 0;
        for (const Batch& b : epoch(*l, e)) seen += b.size, replaced += static_cast<int64_t>(b.replaced.size());
        EXPECT_EQ(seen, 10);
        EXPECT_EQ(replaced, 2);  // every epoch marks its substitutes (an evaluation leaves them out)
    }
    const BadSamples bad = l->bad_samples();
    EXPECT_EQ(bad.count, 2);
    ASSERT_EQ(bad.first.size(), 2u);
    const std::string both = bad.first[0] + " | " + bad.first[1];
    EXPECT_NE(both.find("sample 3: corrupt"), std::string::npos) << both;
    EXPECT_NE(both.find("sample 7: corrupt"), std::string::npos) << both;
}

TEST(Loader, RejectsBadOptions) {
    auto o = opts(0);
    o.batch_size = 0;
    EXPECT_FALSE(Loader::create(toy(4), o).is_ok());
    o = opts(0);
    o.mean = {0.1, 0.2};
    auto r = Loader::create(toy(4), o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("channels"), std::string::npos);
}

TEST(Loader, EarlyDestructionWhileWorkersRun) {
    for (int i = 0; i < 20; ++i) {
        auto l = Loader::create(toy(200), opts(3)).value();
        l->seek({0, 0});
        Batch b;
        ASSERT_TRUE(*l->next(b));
    }  // destructor joins the workers with batches still pending
}

}  // namespace
}  // namespace strato::data
