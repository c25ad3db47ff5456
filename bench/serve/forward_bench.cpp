// The limit for `strato serve`: the same backend's execute() called in-process, no HTTP, no
// queue. Prints one JSON line per batch size: median batch time and samples/s.
//   forward_bench PACKAGE_DIR [THREADS] [SECONDS_PER_SIZE] [BATCH_SIZES, e.g. 1,8; "default": 1..64]
//                 [GPU] [PRECISION]
// GPU: a CUDA device number, to time the model's copy on that GPU (inputs from host memory and
// outputs back, as the server runs it); -1: the CPU. PRECISION: the strato backend's parameter
// (fp32, bf16, fp16).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "strato/core/memory.h"
#include "strato/serve/backend/backend.h"
#include "strato/serve/backend/torch_backends.h"

using namespace strato::serve;

int main(int argc, char** argv) {
    if (argc < 2) {
        fmt::print(stderr, "usage: forward_bench PACKAGE_DIR [THREADS] [SECONDS_PER_SIZE] [BATCH_SIZES] [GPU] [PRECISION]\n");
        return 2;
    }
    std::string dir = argv[1];
    int threads = argc > 2 ? std::atoi(argv[2]) : 0;
    double seconds = argc > 3 ? std::atof(argv[3]) : 2.0;
    std::vector<int64_t> sizes{1, 2, 4, 8, 16, 32, 64};
    Device device;
    if (argc > 5) device.gpu = std::atoi(argv[5]);
    if (argc > 4 && std::string_view(argv[4]) != "default") {
        sizes.clear();
        for (const char* p = argv[4]; *p;) {
            char* end;
            long v = std::strtol(p, &end, 10);
            if (end == p || v < 1) return fmt::print(stderr, "bad batch size list '{}'\n", argv[4]), 2;
            sizes.push_back(v);
            p = *end == ',' ? end + 1 : end;
        }
    }
    strato::configure_allocator();  // as the strato binary does
    register_torch_backends(threads);
    const Backend* b = detect_backend(dir);
    if (!b) return fmt::print(stderr, "no model in {}\n", dir), 1;
    ModelConfig cfg;
    cfg.name = "m";
    if (argc > 6) cfg.parameters["precision"] = argv[6];
    if (auto st = b->autocomplete(&cfg, dir); !st.is_ok()) return fmt::print(stderr, "{}\n", st.message()), 1;
    auto model = b->load(cfg, dir, device);
    if (!model) return fmt::print(stderr, "{}\n", model.status().message()), 1;
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> u(0, 1);
    for (int64_t batch : sizes) {
        Tensor in;
        in.name = cfg.inputs[0].name;
        in.dtype = DataType::kFp32;
        in.shape = {batch};
        in.shape.insert(in.shape.end(), cfg.inputs[0].dims.begin(), cfg.inputs[0].dims.end());
        std::vector<float> v(static_cast<size_t>(in.numel()));
        for (auto& x : v) x = u(rng);
        in.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
        std::vector<Tensor> inputs{in};
        std::vector<double> times;
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 3; ++i) {  // warm-up
            std::vector<Tensor> out;
            (void)(*model)->execute(inputs, &out);
        }
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
            std::vector<Tensor> out;
            auto t0 = std::chrono::steady_clock::now();
            auto st = (*model)->execute(inputs, &out);
            times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            if (!st.is_ok()) return fmt::print(stderr, "{}\n", st.message()), 1;
        }
        std::sort(times.begin(), times.end());
        double med = times[times.size() / 2];
        fmt::print("{{\"batch\": {}, \"median_ms\": {:.4f}, \"samples_per_s\": {:.1f}}}\n", batch, med * 1e3, batch / med);
        std::fflush(stdout);
    }
    return 0;
}
