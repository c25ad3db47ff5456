#include "strato/data/remote.h"

#ifdef STRATO_WITH_CURL
#include <curl/curl.h>
#endif
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/data/remote_fetch.h"
#include "strato/data/shards.h"

namespace strato::data {
namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A shard whose file failed its checksum is not fetched again for this long: its samples (and a
// bad sample's replacements) each asked for it, and each download failed the same way.
constexpr std::chrono::seconds kCorruptRetryAfter{60};

constexpr std::string_view kPart = ".part";          // a download in progress (resumable)
constexpr std::string_view kVerified = ".verified";  // sidecar: the sha256 a cached file was checked against

std::string os_error() { return std::strerror(errno); }

Status check_name(const std::string& name) {
    auto bad = [&](std::string_view why) {
        return invalid_argument(
            "shard name '{}' {} (expected a relative path inside the dataset, like shard-000003.tar)", name, why);
    };
    if (name.empty()) return bad("is empty");
    if (name.front() == '/') return bad("is absolute");
    for (char c : name) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') return bad("has a control character or \\");
    }
    size_t start = 0;
    while (start <= name.size()) {
        size_t end = name.find('/', start);
        if (end == std::string::npos) end = name.size();
        std::string_view seg(name.data() + start, end - start);
        if (seg.empty() || seg == "." || seg == "..") return bad("has an empty, . or .. component");
        start = end + 1;
    }
    if (name.ends_with(kPart) || name.ends_with(kVerified)) return bad("ends with a suffix the cache uses");
    return Status::ok();
}

std::string percent_encode_path(const std::string& name) {
    static const char* kHex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : name) {
        if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 15]);
        }
    }
    return out;
}

int64_t mtime_ns(const struct stat& sb) {
    return static_cast<int64_t>(sb.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(sb.st_mtim.tv_nsec);
}

/// The sidecar says the file was checked against `sha256` when it had this size and mtime:
/// cheaper than hashing gigabytes at every start. A file touched since is hashed again.
std::string sidecar_text(const std::string& sha256, const struct stat& sb) {
    return fmt::format("sha256={} bytes={} mtime_ns={}\n", sha256, static_cast<int64_t>(sb.st_size), mtime_ns(sb));
}

/// The sha256 the sidecar of `file` vouches for, or "" when there is none or it is stale.
std::string sidecar_sha(const std::string& file, const struct stat& sb) {
    auto text = fs::read_file(file + std::string(kVerified));
    if (!text.is_ok()) return "";
    char sha[65] = {0};
    long long bytes = -1, mtime = -1;
    if (std::sscanf(text->c_str(), "sha256=%64s bytes=%lld mtime_ns=%lld", sha, &bytes, &mtime) != 3) return "";
    if (bytes != static_cast<long long>(sb.st_size) || mtime != mtime_ns(sb)) return "";
    return sha;
}

/// True when `fd` is still the file at `path` (not renamed away or unlinked since it was opened).
bool same_file(int fd, const std::string& path) {
    struct stat a {
    }, b{};
    if (::fstat(fd, &a) != 0 || ::stat(path.c_str(), &b) != 0) return false;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

struct FdCloser {
    int fd;
    ~FdCloser() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

struct HttpStore::Impl {
    enum class State { kAbsent, kBusy, kReady };  // kBusy: being fetched or checked
    struct Entry {
        State state = State::kAbsent;
        int64_t bytes = 0;         // counted in used_bytes unless kAbsent
        std::string verified_sha;  // what the cached file was checked against ("" = not yet)
        bool in_use = false;       // local_path'd, not released since
        bool released = false;
        bool pending = false;   // fetched ahead (or listed while present) and not used since
        uint64_t last_use = 0;  // tick of the last local_path or release
        uint64_t generation = 0;
        Status error;     // of the last fetch, if it failed
        std::string corrupt_sha;  // the checksum a fetch found the server's file does not have
        Clock::time_point corrupt_at;  // ... and when
        int pin_fd = -1;  // holds a shared flock on the file while in use, against other processes' eviction
    };

    std::string base_url;
    RemoteOptions options;
    stdfs::path cache_dir;
    detail::FetchCounters counters;
    std::unique_ptr<detail::HttpClient> client;

    std::mutex mu;
    std::condition_variable cv;
    std::unordered_map<std::string, Entry> entries;  // never erased: waiters hold references
    std::deque<ShardInfo> queue;
    std::vector<std::thread> workers;
    bool stopping = false;
    uint64_t tick = 0;
    uint64_t changes = 0;  // bumped on every change a blocked prefetch thread may wait for
    int64_t used_bytes = 0;
    int64_t shards_fetched = 0, hits = 0, misses = 0, evictions = 0;
    double wait_seconds = 0;
    std::atomic<int64_t> checksum_failures{0};
    bool warned_prefetch_cap = false;

    std::string url_of(const std::string& name) const { return base_url + "/" + percent_encode_path(name); }
    std::string path_of(const std::string& name) const { return (cache_dir / name).string(); }

    Status scan();
    void worker();
    Status check_shard(const ShardInfo& s) const;
    Status fetch(const ShardInfo& s);
    Result<bool> verify_existing(const ShardInfo& s);
    Status remove_cached(const std::string& path);
    Result<int> lock_part(const std::string& part);
    // The rest run under `mu`.
    bool make_room(int64_t need, bool for_use, const std::string& name);
    bool evict(const std::string& name, Entry& e);
    bool pin(const std::string& name, Entry& e);
    void unpin(Entry& e);
    void begin_fetch(Entry& e, const ShardInfo& s);
    void end_fetch(Entry& e, const ShardInfo& s, const Status& st, bool ahead);
    /// The shard's file failed its checksum less than kCorruptRetryAfter ago.
    bool recently_corrupt(const Entry& e, const ShardInfo& s) const;
    void shutdown();
};

Status HttpStore::Impl::scan() {
    STRATO_RETURN_IF_ERROR(fs::check_writable_dir(cache_dir));
    struct Found {
        int64_t mtime;
        std::string name;
        struct stat sb;
    };
    std::vector<Found> found;
    std::error_code ec;
    for (auto it = stdfs::recursive_directory_iterator(cache_dir, stdfs::directory_options::skip_permission_denied, ec);
         !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        std::string name = stdfs::relative(it->path(), cache_dir, ec).generic_string();
        if (ec || !check_name(name).is_ok() || name.find(".tmp.") != std::string::npos ||
            name.find(".strato-write-test") != std::string::npos) {
            continue;  // downloads in progress, sidecars, temporary files
        }
        struct stat sb {};
        if (::stat(it->path().c_str(), &sb) != 0) continue;
        found.push_back({mtime_ns(sb), name, sb});
    }
    if (ec) return io_error("cannot list the cache directory {}: {}", cache_dir.string(), ec.message());
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
    for (const Found& f : found) {
        Entry& e = entries[f.name];
        e.state = State::kReady;
        e.bytes = f.sb.st_size;
        e.verified_sha = sidecar_sha(path_of(f.name), f.sb);
        e.last_use = ++tick;
        used_bytes += e.bytes;
    }
    if (!found.empty()) {
        log::info("shard cache {}: {} files, {} MB from earlier runs", cache_dir.string(), found.size(),
                  used_bytes >> 20);
    }
    return Status::ok();
}

Status HttpStore::Impl::check_shard(const ShardInfo& s) const {
    STRATO_RETURN_IF_ERROR(check_name(s.name));
    if (s.bytes < 0 || s.sha256.size() != 64) {
        return invalid_argument("shard {}: expected a size and a 64-digit sha256, got {} bytes and '{}'", s.name,
                                s.bytes, s.sha256);
    }
    if (s.bytes > options.cache_bytes_max) {
        return invalid_argument(
            "shard {} has {} bytes, more than the cache may hold ({} bytes): raise the cache cap "
            "(cache_bytes_max) above the largest shard",
            s.name, s.bytes, options.cache_bytes_max);
    }
    return Status::ok();
}

Status HttpStore::Impl::remove_cached(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? Status::ok() : io_error("cannot open {}: {}", path, os_error());
    FdCloser closer{fd};
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        return {StatusCode::kUnavailable,
                fmt::format("cannot replace {}: another process is reading it (is the cache directory shared by "
                            "jobs on different versions of the dataset?)",
                            path)};
    }
    if (same_file(fd, path)) ::unlink(path.c_str());
    ::unlink((path + std::string(kVerified)).c_str());
    return Status::ok();
}

Result<bool> HttpStore::Impl::verify_existing(const ShardInfo& s) {
    std::string path = path_of(s.name);
    struct stat sb {};
    if (::stat(path.c_str(), &sb) != 0) {
        if (errno == ENOENT) return false;
        return io_error("cannot stat {}: {}", path, os_error());
    }
    if (sb.st_size == s.bytes) {
        if (sidecar_sha(path, sb) == s.sha256) return true;
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return io_error("cannot open {}: {}", path, os_error());
        FdCloser closer{fd};
        STRATO_ASSIGN_OR_RETURN(std::string sha, detail::sha256_fd(fd, s.bytes, path));
        if (sha == s.sha256) {
            STRATO_RETURN_IF_ERROR(fs::atomic_write(path + std::string(kVerified), sidecar_text(sha, sb)));
            return true;
        }
    }
    log::info("cached {} is not the file the index describes; fetching it again", path);
    STRATO_RETURN_IF_ERROR(remove_cached(path));
    return false;
}

Result<int> HttpStore::Impl::lock_part(const std::string& part) {
    // Another process (or store) downloading the same shard holds the lock; it gives up within
    // its retry policy, so waiting longer than that without the file growing means it hangs.
    const double stall_max_s = options.low_speed_time_s + options.connect_timeout_s + options.retry.total_max_s;
    bool told = false;
    while (true) {
        int fd = ::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return io_error("cannot create {}: {}", part, os_error());
        FdCloser closer{fd};
        int64_t size = -1;
        Clock::time_point grew = Clock::now();
        bool renamed = false;
        while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK && errno != EINTR) return io_error("cannot lock {}: {}", part, os_error());
            // Finished and renamed into place: look again (its reader's shared lock on the same
            // file would keep this one waiting forever).
            if (!same_file(fd, part)) {
                renamed = true;
                break;
            }
            struct stat sb {};
            if (::fstat(fd, &sb) == 0 && sb.st_size != size) {
                size = sb.st_size;
                grew = Clock::now();
            }
            if (std::chrono::duration<double>(Clock::now() - grew).count() > stall_max_s) {
                return Status{StatusCode::kUnavailable,
                              fmt::format("{} is locked by another process downloading it, which has made no "
                                          "progress for {:.0f} s (a hung process? kill it or remove the file)",
                                          part, stall_max_s)};
            }
            if (!told) log::info("{} is being downloaded by another process; waiting for it", part);
            told = true;
            if (!client->sleep_for(0.05)) {
                return Status{StatusCode::kCancelled, fmt::format("waiting for {}: cancelled", part)};
            }
        }
        if (!renamed && same_file(fd, part)) {
            closer.fd = -1;
            return fd;
        }
    }
}

Status HttpStore::Impl::fetch(const ShardInfo& s) {
    const std::string path = path_of(s.name);
    const std::string part = path + std::string(kPart);
    const std::string url = url_of(s.name);
    STRATO_RETURN_IF_ERROR(fs::ensure_dir(stdfs::path(path).parent_path()));
    int fd = -1;
    while (true) {
        STRATO_ASSIGN_OR_RETURN(bool present, verify_existing(s));
        if (present) return Status::ok();
        STRATO_ASSIGN_OR_RETURN(fd, lock_part(part));
        struct stat sb {};
        if (::stat(path.c_str(), &sb) != 0) break;
        // Another process finished it while we waited for the lock: check that file instead.
        if (::fstat(fd, &sb) == 0 && sb.st_size == 0) ::unlink(part.c_str());
        ::close(fd);
    }
    FdCloser closer{fd};
    std::string last;
    for (int pass = 0; pass < 2; ++pass) {
        Result<std::string> sha = client->get_file(url, fd, part, s.bytes);
        if (!sha.is_ok() && sha.status().code() != StatusCode::kDataLoss) return sha.status();  // .part kept
        if (sha.is_ok() && *sha == s.sha256) {
            struct stat sb {};
            if (::fsync(fd) != 0) return io_error("cannot fsync {}: {}", part, os_error());
            if (::rename(part.c_str(), path.c_str()) != 0) {
                return io_error("cannot rename {} to {}: {}", part, path, os_error());
            }
            if (::fstat(fd, &sb) != 0) return io_error("cannot stat {}: {}", path, os_error());
            return fs::atomic_write(path + std::string(kVerified), sidecar_text(s.sha256, sb));
        }
        checksum_failures += 1;
        last = sha.is_ok() ? fmt::format("fetching {}: sha256 mismatch: expected {}, got {}", url, s.sha256, *sha)
                           : sha.status().message();
        log::warn("{}; {}", last, pass == 0 ? "fetching it again from the start" : "giving up");
        if (::ftruncate(fd, 0) != 0) return io_error("cannot truncate {}: {}", part, os_error());
    }
    ::unlink(part.c_str());
    return data_loss(
        "{} (twice: the file on the server is not the one the index describes; was the dataset "
        "re-packed after its index.json was read?)",
        last);
}

bool HttpStore::Impl::make_room(int64_t need, bool for_use, const std::string& name) {
    std::unordered_set<std::string> skipped;  // in use by another process
    while (used_bytes + need > options.cache_bytes_max) {
        const std::string* victim = nullptr;
        Entry* ve = nullptr;
        int best_class = 0;
        for (auto& [n, e] : entries) {
            if (e.state != State::kReady || e.in_use || n == name || skipped.count(n)) continue;
            // Released shards go first, then idle ones by age; what prefetch brought ahead only
            // makes room for a shard needed now.
            int cls = e.released ? 0 : e.pending ? 2 : 1;
            if (cls == 2 && !for_use) continue;
            if (!victim || cls < best_class || (cls == best_class && e.last_use < ve->last_use)) {
                victim = &n;
                ve = &e;
                best_class = cls;
            }
        }
        if (!victim) return false;
        if (!evict(*victim, *ve)) skipped.insert(*victim);
    }
    return true;
}

bool HttpStore::Impl::evict(const std::string& name, Entry& e) {
    std::string path = path_of(name);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        FdCloser closer{fd};
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return false;  // another process reads it
        if (same_file(fd, path)) ::unlink(path.c_str());
    }
    ::unlink((path + std::string(kVerified)).c_str());
    log::debug("shard cache: evicted {} ({} bytes)", name, e.bytes);
    used_bytes -= e.bytes;
    e.state = State::kAbsent;
    e.verified_sha.clear();
    e.released = e.pending = false;
    ++evictions;
    return true;
}

bool HttpStore::Impl::pin(const std::string& name, Entry& e) {
    if (e.pin_fd >= 0) return true;
    std::string path = path_of(name);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    while (::flock(fd, LOCK_SH) != 0 && errno == EINTR) {
    }
    if (!same_file(fd, path)) {  // evicted by another process meanwhile
        ::close(fd);
        return false;
    }
    e.pin_fd = fd;
    return true;
}

void HttpStore::Impl::unpin(Entry& e) {
    if (e.pin_fd >= 0) ::close(e.pin_fd);
    e.pin_fd = -1;
}

void HttpStore::Impl::begin_fetch(Entry& e, const ShardInfo& s) {
    if (e.state == State::kReady) used_bytes -= e.bytes;
    e.state = State::kBusy;
    e.bytes = s.bytes;
    e.verified_sha.clear();
    e.error = Status::ok();
    e.corrupt_sha.clear();
    used_bytes += e.bytes;
}

bool HttpStore::Impl::recently_corrupt(const Entry& e, const ShardInfo& s) const {
    return e.state == State::kAbsent && !e.error.is_ok() && e.corrupt_sha == s.sha256 &&
           Clock::now() - e.corrupt_at < kCorruptRetryAfter;
}

void HttpStore::Impl::end_fetch(Entry& e, const ShardInfo& s, const Status& st, bool ahead) {
    ++e.generation;
    if (st.is_ok()) {
        e.state = State::kReady;
        e.verified_sha = s.sha256;
        e.released = false;
        e.pending = ahead && !e.in_use;
        e.last_use = ++tick;
        ++shards_fetched;
    } else {
        e.state = State::kAbsent;
        used_bytes -= e.bytes;
        e.error = st;
        if (st.code() == StatusCode::kDataLoss) e.corrupt_sha = s.sha256, e.corrupt_at = Clock::now();
    }
    ++changes;
    cv.notify_all();
}

void HttpStore::Impl::worker() {
    std::unique_lock<std::mutex> lk(mu);
    uint64_t blocked_at = ~uint64_t{0};  // `changes` when the cache last had no room
    while (true) {
        cv.wait(lk, [&] { return stopping || (!queue.empty() && changes != blocked_at); });
        if (stopping) return;
        ShardInfo s = queue.front();
        Entry& e = entries[s.name];
        if ((e.state == State::kReady && e.verified_sha == s.sha256) || e.state == State::kBusy || recently_corrupt(e, s)) {
            queue.pop_front();
            continue;
        }
        if (!make_room(s.bytes - (e.state == State::kReady ? e.bytes : 0), false, s.name)) {
            blocked_at = changes;  // wait for a release, a use, a new queue
            continue;
        }
        queue.pop_front();
        begin_fetch(e, s);
        lk.unlock();
        Status st = fetch(s);
        lk.lock();
        end_fetch(e, s, st, true);
        if (!st.is_ok() && st.code() != StatusCode::kCancelled) log::warn("prefetching shard: {}", st.message());
    }
}

void HttpStore::Impl::shutdown() {
    {
        std::lock_guard<std::mutex> lk(mu);
        stopping = true;
        queue.clear();
    }
    cv.notify_all();
    client->stop();
    for (std::thread& t : workers) t.join();
    for (auto& [name, e] : entries) unpin(e);
}

HttpStore::HttpStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpStore::~HttpStore() { impl_->shutdown(); }

std::string url_scheme(const std::string& path_or_url) {
    const size_t end = path_or_url.find("://");
    if (end == std::string::npos || end == 0) return "";
    const bool word = std::all_of(path_or_url.begin(), path_or_url.begin() + static_cast<long>(end), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
    });
    return word ? path_or_url.substr(0, end) : "";
}

bool is_remote_url(const std::string& path_or_url) {
    std::string head = path_or_url.substr(0, 8);
    std::transform(head.begin(), head.end(), head.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
    return head.starts_with("http://") || head.starts_with("https://");
}

namespace {

Status check_url(const std::string& url) {
    if (!is_remote_url(url)) {
        return invalid_argument("'{}' is not an http:// or https:// URL (remote shards are served over HTTP(S))", url);
    }
#ifndef STRATO_WITH_CURL
    return Status::ok();  // the fetch itself says this build cannot reach it (remote_fetch.cpp)
#else
    CURLU* u = curl_url();
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0);
    char* host = nullptr;
    char* query = nullptr;
    char* fragment = nullptr;
    if (rc == CURLUE_OK) {
        curl_url_get(u, CURLUPART_HOST, &host, 0);
        curl_url_get(u, CURLUPART_QUERY, &query, 0);
        curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0);
    }
    Status st;
    if (rc != CURLUE_OK) {
        st = invalid_argument("'{}' is not a valid URL: {}", url, curl_url_strerror(rc));
    } else if (host == nullptr || *host == 0) {
        st = invalid_argument("'{}' has no host (expected http(s)://HOST[:PORT]/PATH)", url);
    } else if (query != nullptr || fragment != nullptr) {
        st = invalid_argument(
            "'{}' has a ?query or #fragment; expected the base URL of the dataset, to which "
            "shard names are appended",
            url);
    }
    curl_free(host);
    curl_free(query);
    curl_free(fragment);
    curl_url_cleanup(u);
    return st;
#endif
}

Status check_options(const RemoteOptions& o) {
    auto bad = [](std::string_view what, auto got) {
        return invalid_argument("remote shard options: {}, got {}", what, got);
    };
    if (o.cache_dir.empty()) return invalid_argument("remote shards need a cache directory (cache_dir), got none");
    if (o.cache_bytes_max <= 0) return bad("cache_bytes_max must be > 0", o.cache_bytes_max);
    if (!(o.connect_timeout_s > 0)) return bad("connect_timeout_s must be > 0", o.connect_timeout_s);
    if (!(o.low_speed_time_s > 0)) return bad("low_speed_time_s must be > 0", o.low_speed_time_s);
    if (o.low_speed_bytes_per_s < 0) return bad("low_speed_bytes_per_s must be >= 0", o.low_speed_bytes_per_s);
    if (o.retry.attempts < 1) return bad("retry.attempts must be >= 1", o.retry.attempts);
    if (!(o.retry.backoff_initial_s >= 0))
        return bad("retry.backoff_initial_s must be >= 0", o.retry.backoff_initial_s);
    if (!(o.retry.backoff_max_s >= o.retry.backoff_initial_s)) {
        return bad("retry.backoff_max_s must be >= retry.backoff_initial_s", o.retry.backoff_max_s);
    }
    if (!(o.retry.total_max_s >= 0)) return bad("retry.total_max_s must be >= 0", o.retry.total_max_s);
    if (o.fetch_threads < 0 || o.fetch_threads > 64) return bad("fetch_threads must be in [0, 64]", o.fetch_threads);
    if (o.meta_bytes_max <= 0) return bad("meta_bytes_max must be > 0", o.meta_bytes_max);
    std::error_code ec;
    if (!o.ca_file.empty() && !stdfs::is_regular_file(o.ca_file, ec)) {
        return not_found("the CA file {} (ca_file) does not exist or is not a file", o.ca_file);
    }
    return Status::ok();
}

}  // namespace

Result<std::shared_ptr<HttpStore>> HttpStore::create(const std::string& base_url, const RemoteOptions& options) {
    STRATO_RETURN_IF_ERROR(check_url(base_url));
    STRATO_RETURN_IF_ERROR(check_options(options));
    auto impl = std::make_unique<Impl>();
    impl->base_url = base_url;
    while (impl->base_url.ends_with('/')) impl->base_url.pop_back();
    impl->options = options;
    impl->cache_dir = options.cache_dir;
    impl->client = std::make_unique<detail::HttpClient>(options, &impl->counters);
    STRATO_RETURN_IF_ERROR(impl->scan().with_context("opening the shard cache"));
    Impl* raw = impl.get();
    std::shared_ptr<HttpStore> store(new HttpStore(std::move(impl)));
    for (int i = 0; i < options.fetch_threads; ++i) raw->workers.emplace_back([raw] { raw->worker(); });
    return store;
}

Result<std::string> HttpStore::read_meta(const std::string& name) const {
    STRATO_RETURN_IF_ERROR(check_name(name));
    return impl_->client->get(impl_->url_of(name), impl_->options.meta_bytes_max);
}

Result<std::string> HttpStore::local_path(const ShardInfo& shard) {
    Impl& m = *impl_;
    STRATO_RETURN_IF_ERROR(m.check_shard(shard));
    const Clock::time_point t0 = Clock::now();
    bool waited = false;
    auto account = [&] {
        if (waited) {
            ++m.misses;
            m.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        } else {
            ++m.hits;
        }
    };
    std::unique_lock<std::mutex> lk(m.mu);
    Impl::Entry& e = m.entries[shard.name];
    while (true) {
        if (m.stopping) return Status{StatusCode::kCancelled, "the shard store is closing"};
        if (e.state == Impl::State::kReady && e.verified_sha == shard.sha256) {
            if (m.pin(shard.name, e)) {
                e.in_use = true;
                e.released = e.pending = false;
                e.last_use = ++m.tick;
                account();
                ++m.changes;
                m.cv.notify_all();
                return m.path_of(shard.name);
            }
            m.used_bytes -= e.bytes;  // gone: another process evicted it
            e.state = Impl::State::kAbsent;
            continue;
        }
        // The server's file failed its checksum twice: for a while it will again (a bad sample's
        // replacements in the same shard downloaded it once each).
        if (m.recently_corrupt(e, shard)) {
            waited = true;  // (no file given: a miss)
            account();
            return e.error;
        }
        waited = true;
        if (e.state == Impl::State::kBusy) {
            uint64_t generation = e.generation;
            m.cv.wait(lk, [&] { return m.stopping || e.state != Impl::State::kBusy; });
            if (e.state == Impl::State::kAbsent && e.generation != generation && !e.error.is_ok()) {
                account();
                return e.error;
            }
            continue;
        }
        int64_t need = shard.bytes - (e.state == Impl::State::kReady ? e.bytes : 0);
        if (!m.make_room(need, true, shard.name)) {
            int64_t in_use = 0;
            for (auto& [n, x] : m.entries) in_use += x.in_use || x.state == Impl::State::kBusy ? 1 : 0;
            return invalid_argument(
                "shard cache {} is full: {} of its {} bytes hold {} shards in use or being "
                "fetched, and {} needs {} more; raise the cache cap (cache_bytes_max) or release "
                "shards when done with them",
                m.cache_dir.string(), m.used_bytes, m.options.cache_bytes_max, in_use, shard.name, need);
        }
        m.begin_fetch(e, shard);
        lk.unlock();
        Status st = m.fetch(shard);
        lk.lock();
        m.end_fetch(e, shard, st, false);
        if (!st.is_ok()) {
            account();
            return st;
        }
    }
}

void HttpStore::prefetch(const std::vector<ShardInfo>& shards) {
    Impl& m = *impl_;
    std::lock_guard<std::mutex> lk(m.mu);
    m.queue.clear();
    if (m.options.fetch_threads == 0) return;
    std::unordered_set<std::string> listed;
    for (const ShardInfo& s : shards) listed.insert(s.name);
    for (auto& [name, e] : m.entries) {
        if (!listed.count(name)) e.pending = false;
    }
    std::unordered_set<std::string> queued;
    for (const ShardInfo& s : shards) {
        Status st = m.check_shard(s);
        if (!st.is_ok()) {
            if (!m.warned_prefetch_cap) log::warn("prefetch: {}", st.message());
            m.warned_prefetch_cap = true;
            continue;
        }
        if (!queued.insert(s.name).second) continue;
        Impl::Entry& e = m.entries[s.name];
        if (e.state == Impl::State::kReady && e.verified_sha == s.sha256) {
            if (!e.in_use && !e.released) e.pending = true;
            continue;
        }
        if (e.state != Impl::State::kBusy) m.queue.push_back(s);
    }
    ++m.changes;
    m.cv.notify_all();
}

void HttpStore::release(const ShardInfo& shard) {
    Impl& m = *impl_;
    std::lock_guard<std::mutex> lk(m.mu);
    auto it = m.entries.find(shard.name);
    if (it == m.entries.end()) return;
    Impl::Entry& e = it->second;
    e.in_use = false;
    m.unpin(e);
    if (e.state == Impl::State::kReady) {
        e.released = true;
        e.pending = false;
        e.last_use = ++m.tick;
    }
    ++m.changes;
    m.cv.notify_all();
}

std::string HttpStore::describe() const { return impl_->base_url; }

std::string HttpStore::url_of(const std::string& name) const { return impl_->url_of(name); }

RemoteStats HttpStore::stats() const {
    Impl& m = *impl_;
    RemoteStats s;
    s.bytes_fetched = m.counters.bytes;
    s.retries = m.counters.retries;
    s.resumes = m.counters.resumes;
    s.checksum_failures = m.checksum_failures;
    std::lock_guard<std::mutex> lk(m.mu);
    s.shards_fetched = m.shards_fetched;
    s.cache_hits = m.hits;
    s.cache_misses = m.misses;
    s.evictions = m.evictions;
    s.cache_bytes = m.used_bytes;
    s.wait_seconds = m.wait_seconds;
    return s;
}

Result<std::shared_ptr<ShardStore>> open_shard_store(const std::string& path_or_url, const RemoteOptions& options) {
    if (is_remote_url(path_or_url)) {
        STRATO_ASSIGN_OR_RETURN(std::shared_ptr<HttpStore> store, HttpStore::create(path_or_url, options));
        return std::shared_ptr<ShardStore>(std::move(store));
    }
    if (const std::string scheme = url_scheme(path_or_url); !scheme.empty()) {
        return invalid_argument(
            "'{}': the {}:// scheme is not supported (expected a directory, or an http:// or "
            "https:// URL; for S3 or GCS use an https URL of the bucket)",
            path_or_url, scheme);
    }
    std::error_code ec;
    if (!stdfs::is_directory(path_or_url, ec)) {
        return not_found(
            "shard directory {} does not exist (expected a directory written by `strato data pack`, or "
            "an http:// or https:// URL)",
            path_or_url);
    }
    return std::shared_ptr<ShardStore>(std::make_shared<LocalStore>(path_or_url));
}

}  // namespace strato::data
