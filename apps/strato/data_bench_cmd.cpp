// strato data bench PATH [--transform SPEC]... [--workers N] [--batch-size B]: input pipeline speed.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <turbojpeg.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/data/codec.h"
#include "strato/data/data_config.h"
#include "strato/data/image_folder.h"
#include "strato/data/loader.h"
#include "strato/data/remote.h"
#include "strato/data/shards.h"
#include "strato/data/transforms.h"

namespace strato::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Single-thread libjpeg-turbo decode of every JPEG among the first `limit` files, whole, no
/// transforms: the floor a JPEG pipeline is measured against. Other files (PNG) and JPEGs that
/// do not decode are not counted; none decoded is an error, not a rate.
Result<double> raw_decode_rate(const data::SampleSource& src, int64_t limit, int64_t channels) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return internal_error("cannot initialise libjpeg-turbo");
    std::vector<uint8_t> buf;
    const int64_t n = std::min(limit, src.size());
    int64_t decoded = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) {
        data::EncodedSample s;
        if (Status st = src.read(i, &s); !st.is_ok()) {
            tjDestroy(tj);
            return st;
        }
        int w = 0, h = 0, sub = 0, cs = 0;
        const auto* p = reinterpret_cast<const unsigned char*>(s.bytes.data());
        if (tjDecompressHeader3(tj, p, s.bytes.size(), &w, &h, &sub, &cs) != 0) continue;  // not a JPEG
        // The pipeline's own limit: a header claiming 65000x65000 would make this allocate 12 GB.
        if (w <= 0 || h <= 0 || int64_t{w} * h > data::kMaxImagePixels) continue;
        buf.resize(static_cast<size_t>(w) * h * channels);
        decoded += tjDecompress2(tj, p, s.bytes.size(), buf.data(), w, 0, h, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                                 TJFLAG_FASTDCT | TJFLAG_FASTUPSAMPLE) == 0;
    }
    tjDestroy(tj);
    const double secs = seconds_since(t0);
    if (decoded == 0)
        return invalid_argument("--raw-decode: none of the {} file(s) is a JPEG libjpeg-turbo decodes; it times JPEG "
                                "decoding only",
                                n);
    return static_cast<double>(decoded) / secs;
}

/// The first `n` samples of a dataset: `--limit N` (the loader shuffles; stopping it after N
/// samples took N from all of them, other ones each epoch).
class FirstSamples final : public data::Dataset {
public:
    FirstSamples(std::shared_ptr<data::Dataset> all, int64_t n) : all_(std::move(all)), n_(std::min(n, all_->size())) {}
    int64_t size() const override { return n_; }
    data::ImageShape shape() const override { return all_->shape(); }
    const std::vector<std::string>& class_names() const override { return all_->class_names(); }
    Status load(int64_t index, uint8_t* dst, int64_t* label) const override { return all_->load(index, dst, label); }
    Status load_random(int64_t index, uint64_t seed, uint8_t* dst, int64_t* label) const override {
        return all_->load_random(index, seed, dst, label);
    }
    std::vector<int64_t> group_starts() const override {
        std::vector<int64_t> g;
        for (int64_t s : all_->group_starts())
            if (s < n_) g.push_back(s);
        return g;
    }
    void will_read(const std::vector<int64_t>& order, int64_t from) const override { all_->will_read(order, from); }

private:
    std::shared_ptr<data::Dataset> all_;
    int64_t n_;
};

}  // namespace

void add_data_bench_command(CLI::App& data, const GlobalFlags&, int* exit_code) {
    struct Opts {
        std::string path;
        std::vector<std::string> transforms;
        int64_t workers = 2, batch = 64, limit = 0, channels = 3, image_size = 0, prefetch = 4;
        double epochs = 1;
        std::string cache = "none";
        bool raw = false, json = false, accurate = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = data.add_subcommand("bench", "Measure the input pipeline: images/s through decode, transforms and batching");
    cmd->add_option("path", o->path, "An image folder (class per subfolder) or a shard directory/URL (index.json)")->required();
    cmd->add_option("--transform", o->transforms,
                    "A transform, repeatable, in order (default: resize to --image-size); see docs/data.md")
        ->check(status_flag("--transform",
                            [](const std::string& v) { return data::Pipeline::check_spec(v, "--transform"); }, "SPEC"));
    cmd->add_option("--workers", o->workers, "Loader threads (0 = decode in the consuming thread; default 2)")
        ->check(CLI::Range(0, 256));
    cmd->add_option("--batch-size", o->batch, "Samples per batch (default 64)")->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    cmd->add_option("--prefetch", o->prefetch, "Batches assembled ahead (default 4)")->check(CLI::Range(1, 1024));
    cmd->add_option("--limit", o->limit, "Use only the first N samples (default 0 = all)")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
    cmd->add_option("--epochs", o->epochs, "Passes over the data (the first batch is not timed; default 1)")
        ->check(finite_range(1e-6, 1e6));
    cmd->add_option("--channels", o->channels, "1 (gray) or 3 (RGB) (default 3)")->check(CLI::IsMember({1, 3}));
    cmd->add_option("--image-size", o->image_size, "Output side when no transform fixes it (default 0: then --transform must fix it)")->check(CLI::Range(0, 16384));
    cmd->add_option("--cache", o->cache, "none, encoded or decoded (RAM cache after the first read; default none)")
        ->check(CLI::IsMember({"none", "encoded", "decoded"}));
    cmd->add_flag("--accurate-decode", o->accurate, "libjpeg's accurate IDCT and fancy upsampling");
    cmd->add_flag("--raw-decode", o->raw, "Also time a single-thread whole-image libjpeg-turbo decode of the same files");
    cmd->add_flag("--json", o->json, "Print the result as JSON");
    cmd->footer(
        "Examples:\n"
        "  strato data bench photos/train --transform 'random-resized-crop size=224' --transform hflip --workers 2\n"
        "  strato data bench shards/train --transform 'resize size=256' --transform 'center-crop size=224' --raw-decode");
    cmd->callback([o, exit_code] {
        auto fail = [&](const Status& st) { *exit_code = report_error("data bench", st); };
        // A flag missing is a usage error (exit 2), found before the dataset is opened (a URL's
        // index is fetched, a folder listed): it was exit 1, after that work.
        if (o->transforms.empty() && o->image_size <= 0)
            return void(*exit_code = report_usage_error(
                            "data bench", "give --image-size N (the side images are resized to) or --transform SPEC..."));
        // ... and so are transforms that end at no size, or at another than --image-size (found
        // by review: exit 1 after the dataset opened, naming the config key data.image_size).
        if (auto p = data::Pipeline::parse(o->transforms, {o->channels, o->image_size, o->image_size}, "--transform",
                                           "--image-size");
            !p)
            return void(*exit_code = report_usage_error("data bench", p.status().message()));
        std::shared_ptr<const data::SampleSource> source;
        std::error_code ec;
        // (any URL: an s3:// one is refused there, naming the schemes that work; it was "image
        // folder s3://... does not exist")
        if (std::filesystem::exists(std::filesystem::path(o->path) / "index.json", ec) || !data::url_scheme(o->path).empty()) {
            data::RemoteOptions ro;  // a URL's shards go to the same cache a training run uses
            if (data::is_remote_url(o->path)) ro.cache_dir = data::default_shard_cache_dir(o->path);
            auto store = data::open_shard_store(o->path, ro);
            if (!store) return fail(store.status());
            auto s = data::ShardSource::open(*store);
            if (!s) return fail(s.status());
            source = *s;
        } else {
            // A root of splits: stats, verify and pack read train/ and test/ as splits; here they
            // were two classes (or "no images in its class folders" for packed splits).
            const auto splits = data::dataset_splits(o->path);
            if (splits.size() > 1 || (splits.size() == 1 && !splits[0].empty()))
                return fail(invalid_argument("{} holds splits ({}); bench one of them, e.g. {}", o->path,
                                             fmt::join(splits, ", "),
                                             (std::filesystem::path(o->path) / splits[0]).string()));
            auto s = data::ImageFolderSource::open(o->path);
            if (!s) return fail(s.status());
            source = *s;
        }
        data::ImageDatasetOptions io;
        io.shape = {o->channels, o->image_size, o->image_size};
        io.transforms = o->transforms;
        io.where = "--transform";
        io.cache = o->cache;
        io.fast_decode = !o->accurate;
        auto ds = data::ImageDataset::create(source, io);
        if (!ds) return fail(ds.status());
        data::LoaderOptions lo;
        lo.batch_size = o->batch;
        lo.workers = o->workers;
        lo.prefetch = o->prefetch;
        lo.mean = {0.485, 0.456, 0.406};
        lo.std = {0.229, 0.224, 0.225};
        if (o->channels == 1) lo.mean = {0.5}, lo.std = {0.25};
        lo.skip_bad = true;
        std::shared_ptr<data::Dataset> dataset = *ds;
        if (o->limit > 0 && o->limit < dataset->size()) dataset = std::make_shared<FirstSamples>(dataset, o->limit);
        auto loader = data::Loader::create(dataset, lo);
        if (!loader) return fail(loader.status());
        const int64_t per_epoch = dataset->size();
        const auto total = static_cast<int64_t>(o->epochs * static_cast<double>(per_epoch));
        int64_t seen = 0, timed = 0, batches = 0;
        std::chrono::steady_clock::time_point t0;
        data::Batch b;
        for (int64_t epoch = 0; seen < total; ++epoch) {
            (*loader)->seek({epoch, 0});
            for (;;) {
                auto more = (*loader)->next(b);
                if (!more) return fail(more.status());
                if (!*more || seen >= total) break;
                if (batches++ == 0) t0 = std::chrono::steady_clock::now();  // after the pipeline filled
                else timed += b.size;
                seen += b.size;
            }
        }
        if (timed == 0)  // t0 is set by the first batch, and only later ones are timed
            return fail(invalid_argument("nothing was timed: {} batch(es) of {} came, and the first is not timed; "
                                         "use more samples, more --epochs or a smaller --batch-size",
                                         batches, o->batch));
        const double secs = seconds_since(t0);
        const double rate = static_cast<double>(timed) / secs;
        double raw_rate = 0;
        if (o->raw) {
            auto r = raw_decode_rate(*source, per_epoch, o->channels);
            if (!r) return fail(r.status());
            raw_rate = *r;
        }
        const auto bad = (*loader)->bad_samples();
        const data::ImageShape s = dataset->shape();
        if (o->json) {
            nlohmann::json j = {{"path", o->path},       {"samples", seen},          {"images_per_s", rate},
                                {"workers", o->workers}, {"batch_size", o->batch},   {"seconds", secs},
                                {"shape", {s.channels, s.height, s.width}},          {"bad_samples", bad.count},
                                {"transforms", o->transforms}};
            if (o->raw) j["raw_decode_images_per_s"] = raw_rate;
            fmt::print("{}\n", json_text(j, 2));
        } else {
            fmt::print("{} images ({}x{}x{}) in {:.2f} s: {:.0f} images/s with {} worker(s), batch {}\n", timed, s.channels,
                       s.height, s.width, secs, rate, o->workers, o->batch);
            if (o->raw) fmt::print("raw libjpeg-turbo decode (1 thread, whole images): {:.0f} images/s\n", raw_rate);
            if (bad.count > 0) fmt::print("skipped {} bad samples (first: {})\n", bad.count, bad.first.front());
        }
        *exit_code = 0;
    });
}

}  // namespace strato::cli
