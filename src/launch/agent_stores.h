// AgentStores: the stores one launcher agent uses, chosen by --rdzv-backend.
//
// c10d (default): node 0's agent hosts the embedded TCP store at the rendezvous endpoint; the
//   agents rendezvous in it under "rdzv/<run id>/" and the workers reach it through
//   MASTER_ADDR/MASTER_PORT.
// etcd: the agents rendezvous in etcd v3 at the endpoint, under
//   "/shardtrain/<run id>/gen/<g>/", where g is the run's generation: the first agent of a
//   new launch that finds generation g closed (a previous launch with the same run id has
//   ended) moves "generation" to g+1, so a rerun never meets a stale closed or failed state.
//   Each agent's membership keys (".../node/<i>..." ) carry its etcd lease (TTL 10 s, kept
//   alive), so a dead agent's claim disappears. The workers still bootstrap through an
//   embedded TCP store: node 0's agent hosts one on a free port and publishes "HOST:PORT"
//   under gen/<g>/worker_store; the other agents read it and pass it on as MASTER_ADDR/PORT.
//   The destructor marks the generation closed.
#pragma once

#include <memory>
#include <string>

#include "dist/store.h"
#include "dist/tcp_store.h"
#include "launch/launch_config.h"

namespace shardtrain::launch {

class AgentStores {
 public:
  // Connects (retrying until config.join_timeout) and, with etcd, joins the open generation.
  // Throws Error naming the endpoint if the store cannot be reached.
  AgentStores(const LaunchConfig& config, const std::string& run_id);
  ~AgentStores();
  AgentStores(const AgentStores&) = delete;
  AgentStores& operator=(const AgentStores&) = delete;

  // Where the agents' round keys go (already scoped by run id, and generation with etcd).
  Store& rendezvous() { return *rendezvous_; }
  // The TCP store the workers connect to (MASTER_ADDR, MASTER_PORT).
  const std::string& worker_store_host() const { return worker_store_host_; }
  int worker_store_port() const { return worker_store_port_; }

 private:
  void start_tcp(const LaunchConfig& config, const std::string& run_id);
  void start_etcd(const LaunchConfig& config, const std::string& run_id);

  std::unique_ptr<TcpStoreServer> server_;  // node 0 only
  std::unique_ptr<Store> backend_;          // TcpStoreClient or EtcdStore
  std::unique_ptr<Store> rendezvous_;       // PrefixStore over backend_
  std::string generation_;                  // etcd only
  std::string worker_store_host_;
  int worker_store_port_ = 0;
};

}  // namespace shardtrain::launch
