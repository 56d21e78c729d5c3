// Node failures with the etcd rendezvous backend, end to end against a real etcd (Debian
// `etcd-server`, started here; the tests skip visibly without it), with launchers as two
// "nodes" on loopback, each in its own process group:
//  - a SIGKILLed launcher (the whole node gone) of a fixed 2-node training run is started
//    again: the group re-forms, resumes from the newest checkpoint and ends with final weights
//    byte-equal to an uninterrupted run; that uninterrupted run is a rerun with the same run
//    id after the first finished, which must work without touching etcd;
//  - a launcher whose workers do not notice anything is judged gone when its etcd lease
//    expires, and the other node (which then hosts the workers' store) goes on alone.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include "dist/testing/etcd_store_test_server.h"
#include "launch/testing/launch_test_support.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using testing::BackgroundLauncher;

using testing::kBinary;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The largest N in "generation N" lines of `output` (-1 if none).
int64_t last_generation(const std::string& output) {
  int64_t last = -1;
  const std::regex pattern("\\(generation ([0-9]+),");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    last = std::max<int64_t>(last, std::stoll((*it)[1].str()));
  }
  return last;
}

class ElasticEtcdLaunchTest : public testing::EtcdSuiteTest {
 protected:
  void SetUp() override {
    EtcdSuiteTest::SetUp();
    if (skipped_or_failed()) return;
    ASSERT_EQ(::access(kBinary.c_str(), X_OK), 0) << "build the shardtrain target first";
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = (fs::temp_directory_path() /
            ("shardtrain_elastic_etcd_" + std::to_string(::getpid()) + "_" + name))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    run_id_ = "elastic-" + std::to_string(::getpid()) + "-" + name;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // `shardtrain launch` of node `node` through etcd, 2 workers, running `worker` (a /bin/sh
  // script, or a shardtrain subcommand when it starts with "train").
  std::string launch(int node, const std::string& flags, const std::string& worker) const {
    const std::string command =
        worker.rfind("train", 0) == 0 ? worker : "/bin/sh -c '" + worker + "'";
    return kBinary + " launch --node-rank " + std::to_string(node) +
           " --nproc-per-node 2 --rdzv-backend etcd --rdzv-endpoint 127.0.0.1:" +
           std::to_string(etcd_.port()) + " --rdzv-id " + run_id_ + " " + flags + " -- " + command;
  }
  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }

  std::string dir_;
  std::string run_id_;
};

TEST_F(ElasticEtcdLaunchTest, KilledLauncherComesBackAndTheRunEndsBitIdentical) {
  const std::string config = testing::write_tiny_training_job(dir_);
  const auto train = [&](const std::string& name, const std::string& extra) {
    fs::create_directories(dir_ + "/" + name);
    return "train --config " + config + " --metrics " + dir_ + "/" + name +
           "/metrics.jsonl --train.output_dir=" + dir_ + "/" + name + "/out " + extra;
  };
  const std::string ckpt = dir_ + "/killed/ckpt";
  const std::string killed_run =
      train("killed", "--checkpoint-dir " + ckpt +
                          " --checkpoint-every 5 --train.checkpoint_max_lag_steps=2");
  const std::string flags =
      "--nnodes 2 --max-restarts 2 --stop-grace 1 --rdzv-conf "
      "keep_alive_interval=1,keep_alive_max_attempt=3";
  BackgroundLauncher node0(launch(0, flags, killed_run), log("node0"));
  std::optional<BackgroundLauncher> node1;
  node1.emplace(launch(1, flags, killed_run), log("node1_first"));
  const int64_t seen = testing::wait_for_mid_run_step(dir_ + "/killed/metrics.jsonl");
  ASSERT_LT(seen, 20) << "the run ended before the kill; nothing was tested\n" << node0.output();
  ASSERT_GE(seen, 7) << node0.output() << node1->output();
  node1->kill_group();
  node1.emplace(launch(1, flags, killed_run), log("node1_again"));
  ASSERT_EQ(node0.wait(150s), 0) << node0.output();
  ASSERT_EQ(node1->wait(20s), 0) << node1->output();
  const std::string out0 = node0.output();
  EXPECT_TRUE(contains(out0, "restarting the worker group (restart 1 of 2)")) << out0;
  EXPECT_TRUE(contains(node1->output(), "starting ranks 2..3 of 4")) << node1->output();
  ASSERT_NO_FATAL_FAILURE(testing::expect_resumed_near_kill(out0, ckpt, seen));
  EXPECT_EQ(testing::metric_steps(dir_ + "/killed/metrics.jsonl"), testing::one_to(20));
  const int64_t killed_generation = last_generation(out0);

  // The uninterrupted run: the same two nodes and run id, after the first run finished.
  const std::string full_run = train("full", "");
  BackgroundLauncher full0(launch(0, "--nnodes 2", full_run), log("full0"));
  BackgroundLauncher full1(launch(1, "--nnodes 2", full_run), log("full1"));
  ASSERT_EQ(full0.wait(120s), 0) << full0.output();
  ASSERT_EQ(full1.wait(20s), 0) << full1.output();
  EXPECT_TRUE(contains(full0.output(), "attempt 0: node 0 of 2 starting ranks 0..1 of 4"))
      << full0.output();
  EXPECT_GT(last_generation(full0.output()), killed_generation) << full0.output();
  const std::string full_model = testing::read_text(dir_ + "/full/out/model.safetensors");
  ASSERT_FALSE(full_model.empty());
  EXPECT_EQ(full_model, testing::read_text(dir_ + "/killed/out/model.safetensors"))
      << "final parameters differ from the uninterrupted run";
}

TEST_F(ElasticEtcdLaunchTest, ExpiredLeaseOfASilentNodeLetsTheOtherGoOnAlone) {
  // Node 0 (group rank 0, the workers' store host) is killed; its workers die with it, node
  // 1's only sleep: node 1 must notice the expired lease, host the store itself and go on.
  const std::string marker = dir_ + "/started_";
  const std::string worker =
      "echo saw rank=$RANK world=$WORLD_SIZE; if [ $WORLD_SIZE = 4 ]; "
      "then touch " +
      marker + "$RANK; exec sleep 60; fi";
  const std::string flags =
      "--nnodes 1:2 --max-restarts 1 --rdzv-conf last_call_timeout=1,keep_alive_interval=1,"
      "keep_alive_max_attempt=3";
  BackgroundLauncher node0(launch(0, flags, worker), log("node0"));
  BackgroundLauncher node1(launch(1, flags, worker), log("node1"));
  ASSERT_TRUE(testing::wait_for_file(marker + "0", 30s)) << node0.output();
  ASSERT_TRUE(testing::wait_for_file(marker + "3", 30s)) << node1.output();
  node0.kill_group();
  const auto killed = Clock::now();
  ASSERT_EQ(node1.wait(40s), 0) << node1.output();
  const std::string out = node1.output();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed).count(), 20) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("node 0 \\([^)]*\\) left the group: its etcd "
                                                "lease expired .*restarting the worker group "
                                                "\\(restart 1 of 1\\)")))
      << out;
  EXPECT_TRUE(contains(out, "attempt 1: node 0 of 1 starting ranks 0..1 of 2")) << out;
  EXPECT_TRUE(contains(out, "[rank 0] saw rank=0 world=2")) << out;
}

}  // namespace
}  // namespace shardtrain
