// Tests that need a CUDA device (label gpu): built with -DSTRATO_WITH_CUDA=ON against a CUDA
// libtorch, run by bench/gpu/run.sh on a GPU machine. Each skips where no GPU is usable.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <limits>

#include "strato/core/fs.h"
#include "strato/dist/ddp.h"
#include "strato/models/package.h"
#include "strato/models/zoo.h"
#include "strato/serve/backend/backend.h"
#include "strato/serve/backend/torch_backends.h"
#include "strato/train/cuda_graph.h"
#include "strato/train/loss_scaler.h"

namespace strato {
namespace {

#define REQUIRE_GPU()                                                  \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

torch::Device gpu() { return torch::Device(torch::kCUDA, 0); }

int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    close(fd);
    return ntohs(a.sin_port);
}

models::Net small_cnn() {
    models::ModelConfig cfg;
    cfg.arch = "cnn";
    cfg.width = 8;
    cfg.hidden = 32;
    torch::manual_seed(3);
    return models::create_model(cfg, {1, 28, 28}, 10).value();
}

/// A process group of one rank (a store on a free loopback port) over `net`'s parameters.
Result<std::unique_ptr<dist::DataParallel>> data_parallel_of_one(models::NetImpl& net, const std::string& backend) {
    dist::DistEnv env;
    env.world_size = 1;
    env.master_port = free_port();
    dist::DdpOptions o;
    o.backend = backend;
    o.timeout_s = 60;
    return dist::DataParallel::create(env, net.parameters(), net.buffers(), o);
}

TEST(Gpu, FusedUnscaleMatchesTheCpuPathAndSeesAnOverflow) {
    REQUIRE_GPU();
    auto make = [](torch::Device d) {
        torch::manual_seed(1);
        std::vector<torch::Tensor> ps;
        for (int i = 0; i < 5; ++i) {
            auto p = torch::randn({7, 3}).to(d).requires_grad_();
            p.mutable_grad() = torch::randn({7, 3}).to(d) * 1024;
            ps.push_back(p);
        }
        return ps;
    };
    train::DynamicLossScaler cpu_scaler, gpu_scaler;
    auto cpu = make(torch::kCPU), cuda = make(gpu());
    EXPECT_TRUE(cpu_scaler.unscale(cpu));
    EXPECT_TRUE(gpu_scaler.unscale(cuda));
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(torch::allclose(cpu[i].grad(), cuda[i].grad().cpu(), 1e-6, 1e-7));
    cuda[3].mutable_grad()[2][1] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(gpu_scaler.unscale(cuda));
    cuda[3].mutable_grad()[2][1] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(gpu_scaler.unscale(cuda));
    gpu_scaler.update(true);
    EXPECT_EQ(gpu_scaler.current_scale(), 32768.0);
}

TEST(Gpu, ACapturedStepGivesTheEagerGradientsForEachNewBatch) {
    REQUIRE_GPU();
    auto net = small_cnn();
    net->to(gpu());
    net->train();
    auto step = [&](const torch::Tensor& x, const torch::Tensor& y) {
        auto logits = net->forward(x).to(torch::kFloat);
        auto loss = torch::nn::functional::cross_entropy(logits, y);
        loss.backward();
        return std::make_pair(loss, logits);
    };
    auto batch = [](int seed) {
        torch::manual_seed(seed);
        return std::make_pair(torch::randn({16, 1, 28, 28}).to(gpu()), torch::randint(0, 10, {16}).to(gpu()));
    };
    auto [x0, y0] = batch(10);
    auto params = net->parameters();
    std::vector<torch::Tensor> before;
    for (auto& b : net->buffers()) before.push_back(b.clone());
    auto g = train::GraphedStep::capture(step, x0, y0, params, net->buffers());
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    auto bufs = net->buffers();
    for (size_t i = 0; i < bufs.size(); ++i) EXPECT_TRUE(torch::equal(bufs[i], before[i])) << "buffer " << i << " changed";
    for (int seed : {11, 12}) {
        auto [x, y] = batch(seed);
        ASSERT_TRUE((*g)->fits(x, y));
        std::vector<torch::Tensor> saved;
        for (auto& b : net->buffers()) saved.push_back(b.clone());
        auto [loss, logits] = (*g)->replay(x, y);
        std::vector<torch::Tensor> graphed;
        for (auto& p : params) graphed.push_back(p.grad().clone());
        const float graphed_loss = loss.item<float>();
        // The same step eagerly, from the same BatchNorm statistics, into zeroed gradients.
        {
            torch::NoGradGuard ng;
            auto now = net->buffers();
            for (size_t i = 0; i < now.size(); ++i) now[i].copy_(saved[i]);
            for (auto& p : params) p.mutable_grad().zero_();
        }
        auto [eager_loss, eager_logits] = step(x, y);
        EXPECT_NEAR(graphed_loss, eager_loss.item<float>(), 1e-5);
        for (size_t i = 0; i < params.size(); ++i)
            EXPECT_TRUE(torch::allclose(graphed[i], params[i].grad(), 1e-4, 1e-5)) << "parameter " << i;
    }
    EXPECT_FALSE((*g)->fits(torch::zeros({8, 1, 28, 28}, gpu()), torch::zeros({8}, torch::TensorOptions().dtype(torch::kLong).device(gpu()))));
}

TEST(Gpu, NcclProcessGroupOfOneReducesAndBroadcasts) {
    REQUIRE_GPU();
    auto net = small_cnn();
    net->to(gpu());
    auto dp = data_parallel_of_one(*net, "nccl");
    ASSERT_TRUE(dp.is_ok()) << dp.status().message();
    EXPECT_EQ((*dp)->backend(), "nccl");
    ASSERT_TRUE((*dp)->broadcast_state().is_ok());
    auto sums = (*dp)->sum({1.5, 2.0});
    ASSERT_TRUE(sums.is_ok()) << sums.status().message();
    EXPECT_EQ(*sums, (std::vector<double>{1.5, 2.0}));
    // A step's gradients go through the buckets and come back unchanged (world of one).
    (*dp)->prepare(true, 1.0);
    auto x = torch::randn({4, 1, 28, 28}, gpu());
    auto loss = net->forward(x).sum();
    loss.backward();
    auto flag = (*dp)->finish();
    ASSERT_TRUE(flag.is_ok()) << flag.status().message();
    EXPECT_EQ(*flag, 1.0);
    for (auto& p : net->parameters()) {
        ASSERT_TRUE(p.grad().defined());
        EXPECT_TRUE(p.grad().is_cuda());
        EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
    }
}

TEST(Gpu, GlooIsStillThereForCudaParametersWhenAsked) {
    REQUIRE_GPU();
    auto net = small_cnn();
    net->to(gpu());
    auto dp = data_parallel_of_one(*net, "gloo");
    ASSERT_TRUE(dp.is_ok()) << dp.status().message();
    EXPECT_EQ((*dp)->backend(), "gloo");
}

// strato serve's package backend on a GPU: instance placement as Triton does it, one copy on
// cuda:0, the same answers as the CPU copy (fused oneDNN graph) for a batch.
TEST(Gpu, ServedPackageOnTheGpuAnswersAsOnTheCpu) {
    REQUIRE_GPU();
    namespace stdfs = std::filesystem;
    auto dir = stdfs::temp_directory_path() / ("strato-gpu-serve-" + std::to_string(::getpid()));
    auto net = small_cnn();
    net->eval();
    models::PackageInfo info;
    info.model.arch = "cnn";
    info.model.width = 8;
    info.model.hidden = 32;
    info.input_shape = {1, 28, 28};
    info.num_classes = 10;
    info.mean = {0.25};
    info.std = {0.5};
    ASSERT_TRUE(models::save_package(dir.string(), info, *net).is_ok());

    serve::register_torch_backends(1);
    ASSERT_GE(serve::visible_gpus(), 1);
    serve::ModelConfig cfg;
    cfg.name = "cnn";
    cfg.backend = "strato";
    const serve::Backend* b = serve::find_backend(cfg);
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(b->gpu);
    ASSERT_TRUE(b->autocomplete(&cfg, dir.string()).is_ok());
    cfg.instance_group = {{.count = 2, .kind = "KIND_GPU", .gpus = {0}}};
    auto devices = serve::place_instances(&cfg, true, serve::visible_gpus());
    ASSERT_TRUE(devices.is_ok()) << devices.status().message();
    EXPECT_EQ(*devices, (std::vector<serve::Device>{{0}, {0}}));

    auto on_gpu = b->load(cfg, dir.string(), serve::Device{0});
    ASSERT_TRUE(on_gpu.is_ok()) << on_gpu.status().message();
    auto on_cpu = b->load(cfg, dir.string(), serve::Device{});
    ASSERT_TRUE(on_cpu.is_ok()) << on_cpu.status().message();

    torch::manual_seed(5);
    auto x = torch::rand({5, 1, 28, 28});
    serve::Tensor in{"input", serve::DataType::kFp32, {5, 1, 28, 28}, {}};
    in.data.assign(static_cast<const char*>(x.data_ptr()), static_cast<size_t>(x.numel()) * sizeof(float));
    std::vector<serve::Tensor> g, c;
    ASSERT_TRUE((*on_gpu)->execute({in}, &g).is_ok());
    ASSERT_TRUE((*on_cpu)->execute({in}, &c).is_ok());
    ASSERT_EQ(g.size(), 2u);
    ASSERT_EQ(c.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
        EXPECT_EQ(g[k].shape, (std::vector<int64_t>{5, 10}));
        auto tg = torch::from_blob(g[k].data.data(), {5, 10});
        auto tc = torch::from_blob(c[k].data.data(), {5, 10});
        // cuDNN convolutions use TF32 by default on this GPU (as PyTorch's do): not bit for bit.
        EXPECT_TRUE(torch::allclose(tg, tc, 1e-2, 1e-2)) << (tg - tc).abs().max().item<float>();
        EXPECT_TRUE(torch::equal(tg.argmax(1), tc.argmax(1)));
    }
    (void)fs::remove_tree(dir);  // not std::filesystem::remove_all: see core/fs.h
}

}  // namespace
}  // namespace strato
