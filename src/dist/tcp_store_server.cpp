// TcpStoreServer: accept loop, one thread per connection, request dispatch.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "dist/tcp_store.h"

namespace shardtrain {

using namespace tcp_store_wire;

namespace {

std::string ok_response() { return std::string(1, static_cast<char>(Status::kOk)); }

std::string status_response(Status status, const std::string& detail) {
  Writer w;
  w.str(detail);
  return std::string(1, static_cast<char>(status)) + w.payload();
}

// True if the peer has closed its end (so a blocked request can be abandoned).
bool peer_closed(int fd) {
  pollfd pfd{fd, POLLRDHUP, 0};
  return ::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port) : host_(host) {
  listen_fd_ = listen_tcp(host, port, port_);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    fail("cannot create a pipe for the store server: {}", std::strerror(errno));
  }
  accept_thread_ = std::thread([this] { accept_loop(); });
  log::debug("store: serving at {}", format_endpoint(host.empty() ? "0.0.0.0" : host, port_));
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  const char byte = 1;
  [[maybe_unused]] ssize_t ignored = ::write(wake_pipe_[1], &byte, 1);
  accept_thread_.join();
  std::lock_guard<std::mutex> lock(connections_mutex_);
  for (Connection& c : connections_) ::shutdown(c.fd, SHUT_RDWR);
  {
    // Wakes requests blocked in get/wait; they see stopping_ and return.
    std::lock_guard<std::mutex> data_lock(data_mutex_);
    data_changed_.notify_all();
  }
  for (Connection& c : connections_) {
    c.thread.join();
    ::close(c.fd);
  }
  connections_.clear();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

size_t TcpStoreServer::connection_count() const {
  std::lock_guard<std::mutex> lock(connections_mutex_);
  size_t open = 0;
  for (const Connection& c : connections_) open += c.finished ? 0 : 1;
  return open;
}

void TcpStoreServer::reap_finished_connections() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->finished) {
      it->thread.join();
      ::close(it->fd);
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpStoreServer::accept_loop() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    const int ready = ::poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      log::error("store: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0 || stopping_) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // e.g. the client gave up already; keep serving the others
    std::lock_guard<std::mutex> lock(connections_mutex_);
    reap_finished_connections();
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, &c] { serve(c); });
  }
}

namespace {

std::string with_length_prefix(const std::string& payload) {
  std::string framed(4, '\0');
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) framed[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return framed + payload;
}

}  // namespace

void TcpStoreServer::serve(Connection& connection) {
  std::string request;
  while (!stopping_) {
    const ReadResult r = read_frame(connection.fd, request, std::nullopt);
    if (r == ReadResult::kTooLarge) {
      send_all(connection.fd,
               with_length_prefix(status_response(
                   Status::kError, fmt::format("request larger than the store's limit of {} bytes",
                                               kMaxFrameBytes))));
      break;  // the rest of the oversized frame is unread, so the stream is out of sync
    }
    if (r != ReadResult::kOk) break;  // the client left, possibly mid-request: just drop it
    const std::string response = handle(request, connection.fd);
    if (!send_all(connection.fd, with_length_prefix(response))) break;
  }
  ::shutdown(connection.fd, SHUT_RDWR);
  connection.finished = true;
}

std::string TcpStoreServer::handle(const std::string& request, int fd) {
  Reader in(request);
  const std::optional<uint8_t> op = in.u8();
  const auto malformed = [] { return status_response(Status::kError, "malformed request"); };
  if (!op) return malformed();
  // Blocks until `keys` all exist or the deadline passes; returns the first missing key, or
  // nullopt when all exist. Gives up early if the client hung up or the server is stopping.
  const auto wait_for = [&](std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                            int64_t timeout_ms) -> std::optional<std::string> {
    const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
    while (true) {
      const std::string* missing = nullptr;
      for (const std::string& k : keys) {
        if (data_.find(k) == data_.end()) {
          missing = &k;
          break;
        }
      }
      if (missing == nullptr) return std::nullopt;
      const auto now = Clock::now();
      if (now >= deadline || stopping_ || peer_closed(fd)) return *missing;
      // Wake at least every 500 ms to notice a client that hung up.
      data_changed_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(500)));
    }
  };

  switch (static_cast<Op>(*op)) {
    case Op::kSet: {
      auto key = in.str();
      auto value = in.str();
      if (!key || !value) return malformed();
      std::lock_guard<std::mutex> lock(data_mutex_);
      data_[*key] = std::move(*value);
      data_changed_.notify_all();
      return ok_response();
    }
    case Op::kGet: {
      auto key = in.str();
      auto timeout_ms = in.i64();
      if (!key || !timeout_ms) return malformed();
      std::unique_lock<std::mutex> lock(data_mutex_);
      if (auto missing = wait_for(lock, {*key}, *timeout_ms)) {
        return status_response(Status::kTimeout, *missing);
      }
      Writer w;
      w.str(data_[*key]);
      return ok_response() + w.payload();
    }
    case Op::kTryGet: {
      auto key = in.str();
      if (!key) return malformed();
      std::lock_guard<std::mutex> lock(data_mutex_);
      const auto it = data_.find(*key);
      Writer w;
      w.i64(it != data_.end() ? 1 : 0).str(it != data_.end() ? it->second : std::string());
      return ok_response() + w.payload();
    }
    case Op::kAdd: {
      auto key = in.str();
      auto delta = in.i64();
      if (!key || !delta) return malformed();
      std::lock_guard<std::mutex> lock(data_mutex_);
      int64_t current = 0;
      const auto it = data_.find(*key);
      if (it != data_.end()) {
        const std::string& text = it->second;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
        if (ec != std::errc() || end != text.data() + text.size()) {
          return status_response(Status::kError,
                                 fmt::format("add on key '{}' whose value is not an integer", *key));
        }
      }
      current += *delta;
      data_[*key] = std::to_string(current);
      data_changed_.notify_all();
      Writer w;
      w.i64(current);
      return ok_response() + w.payload();
    }
    case Op::kCompareSet: {
      auto key = in.str();
      auto expected = in.str();
      auto desired = in.str();
      if (!key || !expected || !desired) return malformed();
      std::lock_guard<std::mutex> lock(data_mutex_);
      const auto it = data_.find(*key);
      std::string after;
      if ((it == data_.end() && expected->empty()) || (it != data_.end() && it->second == *expected)) {
        data_[*key] = *desired;
        after = *desired;
        data_changed_.notify_all();
      } else {
        after = it == data_.end() ? std::string() : it->second;
      }
      Writer w;
      w.str(after);
      return ok_response() + w.payload();
    }
    case Op::kWait: {
      auto timeout_ms = in.i64();
      auto count = in.i64();
      if (!timeout_ms || !count || *count < 0) return malformed();
      std::vector<std::string> keys;
      for (int64_t i = 0; i < *count; ++i) {
        auto key = in.str();
        if (!key) return malformed();
        keys.push_back(std::move(*key));
      }
      std::unique_lock<std::mutex> lock(data_mutex_);
      if (auto missing = wait_for(lock, keys, *timeout_ms)) {
        return status_response(Status::kTimeout, *missing);
      }
      return ok_response();
    }
    case Op::kRemove: {
      auto key = in.str();
      if (!key) return malformed();
      std::lock_guard<std::mutex> lock(data_mutex_);
      Writer w;
      w.i64(data_.erase(*key) > 0 ? 1 : 0);
      return ok_response() + w.payload();
    }
    case Op::kPing:
      return ok_response();
  }
  return status_response(Status::kError, fmt::format("unknown store operation {}", *op));
}

}  // namespace shardtrain
