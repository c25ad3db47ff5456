#include "strato/data/manifest.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "strato/core/cgroup.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/json_depth.h"
#include "strato/data/codec.h"
#include "strato/data/mapped_file.h"
#include "strato/data/remote.h"
#include "strato/data/shards.h"
#include "strato/data/tar.h"

namespace strato::data {
namespace stdfs = std::filesystem;
namespace {

constexpr size_t kExamples = 5;

struct SplitScan {
    std::string name;
    stdfs::path dir;
    std::string prefix;  // "train/" or ""
    std::vector<std::string> class_names;
    std::vector<ImageFile> files;     // image folder
    std::optional<ShardIndex> index;  // shards
    // Per sample:
    std::vector<int64_t> labels, sizes;
    std::vector<int32_t> width, height;
    std::vector<int8_t> format;  // -1 unreadable, 0 jpeg, 1 png
    std::map<int64_t, std::string> errors;
};

struct Item {
    size_t split = 0;
    int64_t index = -1;  // file or shard of the split; -1 for a shard index.json
    std::string rel;     // relative to the dataset root
    stdfs::path abs;
    int64_t bytes = 0;  // as listed (for progress)
};

struct ScanOptions {
    bool hash = false, decode = false, check_shards = false;
    int64_t workers = 0;
    std::function<void(int64_t, int64_t)> progress;
};

struct Scan {
    std::string path, kind;
    std::vector<SplitScan> splits;
    std::vector<Item> items;
    std::vector<std::string> sha256;  // per item, when hashed ("" if unreadable)
    std::vector<int64_t> file_bytes;  // per item, as found (-1 missing)
    std::mutex mu;
    std::vector<VerifyProblem> problems;

    void problem(std::string p, std::string what, std::string detail) {
        std::lock_guard<std::mutex> lock(mu);
        problems.push_back({std::move(p), std::move(what), std::move(detail)});
    }
};

bool file_exists(const stdfs::path& p) {
    std::error_code ec;
    return stdfs::exists(p, ec);
}

Status open_scan(const std::string& path, Scan* scan) {
    std::error_code ec;
    if (!stdfs::is_directory(path, ec)) {
        // (`data stats s3://bucket/x` said it "does not exist or is not a directory")
        if (!url_scheme(path).empty())
            return invalid_argument("{} is a URL; stats and verify read a local directory (an image folder, or shards "
                                    "written by `strato data pack`)",
                                    path);
        return not_found("{} does not exist or is not a directory", path);
    }
    scan->path = path;
    std::vector<std::string> shard_splits;
    if (file_exists(stdfs::path(path) / kShardIndexName)) {
        shard_splits = {""};
    } else {
        for (const char* s : {"train", "val", "test"})
            if (file_exists(stdfs::path(path) / s / kShardIndexName)) shard_splits.emplace_back(s);
        // A split folder without its index beside ones with theirs: a pack stopped before it
        // finished that split (they are packed one after another). Checking the others only
        // said "ok".
        if (!shard_splits.empty())
            for (const char* s : {"train", "val", "test"})
                if (std::find(shard_splits.begin(), shard_splits.end(), s) == shard_splits.end() &&
                    stdfs::is_directory(stdfs::path(path) / s, ec))
                    return data_loss("{}: {}/ has no {} while {}/ has one: a `strato data pack` that did not finish "
                                     "(run it again: it keeps the finished shards)",
                                     path, s, kShardIndexName, shard_splits.front());
    }
    if (!shard_splits.empty()) {
        scan->kind = "shards";
        for (const std::string& s : shard_splits) {
            SplitScan sp;
            sp.name = s;
            sp.dir = s.empty() ? stdfs::path(path) : stdfs::path(path) / s;
            sp.prefix = s.empty() ? "" : s + "/";
            LocalStore store(sp.dir.string());
            STRATO_ASSIGN_OR_RETURN(std::string text, store.read_meta(kShardIndexName));
            STRATO_ASSIGN_OR_RETURN(ShardIndex idx, parse_shard_index(text, (sp.dir / kShardIndexName).string()));
            sp.class_names = idx.class_names;
            sp.labels = idx.labels;
            sp.sizes = idx.sizes;
            const size_t si = scan->splits.size();
            scan->items.push_back(
                {si, -1, sp.prefix + kShardIndexName, sp.dir / kShardIndexName, static_cast<int64_t>(text.size())});
            for (size_t s2 = 0; s2 < idx.shards.size(); ++s2) {
                const ShardInfo& sh = idx.shards[s2];
                scan->items.push_back({si, static_cast<int64_t>(s2), sp.prefix + sh.name, sp.dir / sh.name, sh.bytes});
            }
            sp.index = std::move(idx);
            scan->splits.push_back(std::move(sp));
        }
    } else {
        // Shards and a journal but no index: a pack killed before it wrote index.json (the
        // folder is no image folder either).
        for (const char* s : {"", "train", "val", "test"})
            if (file_exists(stdfs::path(path) / s / kPackJournalName))
                return data_loss("{}: {}{} and no {}: a `strato data pack` that did not finish (run it again: it "
                                 "keeps the finished shards)",
                                 path, *s ? std::string(s) + "/" : std::string(), kPackJournalName, kShardIndexName);
        scan->kind = "image-folder";
        std::vector<std::string> class_names;
        for (const std::string& s : dataset_splits(path)) {
            SplitScan sp;
            sp.name = s;
            sp.dir = s.empty() ? stdfs::path(path) : stdfs::path(path) / s;
            sp.prefix = s.empty() ? "" : s + "/";
            STRATO_ASSIGN_OR_RETURN(FolderIndex idx, index_image_folder(sp.dir.string(), class_names));
            if (class_names.empty()) class_names = idx.class_names;
            sp.class_names = idx.class_names;
            const size_t si = scan->splits.size();
            for (size_t i = 0; i < idx.files.size(); ++i) {
                const ImageFile& f = idx.files[i];
                sp.labels.push_back(f.label);
                sp.sizes.push_back(f.bytes);
                scan->items.push_back({si, static_cast<int64_t>(i), sp.prefix + f.path, sp.dir / f.path, f.bytes});
            }
            sp.files = std::move(idx.files);
            scan->splits.push_back(std::move(sp));
        }
    }
    for (SplitScan& sp : scan->splits) {
        const size_t n = sp.labels.size();
        sp.width.assign(n, 0);
        sp.height.assign(n, 0);
        sp.format.assign(n, -1);
    }
    scan->sha256.assign(scan->items.size(), "");
    scan->file_bytes.assign(scan->items.size(), -1);
    return Status::ok();
}

/// Probes (or decodes) one image and records it as sample `i` of `sp`.
void check_image(Scan& scan, SplitScan& sp, int64_t i, std::string_view bytes, const std::string& name, bool decode) {
    auto info = probe_image(bytes, name);
    Status st = info.status();
    if (st.is_ok() && decode) {
        DecodeRequest strict;
        strict.strict = true;  // a damaged JPEG that libjpeg decodes to grey is corrupt here
        st = decode_image(bytes, name, strict).status();
    } else if (st.is_ok()) {
        st = check_image_whole(bytes, name, *info);  // a cut-off file (no end marker) without decoding
    }
    const auto k = static_cast<size_t>(i);
    if (!st.is_ok()) {
        {
            std::lock_guard<std::mutex> lock(scan.mu);
            sp.errors[i] = st.message().find(name) == std::string::npos ? name + ": " + st.message() : st.message();
        }
        const std::string& msg = st.message();
        const bool named = msg.rfind(name + ": ", 0) == 0;
        scan.problem(name, "corrupt", named ? msg.substr(name.size() + 2) : msg);
        return;
    }
    sp.width[k] = static_cast<int32_t>(info->width);
    sp.height[k] = static_cast<int32_t>(info->height);
    sp.format[k] = info->format == ImageFormat::kPng ? 1 : 0;
}

void mark_unreadable(Scan& scan, SplitScan& sp, int64_t first, int64_t last, const std::string& why) {
    std::lock_guard<std::mutex> lock(scan.mu);
    for (int64_t i = first; i < last; ++i) sp.errors[i] = why;
}

void scan_image_file(Scan& scan, size_t item, const ScanOptions& o) {
    const Item& it = scan.items[item];
    SplitScan& sp = scan.splits[it.split];
    auto bytes = fs::read_file(it.abs, kMaxImageFileBytes);
    if (!bytes.is_ok()) {
        const bool gone = bytes.status().code() == StatusCode::kNotFound;
        mark_unreadable(scan, sp, it.index, it.index + 1, bytes.status().message());
        scan.problem(it.rel, gone ? "missing" : "corrupt", bytes.status().message());
        return;
    }
    scan.file_bytes[item] = static_cast<int64_t>(bytes->size());
    if (o.hash) scan.sha256[item] = fs::sha256_hex(*bytes);
    check_image(scan, sp, it.index, *bytes, it.rel, o.decode);
}

void scan_shard(Scan& scan, size_t item, const ScanOptions& o) {
    const Item& it = scan.items[item];
    SplitScan& sp = scan.splits[it.split];
    const ShardIndex& idx = *sp.index;
    if (it.index < 0) {  // index.json: hashed only
        auto text = fs::read_file(it.abs);
        if (!text.is_ok()) return scan.problem(it.rel, "missing", text.status().message());
        scan.file_bytes[item] = static_cast<int64_t>(text->size());
        if (o.hash) scan.sha256[item] = fs::sha256_hex(*text);
        return;
    }
    const auto s = static_cast<size_t>(it.index);
    const ShardInfo& info = idx.shards[s];
    const int64_t first = idx.shard_starts[s], last = idx.shard_starts[s + 1];
    auto m = MappedFile::open(it.abs.string());
    if (!m.is_ok()) {
        const bool gone = m.status().code() == StatusCode::kNotFound;
        mark_unreadable(scan, sp, first, last, m.status().message());
        return scan.problem(it.rel, gone ? "missing" : "corrupt", m.status().message());
    }
    const std::string_view data = m->bytes();
    scan.file_bytes[item] = static_cast<int64_t>(data.size());
    bool intact = true;
    if (static_cast<int64_t>(data.size()) != info.bytes) {
        scan.problem(it.rel, "corrupt", fmt::format("{} bytes, index.json says {}", data.size(), info.bytes));
        intact = false;
    }
    if (o.hash || o.check_shards) {
        scan.sha256[item] = fs::sha256_hex(data);
        if (o.check_shards && intact && scan.sha256[item] != info.sha256) {
            scan.problem(it.rel, "corrupt",
                         fmt::format("SHA-256 {} differs from index.json's {}", scan.sha256[item], info.sha256));
        }
    }
    if (o.check_shards) {
        // Every sample of the index must be a member `<key>.<ext>` at its offset, followed by `<key>.cls`.
        auto members = list_tar_bytes(data, it.rel);
        if (!members.is_ok()) {
            scan.problem(it.rel, "corrupt", members.status().message());
        } else {
            std::unordered_map<int64_t, size_t> at;
            for (size_t k = 0; k < members->size(); ++k) at[(*members)[k].data_offset] = k;
            // Every member belongs to exactly one sample: an index that left a sample out (the
            // shard still holds it) or listed one twice described another dataset.
            std::vector<int64_t> owner(members->size(), -1);  // the sample whose image or .cls it is
            auto claim = [&](size_t k, int64_t i, const std::string& name) {
                if (owner[k] < 0) {
                    owner[k] = i;
                    return true;
                }
                scan.problem(name, "corrupt",
                             fmt::format("the member '{}' at offset {} is also sample {}'s: index.json lists it twice",
                                         (*members)[k].name, (*members)[k].data_offset,
                                         idx.keys[static_cast<size_t>(owner[k])]));
                return false;
            };
            for (int64_t i = first; i < last; ++i) {
                const auto u = static_cast<size_t>(i);
                const std::string name = fmt::format("{}:{}", it.rel, idx.keys[u]);
                auto found = at.find(idx.offsets[u]);
                if (found == at.end()) {
                    scan.problem(name, "corrupt", fmt::format("no tar member starts at offset {}", idx.offsets[u]));
                    continue;
                }
                if (!claim(found->second, i, name)) continue;
                const TarMember& img = (*members)[found->second];
                if (img.size != idx.sizes[u] || img.name.rfind(idx.keys[u] + ".", 0) != 0) {
                    scan.problem(name, "corrupt",
                                 fmt::format("the member at offset {} is '{}' ({} bytes), index.json says "
                                             "'{}.*' ({} bytes)",
                                             idx.offsets[u], img.name, img.size, idx.keys[u], idx.sizes[u]));
                    continue;
                }
                const size_t next = found->second + 1;
                const TarMember* cls = next < members->size() ? &(*members)[next] : nullptr;
                const std::string want = std::to_string(idx.labels[u]);
                if (!cls || cls->name != idx.keys[u] + ".cls" ||
                    data.substr(static_cast<size_t>(cls->data_offset), static_cast<size_t>(cls->size)) != want) {
                    scan.problem(
                        name, "corrupt",
                        fmt::format("expected a member '{}.cls' holding {} after the image", idx.keys[u], want));
                    // (one of another label is still this sample's: not reported again as unlisted)
                    if (cls && cls->name == idx.keys[u] + ".cls") claim(next, i, name);
                } else {
                    claim(next, i, name);
                }
            }
            for (size_t k = 0; k < members->size(); ++k) {
                if (owner[k] >= 0) continue;
                const TarMember& member = (*members)[k];
                const bool pair = k + 1 < members->size() && owner[k + 1] < 0 &&
                                  member.name.find('.') != std::string::npos &&
                                  (*members)[k + 1].name == member.name.substr(0, member.name.rfind('.')) + ".cls";
                scan.problem(fmt::format("{}:{}", it.rel, member.name), "corrupt",
                             fmt::format("a member at offset {}{} that index.json does not list (a sample left out "
                                         "of the index)",
                                         member.data_offset, pair ? fmt::format(", with its '{}'", (*members)[k + 1].name)
                                                             : std::string()));
                if (pair) ++k;
            }
        }
    }
    for (int64_t i = first; i < last; ++i) {
        const auto u = static_cast<size_t>(i);
        const std::string name = fmt::format("{}:{}", it.rel, idx.keys[u]);
        if (idx.offsets[u] + idx.sizes[u] > static_cast<int64_t>(data.size())) {
            mark_unreadable(scan, sp, i, i + 1, fmt::format("{}: past the end of the shard", name));
            continue;
        }
        check_image(scan, sp, i, data.substr(static_cast<size_t>(idx.offsets[u]), static_cast<size_t>(idx.sizes[u])),
                    name, o.decode);
    }
}

Status run_scan(Scan& scan, const ScanOptions& o) {
    int64_t total = 0;
    for (const Item& it : scan.items) total += it.bytes;
    std::atomic<size_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex progress_mu;
    auto work = [&] {
        for (size_t i = next++; i < scan.items.size(); i = next++) {
            try {  // a worker thread: nothing may leave it as an exception (std::terminate)
                if (scan.kind == "shards")
                    scan_shard(scan, i, o);
                else
                    scan_image_file(scan, i, o);
            } catch (const std::exception& e) {
                scan.problem(scan.items[i].rel, "corrupt", fmt::format("cannot check: {}", e.what()));
            }
            done += scan.items[i].bytes;
            if (o.progress) {
                std::lock_guard<std::mutex> lock(progress_mu);
                o.progress(done.load(), total);
            }
        }
    };
    const int64_t hw = static_cast<int64_t>(cgroup::usable_cpus());
    const auto n = static_cast<size_t>(std::clamp<int64_t>(
        o.workers > 0 ? o.workers : hw, 1, std::max<int64_t>(1, static_cast<int64_t>(scan.items.size()))));
    std::vector<std::thread> threads;
    for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    std::sort(scan.problems.begin(), scan.problems.end(), [](const VerifyProblem& a, const VerifyProblem& b) {
        return std::tie(a.path, a.kind, a.detail) < std::tie(b.path, b.kind, b.detail);
    });
    return Status::ok();
}

Manifest manifest_of(const Scan& scan) {
    Manifest m;
    m.kind = scan.kind;
    for (size_t i = 0; i < scan.items.size(); ++i) {
        if (scan.file_bytes[i] < 0 || scan.sha256[i].empty()) continue;
        m.sha256[scan.items[i].rel] = scan.sha256[i];
        m.bytes[scan.items[i].rel] = scan.file_bytes[i];
    }
    m.dataset_hash = dataset_hash(m.sha256);
    return m;
}

int64_t median(std::vector<int32_t> v) {
    if (v.empty()) return 0;
    auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
}

SplitStats split_stats(const SplitScan& sp) {
    SplitStats st;
    st.name = sp.name;
    st.samples = static_cast<int64_t>(sp.labels.size());
    st.class_names = sp.class_names;
    st.class_counts.assign(sp.class_names.size(), 0);
    for (int64_t l : sp.labels) ++st.class_counts[static_cast<size_t>(l)];
    const auto [lo, hi] = std::minmax_element(st.class_counts.begin(), st.class_counts.end());
    st.balance = *hi > 0 ? static_cast<double>(*lo) / static_cast<double>(*hi) : 0.0;
    std::vector<int32_t> w, h;
    for (size_t i = 0; i < sp.labels.size(); ++i) {
        st.image_bytes += sp.sizes[i];
        if (sp.format[i] < 0) continue;
        w.push_back(sp.width[i]);
        h.push_back(sp.height[i]);
        ++st.formats[sp.format[i] == 1 ? "png" : "jpeg"];
    }
    if (!w.empty()) {
        st.width_min = *std::min_element(w.begin(), w.end());
        st.width_max = *std::max_element(w.begin(), w.end());
        st.height_min = *std::min_element(h.begin(), h.end());
        st.height_max = *std::max_element(h.begin(), h.end());
        st.width_median = median(std::move(w));
        st.height_median = median(std::move(h));
    }
    st.unreadable =
        static_cast<int64_t>(sp.labels.size()) -
        static_cast<int64_t>(std::count_if(sp.format.begin(), sp.format.end(), [](int8_t f) { return f >= 0; }));
    for (const auto& [i, why] : sp.errors) {
        if (st.unreadable_examples.size() >= kExamples) break;
        st.unreadable_examples.push_back(why);
    }
    if (sp.index) {
        st.shards = static_cast<int64_t>(sp.index->shards.size());
        for (const ShardInfo& s : sp.index->shards) st.shard_bytes += s.bytes;
    }
    return st;
}

}  // namespace

std::string human_bytes(int64_t b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(b);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

// ---- manifests -------------------------------------------------------------------------------

std::string dataset_hash(const std::map<std::string, std::string>& sha256) {
    std::string lines;
    for (const auto& [path, h] : sha256) {  // std::map: bytewise path order
        // As sha256sum prints a name holding '\\', '\n' or '\r': the line starts with '\\' and those
        // are escaped. Unescaped, a folder "a\n<sha>  b" made two datasets' lines the same.
        if (path.find_first_of("\\\n\r") == std::string::npos) {
            lines += h + "  " + path + "\n";
            continue;
        }
        lines += "\\" + h + "  ";
        for (char c : path) {
            if (c == '\\') lines += "\\\\";
            else if (c == '\n') lines += "\\n";
            else if (c == '\r') lines += "\\r";
            else lines += c;
        }
        lines += "\n";
    }
    return fs::sha256_hex(lines);
}

namespace {
/// The dataset hash before names were escaped: manifests written then are still read.
std::string dataset_hash_unescaped(const std::map<std::string, std::string>& sha256) {
    std::string lines;
    for (const auto& [path, h] : sha256) lines += h + "  " + path + "\n";
    return fs::sha256_hex(lines);
}
}  // namespace

nlohmann::json manifest_to_json(const Manifest& m) {
    nlohmann::json files = nlohmann::json::array();
    int64_t total = 0;
    for (const auto& [path, h] : m.sha256) {
        auto b = m.bytes.find(path);
        const int64_t bytes = b == m.bytes.end() ? 0 : b->second;
        total += bytes;
        files.push_back({path, bytes, h});
    }
    return {{"format", kManifestFormat},     {"version", 1},   {"kind", m.kind}, {"dataset_hash", m.dataset_hash},
            {"file_count", m.sha256.size()}, {"bytes", total}, {"files", files}};
}

Result<Manifest> manifest_from_json(const std::string& text, const std::string& what) {
    STRATO_ASSIGN_OR_RETURN(nlohmann::json j, parse_json_named(text, what));
    auto bad = [&](const std::string& field, const std::string& expected) {
        return invalid_argument("{}: {}: expected {} (a manifest from `strato data stats --manifest`)", what, field,
                                expected);
    };
    if (!j.is_object() || !j.contains("format") || j["format"] != kManifestFormat)
        return bad("format", "\"strato-manifest\"");
    if (!j.contains("version") || j["version"] != 1) return bad("version", "1");
    Manifest m;
    if (!j.contains("kind") || !j["kind"].is_string()) return bad("kind", "\"image-folder\" or \"shards\"");
    m.kind = j["kind"].get<std::string>();
    if (!j.contains("files") || !j["files"].is_array()) return bad("files", "an array of [path, bytes, sha256]");
    for (size_t i = 0; i < j["files"].size(); ++i) {
        const auto& f = j["files"][i];
        if (!f.is_array() || f.size() != 3 || !f[0].is_string() || !f[1].is_number_integer() || !f[2].is_string() ||
            f[2].get<std::string>().size() != 64) {
            return bad(fmt::format("files[{}]", i), "[path, bytes, sha256 (64 hex digits)]");
        }
        // (64 'z's or -5 bytes loaded, and verify then reported every file as changed)
        const std::string& sha = f[2].get_ref<const std::string&>();
        if (sha.find_first_not_of("0123456789abcdef") != std::string::npos)
            return bad(fmt::format("files[{}][2]", i), fmt::format("a SHA-256 in 64 lowercase hex digits, got \"{}\"", sha));
        if (f[1].get<int64_t>() < 0 || (f[1].is_number_unsigned() && f[1].get<uint64_t>() > uint64_t{INT64_MAX}))
            return bad(fmt::format("files[{}][1]", i), fmt::format("a size in bytes >= 0, got {}", f[1].dump()));
        if (m.sha256.count(f[0].get<std::string>()))
            return bad(fmt::format("files[{}][0]", i), fmt::format("each path once; {} is listed twice", f[0].dump()));
        m.sha256[f[0].get<std::string>()] = sha;
        m.bytes[f[0].get<std::string>()] = f[1].get<int64_t>();
    }
    m.dataset_hash = dataset_hash(m.sha256);
    if (j.contains("dataset_hash") && j["dataset_hash"] != m.dataset_hash &&
        j["dataset_hash"] != dataset_hash_unescaped(m.sha256)) {
        return invalid_argument("{}: dataset_hash {} does not match its files (computed {}); the manifest was edited",
                                what, json_text(j["dataset_hash"]), m.dataset_hash);
    }
    return m;
}

Status check_manifest_output(const std::string& path, const std::string& dataset, const std::string& flag) {
    if (path.empty()) return invalid_argument("{}: expected a file name, got an empty one", flag);
    STRATO_RETURN_IF_ERROR(fs::check_output_file(path, fs::OutputKind::kText, flag));
    if (fs::is_stream(path)) return Status::ok();  // (/dev/stdout: reading it to judge it would wait)
    if (!dataset.empty() && fs::is_within(path, dataset))
        return invalid_argument("{} {} lies inside the dataset {}; write it beside the dataset", flag, path, dataset);
    std::error_code ec;
    if (!stdfs::exists(path, ec) || stdfs::file_size(path, ec) == 0) return Status::ok();
    // Only a strato manifest may be replaced. What does not start as a JSON object (a shard, a CSV
    // table of gigabytes) is refused from its first bytes; a JSON file is read whole (a manifest is
    // a few hundred bytes per file).
    std::string head(4096, '\0');
    {
        std::ifstream in(path, std::ios::binary);
        in.read(head.data(), static_cast<std::streamsize>(head.size()));
        head.resize(static_cast<size_t>(in.gcount()));
    }
    const size_t first = head.find_first_not_of(" \t\r\n");
    Result<std::string> text = head;
    if (first != std::string::npos && head[first] == '{') text = fs::read_file(path);
    if (!text.is_ok()) return text.status().with_context(flag);
    const nlohmann::json j = first != std::string::npos && head[first] == '{' ? parse_json_bounded(*text)
                                                                              : nlohmann::json(nlohmann::json::value_t::discarded);
    std::string what;
    if (j.is_discarded()) {
        std::string start = text->substr(0, std::min(text->find('\n'), size_t{60}));
        what = fmt::format("a text file that is not JSON (it starts {})", json_text(start));
    } else if (!j.is_object()) {
        what = "JSON that is not an object";
    } else if (!j.contains("format") || !j["format"].is_string()) {
        what = "a JSON file without \"format\": \"strato-manifest\"";
    } else if (j["format"] == kManifestFormat) {
        return Status::ok();
    } else if (j["format"] == kShardIndexFormat) {
        what = "a shard index (format \"strato-shards\")";
    } else {
        what = fmt::format("a JSON file of format {}", json_text(j["format"]));
    }
    return invalid_argument("{} {}: the file exists and is {}, not a strato manifest; not writing over it (remove it "
                            "or choose another name)",
                            flag, path, what);
}

Status write_manifest(const std::string& path, const Manifest& m) {
    STRATO_RETURN_IF_ERROR(check_manifest_output(path));
    // Paths are compared byte for byte when the manifest is checked: JSON holds only UTF-8.
    for (const auto& [file, hash] : m.sha256)
        if (!is_utf8(file))
            return invalid_argument("{}: the file name {} is not UTF-8, which a JSON manifest cannot record; rename it",
                                    path, json_text(file));
    nlohmann::json j = manifest_to_json(m);
    nlohmann::json files = std::move(j["files"]);
    j.erase("files");
    std::string text = json_text(j);
    text.pop_back();  // '}'
    text += ",\"files\":[";
    for (size_t i = 0; i < files.size(); ++i) text += (i ? ",\n " : "\n ") + json_text(files[i]);
    text += "\n]}\n";
    // What a write killed before its rename left (a process that is gone): its temp file.
    if (auto target = fs::follow_links(path); target) fs::remove_stale_temps(*target);
    return fs::atomic_write(path, text);
}

Result<Manifest> read_manifest(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path));
    return manifest_from_json(text, path);
}

// ---- stats -----------------------------------------------------------------------------------

Result<DatasetStats> dataset_stats(const std::string& path, const StatsOptions& options) {
    Scan scan;
    STRATO_RETURN_IF_ERROR(open_scan(path, &scan));
    STRATO_RETURN_IF_ERROR(run_scan(scan, {options.hash, false, false, options.workers, options.progress}));
    DatasetStats out;
    out.path = path;
    out.kind = scan.kind;
    for (const SplitScan& sp : scan.splits) out.splits.push_back(split_stats(sp));
    if (options.hash) {
        // A manifest pins the dataset: one that leaves out a file it could not read (permissions,
        // a shard gone) would pin another one.
        std::vector<size_t> unhashed;
        for (size_t i = 0; i < scan.items.size(); ++i)
            if (scan.file_bytes[i] < 0 || scan.sha256[i].empty()) unhashed.push_back(i);
        if (!unhashed.empty()) {
            const std::string& first = scan.items[unhashed[0]].rel;
            std::string why;
            for (const auto& p : scan.problems)
                if (p.path == first) {
                    why = ": " + p.detail;
                    break;
                }
            return data_loss("{}: {} file(s) could not be read (first: {}{}), so no manifest was written: it would "
                             "leave them out",
                             path, unhashed.size(), first, why);
        }
        out.manifest = manifest_of(scan);
    }
    return out;
}

nlohmann::json stats_to_json(const DatasetStats& s) {
    nlohmann::json splits = nlohmann::json::array();
    for (const SplitStats& sp : s.splits) {
        nlohmann::json classes = nlohmann::json::array();
        for (size_t c = 0; c < sp.class_names.size(); ++c)
            classes.push_back({{"name", sp.class_names[c]}, {"count", sp.class_counts[c]}});
        nlohmann::json j = {{"name", sp.name},
                            {"samples", sp.samples},
                            {"classes", classes},
                            {"balance", sp.balance},
                            {"width", {{"min", sp.width_min}, {"median", sp.width_median}, {"max", sp.width_max}}},
                            {"height", {{"min", sp.height_min}, {"median", sp.height_median}, {"max", sp.height_max}}},
                            {"image_bytes", sp.image_bytes},
                            {"formats", sp.formats},
                            {"unreadable", {{"count", sp.unreadable}, {"examples", sp.unreadable_examples}}}};
        if (s.kind == "shards") j["shards"] = {{"count", sp.shards}, {"bytes", sp.shard_bytes}};
        splits.push_back(std::move(j));
    }
    nlohmann::json j = {{"path", s.path}, {"kind", s.kind}, {"splits", splits}};
    if (s.manifest) {
        j["dataset_hash"] = s.manifest->dataset_hash;
        j["files"] = s.manifest->sha256.size();
    }
    return j;
}

std::string format_stats(const DatasetStats& s) {
    std::string out = fmt::format("{} ({})\n", s.path, s.kind == "shards" ? "packed shards" : "image folder");
    for (const SplitStats& sp : s.splits) {
        const std::string label = sp.name.empty() ? "samples" : sp.name;
        size_t lo = 0, hi = 0;
        for (size_t c = 0; c < sp.class_counts.size(); ++c) {
            if (sp.class_counts[c] < sp.class_counts[lo]) lo = c;
            if (sp.class_counts[c] > sp.class_counts[hi]) hi = c;
        }
        if (sp.class_counts.empty() || sp.class_counts[lo] == sp.class_counts[hi])
            out += fmt::format("  {}: {} samples, {} classes, balance {:.2f}{}\n", label, sp.samples,
                               sp.class_names.size(), sp.balance,
                               sp.class_counts.empty() ? "" : fmt::format(" (every class {})", sp.class_counts[lo]));
        else
            out += fmt::format("  {}: {} samples, {} classes, balance {:.2f} (smallest {} {}, largest {} {})\n", label,
                               sp.samples, sp.class_names.size(), sp.balance, sp.class_names[lo], sp.class_counts[lo],
                               sp.class_names[hi], sp.class_counts[hi]);
        // Per class, where the list stays readable (--json has every class).
        if (sp.class_counts.size() > 1 && sp.class_counts.size() <= 20) {
            std::string per;
            for (size_t c = 0; c < sp.class_counts.size(); ++c)
                per += fmt::format("{}{} {}", c ? ", " : "", sp.class_names[c], sp.class_counts[c]);
            out += fmt::format("    classes: {}\n", per);
        }
        std::string formats;
        for (const auto& [f, n] : sp.formats) formats += fmt::format("{}{} {}", formats.empty() ? "" : ", ", f, n);
        out += fmt::format("    size (min/median/max): width {}/{}/{}, height {}/{}/{}; {} of images; {}\n",
                           sp.width_min, sp.width_median, sp.width_max, sp.height_min, sp.height_median, sp.height_max,
                           human_bytes(sp.image_bytes), formats.empty() ? "no readable image" : formats);
        if (sp.shards > 0) out += fmt::format("    {} shards, {}\n", sp.shards, human_bytes(sp.shard_bytes));
        if (sp.unreadable > 0) {
            out += fmt::format("    unreadable: {}\n", sp.unreadable);
            for (const std::string& e : sp.unreadable_examples) out += fmt::format("      {}\n", e);
        }
    }
    if (s.manifest)
        out += fmt::format("  dataset hash: {} ({} files)\n", s.manifest->dataset_hash, s.manifest->sha256.size());
    return out;
}

// ---- verify ----------------------------------------------------------------------------------

int64_t VerifyReport::count(const std::string& k) const {
    return std::count_if(problems.begin(), problems.end(), [&](const VerifyProblem& p) { return p.kind == k; });
}

Result<VerifyReport> verify_dataset(const std::string& path, const VerifyOptions& options) {
    Scan scan;
    STRATO_RETURN_IF_ERROR(open_scan(path, &scan));
    const bool hash = options.manifest != nullptr;
    STRATO_RETURN_IF_ERROR(
        run_scan(scan, {hash, options.decode, scan.kind == "shards", options.workers, options.progress}));
    VerifyReport r;
    r.path = path;
    r.kind = scan.kind;
    r.files = static_cast<int64_t>(scan.items.size());
    for (const SplitScan& sp : scan.splits) r.samples += static_cast<int64_t>(sp.labels.size());
    r.problems = std::move(scan.problems);
    if (hash) {
        const Manifest now = manifest_of(scan);
        r.dataset_hash = now.dataset_hash;
        const Manifest& want = *options.manifest;
        if (!want.kind.empty() && want.kind != scan.kind) {
            r.problems.push_back(
                {path, "changed", fmt::format("the manifest is of {}, this is {}", want.kind, scan.kind)});
        }
        std::map<std::string, bool> reported;  // files the scan found missing or unreadable
        for (const VerifyProblem& p : r.problems) reported[p.path] = true;
        for (const auto& [file, h] : want.sha256) {
            auto it = now.sha256.find(file);
            if (it == now.sha256.end()) {
                if (!reported.count(file))
                    r.problems.push_back({file, "missing", "in the manifest, not in the dataset"});
            } else if (it->second != h) {
                const int64_t was = want.bytes.count(file) ? want.bytes.at(file) : -1, is = now.bytes.at(file);
                r.problems.push_back({file, "changed",
                                      was != is ? fmt::format("{} bytes, the manifest says {}", is, was)
                                                : fmt::format("SHA-256 {}, the manifest says {}", it->second, h)});
            }
        }
        for (const auto& [file, h] : now.sha256)
            if (!want.sha256.count(file)) r.problems.push_back({file, "extra", "in the dataset, not in the manifest"});
        std::sort(r.problems.begin(), r.problems.end(), [](const VerifyProblem& a, const VerifyProblem& b) {
            return std::tie(a.path, a.kind, a.detail) < std::tie(b.path, b.kind, b.detail);
        });
    }
    return r;
}

nlohmann::json verify_to_json(const VerifyReport& r) {
    nlohmann::json problems = nlohmann::json::array();
    for (const VerifyProblem& p : r.problems)
        problems.push_back({{"path", p.path}, {"kind", p.kind}, {"detail", p.detail}});
    nlohmann::json j = {{"path", r.path},
                        {"kind", r.kind},
                        {"ok", r.ok()},
                        {"files", r.files},
                        {"samples", r.samples},
                        {"missing", r.count("missing")},
                        {"changed", r.count("changed")},
                        {"extra", r.count("extra")},
                        {"corrupt", r.count("corrupt")},
                        {"problems", problems}};
    if (!r.dataset_hash.empty()) j["dataset_hash"] = r.dataset_hash;
    return j;
}

}  // namespace strato::data
