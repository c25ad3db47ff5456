// `strato data pack`: an image folder into WebDataset-style tar shards (see shards.h).
//
// 1. Index the folder, give every file a key, shuffle the order with the seed.
// 2. Plan: cut the order into shards of at most shard_size bytes using the file sizes (a tar
//    member's size is known from its data size alone), so every byte offset is known up front.
// 3. Workers write whole shards: temp file, SHA-256 while writing, fsync, rename. Each finished
//    shard is recorded in the journal (atomically), with a hash of its part of the plan.
// 4. index.json is written last, from the plan and the recorded checksums.
//
// A rerun keeps a shard whose journal entry has the same plan hash and whose file still has the
// recorded size and SHA-256; it writes the others.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_set>

#include <unistd.h>

#include "strato/core/cgroup.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/data/codec.h"
#include "strato/data/mapped_file.h"
#include "strato/data/remote.h"
#include "strato/data/shards.h"
#include "strato/data/tar.h"

namespace strato::data {
namespace stdfs = std::filesystem;
namespace {

constexpr const char* kJournalName = kPackJournalName;
constexpr const char* kJournalFormat = "strato-pack-journal";

/// Replaces what WebDataset or a tar name cannot take ('.', '/', '\', control characters,
/// whitespace, bytes that are not UTF-8: the index is JSON) by '_' and cuts to `max_bytes` on a
/// UTF-8 character boundary.
std::string sanitize(std::string_view s, size_t max_bytes) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8_length_at(s, i);
        if (n > 1) {
            out.append(s.substr(i, n));
            i += n;
            continue;
        }
        const char ch = s[i++];
        const auto c = static_cast<unsigned char>(ch);
        out.push_back(n == 0 || c < 0x21 || c == 0x7f || ch == '.' || ch == '/' || ch == '\\' ? '_' : ch);
    }
    if (out.size() > max_bytes) {
        size_t n = max_bytes;
        while (n > 0 && (static_cast<unsigned char>(out[n]) & 0xC0) == 0x80) --n;  // not inside a character
        out.resize(n);
    }
    return out.empty() ? "_" : out;
}

/// `<class>/<path inside the class folder, without extension>`, sanitised, unique. The class part
/// is at most 100 bytes and the rest at most 95, so `<key>.png` fits ustar's prefix/name split.
std::vector<std::string> make_keys(const FolderIndex& idx) {
    std::vector<std::string> keys;
    keys.reserve(idx.files.size());
    std::unordered_set<std::string> used;
    for (const ImageFile& f : idx.files) {
        const std::string& cls = idx.class_names[static_cast<size_t>(f.label)];
        std::string rest = f.path.substr(std::min(f.path.size(), cls.size() + 1));  // after "<class>/"
        rest = rest.substr(0, rest.size() - stdfs::path(rest).extension().string().size());
        const std::string base = sanitize(cls, 100) + "/" + sanitize(rest, 86);
        std::string key = base;
        for (int n = 2; !used.insert(key).second; ++n) key = fmt::format("{}_{}", base, n);
        keys.push_back(std::move(key));
    }
    return keys;
}

/// A permutation of [0, n): identity, or a Fisher-Yates shuffle from a SplitMix64 stream (the same
/// on every platform, unlike std::shuffle).
std::vector<size_t> pack_order(size_t n, bool shuffle, uint64_t seed) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    if (!shuffle) return order;
    uint64_t state = seed ^ 0x5bd1e9955bd1e995ULL;
    auto next = [&state] {
        uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    };
    for (size_t i = n; i > 1; --i) {
        const uint64_t bound = i, limit = UINT64_MAX - UINT64_MAX % bound;
        uint64_t r;
        do r = next();
        while (r >= limit);
        std::swap(order[i - 1], order[static_cast<size_t>(r % bound)]);
    }
    return order;
}

std::string ext_for(std::string_view bytes, const std::string& path) {
    if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return "png";
    if (bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0xFF && static_cast<uint8_t>(bytes[1]) == 0xD8)
        return "jpg";
    std::string ext = stdfs::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    return ext == ".png" ? "png" : "jpg";
}

struct PlanShard {
    std::string name;
    size_t first = 0, count = 0;  // positions in the pack order
    int64_t bytes = 0;
    std::string plan_hash;
};

struct Plan {
    std::vector<size_t> order;     // file index per position
    std::vector<int64_t> offsets;  // per position: image data offset inside its shard
    std::vector<PlanShard> shards;
    int64_t bytes = 0;
};

Plan make_plan(const FolderIndex& idx, const std::vector<std::string>& keys, const PackOptions& o) {
    Plan plan;
    plan.order = pack_order(idx.files.size(), o.shuffle, o.seed);
    plan.offsets.resize(plan.order.size());
    auto sample_bytes = [&](const ImageFile& f) {
        return tar_member_bytes(f.bytes) + tar_member_bytes(static_cast<int64_t>(std::to_string(f.label).size()));
    };
    auto close_shard = [&](PlanShard& s) {
        s.bytes += kTarEndBytes;
        std::string desc = fmt::format("{} {}\n{}\n", kShardIndexFormat, kShardIndexVersion, s.name);
        for (size_t k = s.first; k < s.first + s.count; ++k) {
            const ImageFile& f = idx.files[plan.order[k]];
            desc += fmt::format("{}\t{}\t{}\t{}\t{}\n", keys[plan.order[k]], f.path, f.bytes, f.mtime_ns, f.label);
        }
        s.plan_hash = fs::sha256_hex(desc);
        plan.bytes += s.bytes;
        plan.shards.push_back(std::move(s));
    };
    PlanShard cur;
    for (size_t k = 0; k < plan.order.size(); ++k) {
        const int64_t b = sample_bytes(idx.files[plan.order[k]]);
        if (cur.count > 0 && cur.bytes + b + kTarEndBytes > o.shard_size) {
            const size_t next_first = cur.first + cur.count;
            close_shard(cur);
            cur = PlanShard{};
            cur.first = next_first;
        }
        if (cur.count == 0) cur.name = fmt::format("shard-{:06d}.tar", plan.shards.size());
        plan.offsets[k] = cur.bytes + kTarBlock;
        cur.bytes += b;
        ++cur.count;
    }
    if (cur.count > 0) close_shard(cur);
    return plan;
}

struct JournalEntry {
    std::string plan_hash;
    int64_t bytes = 0;
    std::string sha256;
};

std::map<std::string, JournalEntry> read_journal(const stdfs::path& path) {
    std::map<std::string, JournalEntry> out;
    std::error_code ec;
    if (!stdfs::exists(path, ec)) return out;
    auto text = fs::read_file(path);
    try {
        auto j = nlohmann::json::parse(text.is_ok() ? *text : std::string("x"));
        if (j.at("format") != kJournalFormat || j.at("version") != 1) throw std::runtime_error("unknown format");
        for (const auto& [name, e] : j.at("shards").items()) {
            out[name] = {e.at("plan").get<std::string>(), e.at("bytes").get<int64_t>(),
                         e.at("sha256").get<std::string>()};
        }
    } catch (const std::exception& e) {
        log::warn("{}: unreadable ({}); every shard is written again", path.string(), e.what());
        out.clear();
    }
    return out;
}

Status write_journal(const stdfs::path& path, const std::map<std::string, JournalEntry>& entries) {
    nlohmann::json shards = nlohmann::json::object();
    for (const auto& [name, e] : entries)
        shards[name] = {{"plan", e.plan_hash}, {"bytes", e.bytes}, {"sha256", e.sha256}};
    nlohmann::json j = {{"format", kJournalFormat}, {"version", 1}, {"shards", shards}};
    return fs::atomic_write(path, json_text(j, 1) + "\n");
}

/// True when the file is there with the journal's size and SHA-256, and every image in it passes
/// the check a pack makes before it writes one: a shard that an older strato packed without that
/// check may hold a cut-off image, which would otherwise be kept and listed as good. (A shard that
/// fails is written again, and the pack then stops naming the source file.)
bool shard_intact(const stdfs::path& path, const JournalEntry& e, const FolderIndex& idx, const Plan& plan,
                  const PlanShard& ps) {
    auto m = MappedFile::open(path.string());
    if (!m.is_ok()) return false;
    const std::string_view bytes = m->bytes();
    if (static_cast<int64_t>(bytes.size()) != e.bytes || fs::sha256_hex(bytes) != e.sha256) return false;
    for (size_t k = ps.first; k < ps.first + ps.count; ++k) {
        const ImageFile& f = idx.files[plan.order[k]];
        const auto off = static_cast<size_t>(plan.offsets[k]), n = static_cast<size_t>(f.bytes);
        if (off > bytes.size() || n > bytes.size() - off) return false;
        if (!check_image_whole(bytes.substr(off, n), f.path).is_ok()) return false;
    }
    return true;
}

Status write_shard(const FolderIndex& idx, const std::vector<std::string>& keys, const Plan& plan, const PlanShard& ps,
                   const stdfs::path& dir, std::atomic<int64_t>& bytes_done, JournalEntry* done) {
    const stdfs::path final_path = dir / ps.name;
    const stdfs::path tmp = dir / (ps.name + ".tmp");
    auto fail = [&](Status st) {
        std::error_code ec;
        stdfs::remove(tmp, ec);
        return st;
    };
    STRATO_ASSIGN_OR_RETURN(auto w, TarWriter::create(tmp.string()));
    for (size_t k = ps.first; k < ps.first + ps.count; ++k) {
        if (signals::stop_requested()) {
            return fail({StatusCode::kCancelled,
                         "interrupted; run the same command again to resume (finished shards are kept)"});
        }
        const ImageFile& f = idx.files[plan.order[k]];
        const std::string& key = keys[plan.order[k]];
        const stdfs::path src = stdfs::path(idx.root) / f.path;
        auto bytes = fs::read_file(src, kMaxImageFileBytes);
        if (!bytes.is_ok()) return fail(bytes.status());
        if (static_cast<int64_t>(bytes->size()) != f.bytes) {
            return fail(data_loss("{} changed while packing (it was {} bytes, now {}); run the pack again",
                                  src.string(), f.bytes, bytes->size()));
        }
        // An empty, cut-off or non-image file would be packed as is and found only by a later
        // verify, or by training, which cannot decode it.
        if (Status st = check_image_whole(*bytes, src.string()); !st.is_ok()) {
            return fail(Status(st.code(), st.message() + "; remove or replace it, then pack again (`strato data "
                                                         "verify --decode` on the source lists every bad image)"));
        }
        auto offset = w->add(key + "." + ext_for(*bytes, f.path), *bytes);
        if (!offset.is_ok()) return fail(offset.status().with_context(src.string()));
        if (*offset != plan.offsets[k]) {
            return fail(
                internal_error("{}: {} landed at offset {}, the plan says {}", ps.name, key, *offset, plan.offsets[k]));
        }
        auto cls = w->add(key + ".cls", std::to_string(f.label));
        if (!cls.is_ok()) return fail(cls.status());
        bytes_done +=
            tar_member_bytes(f.bytes) + tar_member_bytes(static_cast<int64_t>(std::to_string(f.label).size()));
    }
    if (Status st = w->finish(); !st.is_ok()) return fail(st);
    if (w->bytes() != ps.bytes) {
        return fail(internal_error("{} is {} bytes, the plan says {}", ps.name, w->bytes(), ps.bytes));
    }
    std::error_code ec;
    stdfs::rename(tmp, final_path, ec);
    if (ec) return fail(io_error("cannot rename {} to {}: {}", tmp.string(), final_path.string(), ec.message()));
    bytes_done += kTarEndBytes;
    *done = {ps.plan_hash, w->bytes(), w->sha256()};
    return Status::ok();
}

/// A temp file of fs::atomic_write() for `name`: "<name>.tmp.<pid>.<n>".
bool atomic_temp_of(const std::string& n, const std::string& name) {
    const std::string prefix = name + ".tmp.";
    return n.size() > prefix.size() && n.compare(0, prefix.size(), prefix) == 0 &&
           n.find_first_not_of("0123456789.", prefix.size()) == std::string::npos;
}

/// `shard-NNNNNN.tar` (tail "") or `shard-NNNNNN.tar.tmp` (tail ".tmp"), with its number.
bool shard_file_name(const std::string& n, unsigned* num, bool* tmp) {
    if (n.size() != 16 && n.size() != 20) return false;
    if (n.compare(0, 6, "shard-") != 0 || n.compare(12, 4, ".tar") != 0) return false;
    if (n.size() == 20 && n.compare(16, 4, ".tmp") != 0) return false;
    for (size_t i = 6; i < 12; ++i)
        if (n[i] < '0' || n[i] > '9') return false;
    *num = static_cast<unsigned>(std::stoul(n.substr(6, 6)));
    *tmp = n.size() == 20;
    return true;
}

/// What a pack writes into a split folder (shards, their temp files, index.json, the journal).
bool pack_file_name(const std::string& n) {
    unsigned num = 0;
    bool tmp = false;
    return n == kShardIndexName || n == kJournalName || atomic_temp_of(n, kShardIndexName) ||
           atomic_temp_of(n, kJournalName) || shard_file_name(n, &num, &tmp);
}

/// Removes what an earlier pack left that this one does not own: temp files (of shards, of the
/// journal and index.json: a killed run's), and shards past the end of the plan.
void remove_leftovers(const stdfs::path& dir, size_t shards) {
    std::error_code ec;
    for (const auto& e : stdfs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        unsigned num = 0;
        bool tmp = false;
        if (atomic_temp_of(n, kJournalName) || atomic_temp_of(n, kShardIndexName) ||
            (shard_file_name(n, &num, &tmp) && (tmp || num >= shards)))
            stdfs::remove(e.path(), ec);
    }
}

/// A split folder that holds `shard-NNNNNN.tar` files but neither an index.json nor a journal:
/// not a strato pack's (a pack writes its journal before its first shard). The pack would write
/// over them and delete those past its plan, so it refuses before anything changes.
Status check_no_foreign_shards(const stdfs::path& dir) {
    std::error_code ec;
    if (!stdfs::is_directory(dir, ec)) return Status::ok();
    if (stdfs::exists(dir / kShardIndexName, ec) || stdfs::exists(dir / kJournalName, ec)) return Status::ok();
    std::vector<std::string> found;
    for (const auto& e : stdfs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        unsigned num = 0;
        bool tmp = false;
        if (shard_file_name(n, &num, &tmp) && !tmp) found.push_back(n);
    }
    if (ec) return io_error("cannot list {}: {}", dir.string(), ec.message());
    if (found.empty()) return Status::ok();
    std::sort(found.begin(), found.end());
    return invalid_argument("{} holds {}{} but no {} or {}: shards that no strato pack wrote, which this pack would "
                            "overwrite or delete; pack into an empty directory, or move them away",
                            dir.string(), found[0],
                            found.size() > 1 ? fmt::format(" and {} more shard file(s)", found.size() - 1) : "",
                            kShardIndexName, kJournalName);
}

constexpr const char* kStalePrefix = ".stale-";

/// The split folders of an earlier pack into `dst` that the source (`splits`) no longer has: a
/// test/ left beside a new val/ would be listed by stats and taken for evaluation. Checked before
/// anything changes: such a folder may hold only what a pack writes.
Result<std::vector<std::string>> stale_split_folders(const std::string& src, const std::string& dst,
                                                     const std::vector<std::string>& splits) {
    std::vector<std::string> stale;
    if (splits.size() == 1 && splits[0].empty()) return stale;  // (the layout switch handles these)
    for (const char* s : {"train", "val", "test"}) {
        if (std::find(splits.begin(), splits.end(), s) != splits.end()) continue;
        const stdfs::path dir = stdfs::path(dst) / s;
        std::error_code ec;
        if (!stdfs::is_directory(stdfs::symlink_status(dir, ec))) continue;
        bool packed = false;
        for (const auto& e : stdfs::directory_iterator(dir, ec)) {
            const std::string n = e.path().filename().string();
            if (!pack_file_name(n) || !e.is_regular_file(ec))
                return invalid_argument("{}/ is a split of an earlier pack that {} no longer has, and holds {}, "
                                           "which a pack does not write; move it away, then pack again",
                                           dir.string(), src, n);
            packed = true;
        }
        if (ec) return io_error("cannot list {}: {}", dir.string(), ec.message());
        if (packed || stdfs::is_empty(dir, ec)) stale.emplace_back(s);
    }
    return stale;
}

/// Takes a stale split folder away in one step (a rename: readers see it whole or not at
/// all), then deletes it.
Status remove_stale_split(const std::string& dst, const std::string& split) {
    const stdfs::path dir = stdfs::path(dst) / split;
    const stdfs::path gone = stdfs::path(dst) / fmt::format("{}{}.{}", kStalePrefix, split, ::getpid());
    STRATO_RETURN_IF_ERROR(fs::remove_tree(gone));
    std::error_code ec;
    stdfs::rename(dir, gone, ec);
    if (ec) return io_error("cannot move {} out of the way: {}", dir.string(), ec.message());
    STRATO_RETURN_IF_ERROR(fs::fsync_dir(dst));
    log::warn("data pack: removed {}/, a split of an earlier pack that the source no longer has", dir.string());
    return fs::remove_tree(gone);
}

/// Deletes what an interrupted removal of a stale split left: DST/.stale-<split>.<pid>/ of a
/// process that is gone (a live one's is its own to delete).
void remove_stale_leftovers(const std::string& dst) {
    std::error_code ec;
    for (const auto& e : stdfs::directory_iterator(dst, ec)) {
        const std::string n = e.path().filename().string();
        for (const char* s : {"train", "val", "test"}) {
            const std::string p = fmt::format("{}{}.", kStalePrefix, s);
            if (n.size() > p.size() && n.size() < p.size() + 10 && n.compare(0, p.size(), p) == 0 &&
                n.find_first_not_of("0123456789", p.size()) == std::string::npos && e.is_directory(ec) &&
                signals::process_gone(std::stol(n.substr(p.size()))))
                (void)fs::remove_tree(e.path());
        }
    }
}

Status pack_split(const FolderIndex& idx, const stdfs::path& dir, const std::string& split, const PackOptions& o,
                  PackedSplit* out) {
    STRATO_RETURN_IF_ERROR(fs::check_writable_dir(dir));
    const std::vector<std::string> keys = make_keys(idx);
    const Plan plan = make_plan(idx, keys, o);

    // A stale index must not describe shards that are about to change.
    std::error_code ec;
    if (stdfs::exists(dir / kShardIndexName, ec)) {
        stdfs::remove(dir / kShardIndexName, ec);
        if (ec) return io_error("cannot remove the old {}: {}", (dir / kShardIndexName).string(), ec.message());
        STRATO_RETURN_IF_ERROR(fs::fsync_dir(dir));
    }
    remove_leftovers(dir, SIZE_MAX);  // temp files only

    // The journal as it will stand: earlier entries that match this plan, until proven otherwise.
    const stdfs::path journal_path = dir / kJournalName;
    std::map<std::string, JournalEntry> old = read_journal(journal_path), journal;
    for (const PlanShard& ps : plan.shards) {
        auto it = old.find(ps.name);
        if (it != old.end() && it->second.plan_hash == ps.plan_hash) journal[ps.name] = it->second;
    }
    STRATO_RETURN_IF_ERROR(write_journal(journal_path, journal));

    std::mutex mu;
    std::condition_variable cv;
    std::atomic<size_t> next{0};
    std::atomic<int64_t> bytes_done{0}, shards_done{0}, kept{0};
    std::atomic<bool> failed{false};
    Status first_error;
    size_t running = 0;
    std::vector<std::string> sha(plan.shards.size());

    auto worker = [&] {
        for (;;) {
            const size_t s = next++;
            if (s >= plan.shards.size() || failed) break;
            const PlanShard& ps = plan.shards[s];
            JournalEntry prior;
            {
                std::lock_guard<std::mutex> lock(mu);
                auto it = journal.find(ps.name);
                if (it != journal.end()) prior = it->second;
            }
            if (!prior.sha256.empty() && prior.bytes == ps.bytes && shard_intact(dir / ps.name, prior, idx, plan, ps)) {
                sha[s] = prior.sha256;
                bytes_done += ps.bytes;
                ++kept;
                ++shards_done;
                continue;
            }
            JournalEntry done;
            Status st;
            try {  // a worker thread: nothing may leave it as an exception (std::terminate)
                st = write_shard(idx, keys, plan, ps, dir, bytes_done, &done);
            } catch (const std::exception& e) {
                st = internal_error("{}: {}", ps.name, e.what());
            }
            std::lock_guard<std::mutex> lock(mu);
            if (st.is_ok()) {
                journal[ps.name] = done;
                st = write_journal(journal_path, journal);
            } else {
                journal.erase(ps.name);
            }
            if (!st.is_ok()) {
                if (!failed.exchange(true)) first_error = st;
                break;
            }
            sha[s] = done.sha256;
            ++shards_done;
        }
        std::lock_guard<std::mutex> lock(mu);
        --running;
        cv.notify_all();
    };

    const int64_t hw = static_cast<int64_t>(cgroup::usable_cpus());
    const auto n_workers = static_cast<size_t>(
        std::clamp<int64_t>(o.workers > 0 ? o.workers : hw, 1, static_cast<int64_t>(plan.shards.size())));
    std::vector<std::thread> threads;
    running = n_workers;
    for (size_t t = 0; t < n_workers; ++t) threads.emplace_back(worker);
    auto report = [&] {
        if (o.progress) {
            o.progress(
                {split, bytes_done.load(), plan.bytes, shards_done.load(), static_cast<int64_t>(plan.shards.size())});
        }
    };
    {
        std::unique_lock<std::mutex> lock(mu);
        while (running > 0) {
            cv.wait_for(lock, std::chrono::milliseconds(200));
            lock.unlock();
            report();
            lock.lock();
        }
    }
    for (auto& t : threads) t.join();
    if (failed) return first_error;

    nlohmann::json shards = nlohmann::json::array();
    for (size_t s = 0; s < plan.shards.size(); ++s) {
        const PlanShard& ps = plan.shards[s];
        nlohmann::json k = nlohmann::json::array(), off = nlohmann::json::array(), size = nlohmann::json::array(),
                       label = nlohmann::json::array();
        for (size_t p = ps.first; p < ps.first + ps.count; ++p) {
            const ImageFile& f = idx.files[plan.order[p]];
            k.push_back(keys[plan.order[p]]);
            off.push_back(plan.offsets[p]);
            size.push_back(f.bytes);
            label.push_back(f.label);
        }
        shards.push_back({{"name", ps.name},
                          {"bytes", ps.bytes},
                          {"sha256", sha[s]},
                          {"samples", ps.count},
                          {"keys", k},
                          {"offsets", off},
                          {"sizes", size},
                          {"labels", label}});
    }
    nlohmann::json index = {{"format", kShardIndexFormat},
                            {"version", kShardIndexVersion},
                            {"classes", idx.class_names},
                            {"samples", idx.files.size()},
                            {"shards", shards}};
    STRATO_RETURN_IF_ERROR(fs::atomic_write(dir / kShardIndexName, json_text(index) + "\n"));
    remove_leftovers(dir, plan.shards.size());

    out->name = split;
    out->dir = dir.string();
    out->samples = static_cast<int64_t>(idx.files.size());
    out->shards = static_cast<int64_t>(plan.shards.size());
    out->bytes = plan.bytes;
    out->shards_kept = kept;
    return Status::ok();
}

}  // namespace

Result<std::vector<PackedSplit>> pack_image_folder(const std::string& src, const std::string& dst,
                                                   const PackOptions& options) {
    static_assert(kShardSizeMin == tar_member_bytes(1) + kTarEndBytes);
    if (options.shard_size < kShardSizeMin) {
        return invalid_argument("shard size {} bytes is too small (at least {} bytes; try 256MB)", options.shard_size,
                                kShardSizeMin);
    }
    std::error_code ec;
    if (!stdfs::is_directory(src, ec)) {
        if (!url_scheme(src).empty())
            return invalid_argument("{} is a URL; pack reads a local image folder (class per subfolder)", src);
        return not_found("{} does not exist or is not a directory", src);
    }
    if (fs::is_within(dst, src)) {
        return invalid_argument("the destination {} is inside the source {}; pack to a directory outside it", dst, src);
    }
    if (fs::is_within(src, dst)) {  // index.json in an ancestor would make stats/verify of it check the shards only
        return invalid_argument("the destination {} holds the source {}; pack to a directory outside it", dst, src);
    }
    // One pack at a time into a folder: a second removed the first's temporary shards under it.
    // (The lock file lies inside: the destination's parent may be no place to write.)
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(dst));
    auto lock = fs::lock_file(stdfs::path(dst) / ".pack.lock", dst);
    if (!lock) {
        if (lock.status().code() != StatusCode::kAlreadyExists) return lock.status();
        return Status(StatusCode::kAlreadyExists,
                      fmt::format("the destination {}\nhint: wait for that pack to finish", lock.status().message()));
    }
    std::vector<PackedSplit> out;
    std::vector<std::string> class_names;
    const std::vector<std::string> splits = dataset_splits(src);
    // Every split is indexed and checked before anything in the destination changes.
    std::vector<FolderIndex> indexes;
    for (const std::string& split : splits) {
        const stdfs::path from = split.empty() ? stdfs::path(src) : stdfs::path(src) / split;
        STRATO_ASSIGN_OR_RETURN(FolderIndex idx, index_image_folder(from.string(), class_names));
        if (class_names.empty()) class_names = idx.class_names;  // train's classes label every split
        // A class folder without images (a folder emptied by a failed copy) is still a class: a
        // label and an output of the model, and it shifts the labels of the classes sorted after
        // it. torchvision's ImageFolder refuses it; training warns, and so does a pack, which said
        // nothing. (Hidden folders such as .ipynb_checkpoints are no classes at all.)
        {
            std::vector<int64_t> counts(idx.class_names.size(), 0);
            for (const ImageFile& f : idx.files) ++counts[static_cast<size_t>(f.label)];
            for (size_t c = 0; c < counts.size(); ++c)
                if (counts[c] == 0)
                    log::warn("data pack: {}: class '{}' (label {}) has no images", from.string(), idx.class_names[c], c);
        }
        // Empty files (a failed download or copy) are refused before anything is written.
        const auto empty = std::count_if(idx.files.begin(), idx.files.end(), [](const ImageFile& f) { return f.bytes == 0; });
        if (empty > 0) {
            const auto first = std::find_if(idx.files.begin(), idx.files.end(), [](const ImageFile& f) { return f.bytes == 0; });
            return data_loss("{}: empty file (0 bytes; expected a JPEG or PNG image){}; remove or replace it, then "
                             "pack again",
                             (from / first->path).string(),
                             empty > 1 ? fmt::format(", and {} more empty file(s) in {}", empty - 1, from.string()) : "");
        }
        // index.json holds class names as JSON strings, which are UTF-8: other bytes came out as
        // U+FFFD, and two classes could end up with one name.
        for (const auto& c : idx.class_names)
            if (!is_utf8(c))
                return invalid_argument("{}: the class folder name {} is not UTF-8, which index.json cannot record; "
                                        "rename it",
                                        from.string(), json_text(c));
        indexes.push_back(std::move(idx));
    }
    for (const std::string& split : splits)
        STRATO_RETURN_IF_ERROR(check_no_foreign_shards(split.empty() ? stdfs::path(dst) : stdfs::path(dst) / split));
    STRATO_ASSIGN_OR_RETURN(const std::vector<std::string> stale_splits, stale_split_folders(src, dst, splits));
    remove_stale_leftovers(dst);
    // A pack of the other layout in the same folder: its index would win over (a root index.json)
    // or sit beside (train/index.json) the new one, and readers took the old dataset.
    {
        std::vector<stdfs::path> stale;
        if (splits.size() == 1 && splits[0].empty()) {
            for (const char* s : {"train", "val", "test"}) stale.push_back(stdfs::path(dst) / s / kShardIndexName);
        } else {
            stale.push_back(stdfs::path(dst) / kShardIndexName);
        }
        for (const auto& p : stale) {
            if (!stdfs::exists(p, ec)) continue;
            log::warn("data pack: {} is the index of an earlier pack of another layout; removed (its shards beside it "
                      "are no longer read)",
                      p.string());
            stdfs::remove(p, ec);
            if (ec) return io_error("cannot remove {}: {}", p.string(), ec.message());
        }
    }
    // Every split's old index goes before the first split is written: removed only when its own
    // turn came, it went on describing the earlier pack beside a split packed anew, and a pack
    // stopped between the two (killed, or a folder that took no new files) read as finished.
    for (const std::string& split : splits) {
        const stdfs::path dir = split.empty() ? stdfs::path(dst) : stdfs::path(dst) / split;
        if (!stdfs::exists(dir / kShardIndexName, ec)) continue;
        stdfs::remove(dir / kShardIndexName, ec);
        if (ec) return io_error("cannot remove the old {}: {}", (dir / kShardIndexName).string(), ec.message());
        STRATO_RETURN_IF_ERROR(fs::fsync_dir(dir));
    }
    for (size_t i = 0; i < splits.size(); ++i) {
        const std::string& split = splits[i];
        PackedSplit done;
        STRATO_RETURN_IF_ERROR(
            pack_split(indexes[i], split.empty() ? stdfs::path(dst) : stdfs::path(dst) / split, split, options, &done));
        if (options.progress) options.progress({split, done.bytes, done.bytes, done.shards, done.shards});
        out.push_back(std::move(done));
    }
    // Only now, with every new split complete: the old ones go.
    for (const std::string& s : stale_splits) STRATO_RETURN_IF_ERROR(remove_stale_split(dst, s));
    return out;
}

}  // namespace strato::data
