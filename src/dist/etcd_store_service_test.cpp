// EtcdStore against a real etcd (Debian `etcd-server`, started here on free loopback ports with
// a temporary data dir and stopped at the end), and a two-agent launch through it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "dist/etcd_store.h"
#include "dist/testing/etcd_store_test_server.h"

namespace shardtrain {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::free_loopback_port;

// One etcd process for the whole suite.
class EtcdStoreTest : public testing::EtcdSuiteTest {
 protected:
  void SetUp() override {
    EtcdSuiteTest::SetUp();
    if (skipped_or_failed()) return;
    port_ = etcd_.port();
  }

  // A store scoped to this test, so tests do not see each other's keys.
  static std::unique_ptr<EtcdStore> make_store(EtcdStore::Options options = {}) {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    return std::make_unique<EtcdStore>("127.0.0.1", port_,
                                       std::string("/test/") + test->name() + "/", options);
  }

  static inline int port_ = 0;
};

TEST_F(EtcdStoreTest, SetGetTryGetRemove) {
  auto store = make_store();
  const std::string binary("a\0b\xff\n=", 6);
  store->set("k", binary);
  EXPECT_EQ(store->get("k", 1s), binary);
  EXPECT_EQ(store->try_get("k"), binary);
  EXPECT_EQ(store->try_get("absent"), std::nullopt);
  store->set("k", "second");
  EXPECT_EQ(store->try_get("k"), "second");
  EXPECT_TRUE(store->remove("k"));
  EXPECT_FALSE(store->remove("k"));
  EXPECT_EQ(store->try_get("k"), std::nullopt);
  // Scopes do not overlap.
  EtcdStore other("127.0.0.1", port_, "/test/other-scope/", {});
  other.set("k", "elsewhere");
  EXPECT_EQ(store->try_get("k"), std::nullopt);
  store->wait({}, 0ms);
}

TEST_F(EtcdStoreTest, ConcurrentAddIsExact) {
  auto store = make_store();
  testing::run_threads(4, [&](int) {
    for (int i = 0; i < 25; ++i) store->add("counter", 1);
  });
  EXPECT_EQ(store->add("counter", 0), 100);
  EXPECT_EQ(store->add("counter", -7), 93);
  EXPECT_EQ(store->get("counter", 1s), "93");
  store->set("text", "abc");
  EXPECT_THROW(store->add("text", 1), Error);
}

TEST_F(EtcdStoreTest, CompareSetSemantics) {
  auto store = make_store();
  EXPECT_EQ(store->compare_set("k", "x", "y"), "");  // absent and expected a value: no change
  EXPECT_EQ(store->try_get("k"), std::nullopt);
  EXPECT_EQ(store->compare_set("k", "", "first"), "first");  // absent -> created
  EXPECT_EQ(store->compare_set("k", "", "again"), "first");  // present: "absent" fails
  EXPECT_EQ(store->compare_set("k", "wrong", "z"), "first");
  EXPECT_EQ(store->compare_set("k", "first", "second"), "second");
  EXPECT_EQ(store->try_get("k"), "second");
}

TEST_F(EtcdStoreTest, GetBlocksUntilAnotherThreadSets) {
  auto store = make_store();
  const auto start = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(300ms);
    store->set("late", "here");
  });
  // Generous limits: under a loaded CI machine etcd's writes (fsync) can take seconds; the test
  // is about blocking, which the lower bound checks.
  EXPECT_EQ(store->get("late", 20s), "here");
  EXPECT_GE(Clock::now() - start, 250ms);
  store->set("other", "1");
  setter.join();
  store->wait({"late", "other"}, 20s);
}

TEST_F(EtcdStoreTest, TimeoutsNameKeyAndEndpoint) {
  auto store = make_store();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port_);
  try {
    store->get("never", 200ms);
    FAIL() << "get of a missing key returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(endpoint), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--rdzv-endpoint"), std::string::npos) << e.what();
  }
  const int closed_port = free_loopback_port();
  EtcdStore::Options quick;
  quick.request_timeout = 300ms;
  EtcdStore unreachable("127.0.0.1", closed_port, "/x/", quick);
  const auto start = Clock::now();
  try {
    unreachable.set("k", "v");
    FAIL() << "set on a closed port returned";
  } catch (const Error& e) {
    const std::string expected = "is etcd running at 127.0.0.1:" + std::to_string(closed_port);
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'k'"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 3s);  // retried within the timeout, not forever
  // A blocking get gives up at its own timeout even though requests may retry for 30 s.
  EtcdStore patient("127.0.0.1", closed_port, "/x/", {});
  const auto get_start = Clock::now();
  EXPECT_THROW(patient.get("k", 300ms), Error);
  EXPECT_LT(Clock::now() - get_start, 3s);
}

TEST_F(EtcdStoreTest, LeasedKeyVanishesWhenKeepaliveStops) {
  auto observer = make_store();
  EtcdStore::Options leased;
  leased.lease_ttl_seconds = 2;
  leased.leased_keys = [](const std::string& key) { return key.rfind("member", 0) == 0; };
  auto agent = make_store(leased);
  agent->set("member/0", "alive");
  agent->set("plain", "stays");
  EXPECT_EQ(agent->compare_set("member/1", "", "x"), "x");
  std::this_thread::sleep_for(2500ms);  // longer than the TTL: only keepalive keeps it
  EXPECT_EQ(observer->try_get("member/0"), "alive");
  agent->stop_keepalive();  // as if the agent died
  const auto deadline = Clock::now() + 8s;
  while (observer->try_get("member/0") && Clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  EXPECT_EQ(observer->try_get("member/0"), std::nullopt);
  EXPECT_EQ(observer->try_get("member/1"), std::nullopt);
  EXPECT_EQ(observer->try_get("plain"), "stays");
}

struct LaunchResult {
  int exit_code = -1;
  std::string output;
};

// Starts two agents (node ranks 0 and 1, two workers each) and collects both.
std::vector<LaunchResult> launch_two_nodes(int etcd_port, const std::string& run_id) {
  std::vector<FILE*> pipes;
  for (int node = 0; node < 2; ++node) {
    const std::string command = fmt::format(
        "{} launch --nnodes 2 --node-rank {} --nproc-per-node 2 --rdzv-backend etcd "
        "--rdzv-endpoint 127.0.0.1:{} --rdzv-id {} --rdzv-conf join_timeout=20 -- "
        "/bin/sh -c 'echo rank=$RANK world=$WORLD_SIZE' 2>&1",
        SHARDTRAIN_BINARY, node, etcd_port, run_id);
    pipes.push_back(::popen(command.c_str(), "r"));
  }
  std::vector<LaunchResult> results;
  for (FILE* pipe : pipes) {
    LaunchResult result;
    char buffer[4096];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) result.output += buffer;
    const int status = ::pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    results.push_back(std::move(result));
  }
  return results;
}

std::set<int> ranks_in(const std::vector<LaunchResult>& results) {
  std::set<int> ranks;
  for (const auto& result : results) {
    for (size_t at = result.output.find("rank="); at != std::string::npos;
         at = result.output.find("rank=", at + 1)) {
      ranks.insert(std::atoi(result.output.c_str() + at + 5));
      EXPECT_EQ(result.output.substr(result.output.find(' ', at) + 1, 7), "world=4");
    }
  }
  return ranks;
}

TEST_F(EtcdStoreTest, TwoAgentLaunchAndRerunWithTheSameRunId) {
  ASSERT_EQ(::access(SHARDTRAIN_BINARY, X_OK), 0)
      << "build the shardtrain target first: " << SHARDTRAIN_BINARY;
  const std::string run_id = "etcd-test-" + std::to_string(::getpid());
  const auto first = launch_two_nodes(port_, run_id);
  for (const auto& result : first) {
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("generation 0"), std::string::npos) << result.output;
  }
  EXPECT_EQ(ranks_in(first), (std::set<int>{0, 1, 2, 3}));

  // Same run id after the first finished: a new generation, no stale state.
  const auto rerun = launch_two_nodes(port_, run_id);
  for (const auto& result : rerun) {
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("generation 1"), std::string::npos) << result.output;
  }
  EXPECT_EQ(ranks_in(rerun), (std::set<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace shardtrain
