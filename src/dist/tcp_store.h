// The embedded TCP store: the default Store backend, nothing to install.
//
// TcpStoreServer holds the key-value map in memory and serves any number of clients, one
// thread per connection. Blocking get/wait are done server-side: the connection's thread
// waits on a condition variable until the keys exist or the request's timeout passes, so
// clients never poll. The node-0 launcher agent hosts one; workers reach it through
// MASTER_ADDR:MASTER_PORT.
//
// TcpStoreClient is one connection to a server. Its constructor retries connecting with
// exponential backoff until `connect_timeout`, because workers and agents of other nodes may
// start before the server. Calls are serialised by a mutex, so one client may be shared by
// threads, but a blocking get/wait then holds up the other threads' calls: give a thread that
// blocks its own client. Every failure (timeout, lost connection) throws shardtrain::Error
// naming the key, the endpoint and what to check.
//
// Values and messages are limited to 64 MiB (tcp_store_wire::kMaxFrameBytes).
#pragma once

#include <atomic>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/store.h"
#include "dist/tcp_store_wire.h"

namespace shardtrain {

class TcpStoreServer {
 public:
  // Binds host:port and starts serving. Port 0 picks a free port (see port()). An empty host
  // or "0.0.0.0" listens on every interface. Throws Error if the address cannot be bound.
  TcpStoreServer(const std::string& host, int port);
  // Stops serving: closes every connection, wakes blocked requests and joins all threads.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // Number of open client connections (for tests and diagnostics).
  size_t connection_count() const;

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> finished{false};
  };

  void accept_loop();
  void serve(Connection& connection);
  // Runs one request; returns the response payload (without length prefix).
  std::string handle(const std::string& request, int fd);
  void reap_finished_connections();  // REQUIRES: connections_mutex_ held

  std::string host_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};  // written by the destructor to stop accept_loop
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;

  mutable std::mutex connections_mutex_;
  std::list<Connection> connections_;

  std::mutex data_mutex_;
  std::condition_variable data_changed_;
  std::map<std::string, std::string> data_;
};

class TcpStoreClient final : public Store {
 public:
  // Connects to host:port, retrying with backoff (10 ms doubling to 1 s) until
  // `connect_timeout`. Throws Error naming the endpoint if no connection could be made.
  TcpStoreClient(std::string host, int port, Duration connect_timeout);
  ~TcpStoreClient() override;
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Duration timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  bool remove(const std::string& key) override;
  std::string endpoint() const override;
  // Round trip to the server; throws Error if it is gone.
  void ping();

 private:
  // Sends `request` and returns the response payload after its status byte has been checked
  // to be ok. A timeout status throws Error naming `what` (the key). `timeout` bounds how long
  // the server may legitimately take.
  std::string call(const tcp_store_wire::Writer& request, const std::string& operation,
                   const std::string& what, Duration timeout);

  std::string host_;
  int port_;
  int fd_ = -1;
  std::mutex mutex_;
};

}  // namespace shardtrain
