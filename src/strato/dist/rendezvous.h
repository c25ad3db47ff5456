#pragma once
// Rendezvous of node agents (`strato launch --rdzv-backend c10d --rdzv-endpoint HOST:PORT`):
// the agent that can bind HOST:PORT hosts the server (in a thread), every agent (that one too)
// joins as a client over one TCP connection. A line protocol:
//
//   client -> JOIN <run_id> <node_id> <node_rank|-1> <local_world_size> <addr> <master_port>
//   server -> ROUND <round> <group_rank> <group_world_size> <world_size> <rank_offset> <master_addr> <master_port>
//   client -> FAIL <round> <message>          a worker failed here: restart everyone
//   client -> DONE <round>                    every worker here exited 0
//   server -> RESTART <round> <message>       stop the workers and JOIN again
//   server -> EXIT                            every node is done
//   server -> ABORT <message>                 give up (restarts used up, too few nodes)
//   both   -> PING                            every 2 s; silence for 30 s is a dead peer
//
// A round forms when max_nodes have joined, or min_nodes and `last_call` seconds have passed;
// with fewer than min_nodes after `join_timeout` it aborts naming how many came. Group ranks go
// by the requested node rank, then by node id; the master of a round is its group rank 0. A lost
// connection while running is a failed node: the others restart (scale-down, if min_nodes still
// join). Failures (a FAIL, a lost node) count against max_restarts; a node arriving while a round
// runs starts a new round to grow the group (up to max_nodes) without using one up; beyond
// max_nodes it waits, and leaves with the others at EXIT.

#include <memory>
#include <optional>
#include <string>

#include "strato/core/status.h"

namespace strato::dist {

struct RdzvSettings {
    std::string run_id = "none";
    int min_nodes = 1, max_nodes = 1;
    int max_restarts = 0;
    double join_timeout_s = 600, last_call_s = 30, peer_timeout_s = 30;
};

struct RoundAssignment {
    int round = 0, group_rank = 0, group_world_size = 1, world_size = 1, rank_offset = 0;
    int restarts = 0;  // rounds begun after a failure (TORCHELASTIC_RESTART_COUNT); scale-ups are not
    std::string master_addr;
    int master_port = 0;
};

/// True when `host` is a name (not an address, not localhost) that resolves to a loopback address
/// here: this machine's own name in a /etc/hosts that maps it to 127.0.1.1 or 127.0.0.1, while
/// the other nodes resolve it to the machine's network address. The server then listens on every
/// interface, and the node advertises its host name rather than the loopback address it reached
/// the rendezvous from.
bool loopback_alias(const std::string& host);

class RendezvousServer {
public:
    /// Binds host:port (fails if another process has it; every interface for a loopback_alias) and
    /// serves in a thread.
    static Result<std::unique_ptr<RendezvousServer>> start(const std::string& host, int port, const RdzvSettings& s);
    ~RendezvousServer();
    int port() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

class RendezvousClient {
public:
    /// Connects, retrying until `timeout_s` (the server may not be up yet); kCancelled once a stop
    /// signal came (signals::stop_requested).
    static Result<std::unique_ptr<RendezvousClient>> connect(const std::string& host, int port, double timeout_s);
    ~RendezvousClient();

    struct Join {
        std::string run_id, node_id, addr;
        int node_rank = -1, local_world_size = 1, master_port = 0;
    };
    /// Joins the next round and waits for it to form (kCancelled on ABORT, with its message; on
    /// EXIT — the job ended while this node waited — kCancelled with the message "EXIT"; on
    /// SIGINT/SIGTERM, kCancelled "interrupted"). `timeout_s` bounds the wait for a round to form;
    /// a node the server tells to WAIT (it came while a round of max_nodes runs) waits for a place
    /// without a limit, as long as the server lives and the job runs.
    Result<RoundAssignment> join(const Join& j, double timeout_s);
    Status fail(int round, const std::string& message);
    Status done(int round);

    enum class Event { kNone, kRestart, kExit, kAbort };
    /// Reads what the server said, without blocking; sends the heartbeat when due.
    Result<Event> poll(std::string* message);
    /// The address the connection leaves from (what other nodes can reach this one at).
    std::string local_address() const;
    /// Sends the heartbeat if it is due (while the agent is busy stopping workers).
    void keepalive();

private:
    RendezvousClient() = default;
    /// A line, or nullopt after `timeout_s` (0: only what has arrived).
    Result<std::optional<std::string>> read_line(double timeout_s);
    Status send(const std::string& line);
    int fd_ = -1;
    std::string buffer_;
    double last_ping_ = 0, last_heard_ = 0;
};

}  // namespace strato::dist
