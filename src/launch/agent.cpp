// The launcher agent's main loop: rendezvous, start workers, watch, restart (launcher.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "dist/host_name.h"
#include "dist/store_keys.h"
#include "dist/store_value.h"
#include "dist/tcp_store.h"
#include "launch/agent_liveness.h"
#include "launch/agent_stores.h"
#include "launch/hang_watch.h"
#include "launch/launcher.h"
#include "launch/node_metrics.h"
#include "launch/rendezvous.h"
#include "launch/run_files.h"
#include "launch/stop_grace.h"
#include "launch/worker_group.h"
#include "launch/worker_specs.h"

namespace shardtrain::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Signal handling state must be global: a handler can reach nothing else.
std::atomic<int> g_received_signal{0};
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  g_received_signal = sig;
  const char byte = 1;
  [[maybe_unused]] ssize_t ignored = ::write(g_signal_pipe[1], &byte, 1);
}

// Catches SIGINT/SIGTERM for the agent's lifetime (to forward them to the workers) and
// restores the previous handlers afterwards.
class SignalForwarding {
 public:
  SignalForwarding() {
    if (g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      fail("cannot create the launcher's signal pipe");
    }
    g_received_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalForwarding() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

std::string random_hex() {
  std::random_device device;
  return fmt::format("{:08x}", device());
}

// The labels of this node's metrics; pod and namespace from the Kubernetes downward API
// (dist/worker_env.h reads them).
NodeIdentity node_identity(const std::string& run_id, const std::string& host) {
  const PodIdentity pod = parse_pod_identity(process_env());
  NodeIdentity identity;
  identity.run_id = run_id;
  identity.pod = pod.name;
  identity.pod_namespace = pod.namespace_name;
  identity.hostname = host;
  return identity;
}

// How one generation's attempt ended.
struct AttemptEnd {
  enum class Kind { kSucceeded, kInterrupted, kFailed } kind = Kind::kFailed;
  std::string failed;  // kFailed: the generation's "failed" value, "restart|<what>" etc.
};

// What every agent of a generation's group watches while its workers run (each 200 ms): a
// signal, the hang watch (launch/hang_watch.h), a failure posted by another agent, and, every
// liveness check, a member that is gone and agents waiting to join a group smaller than max_nodes.
// Whatever this agent notices first it posts as the generation's failure (the first post wins).
class GroupWatch {
 public:
  GroupWatch(const LaunchConfig& config, const Generation& gen, Store& keys, Rendezvous& rendezvous,
             AgentLiveness& liveness)
      : config_(config),
        gen_(gen),
        keys_(keys),
        rendezvous_(rendezvous),
        liveness_(liveness),
        next_check_(Clock::now() + liveness.check_interval()) {}

  // While the workers run: their hang check (nullptr: none).
  void watch_hangs(HangWatch* hang) { hang_ = hang; }

  // Whether the workers must stop; then failure() says why (unless a signal came).
  bool should_stop(bool workers_running) {
    if (g_received_signal != 0) return true;
    if (const std::optional<std::string> hang = hang_ ? hang_->check() : std::nullopt) {
      return post("restart|" + *hang);
    }
    posted_ = keys_.try_get("failed");
    if (posted_) return true;
    if (Clock::now() < next_check_) return false;
    next_check_ = Clock::now() + liveness_.check_interval();
    if (const std::optional<std::string> gone = rendezvous_.departed_member(gen_)) {
      return post("restart|" + *gone);
    }
    const int nodes = static_cast<int>(gen_.members.size());
    if (workers_running && nodes < config_.max_nodes) {
      if (const int waiting = rendezvous_.waiting_count(gen_); waiting > 0) {
        return post(
            fmt::format("rejoin|{} node(s) waiting to join the group of {} (--nnodes "
                        "allows {})",
                        waiting, nodes, config_.max_nodes));
      }
    }
    return false;
  }

  // Posts `value` unless another failure was posted first; returns true.
  bool post(const std::string& value) {
    posted_ = keys_.compare_set("failed", "", value);
    return true;
  }
  void post_signal(int sig) {
    post(fmt::format("stop|node {}'s launcher received signal {}", gen_.group_rank, sig));
  }

  // How the attempt ends when it did not succeed.
  AttemptEnd unsuccessful() const {
    if (g_received_signal != 0) return AttemptEnd{AttemptEnd::Kind::kInterrupted, ""};
    return AttemptEnd{AttemptEnd::Kind::kFailed, posted_.value_or("restart|unknown failure")};
  }

 private:
  const LaunchConfig& config_;
  const Generation& gen_;
  Store& keys_;
  Rendezvous& rendezvous_;
  AgentLiveness& liveness_;
  HangWatch* hang_ = nullptr;
  std::optional<std::string> posted_;  // the generation's "failed" value, once seen
  Clock::time_point next_check_;
};

// Where the workers of one generation meet, as this agent knows it.
struct GenerationContext {
  const LaunchConfig& config;
  const std::string& run_id;
  const Generation& gen;
  const AgentStores::WorkerEndpoints& endpoints;
};

// The signal workers get when the agent is interrupted by `sig`: shardtrain workers treat
// SIGTERM as "checkpoint and stop", so Ctrl-C (SIGINT) reaches them as SIGTERM; other
// commands get the signal itself (Python: KeyboardInterrupt), as under torchrun.
int signal_for_workers(const LaunchConfig& config, int sig) {
  return config.shardtrain_worker && sig == SIGINT ? SIGTERM : sig;
}

// Stops the group, letting workers that save a checkpoint finish it (launch/stop_grace.h),
// then prints the last lines a failed worker wrote off the console.
void stop_workers(const GenerationContext& c, WorkerGroup& group, int sig) {
  std::vector<int> ranks;
  for (int local = 0; local < c.config.nproc_per_node; ++local) {
    ranks.push_back(c.gen.first_rank() + local);
  }
  SaveAwareGrace grace(c.endpoints.store.host, c.endpoints.store.port, c.endpoints.store_secret,
                       store_keys::worker_attempt(c.run_id, c.gen.attempt), ranks,
                       c.config.stop_grace, c.config.max_stop_grace);
  if (c.config.shardtrain_worker) {
    group.stop(c.config.stop_grace, sig, [&] { return grace(); });
  } else {
    group.stop(c.config.stop_grace, sig);
  }
  if (const std::string tail = group.failure_output(); !tail.empty()) {
    std::fprintf(stderr, "shardtrain: last output of the failed worker:\n%s", tail.c_str());
  }
}

// The hang check of generation `gen`'s workers: heartbeats (shardtrain workers, read by group
// rank 0 over a connection of its own) or this node's processes (other commands).
HangWatch start_hang_watch(const GenerationContext& c, const WorkerGroup& group) {
  if (c.config.watchdog_timeout.count() <= 0) return HangWatch();
  if (!c.config.shardtrain_worker) {
    std::vector<ProcessWatchdog::Worker> workers;
    const std::vector<pid_t> pids = group.pids();
    for (size_t i = 0; i < pids.size(); ++i) {
      workers.push_back({c.gen.first_rank() + static_cast<int>(i), pids[i]});
    }
    return HangWatch(c.config.watchdog_timeout, std::move(workers));
  }
  if (c.gen.group_rank != 0) return HangWatch();
  return HangWatch(
      HeartbeatSource{c.endpoints.store.host, c.endpoints.store.port, c.endpoints.store_secret,
                      store_keys::worker_attempt(c.run_id, c.gen.attempt), c.gen.world_size()},
      c.config.join_timeout, c.config.watchdog_timeout);
}

// After this node's workers all exited 0: waits until every node's did (or a failure).
AttemptEnd wait_for_all_done(Store& keys, GroupWatch& watch, int nodes) {
  keys.add("done", 1);
  const auto all_done = [&] {
    const std::optional<std::string> done = keys.try_get("done");
    return done && parse_store_integer(keys, "done", *done) >= nodes;
  };
  while (true) {
    if (all_done()) return AttemptEnd{AttemptEnd::Kind::kSucceeded, ""};
    // A peer that finished and left after this agent's last read is not a failure.
    if (watch.should_stop(false)) {
      if (g_received_signal == 0 && all_done()) return AttemptEnd{AttemptEnd::Kind::kSucceeded, ""};
      return watch.unsuccessful();
    }
    std::this_thread::sleep_for(100ms);
  }
}

// Runs this node's workers for generation `gen` until the group succeeds, fails, must re-form
// or the agent is interrupted (GroupWatch).
AttemptEnd run_generation(const LaunchConfig& config, const std::string& run_id,
                          const std::vector<std::string>& command, const Generation& gen,
                          AgentStores& stores, Rendezvous& rendezvous, AgentLiveness& liveness,
                          RunFiles& files, NodeMetrics* metrics) {
  PrefixStore keys(stores.rendezvous(), gen.prefix());
  const int nodes = static_cast<int>(gen.members.size());
  GroupWatch watch(config, gen, keys, rendezvous, liveness);
  const std::optional<AgentStores::WorkerEndpoints> endpoints =
      stores.worker_endpoints(gen, [&] { return watch.should_stop(false); });
  if (!endpoints) {
    if (g_received_signal != 0) watch.post_signal(g_received_signal);
    return watch.unsuccessful();
  }
  const GenerationContext context{config, run_id, gen, *endpoints};
  log::info(
      "launch: run '{}' attempt {}: node {} of {} starting ranks {}..{} of {} "
      "(generation {}, store {})",
      run_id, gen.attempt, gen.group_rank, nodes, gen.first_rank(),
      gen.first_rank() + config.nproc_per_node - 1, gen.world_size(), gen.number,
      tcp_store_wire::format_endpoint(endpoints->store.host, endpoints->store.port));
  if (metrics != nullptr) {
    metrics->start_generation(gen.group_rank, gen.restarts, gen.number, config.nproc_per_node);
  }
  WorkerGroup group(command, worker_specs(config, gen, *endpoints, run_id,
                                          files.attempt_dir(gen.attempt, config.nproc_per_node),
                                          metrics != nullptr ? metrics->dir() : ""));
  HangWatch hang = start_hang_watch(context, group);
  watch.watch_hangs(&hang);
  const WorkerGroup::Outcome outcome = group.wait([&] { return watch.should_stop(true); },
                                                  config.monitor_interval, g_signal_pipe[0]);
  // The workers are done or stopping: their heartbeats no longer count.
  watch.watch_hangs(nullptr);
  hang.stop();
  if (outcome == WorkerGroup::Outcome::kSucceeded) {
    const AttemptEnd end = wait_for_all_done(keys, watch, nodes);
    if (end.kind == AttemptEnd::Kind::kSucceeded) return end;
  } else if (outcome == WorkerGroup::Outcome::kFailed) {
    // A worker's exit code 2 is a user mistake (bad config, missing file): a restart would
    // only repeat it.
    const bool usage = group.failure_exit_code() == 2;
    watch.post((usage ? "usage|" : "restart|") + group.failure());
  }
  if (const int sig = g_received_signal; sig != 0) {
    log::warn("launch: received signal {}; stopping the workers", sig);
    stop_workers(context, group, signal_for_workers(config, sig));
    watch.post_signal(sig);
    return AttemptEnd{AttemptEnd::Kind::kInterrupted, ""};
  }
  stop_workers(context, group, SIGTERM);
  return watch.unsuccessful();
}

// Records the run's end in `gen` and, on the agent hosting the rendezvous store, waits
// (briefly) until the others have read the outcome, so none of them sees the store vanish
// first. Returns `exit_code`.
int finish(AgentStores& stores, Rendezvous& rendezvous, const Generation& gen,
           const std::string& how, int exit_code) {
  try {
    rendezvous.end(gen, how);
    PrefixStore keys(stores.rendezvous(), gen.prefix());
    keys.add("left", 1);
    if (!stores.hosts_rendezvous_store()) return exit_code;
    const auto deadline = Clock::now() + 10s;
    const auto left = [&] {
      return parse_store_integer(keys, "left", keys.try_get("left").value_or("0"));
    };
    while (left() < static_cast<int64_t>(gen.members.size()) && Clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
    }
  } catch (const Error&) {
    // The store is gone already: nothing left to tell.
  }
  return exit_code;
}

}  // namespace

int run_agent(const LaunchConfig& config, const MetricsOptions& metrics_options) {
  SignalForwarding signals;
  // Orphans of workers get re-parented to the agent, which reaps them (WorkerGroup::stop).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const std::string& run_id = config.rdzv_id;  // never empty (resolve_launch_config)
  AgentStores stores(config, run_id);  // --rdzv-backend: embedded TCP store or etcd
  RunFiles files(config, run_id);
  RendezvousMember self;
  self.host = host_name();
  self.id = fmt::format("{}:{}:{}", self.host, ::getpid(), random_hex());
  self.nproc = config.nproc_per_node;
  self.node_rank = config.node_rank_given ? config.node_rank : -1;
  AgentLiveness liveness(stores.liveness_mode(), stores.liveness_publisher(), stores.rendezvous(),
                         self.id, config.keep_alive_interval, config.keep_alive_max_attempt);
  Rendezvous rendezvous(stores.rendezvous(), liveness, config, run_id, self,
                        [] { return g_received_signal != 0; });
  std::unique_ptr<NodeMetrics> metrics;
  if (metrics_options.enabled()) {
    metrics = std::make_unique<NodeMetrics>(metrics_options, node_identity(run_id, self.host));
  }

  const std::vector<std::string>& command = config.command;

  Generation gen = rendezvous.join(-1);
  while (true) {
    const AttemptEnd end = run_generation(config, run_id, command, gen, stores, rendezvous,
                                          liveness, files, metrics.get());
    if (end.kind == AttemptEnd::Kind::kSucceeded) {
      return finish(stores, rendezvous, gen, "succeeded", 0);
    }
    if (end.kind == AttemptEnd::Kind::kInterrupted) {
      return finish(stores, rendezvous, gen, "interrupted", 128 + g_received_signal);
    }
    const auto bar = end.failed.find('|');
    const std::string kind = end.failed.substr(0, bar);
    const std::string what = end.failed.substr(bar + 1);
    if (kind == "stop") {
      std::fprintf(stderr, "shardtrain: launch stopped: %s\n", what.c_str());
      return finish(stores, rendezvous, gen, "stopped", 1);
    }
    if (kind == "usage") {
      std::fprintf(stderr,
                   "shardtrain: launch failed: %s (exit code 2: a user error such as a bad "
                   "config or a missing file; not restarted)\n",
                   what.c_str());
      return finish(stores, rendezvous, gen, "failed", 2);
    }
    if (kind == "rejoin") {
      log::warn("launch: {}; re-forming the group (not counted as a restart)", what);
    } else if (gen.restarts < config.max_restarts) {
      log::warn("launch: {}; restarting the worker group (restart {} of {})", what,
                gen.restarts + 1, config.max_restarts);
    } else {
      std::fprintf(stderr, "shardtrain: launch failed: %s; no restarts left (--max-restarts %d)\n",
                   what.c_str(), config.max_restarts);
      return finish(stores, rendezvous, gen, "failed", 1);
    }
    rendezvous.advance(gen);
    gen = rendezvous.join(gen.group_rank);
  }
}

int launch_local_workers(int nproc, const std::vector<std::string>& worker_args,
                         const MetricsOptions& metrics) {
  LaunchFlags flags;
  flags.standalone = true;
  flags.nproc_per_node = std::to_string(nproc);
  flags.command = worker_args;
  flags.subcommands = {worker_args.front()};
  // PET_* variables describe a multi-node job; this shortcut is one node by definition.
  const EnvLookup no_env = [](const std::string&) -> std::optional<std::string> {
    return std::nullopt;
  };
  return run_agent(resolve_launch_config(flags, no_env), metrics);
}

std::vector<std::string> own_args_without(const std::string& option) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  std::vector<std::string> out;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == option) {
      ++i;  // skip its value too
      continue;
    }
    if (args[i].rfind(option + "=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

}  // namespace shardtrain::launch
