// MetricsServer: serves GET /metrics (Prometheus text 0.0.4) over HTTP with cpp-httplib, on a
// thread of its own, until destroyed.
//
// The constructor binds `address`:`port` (port 0 = a free port, see port()) and starts
// serving; each scrape calls `render` on one of the server's two threads, so `render` must be
// thread-safe. A port that cannot be bound (in use, no permission, bad address) throws Error
// naming it. The socket is bound without SO_REUSEPORT, so a second endpoint on the same port
// fails instead of silently sharing it. Other paths answer 404.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace shardtrain {

class MetricsServer {
 public:
  // `what` names the setting in errors, e.g. "metrics.port" or "--metrics-port".
  MetricsServer(const std::string& address, int port, std::function<std::string()> render,
                const std::string& what);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // "http://HOST:PORT/metrics", HOST being the address, or this host's name for 0.0.0.0.
  std::string url() const;

 private:
  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace shardtrain
