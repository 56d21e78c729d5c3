#include "dist/worker_env.h"

#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "dist/tcp_store_wire.h"

namespace shardtrain {
namespace {

namespace names = worker_env_names;

constexpr const char* kHint =
    "HINT: start workers with `shardtrain launch` (or torchrun), which sets it";

std::optional<std::string> non_empty(const EnvLookup& env, const char* name) {
  std::optional<std::string> value = env(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

int parse_int(const std::string& text, const char* name, int min_value, int max_value) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min_value ||
      value > max_value) {
    fail("environment variable {}='{}' is not an integer in [{}, {}]; {}", name, text, min_value,
         max_value, kHint);
  }
  return value;
}

// An integer variable: `fallback` when unset.
int int_or(const EnvLookup& env, const char* name, int fallback, int min_value = 0,
           int max_value = 1 << 24) {
  const std::optional<std::string> text = non_empty(env, name);
  return text ? parse_int(*text, name, min_value, max_value) : fallback;
}

// An integer variable that must be present because `because` is.
int required_int(const EnvLookup& env, const char* name, const char* because, int min_value) {
  const std::optional<std::string> text = non_empty(env, name);
  if (!text) fail("environment variable {} is not set, but {} is; {}", name, because, kHint);
  return parse_int(*text, name, min_value, 1 << 24);
}

std::string string_or(const EnvLookup& env, const char* name, const std::string& fallback) {
  return non_empty(env, name).value_or(fallback);
}

// SHARDTRAIN_STORE: "host:port" or "[v6]:port".
void parse_store(const std::string& text, WorkerEnv& out) {
  const auto colon = text.rfind(':');
  std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) {
    fail("environment variable {}='{}' is not HOST:PORT; {}", names::kStore, text, kHint);
  }
  out.store_host = host;
  out.store_port = parse_int(text.substr(colon + 1), names::kStore, 1, 65535);
}

void parse_launch_variables(const EnvLookup& env, WorkerEnv& out) {
  out.launched = true;
  out.world = required_int(env, names::kWorldSize, names::kRank, 1);
  out.rank = required_int(env, names::kRank, names::kWorldSize, 0);
  out.local_world = int_or(env, names::kLocalWorldSize, out.world, 1);
  out.local_rank = int_or(env, names::kLocalRank, out.rank % out.local_world);
  if (out.rank >= out.world) {
    fail("RANK={} and WORLD_SIZE={} are inconsistent: need 0 <= RANK < WORLD_SIZE", out.rank,
         out.world);
  }
  if (out.world % out.local_world != 0) {
    fail("LOCAL_WORLD_SIZE={} must divide WORLD_SIZE={} (the same number of ranks per node)",
         out.local_world, out.world);
  }
  if (out.local_rank >= out.local_world) {
    fail("LOCAL_RANK={} must be less than LOCAL_WORLD_SIZE={}", out.local_rank, out.local_world);
  }
  out.group_world = int_or(env, names::kGroupWorldSize, out.world / out.local_world, 1);
  out.group_rank = int_or(env, names::kGroupRank, out.rank / out.local_world);
  out.role_name = string_or(env, names::kRoleName, "default");
  out.role_world = int_or(env, names::kRoleWorldSize, out.world, 1);
  out.role_rank = int_or(env, names::kRoleRank, out.rank);
  out.master_addr = string_or(env, names::kMasterAddr, "");
  out.master_port = int_or(env, names::kMasterPort, 0, 0, 65535);
  out.max_restarts = int_or(env, names::kMaxRestarts, 0);
  out.run_id = string_or(env, names::kRunId, string_or(env, names::kShardtrainRunId, ""));
  out.error_file = string_or(env, names::kErrorFile, "");
  if (const std::optional<std::string> store = non_empty(env, names::kStore)) {
    parse_store(*store, out);
  }
  out.store_prefix = string_or(env, names::kStorePrefix, "");
  out.metrics_dir = string_or(env, names::kMetricsDir, "");
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

PodIdentity parse_pod_identity(const EnvLookup& env) {
  return PodIdentity{string_or(env, names::kPodName, ""), string_or(env, names::kPodNamespace, "")};
}

WorkerEnv parse_worker_env(const EnvLookup& env) {
  WorkerEnv out;
  if (non_empty(env, names::kRank) || non_empty(env, names::kWorldSize)) {
    parse_launch_variables(env, out);
  }
  // Also for a single process: a restarted one-rank group resumes like a larger one.
  out.restart_count = int_or(env, names::kRestartCount, 0);
  out.store_dir = string_or(env, names::kStoreDir, "");
  // Also for a single process: a worker started by hand may join a store (dist/dist_env.h).
  out.store_secret = string_or(env, names::kStoreSecret, "");
  out.gloo_ifname = string_or(env, names::kGlooIfname, string_or(env, names::kGlooIfnameAlias, ""));
  if (const std::optional<std::string> text = non_empty(env, names::kCommTimeout)) {
    out.comm_timeout = std::chrono::seconds(parse_int(*text, names::kCommTimeout, 1, 1 << 24));
  }
  out.pod = parse_pod_identity(env);
  return out;
}

WorkerEnv read_worker_env() { return parse_worker_env(process_env()); }

std::map<std::string, std::string> worker_environment(const WorkerEnv& env) {
  std::map<std::string, std::string> out = {
      {names::kRank, std::to_string(env.rank)},
      {names::kWorldSize, std::to_string(env.world)},
      {names::kLocalRank, std::to_string(env.local_rank)},
      {names::kLocalWorldSize, std::to_string(env.local_world)},
      {names::kGroupRank, std::to_string(env.group_rank)},
      {names::kGroupWorldSize, std::to_string(env.group_world)},
      {names::kRoleName, env.role_name},
      {names::kRoleRank, std::to_string(env.role_rank)},
      {names::kRoleWorldSize, std::to_string(env.role_world)},
      {names::kMasterAddr, env.master_addr},
      {names::kMasterPort, std::to_string(env.master_port)},
      {names::kRestartCount, std::to_string(env.restart_count)},
      {names::kMaxRestarts, std::to_string(env.max_restarts)},
      {names::kRunId, env.run_id},
      // PyTorch's env:// init must host its own c10d store at MASTER_PORT (worker_env.h).
      {names::kUseAgentStore, "False"},
      {names::kShardtrainRestartCount, std::to_string(env.restart_count)},
      {names::kShardtrainRunId, env.run_id},
      {names::kStorePrefix, env.store_prefix},
  };
  if (!env.store_host.empty()) {
    out[names::kStore] = tcp_store_wire::format_endpoint(env.store_host, env.store_port);
  }
  if (!env.error_file.empty()) out[names::kErrorFile] = env.error_file;
  if (!env.store_secret.empty()) out[names::kStoreSecret] = env.store_secret;
  if (!env.metrics_dir.empty()) out[names::kMetricsDir] = env.metrics_dir;
  return out;
}

}  // namespace shardtrain
