// Decoding (codec.h), transforms (transforms.h) and image datasets through the loader.

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "strato/core/fs.h"
#include "strato/data/codec.h"
#include "strato/data/csv.h"
#include "strato/data/data_config.h"
#include "strato/data/image_folder.h"
#include "strato/data/shards.h"
#include "strato/data/loader.h"
#include "strato/data/transforms.h"

namespace strato::data {
namespace {
namespace stdfs = std::filesystem;

/// A smooth, asymmetric colour image: r grows with x, g with y, b with both.
Pixels gradient(int64_t w, int64_t h, int64_t c = 3) {
    Pixels p{h, w, c, std::vector<uint8_t>(static_cast<size_t>(w * h * c))};
    for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
            for (int64_t k = 0; k < c; ++k) {
                const int64_t v = k == 0 ? x * 255 / (w - 1) : k == 1 ? y * 255 / (h - 1) : (x + y) * 255 / (w + h - 2);
                p.row(y)[x * c + k] = static_cast<uint8_t>(v);
            }
    return p;
}

std::string jpeg_of(const Pixels& p, int quality = 95, int subsamp = TJSAMP_444) {
    tjhandle tj = tjInitCompress();
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    const int pf = p.channels == 1 ? TJPF_GRAY : p.channels == 4 ? TJPF_CMYK : TJPF_RGB;
    if (p.channels == 1) subsamp = TJSAMP_GRAY;
    int rc = tjCompress2(tj, p.data.data(), static_cast<int>(p.width), 0, static_cast<int>(p.height), pf, &buf, &size,
                         subsamp, quality, 0);
    EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
    std::string out(reinterpret_cast<char*>(buf), size);
    tjFree(buf);
    tjDestroy(tj);
    return out;
}

/// Inserts an APP1 Exif segment with orientation `o` after the SOI marker.
std::string with_orientation(const std::string& jpeg, int o) {
    std::string tiff = std::string("II*\0", 4) + std::string("\x08\0\0\0", 4);  // little endian, IFD0 at 8
    tiff += std::string("\x01\0", 2);                                           // one entry
    tiff += std::string("\x12\x01\x03\0\x01\0\0\0", 8) + static_cast<char>(o) + std::string("\0\0\0", 3);
    tiff += std::string("\0\0\0\0", 4);  // no next IFD
    const std::string payload = std::string("Exif\0\0", 6) + tiff;
    const size_t len = payload.size() + 2;
    std::string seg = std::string("\xFF\xE1", 2) + static_cast<char>(len >> 8) + static_cast<char>(len & 255) + payload;
    return jpeg.substr(0, 2) + seg + jpeg.substr(2);
}

double max_abs_diff(const Pixels& a, const Pixels& b) {
    EXPECT_EQ(a.width, b.width);
    EXPECT_EQ(a.height, b.height);
    EXPECT_EQ(a.channels, b.channels);
    if (a.data.size() != b.data.size()) return 1e9;
    int m = 0;
    for (size_t i = 0; i < a.data.size(); ++i) m = std::max(m, std::abs(int(a.data[i]) - int(b.data[i])));
    return m;
}

Pixels crop(const Pixels& p, int64_t x, int64_t y, int64_t w, int64_t h) {
    Pixels o{h, w, p.channels, std::vector<uint8_t>(static_cast<size_t>(w * h * p.channels))};
    for (int64_t r = 0; r < h; ++r)
        std::memcpy(o.row(r), p.row(y + r) + x * p.channels, static_cast<size_t>(w * p.channels));
    return o;
}

TEST(Codec, RegionDecodeEqualsCropOfFullDecode) {
    const std::string jpg = jpeg_of(gradient(160, 120), 95, TJSAMP_420);
    for (bool fast : {false, true}) {
        DecodeRequest full;
        full.fast = fast;
        auto all = decode_image(jpg, "g.jpg", full);
        ASSERT_TRUE(all.is_ok()) << all.status().message();
        DecodeRequest r = full;
        r.x = 37, r.y = 21, r.w = 50, r.h = 61;
        auto part = decode_image(jpg, "g.jpg", r);
        ASSERT_TRUE(part.is_ok()) << part.status().message();
        EXPECT_EQ(part->scale, 1.0);
        // Skipped rows and cropped columns decode as in a full decode (up to upsampling at
        // the region's edge).
        EXPECT_LE(max_abs_diff(part->pixels, crop(all->pixels, 37, 21, 50, 61)), 3) << "fast=" << fast;
    }
}

TEST(Codec, DctScalingDecodesJustBigEnough) {
    const std::string jpg = jpeg_of(gradient(400, 320));
    DecodeRequest r;
    r.min_w = 100, r.min_h = 80;  // a quarter suffices
    auto d = decode_image(jpg, "g.jpg", r);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(d->scale, 2 / 8.0);
    EXPECT_EQ(d->pixels.width, 100);
    EXPECT_EQ(d->pixels.height, 80);
    r.min_w = 101;  // one more pixel needs 3/8
    d = decode_image(jpg, "g.jpg", r);
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(d->scale, 3 / 8.0);
    EXPECT_EQ(d->pixels.width, 150);
    // The scaled image still looks like the gradient: left dark red, right bright red.
    EXPECT_LT(d->pixels.row(60)[0], 20);
    EXPECT_GT(d->pixels.row(60)[149 * 3], 235);
}

TEST(Codec, GrayAndColourConvertBothWays) {
    auto gray_jpg = jpeg_of(gradient(64, 48, 1));
    DecodeRequest rgb;
    auto d = decode_image(gray_jpg, "gray.jpg", rgb);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(d->pixels.channels, 3);
    EXPECT_EQ(d->pixels.row(10)[30 * 3], d->pixels.row(10)[30 * 3 + 2]);
    DecodeRequest g1;
    g1.channels = 1;
    d = decode_image(jpeg_of(gradient(64, 48)), "rgb.jpg", g1);
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(d->pixels.channels, 1);
}

TEST(Codec, CmykJpegComesOutRgb) {
    // TurboJPEG writes CMYK as an Adobe YCCK file storing inverted values; pure cyan (C=255
    // in a "normal" sense) is stored as c=0 (inverted), k=255 (no black).
    Pixels cmyk{16, 16, 4, std::vector<uint8_t>(16 * 16 * 4)};
    for (size_t i = 0; i < cmyk.data.size(); i += 4) cmyk.data[i] = 0, cmyk.data[i + 1] = 255, cmyk.data[i + 2] = 255, cmyk.data[i + 3] = 255;
    auto info = probe_image(jpeg_of(cmyk), "c.jpg");
    ASSERT_TRUE(info.is_ok()) << info.status().message();
    EXPECT_EQ(info->channels, 4);
    auto d = decode_image(jpeg_of(cmyk), "c.jpg");
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    const uint8_t* px = d->pixels.row(8) + 8 * 3;
    EXPECT_LT(px[0], 20);   // no red
    EXPECT_GT(px[1], 235);  // green and blue: cyan
    EXPECT_GT(px[2], 235);
}

TEST(Codec, ExifOrientationIsApplied) {
    const Pixels src = gradient(60, 40);  // stored 60 wide, 40 high
    const std::string base = jpeg_of(src);
    DecodeRequest accurate;
    accurate.fast = false;
    const Pixels stored = decode_image(base, "s.jpg", accurate)->pixels;
    for (int o = 1; o <= 8; ++o) {
        const std::string jpg = with_orientation(base, o);
        auto info = probe_image(jpg, "o.jpg");
        ASSERT_TRUE(info.is_ok());
        EXPECT_EQ(info->orientation, o);
        EXPECT_EQ(info->width, o >= 5 ? 40 : 60) << o;
        auto d = decode_image(jpg, "o.jpg", accurate);
        ASSERT_TRUE(d.is_ok()) << d.status().message();
        const Pixels& u = d->pixels;
        ASSERT_EQ(u.width, o >= 5 ? 40 : 60);
        // Upright (u, v) shows stored pixel (x, y) per the EXIF definitions.
        for (auto [uu, vv] : {std::pair<int64_t, int64_t>{0, 0}, {5, 7}, {u.width - 1, u.height - 1}, {u.width - 3, 2}}) {
            int64_t x = uu, y = vv;
            const int64_t w = 60, h = 40;
            switch (o) {
                case 2: x = w - 1 - uu; break;
                case 3: x = w - 1 - uu, y = h - 1 - vv; break;
                case 4: y = h - 1 - vv; break;
                case 5: x = vv, y = uu; break;
                case 6: x = vv, y = h - 1 - uu; break;
                case 7: x = w - 1 - vv, y = h - 1 - uu; break;
                case 8: x = w - 1 - vv, y = uu; break;
                default: break;
            }
            for (int k = 0; k < 3; ++k) EXPECT_EQ(u.row(vv)[uu * 3 + k], stored.row(y)[x * 3 + k]) << "orientation " << o;
        }
        // A region of the upright image is the same pixels as that region of the full decode.
        DecodeRequest r = accurate;
        r.x = 3, r.y = 5, r.w = 20, r.h = 17;
        auto part = decode_image(jpg, "o.jpg", r);
        ASSERT_TRUE(part.is_ok()) << part.status().message();
        EXPECT_LE(max_abs_diff(part->pixels, crop(u, 3, 5, 20, 17)), 3) << "orientation " << o;
    }
}

TEST(Codec, BadInputIsAClearErrorNeverACrash) {
    const std::string jpg = jpeg_of(gradient(64, 64));
    auto truncated = decode_image(jpg.substr(0, jpg.size() / 2), "cut.jpg");
    ASSERT_FALSE(truncated.is_ok());
    EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(truncated.status().message().find("cut.jpg"), std::string::npos);
    auto text = decode_image("hello, world", "notes.jpg");
    ASSERT_FALSE(text.is_ok());
    EXPECT_NE(text.status().message().find("unknown image format"), std::string::npos);
    EXPECT_FALSE(decode_image("", "empty.jpg").is_ok());
    EXPECT_FALSE(decode_image(jpg.substr(0, 20), "header.jpg").is_ok());
    std::string flipped = jpg;
    for (size_t i = 200; i < flipped.size() - 2; i += 7) flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    auto garbled = decode_image(flipped, "garbled.jpg");  // may decode to noise or fail; must not crash
    (void)garbled;
    DecodeRequest outside;
    outside.x = 50, outside.y = 0, outside.w = 20, outside.h = 10;
    EXPECT_FALSE(decode_image(jpg, "g.jpg", outside).is_ok());
    DecodeRequest four;
    four.channels = 4;
    EXPECT_FALSE(decode_image(jpg, "g.jpg", four).is_ok());
}

TEST(Resize, ConstantStaysConstantAndShrinkingAverages) {
    Pixels flat{30, 40, 3, std::vector<uint8_t>(30 * 40 * 3, 77)};
    Pixels out;
    resize(flat, 97, 13, &out);
    for (uint8_t v : out.data) ASSERT_EQ(v, 77);
    // A 1-pixel checkerboard shrunk 4x averages to mid-grey (antialiasing), not to aliasing stripes.
    Pixels board{64, 64, 1, std::vector<uint8_t>(64 * 64)};
    for (int64_t y = 0; y < 64; ++y)
        for (int64_t x = 0; x < 64; ++x) board.row(y)[x] = ((x + y) & 1) ? 255 : 0;
    resize(board, 16, 16, &out);
    for (int64_t i = 4; i < 12; ++i) EXPECT_NEAR(out.row(i)[i], 127, 3);
}

std::shared_ptr<Pipeline> pipe(std::vector<std::string> specs, ImageShape out = {3, 0, 0}) {
    auto p = Pipeline::parse(specs, out, "data.train.transforms");
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    return p.is_ok() ? *p : nullptr;
}

std::string parse_error(std::vector<std::string> specs, ImageShape out = {3, 0, 0}) {
    auto p = Pipeline::parse(specs, out, "data.train.transforms");
    return p.is_ok() ? "" : p.status().message();
}

TEST(Transforms, ParseErrorsNameTheTransformAndWhatWasExpected) {
    EXPECT_NE(parse_error({"rotate deg=5"}).find("unknown transform 'rotate'"), std::string::npos);
    EXPECT_NE(parse_error({"center-crop"}).find("size=N"), std::string::npos);
    EXPECT_NE(parse_error({"center-crop size=0"}).find("integer in [1, 16384]"), std::string::npos);
    EXPECT_NE(parse_error({"hflip q=1"}).find("unexpected 'q=1'"), std::string::npos);
    EXPECT_NE(parse_error({"hflip p=2"}).find("[0, 1]"), std::string::npos);
    EXPECT_NE(parse_error({"random-resized-crop size=8 scale=0.9,0.1"}).find("a <= b"), std::string::npos);
    EXPECT_NE(parse_error({"resize size=256"}).find("fixed size"), std::string::npos);
    EXPECT_NE(parse_error({"center-crop size=24"}, {3, 32, 32}).find("end at 24x24 but data.image_size is 32x32"),
              std::string::npos);
    EXPECT_NE(parse_error({"random-erasing value=blue"}).find("mean, random"), std::string::npos);
    EXPECT_NE(parse_error({}).find("image size is not set"), std::string::npos);
    EXPECT_EQ(parse_error({"resize size=32,48"}), "");
    EXPECT_EQ(pipe({"resize size=32,48"})->output(), (ImageShape{3, 32, 48}));
    EXPECT_EQ(pipe({}, {1, 8, 8})->output(), (ImageShape{1, 8, 8}));
}

Pixels chw_to_hwc(const std::vector<uint8_t>& chw, ImageShape s) {
    Pixels p{s.height, s.width, s.channels, std::vector<uint8_t>(chw.size())};
    for (int64_t c = 0; c < s.channels; ++c)
        for (int64_t i = 0; i < s.height * s.width; ++i) p.data[static_cast<size_t>(i * s.channels + c)] = chw[static_cast<size_t>(c * s.height * s.width + i)];
    return p;
}

std::vector<uint8_t> run(const Pipeline& p, const std::string& bytes, uint64_t seed) {
    std::vector<uint8_t> out(static_cast<size_t>(p.output().numel()));
    Status st = p.run(bytes, "x.jpg", seed, out.data());
    EXPECT_TRUE(st.is_ok()) << st.message();
    return out;
}

TEST(Transforms, ResizeThenCenterCropMatchesDoingItOnPixels) {
    const Pixels src = gradient(320, 240);
    const std::string jpg = jpeg_of(src, 98);
    auto p = pipe({"resize size=128", "center-crop size=112"});
    // Reference: resize the whole image to 170x128 (shorter side 128), crop the centre.
    Pixels resized;
    resize(src, 128, 170, &resized);
    const Pixels expect = crop(resized, 29, 8, 112, 112);
    const Pixels got = chw_to_hwc(run(*p, jpg, 1), p->output());
    EXPECT_LE(max_abs_diff(got, expect), 12);  // JPEG loss, DCT-scaled decode, rounding of the region
}

TEST(Transforms, RandomChoicesDependOnTheSeedOnly) {
    const std::string jpg = jpeg_of(gradient(200, 150));
    auto p = pipe({"random-resized-crop size=64", "hflip", "color-jitter brightness=0.4 contrast=0.4 saturation=0.4 hue=0.1",
                   "random-erasing p=0.5"});
    EXPECT_EQ(run(*p, jpg, 7), run(*p, jpg, 7));
    std::set<std::string> distinct;
    for (uint64_t s = 0; s < 8; ++s) {
        const auto v = run(*p, jpg, s);
        distinct.insert(std::string(v.begin(), v.end()));
    }
    EXPECT_GE(distinct.size(), 7u);
    EXPECT_TRUE(p->random());
    EXPECT_FALSE(pipe({"resize size=64", "center-crop size=64"})->random());
}

TEST(Transforms, FlipMirrorsExactly) {
    const std::string jpg = jpeg_of(gradient(90, 70));
    auto plain = pipe({"center-crop size=40,50", "hflip p=0"});
    auto flip = pipe({"center-crop size=40,50", "hflip p=1"});
    const auto a = run(*plain, jpg, 3), b = run(*flip, jpg, 3);
    const ImageShape s = plain->output();
    for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < s.height; ++y)
            for (int64_t x = 0; x < s.width; ++x)
                ASSERT_EQ(a[static_cast<size_t>((c * s.height + y) * s.width + x)],
                          b[static_cast<size_t>((c * s.height + y) * s.width + s.width - 1 - x)]);
}

TEST(Transforms, EnlargedCropsReachTheEdges) {
    // 120 px enlarged to 256 then cropped to 224 starts 7.5 source pixels in: the half pixel
    // must be resampled, not left black.
    for (int side : {120, 24, 33}) {
        Pixels white{side, side, 3, std::vector<uint8_t>(static_cast<size_t>(side * side * 3), 255)};
        const std::string jpg = jpeg_of(white);
        for (const auto& specs : {std::vector<std::string>{"resize size=256", "center-crop size=224"},
                                  std::vector<std::string>{"resize size=64", "random-crop size=56"}}) {
            auto p = pipe(specs);
            for (uint64_t seed = 0; seed < 6; ++seed) {
                const auto out = run(*p, jpg, seed);
                ASSERT_GT(*std::min_element(out.begin(), out.end()), 240) << side << " " << specs[1] << " seed " << seed;
            }
        }
    }
}

// `strato data pack` checks each image with check_image_whole (found by review: empty and
// cut-off files were packed without a word). Every cut that loses image data is caught, in
// baseline and progressive JPEGs (several scans) and PNGs; bytes after the end are fine.
TEST(Codec, CheckImageWholeFindsEveryCutOff) {
    const Pixels px = gradient(48, 40);
    std::vector<std::string> jpegs = {jpeg_of(px)};
    {
        tjhandle tj = tjInitCompress();
        unsigned char* buf = nullptr;
        unsigned long size = 0;
        ASSERT_EQ(tjCompress2(tj, px.data.data(), 48, 0, 40, TJPF_RGB, &buf, &size, TJSAMP_420, 90, TJFLAG_PROGRESSIVE), 0)
            << tjGetErrorStr2(tj);
        jpegs.emplace_back(reinterpret_cast<char*>(buf), size);
        tjFree(buf);
        tjDestroy(tj);
    }
    for (const std::string& jpg : jpegs) {
        EXPECT_TRUE(check_image_whole(jpg, "a.jpg").is_ok());
        EXPECT_TRUE(check_image_whole(jpg + "camera trailer", "a.jpg").is_ok());
        for (size_t n = 0; n + 2 < jpg.size(); ++n) {
            Status st = check_image_whole(jpg.substr(0, n), "a.jpg");
            ASSERT_FALSE(st.is_ok()) << n << " of " << jpg.size() << " bytes passed";
        }
    }
    EXPECT_NE(check_image_whole("", "e.jpg").message().find("e.jpg: empty file (0 bytes"), std::string::npos);
    EXPECT_NE(probe_image("", "e.jpg").status().message().find("e.jpg: empty file (0 bytes"), std::string::npos);
    const std::string big = jpeg_of(gradient(256, 256));
    const std::string cut = check_image_whole(big.substr(0, big.size() / 2), "c.jpg").message();
    EXPECT_NE(cut.find("c.jpg: truncated JPEG (" + std::to_string(big.size() / 2) +
                       " bytes, no end-of-image marker FF D9; expected a whole image file)"),
              std::string::npos)
        << cut;

    png_image img{};
    img.version = PNG_IMAGE_VERSION;
    img.width = 48, img.height = 40, img.format = PNG_FORMAT_RGB;
    std::vector<uint8_t> mem(64 << 10);
    png_alloc_size_t size = mem.size();
    ASSERT_TRUE(png_image_write_to_memory(&img, mem.data(), &size, 0, px.data.data(), 0, nullptr)) << img.message;
    const std::string png(reinterpret_cast<char*>(mem.data()), size);
    EXPECT_TRUE(check_image_whole(png, "a.png").is_ok());
    EXPECT_TRUE(check_image_whole(png + "xyz", "a.png").is_ok());
    for (size_t n = 0; n + 12 < png.size(); ++n)
        ASSERT_FALSE(check_image_whole(png.substr(0, n), "a.png").is_ok()) << n << " of " << png.size() << " bytes passed";
    // Damage that keeps the structure is left to a decode (verify --decode): no crash here.
    std::string garbled = jpegs[0];
    for (size_t i = 200; i < garbled.size() - 2; i += 7) garbled[i] = static_cast<char>(garbled[i] ^ 0x5a);
    (void)check_image_whole(garbled, "garbled.jpg");
}

TEST(Codec, PngAlphaIsDroppedNotComposited) {
    // A fully transparent white pixel is white (Pillow's convert("RGB")), not black.
    png_image img{};
    img.version = PNG_IMAGE_VERSION;
    img.width = 4, img.height = 2, img.format = PNG_FORMAT_RGBA;
    std::vector<uint8_t> px(4 * 2 * 4, 255);
    for (size_t i = 3; i < px.size(); i += 4) px[i] = 0;
    std::vector<uint8_t> mem(4096);
    png_alloc_size_t size = mem.size();
    ASSERT_TRUE(png_image_write_to_memory(&img, mem.data(), &size, 0, px.data(), 0, nullptr)) << img.message;
    auto d = decode_image(std::string(reinterpret_cast<char*>(mem.data()), size), "a.png");
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    for (uint8_t v : d->pixels.data) EXPECT_EQ(v, 255);
}

TEST(Transforms, RandomCropPadsWithZeros) {
    Pixels white{8, 8, 3, std::vector<uint8_t>(8 * 8 * 3, 255)};
    const std::string jpg = jpeg_of(white);
    auto p = pipe({"random-crop size=8 padding=4"});
    int64_t zeros_seen = 0, whole = 0;
    for (uint64_t s = 0; s < 20; ++s) {
        const auto out = run(*p, jpg, s);
        const auto zeros = std::count(out.begin(), out.end(), 0);
        zeros_seen += zeros > 0;
        whole += zeros == 0;
        for (uint8_t v : out) ASSERT_TRUE(v == 0 || v > 240) << int(v);
    }
    EXPECT_GT(zeros_seen, 10);
    EXPECT_GE(whole, 0);
}

TEST(Transforms, ErasingFillsTheMeanAndJitterZeroIsANoOp) {
    Pixels white{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3, 255)};
    const std::string jpg = jpeg_of(white);
    auto p = pipe({"center-crop size=64", "random-erasing p=1"});
    p->set_mean({0.5, 0.5, 0.5});
    const auto out = run(*p, jpg, 11);
    EXPECT_GT(std::count(out.begin(), out.end(), 128), 3 * 64 * 64 * 0.02 * 0.9);
    auto none = pipe({"center-crop size=64", "color-jitter"});
    auto ref = pipe({"center-crop size=64"});
    EXPECT_EQ(run(*none, jpg, 5), run(*ref, jpg, 5));
}

TEST(Transforms, DecodedPixelsPathMatchesFullDecodePath) {
    const std::string jpg = jpeg_of(gradient(180, 140));
    auto a = pipe({"random-resized-crop size=48", "hflip"});
    auto b = pipe({"random-resized-crop size=48", "hflip"});
    b->set_full_decode(true);
    const Pixels px = decode_image(jpg, "x.jpg")->pixels;
    for (uint64_t s = 0; s < 5; ++s) {
        std::vector<uint8_t> from_pixels(static_cast<size_t>(a->output().numel()));
        ASSERT_TRUE(a->run(px, s, from_pixels.data()).is_ok());
        EXPECT_EQ(run(*b, jpg, s), from_pixels);
        // The region + DCT-scale path is close to it.
        EXPECT_LE(max_abs_diff(chw_to_hwc(run(*a, jpg, s), a->output()), chw_to_hwc(from_pixels, a->output())), 40);
    }
}

// --- image folders through the loader ----------------------------------------------------------

class Folder : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = stdfs::temp_directory_path() / ("strato-pipe-" + std::to_string(::getpid()));
        ::setenv("STRATO_CACHE_DIR", (root_ / "cache").c_str(), 1);
        for (int c = 0; c < 3; ++c) {
            stdfs::create_directories(root_ / "img" / ("class" + std::to_string(c)));
            for (int i = 0; i < 7; ++i) {
                Pixels p = gradient(40 + 3 * i, 30 + 2 * c);
                for (auto& v : p.data) v = static_cast<uint8_t>(v / 2 + 40 * c);
                write("class" + std::to_string(c) + "/" + std::to_string(i) + ".jpg", jpeg_of(p));
            }
        }
        stdfs::create_directories(root_ / "img" / "empty");
    }
    void TearDown() override { stdfs::remove_all(root_); }
    void write(const std::string& rel, const std::string& bytes) {
        stdfs::create_directories((root_ / "img" / rel).parent_path());
        ASSERT_TRUE(fs::atomic_write(root_ / "img" / rel, bytes).is_ok());
    }
    std::shared_ptr<ImageDataset> open(std::vector<std::string> transforms = {"random-resized-crop size=24", "hflip"},
                                       std::string cache = "none") {
        ImageDatasetOptions o;
        o.transforms = std::move(transforms);
        o.cache = std::move(cache);
        auto ds = open_image_folder((root_ / "img").string(), o);
        EXPECT_TRUE(ds.is_ok()) << ds.status().message();
        return ds.is_ok() ? *ds : nullptr;
    }
    static std::vector<Batch> epoch(const std::shared_ptr<Dataset>& ds, int64_t workers, bool skip = false,
                                    LoaderPosition from = {1, 0}) {
        LoaderOptions o;
        o.batch_size = 4;
        o.workers = workers;
        o.seed = 42;
        o.skip_bad = skip;
        auto l = Loader::create(ds, o).value();
        l->seek(from);
        std::vector<Batch> out;
        Batch b;
        for (;;) {
            auto more = l->next(b);
            EXPECT_TRUE(more.is_ok()) << more.status().message();
            if (!more.is_ok() || !*more) break;
            out.push_back(b);
        }
        return out;
    }
    stdfs::path root_;
};

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].labels, b[i].labels) << "batch " << i;
        EXPECT_EQ(a[i].images, b[i].images) << "batch " << i;
    }
}

// Found by review: the cached listing checked each class folder's mtime at root/<class name>,
// so a class "T-shirt/top" (folder T-shirt_top) never saw its new images.
TEST_F(Folder, TheCacheWatchesTheFolderOfANameWithASlash) {
    write("T-shirt_top/a.jpg", jpeg_of(gradient(20, 20)));
    const std::vector<std::string> classes = {"T-shirt/top", "class0", "class1", "class2", "empty"};
    auto first = ImageFolderSource::open((root_ / "img").string(), classes);
    ASSERT_TRUE(first.is_ok()) << first.status().message();
    const int64_t before = (*first)->size();
    EXPECT_TRUE(ImageFolderSource::open((root_ / "img").string(), classes).value()->index_from_cache());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a coarse mtime clock: another tick
    write("T-shirt_top/b.jpg", jpeg_of(gradient(20, 20)));
    auto again = ImageFolderSource::open((root_ / "img").string(), classes).value();
    EXPECT_FALSE(again->index_from_cache());
    EXPECT_EQ(again->size(), before + 1);
    auto clash = ImageFolderSource::open((root_ / "img").string(), {"a/b", "a_b"});
    ASSERT_FALSE(clash.is_ok());
    EXPECT_NE(clash.status().message().find("classes 'a/b' and 'a_b' would both be the folder 'a_b'"), std::string::npos)
        << clash.status().message();
}

TEST_F(Folder, IndexIsCachedAndEmptyClassesReported) {
    auto src = ImageFolderSource::open((root_ / "img").string()).value();
    EXPECT_EQ(src->size(), 21);
    EXPECT_EQ(src->class_names(), (std::vector<std::string>{"class0", "class1", "class2", "empty"}));
    EXPECT_EQ(src->empty_classes(), std::vector<std::string>{"empty"});
    EXPECT_FALSE(src->index_from_cache());
    auto again = ImageFolderSource::open((root_ / "img").string()).value();
    EXPECT_TRUE(again->index_from_cache());
    EXPECT_EQ(again->file(20), src->file(20));
    // A new file changes its folder's mtime: the index is rebuilt.
    write("class1/zz.jpg", jpeg_of(gradient(20, 20)));
    auto third = ImageFolderSource::open((root_ / "img").string()).value();
    EXPECT_FALSE(third->index_from_cache());
    EXPECT_EQ(third->size(), 22);
    // Nested folders: a file added below a class folder is seen too.
    write("class2/nested/a.jpg", jpeg_of(gradient(20, 20)));
    EXPECT_EQ(ImageFolderSource::open((root_ / "img").string()).value()->size(), 23);
    EXPECT_TRUE(ImageFolderSource::open((root_ / "img").string()).value()->index_from_cache());
    write("class2/nested/b.jpg", jpeg_of(gradient(20, 20)));
    auto nested = ImageFolderSource::open((root_ / "img").string()).value();
    EXPECT_FALSE(nested->index_from_cache());
    EXPECT_EQ(nested->size(), 24);
    // An empty nested folder counts too: an image copied into it changes only its own mtime
    // (found by review: the cached index missed such images).
    stdfs::create_directories(root_ / "img" / "class0" / "later" / "deeper");
    EXPECT_EQ(ImageFolderSource::open((root_ / "img").string()).value()->size(), 24);
    EXPECT_TRUE(ImageFolderSource::open((root_ / "img").string()).value()->index_from_cache());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the file system's coarse clock tick
    write("class0/later/deeper/c.jpg", jpeg_of(gradient(20, 20)));
    auto deeper = ImageFolderSource::open((root_ / "img").string()).value();
    EXPECT_FALSE(deeper->index_from_cache());
    EXPECT_EQ(deeper->size(), 25);
}

TEST_F(Folder, SameBatchesWhateverTheThreadCountAndExactResume) {
    auto ds = open();
    const auto serial = epoch(ds, 0), threaded = epoch(ds, 3);
    expect_same(serial, threaded);
    ASSERT_EQ(serial.size(), 6u);  // 21 samples in batches of 4
    expect_same(epoch(ds, 2, false, {1, 3}), std::vector<Batch>(serial.begin() + 3, serial.end()));
    // A RAM cache (either kind) changes nothing but speed.
    expect_same(epoch(open({"random-resized-crop size=24", "hflip"}, "encoded"), 2), serial);
    auto dec = open({"random-resized-crop size=24", "hflip"}, "decoded");
    const auto first = epoch(dec, 2), second = epoch(dec, 1);
    expect_same(first, second);
    EXPECT_EQ(dec->cache_stats().entries, 21);
    EXPECT_GE(dec->cache_stats().hits, 21);
}

TEST_F(Folder, BadSamplesStopTheRunOrAreSkippedAndCounted) {
    const std::string good = jpeg_of(gradient(40, 30));
    write("class0/a_truncated.jpg", good.substr(0, good.size() / 3));
    write("class1/a_text.jpg", "this is not an image\n");
    write("class2/a_empty.png", "");
    auto ds = open();
    ASSERT_EQ(ds->size(), 24);
    {
        LoaderOptions o;
        o.batch_size = 4;
        o.workers = 2;
        auto l = Loader::create(ds, o).value();
        Batch b;
        Status st = Status::ok();
        for (;;) {
            auto more = l->next(b);
            if (!more.is_ok()) {
                st = more.status();
                break;
            }
            if (!*more) break;
        }
        ASSERT_FALSE(st.is_ok());
        EXPECT_NE(st.message().find("a_"), std::string::npos) << st.message();
    }
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = 2;
    o.skip_bad = true;
    auto l = Loader::create(ds, o).value();
    Batch b;
    int64_t seen = 0;
    while (l->next(b).value()) seen += b.size;
    EXPECT_EQ(seen, 24);  // bad samples replaced by the next good ones: full batches
    const BadSamples bad = l->bad_samples();
    EXPECT_EQ(bad.count, 3);
    ASSERT_EQ(bad.first.size(), 3u);
    std::string all = bad.first[0] + bad.first[1] + bad.first[2];
    for (auto name : {"a_truncated.jpg", "a_text.jpg", "a_empty.png"}) EXPECT_NE(all.find(name), std::string::npos) << all;
}

TEST_F(Folder, MissingFileAfterIndexingIsAnErrorEvenWhenSkipping) {
    auto ds = open();
    stdfs::remove(root_ / "img" / "class0" / "0.jpg");
    LoaderOptions o;
    o.batch_size = 32;
    o.workers = 0;
    o.skip_bad = true;
    o.shuffle = false;
    auto l = Loader::create(ds, o).value();
    Batch b;
    auto r = l->next(b);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("0.jpg"), std::string::npos);
}

TEST_F(Folder, ShardsAndTheFolderGiveTheSameSamplesThroughDataConfig) {
    // A root with train/ and test/, packed with small shards (several per split).
    for (auto split : {"train", "test"}) stdfs::create_directories(root_ / "ds" / split);
    stdfs::copy(root_ / "img", root_ / "ds" / "train", stdfs::copy_options::recursive);
    stdfs::copy(root_ / "img", root_ / "ds" / "test", stdfs::copy_options::recursive);
    PackOptions po;
    po.shard_size = 4096;
    po.shuffle = false;
    po.workers = 2;
    auto packed = pack_image_folder((root_ / "ds").string(), (root_ / "shards").string(), po);
    ASSERT_TRUE(packed.is_ok()) << packed.status().message();
    DataConfig cfg;
    cfg.path = (root_ / "ds").string();
    cfg.dataset = "image-folder";
    cfg.test_transforms = {"resize size=20", "center-crop size=16"};
    cfg.train_transforms = {"random-resized-crop size=16", "hflip"};
    auto folder = open_datasets(cfg);
    ASSERT_TRUE(folder.is_ok()) << folder.status().message();
    cfg.dataset = "shards";
    cfg.path = (root_ / "shards").string();
    auto shards = open_datasets(cfg);
    ASSERT_TRUE(shards.is_ok()) << shards.status().message();
    EXPECT_GT(shards->train->group_starts().size(), 2u);
    EXPECT_EQ(shards->train->class_names(), folder->train->class_names());
    EXPECT_EQ(shards->mean, folder->mean);
    auto in_order = [](const std::shared_ptr<Dataset>& ds) {
        LoaderOptions o;
        o.batch_size = 5;
        o.shuffle = false;
        o.workers = 2;
        auto l = Loader::create(ds, o).value();
        std::vector<Batch> out;
        Batch b;
        while (l->next(b).value()) out.push_back(b);
        return out;
    };
    expect_same(in_order(shards->test), in_order(folder->test));
    // Shuffled training epochs cover every sample once, in shard windows, whatever the threads.
    const auto serial = epoch(shards->train, 0);
    expect_same(serial, epoch(shards->train, 3));
    int64_t n = 0;
    for (const auto& b : serial) n += b.size;
    EXPECT_EQ(n, shards->train->size());
}

TEST(CsvLoader, StandardisesFeatures) {
    auto ds = CsvDataset::parse("a,b,label\n1,10,x\n3,30,y\n5,50,x\n", "t.csv").value();
    std::vector<double> mean, sd;
    ASSERT_TRUE(feature_stats(*ds, &mean, &sd).is_ok());
    LoaderOptions o;
    o.batch_size = 3;
    o.shuffle = false;
    o.mean = mean;
    o.std = sd;
    o.workers = 1;
    auto l = Loader::create(ds, o).value();
    Batch b;
    ASSERT_TRUE(l->next(b).value());
    ASSERT_EQ(b.size, 3);
    EXPECT_EQ(b.labels, (std::vector<int64_t>{0, 1, 0}));
    const float z = static_cast<float>(2 / std::sqrt(8.0 / 3));  // (5 - 3) / population std
    EXPECT_NEAR(b.images[4], z, 1e-5);   // sample 2, feature a
    EXPECT_NEAR(b.images[1], -z, 1e-5);  // sample 0, feature b
    o.hflip = true;
    EXPECT_FALSE(Loader::create(ds, o).is_ok());
}

/// A dataset in groups, for the group-aware shuffle.
class Grouped final : public Dataset {
public:
    int64_t size() const override { return 40; }
    ImageShape shape() const override { return {1, 1, 1}; }
    const std::vector<std::string>& class_names() const override { return names_; }
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override {
        *dst = static_cast<uint8_t>(index);
        *label = 0;
        return Status::ok();
    }
    std::vector<int64_t> group_starts() const override { return {0, 10, 20, 30}; }
    void will_read(const std::vector<int64_t>& order, int64_t from) const override {
        hinted = order.size();
        hinted_from = from;
    }
    mutable size_t hinted = 0;
    mutable int64_t hinted_from = -1;
    std::vector<std::string> names_{"a"};
};

TEST(GroupShuffle, ShufflesGroupsThenWithinWindows) {
    auto ds = std::make_shared<Grouped>();
    LoaderOptions o;
    o.batch_size = 5;
    o.group_window = 2;
    o.workers = 0;
    auto l = Loader::create(ds, o).value();
    const auto order = l->epoch_order(3);
    ASSERT_EQ(order.size(), 40u);
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 40u);
    // The first 20 positions hold exactly two whole groups.
    std::set<int64_t> groups;
    for (size_t i = 0; i < 20; ++i) groups.insert(order[i] / 10);
    EXPECT_EQ(groups.size(), 2u);
    EXPECT_NE(order, l->epoch_order(4));
    l->seek({3, 2});
    EXPECT_EQ(ds->hinted, 40u);
    EXPECT_EQ(ds->hinted_from, 10);
}

}  // namespace
}  // namespace strato::data
