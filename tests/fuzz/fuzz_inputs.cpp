// libFuzzer target for the files and byte streams strato reads that a user, a dataset or a remote
// server controls, apart from inference requests and images (fuzz_request, fuzz_image):
// training and study configs with --set overrides, alert rules, autoscaling policies, serve's
// config.toml, the cloud catalog and traffic traces, tabular CSV datasets, tar shards with their index and content manifests, IDX arrays,
// and the load generator's HTTP response parser fed in random pieces.
//   tests/fuzz/run.sh SECONDS inputs   (builds with clang -fsanitize=fuzzer,address,undefined)
//
// The first byte picks the reader; the rest is its input. Every reader must answer with a value
// or an error Status: a crash, a sanitizer report or an uncaught exception is a bug.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "strato/cloud/autoscale.h"
#include "strato/cloud/catalog.h"
#include "strato/cloud/simulator.h"
#include "strato/data/csv.h"
#include "strato/data/idx.h"
#include "strato/data/manifest.h"
#include "strato/data/shards.h"
#include "strato/data/tar.h"
#include "strato/loadgen/http_parse.h"
#include "strato/loadgen/schedule.h"
#include "strato/monitor/alerts.h"
#include "strato/serve/repository/model_config.h"
#include "strato/train/train_config.h"
#include "strato/tune/space.h"

namespace {

using namespace strato;

// Splits `text` at lines "----" into parts, so one input can carry several files (a catalog's
// three tables) or a config and its --set overrides.
std::vector<std::string_view> split_parts(std::string_view text) {
    std::vector<std::string_view> parts;
    for (;;) {
        size_t cut = text.find("\n----\n");
        parts.push_back(text.substr(0, cut));
        if (cut == std::string_view::npos) return parts;
        text.remove_prefix(cut + 6);
    }
}

std::string_view part(const std::vector<std::string_view>& parts, size_t i) { return i < parts.size() ? parts[i] : std::string_view(); }

void train_config(std::string_view text) {
    auto parts = split_parts(text);
    std::vector<std::string> overrides(parts.begin() + 1, parts.end());
    auto cfg = config::load_string<train::TrainConfig>(parts[0], overrides);
    if (!cfg.is_ok()) return;
    (void)cfg->validate();
    (void)cfg->run_dir();
    // What parses must print back into TOML that parses into the same config.
    std::string dumped = config::dump(*cfg);
    auto again = config::load_string<train::TrainConfig>(dumped);
    if (!again.is_ok()) {
        fprintf(stderr, "dumped config does not parse: %s\n%s\n", again.status().message().c_str(), dumped.c_str());
        std::abort();
    }
    if (config::dump(*again) != dumped) {
        fprintf(stderr, "dumped config changes when parsed again:\n%s\n", dumped.c_str());
        std::abort();
    }
}

void http_response(std::string_view bytes) {
    // Byte 0: piece size (1..64) and whether to keep the body; the rest arrives in pieces, as from
    // a socket, and may hold several responses back to back.
    if (bytes.empty()) return;
    size_t piece = static_cast<uint8_t>(bytes[0]) % 64 + 1;
    bool keep = bytes[0] & 0x40;
    bytes.remove_prefix(1);
    loadgen::ResponseParser p;
    p.keep_body(keep);
    size_t pos = 0;
    while (pos < bytes.size()) {
        size_t n = std::min(piece, bytes.size() - pos);
        size_t used = p.feed(bytes.data() + pos, n);
        if (used > n) std::abort();
        pos += used;
        if (p.failed()) return;
        if (p.done()) {
            if (p.body_size() < 0 || p.bytes() < 0) std::abort();
            if (keep && static_cast<int64_t>(p.body().size()) != p.body_size()) std::abort();
            p.reset();
            p.keep_body(keep);
        } else if (used == 0) {
            std::abort();  // neither done, failed nor consuming: a stuck parser
        }
    }
    if (p.started()) p.finish_on_eof();
    (void)loadgen::parse_url(bytes.substr(0, std::min<size_t>(bytes.size(), 256)));
}

void idx_file(std::string_view bytes) {
    // read_idx takes a path: hand it an in-memory file.
    int fd = memfd_create("fuzz.idx", 0);
    if (fd < 0) return;
    size_t off = 0;
    while (off < bytes.size()) {
        ssize_t w = write(fd, bytes.data() + off, bytes.size() - off);
        if (w <= 0) break;
        off += static_cast<size_t>(w);
    }
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    auto a = data::read_idx(path);
    (void)a;
    close(fd);
}

}  // namespace

// The catalog's built-in tables are generated into the build tree; the fuzzer brings its own.
namespace strato::cloud::detail {
const char* const kInstancesCsv = "";
const char* const kGpusCsv = "";
const char* const kSpotCsv = "";
}  // namespace strato::cloud::detail

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* raw, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = raw[0];
    std::string_view rest(reinterpret_cast<const char*>(raw) + 1, size - 1);
    switch (mode % 12) {
        case 0:
            train_config(rest);
            break;
        case 1: {
            auto s = tune::StudyConfig::parse(rest, "fuzz-study.toml", "/nonexistent");
            if (s.is_ok()) (void)tune::validate_against_train_config(*s);
            break;
        }
        case 2:
            (void)monitor::parse_rules(rest, "fuzz-alerts.toml");
            (void)monitor::parse_condition(rest.substr(0, std::min<size_t>(rest.size(), 200)));
            break;
        case 3: {
            // instances, GPUs and spot CSV tables, then an overrides TOML, split by "----" lines.
            auto p = split_parts(rest);
            auto c = cloud::Catalog::parse(part(p, 0), "instances.csv", part(p, 1), "gpus.csv", part(p, 2), "spot.csv");
            if (c.is_ok() && p.size() > 3) (void)c->apply_overrides(p[3], "overrides.toml");
            break;
        }
        case 4:
            // The same text as the simulator's trace, the load generator's rate trace and its
            // perf_analyzer interval list; a schedule that parses is also walked.
            (void)cloud::parse_trace(rest, "fuzz-trace.csv");
            for (auto s : {loadgen::Schedule::from_rate_trace(rest, "fuzz-trace.csv", 1 + (rest.size() % 7), 0.5),
                           loadgen::Schedule::from_intervals(rest, "fuzz-intervals.txt")}) {
                if (!s.is_ok()) continue;
                for (double u : {0.0, 0.5, 1.0, 7.0, s->requests_per_period() * 2.5})
                    (void)s->count_at(s->offset_ns(u));
            }
            break;
        case 5: {
            data::CsvOptions o;
            if (!rest.empty() && rest[0] == ';') o.delimiter = ';';
            auto ds = data::CsvDataset::parse(rest, "fuzz.csv", o);
            if (ds.is_ok() && (*ds)->size() > 0) {
                std::vector<double> mean, sd;
                (void)data::feature_stats(**ds, &mean, &sd);
            }
            break;
        }
        case 6: {
            auto members = data::list_tar_bytes(rest, "fuzz.tar");
            if (members.is_ok()) {
                for (const auto& m : *members)
                    if (m.data_offset < 0 || m.size < 0 || m.data_offset + m.size > static_cast<int64_t>(rest.size())) std::abort();
            }
            break;
        }
        case 7:
            (void)data::parse_shard_index(rest, "fuzz-index.json");
            break;
        case 8:
            (void)data::manifest_from_json(std::string(rest), "fuzz-manifest.json");
            break;
        case 10:
            (void)cloud::AutoscaleConfig::parse(rest, "fuzz-policy.toml");
            break;
        case 11:
            (void)serve::parse_model_config_toml(rest, "fuzz/config.toml");
            break;
        default:
            if (mode & 0x80)
                http_response(rest);
            else
                idx_file(rest);
            break;
    }
    return 0;
}
