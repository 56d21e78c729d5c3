#include "obs/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "obs/http_request.h"
#include "obs/prometheus_text.h"

namespace shardtrain {
namespace {

using Clock = std::chrono::steady_clock;

std::string local_host_name() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// One client connection: the request bytes so far (at most 8 KiB + a read), then the response.
struct Connection {
  int fd = -1;
  Clock::time_point accepted;
  Clock::time_point deadline;
  std::string request;
  std::string response;  // empty until the request is complete or refused
  size_t sent = 0;
  // After a refusal: the response is sent and the write side shut; what the client still sends
  // (the rest of a body it was told not to send) is read and dropped, up to kDrainBytes, so the
  // close does not reset the connection before the client has read why.
  bool draining = false;
  size_t drained = 0;
  bool refused = false;
  bool responding() const { return draining || !response.empty(); }
};

constexpr size_t kDrainBytes = 64 << 10;
constexpr std::chrono::milliseconds kDrainTimeout{1000};

std::string response_text(int status, const std::string& content_type, const std::string& body,
                          bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + http_status_text(status) +
                    "\r\nContent-Type: " + content_type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += body;
  return out;
}

// Binds a listening socket; returns the fd or throws Error naming `what`.
int listen_on(const std::string& address, int port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int lookup =
      ::getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints, &found);
  if (lookup != 0) {
    fail("{} = {}: cannot listen on {}:{} ({}); HINT: check metrics.address", what, port, address,
         port, ::gai_strerror(lookup));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      why = errno == EADDRINUSE ? "in use" : std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    if (port == 0) {
      fail("{}: cannot listen on a free port of address '{}' ({}); HINT: check metrics.address",
           what, address, why);
    }
    fail("{} = {}: cannot listen on {}:{} ({}); HINT: choose another port, or 0 for a free one",
         what, port, address, port, why);
  }
  set_nonblocking(fd);
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage where{};
  socklen_t length = sizeof(where);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&where), &length);
  if (where.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&where)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&where)->sin_port);
}

}  // namespace

MetricsServer::MetricsServer(const std::string& address, int port,
                             std::function<std::string()> render, const std::string& what)
    : render_(std::move(render)), address_(address) {
  if (port < 0 || port > 65535) {
    fail("{} = {} is not a port; HINT: use 1-65535, or 0 for a free port", what, port);
  }
  listen_fd_ = listen_on(address, port, what);
  port_ = bound_port(listen_fd_);
  if (::pipe2(wake_fd_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    fail("{}: cannot create the metrics server's wake-up pipe ({})", what, std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  const char stop = 1;
  // The loop polls the pipe's read end; one byte ends it. Joined before any member goes.
  while (::write(wake_fd_[1], &stop, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_[0]);
  ::close(wake_fd_[1]);
  ::close(listen_fd_);
}

namespace {

// What a connection's turn of the loop leaves it as.
enum class Turn { kKeep, kClose };

using ReadBuffer = std::array<char, 4096>;

// The response to send on `c` instead of serving it (a refused request, a failed render).
void refuse(Connection& c, int status, const std::string& reason, bool head_only) {
  c.response = response_text(status, "text/plain; charset=utf-8", reason + "\n", head_only);
  c.refused = true;
  c.sent = 0;
  c.deadline = Clock::now() + MetricsServer::kResponseTimeout;
}

// After a refusal: reads and drops what the client still sends, up to kDrainBytes.
Turn drain(Connection& c, ReadBuffer& chunk) {
  const ssize_t got = ::recv(c.fd, chunk.data(), chunk.size(), 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return Turn::kKeep;
  c.drained += got > 0 ? static_cast<size_t>(got) : 0;
  return got <= 0 || c.drained >= kDrainBytes ? Turn::kClose : Turn::kKeep;
}

// Reads more of the request; once it is complete or refused, `c.response` holds the answer.
Turn read_request(Connection& c, ReadBuffer& chunk, const std::function<std::string()>& render) {
  const ssize_t got = ::recv(c.fd, chunk.data(), chunk.size(), 0);
  if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return Turn::kClose;
  if (got < 0) return Turn::kKeep;
  // Keep no more than the parser looks at: a flood of bytes is cut, never stored.
  const size_t room =
      kMaxRequestHeadBytes + 4 - std::min(c.request.size(), kMaxRequestHeadBytes + 4);
  c.request.append(chunk.data(), std::min(static_cast<size_t>(got), room));
  const HttpRequestVerdict verdict = parse_http_request(c.request);
  if (verdict.kind == HttpRequestVerdict::Kind::kRefused) {
    refuse(c, verdict.status, verdict.reason, false);
  } else if (verdict.kind == HttpRequestVerdict::Kind::kComplete) {
    try {
      c.response = response_text(200, kExpositionContentType, render(), verdict.head_only);
      c.sent = 0;
      c.deadline = Clock::now() + MetricsServer::kResponseTimeout;
    } catch (const std::exception& error) {
      refuse(c, 503, std::string("metrics unavailable: ") + error.what(), false);
    }
  }
  if (c.responding()) {
    c.request.clear();
    c.request.shrink_to_fit();
  }
  return Turn::kKeep;
}

// Sends more of the response; when it is all sent, closes (served) or starts draining (refused).
Turn send_response(Connection& c) {
  const ssize_t put =
      ::send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
  if (put < 0 && (errno == EAGAIN || errno == EINTR)) return Turn::kKeep;
  if (put <= 0) return Turn::kClose;
  c.sent += static_cast<size_t>(put);
  if (c.sent < c.response.size()) return Turn::kKeep;
  ::shutdown(c.fd, SHUT_WR);
  if (!c.refused) return Turn::kClose;
  c.draining = true;
  c.response.clear();
  c.response.shrink_to_fit();
  c.deadline = Clock::now() + kDrainTimeout;
  return Turn::kKeep;
}

// One turn of connection `c` whose poll reported `events`.
Turn serve_turn(Connection& c, short events, Clock::time_point now, ReadBuffer& chunk,
                const std::function<std::string()>& render) {
  if (now >= c.deadline) return Turn::kClose;  // a slow client: the endpoint does not wait
  if (events == 0) return Turn::kKeep;
  if (c.draining) return drain(c, chunk);
  if (!c.responding()) {
    if (read_request(c, chunk, render) == Turn::kClose) return Turn::kClose;
    if (!c.responding()) return Turn::kKeep;
  }
  return send_response(c);
}

void close_at(std::vector<Connection>& connections, size_t i) {
  ::close(connections[i].fd);
  connections.erase(connections.begin() + static_cast<std::ptrdiff_t>(i));
}

// Accepts every pending connection, replacing the longest-waiting incomplete request when all
// slots are taken (a connection being answered is never replaced: then the new one is closed).
void accept_pending(int listen_fd, std::vector<Connection>& connections) {
  while (true) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: none left; EMFILE and the like: try again next round
    if (static_cast<int>(connections.size()) >= MetricsServer::kMaxConnections) {
      size_t oldest = connections.size();
      for (size_t i = 0; i < connections.size(); ++i) {
        if (connections[i].responding()) continue;
        if (oldest == connections.size() || connections[i].accepted < connections[oldest].accepted)
          oldest = i;
      }
      if (oldest == connections.size()) {
        ::close(fd);
        continue;
      }
      close_at(connections, oldest);
    }
    Connection c;
    c.fd = fd;
    c.accepted = Clock::now();
    c.deadline = c.accepted + MetricsServer::kRequestTimeout;
    connections.push_back(std::move(c));
  }
}

}  // namespace

void MetricsServer::serve() {
  std::vector<Connection> connections;
  connections.reserve(kMaxConnections);
  std::vector<pollfd> polled;
  polled.reserve(kMaxConnections + 2);
  ReadBuffer chunk{};
  while (true) {
    polled.clear();
    polled.push_back({wake_fd_[0], POLLIN, 0});
    polled.push_back({listen_fd_, POLLIN, 0});
    Clock::time_point next_deadline = Clock::now() + std::chrono::seconds(1);
    for (const Connection& c : connections) {
      const bool writing = c.responding() && !c.draining;
      polled.push_back({c.fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - Clock::now());
    const int ready = ::poll(polled.data(), polled.size(),
                             static_cast<int>(std::max<int64_t>(0, wait.count()) + 1));
    if (ready < 0 && errno != EINTR) {
      log::warn("metrics: poll failed ({}); the /metrics endpoint stops", std::strerror(errno));
      break;
    }
    if (polled[0].revents != 0) break;  // the destructor's wake-up
    // The existing connections first (polled[2 + i] is connections[i]), then new ones.
    const auto now = Clock::now();
    for (size_t i = connections.size(); i-- > 0;) {
      if (serve_turn(connections[i], polled[2 + i].revents, now, chunk, render_) == Turn::kClose) {
        close_at(connections, i);
      }
    }
    if (polled[1].revents != 0) accept_pending(listen_fd_, connections);
  }
  for (const Connection& c : connections) ::close(c.fd);
}

std::string MetricsServer::url() const {
  const std::string host = address_ == "0.0.0.0" || address_.empty() ? local_host_name() : address_;
  return "http://" + host + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace shardtrain
