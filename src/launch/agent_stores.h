// AgentStores: the stores one launcher agent uses, chosen by --rdzv-backend.
//
// c10d (default): one agent hosts the embedded TCP store at the rendezvous endpoint: the one
//   with --node-rank 0, or, where no node rank was given, an agent on the machine the endpoint
//   names (the first there to bind the port). The agents rendezvous in it under
//   "rdzv/<run id>/" (launch/rendezvous.h) and the workers reach it through SHARDTRAIN_STORE
//   (dist/worker_env.h). If the hosting agent dies the run ends: the others fail with a store
//   error.
// etcd: the agents rendezvous in etcd v3 at the endpoint, under "/shardtrain/<run id>/". The
//   liveness keys ("alive/<agent id>", launch/agent_liveness.h) carry the agent's etcd lease
//   (TTL keep_alive_interval x keep_alive_max_attempt, kept alive, revoked on exit). The
//   workers still bootstrap through an embedded TCP store: the agent with group rank 0 of a
//   generation hosts one (on a free port, started the first time it is rank 0) and publishes
//   it (worker_endpoints); the others read it and pass it on as SHARDTRAIN_STORE. Any agent
//   may die: the others re-form without it.
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
  // What generation `g`'s workers are told (dist/worker_env.h): `store`, the TCP store
  // shardtrain workers rendezvous in and publish heartbeats to (SHARDTRAIN_STORE), and
  // `master`, a port free on group rank 0's host for rank 0 of a PyTorch job to host its own
  // c10d store (MASTER_ADDR, MASTER_PORT; a fresh one per generation). g's group rank 0 picks
  // them (with etcd it also starts the workers' store the first time) and publishes them under
  // gen/<g>/worker_endpoints; the others wait for that, polling `give_up` and returning
  // nullopt when it says to. Throws Error when nothing (or a malformed value) is published
  // within join_timeout.
  struct WorkerEndpoints {
    Endpoint store;
    Endpoint master;
    std::string store_secret;  // what `store` requires (worker_store_secret()); not published
  };
  std::optional<WorkerEndpoints> worker_endpoints(const Generation& g,
                                                  const std::function<bool()>& give_up);
  // The secret every client of the workers' store presents (dist/store_secret.h): the run's
  // given or generated one; with etcd and none given, the one the agents share through etcd.
  const std::string& worker_store_secret() const { return store_secret_; }

 private:
  void start_tcp(const LaunchConfig& config, const std::string& run_id);
  void start_etcd(const LaunchConfig& config, const std::string& run_id);
  // Group rank 0: the endpoints of generation g (starting the etcd backend's workers' store).
  WorkerEndpoints pick_worker_endpoints();

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
