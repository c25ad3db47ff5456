#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>
#include <unistd.h>

#include <filesystem>

#include "strato/core/fs.h"
#include "strato/data/data_config.h"
#include "strato/data/image_folder.h"

namespace strato::data {
namespace {
namespace stdfs = std::filesystem;

void write_png(const stdfs::path& p, int w, int h, uint8_t value, bool rgb) {
    png_image img{};
    img.version = PNG_IMAGE_VERSION;
    img.width = static_cast<png_uint_32>(w);
    img.height = static_cast<png_uint_32>(h);
    img.format = rgb ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    std::vector<uint8_t> px(static_cast<size_t>(w * h * (rgb ? 3 : 1)), value);
    ASSERT_TRUE(png_image_write_to_file(&img, p.c_str(), 0, px.data(), 0, nullptr)) << img.message;
}

class ImageFolder : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = stdfs::temp_directory_path() / ("strato-imgf-" + std::to_string(::getpid()));
        for (auto split : {"train", "test"}) {
            for (auto cls : {"cat", "dog"}) stdfs::create_directories(root_ / split / cls);
            write_png(root_ / split / "cat" / "a.png", 16, 12, 40, true);
            write_png(root_ / split / "cat" / "b.png", 8, 8, 60, false);
            write_png(root_ / split / "dog" / "c.png", 10, 10, 200, true);
        }
        fs::atomic_write(root_ / "train" / "dog" / "notes.txt", "ignored").is_ok();
    }
    void TearDown() override { stdfs::remove_all(root_); }
    stdfs::path root_;
};

TEST_F(ImageFolder, IndexesClassesAndResizes) {
    ImageDatasetOptions o;
    o.shape = {3, 8, 8};
    auto ds = open_image_folder((root_ / "train").string(), o);
    ASSERT_TRUE(ds.is_ok()) << ds.status().message();
    EXPECT_EQ((*ds)->size(), 3);
    EXPECT_EQ((*ds)->class_names(), (std::vector<std::string>{"cat", "dog"}));
    std::vector<uint8_t> buf(3 * 8 * 8);
    int64_t label = -1;
    ASSERT_TRUE((*ds)->load(2, buf.data(), &label).is_ok());
    EXPECT_EQ(label, 1);
    EXPECT_EQ(buf[0], 200);
    ASSERT_TRUE((*ds)->load(1, buf.data(), &label).is_ok());  // gray PNG converted to RGB
    EXPECT_EQ(buf[3 * 64 - 1], 60);
}

// Jupyter's .ipynb_checkpoints in a split became a class of its own (as in torchvision's
// ImageFolder): a dead output, and a test split with it refused. Hidden folders are no classes;
// a model that has such a class still finds its folder.
TEST_F(ImageFolder, HiddenFoldersAreNoClasses) {
    for (auto split : {"train", "test"}) {
        stdfs::create_directories(root_ / split / ".ipynb_checkpoints");
        write_png(root_ / split / ".ipynb_checkpoints" / "x.png", 8, 8, 1, true);
    }
    ImageDatasetOptions o;
    o.shape = {3, 8, 8};
    auto ds = open_image_folder((root_ / "train").string(), o);
    ASSERT_TRUE(ds.is_ok()) << ds.status().message();
    EXPECT_EQ((*ds)->class_names(), (std::vector<std::string>{"cat", "dog"}));
    EXPECT_EQ((*ds)->size(), 3);
    auto test = open_image_folder((root_ / "test").string(), o, (*ds)->class_names());  // (was an error)
    ASSERT_TRUE(test.is_ok()) << test.status().message();
    auto named = open_image_folder((root_ / "test").string(), o, {".ipynb_checkpoints", "cat", "dog"});
    ASSERT_TRUE(named.is_ok()) << named.status().message();
    EXPECT_EQ((*named)->size(), 4);
}

TEST_F(ImageFolder, OpensThroughDataConfig) {
    DataConfig cfg;
    cfg.dataset = "image-folder";
    cfg.path = root_.string();
    cfg.image_size = 8;
    cfg.channels = 1;
    auto s = open_datasets(cfg);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->test->size(), 3);
    EXPECT_EQ(s->mean.size(), 1u);
    // ImageNet's layout: train/ and val/, no test/ (pack wrote val shards nothing could read).
    stdfs::rename(root_ / "test", root_ / "val");
    stdfs::remove(root_ / "val" / "cat" / "b.png");
    auto v = open_datasets(cfg);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    EXPECT_EQ(v->test->size(), 2);
}

// Found by review: a root with train/ and neither test/ nor val/ was told only that ROOT/test does
// not exist, not that val/ is accepted too.
TEST_F(ImageFolder, ARootWithTrainAloneNamesTheLayoutsAccepted) {
    stdfs::remove_all(root_ / "test");
    DataConfig cfg;
    cfg.dataset = "image-folder";
    cfg.path = root_.string() + "/";
    cfg.image_size = 8;
    cfg.channels = 1;
    auto s = open_datasets(cfg);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
    EXPECT_NE(s.status().message().find(root_.string() + " has a train/ folder but no test/ or val/ folder"),
              std::string::npos)
        << s.status().message();
    EXPECT_NE(s.status().message().find("/test/<class>/*.jpg, or val/ for test/"), std::string::npos)
        << s.status().message();
}

TEST_F(ImageFolder, CorruptImageIsAnErrorNamingTheFile) {
    fs::atomic_write(root_ / "train" / "dog" / "bad.png", std::string("\x89PNG\r\n\x1a\n garbage", 17)).is_ok();
    ImageDatasetOptions o;
    o.shape = {3, 8, 8};
    auto ds = open_image_folder((root_ / "train").string(), o).value();
    std::vector<uint8_t> buf(3 * 64);
    int64_t label;
    Status st = ds->load(2, buf.data(), &label);  // sorted: bad.png before c.png
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("bad.png"), std::string::npos);
}

TEST_F(ImageFolder, HugeImageHeaderIsRefusedBeforeAllocating) {
    // A PNG whose IHDR claims 100000 x 100000 pixels (valid CRC, no image data).
    auto be32 = [](uint32_t v) {
        return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                           static_cast<char>(v)};
    };
    std::string ihdr = "IHDR" + be32(100000) + be32(100000) + std::string("\x08\x02\x00\x00\x00", 5);
    uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(ihdr.data()), static_cast<uInt>(ihdr.size())));
    const std::string idat = "IDAT";
    uint32_t idat_crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(idat.data()), 4));
    std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + ihdr + be32(crc) + be32(0) + idat + be32(idat_crc);
    auto path = root_ / "huge.png";
    ASSERT_TRUE(fs::atomic_write(path, png).is_ok());
    auto img = decode_image(fs::read_file(path).value(), path.string());
    ASSERT_FALSE(img.is_ok());
    EXPECT_NE(img.status().message().find("megapixel"), std::string::npos) << img.status().message();
}

TEST(ImageFolderMissing, NamesThePath) {
    auto ds = open_image_folder("/nonexistent/imgs", {});
    ASSERT_FALSE(ds.is_ok());
    EXPECT_NE(ds.status().message().find("/nonexistent/imgs"), std::string::npos);
}

}  // namespace
}  // namespace strato::data
