#include "obs/metrics_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "obs/prometheus_text.h"

namespace shardtrain {
namespace {

std::string local_host_name() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

// Why `address`:`port` cannot be bound, asked of the kernel directly (httplib only says no).
std::string bind_failure(const std::string& address, int port) {
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &where.sin_addr) != 1) {
    return "not an IPv4 address of this host, or the port is in use";
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  const int result = ::bind(fd, reinterpret_cast<sockaddr*>(&where), sizeof(where));
  const int error = errno;
  ::close(fd);
  return result == 0 ? "in use" : std::strerror(error);
}

}  // namespace

MetricsServer::MetricsServer(const std::string& address, int port,
                             std::function<std::string()> render, const std::string& what)
    : server_(std::make_unique<httplib::Server>()), address_(address) {
  if (port < 0 || port > 65535) {
    fail("{} = {} is not a port; HINT: use 1-65535, or 0 for a free port", what, port);
  }
  server_->set_socket_options([](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  server_->Get("/metrics",
               [render = std::move(render)](const httplib::Request&, httplib::Response& response) {
                 response.set_content(render(), kExpositionContentType);
               });
  if (port == 0) {
    port_ = server_->bind_to_any_port(address);
    if (port_ <= 0) {
      fail("{}: cannot listen on a free port of address '{}'; HINT: check metrics.address", what,
           address);
    }
  } else {
    if (!server_->bind_to_port(address, port)) {
      const std::string why = bind_failure(address, port);
      fail(
          "{} = {}: cannot listen on {}:{} ({}); HINT: choose another port, or 0 for a free "
          "one",
          what, port, address, port, why);
    }
    port_ = port;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() is a no-op before the loop runs, so the destructor must not race its start.
  for (int waited_ms = 0; !server_->is_running() && waited_ms < 5000; ++waited_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsServer::url() const {
  const std::string host = address_ == "0.0.0.0" || address_.empty() ? local_host_name() : address_;
  return "http://" + host + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace shardtrain
