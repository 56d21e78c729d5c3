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
#include "dist/tcp_store.h"
#include "launch/agent_liveness.h"
#include "launch/agent_stores.h"
#include "launch/launcher.h"
#include "launch/node_metrics.h"
#include "launch/rendezvous.h"
#include "launch/watchdog.h"
#include "launch/worker_group.h"

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

std::string self_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : path.string();
}

std::string random_hex() {
  std::random_device device;
  return fmt::format("{:08x}", device());
}

std::string host_name() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

// The labels of this node's metrics; pod and namespace from the Kubernetes downward API.
NodeIdentity node_identity(const std::string& run_id, const std::string& host) {
  const EnvLookup env = process_env();
  NodeIdentity identity;
  identity.run_id = run_id;
  identity.pod = env("POD_NAME").value_or("");
  identity.pod_namespace = env("POD_NAMESPACE").value_or("");
  identity.hostname = host;
  return identity;
}

// Where one attempt's workers keep their keys (SHARDTRAIN_STORE_PREFIX), heartbeats included.
std::string worker_store_prefix(const std::string& run_id, int64_t attempt) {
  return fmt::format("run/{}/gen/{}/", run_id, attempt);
}

std::vector<WorkerSpec> worker_specs(const LaunchConfig& config, const Generation& gen,
                                     const AgentStores::Endpoint& store,
                                     const std::string& run_id) {
  std::vector<WorkerSpec> specs;
  const int first_rank = gen.first_rank();
  const int world_size = gen.world_size();
  for (int local = 0; local < config.nproc_per_node; ++local) {
    const int rank = first_rank + local;
    WorkerSpec spec;
    spec.global_rank = rank;
    spec.env = {
        {"RANK", std::to_string(rank)},
        {"LOCAL_RANK", std::to_string(local)},
        {"WORLD_SIZE", std::to_string(world_size)},
        {"LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node)},
        {"GROUP_RANK", std::to_string(gen.group_rank)},
        {"GROUP_WORLD_SIZE", std::to_string(gen.members.size())},
        {"ROLE_NAME", "default"},
        {"ROLE_RANK", std::to_string(rank)},
        {"ROLE_WORLD_SIZE", std::to_string(world_size)},
        {"MASTER_ADDR", store.host},
        {"MASTER_PORT", std::to_string(store.port)},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(gen.attempt)},
        {"TORCHELASTIC_MAX_RESTARTS", std::to_string(config.max_restarts)},
        {"TORCHELASTIC_RUN_ID", run_id},
        {"SHARDTRAIN_RESTART_COUNT", std::to_string(gen.attempt)},
        {"SHARDTRAIN_RUN_ID", run_id},
        {"SHARDTRAIN_STORE_PREFIX", worker_store_prefix(run_id, gen.attempt)},
    };
    // As torchrun: one thread per worker unless the user chose, so N workers do not
    // oversubscribe the cores N times.
    if (config.nproc_per_node > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
      spec.env["OMP_NUM_THREADS"] = "1";
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

// How one generation's attempt ended.
struct AttemptEnd {
  enum class Kind { kSucceeded, kInterrupted, kFailed } kind = Kind::kFailed;
  std::string failed;  // kFailed: the generation's "failed" value, "restart|<what>" etc.
};

// What every agent of a generation's group watches while its workers run (each 200 ms): a
// signal, the watchdog (group rank 0), a failure posted by another agent, and, every liveness
// check, a member that is gone and agents waiting to join a group smaller than max_nodes.
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

  void watch_hangs(Watchdog* watchdog) { watchdog_ = watchdog; }

  // Whether the workers must stop; then failure() says why (unless a signal came).
  bool should_stop(bool workers_running) {
    if (g_received_signal != 0) return true;
    if (const std::optional<std::string> hang = watchdog_ ? watchdog_->report() : std::nullopt) {
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
        return post(fmt::format("rejoin|{} node(s) waiting to join the group of {} (--nnodes "
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
  Watchdog* watchdog_ = nullptr;
  std::optional<std::string> posted_;  // the generation's "failed" value, once seen
  Clock::time_point next_check_;
};

// Runs this node's workers for generation `gen` until the group succeeds, fails, must re-form
// or the agent is interrupted (GroupWatch).
AttemptEnd run_generation(const LaunchConfig& config, const std::string& run_id,
                          const std::vector<std::string>& command, const Generation& gen,
                          AgentStores& stores, Rendezvous& rendezvous, AgentLiveness& liveness,
                          NodeMetrics* metrics) {
  PrefixStore keys(stores.rendezvous(), gen.prefix());
  const int nodes = static_cast<int>(gen.members.size());
  GroupWatch watch(config, gen, keys, rendezvous, liveness);
  const std::optional<AgentStores::Endpoint> store =
      stores.worker_store(gen, [&] { return watch.should_stop(false); });
  if (!store) {
    if (g_received_signal != 0) watch.post_signal(g_received_signal);
    return watch.unsuccessful();
  }
  log::info("launch: run '{}' attempt {}: node {} of {} starting ranks {}..{} of {} "
            "(generation {}, store {})",
            run_id, gen.attempt, gen.group_rank, nodes, gen.first_rank(),
            gen.first_rank() + config.nproc_per_node - 1, gen.world_size(), gen.number,
            tcp_store_wire::format_endpoint(store->host, store->port));
  std::vector<WorkerSpec> specs = worker_specs(config, gen, *store, run_id);
  if (metrics != nullptr) {
    metrics->start_generation(gen.group_rank, gen.restarts, gen.number, config.nproc_per_node);
    for (WorkerSpec& spec : specs) spec.env.merge(metrics->worker_env());
  }
  WorkerGroup group(command, specs);

  // Group rank 0 watches every rank's heartbeat for hangs (launch/watchdog.h), over its own
  // connection.
  std::unique_ptr<TcpStoreClient> watchdog_client;
  std::unique_ptr<Watchdog> watchdog;
  if (gen.group_rank == 0 && config.watchdog_timeout.count() > 0) {
    watchdog_client =
        std::make_unique<TcpStoreClient>(store->host, store->port, config.join_timeout);
    watchdog =
        std::make_unique<Watchdog>(*watchdog_client, worker_store_prefix(run_id, gen.attempt),
                                   gen.world_size(), config.watchdog_timeout);
    watch.watch_hangs(watchdog.get());
  }
  const WorkerGroup::Outcome outcome =
      group.wait([&] { return watch.should_stop(true); }, 200ms, g_signal_pipe[0]);
  // The workers are done or stopping: their heartbeats no longer count.
  watch.watch_hangs(nullptr);
  watchdog.reset();
  if (outcome == WorkerGroup::Outcome::kSucceeded) {
    keys.add("done", 1);
    const auto all_done = [&] {
      const std::optional<std::string> done = keys.try_get("done");
      return done && std::stoll(*done) >= nodes;
    };
    while (true) {
      if (all_done()) return AttemptEnd{AttemptEnd::Kind::kSucceeded, ""};
      // A peer that finished and left after this agent's last read is not a failure.
      if (watch.should_stop(false)) {
        if (g_received_signal == 0 && all_done()) {
          return AttemptEnd{AttemptEnd::Kind::kSucceeded, ""};
        }
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
  } else if (outcome == WorkerGroup::Outcome::kFailed) {
    watch.post("restart|" + group.failure());
  }
  if (const int sig = g_received_signal; sig != 0) {
    log::warn("launch: received signal {}; stopping the workers", sig);
    group.stop(config.stop_grace, sig);
    watch.post_signal(sig);
    return AttemptEnd{AttemptEnd::Kind::kInterrupted, ""};
  }
  group.stop(config.stop_grace, SIGTERM);
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
    const auto left = [&] { return std::stoll(keys.try_get("left").value_or("0")); };
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
  const std::string run_id =
      config.standalone && config.rdzv_id == "none" ? random_hex() : config.rdzv_id;
  AgentStores stores(config, run_id);  // --rdzv-backend: embedded TCP store or etcd
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

  std::vector<std::string> command = config.command;
  if (command.front().find('/') == std::string::npos) {
    command.insert(command.begin(), self_executable());
  }

  Generation gen = rendezvous.join(-1);
  while (true) {
    const AttemptEnd end =
        run_generation(config, run_id, command, gen, stores, rendezvous, liveness, metrics.get());
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
  // PET_* variables describe a multi-node job; this shortcut is one node by definition.
  const EnvLookup no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
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
