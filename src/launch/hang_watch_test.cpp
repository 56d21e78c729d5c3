// The agent's hang check over a real TCP store on loopback: it reports hangs while it watches,
// nothing once stopped, and its teardown never lets the heartbeat watchdog's thread use the
// connection after it is closed (the agent's SIGSEGV at exit).
#include "launch/hang_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "dist/heartbeat_record.h"
#include "dist/store_keys.h"
#include "dist/tcp_store.h"

namespace shardtrain::launch {
namespace {

using namespace std::chrono_literals;

const std::string kSecret = "hang-watch-test-secret-0123456789";
const std::string kPrefix = "run/test/gen/0/";

// Every rank of `world` publishes one heartbeat record (at step 3, computing).
void publish_heartbeats(TcpStoreClient& client, int world) {
  for (int rank = 0; rank < world; ++rank) {
    client.set(
        kPrefix + store_keys::heartbeat(rank),
        encode_heartbeat(HeartbeatRecord{3, 1000 + rank, HeartbeatPhase::kStepStart, 0, ""}));
    client.set(kPrefix + store_keys::heartbeat_alive(rank), "1");
  }
}

std::optional<std::string> report_within(HangWatch& hang, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::optional<std::string> report = hang.check()) return report;
    std::this_thread::sleep_for(5ms);
  }
  return hang.check();
}

// The agent stops the hang check as soon as its workers are done, whenever that is: usually
// while the watchdog's thread is in the middle of a poll (here: 32 store round trips every
// millisecond). Stopping must wait for that poll; closing the connection first made the thread's
// next call go through a freed client (SIGSEGV, or an error on a closed descriptor). A failure
// here is the test process dying.
TEST(HangWatchTest, StopsWhileTheWatchdogPollsWithoutTouchingItsClosedConnection) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  constexpr int kWorld = 16;
  TcpStoreClient publisher("127.0.0.1", server.port(), 5s, kSecret);
  publish_heartbeats(publisher, kWorld);
  const HeartbeatSource source{"127.0.0.1", server.port(), kSecret, kPrefix, kWorld};
  std::mt19937 rng(7);
  for (int round = 0; round < 150; ++round) {
    HangWatch hang(source, 5s, 60s, 1ms);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    EXPECT_FALSE(hang.check()) << "every rank published just now: no hang";
    if (round % 2 == 0) {
      hang.stop();  // the agent's path; the destructor's comes next and must be a no-op
      EXPECT_FALSE(hang.check());
    }
  }
  // The store saw every watchdog connection close in order, and still serves.
  EXPECT_EQ(publisher.try_get(kPrefix + store_keys::heartbeat_alive(0)), "1");
}

TEST(HangWatchTest, ReportsAHeartbeatHangUntilStopped) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStoreClient publisher("127.0.0.1", server.port(), 5s, kSecret);
  publish_heartbeats(publisher, 2);
  HangWatch hang(HeartbeatSource{"127.0.0.1", server.port(), kSecret, kPrefix, 2}, 5s, 100ms, 10ms);
  const std::optional<std::string> report = report_within(hang, 5s);
  ASSERT_TRUE(report) << "no rank advanced for longer than the timeout";
  EXPECT_EQ(report->rfind("rank 0 made no progress for ", 0), 0u) << *report;
  EXPECT_NE(report->find("at step 3"), std::string::npos) << *report;
  hang.stop();
  EXPECT_FALSE(hang.check()) << "a stopped watch reports nothing";
}

TEST(HangWatchTest, ReportsAStoppedWorkerProcessUntilStopped) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  HangWatch hang(50ms, {{5, child}});
  const std::optional<std::string> report = report_within(hang, 5s);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->rfind("rank 5 (pid " + std::to_string(child) + ") made no progress", 0), 0u)
      << *report;
  hang.stop();
  EXPECT_FALSE(hang.check());
}

TEST(HangWatchTest, AnEmptyWatchReportsNothing) {
  HangWatch hang;
  EXPECT_FALSE(hang.check());
  hang.stop();
  EXPECT_FALSE(hang.check());
}

}  // namespace
}  // namespace shardtrain::launch
