#include "strato/data/remote_fetch.h"

#ifdef STRATO_WITH_CURL
#include <curl/curl.h>
#endif
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "strato/core/log.h"
#include "strato/core/signals.h"

namespace strato::data::detail {
namespace {

using Clock = std::chrono::steady_clock;

// A stop signal ends a fetch that is still running 10 s after it: a training stops at its next
// step boundary (checkpointed, ranks agreeing by vote), which a fetch ended at once would break
// (an error in the middle of a step, one rank gone); a stalled server cannot hold the stop longer.
constexpr auto kStopGrace = std::chrono::seconds(10);

bool stop_insisted() {
    static std::atomic<int64_t> since{0};  // steady-clock ns when the fetches first saw the signal
    if (!signals::stop_requested()) {
        since.store(0);  // (signals::reset(): a later signal gets its own grace)
        return false;
    }
    const int64_t now = Clock::now().time_since_epoch().count();
    int64_t none = 0;
    since.compare_exchange_strong(none, now);
    return now - since.load() >= std::chrono::duration_cast<Clock::duration>(kStopGrace).count();
}

struct EvpFree {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using Sha256 = std::unique_ptr<EVP_MD_CTX, EvpFree>;

Sha256 new_sha256() {
    Sha256 ctx(EVP_MD_CTX_new());
    EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
    return ctx;
}

std::string hex_digest(EVP_MD_CTX* ctx) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, digest, &len);
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out.push_back(kHex[digest[i] >> 4]);
        out.push_back(kHex[digest[i] & 15]);
    }
    return out;
}

Status hash_prefix(EVP_MD_CTX* ctx, int fd, int64_t bytes, const std::string& what) {
    std::vector<char> buf(size_t{1} << 20);
    int64_t pos = 0;
    while (pos < bytes) {
        size_t want = static_cast<size_t>(std::min<int64_t>(bytes - pos, static_cast<int64_t>(buf.size())));
        ssize_t n = ::pread(fd, buf.data(), want, pos);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error("cannot read {}: {}", what, std::strerror(errno));
        if (n == 0) return data_loss("{} ends after {} bytes, expected {}", what, pos, bytes);
        EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(n));
        pos += n;
    }
    return Status::ok();
}

#ifdef STRATO_WITH_CURL
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// "Connection refused" -> "connection refused"; "SSL certificate problem" stays.
std::string lower_first(std::string s) {
    if (s.size() >= 2 && std::isupper(static_cast<unsigned char>(s[0])) &&
        !std::isupper(static_cast<unsigned char>(s[1]))) {
        s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
    }
    return s;
}

std::string format_seconds(double s) { return s < 10 ? fmt::format("{:.1f}", s) : fmt::format("{:.0f}", s); }

/// What one attempt came to: done (ok or an error retrying cannot fix), or a failure worth
/// retrying, described by `status` and `hint`.
struct Outcome {
    Status status;
    bool retry = false;
    bool progress = false;
    std::string hint;
};

std::once_flag g_curl_init;
#endif  // STRATO_WITH_CURL

}  // namespace

#ifdef STRATO_WITH_CURL

/// The state the libcurl callbacks of one request see.
struct HttpClient::Attempt {
    HttpClient* client = nullptr;
    CURL* curl = nullptr;
    char errbuf[CURL_ERROR_SIZE] = {0};
    // Into memory:
    std::string* body = nullptr;
    int64_t body_max = 0;
    // Into a file:
    int fd = -1;
    const std::string* what = nullptr;
    int64_t offset = 0;  // bytes of the file on disk (and hashed)
    int64_t expected = 0;
    EVP_MD_CTX* sha = nullptr;

    bool decided = false;  // the response code was looked at (first body bytes)
    long status = 0;
    int64_t range_start = -1;  // from Content-Range
    int64_t received = 0;
    Status error;  // set by a callback that stopped the transfer; not retried

    bool accept(size_t n);
    bool write_file(const char* p, size_t n);
};

bool HttpClient::Attempt::accept(size_t n) {
    decided = true;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200 && status != 206) return true;  // an error page: dropped, judged by the status
    curl_off_t length = -1;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (fd < 0) {
        if (length > body_max || static_cast<int64_t>(n) > body_max) {
            error = invalid_argument("the file is larger than the {} bytes a metadata file may have", body_max);
            return false;
        }
        return true;
    }
    if (status == 206) {
        if (range_start != offset) {
            error = data_loss("asked for the bytes from {} on, the server sent them from {}", offset, range_start);
            return false;
        }
        client->counters_->resumes += 1;
    } else if (offset > 0) {  // 200: the server ignored the Range; start over
        if (::ftruncate(fd, 0) != 0) {
            error = io_error("cannot truncate {}: {}", *what, std::strerror(errno));
            return false;
        }
        offset = 0;
        EVP_DigestInit_ex(sha, EVP_sha256(), nullptr);
    }
    int64_t total = length < 0 ? -1 : offset + static_cast<int64_t>(length);
    if (total >= 0 && total != expected) {
        error = data_loss("the server has {} bytes, the index says {}", total, expected);
        return false;
    }
    return true;
}

bool HttpClient::Attempt::write_file(const char* p, size_t n) {
    if (offset + static_cast<int64_t>(n) > expected) {
        error = data_loss("the server sent more than the {} bytes the index says", expected);
        return false;
    }
    EVP_DigestUpdate(sha, p, n);
    size_t done = 0;
    while (done < n) {
        ssize_t w = ::pwrite(fd, p + done, n - done, offset + static_cast<int64_t>(done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            error = io_error("cannot write {}: {}", *what, std::strerror(errno));
            return false;
        }
        done += static_cast<size_t>(w);
    }
    offset += static_cast<int64_t>(n);
    return true;
}

namespace {

size_t on_write(char* p, size_t size, size_t count, void* user) {
    auto* a = static_cast<HttpClient::Attempt*>(user);
    size_t n = size * count;
    if (!a->decided && !a->accept(n)) return 0;
    if (a->status != 200 && a->status != 206) return n;
    if (a->fd >= 0) {
        if (!a->write_file(p, n)) return 0;
    } else {
        if (static_cast<int64_t>(a->body->size() + n) > a->body_max) {
            a->error = invalid_argument("the file is larger than the {} bytes a metadata file may have", a->body_max);
            return 0;
        }
        a->body->append(p, n);
    }
    a->received += static_cast<int64_t>(n);
    return n;
}

size_t on_header(char* p, size_t size, size_t count, void* user) {
    auto* a = static_cast<HttpClient::Attempt*>(user);
    size_t n = size * count;
    std::string_view line(p, n);
    if (line.starts_with("HTTP/")) a->range_start = -1;  // a new response (after a redirect)
    constexpr std::string_view kRange = "content-range:";
    if (line.size() > kRange.size()) {
        std::string key(line.substr(0, kRange.size()));
        std::transform(key.begin(), key.end(), key.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
        if (key == kRange) {
            std::string value(line.substr(kRange.size()));
            long long start = -1;
            if (std::sscanf(value.c_str(), " bytes %lld-", &start) == 1) a->range_start = start;
        }
    }
    return n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* a = static_cast<HttpClient::Attempt*>(user);
    // A stop signal ends the fetch after a grace (a stalled server held the first signal for minutes)
    return a->client->stopped() || stop_insisted() ? 1 : 0;
}

Outcome judge(CURLcode rc, const HttpClient::Attempt& a, const std::string& url) {
    Outcome o;  // (progress: set by get_file, where the file's length tells it)
    if (!a.error.is_ok()) {
        o.status = a.error.with_context("fetching " + url);
        return o;
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
        o.status = {StatusCode::kCancelled, fmt::format("fetching {}: cancelled ({})", url,
                                                        a.client->stopped() ? "the store is closing" : "a stop signal")};
        return o;
    }
    if (rc != CURLE_OK) {
        std::string what = a.errbuf[0] ? a.errbuf : curl_easy_strerror(rc);
        long os_errno = 0;
        curl_easy_getinfo(a.curl, CURLINFO_OS_ERRNO, &os_errno);
        switch (rc) {
            case CURLE_COULDNT_CONNECT:
                if (os_errno != 0) what = lower_first(std::strerror(static_cast<int>(os_errno)));
                o.hint = " (the server went away?)";
                o.retry = true;
                break;
            case CURLE_COULDNT_RESOLVE_HOST:
            case CURLE_COULDNT_RESOLVE_PROXY:
                o.hint = " (is the host name right?)";
                o.retry = true;
                break;
            case CURLE_OPERATION_TIMEDOUT:
                o.hint = " (a slow or broken network? see the connect and low-speed timeouts)";
                o.retry = true;
                break;
            case CURLE_PARTIAL_FILE:
            case CURLE_RECV_ERROR:
            case CURLE_SEND_ERROR:
            case CURLE_GOT_NOTHING:
            case CURLE_HTTP2:
            case CURLE_HTTP2_STREAM:
            case CURLE_SSL_CONNECT_ERROR:
                o.hint = " (the connection dropped)";
                o.retry = true;
                break;
            case CURLE_FILESIZE_EXCEEDED:
                o.status = invalid_argument(
                    "fetching {}: the file is larger than the {} bytes a metadata file may have", url, a.body_max);
                return o;
            case CURLE_PEER_FAILED_VERIFICATION:
            case CURLE_SSL_CACERT_BADFILE:
            case CURLE_SSL_CERTPROBLEM:
                o.status = {StatusCode::kPermissionDenied,
                            fmt::format("fetching {}: {} (to trust the server's certificate, give the CA file of its "
                                        "issuer: ca_file; for a test server only, turn tls_verify off)",
                                        url, lower_first(what))};
                return o;
            default:
                break;
        }
        o.status = {StatusCode::kUnavailable, fmt::format("fetching {}: {}", url, lower_first(what))};
        return o;
    }
    switch (a.status) {
        case 200:
        case 206:
            return o;
        case 404:
        case 410:
            o.status =
                not_found("fetching {}: HTTP {}: no such file on the server (is the base URL right?)", url, a.status);
            return o;
        case 401:
        case 403:
            o.status = {StatusCode::kPermissionDenied,
                        fmt::format("fetching {}: HTTP {}: the server refuses access", url, a.status)};
            return o;
        case 408:
        case 425:
        case 429:
        case 500:
        case 502:
        case 503:
        case 504:
            o.status = {StatusCode::kUnavailable, fmt::format("fetching {}: HTTP {}", url, a.status)};
            o.hint = " (the server is overloaded or failing)";
            o.retry = true;
            return o;
        default:
            o.status = {StatusCode::kUnavailable, fmt::format("fetching {}: unexpected HTTP {}", url, a.status)};
            return o;
    }
}

}  // namespace

HttpClient::HttpClient(const RemoteOptions& options, FetchCounters* counters) : options_(options), counters_(counters) {
    std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

HttpClient::~HttpClient() {
    for (CURL* c : idle_) curl_easy_cleanup(c);
}

void HttpClient::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    stop_cv_.notify_all();
}

bool HttpClient::sleep_for(double seconds) {
    std::unique_lock<std::mutex> lk(mu_);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                std::chrono::duration<double>(seconds));
    // (in slices: a stop signal sets a flag, it notifies no condition variable)
    while (!stop_ && !stop_insisted() && std::chrono::steady_clock::now() < until)
        stop_cv_.wait_for(lk, std::min<std::chrono::steady_clock::duration>(until - std::chrono::steady_clock::now(),
                                                                            std::chrono::milliseconds(100)),
                          [&] { return stop_.load(); });
    return !stop_ && !stop_insisted();
}

CURL* HttpClient::acquire() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!idle_.empty()) {
            CURL* c = idle_.back();
            idle_.pop_back();
            return c;
        }
    }
    return curl_easy_init();
}

void HttpClient::give_back(CURL* curl) {
    std::lock_guard<std::mutex> lk(mu_);
    idle_.push_back(curl);
}

void HttpClient::setup(CURL* c, const std::string& url, Attempt* a, int64_t range_from) const {
    curl_easy_reset(c);
    a->curl = c;
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "strato");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options_.low_speed_bytes_per_s));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, std::lround(options_.low_speed_time_s)));
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, a->errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, a);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (!options_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options_.ca_file.c_str());
    if (!options_.tls_verify) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (range_from > 0) curl_easy_setopt(c, CURLOPT_RANGE, fmt::format("{}-", range_from).c_str());
}

template <typename F>
Status HttpClient::with_retries(const std::string& url, F&& attempt_once) {
    const RetryPolicy& policy = options_.retry;
    Clock::time_point t0 = Clock::now();
    int n = 0;  // attempts since the last one that made progress
    while (true) {
        if (stop_ || stop_insisted())
            return {StatusCode::kCancelled, fmt::format("fetching {}: cancelled ({})", url,
                                                        stop_ ? "the store is closing" : "a stop signal")};
        ++n;
        Outcome o = attempt_once();
        if (!o.retry) return o.status;
        if (o.progress) {  // it got somewhere: the count starts afresh from this attempt
            n = 1;
            t0 = Clock::now();
        }
        double delay = std::min(policy.backoff_max_s, policy.backoff_initial_s * std::pow(2.0, n - 1));
        double elapsed = seconds_since(t0);
        if (n >= policy.attempts || elapsed + delay > policy.total_max_s) {
            std::string message = o.status.message();
            return {StatusCode::kUnavailable, fmt::format("{} after {} attempt{} over {} s{}", message, n,
                                                          n == 1 ? "" : "s", format_seconds(elapsed), o.hint)};
        }
        log::warn("{}; retry {} of {} in {} s", o.status.message(), n, policy.attempts - 1, format_seconds(delay));
        counters_->retries += 1;
        if (!sleep_for(delay)) {
            return {StatusCode::kCancelled, fmt::format("fetching {}: cancelled ({})", url,
                                                        stop_ ? "the store is closing" : "a stop signal")};
        }
    }
}

Result<std::string> HttpClient::get(const std::string& url, int64_t max_bytes) {
    std::string body;
    Status st = with_retries(url, [&] {
        body.clear();
        Attempt a;
        a.client = this;
        a.body = &body;
        a.body_max = max_bytes;
        a.what = &url;
        CURL* c = acquire();
        setup(c, url, &a, -1);
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_bytes));
        CURLcode rc = curl_easy_perform(c);
        Outcome o = judge(rc, a, url);
        give_back(c);
        counters_->bytes += a.received;
        return o;
    });
    if (!st.is_ok()) return st;
    return body;
}

Result<std::string> HttpClient::get_file(const std::string& url, int fd, const std::string& what, int64_t expected) {
    struct stat sb {};
    if (::fstat(fd, &sb) != 0) return io_error("cannot stat {}: {}", what, std::strerror(errno));
    int64_t offset = sb.st_size;
    if (offset > expected) {
        if (::ftruncate(fd, 0) != 0) return io_error("cannot truncate {}: {}", what, std::strerror(errno));
        offset = 0;
    }
    Sha256 sha = new_sha256();
    if (offset > 0) STRATO_RETURN_IF_ERROR(hash_prefix(sha.get(), fd, offset, what));
    if (offset == expected) return hex_digest(sha.get());
    // Progress is the file growing past the most it ever had: a server that ignores Range, starts
    // over and stalls after a few bytes each time made "progress" forever (the retry limits never came).
    int64_t most = offset;
    Status st = with_retries(url, [&] {
        Attempt a;
        a.client = this;
        a.fd = fd;
        a.what = &what;
        a.offset = offset;
        a.expected = expected;
        a.sha = sha.get();
        CURL* c = acquire();
        setup(c, url, &a, offset);
        CURLcode rc = curl_easy_perform(c);
        if (rc == CURLE_OK && a.status == 416 && offset > 0) {  // the part is no prefix of the file: start over
            if (::ftruncate(fd, 0) == 0) {
                EVP_DigestInit_ex(sha.get(), EVP_sha256(), nullptr);
                a = Attempt{};
                a.client = this;
                a.fd = fd;
                a.what = &what;
                a.expected = expected;
                a.sha = sha.get();
                offset = 0;
                setup(c, url, &a, 0);
                rc = curl_easy_perform(c);
            }
        }
        Outcome o = judge(rc, a, url);
        give_back(c);
        counters_->bytes += a.received;
        offset = a.offset;
        // (a 200 after the first attempt started over: whatever it got, the file got no further)
        o.progress = offset > most && (a.status == 206 || most == 0);
        most = std::max(most, offset);
        if (o.status.is_ok() && offset != expected) {
            o.status = data_loss("fetching {}: the server sent {} bytes, the index says {}", url, offset, expected);
        }
        return o;
    });
    if (!st.is_ok()) return st;
    return hex_digest(sha.get());
}

#else  // built without libcurl (-DSTRATO_WITH_CURL=OFF, as the minimal subset is)

namespace {
Status no_curl(const std::string& url) {
    return Status(StatusCode::kUnimplemented,
                  fmt::format("fetching {}: this strato was built without libcurl (-DSTRATO_WITH_CURL=OFF), so it "
                              "cannot read remote datasets\nhint: copy the shards to a local directory, or use a full build",
                              url));
}
}  // namespace

HttpClient::HttpClient(const RemoteOptions& options, FetchCounters* counters) : options_(options), counters_(counters) {}
HttpClient::~HttpClient() = default;
void HttpClient::stop() { stop_ = true; }
bool HttpClient::sleep_for(double) { return !stop_; }
Result<std::string> HttpClient::get(const std::string& url, int64_t) { return no_curl(url); }
Result<std::string> HttpClient::get_file(const std::string& url, int, const std::string&, int64_t) { return no_curl(url); }

#endif  // STRATO_WITH_CURL

Result<std::string> sha256_fd(int fd, int64_t bytes, const std::string& what) {
    Sha256 sha = new_sha256();
    STRATO_RETURN_IF_ERROR(hash_prefix(sha.get(), fd, bytes, what));
    return hex_digest(sha.get());
}

}  // namespace strato::data::detail
