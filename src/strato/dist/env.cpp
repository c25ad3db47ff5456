#include "strato/dist/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "strato/core/log.h"
#include "strato/core/parse.h"

namespace strato::dist {

namespace {

Result<int> int_var(const GetEnv& get, const char* name, int fallback, bool required = false) {
    const char* v = get(name);
    if (!v || !*v) {
        if (required) return invalid_argument("{} is not set", name);
        return fallback;
    }
    auto out = parse_int(v, INT32_MIN, INT32_MAX);
    if (!out) return invalid_argument("{}={}: expected a whole number", name, v);
    return static_cast<int>(*out);
}

std::string str_var(const GetEnv& get, const char* name, const std::string& fallback) {
    const char* v = get(name);
    return v && *v ? v : fallback;
}

/// Slurm's SLURM_TASKS_PER_NODE (`name`): "2(x3),1" -> tasks on node `node`.
Result<int> tasks_on_node(const char* name, const std::string& spec, int node) {
    int64_t index = 0;
    int found = 0;
    size_t pos = 0;
    while (pos <= spec.size()) {  // all of it is checked, not only the part up to this node
        const size_t end = spec.find(',', pos);
        const std::string_view part = std::string_view(spec).substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        const size_t x = part.find("(x");
        auto count = parse_int(part.substr(0, x), 1, 1 << 20);
        std::optional<int64_t> times = 1;
        if (x != std::string_view::npos)
            times = part.back() == ')' ? parse_int(part.substr(x + 2, part.size() - x - 3), 1, 1 << 20) : std::nullopt;
        if (!count || !times)
            return invalid_argument("{}={}: expected counts like 2(x3),1, got '{}'", name, spec, part);
        if (node >= index && node < index + *times) found = static_cast<int>(*count);
        index += *times;
        if (end == std::string::npos) break;
        pos = end + 1;
    }
    if (found < 1) return invalid_argument("{}={} names {} nodes; this is node {}", name, spec, index, node);
    return found;
}

/// MASTER_ADDR is a host name or an IPv4/IPv6 address. Found by review: "node1:29500" (the port
/// in the address, a common slip), a stray blank or a URL made rank 0 wait out dist.timeout_s
/// (300 s) connecting to a store it hosts itself, then blame the port.
Status check_master_addr(const std::string& addr) {
    if (addr.find_first_of(" \t\r\n\v\f/[]") != std::string::npos ||
        std::any_of(addr.begin(), addr.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
        return invalid_argument("MASTER_ADDR='{}': expected a host name or an IP address, without blanks, a port "
                                "or a URL scheme", addr);
    if (std::count(addr.begin(), addr.end(), ':') == 1)
        return invalid_argument("MASTER_ADDR={}: expected a host name or an IP address without a port (the port goes "
                                "in MASTER_PORT)",
                                addr);
    return Status::ok();
}

}  // namespace

std::string DistEnv::describe() const {
    return fmt::format("rank {} of {} (local {} of {}, node {}), master {}:{}, from {}{}", rank, world_size, local_rank,
                       local_world_size, group_rank, master_addr, master_port, source,
                       restart_count ? fmt::format(", restart {}", restart_count) : "");
}

Result<std::vector<std::string>> expand_hostlist(const std::string& list) {
    constexpr size_t kMaxHosts = 1 << 20;
    std::vector<std::string> out;
    size_t i = 0;
    while (i < list.size()) {
        // One item, up to a comma outside brackets: text and [ranges] groups in any order
        // ("rack[1-2]-n[01-02]-ib"), expanded as Slurm does: every combination, the first group
        // varying slowest.
        std::vector<std::string> names{""};
        size_t j = i;
        while (j < list.size() && list[j] != ',') {
            if (list[j] == ']') return invalid_argument("host list '{}': ']' without '[' at offset {}", list, j);
            if (list[j] != '[') {
                const size_t end = std::min(list.find_first_of("[],", j), list.size());
                for (auto& n : names) n.append(list, j, end - j);
                j = end;
                continue;
            }
            const size_t close = list.find(']', j);
            if (close == std::string::npos) return invalid_argument("host list '{}': unclosed '['", list);
            const std::string ranges = list.substr(j + 1, close - j - 1);
            std::vector<std::string> values;
            size_t p = 0;
            while (p <= ranges.size()) {
                const size_t comma = ranges.find(',', p);
                const std::string r = ranges.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
                const size_t dash = r.find('-');
                const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
                // Digits only (no sign, zero padding kept), numbers up to 999999999.
                const bool digits = (lo + hi).find_first_not_of("0123456789") == std::string::npos;
                const int64_t a = parse_int(lo, 0, 999999999).value_or(-1);
                const int64_t b = parse_int(hi, 0, 999999999).value_or(-1);
                if (!digits || a < 0 || b < a || b - a > 100000)
                    return invalid_argument("host list '{}': bad range '{}' (expected N or N-M, digits)", list, r);
                for (int64_t n = a; n <= b; ++n)
                    values.push_back(fmt::format("{:0{}d}", n, static_cast<int>(lo.size())));
                if (values.size() > kMaxHosts) break;
                if (comma == std::string::npos) break;
                p = comma + 1;
            }
            if (names.size() * values.size() + out.size() > kMaxHosts)
                return invalid_argument("host list '{}': more than {} hosts", list, kMaxHosts);
            std::vector<std::string> product;
            product.reserve(names.size() * values.size());
            for (const auto& n : names)
                for (const auto& v : values) product.push_back(n + v);
            names = std::move(product);
            j = close + 1;
        }
        if (j > i) out.insert(out.end(), names.begin(), names.end());
        i = j + 1;
    }
    return out;
}

Result<DistEnv> read_env(const GetEnv& get_in) {
    GetEnv get = get_in ? get_in : GetEnv([](const char* n) { return std::getenv(n); });
    DistEnv e;
    auto check = [&](DistEnv& d) -> Result<DistEnv> {
        if (d.world_size < 1) return invalid_argument("{}: world size {} must be >= 1", d.source, d.world_size);
        if (d.rank < 0 || d.rank >= d.world_size)
            return invalid_argument("{}: rank {} is outside the world of {}", d.source, d.rank, d.world_size);
        if (d.local_world_size < 1 || d.local_rank < 0 || d.local_rank >= d.local_world_size)
            return invalid_argument("{}: local rank {} is outside the node's {} processes", d.source, d.local_rank,
                                    d.local_world_size);
        // (a world of one forms no group: its master port is never used)
        if (d.world_size > 1 && (d.master_port < 1 || d.master_port > 65535))
            return invalid_argument("{}: master port {} is not a TCP port", d.source, d.master_port);
        if (d.world_size > 1) STRATO_RETURN_IF_ERROR(check_master_addr(d.master_addr));
        return d;
    };
    auto master = [&](DistEnv& d, const std::string& fallback_addr) -> Status {
        d.master_addr = str_var(get, "MASTER_ADDR", fallback_addr);
        // "[::1]", as an IPv6 address is written with a port, is the address ::1.
        if (d.master_addr.size() > 2 && d.master_addr.front() == '[' && d.master_addr.back() == ']')
            d.master_addr = d.master_addr.substr(1, d.master_addr.size() - 2);
        STRATO_ASSIGN_OR_RETURN(d.master_port, int_var(get, "MASTER_PORT", 29500));
        return Status::ok();
    };
    // Set and not empty (`WORLD_SIZE=` is unset, as int_var reads it); WORLD_SIZE=1 alone is one
    // process, not a rank without its RANK.
    const auto set = [&](const char* name) { return get(name) && *get(name); };
    if (!set("RANK") && set("WORLD_SIZE") && std::string_view(get("WORLD_SIZE")) == "1") return e;  // (not Slurm's)
    if (set("RANK") || set("WORLD_SIZE")) {
        e.source = "strato";
        STRATO_ASSIGN_OR_RETURN(e.rank, int_var(get, "RANK", 0, true));
        STRATO_ASSIGN_OR_RETURN(e.world_size, int_var(get, "WORLD_SIZE", 1, true));
        STRATO_ASSIGN_OR_RETURN(e.local_rank, int_var(get, "LOCAL_RANK", e.rank));
        STRATO_ASSIGN_OR_RETURN(e.local_world_size, int_var(get, "LOCAL_WORLD_SIZE", e.world_size));
        STRATO_ASSIGN_OR_RETURN(e.group_rank, int_var(get, "GROUP_RANK", 0));
        STRATO_ASSIGN_OR_RETURN(e.restart_count, int_var(get, "TORCHELASTIC_RESTART_COUNT", 0));
        std::string agent = str_var(get, "TORCHELASTIC_USE_AGENT_STORE", "False");
        e.agent_store = agent == "True" || agent == "true" || agent == "1";
        STRATO_RETURN_IF_ERROR(master(e, "127.0.0.1"));
        return check(e);
    }
    // An srun step (SLURM_STEP_NUM_TASKS). Without the step's variables, SLURM_PROCID=0 with
    // SLURM_NTASKS > 1 is what the batch script of `sbatch -n 4` sees, which runs once: one
    // process, with a warning. Tasks > 0 without them cannot form a group (their rank 0 reads
    // itself as that batch script and trains alone while they wait out the timeout): an error.
    const bool step = get("SLURM_PROCID") && get("SLURM_STEP_NUM_TASKS");
    if (!step && set("SLURM_PROCID") && set("SLURM_NTASKS")) {
        STRATO_ASSIGN_OR_RETURN(const int procid, int_var(get, "SLURM_PROCID", 0, true));
        STRATO_ASSIGN_OR_RETURN(const int ntasks, int_var(get, "SLURM_NTASKS", 1, true));
        if (procid != 0)
            return invalid_argument("SLURM_PROCID={} and SLURM_NTASKS={} without SLURM_STEP_NUM_TASKS: not an srun step "
                                    "strato can join (task 0 would run alone); start the tasks with srun, or set RANK, "
                                    "WORLD_SIZE and MASTER_ADDR",
                                    procid, ntasks);
        if (ntasks > 1)
            log::warn("SLURM_PROCID=0 and SLURM_NTASKS={} without SLURM_STEP_NUM_TASKS: read as the batch script of "
                      "an allocation, which runs once, so this is one process, not rank 0 of {}; start the tasks with "
                      "srun (or set RANK, WORLD_SIZE, MASTER_ADDR) to run on all of them",
                      ntasks, ntasks);
    }
    if (step) {
        e.source = "slurm";
        STRATO_ASSIGN_OR_RETURN(e.rank, int_var(get, "SLURM_PROCID", 0, true));
        STRATO_ASSIGN_OR_RETURN(e.world_size, int_var(get, "SLURM_STEP_NUM_TASKS", 1, true));
        STRATO_ASSIGN_OR_RETURN(e.local_rank, int_var(get, "SLURM_LOCALID", 0));
        STRATO_ASSIGN_OR_RETURN(e.group_rank, int_var(get, "SLURM_NODEID", 0));
        STRATO_ASSIGN_OR_RETURN(e.local_world_size, int_var(get, "SLURM_NTASKS_PER_NODE", 0));
        if (e.local_world_size == 0) {
            const char* name = get("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
            e.local_world_size = 1;
            if (const char* spec = get(name); spec && *spec) {
                STRATO_ASSIGN_OR_RETURN(e.local_world_size, tasks_on_node(name, spec, e.group_rank));
            }
        }
        std::string first = "127.0.0.1";
        if (const char* nodes = get("SLURM_JOB_NODELIST")) {
            STRATO_ASSIGN_OR_RETURN(auto hosts, expand_hostlist(nodes));
            if (!hosts.empty()) first = hosts.front();
        }
        STRATO_RETURN_IF_ERROR(master(e, first));
        return check(e);
    }
    if (get("OMPI_COMM_WORLD_RANK") && get("OMPI_COMM_WORLD_SIZE")) {
        e.source = "mpi";
        STRATO_ASSIGN_OR_RETURN(e.rank, int_var(get, "OMPI_COMM_WORLD_RANK", 0, true));
        STRATO_ASSIGN_OR_RETURN(e.world_size, int_var(get, "OMPI_COMM_WORLD_SIZE", 1, true));
        STRATO_ASSIGN_OR_RETURN(e.local_rank, int_var(get, "OMPI_COMM_WORLD_LOCAL_RANK", 0));
        STRATO_ASSIGN_OR_RETURN(e.local_world_size, int_var(get, "OMPI_COMM_WORLD_LOCAL_SIZE", 1));
        STRATO_ASSIGN_OR_RETURN(e.group_rank, int_var(get, "OMPI_COMM_WORLD_NODE_RANK", 0));
        if (e.world_size > e.local_world_size && !get("MASTER_ADDR"))
            return invalid_argument("mpi: {} processes on several nodes need MASTER_ADDR (the host of rank 0), e.g. "
                                    "mpirun -x MASTER_ADDR=node1",
                                    e.world_size);
        STRATO_RETURN_IF_ERROR(master(e, "127.0.0.1"));
        return check(e);
    }
    return e;
}

}  // namespace strato::dist
