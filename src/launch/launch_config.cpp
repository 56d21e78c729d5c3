#include "launch/launch_config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "dist/store_secret.h"
#include "io/read_file.h"
#include "launch/worker_command.h"

namespace shardtrain::launch {
namespace {

// A flag's value with where it came from, for error messages.
struct Setting {
  std::string value;
  std::string source;  // "--nnodes" or "PET_NNODES"
};

std::optional<Setting> pick(const std::optional<std::string>& flag, const char* flag_name,
                            const EnvLookup& env, const char* env_name) {
  if (flag) return Setting{*flag, flag_name};
  if (auto v = env(env_name); v && !v->empty()) return Setting{*v, env_name};
  return std::nullopt;
}

std::optional<long long> parse_int(const std::string& text) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

int parse_count(const Setting& s, long long min_value, const char* what,
                long long max_value = 1'000'000) {
  const auto v = parse_int(s.value);
  if (!v || *v < min_value || *v > max_value) {
    fail("{} '{}': expected {} (an integer in [{}, {}])", s.source, s.value, what, min_value,
         max_value);
  }
  return static_cast<int>(*v);
}

void parse_nnodes(const Setting& s, LaunchConfig& config) {
  const auto colon = s.value.find(':');
  const char* usage = "a node count N or a range MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4";
  const auto min = parse_int(s.value.substr(0, colon));
  const auto max = colon == std::string::npos ? min : parse_int(s.value.substr(colon + 1));
  if (!min || !max || *min < 1 || *max < 1 || *max > 100'000) {
    fail("{} '{}': expected {}", s.source, s.value, usage);
  }
  if (*min > *max)
    fail("{} '{}': MIN {} is greater than MAX {}; expected {}", s.source, s.value, *min, *max,
         usage);
  config.min_nodes = static_cast<int>(*min);
  config.max_nodes = static_cast<int>(*max);
}

// Splits "host:port", "[v6]:port" or (when `default_port` >= 0) a bare "host".
void parse_endpoint(const Setting& s, int default_port, std::string& host, int& port) {
  static const std::regex form(R"(^(?:\[([0-9A-Fa-f:.]+)\]|([^:\[\]\s]+))(?::([0-9]+))?$)");
  std::smatch m;
  const auto bad = [&] {
    fail(
        "{} '{}': expected HOST:PORT with a port 1-65535, e.g. 10.0.0.1:29400 or "
        "node0.cluster:29400",
        s.source, s.value);
  };
  if (!std::regex_match(s.value, m, form)) bad();
  host = m[1].matched ? m[1].str() : m[2].str();
  if (!m[3].matched) {
    if (default_port < 0) bad();
    port = default_port;
    return;
  }
  const auto p = parse_int(m[3].str());
  if (!p || *p < 1 || *p > 65535) bad();
  port = static_cast<int>(*p);
}

double parse_seconds(const Setting& s) {
  char* end = nullptr;
  const double v = std::strtod(s.value.c_str(), &end);
  if (s.value.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 86400) {
    fail("{} '{}': expected a number of seconds >= 0, e.g. 5 or 0.5", s.source, s.value);
  }
  return v;
}

std::chrono::milliseconds to_millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

// torchrun's --rdzv-conf: "key=value,key=value". Unknown keys are errors, so a typo is not
// silently ignored.
// The store secret in the file `s` names (trailing whitespace, e.g. a newline, ignored).
std::string read_token_file(const Setting& s) {
  // Only a regular file: a FIFO nobody writes would hold the launcher forever before its first
  // worker; and at most 4 KiB + 1 bytes are read (a secret is at most 1024).
  refuse_special_file(s.value, fmt::format("{} '{}': cannot read the file", s.source, s.value),
                      "give the path of the file that holds the secret");
  std::ifstream in(s.value, std::ios::binary);
  if (!in)
    fail("{} '{}': cannot read the file; HINT: check the path and its permissions", s.source,
         s.value);
  constexpr size_t kMaxSecretFileBytes = 4096;
  std::string secret(kMaxSecretFileBytes + 1, '\0');
  in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
  secret.resize(static_cast<size_t>(in.gcount()));
  secret.resize(std::min(secret.size(), secret.find('\0')));  // the secret ends at a NUL
  if (secret.size() > kMaxSecretFileBytes)
    fail("{} '{}': the file is larger than a store secret", s.source, s.value);
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
    secret.pop_back();
  check_store_secret(secret, s.source + " " + s.value);
  return secret;
}

void parse_rdzv_conf(const Setting& s, LaunchConfig& config) {
  const char* supported =
      "join_timeout, last_call_timeout, keep_alive_interval (seconds), "
      "keep_alive_max_attempt (a count), token (the store secret), token_file (a file "
      "holding it), and for etcd cacert, cert, key (TLS) and user, password";
  size_t start = 0;
  while (start <= s.value.size()) {
    const size_t comma = std::min(s.value.find(',', start), s.value.size());
    const std::string item = s.value.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      fail(
          "{} '{}': expected key=value pairs separated by commas, e.g. "
          "last_call_timeout=30,join_timeout=600",
          s.source, s.value);
    }
    const std::string key = item.substr(0, eq);
    const Setting value{item.substr(eq + 1), s.source + " " + key};
    if (key == "join_timeout") {
      config.join_timeout = to_millis(parse_seconds(value));
    } else if (key == "last_call_timeout") {
      config.last_call_timeout = to_millis(parse_seconds(value));
    } else if (key == "keep_alive_interval") {
      config.keep_alive_interval = to_millis(parse_seconds(value));
      if (config.keep_alive_interval.count() < 100) {
        fail("{} '{}': expected at least 0.1 seconds", value.source, value.value);
      }
    } else if (key == "keep_alive_max_attempt") {
      config.keep_alive_max_attempt = parse_count(value, 1, "a number of missed keep-alives");
    } else if (key == "token") {
      check_store_secret(value.value, value.source);
      config.store_secret = value.value;
    } else if (key == "token_file") {
      config.store_secret = read_token_file(value);
    } else if (key == "cacert" || key == "cert" || key == "key") {
      if (value.value.empty() || !std::filesystem::is_regular_file(value.value)) {
        fail("{} '{}': not a readable file; HINT: give the PEM file's path", value.source,
             value.value);
      }
      (key == "cacert" ? config.etcd_tls.ca_file
       : key == "cert" ? config.etcd_tls.cert_file
                       : config.etcd_tls.key_file) = value.value;
    } else if (key == "user") {
      config.etcd_user = value.value;
    } else if (key == "password") {
      config.etcd_password = value.value;
    } else {
      fail("{} '{}': unknown key '{}'; supported: {}", s.source, s.value, key, supported);
    }
  }
}

// The store secret when --rdzv-conf did not give one: PET_RDZV_TOKEN, else
// SHARDTRAIN_STORE_SECRET (the Kubernetes manifests fill it from a Secret), else generated by
// the agent (one node) or shared through etcd; the TCP store across nodes needs it given.
void resolve_store_secret(const EnvLookup& env, LaunchConfig& config) {
  if (!config.store_secret.empty()) return;
  for (const char* name : {"PET_RDZV_TOKEN", worker_env_names::kStoreSecret}) {
    if (auto v = env(name); v && !v->empty()) {
      check_store_secret(*v, name);
      config.store_secret = *v;
      return;
    }
  }
  if (config.rdzv_backend == "etcd") return;  // AgentStores shares one through etcd
  if (config.max_nodes > 1) {
    fail(
        "--nnodes {}: the agents of several nodes share the TCP store, which admits only "
        "clients with the run's secret; HINT: give every node the same --rdzv-conf "
        "token=SECRET or token_file=PATH (or PET_RDZV_TOKEN / SHARDTRAIN_STORE_SECRET), e.g. "
        "from `openssl rand -hex 32`",
        config.max_nodes);
  }
  config.store_secret = generate_store_secret();
}

// A run id nobody can guess when none was given: random on one node; on several nodes derived
// from the shared secret (which the agents all know and nobody else does).
void resolve_run_id(bool given, LaunchConfig& config) {
  if (given) return;
  if (config.max_nodes == 1) {
    config.rdzv_id = "run-" + generate_store_secret().substr(0, 16);
  } else if (!config.store_secret.empty()) {
    uint64_t hash = 0xcbf29ce484222325;  // FNV-1a: the same id on every node and build
    for (const char c : config.store_secret)
      hash = (hash ^ static_cast<uint8_t>(c)) * 0x100000001b3;
    config.rdzv_id = fmt::format("run-{:016x}", hash);
  } else {
    fail(
        "--rdzv-backend etcd with --nnodes {}: give every node the same --rdzv-id (a name for "
        "this run; it scopes the run's keys in etcd)",
        config.max_nodes);
  }
}

}  // namespace

int count_local_gpus() {
  if (std::FILE* pipe = ::popen("nvidia-smi -L 2>/dev/null", "r")) {
    int lines = 0;
    char buffer[512];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
      if (std::string(buffer).rfind("GPU ", 0) == 0) ++lines;
    }
    const int status = ::pclose(pipe);
    if (status == 0 && lines > 0) return lines;
  }
  int devices = 0;
  static const std::regex name(R"(^nvidia[0-9]+$)");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    if (std::regex_match(entry.path().filename().string(), name)) ++devices;
  }
  return devices;
}

namespace {

// The counts, timeouts and backend choice (everything but the endpoint, the id and the command).
void resolve_settings(const LaunchFlags& flags, const EnvLookup& env, LaunchConfig& config) {
  if (auto s = pick(flags.nnodes, "--nnodes", env, "PET_NNODES")) parse_nnodes(*s, config);
  if (auto s = pick(flags.nproc_per_node, "--nproc-per-node", env, "PET_NPROC_PER_NODE")) {
    if (s->value == "auto" || s->value == "gpu") {
      const int gpus = count_local_gpus();
      config.nproc_per_node = gpus > 0 ? gpus : 1;
      if (s->value == "gpu" && gpus == 0) fail("{} gpu: no GPU found on this host", s->source);
    } else if (s->value == "cpu") {
      config.nproc_per_node = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    } else {
      config.nproc_per_node =
          parse_count(*s, 1, "a process count or auto", LaunchConfig::kMaxNprocPerNode);
    }
  }
  if (auto s = pick(flags.node_rank, "--node-rank", env, "PET_NODE_RANK")) {
    config.node_rank = parse_count(*s, 0, "this node's rank");
    config.node_rank_given = true;
  }
  if (auto s = pick(flags.max_restarts, "--max-restarts", env, "PET_MAX_RESTARTS")) {
    config.max_restarts = parse_count(*s, 0, "a restart count");
  }
  if (auto s = pick(flags.stop_grace, "--stop-grace", env, "PET_STOP_GRACE")) {
    config.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(parse_seconds(*s) * 1000));
  }
  if (auto s = pick(flags.max_stop_grace, "--max-stop-grace", env, "PET_MAX_STOP_GRACE")) {
    config.max_stop_grace = to_millis(parse_seconds(*s));
    if (config.max_stop_grace < config.stop_grace) {
      fail("{} '{}' is below --stop-grace ({} s); HINT: the maximum must be at least the grace",
           s->source, s->value, config.stop_grace.count() / 1000.0);
    }
  }
  config.max_stop_grace = std::max(config.max_stop_grace, config.stop_grace);
  if (auto s = pick(flags.watchdog_timeout, "--watchdog-timeout", env, "PET_WATCHDOG_TIMEOUT")) {
    config.watchdog_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(parse_seconds(*s) * 1000));
  }
  if (auto s = pick(flags.rdzv_conf, "--rdzv-conf", env, "PET_RDZV_CONF"))
    parse_rdzv_conf(*s, config);
  if (auto s = pick(flags.rdzv_backend, "--rdzv-backend", env, "PET_RDZV_BACKEND")) {
    if (s->value == "etcd" || s->value == "etcd-v2") {
      config.rdzv_backend = "etcd";
    } else if (s->value != "c10d" && s->value != "static" && s->value != "tcp") {
      fail(
          "{} '{}': supported backends are c10d, static and tcp (the embedded TCP store hosted "
          "by node 0's launcher) and etcd (etcd v3 at --rdzv-endpoint)",
          s->source, s->value);
    }
  }
}

// Where the agents meet: --standalone's free local port, --rdzv-endpoint, or MASTER_ADDR/PORT.
void resolve_endpoint(const LaunchFlags& flags, const EnvLookup& env, LaunchConfig& config) {
  const auto rdzv_endpoint = pick(flags.rdzv_endpoint, "--rdzv-endpoint", env, "PET_RDZV_ENDPOINT");
  const auto master_addr = pick(flags.master_addr, "--master-addr", env, "PET_MASTER_ADDR");
  const auto master_port = pick(flags.master_port, "--master-port", env, "PET_MASTER_PORT");
  if (config.standalone) {
    if (config.max_nodes > 1 && flags.nnodes) {
      fail("--standalone runs a single node; it conflicts with --nnodes {}", *flags.nnodes);
    }
    if (flags.rdzv_endpoint) {
      fail(
          "--standalone picks a free local port for the store; it conflicts with "
          "--rdzv-endpoint {}",
          *flags.rdzv_endpoint);
    }
    config.min_nodes = config.max_nodes = 1;
    config.node_rank = 0;
    config.node_rank_given = true;
    config.rdzv_backend = "c10d";  // as torchrun: --standalone always uses the local store
    config.rdzv_host = "127.0.0.1";
    config.rdzv_port = 0;
  } else if (rdzv_endpoint) {
    const int default_port = config.rdzv_backend == "etcd" ? 2379 : 29400;
    parse_endpoint(*rdzv_endpoint, default_port, config.rdzv_host, config.rdzv_port);
  } else if (config.rdzv_backend == "etcd") {
    fail(
        "--rdzv-backend etcd needs --rdzv-endpoint HOST:PORT of etcd's client port, e.g. "
        "etcd0.cluster:2379");
  } else {
    if (master_addr) {
      int ignored = 0;
      parse_endpoint(*master_addr, 0, config.rdzv_host, ignored);
    }
    if (master_port) {
      const int port = parse_count(*master_port, 1, "a TCP port 1-65535");
      if (port > 65535)
        fail("{} '{}': expected a TCP port 1-65535", master_port->source, master_port->value);
      config.rdzv_port = port;
    }
  }
}

// torchrun's --tee/--redirects value: "0".."3" for every local rank, or "LOCAL:0-3,..." per
// local rank (0 none, 1 stdout, 2 stderr, 3 both).
std::vector<StreamChoice> parse_streams(const Setting& s, int nproc) {
  const auto choice = [&](const std::string& text) {
    const auto v = parse_int(text);
    if (!v || *v < 0 || *v > 3) {
      fail(
          "{} '{}': expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or LOCAL_RANK:N "
          "pairs like 0:3,1:2",
          s.source, s.value);
    }
    return StreamChoice{(*v & 1) != 0, (*v & 2) != 0};
  };
  if (s.value.find(':') == std::string::npos) {
    return std::vector<StreamChoice>(static_cast<size_t>(nproc), choice(s.value));
  }
  std::vector<StreamChoice> out(static_cast<size_t>(nproc));
  size_t start = 0;
  while (start <= s.value.size()) {
    const size_t comma = std::min(s.value.find(',', start), s.value.size());
    const std::string item = s.value.substr(start, comma - start);
    start = comma + 1;
    const auto colon = item.find(':');
    const auto rank = parse_int(item.substr(0, colon));
    if (colon == std::string::npos || !rank || *rank < 0 || *rank >= nproc) {
      fail("{} '{}': '{}' is not LOCAL_RANK:N with a local rank 0..{}", s.source, s.value, item,
           nproc - 1);
    }
    out[static_cast<size_t>(*rank)] = choice(item.substr(colon + 1));
  }
  return out;
}

// --tee, --redirects, --log-dir, --local-ranks-filter, --monitor-interval, --role,
// --start-method.
void resolve_worker_io(const LaunchFlags& flags, const EnvLookup& env, LaunchConfig& config) {
  const int nproc = config.nproc_per_node;
  if (auto s = pick(flags.tee, "--tee", env, "PET_TEE")) config.tee = parse_streams(*s, nproc);
  if (auto s = pick(flags.redirects, "--redirects", env, "PET_REDIRECTS")) {
    config.redirects = parse_streams(*s, nproc);
  }
  if (auto s = pick(flags.log_dir, "--log-dir", env, "PET_LOG_DIR")) config.log_dir = s->value;
  if (auto s =
          pick(flags.local_ranks_filter, "--local-ranks-filter", env, "PET_LOCAL_RANKS_FILTER")) {
    size_t start = 0;
    while (start <= s->value.size()) {
      const size_t comma = std::min(s->value.find(',', start), s->value.size());
      const auto rank = parse_int(s->value.substr(start, comma - start));
      if (!rank || *rank < 0 || *rank >= nproc) {
        fail("{} '{}': expected local ranks 0..{} separated by commas, e.g. 0 or 0,1", s->source,
             s->value, nproc - 1);
      }
      config.local_ranks_filter.push_back(static_cast<int>(*rank));
      start = comma + 1;
    }
  }
  if (auto s = pick(flags.monitor_interval, "--monitor-interval", env, "PET_MONITOR_INTERVAL")) {
    config.monitor_interval = std::max(std::chrono::milliseconds(10), to_millis(parse_seconds(*s)));
  }
  if (auto s = pick(flags.role, "--role", env, "PET_ROLE")) {
    static const std::regex role_form(R"(^[A-Za-z0-9._-]{1,64}$)");
    if (!std::regex_match(s->value, role_form)) {
      fail("{} '{}': use letters, digits, '.', '_' or '-' (at most 64)", s->source, s->value);
    }
    config.role = s->value;
  }
  if (auto s = pick(flags.start_method, "--start-method", env, "PET_START_METHOD")) {
    // Workers are always fork+exec'd fresh processes: spawn's semantics, whichever is named.
    if (s->value != "spawn" && s->value != "fork" && s->value != "forkserver") {
      fail(
          "{} '{}': expected spawn, fork or forkserver (workers always start as fresh "
          "processes, as with spawn)",
          s->source, s->value);
    }
  }
}

}  // namespace

LaunchConfig resolve_launch_config(const LaunchFlags& flags, const EnvLookup& env) {
  LaunchConfig config;
  config.standalone = flags.standalone;
  if (!flags.standalone) {
    if (auto v = env("PET_STANDALONE"); v && !v->empty() && *v != "0" && *v != "false") {
      config.standalone = true;
    }
  }
  resolve_settings(flags, env, config);
  resolve_endpoint(flags, env, config);
  if (auto s = pick(flags.rdzv_id, "--rdzv-id", env, "PET_RDZV_ID")) {
    static const std::regex id_form(R"(^[A-Za-z0-9._-]{1,128}$)");
    if (!std::regex_match(s->value, id_form)) {
      fail("{} '{}': use letters, digits, '.', '_' or '-' (at most 128)", s->source, s->value);
    }
    config.rdzv_id = s->value;
  }

  if (config.node_rank >= config.max_nodes) {
    fail("--node-rank {} must be less than --nnodes {} (node ranks are 0..{})", config.node_rank,
         config.max_nodes, config.max_nodes - 1);
  }

  const bool etcd_security = !config.etcd_tls.ca_file.empty() ||
                             !config.etcd_tls.cert_file.empty() ||
                             !config.etcd_tls.key_file.empty() || !config.etcd_user.empty() ||
                             !config.etcd_password.empty();
  if (etcd_security && config.rdzv_backend != "etcd") {
    fail("--rdzv-conf cacert/cert/key/user/password configure etcd; they need --rdzv-backend etcd");
  }
  resolve_store_secret(env, config);
  resolve_run_id(!config.rdzv_id.empty(), config);

  resolve_worker_io(flags, env, config);
  const WorkerCommand command = resolve_worker_command(flags, env);
  config.command = command.argv;
  config.shardtrain_worker = command.shardtrain_subcommand;
  return config;
}

}  // namespace shardtrain::launch
