// The embedded TCP store: the default Store backend, nothing to install.
//
// TcpStoreServer holds the key-value map in memory (dist/tcp_store_requests.h) and serves its
// clients from one thread: a poll loop over non-blocking sockets, so idle connections cost a
// file descriptor and a small buffer, never a thread. Blocking get/wait are done server-side: a
// request whose keys are missing stays pending until they are set or its timeout passes, so
// clients never poll. The node-0 launcher agent hosts one; workers reach it through
// MASTER_ADDR:MASTER_PORT.
//
// Only members of the run get in: every connection must first present the run's secret in the
// handshake frame (tcp_store_wire.h); a wrong secret, magic or version is answered with an
// error, logged (with the peer's address, at most one line a second) and the connection closed.
// Limits (Limits below) bound what any client, member or not, can make the server hold: a
// connection that does not complete its handshake in time, or stalls in the middle of a frame,
// is closed; connections beyond max_connections are closed on accept; frames, keys, values and
// the map's total size are capped.
//
// TcpStoreClient is one connection to a server. Its constructor retries connecting with
// exponential backoff until `connect_timeout` (workers and agents of other nodes may start
// before the server), then presents the secret; a refusal is final. Calls are serialised by a
// mutex, so one client may be shared by threads, but a blocking get/wait then holds up the other
// threads' calls: give a thread that blocks its own client. Every failure (timeout, lost
// connection, refused secret) throws shardtrain::Error naming the key, the endpoint and what
// to check.
//
// Messages are limited to 64 MiB (tcp_store_wire::kMaxFrameBytes), values to 32 MiB.
#pragma once

#include <atomic>
#include <chrono>
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
  struct Limits {
    size_t max_connections = 1024;
    // A new connection must complete its handshake within this time.
    std::chrono::milliseconds handshake_timeout{10'000};
    // A frame whose first bytes arrived must be complete within this time.
    std::chrono::milliseconds frame_timeout{30'000};
    // Keys plus values held in all.
    size_t max_total_bytes = size_t{1} << 30;
  };

  // Binds host:port and starts serving the clients that present `secret` (REQUIRES: not
  // empty). Port 0 picks a free port (see port()). `host` binds that address only; an empty
  // host or "0.0.0.0" listens on every interface. Throws Error if the address cannot be bound.
  TcpStoreServer(const std::string& host, int port, std::string secret);
  TcpStoreServer(const std::string& host, int port, std::string secret, Limits limits);
  // Stops serving: closes every connection and joins the serving thread.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // Number of open client connections, handshake done or not (for tests and diagnostics).
  size_t connection_count() const { return connection_count_; }
  // Connections refused so far (wrong secret, magic or version, no handshake in time, a
  // request before the handshake, over max_connections).
  size_t refused_count() const { return refused_count_; }

 private:
  class Loop;  // the poll loop and its connections (tcp_store_server.cpp)

  std::string host_;
  int port_ = 0;
  std::atomic<size_t> connection_count_{0};
  std::atomic<size_t> refused_count_{0};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

class TcpStoreClient final : public Store {
 public:
  // Connects to host:port, retrying with backoff (10 ms doubling to 1 s) until
  // `connect_timeout`, and presents `secret`. Throws Error naming the endpoint if no connection
  // could be made or the server refused the secret.
  TcpStoreClient(std::string host, int port, Duration connect_timeout, std::string secret);
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
  // Sends the handshake on the fresh connection fd_; "" when accepted, else why not (and
  // `final` tells whether retrying cannot help).
  std::string handshake(const std::string& secret, tcp_store_wire::Clock::time_point deadline,
                        bool& final);

  std::string host_;
  int port_;
  int fd_ = -1;
  std::mutex mutex_;
};

}  // namespace shardtrain
