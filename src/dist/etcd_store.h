// EtcdStore: a Store over etcd v3's JSON gateway (HTTP POST to /v3/kv/* and /v3/lease/* on the
// client port, e.g. 127.0.0.1:2379; etcd 3.4+, Debian `etcd-server`). Keys and values travel
// base64-encoded in JSON; each request is one POST through the shared libcurl client
// (dist/etcd_http.h), optionally over TLS with client certificates, and etcd's user/password
// authentication can be used (Options).
//
// Every key is prefixed by `scope` (e.g. "/shardtrain/<run id>/"), so runs never share keys.
//   set         = put
//   get / wait  = range, polled with a short backoff (10 ms doubling to 200 ms) until present
//   add         = compare-and-swap loop on the key's mod_revision (values are decimal integers)
//   compare_set = txn comparing the value (or create_revision == 0 for "absent")
//   remove      = deleterange
//
// Lease: with `lease_ttl_seconds` > 0 the constructor grants a lease and a background thread
// keeps it alive (every TTL/3). Writes to keys for which `leased_keys(key)` is true (key
// without the scope) carry the lease, so they vanish TTL seconds after this process dies
// (membership). The destructor stops the thread and revokes the lease.
//
// Connection errors are retried with backoff until `request_timeout` (or the call's own
// timeout); failures throw shardtrain::Error naming the key, the endpoint and what to check.
// Calls are thread-safe (each request has its own connection).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dist/etcd_http.h"
#include "dist/store.h"

namespace shardtrain {

class EtcdStore final : public Store {
 public:
  struct Options {
    Duration request_timeout{30000};                          // retries of one non-blocking call
    int lease_ttl_seconds = 0;                                // 0: no lease
    std::function<bool(const std::string& key)> leased_keys;  // which writes carry the lease
    EtcdTlsFiles tls;  // https with these when tls.ca_file is set (dist/etcd_http.h)
    // etcd user/password authentication (both or neither): the constructor gets a token from
    // /v3/auth/authenticate and every request carries it; an expired one is renewed.
    std::string user, password;
  };

  // REQUIRES: `scope` starts and ends with '/'.
  // Throws Error if a lease is asked for and etcd cannot be reached within request_timeout.
  EtcdStore(std::string host, int port, std::string scope, Options options);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Duration timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  bool remove(const std::string& key) override;
  std::string endpoint() const override;

  // etcd's /v3/maintenance/status (one request, no retries), for `shardtrain doctor`: the
  // server's version, leader id ("0" = no leader), alarms, and its clock from the HTTP Date
  // header (whole seconds) with the local time halfway through the request.
  // Throws Error naming the endpoint when etcd cannot be reached or does not answer.
  struct ServerStatus {
    std::string version;
    std::string leader;
    std::vector<std::string> errors;
    std::optional<std::chrono::system_clock::time_point> server_date;
    std::chrono::system_clock::time_point local_midpoint;
    std::chrono::milliseconds round_trip{0};
  };
  ServerStatus server_status(Duration timeout);

  // Stops refreshing the lease without revoking it, as if this process had died (for tests).
  void stop_keepalive();

 private:
  // POSTs `body` (JSON) to `path`, retrying connection failures until `deadline`; returns the
  // parsed JSON response text. `what` names the key for error messages.
  std::string post(const std::string& path, const std::string& body, const std::string& what,
                   std::chrono::steady_clock::time_point deadline);
  std::chrono::steady_clock::time_point request_deadline() const;
  // Lease id to attach to a write of `key`, or "" for none.
  std::string lease_for(const std::string& key) const;
  // The value of `key`, or nullopt; connection failures are retried until `deadline`.
  std::optional<std::string> read(const std::string& key,
                                  std::chrono::steady_clock::time_point deadline);
  void keepalive_loop();
  void authenticate();  // sets auth_token_; throws Error naming the user when refused
  std::string auth_token();

  std::string host_;
  int port_;
  std::string scope_;
  Options options_;
  std::string lease_id_;  // decimal, "" without a lease
  std::unique_ptr<EtcdTls> tls_;  // null: plain HTTP
  std::mutex auth_mutex_;
  std::string auth_token_;

  std::mutex keepalive_mutex_;
  std::condition_variable keepalive_stop_;
  bool keepalive_stopping_ = false;
  std::thread keepalive_thread_;
};

}  // namespace shardtrain
