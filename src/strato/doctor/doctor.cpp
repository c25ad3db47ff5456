#include "strato/doctor/doctor.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "strato/core/cgroup.h"
#include "strato/core/parse.h"
#include "strato/data/dataset.h"
#include "strato/monitor/nvml.h"
#include "strato/train/trainer.h"

namespace strato::doctor {
namespace stdfs = std::filesystem;

const char* level_name(Level l) {
    switch (l) {
        case Level::kOk: return "ok";
        case Level::kWarn: return "warn";
        case Level::kFail: return "FAIL";
    }
    return "?";
}

namespace {

std::set<std::string> cpu_flags() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    std::set<std::string> flags;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) == 0) {
            std::istringstream ss(line.substr(line.find(':') + 1));
            std::string f;
            while (ss >> f) flags.insert(f);
            break;
        }
    }
    return flags;
}

// (A "model name\t:" line with nothing after the colon threw std::out_of_range: doctor aborted.)
std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        const auto colon = line.find(':');
        if (line.rfind("model name", 0) == 0 && colon != std::string::npos)
            if (std::string v(trim_blanks(std::string_view(line).substr(colon + 1))); !v.empty()) return v;
    }
    return "unknown";
}

/// The BLAS library mapped into this process after a matrix product.
// The library that serves libtorch's matrix products: the one sgemm_ resolves to in the global
// scope, as libtorch's own call does (the first "blas" file in the address map could be an
// OpenBLAS that liblapack pulled in while netlib's libblas answered the calls).
std::string loaded_blas() {
    auto a = torch::ones({64, 64});
    (void)torch::mm(a, a);
    for (const char* symbol : {"sgemm_", "cblas_sgemm", "mkl_blas_sgemm"}) {
        Dl_info info{};
        if (void* f = ::dlsym(RTLD_DEFAULT, symbol); f && ::dladdr(f, &info) != 0 && info.dli_fname) {
            std::error_code ec;
            auto real = stdfs::canonical(info.dli_fname, ec);
            return ec ? std::string(info.dli_fname) : real.string();
        }
    }
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        auto pos = line.find('/');
        if (pos == std::string::npos) continue;
        std::string path = line.substr(pos);
        if (path.find("blas") != std::string::npos) {
            std::error_code ec;
            auto real = stdfs::canonical(path, ec);
            return ec ? path : real.string();
        }
    }
    return "";
}

/// A /proc/meminfo value in kB, -1 when the file has no such line. Line by line: the lines
/// without a unit (HugePages_Total: 0) put a word-by-word reader out of step.
int64_t meminfo_kb(const std::string& key) {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string k;
        int64_t v = 0;
        if (ls >> k >> v && k == key + ":") return v;
    }
    return -1;
}

/// Whether a new entry can be made in the existing directory `dir`: makes a directory there and
/// removes it (access() says yes to root on sysfs or procfs, where nothing can be created). The
/// error, or "" when it can.
std::string probe_writable(const std::string& dir) {
    std::string templ = (stdfs::path(dir) / ".strato-doctor-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) return std::strerror(errno);
    ::rmdir(templ.c_str());
    return "";
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024)); }

}  // namespace

std::vector<Check> run_checks(const std::string& disk_path) {
    std::vector<Check> out;
    out.push_back({"libtorch", fmt::format("{}", TORCH_VERSION), Level::kOk, ""});
    const unsigned online = std::thread::hardware_concurrency();
    const int usable = cgroup::usable_cpus();
    out.push_back({"cpu", static_cast<unsigned>(usable) < online
                              ? fmt::format("{} ({} logical cores, {} usable here: affinity or cgroup quota)", cpu_model(),
                                            online, usable)
                              : fmt::format("{} ({} logical cores)", cpu_model(), online),
                   Level::kOk, ""});

    const std::string blas = loaded_blas();
    if (blas.find("openblas") != std::string::npos) {
        bool openmp = blas.find("openmp") != std::string::npos;
        out.push_back({"blas", blas, openmp ? Level::kOk : Level::kWarn,
                       openmp ? "" : "the pthread OpenBLAS ignores libtorch's thread count: apt-get install libopenblas0-openmp"});
    } else if (blas.find("mkl") != std::string::npos) {
        out.push_back({"blas", blas, Level::kOk, ""});
    } else if (blas.find("blis") != std::string::npos) {
        // Debian's libblis4-* (the libblas.so.3 alternative under blis-*/): optimised, not the
        // reference BLAS it was called (FAIL, exit 1). It runs one thread unless told by its
        // environment: libtorch's thread count does not reach it.
        const bool told = std::getenv("BLIS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS");
        out.push_back({"blas", blas + " (BLIS)", told ? Level::kOk : Level::kWarn,
                       told ? ""
                            : "BLIS runs one thread unless BLIS_NUM_THREADS is set; libopenblas0-openmp follows "
                              "strato's thread count"});
    } else if (blas.find("atlas") != std::string::npos || blas.find("flexiblas") != std::string::npos) {
        const bool flexi = blas.find("flexiblas") != std::string::npos;
        out.push_back({"blas", blas + (flexi ? " (FlexiBLAS)" : " (ATLAS)"), Level::kWarn,
                       flexi ? "FlexiBLAS picks its backend at run time (`flexiblas print`); choose OpenBLAS (openmp)"
                             : "ATLAS is slower than OpenBLAS on these products: apt-get install libopenblas0-openmp"});
    } else {
        out.push_back({"blas", blas.empty() ? "reference BLAS (netlib)" : blas + " (reference BLAS)", Level::kFail,
                       "linear layers run 10-30x slower on the reference BLAS: apt-get install libopenblas0-openmp"});
    }

    const int default_threads = at::get_num_threads();
    std::string source;
    const int threads = train::configure_threads(0, &source);
    out.push_back({"intra-op threads",
                   fmt::format("{} (strato sets {} by default, {}; run.threads overrides)", default_threads, threads,
                               source),
                   Level::kOk, ""});
    // (Both were "ok": a junk OMP_NUM_THREADS only logged a line, and OMP_NUM_THREADS=64 on 2
    // usable CPUs ran every step on descheduled threads.)
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && !parse_int(omp, 1, 1024)) {
        out.back().level = Level::kWarn;
        out.back().hint = fmt::format("OMP_NUM_THREADS=\"{}\" is not a thread count (1..1024) and strato ignores "
                                      "it (one thread per usable CPU): unset it or give a number",
                                      omp);
    } else if (threads > usable) {
        out.back().level = Level::kWarn;
        out.back().hint = fmt::format("{} threads on {} usable CPU(s) oversubscribe them (every step waits for "
                                      "descheduled threads): OMP_NUM_THREADS={} or less, or run.threads",
                                      threads, usable, usable);
    }

    // Matrix-product speed: a direct measure of the BLAS and thread setup.
    {
        const int n = 512;
        auto a = torch::randn({n, n}), b = torch::randn({n, n});
        (void)torch::mm(a, b);
        const auto t0 = std::chrono::steady_clock::now();
        const int reps = 10;
        for (int i = 0; i < reps; ++i) (void)torch::mm(a, b);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double gflops = 2.0 * n * n * n * reps / s / 1e9;
        out.push_back({"matmul fp32 512^3", fmt::format("{:.1f} GFLOP/s with {} threads", gflops, at::get_num_threads()),
                       gflops < 20 ? Level::kWarn : Level::kOk, gflops < 20 ? "slow BLAS or busy machine" : ""});
    }

    auto flags = cpu_flags();
    std::string feats;
    for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"})
        if (flags.count(f)) feats += (feats.empty() ? "" : " ") + std::string(f);
    const bool bf16_fast = flags.count("amx_bf16") || flags.count("avx512_bf16");
    out.push_back({"cpu features", feats.empty() ? "none of avx2/avx512/amx" : feats, Level::kOk,
                   bf16_fast ? "" : "no bf16 instructions: train.precision = \"bf16\" will not speed up training"});
    if (bf16_fast) out.back().hint = "";
    out.push_back({"bf16", bf16_fast ? "fast (AMX/AVX512-BF16): train with train.precision = \"bf16\", serve with parameter precision \"bf16\""
                                     : "emulated (slow)",
                   bf16_fast ? Level::kOk : Level::kWarn, ""});

    const bool cuda = torch::cuda::is_available();
    out.push_back({"cuda", cuda ? fmt::format("{} device(s)", torch::cuda::device_count()) : "not available (CPU build or no GPU)",
                   Level::kOk, ""});

    // The GPUs as the driver sees them (NVML), whatever libtorch was built with.
    auto nvml = monitor::Nvml::open();
    if (nvml.is_ok()) {
        for (const auto& g : (*nvml)->gpus())
            out.push_back({fmt::format("gpu {}", g.index),
                           fmt::format("{}, {:.0f} GiB, driver {}", g.name, g.memory_total_mib / 1024,
                                       (*nvml)->driver_version()),
                           Level::kOk, ""});
        monitor::Snapshot s;
        (*nvml)->sample(s);
        for (const monitor::Metric* m : s.find("gpu_util"))
            out.push_back({fmt::format("gpu {} utilisation", m->labels.front().second), fmt::format("{:.0f}%", m->value),
                           Level::kOk, ""});
        if (!cuda && !(*nvml)->gpus().empty())
            out.push_back({"gpu training", "this build of libtorch cannot use them", Level::kWarn,
                           "build against a CUDA libtorch with -DSTRATO_WITH_CUDA=ON"});
    } else {
        out.push_back({"gpu (NVML)", nvml.status().message(), Level::kOk, ""});
    }

    const int64_t avail_kb = meminfo_kb("MemAvailable");
    const cgroup::MemoryRoom cg = cgroup::memory_room();
    {
        Check c{"memory available", "", Level::kOk, ""};
        double avail = avail_kb >= 0 ? static_cast<double>(avail_kb) * 1024.0 : -1;
        if (cg.room_bytes >= 0 && (avail < 0 || cg.room_bytes < avail)) {
            c.value = fmt::format("{} (cgroup limit {}; the machine has {})", gib(cg.room_bytes), gib(cg.limit_bytes),
                                  avail < 0 ? "an unknown amount" : gib(avail));
            avail = cg.room_bytes;
        } else {
            c.value = avail < 0 ? "unknown (no MemAvailable in /proc/meminfo)" : gib(avail);
        }
        if (avail < 0) {
            c.level = Level::kWarn;
            c.hint = "cannot tell whether a run fits in memory";
        } else if (avail < 2.0 * 1024 * 1024 * 1024) {
            c.level = Level::kWarn;
            c.hint = "less than 2 GiB free";
        }
        out.push_back(c);
    }

    // Free space and whether the run directory can be written at all (a read-only mount, a file
    // named like the directory): doctor said "ok" and the first `strato train` failed.
    struct statvfs vfs {};
    std::string where = disk_path.empty() ? "." : disk_path;
    std::error_code ec;
    while (!where.empty() && !stdfs::exists(where, ec)) where = stdfs::path(where).parent_path().string();
    if (where.empty()) where = ".";
    if (!stdfs::is_directory(where, ec)) {
        out.push_back({"disk free", fmt::format("{} is not a directory", where), Level::kFail,
                       "runs are written in a directory: choose another run.dir (--dir)"});
    } else if (::statvfs(where.c_str(), &vfs) != 0) {
        out.push_back({"disk free", fmt::format("unknown at {}: {}", where, std::strerror(errno)), Level::kWarn,
                       "cannot tell whether checkpoints fit"});
    } else {
        const double free_bytes = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
        const double g = free_bytes / (1024.0 * 1024 * 1024);
        out.push_back({"disk free", fmt::format("{} at {}", gib(free_bytes), where),
                       g < 1.0 ? Level::kWarn : Level::kOk, g < 1.0 ? "checkpoints need space" : ""});
        const std::string why = (vfs.f_flag & ST_RDONLY) != 0 ? "a read-only file system" : probe_writable(where);
        if (!why.empty()) {
            out.back().value += fmt::format(", not writable ({})", why);
            out.back().level = Level::kFail;
            out.back().hint = "training writes its run directory here: choose a writable run.dir (--dir)";
        }
    }

    // The cache of image-folder indexes and fetched shards ($STRATO_CACHE_DIR, else the XDG cache
    // under HOME): unwritable, every run lists image folders again and fetched shards cannot be kept.
    {
        const std::string cache = data::cache_root();
        std::string at = cache;
        while (!at.empty() && !stdfs::exists(at, ec)) at = stdfs::path(at).parent_path().string();
        if (at.empty()) at = ".";
        if (cache.empty()) {
            out.push_back({"cache", "none (no STRATO_CACHE_DIR, XDG_CACHE_HOME or HOME)", Level::kWarn,
                           "set STRATO_CACHE_DIR to a writable directory (image-folder indexes, remote shards)"});
        } else if (const std::string why = probe_writable(at); !why.empty()) {
            out.push_back({"cache", fmt::format("{}: not writable ({})", cache, why), Level::kWarn,
                           "set STRATO_CACHE_DIR to a writable directory (image-folder indexes, remote shards)"});
        } else {
            out.push_back({"cache", cache, Level::kOk, ""});
        }
    }
    const bool dataset = stdfs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", ec);
    out.push_back({"fashion-mnist", dataset ? "/usr/share/datasets/fashion-mnist" : "missing", dataset ? Level::kOk : Level::kWarn,
                   dataset ? "" : "apt-get install dataset-fashion-mnist (the built-in example data)"});
    return out;
}

}  // namespace strato::doctor
