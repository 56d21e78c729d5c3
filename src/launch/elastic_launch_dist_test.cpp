// Elastic membership with the embedded TCP store, end to end: real launchers as two "nodes" on
// loopback (each its own process group), /bin/sh workers where only the launcher is under test
// and `shardtrain train` workers where a run must survive a node leaving:
//  - --nnodes 1:2 with one node: it starts alone once last_call_timeout has passed;
//  - --nnodes 1:2 with both nodes: they start at once (MAX joined), world = both;
//  - a node arriving while a smaller group runs makes it re-form (not counted as a restart);
//  - a SIGKILLed launcher is noticed by its stale heartbeat, and the other node re-forms alone;
//  - elastic shrink: a 4-rank training run loses a node for good, re-forms at world 2, resumes
//    from the newest checkpoint (resharded 4 -> 2) and completes steps 1..20 once each.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include "dist/tcp_store.h"
#include "launch/testing/launch_test_support.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using testing::BackgroundLauncher;

using testing::kBinary;

int free_port() {
  TcpStoreServer probe("127.0.0.1", 0, "port-probe-secret-0123");
  return probe.port();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class ElasticLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("shardtrain_elastic_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    port_ = free_port();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `shardtrain launch` of node `node` (its --node-rank; node 0 hosts the store) with
  // `flags`, running `worker` (a /bin/sh script, or a shardtrain subcommand when it starts
  // with "train").
  std::string launch(int node, const std::string& flags, const std::string& worker) const {
    const std::string command =
        worker.rfind("train", 0) == 0 ? worker : "/bin/sh -c '" + worker + "'";
    return "env " + testing::kTestStoreToken + " " + kBinary + " launch --node-rank " +
           std::to_string(node) +
           " --nproc-per-node 2 --rdzv-id elastic --rdzv-endpoint 127.0.0.1:" +
           std::to_string(port_) + " " + flags + " -- " + command;
  }
  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }

  std::string dir_;
  int port_ = 0;
};

// Prints what the worker saw, for the tests to check.
const std::string kReport = "echo saw rank=$RANK world=$WORLD_SIZE nodes=$GROUP_WORLD_SIZE";

TEST_F(ElasticLaunchTest, OneNodeOfOneToTwoStartsAloneAfterTheLastCall) {
  const auto start = Clock::now();
  BackgroundLauncher node0(launch(0, "--nnodes 1:2 --rdzv-conf last_call_timeout=1.5", kReport),
                           log("node0"));
  ASSERT_EQ(node0.wait(30s), 0) << node0.output();
  const double seconds = seconds_since(start);
  const std::string out = node0.output();
  EXPECT_TRUE(contains(out, "[rank 0] saw rank=0 world=2 nodes=1")) << out;
  EXPECT_TRUE(contains(out, "[rank 1] saw rank=1 world=2 nodes=1")) << out;
  EXPECT_TRUE(contains(out, "closing in 1.5 s unless all 2 join sooner")) << out;
  EXPECT_GE(seconds, 1.5) << "started before the last call ended";
  EXPECT_LT(seconds, 15) << out;
}

TEST_F(ElasticLaunchTest, TwoNodesOfOneToTwoStartTogetherAtOnce) {
  // A long last call: the group must close because MAX joined, not because it expired.
  const std::string flags = "--nnodes 1:2 --rdzv-conf last_call_timeout=60";
  const auto start = Clock::now();
  BackgroundLauncher node1(launch(1, flags, kReport), log("node1"));
  BackgroundLauncher node0(launch(0, flags, kReport), log("node0"));
  ASSERT_EQ(node0.wait(40s), 0) << node0.output();
  ASSERT_EQ(node1.wait(10s), 0) << node1.output();
  EXPECT_LT(seconds_since(start), 30);
  const std::string out0 = node0.output();
  const std::string out1 = node1.output();
  // Node ranks order the first group: node 0's workers are ranks 0-1 although node 1 joined first.
  EXPECT_TRUE(contains(out0, "[rank 0] saw rank=0 world=4 nodes=2")) << out0;
  EXPECT_TRUE(contains(out0, "[rank 1] saw rank=1 world=4 nodes=2")) << out0;
  EXPECT_TRUE(contains(out1, "[rank 2] saw rank=2 world=4 nodes=2")) << out1;
  EXPECT_TRUE(contains(out1, "[rank 3] saw rank=3 world=4 nodes=2")) << out1;
}

TEST_F(ElasticLaunchTest, LateNodeMakesTheSmallerGroupReform) {
  // Node 0 runs alone (world 2, workers wait); node 1 arrives; the group re-forms at world 4,
  // where the workers exit 0. --max-restarts 0: re-forming for a newcomer is no restart.
  const std::string started = dir_ + "/alone_started";
  const std::string worker =
      kReport + "; if [ $WORLD_SIZE = 2 ]; then touch " + started + "; exec sleep 60; fi";
  const std::string flags = "--nnodes 1:2 --max-restarts 0 --rdzv-conf last_call_timeout=0.5";
  BackgroundLauncher node0(launch(0, flags, worker), log("node0"));
  ASSERT_TRUE(testing::wait_for_file(started, 30s)) << node0.output();
  BackgroundLauncher node1(launch(1, flags, worker), log("node1"));
  ASSERT_EQ(node0.wait(40s), 0) << node0.output();
  ASSERT_EQ(node1.wait(10s), 0) << node1.output();
  const std::string out0 = node0.output();
  EXPECT_TRUE(contains(out0, "[rank 0] saw rank=0 world=2 nodes=1")) << out0;
  EXPECT_TRUE(contains(out0,
                       "1 node(s) waiting to join the group of 1 (--nnodes allows 2); "
                       "re-forming the group (not counted as a restart)"))
      << out0;
  EXPECT_TRUE(contains(out0, "[rank 0] saw rank=0 world=4 nodes=2")) << out0;
  EXPECT_TRUE(contains(out0, "attempt 1: node 0 of 2 starting ranks 0..1 of 4")) << out0;
  EXPECT_TRUE(contains(node1.output(), "[rank 3] saw rank=3 world=4 nodes=2")) << node1.output();
}

TEST_F(ElasticLaunchTest, KilledLauncherIsNoticedByItsHeartbeatAndTheOtherNodeGoesOn) {
  // The workers do not notice the loss (they only sleep): the heartbeat must.
  const std::string marker = dir_ + "/started_";
  const std::string worker =
      kReport + "; if [ $WORLD_SIZE = 4 ]; then touch " + marker + "$RANK; exec sleep 60; fi";
  const std::string flags =
      "--nnodes 1:2 --max-restarts 1 --rdzv-conf last_call_timeout=1,keep_alive_interval=0.5,"
      "keep_alive_max_attempt=4";
  BackgroundLauncher node0(launch(0, flags, worker), log("node0"));
  BackgroundLauncher node1(launch(1, flags, worker), log("node1"));
  ASSERT_TRUE(testing::wait_for_file(marker + "3", 30s)) << node1.output();
  node1.kill_group();
  const auto killed = Clock::now();
  ASSERT_EQ(node0.wait(30s), 0) << node0.output();
  const std::string out = node0.output();
  EXPECT_LT(seconds_since(killed), 15) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("node 1 \\([^)]*\\) left the group: no heartbeat "
                                                "for [0-9.]+ s; restarting the worker group "
                                                "\\(restart 1 of 1\\)")))
      << out;
  EXPECT_TRUE(contains(out, "attempt 1: node 0 of 1 starting ranks 0..1 of 2")) << out;
  EXPECT_TRUE(contains(out, "[rank 1] saw rank=1 world=2 nodes=1")) << out;
}

TEST_F(ElasticLaunchTest, MinimumNotReachedFailsWithOneLineNamingTheCount) {
  BackgroundLauncher node0(launch(0, "--nnodes 2:3 --rdzv-conf join_timeout=1", "true"),
                           log("node0"));
  EXPECT_EQ(node0.wait(20s), 2) << node0.output();
  const std::string out = node0.output();
  EXPECT_TRUE(contains(out, "only 1 of 2 nodes joined within 1 s (--nnodes 2:3 needs at least 2)"))
      << out;
}

TEST_F(ElasticLaunchTest, ShrinkToOneNodeResumesFromTheCheckpointAtHalfTheWorld) {
  const std::string config = testing::write_tiny_training_job(dir_);
  const std::string metrics = dir_ + "/metrics.jsonl";
  const std::string ckpt = dir_ + "/ckpt";
  const std::string train = "train --config " + config + " --metrics " + metrics +
                            " --train.output_dir=" + dir_ + "/out --checkpoint-dir " + ckpt +
                            " --checkpoint-every 5 --train.checkpoint_max_lag_steps=2";
  const std::string flags =
      "--nnodes 1:2 --max-restarts 1 --stop-grace 1 --rdzv-conf last_call_timeout=2,"
      "keep_alive_interval=0.5,keep_alive_max_attempt=4";
  BackgroundLauncher node0(launch(0, flags, train), log("node0"));
  BackgroundLauncher node1(launch(1, flags, train), log("node1"));
  const int64_t seen = testing::wait_for_mid_run_step(metrics);
  ASSERT_LT(seen, 20) << "the run ended before the kill; nothing was tested\n" << node0.output();
  ASSERT_GE(seen, 7) << node0.output() << node1.output();
  node1.kill_group();  // for good: the run must finish on node 0 alone
  ASSERT_EQ(node0.wait(120s), 0) << node0.output();
  const std::string out = node0.output();
  EXPECT_TRUE(contains(out, "attempt 0: node 0 of 2 starting ranks 0..1 of 4")) << out;
  EXPECT_TRUE(contains(out, "restarting the worker group (restart 1 of 1)")) << out;
  EXPECT_TRUE(contains(out, "attempt 1: node 0 of 1 starting ranks 0..1 of 2")) << out;
  ASSERT_NO_FATAL_FAILURE(testing::expect_resumed_near_kill(out, ckpt, seen));
  EXPECT_EQ(testing::metric_steps(metrics), testing::one_to(20)) << "one record per step";
  for (const testing::MetricRecord& r : testing::metric_records(metrics)) {
    EXPECT_TRUE(std::isfinite(r.loss) && r.loss > 0) << "step " << r.step << " loss " << r.loss;
  }
  EXPECT_TRUE(fs::exists(dir_ + "/out/model.safetensors"));
}

}  // namespace
}  // namespace shardtrain
