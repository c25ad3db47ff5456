#pragma once
// Shards on an HTTP(S) server (`strato data pack` output served by nginx, S3 through a
// presigned or public https URL, any static file server), made available as local files
// through a bounded on-disk cache. See docs/data.md ("Remote shards") for the behaviour in full.

#include <cstdint>
#include <memory>
#include <string>

#include "strato/data/source.h"

namespace strato::data {

/// How hard a request is tried before it fails: attempt k+1 starts backoff_initial_s * 2^(k-1)
/// seconds (at most backoff_max_s) after attempt k failed, and none starts once total_max_s
/// have passed since the first. An attempt that received data starts the count afresh (a long
/// download over a flaky link keeps going while it makes progress). The defaults try 6 times
/// over ~31 s of waiting.
struct RetryPolicy {
    int attempts = 6;
    double backoff_initial_s = 1.0;
    double backoff_max_s = 16.0;
    double total_max_s = 90.0;
};

struct RemoteOptions {
    /// Where fetched shards are kept: <cache_dir>/<shard name>, with <name>.part while it
    /// downloads and <name>.verified recording its checksum. Required for http(s) URLs; it is
    /// created. Several processes may share it (downloads are locked; files appear by rename).
    std::string cache_dir;
    /// The cache never holds more than this (shards in use at once excepted: an error says so).
    int64_t cache_bytes_max = int64_t{64} << 30;
    double connect_timeout_s = 10.0;
    /// A transfer slower than low_speed_bytes_per_s for low_speed_time_s is dropped (and retried).
    int64_t low_speed_bytes_per_s = 1024;
    double low_speed_time_s = 30.0;
    RetryPolicy retry;
    /// Background threads fetching what `prefetch` asked for; 0 turns prefetching off.
    int fetch_threads = 2;
    /// PEM file of the certificate authorities to trust for https (default: the system's).
    std::string ca_file;
    /// Turns certificate and host name checks off (tests with self-signed certificates only).
    bool tls_verify = true;
    /// read_meta refuses files larger than this.
    int64_t meta_bytes_max = int64_t{256} << 20;
};

/// Counters for reports, totals since the store was created.
struct RemoteStats {
    int64_t bytes_fetched = 0;      // body bytes received (shards and metadata)
    int64_t shards_fetched = 0;     // shards downloaded (or found in the cache) and verified
    int64_t cache_hits = 0;         // local_path found the shard present and verified
    int64_t cache_misses = 0;       // local_path fetched it or waited for a fetch in flight
    int64_t retries = 0;            // attempts after a failed one
    int64_t resumes = 0;            // downloads continued with a Range request (206)
    int64_t checksum_failures = 0;  // downloads whose size or sha256 did not match the index
    int64_t evictions = 0;          // shards deleted from the cache to make room
    int64_t cache_bytes = 0;        // bytes of shards in the cache now (as this process knows it)
    double wait_seconds = 0;        // time callers spent blocked in local_path
};

/// A ShardStore over http:// or https://: `local_path` returns <cache_dir>/<name> once the
/// file is there and its size and sha256 match the ShardInfo, fetching it first when needed
/// (resuming a dropped transfer with a Range request, retrying by RetryPolicy). `prefetch`
/// queues shards for background threads, which fetch them in order while the cache has room:
/// they evict released shards first (oldest release first), then the least recently used ones
/// nobody holds; they never evict a shard in use (local_path'd and not released since) nor one
/// prefetched and not yet used. Thread-safe. The destructor aborts transfers in flight.
///
///     RemoteOptions o;
///     o.cache_dir = "/scratch/strato-cache/train";
///     auto store = HttpStore::create("https://data.example.com/train", o).value();
///     auto index = store->read_meta("index.json");
///     store->prefetch(shards_in_epoch_order);
///     std::string path = store->local_path(shards[0]).value();  // read it, then:
///     store->release(shards[0]);
class HttpStore final : public ShardStore {
  public:
    /// Validates the options and the URL (http:// or https://, a host, no ?query), creates the
    /// cache directory and takes stock of what it holds, starts the fetch threads.
    static Result<std::shared_ptr<HttpStore>> create(const std::string& base_url, const RemoteOptions& options);
    ~HttpStore() override;
    HttpStore(const HttpStore&) = delete;
    HttpStore& operator=(const HttpStore&) = delete;

    /// GETs base_url/name into memory (retried; at most meta_bytes_max; 404 is not_found).
    Result<std::string> read_meta(const std::string& name) const override;
    /// Blocks until the shard is in the cache and verified; marks it in use until `release`.
    Result<std::string> local_path(const ShardInfo& shard) override;
    /// Replaces the queue of shards the background threads fetch ahead of use.
    void prefetch(const std::vector<ShardInfo>& shards) override;
    void release(const ShardInfo& shard) override;
    /// The base URL, without a trailing slash.
    std::string describe() const override;

    RemoteStats stats() const;
    /// The URL a shard or metadata file is fetched from.
    std::string url_of(const std::string& name) const;

    struct Impl;

  private:
    explicit HttpStore(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

/// True for http:// and https:// URLs (case-insensitive scheme).
bool is_remote_url(const std::string& path_or_url);
/// The scheme of a text that reads as a URL ("s3" of "s3://bucket/x"), else "".
std::string url_scheme(const std::string& path_or_url);

/// An HttpStore for http(s):// URLs, a LocalStore (shards.h) for a directory; another URL
/// scheme (s3://, gs://) is an error that says which schemes work.
Result<std::shared_ptr<ShardStore>> open_shard_store(const std::string& path_or_url, const RemoteOptions& options);

}  // namespace strato::data
