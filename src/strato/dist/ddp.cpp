// c10d's headers need these before they are read (the torch precompiled header does not include them).
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#ifndef USE_DISTRIBUTED
#define USE_DISTRIBUTED
#endif
#if defined(STRATO_WITH_CUDA) && defined(STRATO_NCCL) && !defined(USE_C10D_NCCL)
#define USE_C10D_NCCL
#endif
#include "strato/dist/ddp.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(STRATO_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define STRATO_HAVE_NCCL 1
#endif

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <netdb.h>
#include <unistd.h>

#include "strato/core/log.h"
#include "strato/core/signals.h"
#include "strato/models/torch_compat.h"

namespace strato::dist {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// libtorch 1.13's TCPStore client runs a background thread that throws when the other end is no
// store (a port held by another program resets the connection): uncaught, it aborted the process
// with SIGABRT and a core. It ends as an error naming the store instead.
char g_store_where[512];
// Before _exit: what the process printed so far reaches its log, unless another thread holds
// stdout (then a flush could wait forever).
void flush_stdout_if_free() {
    if (ftrylockfile(stdout) != 0) return;
    fflush_unlocked(stdout);
    funlockfile(stdout);
}

// The first line of the exception being handled (in a terminate handler), or `otherwise`.
std::string current_exception_line(std::string otherwise) {
    if (auto e = std::current_exception()) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            return first_line(x.what());
        } catch (...) {
        }
    }
    return otherwise;
}

// Ends the process from a thread that cannot return an error (a terminate handler, the join
// watchdog): `message` on stderr, what stdout holds, exit `code`.
[[noreturn]] void exit_with(const std::string& message, int code = 1) {
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    flush_stdout_if_free();
    _exit(code);
}

[[noreturn]] void store_thread_failed() {
    exit_with(fmt::format("strato: error: {}: a libtorch thread failed: {}\nhint: is MASTER_PORT held by a program "
                          "that is no process-group store?\n",
                          g_store_where, current_exception_line("an unknown exception")));
}

// Once the ranks joined: Gloo checks that a message fits the buffer posted for it and throws from
// its I/O thread when it does not -- ranks whose collectives differ, as with settings that change
// the steps per epoch (data.batch_size 32 on one rank, 16 on another). Uncaught, that aborted the
// process with a core dump; it ends as an error saying why. Other terminates go on as before.
std::terminate_handler g_terminate_before = nullptr;
int g_terminate_rank = 0;

[[noreturn]] void collective_thread_failed() {
    const std::string what = current_exception_line("");
    if (what.find("op.preamble.length <= op.nbytes") != std::string::npos)
        exit_with(fmt::format("strato: error: rank {}: another rank sent more than this rank's collective expected "
                              "({}): the ranks run different collectives\nhint: start every rank with the same config "
                              "(data.batch_size, data.limit_train, train.epochs, train.grad_accum, ... decide each "
                              "rank's steps)\n",
                              g_terminate_rank, what));
    if (g_terminate_before) g_terminate_before();
    std::abort();
}

// libtorch's store calls can block past their timeout (a port held by a program that accepts and
// never answers), and a blocked call does not see Ctrl-C. While the ranks join, a watchdog ends
// the process when joining outlasts the timeout by 5 s, or 2 s after a stop was asked.
class JoinWatchdog {
public:
    explicit JoinWatchdog(double timeout_s) : thread_([this, timeout_s] { watch(timeout_s); }) {}
    ~JoinWatchdog() {
        {
            std::lock_guard lock(mu_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

private:
    void watch(double timeout_s) {
        const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(timeout_s + 5));
        std::optional<Clock::time_point> stop_seen;
        std::unique_lock lock(mu_);
        while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return done_; })) {
            if (signals::stop_requested() && !stop_seen) stop_seen = Clock::now();
            const bool stopped = stop_seen && Clock::now() - *stop_seen > std::chrono::seconds(2);
            if (!stopped && Clock::now() < deadline) continue;
            exit_with(fmt::format("strato: error: {}: {}\n", g_store_where,
                                  stopped ? "interrupted while a store call was blocked"
                                          : "no answer from the store within the timeout (dist.timeout_s)\nhint: is "
                                            "MASTER_PORT held by a program that is no process-group store?"),
                      stopped ? 130 : 1);
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;  // last: it starts once the rest is built
};

/// The model as the ranks compare it when they join: one word per parameter, then per buffer
/// ("Float[256,784]"), lines "params ..." and "buffers ...".
std::string model_signature(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& buffers) {
    std::string out;
    for (const auto* list : {&params, &buffers}) {
        out += list == &params ? "params" : "\nbuffers";
        for (const auto& t : *list) {
            out += fmt::format(" {}[", std::string(c10::toString(t.scalar_type())));
            for (int64_t d = 0; d < t.dim(); ++d) out += fmt::format("{}{}", d ? "," : "", t.size(d));
            out += ']';
        }
    }
    return out;
}

std::vector<std::string> split_words(const std::string& s) {
    std::vector<std::string> out;
    size_t p = 0;
    while ((p = s.find_first_not_of(' ', p)) != std::string::npos) {
        const size_t e = std::min(s.find(' ', p), s.size());
        out.push_back(s.substr(p, e - p));
        p = e;
    }
    return out;
}

/// Where model signature `ours` (rank `rank`'s) differs from `theirs` (rank 0's), in words; empty
/// when equal.
std::string model_difference(const std::string& ours, const std::string& theirs, int rank) {
    const size_t nl_ours = ours.find('\n'), nl_theirs = theirs.find('\n');
    const std::string parts[2][2] = {{ours.substr(0, nl_ours), theirs.substr(0, nl_theirs)},
                                     {nl_ours == std::string::npos ? "" : ours.substr(nl_ours + 1),
                                      nl_theirs == std::string::npos ? "" : theirs.substr(nl_theirs + 1)}};
    for (int k = 0; k < 2; ++k) {
        const char* what = k == 0 ? "parameter" : "buffer";
        auto a = split_words(parts[k][0]), b = split_words(parts[k][1]);
        if (!a.empty()) a.erase(a.begin());  // the "params"/"buffers" label
        if (!b.empty()) b.erase(b.begin());
        for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
            if (a[i] != b[i]) return fmt::format("{} {} is {} on rank {}, {} on rank 0", what, i, a[i], rank, b[i]);
        if (a.size() != b.size())
            return fmt::format("{} {}s on rank {}, {} on rank 0", a.size(), what, rank, b.size());
    }
    return "";
}

/// Where settings `ours` (rank `rank`'s "key=value" words) differ from `theirs` (rank 0's), in
/// words; empty when every key both name agrees.
std::string settings_difference(const std::string& ours, const std::string& theirs, int rank) {
    std::vector<std::string> b = split_words(theirs);
    for (const auto& word : split_words(ours)) {
        const size_t eq = word.find('=');
        const std::string key = word.substr(0, eq + 1);
        for (const auto& other : b)
            if (other.compare(0, key.size(), key) == 0 && other != word)
                return fmt::format("{} is {} on rank {}, {} on rank 0", word.substr(0, eq), word.substr(eq + 1), rank,
                                   other.substr(eq + 1));
    }
    return "";
}

}  // namespace

struct DataParallel::Impl {
    c10::intrusive_ptr<compat::CollectiveGroup> pg;
    std::vector<torch::Tensor> params, buffers;
    // Buckets: flat float tensors; the last has one extra element for the flag.
    std::vector<torch::Tensor> flat;
    std::vector<std::vector<size_t>> members;           // params of each bucket
    std::vector<size_t> bucket_of, offset_of;           // per param
    std::vector<int64_t> pending;                       // params still to arrive, per bucket
    std::vector<c10::intrusive_ptr<c10d::Work>> works;  // per bucket, once launched
    std::vector<Clock::time_point> launched_at;
    size_t next_launch = 0;
    bool armed = false;
    double flag = 0;
    double timeout_s = 300;
    int rank = 0;
    torch::Device device{torch::kCPU};  // where the buckets live: the parameters' device under NCCL
    std::string backend;
    std::vector<char> reported;  // per param, this step

    /// Parameter i's place in its bucket.
    torch::Tensor slot(size_t i) {
        return flat[bucket_of[i]].narrow(0, static_cast<int64_t>(offset_of[i]), params[i].numel());
    }

    void launch_ready() {
        while (next_launch < flat.size() && pending[next_launch] == 0) {
            launched_at[next_launch] = Clock::now();
            std::vector<at::Tensor> t{flat[next_launch]};
            works[next_launch] = pg->allreduce(t);
            ++next_launch;
        }
    }
    void on_grad(size_t i, const torch::Tensor& g) {
        if (!armed) return;
        const size_t b = bucket_of[i];
        auto dst = slot(i);
        const auto& acc = params[i].grad();
        torch::NoGradGuard ng;
        if (acc.defined()) {
            dst.copy_(acc.reshape(-1));
            dst.add_(g.reshape(-1).to(dst.device()));
        } else {
            dst.copy_(g.reshape(-1));
        }
        reported[i] = 1;
        if (--pending[b] == 0) launch_ready();
    }
};

Result<std::unique_ptr<DataParallel>> DataParallel::create(const DistEnv& env, std::vector<torch::Tensor> params,
                                                           std::vector<torch::Tensor> buffers, const DdpOptions& o) {
    // Found by review: 1e10 s (meant as "never") overflowed libtorch's deadlines and 1e-4 s became
    // 0 ms: both failed at once, blaming the store's address.
    if (!(o.timeout_s >= 1e-3 && o.timeout_s <= 1e8))
        return invalid_argument("dist.timeout_s = {}: expected 0.001 to 1e8 seconds (about 3 years)", o.timeout_s);
    std::unique_ptr<DataParallel> dp(new DataParallel());
    dp->impl_ = std::make_unique<Impl>();
    auto& im = *dp->impl_;
    dp->rank_ = env.rank;
    dp->world_ = env.world_size;
    im.rank = env.rank;
    im.timeout_s = o.timeout_s;
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    // 1. The store: rank 0 hosts it (unless the agent does); the others connect, retrying.
    std::snprintf(g_store_where, sizeof g_store_where, "rank %d, the store at %s:%d", env.rank, env.master_addr.c_str(),
                  env.master_port);
    // (Only while the ranks join: a later terminate -- a collective's timeout, a bug -- keeps its
    // own message and core dump.)
    const std::terminate_handler previous_terminate = std::set_terminate(store_thread_failed);
    std::optional<JoinWatchdog> watchdog(std::in_place, o.timeout_s);
    const bool server = env.rank == 0 && !env.agent_store;
    // Rank 0 connects to the store it hosts at MASTER_ADDR too: a name that does not resolve
    // would have it retry until the timeout (300 s by default), then blame the port.
    if (server) {
        addrinfo hints{}, *res = nullptr;
        hints.ai_socktype = SOCK_STREAM;
        const int rc = getaddrinfo(env.master_addr.c_str(), nullptr, &hints, &res);
        if (res) freeaddrinfo(res);
        if (rc == EAI_NONAME)
            return invalid_argument("rank 0: MASTER_ADDR={} does not resolve ({}); rank 0 hosts the store there\n"
                                    "hint: set MASTER_ADDR to the host name or address of rank 0's machine",
                                    env.master_addr, gai_strerror(rc));
    }
    c10::intrusive_ptr<c10d::Store> store;
    try {
        c10d::TCPStoreOptions so;
        so.port = static_cast<uint16_t>(env.master_port);
        so.isServer = server;
        so.numWorkers = static_cast<size_t>(env.world_size);
        so.waitWorkers = false;  // we wait below, and can then say who is missing
        so.timeout = timeout;
        store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
        store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("strato/attempt_{}", env.restart_count), store);
    } catch (const std::exception& e) {
        if (signals::stop_requested())
            return Status(StatusCode::kCancelled, fmt::format("rank {}: interrupted while connecting to the store at {}:{}",
                                                              env.rank, env.master_addr, env.master_port));
        // (libtorch 1.13: "The server socket has failed to listen on any local network address")
        if (server && std::string_view(e.what()).find("failed to listen") == std::string_view::npos &&
            std::string_view(e.what()).find("failed to bind") == std::string_view::npos)
            return Status(StatusCode::kUnavailable,
                          fmt::format("rank 0: hosts the store on port {} but cannot reach it at MASTER_ADDR {}: {}\n"
                                      "hint: MASTER_ADDR must name rank 0's machine, as the other ranks reach it",
                                      env.master_port, env.master_addr, first_line(e.what())));
        if (server)
            return Status(StatusCode::kUnavailable,
                          fmt::format("rank 0: cannot host the store on port {}: {}\nhint: is another job or program "
                                      "using MASTER_PORT {}?",
                                      env.master_port, first_line(e.what()), env.master_port));
        return Status(StatusCode::kUnavailable,
                      fmt::format("rank {}: cannot reach rank 0's store at {}:{} within {:.0f} s: {}\nhint: is rank 0 "
                                  "running, and are MASTER_ADDR and MASTER_PORT right?",
                                  env.rank, env.master_addr, env.master_port, o.timeout_s, first_line(e.what())));
    }
    // 2. Everyone signs in; a rank that never comes is named. Every rank but 0 first compares its
    // job size and its model with rank 0's and signs in only when they agree; one that differs
    // posts why under "refused", and every rank waiting hears it at once (as torch's DDP refuses
    // a model of other shapes) rather than a collective failing, aborting or averaging mismatched
    // tensors later.
    std::vector<std::string> keys;
    for (int r = 0; r < env.world_size; ++r) keys.push_back(fmt::format("joined/{}", r));
    try {
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        // "host world_size local_world_size\nparams ...\nbuffers ...": every rank compares its
        // world size and its model with rank 0's.
        const std::string model = model_signature(params, buffers);
        const std::string me =
            fmt::format("{} {} {}\n{}\nsettings {}", host, env.world_size, env.local_world_size, model, o.settings);
        const auto refuse = [&](Status st) -> Status {
            if (st.is_ok()) return st;
            try {
                const std::string why = first_line(st.message());
                store->set("refused", std::vector<uint8_t>(why.begin(), why.end()));
            } catch (const std::exception&) {
            }
            return st;
        };
        // Two processes with one RANK (under the static backend: nodes started with different
        // --nproc-per-node, or the same --node-rank twice) would overwrite each other's key and
        // fail later, or hang, in the first collective.
        const int64_t signins = store->add(fmt::format("signins/{}", env.rank), 1);
        // (The store rank 0 just started holds no sign-in yet: the one it reached is another.)
        if (server && signins != 1)
            return invalid_argument("rank 0 hosts the store on port {}, but what it reaches at MASTER_ADDR {} is "
                                    "another store\nhint: MASTER_ADDR must name rank 0's "
                                    "machine, as the other ranks reach it",
                                    env.master_port, env.master_addr);
        if (signins > 1)
            return refuse(invalid_argument("rank {} at {}:{}: another process already joined as rank {}: two processes "
                                           "have RANK={}\nhint: under the static backend every node needs the same "
                                           "--nproc-per-node and its own --node-rank",
                                           env.rank, env.master_addr, env.master_port, env.rank, env.rank));
        const auto deadline = Clock::now() + timeout;
        const auto missing_ranks = [&] {
            std::string missing;
            for (int r = 0; r < env.world_size; ++r)
                if (r != env.rank && !store->check({keys[static_cast<size_t>(r)]}))
                    missing += (missing.empty() ? "" : ", ") + std::to_string(r);
            return missing;
        };
        // Until `ready`: an error when a rank was refused, on Ctrl-C, or at the deadline.
        const auto wait_until = [&](const std::function<bool()>& ready) -> Status {
            for (;;) {
                if (ready()) return Status::ok();
                if (store->check({"refused"})) {
                    const auto v = store->get("refused");
                    return invalid_argument("rank {}: the process group at {}:{} cannot form: {}", env.rank,
                                            env.master_addr, env.master_port, std::string(v.begin(), v.end()));
                }
                if (signals::stop_requested())  // Ctrl-C while peers are missing stops now, not at the timeout
                    return Status(StatusCode::kCancelled, fmt::format("rank {}: interrupted while waiting for rank(s) "
                                                                      "{} to join",
                                                                      env.rank, missing_ranks()));
                if (Clock::now() > deadline)
                    return Status(StatusCode::kUnavailable,
                                  fmt::format("rank {}: cannot form the process group of {} at {}:{} within {:.0f} s: "
                                              "rank(s) {} never joined\nhint: are all {} ranks running (strato launch "
                                              "starts them)?",
                                              env.rank, env.world_size, env.master_addr, env.master_port, o.timeout_s,
                                              missing_ranks(), env.world_size));
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
        };
        const auto compare_with_rank0 = [&]() -> Status {
            const auto v = store->get(keys[0]);
            const std::string theirs(v.begin(), v.end());
            const size_t nl = theirs.find('\n');
            const std::string head = theirs.substr(0, nl);
            const size_t blank = head.find(' ');
            if (blank == std::string::npos) return Status::ok();  // (a rank without the numbers)
            // The world only: nodes of different sizes (LOCAL_WORLD_SIZE) are a job under the c10d
            // rendezvous (found by review: they were refused as disagreeing), and the static
            // backend's overlapping ranks of such nodes show in their WORLD_SIZE.
            int world0 = 0, local0 = 0;
            std::sscanf(head.c_str() + blank + 1, "%d %d", &world0, &local0);
            if (world0 != env.world_size) {
                return invalid_argument(
                    "rank {} (node {}) has WORLD_SIZE={} and LOCAL_WORLD_SIZE={}, but rank 0 at {}:{} has WORLD_SIZE={} "
                    "and LOCAL_WORLD_SIZE={}: the ranks disagree on the job's size\nhint: under the static backend "
                    "every node needs the same --nproc-per-node (or use --rdzv-backend c10d, which counts each node's "
                    "processes)",
                    env.rank, env.group_rank, env.world_size, env.local_world_size, env.master_addr, env.master_port,
                    world0, local0);
            }
            if (nl == std::string::npos) return Status::ok();  // (a rank without the model)
            std::string model0 = theirs.substr(nl + 1), settings0;
            if (const size_t at = model0.find("\nsettings "); at != std::string::npos) {
                settings0 = model0.substr(at + 10);
                model0.resize(at);
            }
            if (const std::string diff = settings_difference(o.settings, settings0, env.rank); !diff.empty())
                return invalid_argument("rank {}'s training settings differ from rank 0's at {}:{}: {}\nhint: start "
                                        "every rank with the same config and the same amount of training data",
                                        env.rank, env.master_addr, env.master_port, diff);
            if (const std::string diff = model_difference(model, model0, env.rank); !diff.empty())
                return invalid_argument("rank {}'s model differs from rank 0's at {}:{}: {}\nhint: every rank must "
                                        "build the same model (the same config and model.* settings)",
                                        env.rank, env.master_addr, env.master_port, diff);
            return Status::ok();
        };
        if (env.rank != 0) {
            STRATO_RETURN_IF_ERROR(wait_until([&] { return store->check({keys[0]}); }));
            STRATO_RETURN_IF_ERROR(refuse(compare_with_rank0()));
        }
        store->set(keys[static_cast<size_t>(env.rank)], std::vector<uint8_t>(me.begin(), me.end()));
        STRATO_RETURN_IF_ERROR(wait_until([&] { return store->check(keys); }));
    } catch (const std::exception& e) {
        if (signals::stop_requested())
            return Status(StatusCode::kCancelled, fmt::format("rank {}: interrupted while the ranks joined", env.rank));
        return Status(StatusCode::kUnavailable, fmt::format("rank {}: the store at {}:{} failed: {}", env.rank,
                                                            env.master_addr, env.master_port, first_line(e.what())));
    }
    watchdog.reset();  // everyone joined
    g_terminate_before = previous_terminate;
    g_terminate_rank = env.rank;
    std::set_terminate(collective_thread_failed);
    // 3. The process group: NCCL for CUDA parameters where built in, else Gloo (which reduces
    // CUDA tensors through host copies).
    const bool on_cuda = !params.empty() && params.front().is_cuda();
    if (o.backend != "auto" && o.backend != "gloo" && o.backend != "nccl")
        return invalid_argument("dist.backend: expected auto, gloo or nccl, got \"{}\"", o.backend);
#ifdef STRATO_HAVE_NCCL
    const bool nccl = o.backend == "nccl" || (o.backend == "auto" && on_cuda);
    if (nccl && !on_cuda)
        return invalid_argument("dist.backend = \"nccl\": the parameters are not CUDA tensors (run.device = \"cuda\")");
#else
    const bool nccl = false;
    if (o.backend == "nccl")
        return invalid_argument("dist.backend = \"nccl\": this strato is built without NCCL (a CUDA libtorch and "
                                "-DSTRATO_WITH_CUDA=ON; docs/gpu.md)");
#endif
    im.device = on_cuda ? params.front().device() : torch::Device(torch::kCPU);
    im.backend = nccl ? "nccl" : "gloo";
#ifdef STRATO_HAVE_NCCL
    if (nccl) {
        try {
            auto no = c10d::ProcessGroupNCCL::Options::create();
            no->timeout = timeout;
            im.pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, no);
        } catch (const std::exception& e) {
            return Status(StatusCode::kUnavailable, fmt::format("rank {}: cannot set up NCCL with the other ranks: {}",
                                                                env.rank, first_line(e.what())));
        }
    }
#endif
    if (!nccl) try {
        auto go = c10d::ProcessGroupGloo::Options::create(timeout);
        if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
            go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
        else if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost")
            go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        else
            go->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
        im.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, go);
    } catch (const std::exception& e) {
        return Status(StatusCode::kUnavailable, fmt::format("rank {}: cannot connect to the other ranks with Gloo: {}",
                                                            env.rank, first_line(e.what())));
    }
    im.params = std::move(params);
    im.buffers = std::move(buffers);
    // Buckets in reverse order of the parameters (their gradients are ready back to front).
    const size_t n = im.params.size();
    im.bucket_of.assign(n, 0);
    im.offset_of.assign(n, 0);
    std::vector<int64_t> sizes;
    int64_t cap = o.first_bucket_bytes, used = 0;
    for (size_t k = 0; k < n; ++k) {
        const size_t i = n - 1 - k;
        if (im.params[i].scalar_type() != torch::kFloat)
            return invalid_argument("data parallel: parameter {} is {}, only float32 parameters are supported", i,
                                    std::string(c10::toString(im.params[i].scalar_type())));
        const int64_t bytes = im.params[i].numel() * 4;
        if (im.members.empty() || (used > 0 && used + bytes > cap)) {
            if (!im.members.empty()) cap = o.bucket_bytes;
            im.members.emplace_back();
            sizes.push_back(0);
            used = 0;
        }
        im.bucket_of[i] = im.members.size() - 1;
        im.offset_of[i] = static_cast<size_t>(sizes.back());
        im.members.back().push_back(i);
        sizes.back() += im.params[i].numel();
        used += bytes;
    }
    if (im.members.empty()) return invalid_argument("data parallel: the model has no parameters");
    for (size_t b = 0; b < im.members.size(); ++b)
        im.flat.push_back(torch::zeros({sizes[b] + (b + 1 == im.members.size() ? 1 : 0)},
                                       torch::TensorOptions().dtype(torch::kFloat).device(im.backend == "nccl" ? im.device : torch::Device(torch::kCPU))));
    im.works.resize(im.flat.size());
    im.launched_at.resize(im.flat.size());
    im.pending.assign(im.flat.size(), 0);
    im.reported.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
        Impl* self = &im;
        im.params[i].register_hook([self, i](torch::Tensor g) { self->on_grad(i, g); });
    }
    dp->stats_.buckets = static_cast<int64_t>(im.flat.size());
    return dp;
}

DataParallel::~DataParallel() {
    const bool joined = impl_ && impl_->pg;
    impl_.reset();  // (the process group's threads end here)
    if (joined) std::set_terminate(g_terminate_before);
}

int64_t DataParallel::bucket_count() const { return static_cast<int64_t>(impl_->flat.size()); }

const std::string& DataParallel::backend() const { return impl_->backend; }

namespace {

Status broadcast_from_rank0(compat::CollectiveGroup& pg, const std::vector<torch::Tensor>& tensors, int rank) {
    try {
        torch::NoGradGuard ng;
        for (const auto& t : tensors) {
            std::vector<at::Tensor> v{t.is_contiguous() ? t : t.contiguous()};
            c10d::BroadcastOptions bo;
            bo.rootRank = 0;
            pg.broadcast(v, bo)->wait();
            if (!t.is_contiguous()) t.copy_(v[0]);
        }
    } catch (const std::exception& e) {
        return Status(StatusCode::kUnavailable,
                      fmt::format("rank {}: broadcasting from rank 0 failed: {}", rank, first_line(e.what())));
    }
    return Status::ok();
}

}  // namespace

Status DataParallel::broadcast_state() {
    std::vector<torch::Tensor> all = impl_->params;
    all.insert(all.end(), impl_->buffers.begin(), impl_->buffers.end());
    return broadcast_from_rank0(*impl_->pg, all, rank_);
}

Status DataParallel::broadcast_buffers() { return broadcast_from_rank0(*impl_->pg, impl_->buffers, rank_); }

void DataParallel::prepare(bool sync, double flag) {
    auto& im = *impl_;
    im.armed = sync;
    if (!sync) return;
    im.flag = flag;
    im.next_launch = 0;
    for (size_t b = 0; b < im.flat.size(); ++b) {
        im.pending[b] = static_cast<int64_t>(im.members[b].size());
        im.works[b].reset();
    }
    std::fill(im.reported.begin(), im.reported.end(), 0);
    im.flat.back()[im.flat.back().numel() - 1].fill_(flag);
}

Result<double> DataParallel::finish() {
    auto& im = *impl_;
    if (!im.armed) return 0.0;
    im.armed = false;
    try {
        torch::NoGradGuard ng;
        // Parameters without a gradient this step (unused in the forward): their accumulated
        // gradient, or zeros, so every rank reduces the same buckets.
        for (size_t b = 0; b < im.flat.size(); ++b) {
            if (im.pending[b] == 0) continue;
            for (size_t i : im.members[b]) {
                if (im.reported[i]) continue;
                auto dst = im.slot(i);
                const auto& acc = im.params[i].grad();
                if (acc.defined())
                    dst.copy_(acc.reshape(-1));
                else
                    dst.zero_();
            }
            im.pending[b] = 0;
        }
        im.launch_ready();
        const auto wait_start = Clock::now();
        for (size_t b = 0; b < im.flat.size(); ++b) im.works[b]->wait();
        stats_.wait_s += since(wait_start);
        stats_.comm_s += since(im.launched_at[0]);  // first launch to last completion
        ++stats_.steps;
        const float inv = 1.0f / static_cast<float>(world_);
        for (size_t i = 0; i < im.params.size(); ++i) {
            auto avg = im.slot(i).view(im.params[i].sizes()) * inv;
            auto& g = im.params[i].mutable_grad();
            if (g.defined())
                g.copy_(avg);
            else
                g = avg.to(im.params[i].device(), /*non_blocking=*/false, /*copy=*/true);
        }
        auto& last = im.flat.back();
        return static_cast<double>(last[last.numel() - 1].item<float>());
    } catch (const std::exception& e) {
        return Status(StatusCode::kUnavailable,
                      fmt::format("rank {}: gradient all-reduce failed (a peer died or stalled; timeout {:.0f} s): {}",
                                  im.rank, im.timeout_s, first_line(e.what())));
    }
}

Result<std::vector<double>> DataParallel::sum(const std::vector<double>& values) {
    auto& im = *impl_;
    try {
        auto t = torch::tensor(values, torch::kDouble);
        if (im.backend == "nccl") t = t.to(im.device);
        std::vector<at::Tensor> v{t};
        im.pg->allreduce(v)->wait();
        t = t.cpu();
        std::vector<double> out(values.size());
        auto a = t.accessor<double, 1>();
        for (size_t i = 0; i < out.size(); ++i) out[i] = a[static_cast<int64_t>(i)];
        return out;
    } catch (const std::exception& e) {
        return Status(StatusCode::kUnavailable, fmt::format("rank {}: all-reduce of metrics failed (a peer died?): {}",
                                                            im.rank, first_line(e.what())));
    }
}

Status DataParallel::barrier() {
    auto r = sum({0.0});
    return r.status();
}

}  // namespace strato::dist
