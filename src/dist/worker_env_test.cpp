// The worker contract (dist/worker_env.h): what the launcher writes parses back the same, and
// each missing or malformed variable is an error that names it.
#include "dist/worker_env.h"

#include <gtest/gtest.h>

#include "core/testing/test_support.h"
#include "dist/store_secret.h"

namespace shardtrain {
namespace {

using testing::error_of;

EnvLookup lookup_in(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

WorkerEnv sample() {
  WorkerEnv env;
  env.launched = true;
  env.rank = 5;
  env.world = 8;
  env.local_rank = 1;
  env.local_world = 4;
  env.group_rank = 1;
  env.group_world = 2;
  env.role_name = "trainer";
  env.role_rank = 5;
  env.role_world = 8;
  env.master_addr = "node0";
  env.master_port = 41234;
  env.restart_count = 3;
  env.max_restarts = 4;
  env.run_id = "job-7";
  env.error_file = "/tmp/err/5.json";
  env.store_host = "::1";
  env.store_port = 29400;
  env.store_prefix = "run/job-7/gen/3/";
  env.store_secret = "0123456789abcdef-secret";
  env.metrics_dir = "/dev/shm/shardtrain-metrics-abc";
  return env;
}

TEST(WorkerEnv, WhatTheLauncherWritesParsesBackTheSame) {
  const WorkerEnv written = sample();
  const std::map<std::string, std::string> vars = worker_environment(written);
  EXPECT_EQ(vars.at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  EXPECT_EQ(vars.at("SHARDTRAIN_STORE"), "[::1]:29400");
  EXPECT_EQ(vars.at("MASTER_PORT"), "41234");
  const WorkerEnv read = parse_worker_env(lookup_in(vars));
  EXPECT_TRUE(read.launched);
  EXPECT_EQ(read.rank, 5);
  EXPECT_EQ(read.world, 8);
  EXPECT_EQ(read.local_rank, 1);
  EXPECT_EQ(read.local_world, 4);
  EXPECT_EQ(read.group_rank, 1);
  EXPECT_EQ(read.group_world, 2);
  EXPECT_EQ(read.role_name, "trainer");
  EXPECT_EQ(read.role_rank, 5);
  EXPECT_EQ(read.role_world, 8);
  EXPECT_EQ(read.master_addr, "node0");
  EXPECT_EQ(read.master_port, 41234);
  EXPECT_EQ(read.restart_count, 3);
  EXPECT_EQ(read.max_restarts, 4);
  EXPECT_EQ(read.run_id, "job-7");
  EXPECT_EQ(read.error_file, "/tmp/err/5.json");
  EXPECT_EQ(read.store_host, "::1");
  EXPECT_EQ(read.store_port, 29400);
  EXPECT_EQ(read.store_prefix, "run/job-7/gen/3/");
  EXPECT_EQ(vars.at("SHARDTRAIN_STORE_SECRET"), "0123456789abcdef-secret");
  EXPECT_EQ(read.store_secret, "0123456789abcdef-secret");
  EXPECT_EQ(vars.at("SHARDTRAIN_METRICS_DIR"), "/dev/shm/shardtrain-metrics-abc");
  EXPECT_EQ(read.metrics_dir, "/dev/shm/shardtrain-metrics-abc");
  EXPECT_EQ(read.rendezvous_host(), "::1") << "shardtrain ranks use the agent's store";
  EXPECT_EQ(read.rendezvous_port(), 29400);
}

TEST(WorkerEnv, NoVariablesIsOneProcessAndTorchrunsSubsetIsEnough) {
  const WorkerEnv single = parse_worker_env(lookup_in({}));
  EXPECT_FALSE(single.launched);
  EXPECT_EQ(single.world, 1);
  EXPECT_EQ(single.rank, 0);
  const WorkerEnv by_hand = parse_worker_env(lookup_in(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(by_hand.local_world, 4);
  EXPECT_EQ(by_hand.local_rank, 3);
  EXPECT_EQ(by_hand.rendezvous_host(), "h") << "without SHARDTRAIN_STORE: MASTER_ADDR";
  EXPECT_EQ(by_hand.rendezvous_port(), 29500);
  EXPECT_EQ(by_hand.store_secret, "");
}

TEST(WorkerEnv, StoreSecretIsRequiredAndCheckedWhenTheTcpStoreIsUsed) {
  WorkerEnv by_hand = parse_worker_env(lookup_in(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}}));
  EXPECT_NE(
      error_of([&] {
        require_store_secret(by_hand);
      }).find("environment variable SHARDTRAIN_STORE_SECRET is not set: the store at h:29500"),
      std::string::npos);
  by_hand.store_secret = "short";
  EXPECT_NE(error_of([&] {
              require_store_secret(by_hand);
            }).find("SHARDTRAIN_STORE_SECRET: the store secret must be 16 to 1024"),
            std::string::npos);
  by_hand.store_secret = "a-long-enough-secret-0123";
  EXPECT_EQ(require_store_secret(by_hand), "a-long-enough-secret-0123");
}

TEST(WorkerEnv, EachMissingOrMalformedVariableIsNamed) {
  const auto error_for = [](std::map<std::string, std::string> vars) {
    return error_of([&] { parse_worker_env(lookup_in(vars)); });
  };
  EXPECT_NE(error_for({{"RANK", "1"}}).find("WORLD_SIZE is not set, but RANK is"),
            std::string::npos);
  EXPECT_NE(error_for({{"WORLD_SIZE", "2"}}).find("RANK is not set"), std::string::npos);
  EXPECT_NE(error_for({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error_for({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("need 0 <= RANK < WORLD_SIZE"),
            std::string::npos);
  EXPECT_NE(error_for({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "3"}})
                .find("LOCAL_WORLD_SIZE=3 must divide WORLD_SIZE=4"),
            std::string::npos);
  EXPECT_NE(error_for({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT='70000'"),
            std::string::npos);
  EXPECT_NE(error_for({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SHARDTRAIN_STORE", "nohost"}})
                .find("SHARDTRAIN_STORE='nohost'"),
            std::string::npos);
  EXPECT_NE(error_for({{"TORCHELASTIC_RESTART_COUNT", "-1"}}).find("TORCHELASTIC_RESTART_COUNT"),
            std::string::npos);
  EXPECT_NE(error_for({{"SHARDTRAIN_COMM_TIMEOUT_S", "soon"}}).find("SHARDTRAIN_COMM_TIMEOUT_S"),
            std::string::npos);
}

TEST(WorkerEnv, MetricsDirOnlyWhenGivenAndPodFromTheDownwardApi) {
  WorkerEnv without = sample();
  without.metrics_dir.clear();
  EXPECT_EQ(worker_environment(without).count("SHARDTRAIN_METRICS_DIR"), 0u);
  const WorkerEnv pod =
      parse_worker_env(lookup_in({{"POD_NAME", "llama-ft-worker-3"}, {"POD_NAMESPACE", "ml"}}));
  EXPECT_EQ(pod.pod.name, "llama-ft-worker-3");
  EXPECT_EQ(pod.pod.namespace_name, "ml");
  EXPECT_TRUE(parse_worker_env(lookup_in({})).pod.name.empty());
  EXPECT_EQ(parse_pod_identity(lookup_in({{"POD_NAMESPACE", "ml"}})).namespace_name, "ml");
}

TEST(WorkerEnv, GlooInterfaceTakesPyTorchsNameFirst) {
  EXPECT_EQ(parse_worker_env(lookup_in({{"SHARDTRAIN_GLOO_IFNAME", "eth1"}})).gloo_ifname, "eth1");
  EXPECT_EQ(parse_worker_env(
                lookup_in({{"GLOO_SOCKET_IFNAME", "eth0"}, {"SHARDTRAIN_GLOO_IFNAME", "eth1"}}))
                .gloo_ifname,
            "eth0");
}

}  // namespace
}  // namespace shardtrain
