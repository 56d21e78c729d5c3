// Rendezvous: the launcher agents of one run agree, generation by generation, on who is in the
// group and in what order (torchrun's dynamic rendezvous, over any Store).
//
// Keys, in the run's store ("rdzv/<run id>/" in the embedded TCP store, "/shardtrain/<run id>/"
// in etcd; launch/agent_stores.h):
//   generation       the current generation g; moved to g+1 (compare_set) when g ends
//   gen/<g>/state    {"status": "joining"|"closed", "attempt", "restarts", "members": [...],
//                    "waiting": [...]} (JSON), only ever replaced whole by compare_set, so every
//                    join, drop, close and wait is atomic
//   gen/<g>/failed   why g's workers stop: "restart|<what>" (a failure, counts against
//                    --max-restarts), "rejoin|<what>" (agents are waiting to join), or
//                    "stop|<what>" (the run ends); the first post wins
//   gen/<g>/done     agents whose workers all exited 0;  gen/<g>/left: agents that exited
//   gen/<g>/ended    the run ended in g (success, final failure or stop); a later launch with
//                    the same run id then opens g+1 as a new run
//   alive/<agent id> liveness (launch/agent_liveness.h)
//
// Joining: an agent appends itself to the open generation's members. The generation closes as
// soon as max_nodes agents have joined, or once min_nodes have and last_call_timeout has passed
// since a member first saw min_nodes joined (by its own clock). Closing fixes the group order:
// agents that ran in an earlier generation first, by their rank there (a node keeps its place),
// then by requested --node-rank, then by join order. A member that is judged gone while the
// group forms is dropped. An agent that finds the generation closed without it adds itself to
// its "waiting" list; generation g+1 starts with those agents as members (as many as places
// remain beside g's members), and agent.cpp re-forms a running group smaller than max_nodes
// when someone waits. If every member of the closed generation is gone, the waiting agent ends
// it itself.
//
// attempt: 0 for a new run and +1 per generation after it (the workers'
// TORCHELASTIC_RESTART_COUNT, so every generation's worker keys are fresh). restarts: how many
// "restart|" failures came before this generation; the same for every agent of the group.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/store.h"
#include "dist/store_keys.h"
#include "launch/agent_liveness.h"
#include "launch/launch_config.h"

namespace shardtrain::launch {

struct RendezvousMember {
  std::string id;          // "<host>:<pid>:<random>", unique per agent process
  std::string host;        // for messages
  int nproc = 1;           // workers on that node
  int node_rank = -1;      // requested --node-rank, -1 if none
  int previous_rank = -1;  // group rank in the last generation the agent ran in, -1 if none
};

// A closed generation, as seen by one of its members.
struct Generation {
  int64_t number = 0;
  int64_t attempt = 0;
  int restarts = 0;
  std::vector<RendezvousMember> members;  // in group-rank order
  int group_rank = 0;                     // this agent's index in members

  int first_rank() const;  // global rank of this agent's first worker
  int world_size() const;  // workers over all members
  // Where this generation's keys live in the run's store: "gen/<g>/".
  std::string prefix() const { return store_keys::generation(number); }
};

class Rendezvous {
 public:
  // REQUIRES: `run_store` and `liveness` outlive this object; `interrupted` says whether the
  // agent has been asked to stop (polled while waiting).
  Rendezvous(Store& run_store, AgentLiveness& liveness, const LaunchConfig& config,
             std::string run_id, RendezvousMember self, std::function<bool()> interrupted);

  // Joins the current generation, or the next one when it is closed already, and returns it
  // once it has closed with this agent in it. `previous_rank`: this agent's group rank in the
  // generation it ran in last (-1 for none). Throws Error when fewer than min_nodes joined
  // within join_timeout, when no place was found within join_timeout, when the requested node
  // rank is taken by a live agent, or when interrupted.
  Generation join(int previous_rank);

  // Moves "generation" past g (a no-op if another agent did already).
  void advance(const Generation& g);
  // Agents waiting to join after g closed.
  int waiting_count(const Generation& g);
  // Records that the run ended in g (every agent calls it on its way out).
  void end(const Generation& g, const std::string& how);
  // The first other member of g judged gone, described as "node 1 (host) left the group: <why>".
  std::optional<std::string> departed_member(const Generation& g);

 private:
  struct State;
  struct JoinProgress;
  // What join() does after one step: read the state again at once, or after a poll period.
  enum class JoinStep { kReadAgain, kPoll };
  // join()'s steps for a generation that is closed without this agent (wait for the next),
  // forming without it (enter) and forming with it (close it once complete). Each throws
  // Error as join() does when the deadline passes.
  JoinStep wait_for_next(int64_t g, const State& state, const JoinProgress& progress);
  JoinStep enter_forming(int64_t g, const State& state, const JoinProgress& progress);
  JoinStep close_when_complete(int64_t g, const State& state, JoinProgress& progress);

  int64_t current_generation();
  std::optional<State> read_state(int64_t g);
  void open_state(int64_t g);
  // Whether the store's state of g (serialised `before`) became `after`.
  bool replace_state(int64_t g, const State& before, const State& after);
  void add_self(int64_t g, const State& state);
  void close(int64_t g, const State& state);
  void drop_departed(int64_t g, const State& state);
  // Takes this agent off g's member list (while g forms) or waiting list (once g is closed),
  // best effort, when it gives up.
  void withdraw(int64_t g);
  void advance_from(int64_t g);
  [[noreturn]] void fail_join_timeout(const State& state);
  [[noreturn]] void fail_no_place(int64_t g, const State& state);
  std::string where() const;

  Store& store_;
  AgentLiveness& liveness_;
  const LaunchConfig& config_;
  std::string run_id_;
  RendezvousMember self_;
  std::function<bool()> interrupted_;
};

}  // namespace shardtrain::launch
