#include "dist/tcp_store_wire.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace shardtrain::tcp_store_wire {

Writer& Writer::i64(int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::str(std::string_view s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  bytes_.append(s);
  return *this;
}

std::string Writer::frame() const {
  std::string out;
  out.reserve(bytes_.size() + 4);
  const uint32_t n = static_cast<uint32_t>(bytes_.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(bytes_);
  return out;
}

namespace {

uint64_t read_le(std::string_view bytes, int count) {
  uint64_t v = 0;
  for (int i = 0; i < count; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return v;
}

}  // namespace

std::optional<uint8_t> Reader::u8() {
  if (rest_.empty()) return std::nullopt;
  const uint8_t v = static_cast<uint8_t>(rest_[0]);
  rest_.remove_prefix(1);
  return v;
}

std::optional<int64_t> Reader::i64() {
  if (rest_.size() < 8) return std::nullopt;
  const int64_t v = static_cast<int64_t>(read_le(rest_, 8));
  rest_.remove_prefix(8);
  return v;
}

std::optional<std::string> Reader::str() {
  if (rest_.size() < 4) return std::nullopt;
  const uint64_t n = read_le(rest_, 4);
  if (rest_.size() - 4 < n) return std::nullopt;
  std::string s(rest_.substr(4, n));
  rest_.remove_prefix(4 + n);
  return s;
}

bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

namespace {

// Reads exactly `count` bytes into `out`.
ReadResult read_exact(int fd, char* out, size_t count, std::optional<Clock::time_point> deadline) {
  size_t done = 0;
  while (done < count) {
    int wait_ms = -1;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) return ReadResult::kTimeout;
      wait_ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return ReadResult::kError;
    }
    if (ready == 0) continue;  // the deadline check above decides
    const ssize_t n = ::recv(fd, out + done, count - done, 0);
    if (n == 0) return ReadResult::kClosed;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno == ECONNRESET ? ReadResult::kClosed : ReadResult::kError;
    }
    done += static_cast<size_t>(n);
  }
  return ReadResult::kOk;
}

}  // namespace

uint32_t frame_length(std::string_view header) { return static_cast<uint32_t>(read_le(header, 4)); }

ReadResult read_frame(int fd, std::string& payload, std::optional<Clock::time_point> deadline,
                      uint32_t max_bytes) {
  char header[4];
  ReadResult r = read_exact(fd, header, 4, deadline);
  if (r != ReadResult::kOk) return r;
  const size_t n = frame_length(std::string_view(header, 4));
  if (n > max_bytes) return ReadResult::kTooLarge;
  // Grow the buffer only as bytes arrive: an announced length is not yet a reason to allocate.
  constexpr size_t kChunk = 1 << 20;
  payload.clear();
  while (payload.size() < n) {
    const size_t done = payload.size();
    payload.resize(std::min(n, done + kChunk));
    r = read_exact(fd, payload.data() + done, payload.size() - done, deadline);
    if (r != ReadResult::kOk) return r;
  }
  return ReadResult::kOk;
}

std::string format_endpoint(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

namespace {

// A socket (SOCK_CLOEXEC) of the first address in the getaddrinfo list `found` for which
// use(fd, address) succeeds (connects, binds: returns true); the sockets of the addresses before
// it are closed. -1 when none does, with `error` saying why the last one failed.
template <typename Use>
int first_usable_socket(const addrinfo* found, std::string& error, Use use) {
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    if (use(fd, *a)) return fd;
    error = std::strerror(errno);
    ::close(fd);
  }
  return -1;
}

}  // namespace

int connect_tcp(const std::string& host, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0) {
    error = std::string("cannot resolve host '") + host + "': " + ::gai_strerror(rc);
    return -1;
  }
  const int fd = first_usable_socket(found, error, [](int socket_fd, const addrinfo& address) {
    int rc_connect;
    do {
      rc_connect = ::connect(socket_fd, address.ai_addr, address.ai_addrlen);
    } while (rc_connect < 0 && errno == EINTR);
    return rc_connect == 0;
  });
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

int listen_tcp(const std::string& host, int port, int& bound_port) {
  const std::string endpoint = format_endpoint(host.empty() ? "0.0.0.0" : host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  const char* node = (host.empty() || host == "0.0.0.0") ? nullptr : host.c_str();
  if (node == nullptr) hints.ai_family = AF_INET;
  const int rc = ::getaddrinfo(node, port_text.c_str(), &hints, &found);
  if (rc != 0) fail("cannot resolve '{}' to host the store: {}", endpoint, ::gai_strerror(rc));
  std::string error = "no address";
  const int fd = first_usable_socket(found, error, [](int socket_fd, const addrinfo& address) {
    const int one = 1;
    ::setsockopt(socket_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    return ::bind(socket_fd, address.ai_addr, address.ai_addrlen) == 0 &&
           ::listen(socket_fd, 512) == 0;
  });
  ::freeaddrinfo(found);
  if (fd < 0) {
    fail(
        "cannot host the store at {}: {}; HINT: is another launcher or program using that port? "
        "pick another with --rdzv-endpoint / --master-port",
        endpoint, error);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                          : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

}  // namespace shardtrain::tcp_store_wire
