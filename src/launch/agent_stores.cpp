#include "launch/agent_stores.h"

#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "dist/etcd_store.h"

namespace shardtrain::launch {
namespace {

constexpr int kLeaseTtlSeconds = 10;

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The generation agents of this launch join: the current one unless a previous launch with
// the same run id closed it, in which case the first agent to notice opens the next.
std::string open_generation(Store& run) {
  while (true) {
    const auto current = run.try_get("generation");
    if (!current) {
      run.compare_set("generation", "", "0");
      continue;
    }
    if (!run.try_get("gen/" + *current + "/closed")) return *current;
    // Losing this race is fine: another agent moved it on; read again.
    run.compare_set("generation", *current, std::to_string(std::stoll(*current) + 1));
  }
}

}  // namespace

AgentStores::AgentStores(const LaunchConfig& config, const std::string& run_id) {
  if (config.rdzv_backend == "etcd") {
    start_etcd(config, run_id);
  } else {
    start_tcp(config, run_id);
  }
}

AgentStores::~AgentStores() {
  if (generation_.empty()) return;
  try {
    backend_->set("gen/" + generation_ + "/closed", "1");
  } catch (const Error& e) {
    log::warn("launch: could not mark etcd generation {} closed: {}", generation_, e.what());
  }
}

void AgentStores::start_tcp(const LaunchConfig& config, const std::string& run_id) {
  worker_store_host_ = config.rdzv_host;
  worker_store_port_ = config.rdzv_port;
  if (config.node_rank == 0) {
    // Bind exactly the endpoint's address when it is loopback; otherwise every interface,
    // since the name other nodes use (a service or pod name) may not be bindable here.
    const std::string bind_host = is_loopback(config.rdzv_host) ? config.rdzv_host : "";
    server_ = std::make_unique<TcpStoreServer>(bind_host, config.rdzv_port);
    worker_store_port_ = server_->port();
  }
  backend_ =
      std::make_unique<TcpStoreClient>(worker_store_host_, worker_store_port_, config.join_timeout);
  rendezvous_ = std::make_unique<PrefixStore>(*backend_, "rdzv/" + run_id + "/");
}

void AgentStores::start_etcd(const LaunchConfig& config, const std::string& run_id) {
  EtcdStore::Options options;
  options.request_timeout = config.join_timeout;
  options.lease_ttl_seconds = kLeaseTtlSeconds;
  options.leased_keys = [](const std::string& key) {
    return key.find("/node/") != std::string::npos;
  };
  backend_ = std::make_unique<EtcdStore>(config.rdzv_host, config.rdzv_port,
                                         "/shardtrain/" + run_id + "/", std::move(options));
  generation_ = open_generation(*backend_);
  const std::string worker_store_key = "gen/" + generation_ + "/worker_store";
  const bool loopback = is_loopback(config.rdzv_host);
  if (config.node_rank == 0) {
    server_ = std::make_unique<TcpStoreServer>(loopback ? "127.0.0.1" : "", 0);
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    worker_store_host_ = loopback ? "127.0.0.1" : name;
    worker_store_port_ = server_->port();
    backend_->set(worker_store_key, worker_store_host_ + ":" + std::to_string(worker_store_port_));
  } else {
    std::string published;
    try {
      published = backend_->get(worker_store_key, config.join_timeout);
    } catch (const Error& e) {
      fail(
          "{}; HINT: start `shardtrain launch --node-rank 0 --rdzv-backend etcd "
          "--rdzv-id {}` (node 0 hosts the workers' store)",
          e.what(), run_id);
    }
    const auto colon = published.rfind(':');
    worker_store_host_ = published.substr(0, colon);
    worker_store_port_ = std::stoi(published.substr(colon + 1));
  }
  log::info("launch: etcd rendezvous at {}, run '{}' generation {}", backend_->endpoint(), run_id,
            generation_);
  rendezvous_ = std::make_unique<PrefixStore>(*backend_, "gen/" + generation_ + "/");
}

}  // namespace shardtrain::launch
