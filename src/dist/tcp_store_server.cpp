// TcpStoreServer: one thread, a poll loop over non-blocking sockets (see tcp_store.h).
//
// Per connection the loop keeps the bytes of the frame being received (grown only as they
// arrive), the response being sent, and at most one pending get/wait. It reads a connection's
// next request only once the previous one is answered and sent, so a client holds at most one
// frame of buffered input and one response. A request before the handshake, a frame over the
// limit, and handshake/frame timeouts close the connection.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "dist/tcp_store.h"
#include "dist/tcp_store_requests.h"

namespace shardtrain {

using namespace tcp_store_wire;

namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr auto kIdlePollCap = std::chrono::milliseconds(1000);

std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char text[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    port = ntohs(a->sin6_port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    port = ntohs(a->sin_port);
  }
  return format_endpoint(text, port);
}

// Compares secrets in time independent of where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

std::string with_length_prefix(const std::string& payload) {
  std::string framed(4, '\0');
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) framed[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return framed + payload;
}

}  // namespace

class TcpStoreServer::Loop {
 public:
  Loop(TcpStoreServer& owner, int listen_fd, std::string secret, Limits limits)
      : owner_(owner),
        listen_fd_(listen_fd),
        secret_(std::move(secret)),
        limits_(limits),
        data_(limits.max_total_bytes) {
    if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(listen_fd_);
      fail("cannot create a pipe for the store server: {}", std::strerror(errno));
    }
    ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  }
  ~Loop() {
    for (Connection& c : connections_) ::close(c.fd);
    ::close(listen_fd_);
    ::close(wake_pipe_[0]);
    ::close(wake_pipe_[1]);
  }

  void run();
  void stop() {
    stopping_ = true;
    const char byte = 1;
    [[maybe_unused]] ssize_t ignored = ::write(wake_pipe_[1], &byte, 1);
  }

 private:
  struct Connection {
    int fd = -1;
    std::string peer;
    bool authenticated = false;
    bool closing = false;  // close once `out` is sent
    bool dead = false;     // close now
    std::string in;        // the frame being received: header + payload so far
    std::string out;       // response bytes not yet sent
    Clock::time_point opened, frame_started;
    std::optional<StoreRequest> pending;  // a get/wait whose keys are missing
    Clock::time_point pending_deadline;
  };

  void accept_new();
  void read_from(Connection& c);
  void process_frames(Connection& c);
  void handle_frame(Connection& c, const std::string& payload);
  void handshake(Connection& c, const StoreRequest& hello);
  void answer_pending(Connection& c, bool at_deadline);
  void flush(Connection& c);
  void check_timeouts(Connection& c, Clock::time_point now);
  void refuse(Connection& c, const std::string& why);
  void respond(Connection& c, const std::string& payload) {
    c.out += with_length_prefix(payload);
    flush(c);
  }
  Clock::time_point next_deadline(const Connection& c) const;
  int poll_timeout_ms(Clock::time_point now) const;

  TcpStoreServer& owner_;
  int listen_fd_;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::string secret_;
  Limits limits_;
  StoreData data_;
  bool data_changed_ = false;
  std::list<Connection> connections_;
  Clock::time_point last_refusal_log_{};
  size_t refusals_not_logged_ = 0;
};

void TcpStoreServer::Loop::run() {
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  while (!stopping_) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (Connection& c : connections_) {
      short events = POLLRDHUP;
      if (!c.pending && c.out.empty() && !c.closing) events |= POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      polled.push_back(&c);
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (ready < 0 && errno != EINTR) {
      log::error("store: poll failed: {}; the store stops serving", std::strerror(errno));
      return;
    }
    if (stopping_) return;
    if (ready > 0 && (fds[1].revents & POLLIN) != 0) accept_new();
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection& c = *polled[i];
      const short revents = fds[i + 2].revents;
      if ((revents & POLLIN) != 0) read_from(c);
      if ((revents & POLLOUT) != 0) flush(c);
      // The peer hung up: a pending request or anything unsent has nobody to go to.
      if ((revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 && (revents & POLLIN) == 0) {
        c.dead = true;
      }
    }
    const Clock::time_point now = Clock::now();
    for (Connection& c : connections_) {
      if (data_changed_ && c.pending && !c.dead) answer_pending(c, false);
      check_timeouts(c, now);
    }
    data_changed_ = false;
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->dead || (it->closing && it->out.empty())) {
        ::close(it->fd);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    owner_.connection_count_ = connections_.size();
  }
}

void TcpStoreServer::Loop::accept_new() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: none left; other errors: the client gave up already
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.peer = peer_address(fd);
    c.opened = Clock::now();
    if (connections_.size() > limits_.max_connections) {
      refuse(c, fmt::format("over the limit of {} connections", limits_.max_connections));
      c.dead = true;  // no answer: the point is to spend nothing on it
    }
  }
}

void TcpStoreServer::Loop::read_from(Connection& c) {
  char buffer[kReadChunk];
  // Read no further than the end of the current frame, so `in` holds at most one frame.
  size_t want = kReadChunk;
  if (c.in.size() >= 4)
    want = std::min(want, 4 + size_t{frame_length(c.in)} - c.in.size());
  else
    want = std::min(want, 4 - c.in.size());
  const ssize_t n = ::recv(c.fd, buffer, want, 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    c.dead = true;
    return;
  }
  if (n < 0) return;
  if (c.in.empty()) c.frame_started = Clock::now();
  c.in.append(buffer, static_cast<size_t>(n));
  process_frames(c);
}

void TcpStoreServer::Loop::process_frames(Connection& c) {
  if (c.in.size() < 4 || c.dead || c.closing) return;
  const uint32_t length = frame_length(c.in);
  const uint32_t limit = c.authenticated ? kMaxFrameBytes : kMaxHelloBytes;
  if (length > limit) {
    if (!c.authenticated) return refuse(c, "its first frame is not a handshake");
    respond(c, error_response(fmt::format("request of {} bytes is larger than the store's limit "
                                          "of {} bytes",
                                          length, kMaxFrameBytes)));
    c.closing = true;  // the rest of the oversized frame is unread: the stream is out of sync
    return;
  }
  if (c.in.size() < 4 + size_t{length}) return;
  const std::string payload = c.in.substr(4);
  c.in.clear();
  c.in.shrink_to_fit();
  handle_frame(c, payload);
}

void TcpStoreServer::Loop::handle_frame(Connection& c, const std::string& payload) {
  auto parsed = parse_store_request(payload);
  if (auto* problem = std::get_if<std::string>(&parsed)) {
    if (!c.authenticated) return refuse(c, "its first frame is not a handshake");
    return respond(c, error_response(*problem));
  }
  const StoreRequest& request = std::get<StoreRequest>(parsed);
  if (!c.authenticated) {
    if (request.op != Op::kHello) return refuse(c, "it sent a request before the handshake");
    return handshake(c, request);
  }
  if (request.op == Op::kHello) return respond(c, error_response("handshake repeated"));
  c.pending = request;
  c.pending_deadline = Clock::now() + std::chrono::milliseconds(request.number);
  answer_pending(c, false);
}

void TcpStoreServer::Loop::handshake(Connection& c, const StoreRequest& hello) {
  if (hello.magic != kProtocolMagic) return refuse(c, "it does not speak the store protocol");
  if (hello.version != kProtocolVersion) {
    respond(c, error_response(fmt::format("store protocol version {} is not this store's {}; "
                                          "HINT: run the same shardtrain version on every node",
                                          hello.version, kProtocolVersion)));
    c.closing = true;
    return refuse(c, fmt::format("protocol version {}", hello.version));
  }
  if (!same_secret(hello.secret, secret_)) {
    respond(c, error_response("wrong store secret; HINT: every agent and worker of a run must "
                              "use the same --rdzv-conf token"));
    c.closing = true;
    return refuse(c, "wrong secret");
  }
  c.authenticated = true;
  respond(c, ok_response());
}

void TcpStoreServer::Loop::answer_pending(Connection& c, bool at_deadline) {
  bool changed = false;
  std::optional<std::string> response = data_.run(*c.pending, changed);
  data_changed_ = data_changed_ || changed;
  if (!response && at_deadline) {
    const std::vector<std::string> keys =
        c.pending->op == Op::kWait ? c.pending->keys : std::vector<std::string>{c.pending->key};
    response = timeout_response(data_.first_missing(keys).value_or(""));
  }
  if (!response) return;
  c.pending.reset();
  respond(c, *response);
}

void TcpStoreServer::Loop::flush(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      return;
    }
    c.out.erase(0, static_cast<size_t>(n));
  }
  // Sent: a frame the client pipelined behind this one may already be buffered.
  if (!c.pending) process_frames(c);
}

void TcpStoreServer::Loop::check_timeouts(Connection& c, Clock::time_point now) {
  if (c.dead) return;
  if (!c.authenticated && now - c.opened >= limits_.handshake_timeout) {
    return refuse(c, fmt::format("no handshake within {} ms", limits_.handshake_timeout.count()));
  }
  if (!c.in.empty() && now - c.frame_started >= limits_.frame_timeout) {
    log::warn("store: closing the connection from {}: a frame stalled for {} ms", c.peer,
              limits_.frame_timeout.count());
    c.dead = true;
    return;
  }
  if (c.pending && now >= c.pending_deadline) answer_pending(c, true);
}

void TcpStoreServer::Loop::refuse(Connection& c, const std::string& why) {
  ++owner_.refused_count_;
  if (!c.closing) c.dead = true;  // a refusal with an answer closes once it is sent
  const Clock::time_point now = Clock::now();
  if (now - last_refusal_log_ < std::chrono::seconds(1)) {
    ++refusals_not_logged_;
    return;
  }
  log::warn("store: refused the connection from {}: {}{}", c.peer, why,
            refusals_not_logged_ == 0
                ? std::string()
                : fmt::format(" ({} more refused in the last second)", refusals_not_logged_));
  last_refusal_log_ = now;
  refusals_not_logged_ = 0;
}

Clock::time_point TcpStoreServer::Loop::next_deadline(const Connection& c) const {
  Clock::time_point deadline = Clock::time_point::max();
  if (!c.authenticated) deadline = std::min(deadline, c.opened + limits_.handshake_timeout);
  if (!c.in.empty()) deadline = std::min(deadline, c.frame_started + limits_.frame_timeout);
  if (c.pending) deadline = std::min(deadline, c.pending_deadline);
  return deadline;
}

int TcpStoreServer::Loop::poll_timeout_ms(Clock::time_point now) const {
  Clock::time_point wake = now + kIdlePollCap;
  for (const Connection& c : connections_) wake = std::min(wake, next_deadline(c));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
  return static_cast<int>(std::max<int64_t>(ms + 1, 0));
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string secret)
    : TcpStoreServer(host, port, std::move(secret), Limits{}) {}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string secret, Limits limits)
    : host_(host) {
  SHARDTRAIN_CHECK(!secret.empty(), "the store needs a secret");
  const int listen_fd = listen_tcp(host, port, port_);
  loop_ = std::make_unique<Loop>(*this, listen_fd, std::move(secret), limits);
  thread_ = std::thread([this] { loop_->run(); });
  log::debug("store: serving at {}", format_endpoint(host.empty() ? "0.0.0.0" : host, port_));
}

TcpStoreServer::~TcpStoreServer() {
  loop_->stop();
  thread_.join();
}

}  // namespace shardtrain
