// TcpStoreClient: connect with backoff, one request/response round trip per call.
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "dist/tcp_store.h"

namespace shardtrain {

using namespace tcp_store_wire;

namespace {

constexpr const char* kHint =
    "is the launcher on node 0 running and reachable? check --rdzv-endpoint / MASTER_ADDR";

// How long past a request's own timeout the client waits for the answer before deciding the
// server is unreachable (it answers timed-out requests itself, so this is slack for the wire).
constexpr std::chrono::seconds kReplySlack{30};
// How long an accepted connection may take to answer the handshake.
constexpr std::chrono::seconds kHandshakeTimeout{10};

}  // namespace

TcpStoreClient::TcpStoreClient(std::string host, int port, Duration connect_timeout,
                               std::string secret)
    : host_(std::move(host)), port_(port) {
  const auto deadline = Clock::now() + connect_timeout;
  auto backoff = std::chrono::milliseconds(10);
  std::string error;
  while (true) {
    fd_ = connect_tcp(host_, port_, error);
    if (fd_ >= 0) {
      bool final = false;
      error = handshake(secret, std::max(deadline, Clock::now() + kHandshakeTimeout), final);
      if (error.empty()) return;
      ::close(fd_);
      fd_ = -1;
      if (final) fail("the store at {} refused this client: {}", endpoint(), error);
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  fail("could not connect to the store at {} within {} ms (last error: {}); {}", endpoint(),
       connect_timeout.count(), error, kHint);
}

std::string TcpStoreClient::handshake(const std::string& secret, Clock::time_point deadline,
                                      bool& final) {
  Writer hello;
  hello.u8(static_cast<uint8_t>(Op::kHello)).i64(kProtocolMagic).i64(kProtocolVersion).str(secret);
  if (!send_all(fd_, hello.frame())) return "the connection closed during the handshake";
  std::string response;
  const ReadResult read = read_frame(fd_, response, deadline, kMaxHelloBytes);
  if (read == ReadResult::kTimeout) return "no answer to the handshake";
  // Closed without an answer: e.g. the server is at its connection limit; retrying may help.
  if (read != ReadResult::kOk) return "the connection closed during the handshake";
  Reader in(response);
  const std::optional<uint8_t> status = in.u8();
  if (status == static_cast<uint8_t>(Status::kOk)) return "";
  final = true;
  return in.str().value_or("a malformed answer to the handshake");
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStoreClient::endpoint() const { return format_endpoint(host_, port_); }

std::string TcpStoreClient::call(const Writer& request, const std::string& operation,
                                 const std::string& what, Duration timeout) {
  if (request.payload().size() > kMaxFrameBytes) {
    fail("store {} of key '{}' is {} bytes, over the store's limit of {} bytes", operation, what,
         request.payload().size(), kMaxFrameBytes);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) {
    fail("store {} of key '{}': the connection to the store at {} was lost earlier; {}",
         operation, what, endpoint(), kHint);
  }
  const auto lost = [&](const char* how) {
    ::close(fd_);
    fd_ = -1;
    fail("store {} of key '{}': {} the store at {}; {}", operation, what, how, endpoint(), kHint);
  };
  if (!send_all(fd_, request.frame())) lost("lost the connection to");
  std::string response;
  const ReadResult read = read_frame(fd_, response, Clock::now() + timeout + kReplySlack);
  if (read == ReadResult::kTimeout) lost("no answer from");
  if (read == ReadResult::kTooLarge) lost("oversized answer from");
  if (read != ReadResult::kOk) lost("lost the connection to");
  Reader in(response);
  const std::optional<uint8_t> status = in.u8();
  if (!status) lost("malformed answer from");
  if (*status == static_cast<uint8_t>(Status::kOk)) return response.substr(1);
  const std::string detail = in.str().value_or("");
  if (*status == static_cast<uint8_t>(Status::kTimeout)) {
    fail("timed out after {} ms waiting for key '{}' in the store at {}; are all nodes and "
         "ranks running? {}",
         timeout.count(), detail.empty() ? what : detail, endpoint(), kHint);
  }
  fail("store {} of key '{}' at {} failed: {}", operation, what, endpoint(), detail);
}

void TcpStoreClient::set(const std::string& key, const std::string& value) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kSet)).str(key).str(value);
  call(w, "set", key, Duration(0));
}

std::string TcpStoreClient::get(const std::string& key, Duration timeout) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kGet)).str(key).i64(timeout.count());
  const std::string response = call(w, "get", key, timeout);
  Reader in(response);
  return in.str().value_or("");
}

std::optional<std::string> TcpStoreClient::try_get(const std::string& key) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kTryGet)).str(key);
  const std::string response = call(w, "try_get", key, Duration(0));
  Reader in(response);
  const int64_t found = in.i64().value_or(0);
  std::string value = in.str().value_or("");
  if (found == 0) return std::nullopt;
  return value;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kAdd)).str(key).i64(delta);
  const std::string response = call(w, "add", key, Duration(0));
  Reader in(response);
  return in.i64().value_or(0);
}

std::string TcpStoreClient::compare_set(const std::string& key, const std::string& expected,
                                        const std::string& desired) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kCompareSet)).str(key).str(expected).str(desired);
  const std::string response = call(w, "compare_set", key, Duration(0));
  Reader in(response);
  return in.str().value_or("");
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, Duration timeout) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kWait)).i64(timeout.count()).i64(static_cast<int64_t>(keys.size()));
  for (const std::string& k : keys) w.str(k);
  call(w, "wait", keys.empty() ? std::string() : keys.front(), timeout);
}

bool TcpStoreClient::remove(const std::string& key) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kRemove)).str(key);
  const std::string response = call(w, "remove", key, Duration(0));
  Reader in(response);
  return in.i64().value_or(0) != 0;
}

void TcpStoreClient::ping() {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::kPing));
  call(w, "ping", "", Duration(0));
}

}  // namespace shardtrain
