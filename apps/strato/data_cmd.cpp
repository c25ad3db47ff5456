// strato data pack|stats|verify

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "strato/core/json.h"
#include "strato/core/progress.h"
#include "strato/core/signals.h"
#include "strato/data/manifest.h"
#include "strato/data/shards.h"

namespace strato::cli {
namespace {

/// "256MB", "1.5GiB", "64k", "1000000": K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB
/// powers of 1000.
Result<int64_t> parse_size(const std::string& text) {
    // Decimal only (std::stod took "0x10" as 16 bytes, and blanks before the number).
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    const size_t used = ec == std::errc() ? static_cast<size_t>(end - text.data()) : 0;
    std::string unit;
    for (char c : text.substr(used))
        if (c != ' ') unit.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    double mult = -1;
    const char* prefixes = "KMGT";
    if (unit.empty() || unit == "B") mult = 1;
    for (int p = 1; p <= 4; ++p) {
        const std::string u(1, prefixes[p - 1]);
        if (unit == u || unit == u + "IB") mult = static_cast<double>(int64_t{1} << (10 * p));
        if (unit == u + "B") mult = std::pow(1000.0, p);
    }
    if (used == 0 || mult < 0 || !(v > 0) || v * mult > 9e18) {
        return invalid_argument("size '{}' is not a size; expected a number with an optional unit: 256MB, 1GiB, 500k",
                                text);
    }
    // "1.5" is not 1 byte: a size is a whole number of bytes (1.5GiB is).
    const double bytes = v * mult, whole = std::round(bytes);
    if (std::fabs(bytes - whole) > 1e-6 * std::max(1.0, bytes))
        return invalid_argument("size '{}' is not a whole number of bytes ({} B); expected e.g. 256MB, 1.5GiB", text,
                                bytes);
    return static_cast<int64_t>(whole);
}

/// "0" .. "18446744073709551615": the whole string, no sign, no clamping (CLI11's conversion
/// clamps an overflow, and NonNegativeNumber's message spoke of doubles).
std::string check_u64(const std::string& text) {
    const std::string expected = "expected an integer in [0, 18446744073709551615]";
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
        return fmt::format("{}, got '{}'", expected, text);
    errno = 0;
    (void)std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return fmt::format("{}, got {} (too large)", expected, text);
    return {};
}

/// A file name flag: an empty one wrote (or compared with) nothing and still said ok.
/// A progress bar over bytes, made when the first report comes (and remade per split).
struct BytesProgress {
    explicit BytesProgress(bool quiet) : quiet_(quiet) {}
    void update(const std::string& label, int64_t done, int64_t total) {
        if (!bar_ || label != label_) {
            if (bar_) bar_->finish();
            label_ = label;
            bar_ = std::make_unique<ProgressBar>(std::max<int64_t>(total, 1), label, quiet_);
        }
        bar_->update(done, fmt::format("{} / {}", data::human_bytes(done), data::human_bytes(total)));
    }
    void finish() {
        if (bar_) bar_->finish();
        bar_.reset();
    }

  private:
    bool quiet_;
    std::string label_;
    std::unique_ptr<ProgressBar> bar_;
};

}  // namespace

void add_data_command(CLI::App& app, const GlobalFlags& g, int* exit_code) {
    struct Opts {
        std::string src, dst, path, manifest, shard_size = "256MiB";
        int64_t workers = 0;
        uint64_t seed = 0;
        bool no_shuffle = false, json = false, decode = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand("data",
                                   "Prepare datasets: pack image folders into tar shards, stats, content "
                                   "manifests, verify, input pipeline speed");
    cmd->require_subcommand(1);
    // Before the subcommands are added: CLI11 gives each its parent's footer as it is then.
    cmd->footer(
        "Examples:\n"
        "  strato data pack photos/ photos-shards/ --shard-size 256MB --workers 8\n"
        "  strato data bench photos/train --transform 'random-resized-crop size=224' --transform hflip\n"
        "  strato data stats photos/ --manifest photos.manifest.json\n"
        "  strato data stats photos-shards/ --json\n"
        "  strato data verify photos/ --manifest photos.manifest.json --decode\n"
        "  strato data verify photos-shards/            (sizes and SHA-256 against index.json)\n"
        "Ctrl-C stops a pack; running it again keeps the finished shards.");

    auto* pack = cmd->add_subcommand("pack",
                                     "Pack an image folder (class per subfolder; train/ test/ splits too) into "
                                     "WebDataset-style tar shards with an index.json; a rerun resumes. An empty, "
                                     "cut-off or non-JPEG/PNG file stops it, named");
    pack->add_option("src", o->src, "Image folder: SRC/<class>/*.jpg|png, or SRC/train and SRC/test holding those")
        ->required();
    pack->add_option("dst", o->dst, "Output directory (DST/train, DST/test for splits)")->required();
    // (checked by the parser: a usage error, exit 2, as every other flag's bad value)
    pack->add_option("--shard-size", o->shard_size, "Bytes per shard at most: 256MB, 1GiB (default 256MiB)")
        ->check(CLI::Validator(
            [](std::string& v) {
                auto size = parse_size(v);
                if (!size) return size.status().message();
                if (*size < data::kShardSizeMin)
                    return fmt::format("size '{}' is {} bytes, below the smallest shard ({} bytes); try 256MB", v,
                                       *size, data::kShardSizeMin);
                return std::string();
            },
            "SIZE"));
    pack->add_option("--workers", o->workers, "Threads writing shards (default: one per usable CPU)")->check(CLI::Range(0, 4096));
    pack->add_option("--seed", o->seed, "Seed of the pack-time shuffle (default 0)")
        ->check(CLI::Validator([](std::string& v) { return check_u64(v); }, "UINT64"));
    pack->add_flag("--no-shuffle", o->no_shuffle, "Keep the folder's sorted order (shards then hold one class each)");
    pack->add_flag("--json", o->json, "Print the result as JSON");
    pack->callback([o, &g, exit_code] {
        auto size = parse_size(o->shard_size);
        if (!size) return void(*exit_code = report_error("data pack", size.status().with_context("--shard-size")));
        signals::install_stop_handlers();
        data::PackOptions po;
        po.shard_size = *size;
        po.workers = o->workers;
        po.seed = o->seed;
        po.shuffle = !o->no_shuffle;
        BytesProgress bar(g.quiet || o->json);
        po.progress = [&bar](const data::PackProgress& p) {
            bar.update(p.split.empty() ? "packing" : "packing " + p.split, p.bytes_done, p.bytes_total);
        };
        const auto t0 = std::chrono::steady_clock::now();
        auto r = data::pack_image_folder(o->src, o->dst, po);
        bar.finish();
        if (!r) return void(*exit_code = report_error("data pack", r.status()));
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (o->json) {
            nlohmann::json splits = nlohmann::json::array();
            for (const auto& s : *r) {
                splits.push_back({{"split", s.name},
                                  {"dir", s.dir},
                                  {"samples", s.samples},
                                  {"shards", s.shards},
                                  {"bytes", s.bytes},
                                  {"shards_kept", s.shards_kept}});
            }
            fmt::print("{}\n", json_text(nlohmann::json{{"splits", splits}, {"seconds", secs}}, 2));
        } else {
            for (const auto& s : *r) {
                fmt::print("{}{} samples in {} shards ({}) -> {}{}\n", s.name.empty() ? "" : s.name + ": ", s.samples,
                           s.shards, data::human_bytes(s.bytes), s.dir,
                           s.shards_kept > 0 ? fmt::format(" ({} kept from an earlier run)", s.shards_kept) : "");
            }
            fmt::print("packed in {:.1f} s\n", secs);
        }
        *exit_code = 0;
    });

    auto* stats = cmd->add_subcommand("stats",
                                      "Samples, class balance, image sizes, formats and unreadable files of an "
                                      "image folder or shard directory; optionally a content manifest");
    stats->add_option("path", o->path, "Image folder, a root with train/ test/, or a shard directory")->required();
    stats->add_option("--manifest", o->manifest,
                      "Also hash every file and write a manifest here (pins the dataset version); replaces only an "
                      "earlier manifest")
        ->check(cli::file_path_flag());
    stats->add_option("--workers", o->workers, "Threads (default: one per usable CPU)")->check(CLI::Range(0, 4096));
    stats->add_flag("--json", o->json, "Print the result as JSON");
    stats->callback([o, &g, exit_code] {
        // Checked before every byte is hashed: the manifest may not replace a shard, an index, a
        // model's file or a device, nor lie in the dataset it describes (the next check would
        // count it as an extra file).
        if (!o->manifest.empty()) {
            Status s = data::check_manifest_output(o->manifest, o->path, "--manifest");
            if (!s.is_ok()) return void(*exit_code = report_error("data stats", s));
        }
        BytesProgress bar(g.quiet || o->json);
        data::StatsOptions so;
        so.hash = !o->manifest.empty();
        so.workers = o->workers;
        so.progress = [&bar, &so](int64_t done, int64_t total) {
            bar.update(so.hash ? "hashing" : "reading", done, total);
        };
        auto r = data::dataset_stats(o->path, so);
        bar.finish();
        if (!r) return void(*exit_code = report_error("data stats", r.status()));
        if (r->manifest) {
            if (Status s = data::write_manifest(o->manifest, *r->manifest); !s.is_ok()) {
                return void(*exit_code = report_error("data stats", s));
            }
        }
        std::FILE* text_out = text_stream({o->manifest});  // (`--manifest -`: the manifest alone on stdout)
        if (o->json) {
            nlohmann::json j = data::stats_to_json(*r);
            if (!o->manifest.empty()) j["manifest"] = o->manifest;
            fmt::print(text_out, "{}\n", json_text(j, 2));
        } else {
            fmt::print(text_out, "{}", data::format_stats(*r));
            if (!o->manifest.empty()) fmt::print(text_out, "manifest: {}\n", o->manifest);
        }
        *exit_code = 0;
    });

    auto* verify = cmd->add_subcommand("verify",
                                       "Check a dataset against a manifest (missing, changed, extra files), a "
                                       "shard directory against its index, every image's header and end (or all its pixels)");
    verify->add_option("path", o->path, "Image folder, a root with train/ test/, or a shard directory")->required();
    verify->add_option("--manifest", o->manifest, "Manifest from `strato data stats --manifest` to compare against")
        ->check(cli::file_path_flag());
    verify->add_flag("--decode", o->decode, "Decode every image fully (slower; catches damaged image data, not only cut-off files)");
    verify->add_option("--workers", o->workers, "Threads (default: one per usable CPU)")->check(CLI::Range(0, 4096));
    verify->add_flag("--json", o->json, "Print the result as JSON");
    verify->callback([o, &g, exit_code] {
        std::optional<data::Manifest> manifest;
        if (!o->manifest.empty()) {
            auto m = data::read_manifest(o->manifest);
            if (!m) return void(*exit_code = report_error("data verify", m.status()));
            manifest = std::move(*m);
        }
        BytesProgress bar(g.quiet || o->json);
        data::VerifyOptions vo;
        vo.manifest = manifest ? &*manifest : nullptr;
        vo.decode = o->decode;
        vo.workers = o->workers;
        vo.progress = [&bar](int64_t done, int64_t total) { bar.update("verifying", done, total); };
        auto r = data::verify_dataset(o->path, vo);
        bar.finish();
        if (!r) return void(*exit_code = report_error("data verify", r.status()));
        if (o->json) {
            fmt::print("{}\n", json_text(data::verify_to_json(*r), 2));
        } else {
            for (const auto& p : r->problems) fmt::print("{:8} {}: {}\n", p.kind, p.path, p.detail);
        }
        const std::string what =
            fmt::format("{} files, {} samples{}{}", r->files, r->samples,
                        manifest ? ", compared with " + o->manifest : "", o->decode ? ", decoded" : ", headers and ends read");
        if (!r->ok()) {
            *exit_code = report_error(
                "data verify",
                data_loss("{} failed verification: {} changed, {} missing, {} extra, {} corrupt ({})", o->path,
                          r->count("changed"), r->count("missing"), r->count("extra"), r->count("corrupt"), what));
            return;
        }
        if (!o->json) {
            fmt::print("ok: {}{}\n", what, r->dataset_hash.empty() ? "" : "; dataset hash " + r->dataset_hash);
        }
        *exit_code = 0;
    });

    add_data_bench_command(*cmd, g, exit_code);
}

}  // namespace strato::cli
