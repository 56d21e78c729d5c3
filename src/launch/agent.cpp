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
#include "launch/agent_stores.h"
#include "launch/launcher.h"
#include "launch/watchdog.h"
#include "launch/worker_group.h"

namespace shardtrain::launch {
namespace {

using namespace std::chrono_literals;

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

std::string random_run_id() {
  std::random_device device;
  return fmt::format("{:08x}", device());
}

std::string host_name() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

// This node's place in one round's group.
struct RoundPlan {
  int first_rank = 0;
  int world_size = 0;
};

RoundPlan join_round(Store& round, const LaunchConfig& config, const std::string& run_id) {
  const std::string me = std::to_string(config.node_rank);
  const std::string token = fmt::format("{}:{}", host_name(), ::getpid());
  const std::string claimed = round.compare_set("node/" + me + "/claim", "", token);
  if (claimed != token) {
    fail("rendezvous '{}' at {}: node rank {} has already joined (from {}); give each node its "
         "own --node-rank 0..{}",
         run_id, round.endpoint(), config.node_rank, claimed, config.max_nodes - 1);
  }
  round.set("node/" + me, std::to_string(config.nproc_per_node));

  std::vector<std::string> keys;
  for (int i = 0; i < config.max_nodes; ++i) keys.push_back("node/" + std::to_string(i));
  // Wait in slices, so a Ctrl-C during rendezvous ends the agent promptly.
  const auto deadline = std::chrono::steady_clock::now() + config.join_timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      round.wait(keys, std::clamp(left, 0ms, std::chrono::milliseconds(1000)));
      break;
    } catch (const Error&) {
      if (g_received_signal != 0) fail("interrupted by signal {} during rendezvous", g_received_signal.load());
      if (left > 1000ms) continue;
      std::string missing;
      int joined = 0;
      for (int i = 0; i < config.max_nodes; ++i) {
        if (round.try_get(keys[i])) {
          ++joined;
        } else {
          missing += (missing.empty() ? "" : ", ") + std::to_string(i);
        }
      }
      fail("rendezvous '{}' at {}: only {} of {} nodes joined within {} s (missing node rank "
           "{}); HINT: start `shardtrain launch --nnodes {} --node-rank R --rdzv-endpoint {}` on "
           "every node",
           run_id, round.endpoint(), joined, config.max_nodes, config.join_timeout.count() / 1000,
           missing, config.max_nodes, round.endpoint());
    }
  }
  RoundPlan plan;
  for (int i = 0; i < config.max_nodes; ++i) {
    const int nproc = std::stoi(round.get(keys[i], 1000ms));
    if (i < config.node_rank) plan.first_rank += nproc;
    plan.world_size += nproc;
  }
  return plan;
}

// Marks this agent as finished; node 0 (which hosts the store) then waits, briefly, until the
// other agents have read the outcome, so none of them sees the store vanish first.
void leave_round(Store& round, const LaunchConfig& config) {
  try {
    round.add("left", 1);
    if (config.node_rank != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (round.add("left", 0) < config.max_nodes && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
    }
  } catch (const Error&) {
    // Node 0 is gone already: nothing left to tell it.
  }
}

// Where one attempt's workers keep their keys (SHARDTRAIN_STORE_PREFIX), heartbeats included.
std::string worker_store_prefix(const std::string& run_id, int restart) {
  return fmt::format("run/{}/gen/{}/", run_id, restart);
}

std::vector<WorkerSpec> worker_specs(const LaunchConfig& config, const RoundPlan& plan,
                                     const std::string& store_host, int store_port,
                                     const std::string& run_id, int restart) {
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < config.nproc_per_node; ++local) {
    const int rank = plan.first_rank + local;
    WorkerSpec spec;
    spec.global_rank = rank;
    spec.env = {
        {"RANK", std::to_string(rank)},
        {"LOCAL_RANK", std::to_string(local)},
        {"WORLD_SIZE", std::to_string(plan.world_size)},
        {"LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node)},
        {"GROUP_RANK", std::to_string(config.node_rank)},
        {"GROUP_WORLD_SIZE", std::to_string(config.max_nodes)},
        {"ROLE_NAME", "default"},
        {"ROLE_RANK", std::to_string(rank)},
        {"ROLE_WORLD_SIZE", std::to_string(plan.world_size)},
        {"MASTER_ADDR", store_host},
        {"MASTER_PORT", std::to_string(store_port)},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)},
        {"TORCHELASTIC_MAX_RESTARTS", std::to_string(config.max_restarts)},
        {"TORCHELASTIC_RUN_ID", run_id},
        {"SHARDTRAIN_RESTART_COUNT", std::to_string(restart)},
        {"SHARDTRAIN_RUN_ID", run_id},
        {"SHARDTRAIN_STORE_PREFIX", worker_store_prefix(run_id, restart)},
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

}  // namespace

int run_agent(const LaunchConfig& config) {
  SignalForwarding signals;
  // Orphans of workers get re-parented to the agent, which reaps them (WorkerGroup::stop).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const std::string run_id =
      config.standalone && config.rdzv_id == "none" ? random_run_id() : config.rdzv_id;
  AgentStores stores(config, run_id);  // --rdzv-backend: embedded TCP store or etcd
  Store& rdzv = stores.rendezvous();
  const std::string store_host = stores.worker_store_host();
  const int store_port = stores.worker_store_port();
  // Node 0 watches every rank's heartbeat for hangs (launch/watchdog.h), over its own connection.
  std::unique_ptr<TcpStoreClient> watchdog_client;
  if (config.node_rank == 0 && config.watchdog_timeout.count() > 0) {
    watchdog_client = std::make_unique<TcpStoreClient>(store_host, store_port, config.join_timeout);
  }

  std::vector<std::string> command = config.command;
  if (command.front().find('/') == std::string::npos) command.insert(command.begin(), self_executable());

  for (int restart = 0;; ++restart) {
    PrefixStore round(rdzv, "round/" + std::to_string(restart) + "/");
    const RoundPlan plan = join_round(round, config, run_id);
    log::info("launch: run '{}' attempt {}: node {} of {} starting ranks {}..{} of {} (store {})",
              run_id, restart, config.node_rank, config.max_nodes, plan.first_rank,
              plan.first_rank + config.nproc_per_node - 1, plan.world_size,
              tcp_store_wire::format_endpoint(store_host, store_port));
    WorkerGroup group(command,
                      worker_specs(config, plan, store_host, store_port, run_id, restart));

    std::unique_ptr<Watchdog> watchdog;
    if (watchdog_client) {
      watchdog = std::make_unique<Watchdog>(*watchdog_client, worker_store_prefix(run_id, restart),
                                            plan.world_size, config.watchdog_timeout);
    }

    std::optional<std::string> posted;  // the round's "failed" value, once seen
    const auto should_stop = [&] {
      if (g_received_signal != 0) return true;
      if (const std::optional<std::string> hang = watchdog ? watchdog->report() : std::nullopt) {
        posted = round.compare_set("failed", "", "restart|" + *hang);
        return true;
      }
      posted = round.try_get("failed");
      return posted.has_value();
    };
    WorkerGroup::Outcome outcome = group.wait(should_stop, 200ms, g_signal_pipe[0]);
    watchdog.reset();  // the workers are done or stopping: their heartbeats no longer count
    if (outcome == WorkerGroup::Outcome::kSucceeded) {
      round.add("done", 1);
      while (!should_stop()) {
        if (round.add("done", 0) >= config.max_nodes) {
          leave_round(round, config);
          return 0;
        }
        std::this_thread::sleep_for(100ms);
      }
    } else if (outcome == WorkerGroup::Outcome::kFailed) {
      posted = round.compare_set("failed", "", "restart|" + group.failure());
    }

    if (const int sig = g_received_signal; sig != 0) {
      log::warn("launch: received signal {}; stopping the workers", sig);
      group.stop(config.stop_grace, sig);
      round.compare_set("failed", "", fmt::format("stop|node {}'s launcher received signal {}",
                                                  config.node_rank, sig));
      leave_round(round, config);
      return 128 + sig;
    }
    group.stop(config.stop_grace, SIGTERM);
    const std::string value = posted.value_or("restart|unknown failure");
    const auto bar = value.find('|');
    const std::string kind = value.substr(0, bar);
    const std::string what = value.substr(bar + 1);
    if (kind == "stop") {
      std::fprintf(stderr, "shardtrain: launch stopped: %s\n", what.c_str());
      leave_round(round, config);
      return 1;
    }
    if (restart < config.max_restarts) {
      log::warn("launch: {}; restarting the worker group (restart {} of {})", what, restart + 1,
                config.max_restarts);
      leave_round(round, config);
      continue;
    }
    std::fprintf(stderr, "shardtrain: launch failed: %s; no restarts left (--max-restarts %d)\n",
                 what.c_str(), config.max_restarts);
    leave_round(round, config);
    return 1;
  }
}

int launch_local_workers(int nproc, const std::vector<std::string>& worker_args) {
  LaunchFlags flags;
  flags.standalone = true;
  flags.nproc_per_node = std::to_string(nproc);
  flags.command = worker_args;
  // PET_* variables describe a multi-node job; this shortcut is one node by definition.
  const EnvLookup no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return run_agent(resolve_launch_config(flags, no_env));
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
