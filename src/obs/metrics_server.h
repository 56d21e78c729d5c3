// MetricsServer: serves GET /metrics (Prometheus text 0.0.4) over HTTP/1.x on a thread of its
// own, until destroyed.
//
// The constructor binds `address`:`port` (port 0 = a free port, see port()) and starts
// serving; each scrape calls `render` on the server's thread, so `render` must be thread-safe.
// A port that cannot be bound (in use, no permission, bad address) throws Error naming it. The
// socket is bound without SO_REUSEPORT, so a second endpoint on the same port fails instead of
// silently sharing it. Other paths answer 404, other methods 405.
//
// Whatever clients send, the server's memory stays under a fixed bound and real scrapes keep
// being answered (a scraper shares the training process):
//   - at most kMaxConnections at once, each holding at most 8 KiB of request (obs/http_request.h);
//     a request body is refused without being read, as are oversized heads and too many headers;
//   - a client must send its whole request within kRequestTimeout and take the response within
//     kResponseTimeout (slowloris clients are closed);
//   - when all slots are taken, a new connection replaces the one that has waited longest
//     without completing a request, so idle or slow connections cannot lock scrapers out.
// One response per connection (Connection: close), which every Prometheus version accepts.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace shardtrain {

class MetricsServer {
 public:
  static constexpr int kMaxConnections = 32;
  static constexpr std::chrono::milliseconds kRequestTimeout{5000};
  static constexpr std::chrono::milliseconds kResponseTimeout{10000};

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
  void serve();

  std::function<std::string()> render_;
  std::string address_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: the destructor writes to end the loop
  std::thread thread_;
};

}  // namespace shardtrain
