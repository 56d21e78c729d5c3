// The /metrics server over real sockets: scrapes keep answering while hostile clients hold
// connections, stream huge bodies or headers, or trickle bytes; the server's memory stays bounded.
#include "obs/metrics_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "obs/process_memory.h"

namespace shardtrain {
namespace {

using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &where.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&where), sizeof(where)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval timeout{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  return fd;
}

std::string read_all(int fd) {
  std::string out;
  char buffer[4096];
  while (true) {
    const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) break;
    out.append(buffer, static_cast<size_t>(got));
  }
  return out;
}

// One request on a fresh connection; the whole response ("" when none came).
std::string exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response = read_all(fd);
  ::close(fd);
  return response;
}

std::string scrape(int port) { return exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); }

class MetricsServerTest : public ::testing::Test {
 protected:
  MetricsServer server_{"127.0.0.1", 0, [] { return std::string("shardtrain_up 1\n"); },
                        "metrics.port"};
};

TEST_F(MetricsServerTest, ServesMetricsAndRefusesTheRest) {
  const std::string ok = scrape(server_.port());
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Length: 16\r\n"), std::string::npos) << ok;
  EXPECT_EQ(ok.substr(ok.size() - 16), "shardtrain_up 1\n");
  const std::string head = exchange(server_.port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_EQ(head.find("shardtrain_up"), std::string::npos);
  EXPECT_EQ(exchange(server_.port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(exchange(server_.port(), "DELETE /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0),
            0u);
}

TEST_F(MetricsServerTest, HugeBodiesAndHeadersAreRefusedWithoutGrowing) {
  std::string headers = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 180'000; ++i) headers += "X-Header-" + std::to_string(i) + ": value\r\n";
  const std::string chunk(1 << 16, 'A');
  const auto before = static_cast<int64_t>(process_resident_bytes());
  // The body is announced as 3 GB and streamed: refused from the head, never read.
  const int fd = connect_to(server_.port());
  ASSERT_GE(fd, 0);
  const std::string post =
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000000\r\n\r\n";
  ::send(fd, post.data(), post.size(), MSG_NOSIGNAL);
  size_t streamed = 0;
  while (streamed < (size_t{64} << 20)) {  // until the server closes (or 64 MiB went through)
    const ssize_t put = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (put <= 0) break;
    streamed += static_cast<size_t>(put);
  }
  ::close(fd);
  EXPECT_LT(streamed, size_t{64} << 20) << "the server kept reading the body";
  // ~180k headers: refused once 8 KiB are in.
  const std::string refused = exchange(server_.port(), headers + "\r\n");
  EXPECT_EQ(refused.rfind("HTTP/1.1 431", 0), 0u) << refused.substr(0, 80);
  EXPECT_EQ(scrape(server_.port()).rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(static_cast<int64_t>(process_resident_bytes()) - before, int64_t{32} << 20);
}

TEST_F(MetricsServerTest, ScrapesAnswerUnder500IdleConnectionsAndSlowloris) {
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) {
    const int fd = connect_to(server_.port());
    if (fd >= 0) idle.push_back(fd);
  }
  // Slowloris: a few clients trickle a header byte now and then, never finishing.
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    const int fd = connect_to(server_.port());
    ASSERT_GE(fd, 0);
    ::send(fd, "GET /metrics HTTP/1.1\r\nX-a: ", 28, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) {
    for (int fd : slow) ::send(fd, "a", 1, MSG_NOSIGNAL);
    const std::string response = scrape(server_.port());
    EXPECT_EQ(response.rfind("HTTP/1.1 200 OK", 0), 0u) << "scrape " << i;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (int fd : idle) ::close(fd);
  for (int fd : slow) ::close(fd);
}

TEST_F(MetricsServerTest, SlowClientsAreClosedAfterTheRequestTimeout) {
  const int fd = connect_to(server_.port());
  ASSERT_GE(fd, 0);
  ::send(fd, "GET /metr", 9, MSG_NOSIGNAL);
  timeval timeout{8, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const auto start = Clock::now();
  char byte = 0;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);  // closed by the server, not by our timeout
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, MetricsServer::kRequestTimeout - std::chrono::milliseconds(500));
  EXPECT_LT(waited, MetricsServer::kRequestTimeout + std::chrono::seconds(2));
  ::close(fd);
}

TEST(MetricsServer, PortInUseIsOneLineNamingIt) {
  MetricsServer first(
      "127.0.0.1", 0, [] { return std::string(); }, "metrics.port");
  try {
    MetricsServer second(
        "127.0.0.1", first.port(), [] { return std::string(); }, "metrics.port");
    FAIL() << "bound twice";
  } catch (const Error& error) {
    const std::string port = std::to_string(first.port());
    EXPECT_EQ(std::string(error.what()),
              "metrics.port = " + port + ": cannot listen on 127.0.0.1:" + port +
                  " (in use); HINT: choose another port, or 0 for a free one");
  }
}

}  // namespace
}  // namespace shardtrain
