// AgentStores: the stores one launcher agent uses, chosen by --rdzv-backend.
//
// c10d (default): one agent hosts the embedded TCP store at the rendezvous endpoint: the one
//   with --node-rank 0, or, where no node rank was given, an agent on the machine the endpoint
//   names (the first there to bind the port). The agents rendezvous in it under
//   "rdzv/<run id>/" (launch/rendezvous.h) and the workers reach it through MASTER_ADDR and
//   MASTER_PORT. If the hosting agent dies the run ends: the others fail with a store error.
// etcd: the agents rendezvous in etcd v3 at the endpoint, under "/shardtrain/<run id>/". The
//   liveness keys ("alive/<agent id>", launch/agent_liveness.h) carry the agent's etcd lease
//   (TTL keep_alive_interval x keep_alive_max_attempt, kept alive, revoked on exit). The
//   workers still bootstrap through an embedded TCP store: the agent with group rank 0 of a
//   generation hosts one (on a free port, started the first time it is rank 0) and publishes
//   "HOST:PORT" under gen/<g>/worker_store; the others read it and pass it on as
//   MASTER_ADDR/MASTER_PORT. Any agent may die: the others re-form without it.
// Every TCP store requires the run's secret (dist/store_secret.h) and binds only the address
// its endpoint resolves to.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dist/store.h"
#include "dist/tcp_store.h"
#include "launch/agent_liveness.h"
#include "launch/launch_config.h"
#include "launch/rendezvous.h"

namespace shardtrain::launch {

class AgentStores {
 public:
  // Connects (retrying until config.join_timeout). Throws Error naming the endpoint if the
  // store cannot be reached, or if this agent must host the TCP store and cannot bind it.
  AgentStores(const LaunchConfig& config, const std::string& run_id);
  AgentStores(const AgentStores&) = delete;
  AgentStores& operator=(const AgentStores&) = delete;

  // The run's rendezvous keys (launch/rendezvous.h).
  Store& rendezvous() { return *rendezvous_; }
  // Where this agent publishes its liveness: a connection of its own (c10d) or the leased
  // etcd store (etcd).
  Store& liveness_publisher() { return *liveness_publisher_; }
  AgentLiveness::Mode liveness_mode() const { return liveness_mode_; }
  // Whether this agent hosts the store everybody rendezvouses in (c10d): it must then stay
  // until the others have read the run's outcome.
  bool hosts_rendezvous_store() const { return rendezvous_server_ != nullptr; }

  struct Endpoint {
    std::string host;
    int port = 0;
  };
  // The TCP store generation `g`'s workers connect to (MASTER_ADDR, MASTER_PORT). With etcd,
  // g's group rank 0 starts (if need be) and publishes it; the others wait for it, polling
  // `give_up` and returning nullopt when it says to. Throws Error when nothing is published
  // within join_timeout.
  std::optional<Endpoint> worker_store(const Generation& g, const std::function<bool()>& give_up);
  // The secret every client of the workers' store presents (dist/store_secret.h): the run's
  // given or generated one; with etcd and none given, the one the agents share through etcd.
  const std::string& worker_store_secret() const { return store_secret_; }

 private:
  void start_tcp(const LaunchConfig& config, const std::string& run_id);
  void start_etcd(const LaunchConfig& config, const std::string& run_id);

  const LaunchConfig& config_;
  std::string run_id_;
  std::unique_ptr<TcpStoreServer> rendezvous_server_;  // c10d: the hosting agent only
  std::unique_ptr<TcpStoreServer> worker_server_;      // etcd: once this agent was rank 0
  std::unique_ptr<Store> backend_;                     // TcpStoreClient or EtcdStore
  std::unique_ptr<Store> rendezvous_;                  // PrefixStore over backend_
  std::unique_ptr<Store> liveness_backend_;            // c10d: a second TcpStoreClient
  std::unique_ptr<Store> liveness_publisher_;          // PrefixStore, like rendezvous_
  AgentLiveness::Mode liveness_mode_ = AgentLiveness::Mode::kHeartbeat;
  Endpoint worker_endpoint_;  // c10d: fixed; etcd: worker_server_'s, once started
  std::string store_secret_;
};

}  // namespace shardtrain::launch
