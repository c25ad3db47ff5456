#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>

#include "strato/core/fs.h"
#include "strato/data/data_config.h"
#include "strato/data/idx.h"

namespace strato::data {
namespace {
namespace stdfs = std::filesystem;

bool have_fashion_mnist() { return stdfs::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz"); }

TEST(Synthetic, SeededImagesWithoutFiles) {
    DataConfig c;
    c.dataset = "synthetic";
    c.path = "/nonexistent";  // no files needed
    c.image_size = 32;
    c.limit_train = 40;
    c.classes = 7;
    auto a = open_datasets(c), b = open_datasets(c);
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    EXPECT_EQ(a->train->size(), 40);
    EXPECT_EQ(a->test->size(), 256);
    EXPECT_EQ(a->train->shape().channels, 3);
    EXPECT_EQ(a->train->shape().height, 32);
    EXPECT_EQ(a->train->num_classes(), 7);
    std::vector<uint8_t> x(3 * 32 * 32), y(x.size());
    int64_t lx = -1, ly = -1;
    ASSERT_TRUE(a->train->load(5, x.data(), &lx).is_ok());
    ASSERT_TRUE(b->train->load(5, y.data(), &ly).is_ok());
    EXPECT_EQ(x, y);  // the same data every time
    EXPECT_EQ(lx, 5);
    EXPECT_EQ(a->mean.size(), 3u);
    // Transforms on data used as loaded were accepted and ignored (found by review).
    c.train_transforms = {"bogus xyz"};
    auto t = open_datasets(c);
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find("data.train.transforms: synthetic data is used as loaded"), std::string::npos)
        << t.status().message();
}

TEST(Idx, ReadsDebianFashionMnist) {
    if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    DataConfig cfg;
    auto splits = open_datasets(cfg);
    ASSERT_TRUE(splits.is_ok()) << splits.status().message();
    EXPECT_EQ(splits->train->size(), 60000);
    EXPECT_EQ(splits->test->size(), 10000);
    EXPECT_EQ(splits->train->shape(), (ImageShape{1, 28, 28}));
    EXPECT_EQ(splits->train->num_classes(), 10);
    // Class balance: Fashion-MNIST has exactly 6000 training images per class.
    auto* mem = dynamic_cast<InMemoryDataset*>(splits->train.get());
    ASSERT_NE(mem, nullptr);
    std::vector<int> counts(10);
    for (auto y : mem->labels()) counts[static_cast<size_t>(y)]++;
    for (int c : counts) EXPECT_EQ(c, 6000);
    EXPECT_EQ(mem->labels()[0], 9);  // the first training image is an ankle boot
    std::vector<double> mean, sd;
    ASSERT_TRUE(channel_stats(*mem, 60000, &mean, &sd).is_ok());
    EXPECT_NEAR(mean[0], 0.2860, 1e-3);
    EXPECT_NEAR(sd[0], 0.3530, 1e-3);
}

class IdxFiles : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = stdfs::temp_directory_path() / ("strato-idx-" + std::to_string(::getpid()));
        stdfs::create_directories(dir_);
    }
    void TearDown() override { stdfs::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& bytes) {
        auto p = (dir_ / name).string();
        EXPECT_TRUE(fs::atomic_write(p, bytes).is_ok());
        return p;
    }
    static std::string header(uint8_t type, std::vector<uint32_t> dims) {
        std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
        for (auto d : dims)
            for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((d >> s) & 0xFF));
        return h;
    }
    stdfs::path dir_;
};

TEST_F(IdxFiles, PlainFileRoundTrip) {
    auto p = write("x.idx", header(0x08, {2, 2, 2}) + std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
    auto r = read_idx(p);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->dims, (std::vector<int64_t>{2, 2, 2}));
    EXPECT_EQ(r->data[7], 8);
}

TEST_F(IdxFiles, TruncatedDataIsDetected) {
    auto p = write("t.idx", header(0x08, {10, 28, 28}) + std::string(100, '\0'));
    auto r = read_idx(p);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("t.idx"), std::string::npos);
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
}

TEST_F(IdxFiles, BadMagicAndTypeAreRejected) {
    auto r = read_idx(write("m.idx", "PK\x03\x04 not idx"));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("not an IDX file"), std::string::npos);
    r = read_idx(write("f.idx", header(0x0D, {1}) + std::string(4, '\0')));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("0x0d"), std::string::npos);
}

TEST_F(IdxFiles, CorruptGzipIsDetected) {
    // A valid gzip header followed by garbage.
    auto r = read_idx(write("c.gz", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + std::string(64, '\x55')));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("c.gz"), std::string::npos);
}

std::string gzip(const std::string& raw) {
    z_stream zs{};
    EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string out(deflateBound(&zs, raw.size()) + 64, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
    zs.avail_in = static_cast<uInt>(raw.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

// Found by review: zlib's gzread skips whatever follows the last gzip member, so junk appended
// to a .gz (a botched download, two files concatenated) was read as a good dataset.
TEST_F(IdxFiles, GzipMembersAreReadAndTrailingJunkIsAnError) {
    const std::string data = header(0x08, {3, 4}) + std::string("abcdefghijkl");
    auto one = read_idx(write("one.gz", gzip(data)));
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    EXPECT_EQ(one->data[11], 'l');
    // Several members (as `cat a.gz b.gz`): one stream, split anywhere.
    const std::string members = gzip(data.substr(0, 6)) + gzip(data.substr(6, 10)) + gzip(data.substr(16));
    auto multi = read_idx(write("multi.gz", members));
    ASSERT_TRUE(multi.is_ok()) << multi.status().message();
    EXPECT_EQ(multi->dims, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(std::string(multi->data.begin(), multi->data.end()), "abcdefghijkl");

    const std::string good = gzip(data);
    auto junk = read_idx(write("junk.gz", good + "JUNK!"));
    ASSERT_FALSE(junk.is_ok());
    EXPECT_EQ(junk.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(junk.status().message().find("junk.gz: 5 bytes of trailing data at offset " + std::to_string(good.size())),
              std::string::npos)
        << junk.status().message();
    auto after_members = read_idx(write("junk2.gz", members + std::string(3, '\0')));
    ASSERT_FALSE(after_members.is_ok());
    EXPECT_NE(after_members.status().message().find("trailing data at offset " + std::to_string(members.size())),
              std::string::npos)
        << after_members.status().message();
    // A member cut short, and one whose CRC-32 does not match.
    auto cut = read_idx(write("cut.gz", good.substr(0, good.size() - 4)));
    ASSERT_FALSE(cut.is_ok());
    EXPECT_NE(cut.status().message().find("cut.gz: gzip stream truncated"), std::string::npos) << cut.status().message();
    std::string bad_crc = good;
    bad_crc[bad_crc.size() - 6] ^= 0x40;
    auto crc = read_idx(write("crc.gz", bad_crc));
    ASSERT_FALSE(crc.is_ok());
    EXPECT_NE(crc.status().message().find("crc.gz: corrupt gzip stream"), std::string::npos) << crc.status().message();
}

TEST_F(IdxFiles, HugeDimensionsAreRejectedBeforeAllocating) {
    // 65536^4 wraps a 64-bit size to 0: must be refused, not trusted.
    auto r = read_idx(write("huge.idx", header(0x08, {65536, 65536, 65536, 65536})));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("GiB"), std::string::npos) << r.status().message();
    r = read_idx(write("big.idx", header(0x08, {60000, 28, 28}) + std::string(10, '\0')));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
    r = read_idx(write("long.idx", header(0x08, {2}) + std::string(5, '\0')));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("and more"), std::string::npos) << r.status().message();
}

TEST_F(IdxFiles, CorruptHeaderOnShortFileDoesNotAllocateWhatItPromises) {
    // 14.6 GiB promised (under the 16 GiB cap), 10 bytes present: found by the inputs fuzzer.
    // The buffer must grow with the data, not with the header.
    struct rusage before {};
    ::getrusage(RUSAGE_SELF, &before);
    auto r = read_idx(write("liar.idx", header(0x08, {15000, 1024, 1024}) + std::string(10, '\0')));
    struct rusage after {};
    ::getrusage(RUSAGE_SELF, &after);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 512 * 1024) << "peak RSS grew by " << (after.ru_maxrss - before.ru_maxrss) << " KiB";
}

TEST_F(IdxFiles, LabelCountMismatch) {
    auto img = write("i.idx", header(0x08, {2, 1, 1}) + std::string(2, '\0'));
    auto lab = write("l.idx", header(0x08, {3}) + std::string(3, '\0'));
    auto r = load_idx_dataset(img, lab, {});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("2 images"), std::string::npos);
}

// Found by review: an empty split went on to "loader: the dataset is empty", naming no file.
TEST_F(IdxFiles, AFileOfNoImagesIsRefusedByName) {
    auto images = write("empty-images.idx", header(0x08, {0, 28, 28}));
    auto labels = write("empty-labels.idx", header(0x08, {0}));
    auto r = load_idx_dataset(images, labels, {});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), images + ": holds no images (its IDX header says 0)");
}

TEST(DataConfig, MissingDatasetDirectory) {
    DataConfig cfg;
    cfg.path = "/nonexistent/dataset";
    auto r = open_datasets(cfg);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("/nonexistent/dataset"), std::string::npos);
}

}  // namespace
}  // namespace strato::data
