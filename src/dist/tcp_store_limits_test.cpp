// TcpStoreServer against clients that are not members of the run or try to exhaust it: no
// secret (nothing can be read or changed), wrong magic/version, idle connections announcing
// huge frames (memory stays bounded), many idle connections (no thread each), handshake and
// frame timeouts, the connection cap, int64 overflow of add, value and total-size caps.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "dist/tcp_store.h"
#include "dist/tcp_store_wire.h"

namespace shardtrain {
namespace {

using namespace std::chrono_literals;
using namespace tcp_store_wire;

const std::string kSecret = "limits-test-secret-0123456789abcdef";

using testing::error_of;

int raw_connection(const TcpStoreServer& server) {
  std::string error;
  const int fd = connect_tcp("127.0.0.1", server.port(), error);
  EXPECT_GE(fd, 0) << error;
  return fd;
}

std::string hello_frame(int64_t magic, int64_t version, const std::string& secret) {
  Writer hello;
  hello.u8(static_cast<uint8_t>(Op::kHello)).i64(magic).i64(version).str(secret);
  return hello.frame();
}

// Sends `frame` on `fd` and returns the answer, or "(closed)" when the server hangs up.
std::string send_and_read(int fd, const std::string& frame) {
  if (!send_all(fd, frame)) return "(closed)";
  std::string response;
  const ReadResult r = read_frame(fd, response, Clock::now() + 5s);
  return r == ReadResult::kOk ? response : "(closed)";
}

bool closed_by_server(int fd, std::chrono::milliseconds within) {
  std::string ignored;
  return read_frame(fd, ignored, Clock::now() + within) == ReadResult::kClosed;
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

void wait_for_connections(const TcpStoreServer& server, size_t count) {
  for (int i = 0; i < 200 && server.connection_count() != count; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server.connection_count(), count);
}

TEST(TcpStoreLimits, ClientWithoutTheSecretCanDoNothing) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStoreClient member("127.0.0.1", server.port(), 2000ms, kSecret);
  member.set("generation/failed", "");

  // Requests without a handshake: a set, a compare-and-set, a delete, a get. None runs; each
  // connection is closed without an answer.
  Writer set, cas, remove, get;
  set.u8(static_cast<uint8_t>(Op::kSet)).str("forged").str("1");
  cas.u8(static_cast<uint8_t>(Op::kCompareSet)).str("generation/failed").str("").str("stop|x");
  remove.u8(static_cast<uint8_t>(Op::kRemove)).str("generation/failed");
  get.u8(static_cast<uint8_t>(Op::kGet)).str("generation/failed").i64(0);
  for (const Writer* request : {&set, &cas, &remove, &get}) {
    const int fd = raw_connection(server);
    EXPECT_EQ(send_and_read(fd, request->frame()), "(closed)");
    ::close(fd);
  }
  // A wrong secret, then a request on the same connection.
  const int fd = raw_connection(server);
  const std::string answer =
      send_and_read(fd, hello_frame(kProtocolMagic, kProtocolVersion, "guess"));
  EXPECT_EQ(answer[0], static_cast<char>(Status::kError));
  EXPECT_NE(answer.find("wrong store secret"), std::string::npos) << answer;
  EXPECT_EQ(send_and_read(fd, set.frame()), "(closed)");
  ::close(fd);

  EXPECT_EQ(member.try_get("forged"), std::nullopt);
  EXPECT_EQ(member.try_get("generation/failed"), "");
  EXPECT_GE(server.refused_count(), 5u);

  const std::string message = error_of([&] {
    TcpStoreClient intruder("127.0.0.1", server.port(), 2000ms, "not-the-run-secret-42");
  });
  EXPECT_NE(message.find("refused this client: wrong store secret"), std::string::npos) << message;
}

TEST(TcpStoreLimits, HandshakeChecksMagicAndVersion) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  int fd = raw_connection(server);
  EXPECT_EQ(send_and_read(fd, hello_frame(0x1234, kProtocolVersion, kSecret)), "(closed)");
  ::close(fd);
  fd = raw_connection(server);
  const std::string answer = send_and_read(fd, hello_frame(kProtocolMagic, 99, kSecret));
  EXPECT_NE(answer.find("store protocol version 99 is not this store's 1"), std::string::npos)
      << answer;
  ::close(fd);
  // Random bytes as a first frame (an HTTP request, say) are refused too.
  fd = raw_connection(server);
  EXPECT_EQ(send_and_read(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "(closed)");
  ::close(fd);
}

// The defect: 20 idle connections announcing 64 MiB frames took the launcher to 1.3 GB.
TEST(TcpStoreLimits, IdleClientsAnnouncingHugeFramesDoNotGrowMemory) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  const long before = rss_kib();
  std::vector<int> fds;
  const std::string announce_64_mib("\xff\xff\xff\x03", 4);  // 64 MiB - 1
  for (int i = 0; i < 20; ++i) {  // members: they may send big frames, but sent nothing yet
    const int fd = raw_connection(server);
    ASSERT_EQ(send_and_read(fd, hello_frame(kProtocolMagic, kProtocolVersion, kSecret))[0],
              static_cast<char>(Status::kOk));
    ASSERT_TRUE(send_all(fd, announce_64_mib + "0123456789"));
    fds.push_back(fd);
  }
  for (int i = 0; i < 20; ++i) {  // strangers: a first frame over the handshake limit is refused
    const int fd = raw_connection(server);
    ASSERT_TRUE(send_all(fd, announce_64_mib));
    EXPECT_TRUE(closed_by_server(fd, 2000ms));
    ::close(fd);
  }
  wait_for_connections(server, 20);
  std::this_thread::sleep_for(200ms);
  const long grown_kib = rss_kib() - before;
  EXPECT_LT(grown_kib, 16 * 1024) << "RSS grew by " << grown_kib << " KiB";
  for (int fd : fds) ::close(fd);
}

// The defect: 400 idle connections made 412 threads.
TEST(TcpStoreLimits, ManyIdleConnectionsDoNotCreateAThreadEach) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  const size_t threads_before = thread_count();
  std::vector<int> fds;
  for (int i = 0; i < 300; ++i) fds.push_back(raw_connection(server));
  wait_for_connections(server, 300);
  EXPECT_EQ(thread_count(), threads_before);
  TcpStoreClient member("127.0.0.1", server.port(), 2000ms, kSecret);  // still served
  member.set("k", "v");
  EXPECT_EQ(member.get("k", 100ms), "v");
  for (int fd : fds) ::close(fd);
}

TEST(TcpStoreLimits, SilentAndStalledClientsAreTimedOut) {
  TcpStoreServer::Limits limits;
  limits.handshake_timeout = 300ms;
  limits.frame_timeout = 300ms;
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  const int silent = raw_connection(server);
  const int stalled = raw_connection(server);
  ASSERT_EQ(send_and_read(stalled, hello_frame(kProtocolMagic, kProtocolVersion, kSecret))[0],
            static_cast<char>(Status::kOk));
  ASSERT_TRUE(send_all(stalled, std::string("\x10\0\0\0\x01", 5)));  // 16 bytes announced, 1 sent
  const auto start = Clock::now();
  EXPECT_TRUE(closed_by_server(silent, 3000ms));
  EXPECT_TRUE(closed_by_server(stalled, 3000ms));
  EXPECT_LT(Clock::now() - start, 2000ms);
  ::close(silent);
  ::close(stalled);
  // An idle member (handshake done, no frame begun) is kept: agents hold connections for hours.
  TcpStoreClient member("127.0.0.1", server.port(), 2000ms, kSecret);
  std::this_thread::sleep_for(600ms);
  member.set("still", "here");
  EXPECT_EQ(member.get("still", 100ms), "here");
}

TEST(TcpStoreLimits, ConnectionsBeyondTheCapAreClosed) {
  TcpStoreServer::Limits limits;
  limits.max_connections = 4;
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) fds.push_back(raw_connection(server));
  wait_for_connections(server, 4);
  const int extra = raw_connection(server);
  EXPECT_TRUE(closed_by_server(extra, 2000ms));
  EXPECT_EQ(server.connection_count(), 4u);
  ::close(extra);
  for (int fd : fds) ::close(fd);
}

TEST(TcpStoreLimits, AddThatWouldOverflowIsRefusedAndChangesNothing) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStoreClient client("127.0.0.1", server.port(), 2000ms, kSecret);
  EXPECT_EQ(client.add("n", INT64_MAX - 1), INT64_MAX - 1);
  EXPECT_EQ(client.add("n", 1), INT64_MAX);
  const std::string message = error_of([&] { client.add("n", 1); });
  EXPECT_NE(message.find("would overflow int64"), std::string::npos) << message;
  EXPECT_NE(message.find("'n'"), std::string::npos) << message;
  EXPECT_EQ(client.get("n", 100ms), std::to_string(INT64_MAX));
  EXPECT_EQ(client.add("m", INT64_MIN), INT64_MIN);
  EXPECT_NE(error_of([&] { client.add("m", -1); }).find("overflow"), std::string::npos);
}

TEST(TcpStoreLimits, ValuesAndTotalSizeAreCapped) {
  TcpStoreServer::Limits limits;
  limits.max_total_bytes = 1 << 20;
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  TcpStoreClient client("127.0.0.1", server.port(), 2000ms, kSecret);
  client.set("a", std::string(600 << 10, 'a'));
  const std::string full = error_of([&] { client.set("b", std::string(600 << 10, 'b')); });
  EXPECT_NE(full.find("the store is full"), std::string::npos) << full;
  EXPECT_EQ(client.try_get("b"), std::nullopt);
  client.set("a", "small");  // replacing a value frees its bytes
  client.set("b", std::string(600 << 10, 'b'));
  EXPECT_TRUE(client.remove("b"));

  TcpStoreServer roomy("127.0.0.1", 0, kSecret);
  TcpStoreClient big_client("127.0.0.1", roomy.port(), 2000ms, kSecret);
  const std::string too_big =
      error_of([&] { big_client.set("v", std::string(kMaxValueBytes + 1, 'v')); });
  EXPECT_NE(too_big.find("over its limit"), std::string::npos) << too_big;
  big_client.set("after", "ok");  // the connection is still usable
  EXPECT_EQ(big_client.get("after", 100ms), "ok");
}

}  // namespace
}  // namespace shardtrain
