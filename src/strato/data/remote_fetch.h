#pragma once
// HTTP(S) GETs with the retry policy of remote shards (remote.h), on libcurl: a small file into
// memory, or a shard into a file descriptor, resuming a partial file with a Range request.
// Internal to HttpStore.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "strato/core/status.h"
#include "strato/data/remote.h"

typedef void CURL;  // NOLINT: libcurl's own spelling, so <curl/curl.h> stays out of this header

namespace strato::data::detail {

struct FetchCounters {
    std::atomic<int64_t> bytes{0};
    std::atomic<int64_t> retries{0};
    std::atomic<int64_t> resumes{0};
};

/// Thread-safe: each request borrows a curl handle from a pool (kept, so connections are reused).
class HttpClient {
  public:
    HttpClient(const RemoteOptions& options, FetchCounters* counters);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    /// The whole body of `url`, at most `max_bytes`. 404 and 410 are not_found.
    Result<std::string> get(const std::string& url, int64_t max_bytes);
    /// Makes the file behind `fd` (which may hold the first bytes already, from a dropped
    /// transfer) hold the `expected` bytes of `url`: asks for the rest with `Range: bytes=N-`,
    /// appends on 206 and starts over on 200. Returns the sha256 (hex) of the whole file. A
    /// server whose file has another size is data_loss; `what` names `fd`'s file for messages.
    Result<std::string> get_file(const std::string& url, int fd, const std::string& what, int64_t expected);

    /// Aborts transfers in flight and backoff waits; every later request fails as cancelled.
    void stop();
    bool stopped() const { return stop_.load(); }
    /// Sleeps up to `seconds`; false if stop() came first.
    bool sleep_for(double seconds);

    struct Attempt;  // one request's state, as libcurl's callbacks see it

  private:
    CURL* acquire();
    void give_back(CURL* curl);
    void setup(CURL* curl, const std::string& url, Attempt* attempt, int64_t range_from) const;
    /// Runs `attempt_once` under the retry policy. `attempt_once` returns true when done
    /// (successfully or with an error that retrying cannot fix) and sets `*progress` when it
    /// received data.
    template <typename F>
    Status with_retries(const std::string& url, F&& attempt_once);

    RemoteOptions options_;
    FetchCounters* counters_;
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::condition_variable stop_cv_;
    std::vector<CURL*> idle_;
};

/// The sha256 (hex) of the first `bytes` bytes of `fd`.
Result<std::string> sha256_fd(int fd, int64_t bytes, const std::string& what);

}  // namespace strato::data::detail
