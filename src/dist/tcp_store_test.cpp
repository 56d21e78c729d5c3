// TcpStoreServer / TcpStoreClient over loopback: every Store operation, concurrency, blocking
// and timeouts, late servers, malformed and oversized traffic, and PrefixStore.
#include "dist/tcp_store.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "dist/tcp_store_wire.h"

namespace shardtrain {
namespace {

using namespace std::chrono_literals;
using Ms = Store::Duration;
using testing::error_of;

const std::string kSecret = "tcp-store-test-secret-0123456789";

std::unique_ptr<TcpStoreClient> connect(const TcpStoreServer& server, Ms timeout = 2000ms) {
  return std::make_unique<TcpStoreClient>("127.0.0.1", server.port(), timeout, kSecret);
}

// A raw connection that has done the handshake (for sending hand-made frames).
int raw_member_connection(const TcpStoreServer& server) {
  std::string error;
  const int fd = tcp_store_wire::connect_tcp("127.0.0.1", server.port(), error);
  EXPECT_GE(fd, 0) << error;
  tcp_store_wire::Writer hello;
  hello.u8(static_cast<uint8_t>(tcp_store_wire::Op::kHello))
      .i64(tcp_store_wire::kProtocolMagic)
      .i64(tcp_store_wire::kProtocolVersion)
      .str(kSecret);
  EXPECT_TRUE(tcp_store_wire::send_all(fd, hello.frame()));
  std::string response;
  EXPECT_EQ(tcp_store_wire::read_frame(fd, response, std::nullopt),
            tcp_store_wire::ReadResult::kOk);
  EXPECT_EQ(response, std::string(1, static_cast<char>(tcp_store_wire::Status::kOk)));
  return fd;
}

TEST(TcpStore, ServerPicksFreePortWhenZero) {
  TcpStoreServer a("127.0.0.1", 0, kSecret);
  TcpStoreServer b("127.0.0.1", 0, kSecret);
  EXPECT_GT(a.port(), 0);
  EXPECT_NE(a.port(), b.port());
}

TEST(TcpStore, SetGetTryGetRemove) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  EXPECT_EQ(client->try_get("a"), std::nullopt);
  client->set("a", "1");
  EXPECT_EQ(client->get("a", 100ms), "1");
  client->set("a", std::string("bin\0ary", 7));
  EXPECT_EQ(client->get("a", 100ms), std::string("bin\0ary", 7));
  client->set("empty", "");
  EXPECT_EQ(client->try_get("empty"), std::optional<std::string>(""));
  EXPECT_TRUE(client->remove("a"));
  EXPECT_FALSE(client->remove("a"));
  EXPECT_EQ(client->try_get("a"), std::nullopt);
  EXPECT_EQ(client->endpoint(), "127.0.0.1:" + std::to_string(server.port()));
  client->ping();
}

TEST(TcpStore, LargeValueRoundTrips) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  std::string big(5 << 20, 'x');
  big[12345] = 'y';
  client->set("big", big);
  EXPECT_EQ(client->get("big", 1000ms), big);
}

TEST(TcpStore, OversizedValueIsRefusedByClient) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  const std::string huge(tcp_store_wire::kMaxFrameBytes + 1, 'x');
  const std::string message = error_of([&] { client->set("huge", huge); });
  EXPECT_NE(message.find("'huge'"), std::string::npos) << message;
  EXPECT_NE(message.find("limit"), std::string::npos) << message;
  client->set("after", "ok");  // the connection is still usable
  EXPECT_EQ(client->get("after", 100ms), "ok");
}

TEST(TcpStore, AddIsAtomicAcrossEightThreads) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 200;
  testing::run_threads(kThreads, [&](int t) {
    auto client = connect(server);
    for (int i = 0; i < kAddsPerThread; ++i) client->add("counter", t + 1);
  });
  auto client = connect(server);
  // sum over t of (t + 1) * 200 = 36 * 200
  EXPECT_EQ(client->add("counter", 0), 7200);
  EXPECT_EQ(client->get("counter", 100ms), "7200");
  EXPECT_EQ(client->add("negative", -5), -5);
}

TEST(TcpStore, SharedClientIsThreadSafe) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  testing::run_threads(8, [&](int) {
    for (int i = 0; i < 100; ++i) client->add("shared", 1);
  });
  EXPECT_EQ(client->add("shared", 0), 800);
}

TEST(TcpStore, AddOnNonIntegerNamesKey) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  client->set("text", "abc");
  const std::string message = error_of([&] { client->add("text", 1); });
  EXPECT_NE(message.find("'text'"), std::string::npos) << message;
  EXPECT_NE(message.find("not an integer"), std::string::npos) << message;
}

TEST(TcpStore, CompareSetSemantics) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  // Absent key + empty expected: sets.
  EXPECT_EQ(client->compare_set("k", "", "first"), "first");
  // Present key, expected mismatch: unchanged, returns current.
  EXPECT_EQ(client->compare_set("k", "", "second"), "first");
  EXPECT_EQ(client->compare_set("k", "wrong", "second"), "first");
  EXPECT_EQ(client->get("k", 100ms), "first");
  // Present key, expected match: swaps.
  EXPECT_EQ(client->compare_set("k", "first", "second"), "second");
  EXPECT_EQ(client->get("k", 100ms), "second");
  // Absent key, non-empty expected: nothing set, returns "" (absent).
  EXPECT_EQ(client->compare_set("absent", "x", "y"), "");
  EXPECT_EQ(client->try_get("absent"), std::nullopt);
}

TEST(TcpStore, CompareSetHasExactlyOneWinner) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto client = connect(server);
      const std::string mine = "node" + std::to_string(t);
      if (client->compare_set("leader", "", mine) == mine) ++winners;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST(TcpStore, GetBlocksUntilAnotherThreadSets) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = connect(server);
  auto setter = connect(server);
  const auto start = std::chrono::steady_clock::now();
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    setter->set("late", "value");
  });
  EXPECT_EQ(waiter->get("late", 5000ms), "value");
  const auto waited = std::chrono::steady_clock::now() - start;
  later.join();
  EXPECT_GE(waited, 190ms);
  EXPECT_LT(waited, 3000ms);
}

TEST(TcpStore, WaitBlocksUntilAllKeysExist) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = connect(server);
  auto setter = connect(server);
  std::atomic<bool> done{false};
  std::thread t([&] {
    waiter->wait({"a", "b", "c"}, 5000ms);
    done = true;
  });
  setter->set("a", "1");
  setter->add("b", 1);
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(done.load());
  setter->compare_set("c", "", "x");
  t.join();
  EXPECT_TRUE(done.load());
  waiter->wait({}, 10ms);  // nothing to wait for
}

TEST(TcpStore, GetTimeoutNamesKeyEndpointAndHint) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { client->get("never/set", 300ms); });
  EXPECT_GE(std::chrono::steady_clock::now() - start, 290ms);
  EXPECT_NE(message.find("'never/set'"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos)
      << message;
  EXPECT_NE(message.find("--rdzv-endpoint / MASTER_ADDR"), std::string::npos) << message;
  client->set("still", "usable");
  EXPECT_EQ(client->get("still", 100ms), "usable");
}

TEST(TcpStore, WaitTimeoutNamesTheMissingKey) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  client->set("present", "1");
  const std::string message = error_of([&] { client->wait({"present", "missing"}, 200ms); });
  EXPECT_NE(message.find("'missing'"), std::string::npos) << message;
}

TEST(TcpStore, ConnectTimeoutNamesEndpointAndHint) {
  int port = 0;
  {
    TcpStoreServer probe("127.0.0.1", 0, kSecret);  // find a port, then free it
    port = probe.port();
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string message =
      error_of([&] { TcpStoreClient client("127.0.0.1", port, 400ms, kSecret); });
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 390ms);
  EXPECT_LT(waited, 3000ms);
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
  EXPECT_NE(message.find("is the launcher on node 0 running and reachable"), std::string::npos)
      << message;
}

TEST(TcpStore, ClientStartedBeforeServerConnects) {
  int port = 0;
  {
    TcpStoreServer probe("127.0.0.1", 0, kSecret);
    port = probe.port();
  }
  std::unique_ptr<TcpStoreServer> server;
  std::thread start_late([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port, kSecret);
  });
  TcpStoreClient client("127.0.0.1", port, 5000ms, kSecret);
  start_late.join();
  client.set("hello", "world");
  EXPECT_EQ(client.get("hello", 100ms), "world");
}

TEST(TcpStore, ServerSurvivesClientsThatDisconnectMidRequest) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  {
    const int fd = raw_member_connection(server);
    // A frame header announcing 100 bytes, then only 3 of them, then hang up.
    const std::string partial("\x64\0\0\0\x01\x02\x03", 7);
    ASSERT_TRUE(tcp_store_wire::send_all(fd, partial));
    ::close(fd);
  }
  {
    const int fd = raw_member_connection(server);
    // A frame over the 64 MiB limit is refused with an error and the connection closed.
    const std::string header("\x00\x00\x00\x08", 4);  // 128 MiB
    ASSERT_TRUE(tcp_store_wire::send_all(fd, header));
    std::string response;
    ASSERT_EQ(tcp_store_wire::read_frame(fd, response, std::nullopt),
              tcp_store_wire::ReadResult::kOk);
    EXPECT_EQ(response[0], static_cast<char>(tcp_store_wire::Status::kError));
    EXPECT_NE(response.find("limit"), std::string::npos);
    ::close(fd);
  }
  {
    // A client blocked in get that hangs up does not wedge the server.
    const int fd = raw_member_connection(server);
    tcp_store_wire::Writer w;
    w.u8(static_cast<uint8_t>(tcp_store_wire::Op::kGet)).str("nobody").i64(60000);
    ASSERT_TRUE(tcp_store_wire::send_all(fd, w.frame()));
    ::close(fd);
  }
  auto client = connect(server);
  client->set("ok", "yes");
  EXPECT_EQ(client->get("ok", 100ms), "yes");
  // The server notices the hung-up waiter at once (its poll loop sees the hang-up).
  for (int i = 0; i < 40 && server.connection_count() > 1; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(server.connection_count(), 1u);
}

TEST(TcpStore, LostServerGivesClearError) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  auto client = connect(*server);
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();  // also wakes the blocked get below
  });
  const std::string message = error_of([&] { client->get("k", 10000ms); });
  stopper.join();
  EXPECT_NE(message.find("'k'"), std::string::npos) << message;
  EXPECT_NE(message.find("--rdzv-endpoint"), std::string::npos) << message;
}

TEST(TcpStore, PrefixStoreScopesKeys) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect(server);
  PrefixStore run(*client, "run/7/");
  PrefixStore gen(run, "gen/1/");
  gen.set("a", "x");
  EXPECT_EQ(client->get("run/7/gen/1/a", 100ms), "x");
  EXPECT_EQ(gen.get("a", 100ms), "x");
  EXPECT_EQ(run.try_get("a"), std::nullopt);
  EXPECT_EQ(gen.add("n", 2), 2);
  EXPECT_EQ(client->add("run/7/gen/1/n", 0), 2);
  EXPECT_EQ(gen.compare_set("c", "", "v"), "v");
  gen.wait({"a", "n", "c"}, 100ms);
  const std::string message = error_of([&] { gen.get("zz", 100ms); });
  EXPECT_NE(message.find("'run/7/gen/1/zz'"), std::string::npos) << message;
  EXPECT_TRUE(gen.remove("a"));
  EXPECT_EQ(client->try_get("run/7/gen/1/a"), std::nullopt);
  EXPECT_EQ(gen.endpoint(), client->endpoint());
}

}  // namespace
}  // namespace shardtrain
