// Tar archives, packed shards (pack, ShardSource, LocalStore, resume), index.json validation,
// stats, manifests and verify, on real files in a temporary directory.

#include "strato/data/shards.h"

#include <gtest/gtest.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "strato/core/fs.h"
#include "strato/data/codec.h"
#include "strato/data/manifest.h"
#include "strato/data/tar.h"

namespace strato::data {
namespace {
namespace stdfs = std::filesystem;

std::string jpeg(int w, int h, int seed) {
    std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7 + static_cast<size_t>(seed) * 31) % 251);
    tjhandle tj = tjInitCompress();
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    EXPECT_EQ(tjCompress2(tj, px.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0), 0) << tjGetErrorStr2(tj);
    std::string out(reinterpret_cast<char*>(buf), size);
    tjFree(buf);
    tjDestroy(tj);
    return out;
}

std::string png(int w, int h, int seed) {
    png_image img{};
    img.version = PNG_IMAGE_VERSION;
    img.width = static_cast<png_uint_32>(w);
    img.height = static_cast<png_uint_32>(h);
    img.format = PNG_FORMAT_GRAY;
    std::vector<uint8_t> px(static_cast<size_t>(w * h));
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i + static_cast<size_t>(seed) * 13) % 256);
    png_alloc_size_t size = 0;
    EXPECT_TRUE(png_image_write_to_memory(&img, nullptr, &size, 0, px.data(), 0, nullptr));
    std::string out(size, '\0');
    EXPECT_TRUE(png_image_write_to_memory(&img, out.data(), &size, 0, px.data(), 0, nullptr)) << img.message;
    out.resize(size);
    return out;
}

void put(const stdfs::path& p, const std::string& bytes) {
    stdfs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
}

std::string get(const stdfs::path& p) { return fs::read_file(p).value(); }

class TempDir : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ =
            stdfs::temp_directory_path() / fmt::format("strato-shards-{}-{}", ::getpid(),
                                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
        stdfs::remove_all(root_);
        stdfs::create_directories(root_);
    }
    void TearDown() override { stdfs::remove_all(root_); }

    /// `classes` x `per_class` images, JPEG and PNG alternating, sizes varying; returns path → label.
    std::map<std::string, int64_t> make_folder(const stdfs::path& dir, int classes, int per_class) {
        std::map<std::string, int64_t> files;
        for (int c = 0; c < classes; ++c) {
            for (int i = 0; i < per_class; ++i) {
                const int seed = c * 1000 + i;
                const bool is_png = i % 3 == 2;
                const std::string name =
                    fmt::format("class{}/img.{:03d}.{}", c, i, is_png ? "png" : (i % 2 ? "JPEG" : "jpg"));
                put(dir / name, is_png ? png(12 + i, 10 + c, seed) : jpeg(16 + 2 * i, 16 + c, seed));
                files[name] = c;
            }
        }
        return files;
    }
    stdfs::path root_;
};

// ---- tar -------------------------------------------------------------------------------------

using Tar = TempDir;

TEST_F(Tar, RoundTripWithLongNamesAndEdgeSizes) {
    const std::string long_name = std::string(120, 'd') + "/" + std::string(90, 'f') + ".jpg";  // needs the prefix
    std::vector<std::pair<std::string, std::string>> members = {{"a.txt", "hello"},
                                                                {"empty", ""},
                                                                {"block", std::string(512, 'x')},
                                                                {"block1", std::string(513, 'y')},
                                                                {long_name, "long"}};
    auto w = TarWriter::create((root_ / "t.tar").string()).value();
    std::vector<int64_t> offsets;
    for (const auto& [n, d] : members) offsets.push_back(w->add(n, d).value());
    ASSERT_TRUE(w->finish().is_ok());
    EXPECT_EQ(w->sha256(), fs::sha256_file(root_ / "t.tar").value());
    EXPECT_EQ(w->bytes() % 512, 0);
    EXPECT_EQ(w->bytes(), static_cast<int64_t>(stdfs::file_size(root_ / "t.tar")));

    auto list = list_tar_file((root_ / "t.tar").string());
    ASSERT_TRUE(list.is_ok()) << list.status().message();
    ASSERT_EQ(list->size(), members.size());
    const std::string bytes = get(root_ / "t.tar");
    for (size_t i = 0; i < members.size(); ++i) {
        EXPECT_EQ((*list)[i].name, members[i].first);
        EXPECT_EQ((*list)[i].data_offset, offsets[i]);
        EXPECT_EQ(bytes.substr(static_cast<size_t>(offsets[i]), members[i].second.size()), members[i].second);
    }
}

TEST_F(Tar, NamesThatUstarCannotHoldAreClearErrors) {
    auto too_long = tar_header(std::string(200, 'a') + "/" + std::string(60, 'b'), 1);
    ASSERT_FALSE(too_long.is_ok());
    EXPECT_NE(too_long.status().message().find("ustar allows 255"), std::string::npos) << too_long.status().message();
    auto no_slash = tar_header(std::string(150, 'a'), 1);
    ASSERT_FALSE(no_slash.is_ok());
    EXPECT_NE(no_slash.status().message().find("needs a '/'"), std::string::npos) << no_slash.status().message();
    EXPECT_FALSE(tar_header("", 1).is_ok());
    EXPECT_FALSE(tar_header("big", int64_t{1} << 33).is_ok());
    EXPECT_TRUE(tar_header(std::string(100, 'a'), 1).is_ok());
}

/// A header of `type` for `name` with a correct checksum.
std::string typed_header(const std::string& name, int64_t size, char type) {
    std::string h = tar_header(name, size).value();
    h[156] = type;
    std::memset(h.data() + 148, ' ', 8);
    int64_t sum = 0;
    for (unsigned char c : h) sum += c;
    std::string chk = fmt::format("{:06o}", sum);
    std::memcpy(h.data() + 148, chk.data(), 6);
    h[154] = '\0';
    return h;
}

std::string padded(std::string data) {
    data.resize(static_cast<size_t>((data.size() + 511) / 512 * 512), '\0');
    return data;
}

TEST_F(Tar, SkipsDirectoriesLinksAndFollowsPaxAndGnuNames) {
    const std::string pax_name = std::string(300, 'p') + ".jpg";  // longer than ustar can hold
    std::string rec = " path=" + pax_name + "\n";
    rec = std::to_string(rec.size() + 3) + rec;  // the length counts itself: 3 digits
    ASSERT_EQ(std::stoul(rec), rec.size());
    const std::string gnu_name = std::string(280, 'g') + ".png";
    std::string a;
    a += typed_header("dir/", 0, '5');
    a += typed_header("link", 0, '2');
    a += typed_header("PaxHeaders/x", static_cast<int64_t>(rec.size()), 'x') + padded(rec);
    a += tar_header("short-name-replaced", 3).value() + padded("abc");
    a += typed_header("././@LongLink", static_cast<int64_t>(gnu_name.size() + 1), 'L') + padded(gnu_name + '\0');
    a += tar_header("short", 2).value() + padded("de");
    a += typed_header("global", 0, 'g');
    a += tar_header("plain", 1).value() + padded("z");
    a += std::string(1024, '\0');
    auto list = list_tar_bytes(a, "mem.tar");
    ASSERT_TRUE(list.is_ok()) << list.status().message();
    ASSERT_EQ(list->size(), 3u);
    EXPECT_EQ((*list)[0].name, pax_name);
    EXPECT_EQ(a.substr(static_cast<size_t>((*list)[0].data_offset), 3), "abc");
    EXPECT_EQ((*list)[1].name, gnu_name);
    EXPECT_EQ((*list)[2].name, "plain");
}

// Found by review: an old-GNU sparse file with more than 4 regions (`tar --sparse --format=gnu`)
// has sparse map blocks between its header and its data; they were read as data, and every
// member after it was listed at the wrong offset (or not at all).
TEST_F(Tar, SkipsTheSparseMapBlocksOfAnOldGnuSparseFile) {
    std::string sparse = typed_header("sparse.bin", 1000, 'S');
    sparse[482] = 1;  // isextended: a map block follows
    std::memset(sparse.data() + 148, ' ', 8);
    int64_t sum = 0;
    for (unsigned char c : sparse) sum += c;
    std::memcpy(sparse.data() + 148, fmt::format("{:06o}", sum).data(), 6);
    std::string map1(512, '\0'), map2(512, '\0');
    map1[504] = 1;  // another one follows
    std::string a = sparse + map1 + map2 + padded(std::string(1000, 's')) + tar_header("k.png", 3).value() +
                    padded("png") + std::string(1024, '\0');
    auto list = list_tar_bytes(a, "s.tar");
    ASSERT_TRUE(list.is_ok()) << list.status().message();
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].name, "k.png");
    EXPECT_EQ((*list)[0].data_offset, 512 * 3 + 1024 + 512);
    // Cut inside the map: an error naming it.
    auto st = list_tar_bytes(sparse + map1, "s.tar").status();
    EXPECT_NE(st.message().find("s.tar: truncated at offset 1024: the sparse file at offset 0"), std::string::npos)
        << st.message();
}

TEST_F(Tar, CorruptAndTruncatedArchivesAreErrorsWithTheOffset) {
    std::string a = tar_header("one", 600).value() + padded(std::string(600, '1')) + tar_header("two", 5).value() +
                    padded("22222") + std::string(1024, '\0');
    ASSERT_TRUE(list_tar_bytes(a, "x.tar").is_ok());

    std::string bad = a;
    bad[1536 + 3] ^= 0x20;  // a byte of the second header's name
    auto st = list_tar_bytes(bad, "x.tar").status();
    EXPECT_EQ(st.code(), StatusCode::kDataLoss);
    EXPECT_NE(st.message().find("x.tar: corrupt tar header at offset 1536: checksum"), std::string::npos)
        << st.message();

    st = list_tar_bytes(a.substr(0, 1000), "x.tar").status();  // inside the first member's data
    EXPECT_NE(st.message().find("truncated: the entry at offset 0 says 600 bytes of data, 488 remain"),
              std::string::npos)
        << st.message();
    st = list_tar_bytes(a.substr(0, 1536 + 100), "x.tar").status();  // inside the second header
    EXPECT_NE(st.message().find("truncated at offset 1536"), std::string::npos) << st.message();

    // A header claiming 8 GiB in a tiny file: an error, not an allocation.
    std::string huge = tar_header("huge", (int64_t{1} << 33) - 1).value() + std::string(512, 'h');
    st = list_tar_bytes(huge, "h.tar").status();
    EXPECT_NE(st.message().find("says 8589934591 bytes"), std::string::npos) << st.message();
    // A pax header claiming to be huge.
    std::string pax = typed_header("pax", 5 << 20, 'x') + std::string(5 << 20, 'x');
    st = list_tar_bytes(pax, "p.tar").status();
    EXPECT_NE(st.message().find("more than the 1 MiB allowed"), std::string::npos) << st.message();
    // A pax size of 25 digits (found by the inputs fuzzer: the sum overflowed before the check).
    std::string big = " size=3256289496059432549123456\n";
    big = std::to_string(big.size() + 2) + big;
    std::string pax_big = typed_header("pax", static_cast<int64_t>(big.size()), 'x') + padded(big) +
                          tar_header("x", 1).value() + padded("x") + std::string(1024, '\0');
    st = list_tar_bytes(pax_big, "b.tar").status();
    EXPECT_NE(st.message().find("has size '3256289496059432549123456', expected a number"), std::string::npos)
        << st.message();
    // Not a tar file at all.
    st = list_tar_bytes(std::string(2048, 'j'), "j.tar").status();
    EXPECT_NE(st.message().find("not a number"), std::string::npos) << st.message();
    // Through a file too, with the path in the message.
    put(root_ / "cut.tar", a.substr(0, 1000));
    st = list_tar_file((root_ / "cut.tar").string()).status();
    EXPECT_NE(st.message().find("cut.tar: truncated"), std::string::npos) << st.message();
}

// ---- pack and read back ------------------------------------------------------------------------

using Pack = TempDir;

TEST_F(Pack, EverySampleReadsBackByteIdenticalWithItsLabel) {
    auto files = make_folder(root_ / "src", 3, 7);
    PackOptions o;
    o.shard_size = 8 << 10;
    o.workers = 2;
    auto packed = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o);
    ASSERT_TRUE(packed.is_ok()) << packed.status().message();
    ASSERT_EQ(packed->size(), 1u);
    const PackedSplit& p = (*packed)[0];
    EXPECT_EQ(p.samples, 21);
    EXPECT_GT(p.shards, 2);
    EXPECT_EQ(p.shards_kept, 0);

    auto src = ShardSource::open(std::make_shared<LocalStore>((root_ / "dst").string()));
    ASSERT_TRUE(src.is_ok()) << src.status().message();
    EXPECT_EQ((*src)->size(), 21);
    EXPECT_EQ((*src)->class_names(), (std::vector<std::string>{"class0", "class1", "class2"}));
    std::map<std::string, int64_t> by_bytes;
    for (const auto& [name, label] : files) by_bytes[get(root_ / "src" / name)] = label;
    ASSERT_EQ(by_bytes.size(), files.size());  // distinct contents
    std::set<std::string> seen;
    for (int64_t i = 0; i < (*src)->size(); ++i) {
        EncodedSample s;
        ASSERT_TRUE((*src)->read(i, &s).is_ok());
        ASSERT_TRUE(by_bytes.count(s.bytes)) << s.name;
        EXPECT_EQ(s.label, by_bytes[s.bytes]) << s.name;
        EXPECT_EQ((*src)->label(i), s.label);
        EXPECT_TRUE(seen.insert(s.bytes).second) << "read twice: " << s.name;
        EXPECT_EQ(s.name, (*src)->name(i));
        const std::string key = s.name.substr(s.name.find(':') + 1);
        EXPECT_EQ(stdfs::path(key).filename().string().find('.'), std::string::npos) << key;
        EXPECT_EQ(s.name.rfind("shard-", 0), 0u) << s.name;
    }
    EXPECT_EQ(seen.size(), files.size());
    // Keys: "class0/img_000" from "class0/img.000.jpg".
    EXPECT_NE(std::find((*src)->index().keys.begin(), (*src)->index().keys.end(), "class0/img_000"),
              (*src)->index().keys.end());

    // The tar members are WebDataset's: <key>.jpg|png then <key>.cls.
    auto members = list_tar_file((root_ / "dst" / "shard-000000.tar").string()).value();
    ASSERT_EQ(members.size() % 2, 0u);
    for (size_t k = 0; k < members.size(); k += 2) {
        const std::string& img = members[k].name;
        const std::string key = img.substr(0, img.rfind('.'));
        EXPECT_TRUE(img.ends_with(".jpg") || img.ends_with(".png")) << img;
        EXPECT_EQ(members[k + 1].name, key + ".cls");
    }

    // group_starts: the first sample of each shard.
    auto groups = (*src)->group_starts();
    ASSERT_EQ(static_cast<int64_t>(groups.size()), p.shards);
    EXPECT_EQ(groups[0], 0);
    EXPECT_TRUE(std::is_sorted(groups.begin(), groups.end()));
}

TEST_F(Pack, ShardsStayUnderTheSizeLimitAndShuffleMixesClasses) {
    make_folder(root_ / "src", 2, 20);
    PackOptions o;
    o.shard_size = 6 << 10;
    auto packed = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o).value();
    auto idx = parse_shard_index(get(root_ / "dst" / "index.json"), "index.json").value();
    bool mixed = false;
    for (size_t s = 0; s < idx.shards.size(); ++s) {
        const auto bytes = static_cast<int64_t>(stdfs::file_size(root_ / "dst" / idx.shards[s].name));
        EXPECT_EQ(bytes, idx.shards[s].bytes);
        EXPECT_LE(bytes, o.shard_size) << idx.shards[s].name;
        std::set<int64_t> labels(idx.labels.begin() + idx.shard_starts[s],
                                 idx.labels.begin() + idx.shard_starts[s + 1]);
        mixed |= labels.size() > 1;
    }
    EXPECT_TRUE(mixed);
    // Without shuffling the samples keep the folder's sorted order.
    o.shuffle = false;
    pack_image_folder((root_ / "src").string(), (root_ / "ordered").string(), o).value();
    auto ordered = parse_shard_index(get(root_ / "ordered" / "index.json"), "index.json").value();
    EXPECT_TRUE(std::is_sorted(ordered.keys.begin(), ordered.keys.end()));
    EXPECT_TRUE(std::is_sorted(ordered.labels.begin(), ordered.labels.end()));

    // A limit smaller than any sample: one sample per shard, each over the limit.
    o.shard_size = 2048;
    auto one = pack_image_folder((root_ / "src").string(), (root_ / "one").string(), o).value();
    EXPECT_EQ(one[0].shards, 40);
}

TEST_F(Pack, ParallelWritersGiveTheSameBytesAsOne) {
    make_folder(root_ / "src", 3, 10);
    PackOptions o;
    o.shard_size = 5 << 10;
    o.seed = 7;
    o.workers = 1;
    pack_image_folder((root_ / "src").string(), (root_ / "one").string(), o).value();
    o.workers = 4;
    pack_image_folder((root_ / "src").string(), (root_ / "four").string(), o).value();
    int compared = 0;
    for (const auto& e : stdfs::directory_iterator(root_ / "one")) {
        const std::string name = e.path().filename().string();
        if (name.ends_with(".tar") || name == "index.json") {
            EXPECT_EQ(get(e.path()), get(root_ / "four" / name)) << name;
            ++compared;
        }
    }
    EXPECT_GT(compared, 4);
    // Another seed, another order.
    o.seed = 8;
    pack_image_folder((root_ / "src").string(), (root_ / "other").string(), o).value();
    EXPECT_NE(get(root_ / "one" / "index.json"), get(root_ / "other" / "index.json"));
}

TEST_F(Pack, AKilledPackResumesKeepingFinishedShards) {
    make_folder(root_ / "src", 2, 12);
    PackOptions o;
    o.shard_size = 5 << 10;
    auto first = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o).value();
    const std::string index = get(root_ / "dst" / "index.json");
    const auto n = first[0].shards;
    ASSERT_GE(n, 4);
    // A kill before the index was written and before shard 2 was renamed into place; shard 1 was
    // corrupted by something else since.
    stdfs::remove(root_ / "dst" / "index.json");
    stdfs::remove(root_ / "dst" / "shard-000002.tar");
    put(root_ / "dst" / "shard-000002.tar.tmp", "half a shard");
    std::string s1 = get(root_ / "dst" / "shard-000001.tar");
    s1[700] ^= 1;
    put(root_ / "dst" / "shard-000001.tar", s1);
    const auto t0 = stdfs::last_write_time(root_ / "dst" / "shard-000000.tar");

    o.workers = 3;
    auto again = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o);
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ((*again)[0].shards_kept, n - 2);
    EXPECT_EQ(get(root_ / "dst" / "index.json"), index);
    EXPECT_EQ(stdfs::last_write_time(root_ / "dst" / "shard-000000.tar"), t0);  // kept, not rewritten
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "shard-000002.tar.tmp"));
    auto report = verify_dataset((root_ / "dst").string()).value();
    EXPECT_TRUE(report.ok()) << (report.problems.empty() ? "" : report.problems[0].detail);

    // Another shard size: a new plan, nothing kept, the extra old shards removed.
    o.shard_size = 64 << 10;
    auto bigger = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o).value();
    EXPECT_EQ(bigger[0].shards_kept, 0);
    EXPECT_LT(bigger[0].shards, n);
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / fmt::format("shard-{:06d}.tar", n - 1)));
}

// Found by review: a shard recorded in the journal by an older strato, which packed without
// checking the images, was kept as it was by a resumed pack and listed in index.json as good,
// a non-image inside, although this version refuses to pack that very file.
TEST_F(Pack, AResumedPackRechecksTheImagesOfTheShardsItKeeps) {
    make_folder(root_ / "src", 2, 6);
    PackOptions o;
    o.shard_size = 4 << 10;
    pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o).value();
    const auto index = nlohmann::json::parse(get(root_ / "dst" / "index.json"));
    const auto& s0 = index["shards"][0];
    const std::string shard_name = s0["name"];
    const auto offset = s0["offsets"][0].get<size_t>(), size = s0["sizes"][0].get<size_t>();
    std::string shard = get(root_ / "dst" / shard_name);
    // The source file of that sample (its bytes are in the shard)...
    stdfs::path source;
    for (const auto& e : stdfs::recursive_directory_iterator(root_ / "src"))
        if (e.is_regular_file() && get(e.path()) == shard.substr(offset, size)) source = e.path();
    ASSERT_FALSE(source.empty());
    // ... is replaced by a non-image of the same size and modification time (the plan is the
    // same), which the older version packed into the shard and recorded with its checksum.
    const std::string bad(size, 'x');
    const auto mtime = stdfs::last_write_time(source);
    put(source, bad);
    stdfs::last_write_time(source, mtime);
    shard.replace(offset, size, bad);
    put(root_ / "dst" / shard_name, shard);
    auto journal = nlohmann::json::parse(get(root_ / "dst" / kPackJournalName));
    journal["shards"][shard_name]["sha256"] = fs::sha256_hex(shard);
    put(root_ / "dst" / kPackJournalName, journal.dump());
    stdfs::remove(root_ / "dst" / "index.json");  // the pack was interrupted

    auto again = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o);
    ASSERT_FALSE(again.is_ok()) << "the shard holding a non-image was kept";
    EXPECT_NE(again.status().message().find(source.filename().string() + ": unknown image format"), std::string::npos)
        << again.status().message();
    EXPECT_NE(again.status().message().find("remove or replace it"), std::string::npos) << again.status().message();
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "index.json"));

    // Replaced by a good image, the pack goes through and verifies.
    stdfs::remove(source);
    put(source.parent_path() / "new.png", png(9, 9, 3));
    auto fixed = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o);
    ASSERT_TRUE(fixed.is_ok()) << fixed.status().message();
    auto report = verify_dataset((root_ / "dst").string()).value();
    EXPECT_TRUE(report.ok()) << (report.problems.empty() ? "" : report.problems[0].detail);
}

// Found by review: splits were packed one after another, each removing its own index.json only
// when its turn came, so a pack that stopped between them (killed, or a split folder that took no
// new files) left train/ packed anew beside test/ still indexed from the earlier pack: stats,
// verify and training took the mixture of two datasets for a finished pack.
TEST_F(Pack, APackStoppedBetweenSplitsLeavesNoSplitOfTheOldPackIndexed) {
    make_folder(root_ / "src" / "train", 2, 4);
    make_folder(root_ / "src" / "test", 2, 2);
    pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {}).value();
    put(root_ / "src" / "train" / "class0" / "new.png", png(9, 9, 1));
    put(root_ / "src" / "test" / "class1" / "new.png", png(9, 9, 2));
    // test/ takes no new files (the pack's write probe meets a folder there): the pack stops
    // after train/ is written.
    const stdfs::path probe = root_ / "dst" / "test" / fmt::format(".strato-write-test.{}", ::getpid());
    stdfs::create_directories(probe);
    auto stopped = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_FALSE(stopped.is_ok());
    EXPECT_TRUE(stdfs::exists(root_ / "dst" / "train" / "index.json"));
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "test" / "index.json")) << "the old test split is still indexed";
    auto stats = dataset_stats((root_ / "dst").string());
    ASSERT_FALSE(stats.is_ok()) << "a half repacked dataset passed as finished";
    EXPECT_NE(stats.status().message().find("did not finish"), std::string::npos) << stats.status().message();

    stdfs::remove(probe);
    auto again = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ((*again)[1].samples, 5);
    auto report = verify_dataset((root_ / "dst").string()).value();
    EXPECT_TRUE(report.ok()) << (report.problems.empty() ? "" : report.problems[0].detail);
}

TEST_F(Pack, SplitsArePackedSeparatelyWithTheTrainingClasses) {
    make_folder(root_ / "src" / "train", 3, 4);
    make_folder(root_ / "src" / "test", 2, 2);  // test lacks class2
    auto packed = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_TRUE(packed.is_ok()) << packed.status().message();
    ASSERT_EQ(packed->size(), 2u);
    EXPECT_EQ((*packed)[0].name, "train");
    EXPECT_EQ((*packed)[1].name, "test");
    auto test = ShardSource::open(std::make_shared<LocalStore>((root_ / "dst" / "test").string())).value();
    EXPECT_EQ(test->size(), 4);
    EXPECT_EQ(test->class_names().size(), 3u);

    // A test class that training does not have is an error.
    make_folder(root_ / "src2" / "train", 1, 2);
    make_folder(root_ / "src2" / "test", 2, 1);
    auto bad = pack_image_folder((root_ / "src2").string(), (root_ / "dst2").string(), {});
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("class folder 'class1' is not one of the 1 classes"), std::string::npos)
        << bad.status().message();
}

// Found by review: a root holding train/ alone was packed as one class named "train", every image
// labelled 0. It is a root of one split; beside class folders, train/ stays a class.
TEST_F(Pack, ARootOfTrainAloneIsASplitNotAClass) {
    make_folder(root_ / "only" / "train", 3, 2);
    EXPECT_EQ(dataset_splits((root_ / "only").string()), std::vector<std::string>{"train"});
    auto packed = pack_image_folder((root_ / "only").string(), (root_ / "dst").string(), {});
    ASSERT_TRUE(packed.is_ok()) << packed.status().message();
    ASSERT_EQ(packed->size(), 1u);
    EXPECT_EQ((*packed)[0].name, "train");
    auto train = ShardSource::open(std::make_shared<LocalStore>((root_ / "dst" / "train").string())).value();
    EXPECT_EQ(train->size(), 6);
    EXPECT_EQ(train->class_names().size(), 3u);
    make_folder(root_ / "flat", 2, 1);
    make_folder(root_ / "flat" / "train", 1, 1);  // (flat/train/class0: train is a class beside class0, class1)
    EXPECT_EQ(dataset_splits((root_ / "flat").string()), std::vector<std::string>{""});
}

// Found by review: a model's labels became folder paths as they were ("../../outside" scored
// another tree as a class), and Fashion-MNIST's "T-shirt/top" could never be a folder.
TEST_F(Pack, ClassNamesBecomeFoldersSafely) {
    EXPECT_EQ(class_folder("T-shirt/top").value(), "T-shirt_top");
    for (const char* bad : {"", ".", "..", "a\0b"})
        EXPECT_FALSE(class_folder(std::string(bad, bad[0] == 'a' ? 3 : strlen(bad))).is_ok()) << bad;
    EXPECT_EQ(class_folder("../../outside").value(), ".._.._outside");
    make_folder(root_ / "eval", 2, 1);  // class0, class1: an image each
    stdfs::rename(root_ / "eval" / "class0", root_ / "eval" / "T-shirt_top");
    auto idx = index_image_folder((root_ / "eval").string(), {"T-shirt/top", "class1"});
    ASSERT_TRUE(idx.is_ok()) << idx.status().message();
    EXPECT_EQ(idx->files.size(), 2u);
    EXPECT_EQ(idx->files[0].label, 0);
    EXPECT_EQ(idx->class_names[0], "T-shirt/top");
    auto escape = index_image_folder((root_ / "eval").string(), {"T-shirt/top", ".."});
    ASSERT_FALSE(escape.is_ok());
    EXPECT_NE(escape.status().message().find("class name '..' cannot be a folder name"), std::string::npos)
        << escape.status().message();
}

// Found by review: each of these passed a half-written or stale dataset as "ok".
TEST_F(Pack, UnfinishedSplitsStaleIndexesAndPipesAreErrors) {
    make_folder(root_ / "src" / "train", 2, 3);
    make_folder(root_ / "src" / "test", 2, 2);
    // A pack stopped while the second split was written: test/ has shards but no index.json.
    ASSERT_TRUE(pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {}).is_ok());
    stdfs::remove(root_ / "dst" / "test" / "index.json");
    auto unfinished = dataset_stats((root_ / "dst").string());
    ASSERT_FALSE(unfinished.is_ok());
    EXPECT_NE(unfinished.status().message().find("test/ has no index.json while train/ has one"), std::string::npos)
        << unfinished.status().message();
    ASSERT_TRUE(pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {}).is_ok());  // finished
    EXPECT_TRUE(dataset_stats((root_ / "dst").string()).is_ok());

    // A split pack into a folder that held an unsplit one: the old root index.json won.
    ASSERT_TRUE(pack_image_folder((root_ / "src" / "test").string(), (root_ / "mix").string(), {}).is_ok());
    ASSERT_TRUE(pack_image_folder((root_ / "src").string(), (root_ / "mix").string(), {}).is_ok());
    auto mix = dataset_stats((root_ / "mix").string());
    ASSERT_TRUE(mix.is_ok()) << mix.status().message();
    ASSERT_EQ(mix->splits.size(), 2u);
    EXPECT_EQ(mix->splits[0].samples, 6);
    // ... and the other way round: the split indexes go.
    ASSERT_TRUE(pack_image_folder((root_ / "src" / "test").string(), (root_ / "mix").string(), {}).is_ok());
    EXPECT_FALSE(stdfs::exists(root_ / "mix" / "train" / "index.json"));

    // A manifest pins every file: a shard that cannot be read fails it instead of being left out.
    stdfs::remove(root_ / "dst" / "train" / "shard-000000.tar");
    auto missing = dataset_stats((root_ / "dst").string(), {.hash = true});
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find("1 file(s) could not be read (first: train/shard-000000.tar"),
              std::string::npos)
        << missing.status().message();

    // A named pipe in a shard's place held open() for ever (stats, verify, and pack's resume).
    ASSERT_EQ(::mkfifo((root_ / "dst" / "train" / "shard-000000.tar").c_str(), 0600), 0);
    auto pipe = verify_dataset((root_ / "dst").string(), {});
    ASSERT_TRUE(pipe.is_ok()) << pipe.status().message();
    EXPECT_FALSE(pipe->ok());
    ASSERT_FALSE(pipe->problems.empty());
    EXPECT_NE(pipe->problems[0].detail.find("not a regular file"), std::string::npos) << pipe->problems[0].detail;
    auto repack = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    EXPECT_TRUE(repack.is_ok() || repack.status().message().find("not a regular file") != std::string::npos)
        << repack.status().message();
}

TEST_F(Pack, BadArgumentsAreClearErrors) {
    make_folder(root_ / "src", 1, 2);
    {
        // Another pack writing the same folder (found by review: the second removed the first's
        // temporary shards).
        stdfs::create_directories(root_ / "busy");
        auto held = fs::lock_file(root_ / "busy" / ".pack.lock", "x");
        ASSERT_TRUE(held.is_ok()) << held.status().message();
        auto busy = pack_image_folder((root_ / "src").string(), (root_ / "busy/").string(), {});
        ASSERT_FALSE(busy.is_ok());
        EXPECT_NE(busy.status().message().find("busy/ is in use by another strato process (pid " +
                                               std::to_string(::getpid()) + ")"),
                  std::string::npos)
            << busy.status().message();
    }
    EXPECT_TRUE(pack_image_folder((root_ / "src").string(), (root_ / "busy").string(), {}).is_ok());
    auto inside = pack_image_folder((root_ / "src").string(), (root_ / "src" / "shards").string(), {});
    EXPECT_NE(inside.status().message().find("is inside the source"), std::string::npos) << inside.status().message();
    // `strato data pack SRC/train SRC`: shards and index.json into the dataset root itself.
    auto holds = pack_image_folder((root_ / "src" / "class0").string(), (root_ / "src").string(), {});
    EXPECT_NE(holds.status().message().find("holds the source"), std::string::npos) << holds.status().message();
    EXPECT_FALSE(stdfs::exists(root_ / "src" / "index.json"));
    auto missing = pack_image_folder((root_ / "nope").string(), (root_ / "dst").string(), {});
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    PackOptions tiny;
    tiny.shard_size = 100;
    EXPECT_NE(pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), tiny)
                  .status()
                  .message()
                  .find("too small"),
              std::string::npos);
    stdfs::create_directories(root_ / "empty" / "cls");
    EXPECT_NE(pack_image_folder((root_ / "empty").string(), (root_ / "dst").string(), {})
                  .status()
                  .message()
                  .find("no .jpg/.jpeg/.png images"),
              std::string::npos);
}

// Found by review: a pack into a folder holding shard-NNNNNN.tar files that no strato pack wrote
// (another tool's WebDataset shards) overwrote shard-000000.tar and deleted those past its plan.
TEST_F(Pack, ShardsThatNoPackWroteAreNeitherOverwrittenNorDeleted) {
    make_folder(root_ / "src", 2, 2);
    put(root_ / "dst" / "notes.txt", "mine");
    put(root_ / "dst" / "shard-000000.tar", "other tool's shard 0");
    put(root_ / "dst" / "shard-000005.tar", "other tool's shard 5");
    auto r = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("holds shard-000000.tar and 1 more shard file(s) but no index.json"),
              std::string::npos)
        << r.status().message();
    EXPECT_EQ(get(root_ / "dst" / "shard-000000.tar"), "other tool's shard 0");
    EXPECT_EQ(get(root_ / "dst" / "shard-000005.tar"), "other tool's shard 5");
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "index.json"));
    // Other files are no obstacle; nor are a pack's own shards when it packs again.
    stdfs::remove(root_ / "dst" / "shard-000000.tar");
    stdfs::remove(root_ / "dst" / "shard-000005.tar");
    ASSERT_TRUE(pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {}).is_ok());
    ASSERT_TRUE(pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {}).is_ok());
    EXPECT_EQ(get(root_ / "dst" / "notes.txt"), "mine");
    // A split folder too: train/ of the destination.
    make_folder(root_ / "splits" / "train", 2, 2);
    make_folder(root_ / "splits" / "test", 2, 1);
    put(root_ / "dst2" / "test" / "shard-000003.tar", "theirs");
    auto split = pack_image_folder((root_ / "splits").string(), (root_ / "dst2").string(), {});
    ASSERT_FALSE(split.is_ok());
    EXPECT_NE(split.status().message().find("test holds shard-000003.tar but no index.json"), std::string::npos)
        << split.status().message();
    EXPECT_FALSE(stdfs::exists(root_ / "dst2" / "train" / "index.json"));
    EXPECT_EQ(get(root_ / "dst2" / "test" / "shard-000003.tar"), "theirs");
}

// Found by review: a zero-byte or cut-off image was packed as is, without a word; only a later
// `verify` (or training) found it.
TEST_F(Pack, EmptyTruncatedAndNonImageFilesAreRefused) {
    make_folder(root_ / "src", 2, 3);
    put(root_ / "src" / "class1" / "zero.jpg", "");
    put(root_ / "src" / "class1" / "zero2.png", "");
    auto empty = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_FALSE(empty.is_ok());
    EXPECT_EQ(empty.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(empty.status().message().find("class1/zero.jpg: empty file (0 bytes; expected a JPEG or PNG image), and 1 "
                                            "more empty file(s)"),
              std::string::npos)
        << empty.status().message();
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "index.json"));
    stdfs::remove(root_ / "src" / "class1" / "zero.jpg");
    stdfs::remove(root_ / "src" / "class1" / "zero2.png");

    const std::string whole_jpeg = jpeg(64, 48, 5), whole_png = png(40, 30, 6);
    for (const auto& [name, bytes, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"cut.jpg", whole_jpeg.substr(0, whole_jpeg.size() / 2), "cut.jpg: truncated JPEG ("},
             {"cut.png", whole_png.substr(0, whole_png.size() - 20), "cut.png: truncated PNG ("},
             {"text.jpg", "not an image at all", "text.jpg: unknown image format (expected JPEG or PNG)"}}) {
        SCOPED_TRACE(name);
        put(root_ / "src" / "class0" / name, bytes);
        auto r = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
        ASSERT_FALSE(r.is_ok());
        EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status().message();
        EXPECT_NE(r.status().message().find("remove or replace it, then pack again"), std::string::npos)
            << r.status().message();
        EXPECT_FALSE(stdfs::exists(root_ / "dst" / "index.json"));
        stdfs::remove(root_ / "src" / "class0" / name);
    }
    // Whole files pack: with bytes after the end marker, and a JPEG whose EXIF thumbnail's end
    // marker comes first (the walk skips it by the segment's length).
    put(root_ / "src" / "class0" / "tail.jpg", whole_jpeg + "trailing camera data");
    put(root_ / "src" / "class0" / "tail.png", whole_png + "xx");
    const std::string thumb = jpeg(8, 8, 1);
    std::string app1 = "Exif" + std::string(2, '\0') + thumb;
    const size_t len = app1.size() + 2;
    std::string with_thumb = whole_jpeg.substr(0, 2) + "\xff\xe1" + std::string(1, static_cast<char>(len >> 8)) +
                             std::string(1, static_cast<char>(len & 0xff)) + app1 + whole_jpeg.substr(2);
    put(root_ / "src" / "class0" / "thumb.jpg", with_thumb);
    auto ok = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_TRUE(ok.is_ok()) << ok.status().message();
    EXPECT_EQ(ok->at(0).samples, 9);
    // The thumbnail's FF D9 does not make a cut-off photo whole.
    put(root_ / "src" / "class0" / "thumb.jpg", with_thumb.substr(0, with_thumb.size() - whole_jpeg.size() / 2));
    auto cut = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_FALSE(cut.is_ok());
    EXPECT_NE(cut.status().message().find("thumb.jpg: truncated JPEG"), std::string::npos) << cut.status().message();
}

// ---- ShardSource and stores --------------------------------------------------------------------

/// A LocalStore that records what the source asks of it.
class RecordingStore final : public ShardStore {
  public:
    explicit RecordingStore(std::string dir) : local_(std::move(dir)) {}
    Result<std::string> read_meta(const std::string& name) const override { return local_.read_meta(name); }
    Result<std::string> local_path(const ShardInfo& s) override { return local_.local_path(s); }
    void prefetch(const std::vector<ShardInfo>& shards) override {
        std::lock_guard<std::mutex> lock(mu);
        prefetched.clear();
        for (const auto& s : shards) prefetched.push_back(s.name);
    }
    void release(const ShardInfo& s) override {
        std::lock_guard<std::mutex> lock(mu);
        released.push_back(s.name);
    }
    std::string describe() const override { return local_.describe(); }
    std::mutex mu;
    std::vector<std::string> prefetched, released;

  private:
    LocalStore local_;
};

TEST_F(Pack, WillReadPrefetchesShardsInOrderAndReleasesFinishedOnes) {
    make_folder(root_ / "src", 2, 6);
    PackOptions o;
    o.shard_size = 5 << 10;
    pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o).value();
    auto store = std::make_shared<RecordingStore>((root_ / "dst").string());
    auto src = ShardSource::open(store).value();
    const auto groups = src->group_starts();
    ASSERT_GE(groups.size(), 3u);
    const int64_t end2 = groups.size() > 3 ? groups[3] : src->size();
    // From position 1 of an order that starts with an unrelated sample: shard 2 in full, then shard 0.
    std::vector<int64_t> order = {groups[1]};
    for (int64_t i = groups[2]; i < end2; ++i) order.push_back(i);
    for (int64_t i = 0; i < groups[1]; ++i) order.push_back(i);
    src->will_read(order, 1);
    EXPECT_EQ(store->prefetched, (std::vector<std::string>{"shard-000002.tar", "shard-000000.tar"}));
    EncodedSample s;
    for (size_t k = 1; k < order.size(); ++k) {
        ASSERT_TRUE(src->read(order[k], &s).is_ok());
        const bool shard2_done = static_cast<int64_t>(k) >= end2 - groups[2];
        if (k + 1 < order.size()) {
            EXPECT_EQ(store->released.size(), shard2_done ? 1u : 0u) << k;
        }
    }
    EXPECT_EQ(store->released, (std::vector<std::string>{"shard-000002.tar", "shard-000000.tar"}));
    // A sample outside the hint releases nothing.
    ASSERT_TRUE(src->read(groups[1], &s).is_ok());
    EXPECT_EQ(store->released.size(), 2u);
    // Reading a released shard again opens it again.
    ASSERT_TRUE(src->read(0, &s).is_ok());
}

TEST_F(Pack, ConcurrentReadsWhileShardsAreReleased) {
    make_folder(root_ / "src", 2, 15);
    PackOptions o;
    o.shard_size = 5 << 10;
    pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o).value();
    auto src = ShardSource::open(std::make_shared<LocalStore>((root_ / "dst").string())).value();
    std::vector<std::string> expected(static_cast<size_t>(src->size()));
    for (int64_t i = 0; i < src->size(); ++i) {
        EncodedSample s;
        ASSERT_TRUE(src->read(i, &s).is_ok());
        expected[static_cast<size_t>(i)] = s.bytes;
    }
    for (int round = 0; round < 20; ++round) {
        std::vector<int64_t> order;
        for (int64_t i = 0; i < src->size(); ++i) order.push_back((i * 7 + round) % src->size());
        src->will_read(order, 0);
        std::atomic<size_t> next{0};
        std::atomic<int> bad{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t) {
            threads.emplace_back([&] {
                for (size_t k = next++; k < order.size(); k = next++) {
                    EncodedSample s;
                    const int64_t i = order[k];
                    if (!src->read(i, &s).is_ok() || s.bytes != expected[static_cast<size_t>(i)]) ++bad;
                }
            });
        }
        for (auto& t : threads) t.join();
        ASSERT_EQ(bad.load(), 0) << "round " << round;
    }
}

TEST_F(Pack, MissingOrTruncatedShardsAreErrorsNamingThem) {
    make_folder(root_ / "src", 1, 6);
    PackOptions o;
    o.shard_size = 5 << 10;
    o.shuffle = false;
    pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), o).value();
    auto src = ShardSource::open(std::make_shared<LocalStore>((root_ / "dst").string())).value();
    stdfs::remove(root_ / "dst" / "shard-000000.tar");
    EncodedSample s;
    Status st = src->read(0, &s);
    EXPECT_EQ(st.code(), StatusCode::kNotFound);
    EXPECT_NE(st.message().find("shard-000000.tar:class0/img_000: shard"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("is missing"), std::string::npos) << st.message();
    const auto last = src->size() - 1;
    const std::string name = src->index().shards.back().name;
    stdfs::resize_file(root_ / "dst" / name, 1024);
    st = src->read(last, &s);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss);
    EXPECT_NE(st.message().find("is 1024 bytes, index.json says"), std::string::npos) << st.message();

    auto none = ShardSource::open(std::make_shared<LocalStore>((root_ / "src").string()));
    EXPECT_NE(none.status().message().find("index.json does not exist"), std::string::npos) << none.status().message();
}

// ---- index.json validation (data-driven) -----------------------------------------------------

TEST(ShardIndex, EveryBadFieldIsNamed) {
    const nlohmann::json good = {{"format", "strato-shards"},
                                 {"version", 1},
                                 {"classes", {"a", "b"}},
                                 {"samples", 2},
                                 {"shards",
                                  {{{"name", "shard-000000.tar"},
                                    {"bytes", 4096},
                                    {"sha256", std::string(64, 'a')},
                                    {"samples", 2},
                                    {"keys", {"a/x", "b/y"}},
                                    {"offsets", {512, 2048}},
                                    {"sizes", {1000, 1000}},
                                    {"labels", {0, 1}}}}}};
    ASSERT_TRUE(parse_shard_index(good.dump(), "i.json").is_ok());
    struct Case {
        std::string pointer;
        nlohmann::json value;  // null = remove the field
        std::string expected;
    };
    const std::vector<Case> cases = {
        {"/format", "webdataset", "i.json: format: expected \"strato-shards\""},
        {"/version", 2, "version 2 is not supported"},
        {"/version", nullptr, "version: expected an integer"},
        {"/classes", nlohmann::json::array(), "classes: expected a non-empty array"},
        {"/classes/1", 3, "classes[1]: expected a string"},
        {"/samples", 3, "samples: expected 2 (the samples listed in shards), got 3"},
        {"/shards", "x", "shards: expected an array"},
        {"/shards/0/name", "../etc/passwd", "shards[0].name: expected a file name without directories"},
        {"/shards/0/bytes", -1, "shards[0].bytes: expected an integer >= 1024"},
        {"/shards/0/sha256", "abc", "shards[0].sha256: expected 64 lowercase hex digits"},
        {"/shards/0/keys/1", "", "shards[0].keys[1]: expected a non-empty string"},
        {"/shards/0/offsets", {512}, "shards[0].offsets: expected 2 entries"},
        {"/shards/0/offsets/1", 2000, "shards[0].offsets[1]: expected a multiple of 512 in [512, 4096]"},
        {"/shards/0/sizes/1", 5000, "shards[0].sizes[1]: expected an integer in [0, 2048]"},
        {"/shards/0/labels/0", 2, "shards[0].labels[0]: expected a class index in [0, 1], got 2"},
        {"/shards/0/labels", nullptr, "shards[0].labels: expected an array"},
        {"/shards/0/samples", 5, "shards[0].samples: expected 2"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = good;
        const nlohmann::json::json_pointer ptr(c.pointer);
        if (c.value.is_null())
            j[ptr.parent_pointer()].erase(ptr.back());
        else
            j[ptr] = c.value;
        auto r = parse_shard_index(j.dump(), "i.json");
        ASSERT_FALSE(r.is_ok()) << c.pointer;
        EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
        EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
            << c.pointer << ": " << r.status().message();
    }
    nlohmann::json twice = good;
    twice["shards"].push_back(good["shards"][0]);
    twice["samples"] = 4;
    auto dup = parse_shard_index(twice.dump(), "i.json");
    EXPECT_NE(dup.status().message().find("shards[1].name: expected a name no other shard has"), std::string::npos)
        << dup.status().message();
    nlohmann::json same = good;
    same["classes"] = {"a", "a"};
    auto two = parse_shard_index(same.dump(), "i.json");
    EXPECT_NE(two.status().message().find("classes[1]: expected a name no other class has ('a' is also classes[0])"),
              std::string::npos)
        << two.status().message();
    auto not_json = parse_shard_index("{\"format\": ", "i.json");
    EXPECT_NE(not_json.status().message().find("i.json: not valid JSON"), std::string::npos);
    // A number JSON cannot hold is nlohmann's out_of_range, not its parse_error (found by the
    // inputs fuzzer): still an error, not a crash.
    auto overflow = parse_shard_index("{\"format\": \"strato-shards\", \"samples\": 1e99999}", "i.json");
    EXPECT_NE(overflow.status().message().find("i.json: not valid JSON"), std::string::npos) << overflow.status().message();
    // 100,000 nested arrays: measured before parsing, refused with where they get too deep.
    auto deep = parse_shard_index(std::string(100000, '['), "i.json");
    EXPECT_NE(deep.status().message().find("i.json: nested deeper than 64 levels at byte 64"), std::string::npos)
        << deep.status().message();
}

// ---- stats, manifests, verify ----------------------------------------------------------------

using Stats = TempDir;

TEST_F(Stats, CountsBalanceSizesFormatsAndUnreadableFiles) {
    put(root_ / "d" / "train" / "cat" / "1.jpg", jpeg(20, 10, 1));
    put(root_ / "d" / "train" / "cat" / "2.jpg", jpeg(30, 12, 2));
    put(root_ / "d" / "train" / "cat" / "3.png", png(40, 14, 3));
    put(root_ / "d" / "train" / "cat" / "4.jpg", "not a jpeg");
    put(root_ / "d" / "train" / "dog" / "1.png", png(50, 16, 4));
    put(root_ / "d" / "train" / "dog" / "notes.txt", "ignored");
    put(root_ / "d" / "test" / "dog" / "1.jpg", jpeg(8, 8, 5));
    auto st = dataset_stats((root_ / "d").string(), {.hash = true});
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    EXPECT_EQ(st->kind, "image-folder");
    ASSERT_EQ(st->splits.size(), 2u);
    const SplitStats& train = st->splits[0];
    EXPECT_EQ(train.name, "train");
    EXPECT_EQ(train.samples, 5);
    EXPECT_EQ(train.class_counts, (std::vector<int64_t>{4, 1}));
    EXPECT_DOUBLE_EQ(train.balance, 0.25);
    EXPECT_EQ(train.width_min, 20);
    EXPECT_EQ(train.width_median, 40);  // of 20, 30, 40, 50
    EXPECT_EQ(train.width_max, 50);
    EXPECT_EQ(train.height_max, 16);
    EXPECT_EQ(train.formats.at("jpeg"), 2);
    EXPECT_EQ(train.formats.at("png"), 2);
    EXPECT_EQ(train.unreadable, 1);
    ASSERT_EQ(train.unreadable_examples.size(), 1u);
    EXPECT_NE(train.unreadable_examples[0].find("train/cat/4.jpg"), std::string::npos) << train.unreadable_examples[0];
    const SplitStats& test = st->splits[1];
    EXPECT_EQ(test.class_counts, (std::vector<int64_t>{0, 1}));  // the training classes
    EXPECT_EQ(test.balance, 0.0);
    ASSERT_TRUE(st->manifest.has_value());
    EXPECT_EQ(st->manifest->sha256.size(), 6u);
    EXPECT_EQ(st->manifest->sha256.at("train/cat/1.jpg"), fs::sha256_hex(jpeg(20, 10, 1)));
    // The documented recipe: sha256sum lines sorted by path.
    std::string lines;
    for (const auto& [p, h] : st->manifest->sha256) lines += h + "  " + p + "\n";
    EXPECT_EQ(st->manifest->dataset_hash, fs::sha256_hex(lines));
    const auto j = stats_to_json(*st);
    EXPECT_EQ(j["splits"][0]["classes"][0]["count"], 4);
    EXPECT_EQ(j["dataset_hash"], st->manifest->dataset_hash);
    EXPECT_NE(format_stats(*st).find("train: 5 samples, 2 classes, balance 0.25"), std::string::npos)
        << format_stats(*st);
    EXPECT_NE(format_stats(*st).find("    classes: cat 4, dog 1\n"), std::string::npos) << format_stats(*st);

    // The same dataset packed: the same counts, read from the shards.
    stdfs::remove(root_ / "d" / "train" / "cat" / "4.jpg");
    pack_image_folder((root_ / "d").string(), (root_ / "packed").string(), {}).value();
    auto ps = dataset_stats((root_ / "packed").string()).value();
    EXPECT_EQ(ps.kind, "shards");
    EXPECT_EQ(ps.splits[0].class_counts, (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(ps.splits[0].width_median, 40);
    EXPECT_EQ(ps.splits[0].unreadable, 0);
    EXPECT_EQ(ps.splits[0].shards, 1);
}

// Found by review: a sparse 15 TB ".jpg" aborted stats/verify/pack (the read reserved its size
// in a worker thread); a symbolic link back up the tree listed images twice under the wrong class.
TEST_F(Stats, HugeFilesAreUnreadableSamplesAndLinkLoopsAreErrors) {
    put(root_ / "d" / "train" / "cat" / "1.jpg", jpeg(20, 10, 1));
    put(root_ / "d" / "train" / "dog" / "1.png", png(50, 16, 4));
    put(root_ / "d" / "train" / "dog" / "huge.jpg", "");
    ASSERT_EQ(::truncate((root_ / "d" / "train" / "dog" / "huge.jpg").c_str(), int64_t{15} << 40), 0);
    auto st = dataset_stats((root_ / "d").string());
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    EXPECT_EQ(st->splits[0].unreadable, 1);
    // A manifest would leave it out, so none is made.
    auto hashed = dataset_stats((root_ / "d").string(), {.hash = true});
    ASSERT_FALSE(hashed.is_ok());
    EXPECT_NE(hashed.status().message().find("1 file(s) could not be read (first: train/dog/huge.jpg"), std::string::npos)
        << hashed.status().message();
    ASSERT_EQ(st->splits[0].unreadable_examples.size(), 1u);
    EXPECT_NE(st->splits[0].unreadable_examples[0].find("huge.jpg is larger than 512 MiB"), std::string::npos)
        << st->splits[0].unreadable_examples[0];
    auto packed = pack_image_folder((root_ / "d").string(), (root_ / "packed").string(), {});
    ASSERT_FALSE(packed.is_ok());
    EXPECT_NE(packed.status().message().find("huge.jpg is larger than 512 MiB"), std::string::npos)
        << packed.status().message();
    stdfs::remove(root_ / "d" / "train" / "dog" / "huge.jpg");

    // A link to a folder elsewhere is followed, and its images keep the path they were found at.
    put(root_ / "elsewhere" / "2.jpg", jpeg(22, 10, 2));
    stdfs::create_directory_symlink(root_ / "elsewhere", root_ / "d" / "train" / "cat" / "more");
    auto linked = index_image_folder((root_ / "d" / "train").string());
    ASSERT_TRUE(linked.is_ok()) << linked.status().message();
    ASSERT_EQ(linked->files.size(), 3u);
    EXPECT_EQ(linked->files[1].path, "cat/more/2.jpg");
    // A link back up the tree would list dog's images again under cat.
    stdfs::create_directory_symlink("../..", root_ / "d" / "train" / "cat" / "loop");
    auto loop = index_image_folder((root_ / "d" / "train").string());
    ASSERT_FALSE(loop.is_ok());
    EXPECT_NE(loop.status().message().find("(a symbolic link loop, or a link into another class)"), std::string::npos)
        << loop.status().message();
    EXPECT_FALSE(dataset_stats((root_ / "d").string()).is_ok());
    stdfs::remove(root_ / "d" / "train" / "cat" / "loop");

    // A link to an image that is not there was left out silently (the split one image smaller);
    // it is an error naming the link and where it points (found by review).
    stdfs::create_symlink(root_ / "gone" / "3.jpg", root_ / "d" / "train" / "dog" / "3.jpg");
    auto dangling = index_image_folder((root_ / "d" / "train").string());
    ASSERT_FALSE(dangling.is_ok());
    EXPECT_EQ(dangling.status().code(), StatusCode::kNotFound);
    EXPECT_NE(dangling.status().message().find("dog/3.jpg is a symbolic link to " + (root_ / "gone" / "3.jpg").string() +
                                               ", which does not exist"),
              std::string::npos)
        << dangling.status().message();
    // A link to a file that is there is an image like any other.
    put(root_ / "gone" / "3.jpg", jpeg(20, 10, 3));
    auto restored = index_image_folder((root_ / "d" / "train").string());
    ASSERT_TRUE(restored.is_ok()) << restored.status().message();
    EXPECT_EQ(restored->files.size(), 4u);
}

TEST_F(Stats, ManifestFindsChangedMissingAndExtraFiles) {
    make_folder(root_ / "d", 2, 3);
    auto st = dataset_stats((root_ / "d").string(), {.hash = true}).value();
    ASSERT_TRUE(write_manifest((root_ / "m.json").string(), *st.manifest).is_ok());
    auto m = read_manifest((root_ / "m.json").string());
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_EQ(m->dataset_hash, st.manifest->dataset_hash);
    EXPECT_TRUE(verify_dataset((root_ / "d").string(), {.manifest = &*m}).value().ok());

    std::string changed = get(root_ / "d" / "class0/img.000.jpg");
    changed[changed.size() - 10] ^= 0x55;  // in the entropy-coded data: the header still reads
    put(root_ / "d" / "class0/img.000.jpg", changed);
    stdfs::remove(root_ / "d" / "class1/img.001.JPEG");
    put(root_ / "d" / "class1/new.png", png(5, 5, 99));
    auto r = verify_dataset((root_ / "d").string(), {.manifest = &*m}).value();
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.count("changed"), 1);
    EXPECT_EQ(r.count("missing"), 1);
    EXPECT_EQ(r.count("extra"), 1);
    std::map<std::string, std::string> by_path;
    for (const auto& p : r.problems) by_path[p.path] = p.kind;
    EXPECT_EQ(by_path["class0/img.000.jpg"], "changed");
    EXPECT_EQ(by_path["class1/img.001.JPEG"], "missing");
    EXPECT_EQ(by_path["class1/new.png"], "extra");
    EXPECT_NE(r.dataset_hash, m->dataset_hash);
    EXPECT_EQ(verify_to_json(r)["changed"], 1);

    // A tampered manifest is refused.
    std::string text = get(root_ / "m.json");
    text.replace(text.find("img.002"), 7, "img.009");
    put(root_ / "m2.json", text);
    auto bad = read_manifest((root_ / "m2.json").string());
    EXPECT_NE(bad.status().message().find("does not match its files"), std::string::npos) << bad.status().message();
    put(root_ / "m3.json", "{\"format\": \"other\"}");
    EXPECT_NE(
        read_manifest((root_ / "m3.json").string()).status().message().find("format: expected \"strato-manifest\""),
        std::string::npos);
    put(root_ / "m4.json", "{\"format\": \"strato-manifest\", \"bytes\": 345e516}");
    EXPECT_NE(read_manifest((root_ / "m4.json").string()).status().message().find("not valid JSON"), std::string::npos);
    put(root_ / "m5.json", "{\"files\": " + std::string(100000, '['));
    EXPECT_NE(read_manifest((root_ / "m5.json").string()).status().message().find("nested deeper than 64 levels"),
              std::string::npos);
    // Found by review: a sha256 of 64 'z's, a size of -5 and a path listed twice were taken in.
    const std::string z(64, 'z'), h(64, 'a');
    for (const auto& [files, expected] : std::vector<std::pair<std::string, std::string>>{
             {"[[\"a.png\", 5, \"" + z + "\"]]", "files[0][2]: expected a SHA-256 in 64 lowercase hex digits"},
             {"[[\"a.png\", -5, \"" + h + "\"]]", "files[0][1]: expected a size in bytes >= 0, got -5"},
             {"[[\"a.png\", 5, \"" + h + "\"], [\"a.png\", 6, \"" + h + "\"]]", "files[1][0]: expected each path once"}}) {
        put(root_ / "m6.json", "{\"format\": \"strato-manifest\", \"version\": 1, \"kind\": \"image-folder\", \"files\": " +
                                   files + "}");
        auto r6 = read_manifest((root_ / "m6.json").string());
        ASSERT_FALSE(r6.is_ok()) << files;
        EXPECT_NE(r6.status().message().find(expected), std::string::npos) << r6.status().message();
    }
}

TEST_F(Stats, FileNamesThatAreNotUtf8) {
    // Linux names are bytes: a Latin-1 "caf\xe9.jpg" and a stray 0xff. Packing sanitises a file's
    // key (the index is JSON) and the shards verify; a class folder's name, which labels the
    // model's outputs, is refused (it came out as U+FFFD, and "cl\xff" and "cl\xfe" as one class);
    // a manifest, which must give the name back byte for byte, refuses it naming the file.
    make_folder(root_ / "d", 2, 3);
    stdfs::rename(root_ / "d" / "class0/img.000.jpg", root_ / "d" / "class0/caf\xe9.jpg");
    auto packed = pack_image_folder((root_ / "d").string(), (root_ / "s").string(), {});
    ASSERT_TRUE(packed.is_ok()) << packed.status().message();
    auto src = ShardSource::open(std::make_shared<LocalStore>((root_ / "s").string())).value();
    EXPECT_EQ(src->size(), 6);
    const auto& keys = src->index().keys;
    EXPECT_NE(std::find(keys.begin(), keys.end(), "class0/caf_"), keys.end());
    EXPECT_TRUE(verify_dataset((root_ / "s").string(), {.decode = true}).value().ok());
    stdfs::create_directories(root_ / "d" / "cl\xffss");
    put(root_ / "d" / "cl\xffss" / "x.png", png(4, 4, 7));
    auto refused = pack_image_folder((root_ / "d").string(), (root_ / "s2").string(), {});
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("the class folder name \"cl\xef\xbf\xbdss\" is not UTF-8"),
              std::string::npos)
        << refused.status().message();

    auto st = dataset_stats((root_ / "d").string(), {.hash = true}).value();
    Status w = write_manifest((root_ / "m.json").string(), *st.manifest);
    EXPECT_NE(w.message().find("the file name \"class0/caf\xef\xbf\xbd.jpg\" is not UTF-8"), std::string::npos)
        << w.message();
    EXPECT_FALSE(stdfs::exists(root_ / "m.json"));
}

TEST_F(Stats, VerifyChecksShardsAndDecodesWhenAsked) {
    make_folder(root_ / "d", 2, 4);
    // A JPEG whose header is intact but whose data is cut short of its end-of-image marker: the
    // header probe passes, a decode fails. (Pack refuses a file that is only cut off, so this one
    // ends with the marker: damage that only a decode finds.)
    std::string cut = jpeg(64, 64, 42);
    put(root_ / "d" / "class0" / "cut.jpg", cut.substr(0, cut.size() / 3) + "\xff\xd9");
    PackOptions o;
    o.shard_size = 6 << 10;
    pack_image_folder((root_ / "d").string(), (root_ / "s").string(), o).value();
    auto quick = verify_dataset((root_ / "s").string()).value();
    EXPECT_TRUE(quick.ok()) << quick.problems[0].path << ": " << quick.problems[0].detail;
    auto full = verify_dataset((root_ / "s").string(), {.decode = true}).value();
    ASSERT_EQ(full.problems.size(), 1u);
    EXPECT_NE(full.problems[0].path.find(":class0/cut"), std::string::npos) << full.problems[0].path;
    EXPECT_EQ(full.problems[0].kind, "corrupt");

    // A flipped byte in a shard: its SHA-256 no longer matches index.json.
    std::string s0 = get(root_ / "s" / "shard-000001.tar");
    s0[s0.size() - 1500] ^= 1;
    put(root_ / "s" / "shard-000001.tar", s0);
    auto r = verify_dataset((root_ / "s").string()).value();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.problems[0].path, "shard-000001.tar");
    EXPECT_NE(r.problems[0].detail.find("differs from index.json"), std::string::npos) << r.problems[0].detail;
    // A missing shard.
    stdfs::remove(root_ / "s" / "shard-000000.tar");
    r = verify_dataset((root_ / "s").string()).value();
    EXPECT_EQ(r.count("missing"), 1);
}

// Found by review: verify without --decode read headers only, so a cut-off download passed it.
TEST_F(Stats, VerifyFindsCutOffImagesWithoutDecoding) {
    make_folder(root_ / "d", 2, 2);
    const std::string whole = jpeg(64, 64, 7), picture = png(30, 20, 8);
    put(root_ / "d" / "class0" / "cut.jpg", whole.substr(0, whole.size() * 2 / 3));
    put(root_ / "d" / "class1" / "cut.png", picture.substr(0, picture.size() - 16));
    auto r = verify_dataset((root_ / "d").string()).value();
    ASSERT_EQ(r.count("corrupt"), 2) << verify_to_json(r).dump();
    std::map<std::string, std::string> detail;
    for (const auto& p : r.problems) detail[p.path] = p.detail;
    EXPECT_EQ(detail["class0/cut.jpg"].rfind("truncated JPEG (", 0), 0u) << detail["class0/cut.jpg"];
    EXPECT_EQ(detail["class1/cut.png"].rfind("truncated PNG (", 0), 0u) << detail["class1/cut.png"];
    auto st = dataset_stats((root_ / "d").string()).value();
    EXPECT_EQ(st.splits[0].unreadable, 2);
}

// ---- found by the hostile review of the data subsystem -----------------------------------------

// `data stats --manifest FILE` replaced any text file: another dataset's index.json, a CSV table.
TEST_F(Stats, AManifestReplacesOnlyAnEarlierManifest) {
    make_folder(root_ / "d", 2, 2);
    auto st = dataset_stats((root_ / "d").string(), {.hash = true}).value();
    pack_image_folder((root_ / "d").string(), (root_ / "s").string(), {}).value();
    const std::string index = get(root_ / "s" / "index.json");
    put(root_ / "table.csv", "a,b\n1,2\n");
    put(root_ / "config.json", "{\"train\": {\"epochs\": 3}}\n");
    const std::vector<std::pair<stdfs::path, std::string>> refused = {
        {root_ / "s" / "index.json", "is a shard index (format \"strato-shards\"), not a strato manifest"},
        {root_ / "table.csv", "is a text file that is not JSON (it starts \"a,b\"), not a strato manifest"},
        {root_ / "config.json", "is a JSON file without \"format\": \"strato-manifest\""},
    };
    for (const auto& [path, what] : refused) {
        const std::string before = get(path);
        Status w = write_manifest(path.string(), *st.manifest);
        EXPECT_NE(w.message().find(path.string() + ": the file exists and " + what), std::string::npos) << w.message();
        EXPECT_EQ(get(path), before);
        Status c = check_manifest_output(path.string(), (root_ / "d").string(), "--manifest");
        EXPECT_NE(c.message().find("--manifest " + path.string()), std::string::npos) << c.message();
    }
    EXPECT_EQ(get(root_ / "s" / "index.json"), index);
    // A new file, an empty one and an earlier manifest may be written.
    ASSERT_TRUE(write_manifest((root_ / "m.json").string(), *st.manifest).is_ok());
    EXPECT_TRUE(write_manifest((root_ / "m.json").string(), *st.manifest).is_ok());
    put(root_ / "empty.json", "");
    EXPECT_TRUE(write_manifest((root_ / "empty.json").string(), *st.manifest).is_ok());
    EXPECT_TRUE(check_manifest_output((root_ / "new.json").string(), (root_ / "d").string(), "--manifest").is_ok());
    // Inside the dataset, or no name at all.
    EXPECT_NE(check_manifest_output((root_ / "d" / "m.json").string(), (root_ / "d").string(), "--manifest")
                  .message()
                  .find("lies inside the dataset"),
              std::string::npos);
    EXPECT_NE(check_manifest_output("", "", "--manifest").message().find("--manifest: expected a file name"),
              std::string::npos);
}

// Renaming the source's test/ to val/ and packing again left DST/test (old samples), which stats
// listed and training evaluated on.
TEST_F(Pack, ARepackRemovesSplitsTheSourceNoLongerHas) {
    make_folder(root_ / "src" / "train", 2, 3);
    make_folder(root_ / "src" / "test", 2, 2);
    pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {}).value();
    ASSERT_TRUE(stdfs::exists(root_ / "dst" / "test" / "index.json"));
    stdfs::rename(root_ / "src" / "test", root_ / "src" / "val");
    auto again = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "test"));
    for (const auto& e : stdfs::directory_iterator(root_ / "dst"))
        EXPECT_EQ(e.path().filename().string().rfind(".stale-", 0), std::string::npos) << e.path();
    auto st = dataset_stats((root_ / "dst").string());
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    ASSERT_EQ(st->splits.size(), 2u);
    EXPECT_EQ(st->splits[0].name, "train");
    EXPECT_EQ(st->splits[1].name, "val");
    EXPECT_TRUE(verify_dataset((root_ / "dst").string()).value().ok());

    // A stale split holding something no pack writes is refused before anything changes.
    stdfs::rename(root_ / "src" / "val", root_ / "src" / "test");
    put(root_ / "dst" / "val" / "notes.txt", "mine");
    const std::string val_index = get(root_ / "dst" / "val" / "index.json");
    auto refused = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("val/ is a split of an earlier pack that " + (root_ / "src").string() +
                                              " no longer has, and holds notes.txt"),
              std::string::npos)
        << refused.status().message();
    EXPECT_EQ(get(root_ / "dst" / "val" / "index.json"), val_index);
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "test"));
}

// The dataset hash hashed names unescaped: a folder named "p\n<sha>  q" made two datasets one.
TEST_F(Stats, DatasetHashEscapesNamesAsSha256sumDoes) {
    const std::string h1(64, '1'), h2(64, '2');
    const std::map<std::string, std::string> two = {{"p", h1}, {"q", h2}};
    const std::map<std::string, std::string> one = {{"p\n" + h2 + "  q", h1}};
    EXPECT_NE(dataset_hash(one), dataset_hash(two));
    // Ordinary names: unchanged, sha256sum's lines.
    EXPECT_EQ(dataset_hash(two), fs::sha256_hex(h1 + "  p\n" + h2 + "  q\n"));
    // '\\', '\n' and '\r' in a name: a leading '\\' and escapes, as sha256sum prints them.
    EXPECT_EQ(dataset_hash({{"a\\b\nc\rd", h1}, {"e", h2}}),
              fs::sha256_hex("\\" + h1 + "  a\\\\b\\nc\\rd\n" + h2 + "  e\n"));

    // On disk: a class folder with a newline in its name, through a manifest and back.
    make_folder(root_ / "d", 2, 1);
    stdfs::rename(root_ / "d" / "class1", root_ / "d" / "class\n1");
    auto st = dataset_stats((root_ / "d").string(), {.hash = true});
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    ASSERT_TRUE(write_manifest((root_ / "m.json").string(), *st->manifest).is_ok());
    auto m = read_manifest((root_ / "m.json").string());
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_EQ(m->dataset_hash, st->manifest->dataset_hash);
    EXPECT_TRUE(verify_dataset((root_ / "d").string(), {.manifest = &*m}).value().ok());
}

// Found by review: `data stats --manifest` killed while it wrote left FILE.tmp.<pid>.<n> beside
// the manifest, and no later write removed it.
TEST_F(Stats, AKilledManifestWritesTempFileGoesWithTheNextWrite) {
    make_folder(root_ / "d", 2, 2);
    auto st = dataset_stats((root_ / "d").string(), {.hash = true});
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    const stdfs::path temp = root_ / "m.json.tmp.99999999.0";  // no such process
    put(temp, "{\"format\": \"strato-dataset-manif");
    ASSERT_TRUE(write_manifest((root_ / "m.json").string(), *st->manifest).is_ok());
    EXPECT_FALSE(stdfs::exists(temp));
    EXPECT_TRUE(read_manifest((root_ / "m.json").string()).is_ok());
}

nlohmann::json edit_index(const stdfs::path& p, const std::function<void(nlohmann::json&)>& f) {
    auto j = nlohmann::json::parse(get(p));
    f(j);
    put(p, j.dump());
    return j;
}

// An index.json that dropped a sample (the shard still holds it) or listed one twice verified ok.
TEST_F(Stats, VerifyFindsMembersTheIndexLeavesOutOrListsTwice) {
    make_folder(root_ / "d", 2, 3);
    pack_image_folder((root_ / "d").string(), (root_ / "s").string(), {}).value();
    const stdfs::path index = root_ / "s" / "index.json";
    const std::string good = get(index);
    ASSERT_TRUE(verify_dataset((root_ / "s").string()).value().ok());
    std::string dropped_key;
    edit_index(index, [&](nlohmann::json& j) {
        auto& sh = j["shards"][0];
        dropped_key = sh["keys"][2];
        for (const char* k : {"keys", "offsets", "sizes", "labels"}) sh[k].erase(2);
        sh["samples"] = sh["samples"].get<int64_t>() - 1;
        j["samples"] = j["samples"].get<int64_t>() - 1;
    });
    auto r = verify_dataset((root_ / "s").string()).value();
    ASSERT_EQ(r.problems.size(), 1u);
    EXPECT_EQ(r.problems[0].kind, "corrupt");
    EXPECT_EQ(r.problems[0].path.rfind("shard-000000.tar:" + dropped_key + ".", 0), 0u) << r.problems[0].path;
    EXPECT_NE(r.problems[0].detail.find("that index.json does not list"), std::string::npos) << r.problems[0].detail;
    EXPECT_NE(r.problems[0].detail.find("with its '" + dropped_key + ".cls'"), std::string::npos)
        << r.problems[0].detail;

    put(index, good);
    edit_index(index, [&](nlohmann::json& j) {
        auto& sh = j["shards"][0];
        for (const char* k : {"keys", "offsets", "sizes", "labels"}) sh[k][1] = sh[k][0];
    });
    r = verify_dataset((root_ / "s").string()).value();
    std::map<std::string, int> details;
    for (const auto& p : r.problems)
        details[p.detail.find("lists it twice") != std::string::npos ? "twice" : "left out"]++;
    EXPECT_EQ(details["twice"], 1) << (r.problems.empty() ? "" : r.problems[0].detail);
    EXPECT_EQ(details["left out"], 1);  // the sample whose place the copy took

    // A sample whose .cls holds another label is one problem, not also an "unlisted" .cls (found
    // by the review of the change).
    put(index, good);
    edit_index(index, [&](nlohmann::json& j) {
        auto& labels = j["shards"][0]["labels"];
        labels[0] = labels[0].get<int64_t>() == 0 ? 1 : 0;
    });
    r = verify_dataset((root_ / "s").string()).value();
    ASSERT_EQ(r.problems.size(), 1u) << r.problems[r.problems.size() - 1].detail;
    EXPECT_NE(r.problems[0].detail.find(".cls' holding"), std::string::npos) << r.problems[0].detail;
}

// A pack without splits killed before its index.json: stats/verify called the folder an image
// folder without classes; its journal's temp files stayed for good.
TEST_F(Pack, AKilledPackWithoutSplitsSaysSoAndItsTempFilesGo) {
    make_folder(root_ / "src", 2, 3);
    pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {}).value();
    const std::string index = get(root_ / "dst" / "index.json");
    stdfs::remove(root_ / "dst" / "index.json");
    put(root_ / "dst" / ".pack-journal.json.tmp.4242.0", "{\"half");
    put(root_ / "dst" / "index.json.tmp.4242.1", "{\"half");
    for (bool verify : {false, true}) {
        Status st = verify ? verify_dataset((root_ / "dst").string()).status()
                           : dataset_stats((root_ / "dst").string()).status();
        EXPECT_NE(st.message().find(".pack-journal.json and no index.json: a `strato data pack` that did not finish "
                                    "(run it again"),
                  std::string::npos)
            << st.message();
    }
    // The same for a split pack killed in its first split.
    make_folder(root_ / "src2" / "train", 2, 2);
    make_folder(root_ / "src2" / "test", 2, 1);
    pack_image_folder((root_ / "src2").string(), (root_ / "dst2").string(), {}).value();
    stdfs::remove_all(root_ / "dst2" / "test");
    stdfs::remove(root_ / "dst2" / "train" / "index.json");
    EXPECT_NE(dataset_stats((root_ / "dst2").string()).status().message().find("train/.pack-journal.json and no"),
              std::string::npos);

    auto again = pack_image_folder((root_ / "src").string(), (root_ / "dst").string(), {});
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ(get(root_ / "dst" / "index.json"), index);
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / ".pack-journal.json.tmp.4242.0"));
    EXPECT_FALSE(stdfs::exists(root_ / "dst" / "index.json.tmp.4242.1"));
    EXPECT_TRUE(verify_dataset((root_ / "dst").string()).value().ok());
}

/// The entropy-coded data of a baseline JPEG: [start, end) between the SOS header and EOI.
std::pair<size_t, size_t> scan_data(const std::string& j) {
    const size_t sos = j.find("\xFF\xDA");
    EXPECT_NE(sos, std::string::npos);
    const size_t len = (static_cast<uint8_t>(j[sos + 2]) << 8) | static_cast<uint8_t>(j[sos + 3]);
    return {sos + 2 + len, j.size() - 2};
}

// `verify --decode` passed JPEGs whose data libjpeg only warned about (and filled with grey).
TEST_F(Stats, VerifyDecodeRefusesJpegsLibjpegOnlyWarnsAbout) {
    const std::string good = jpeg(64, 64, 3);
    const auto [begin, end] = scan_data(good);
    ASSERT_GT(end - begin, 200u);
    std::map<std::string, std::string> bad;
    // Cut in the middle, EOI after: "premature end of data segment".
    bad["cut"] = good.substr(0, begin + (end - begin) / 2) + "\xFF\xD9";
    // Sixteen one bits and more: no Huffman code is that ("bad Huffman code").
    std::string huff = good;
    for (size_t i = begin + (end - begin) / 3; i < begin + (end - begin) / 3 + 40; i += 2)
        huff.replace(i, 2, "\xFF\x00", 2);
    bad["huffman"] = huff;
    // Bytes after the last MCU, before EOI: "extraneous bytes before marker" (no pixel lost: not
    // corrupt, found by the review of the change; cameras write such files).
    const std::string extraneous = good.substr(0, end) + std::string(8, '\x01') + "\xFF\xD9";
    // The header claims 1024x1024 over a 37x37 scan.
    std::string big = jpeg(37, 37, 4);
    const size_t sof = big.find("\xFF\xC0");
    ASSERT_NE(sof, std::string::npos);
    big.replace(sof + 5, 4, std::string("\x04\x00\x04\x00", 4));
    bad["header"] = big;

    put(root_ / "d" / "a" / "good.jpg", good);
    for (const auto& [name, bytes] : bad) {
        put(root_ / "d" / "a" / (name + ".jpg"), bytes);
        // Training's decode keeps tolerating the warnings (as other readers do).
        EXPECT_TRUE(decode_image(bytes, name).is_ok()) << name;
        DecodeRequest strict;
        strict.strict = true;
        auto d = decode_image(bytes, name, strict);
        EXPECT_FALSE(d.is_ok()) << name;
        EXPECT_NE(d.status().message().find("Corrupt JPEG data"), std::string::npos) << name << ": "
                                                                                      << d.status().message();
    }
    DecodeRequest strict;
    strict.strict = true;
    EXPECT_TRUE(decode_image(good, "good", strict).is_ok());
    put(root_ / "d" / "a" / "extraneous.jpg", extraneous);
    EXPECT_TRUE(decode_image(extraneous, "extraneous", strict).is_ok());
    auto r = verify_dataset((root_ / "d").string(), {.decode = true}).value();
    std::set<std::string> corrupt;
    for (const auto& p : r.problems) {
        EXPECT_EQ(p.kind, "corrupt") << p.path;
        corrupt.insert(p.path);
    }
    EXPECT_EQ(corrupt, (std::set<std::string>{"a/cut.jpg", "a/header.jpg", "a/huffman.jpg"}));
}

}  // namespace
}  // namespace strato::data
