// A PyTorch DDP job (tests/pytorch/ddp_job.py, Debian's python3-torch) under two launcher
// agents meeting in a real etcd v3 (Debian `etcd-server`, started here), then run again with
// the same run id: torchrun's etcd backend needs etcd restarted for that (RendezvousClosedError);
// ours opens a fresh generation. Skips visibly without etcd or PyTorch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "dist/testing/etcd_store_test_server.h"
#include "launch/testing/launch_test_support.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::BackgroundLauncher;

using testing::kBinary;
const std::string kJob = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/pytorch/ddp_job.py";

bool torch_available() {
  return std::system(
             "/usr/bin/python3 -c 'import torch.distributed as d; "
             "assert d.is_gloo_available()' >/dev/null 2>&1") == 0;
}

class TorchrunEtcdTest : public testing::EtcdSuiteTest {
 protected:
  void SetUp() override {
    EtcdSuiteTest::SetUp();
    if (skipped_or_failed()) return;
    if (!torch_available()) GTEST_SKIP() << "no PyTorch (Debian python3-torch): not tested";
    dir_ = (fs::temp_directory_path() / ("shardtrain_torchrun_etcd_" + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(TorchrunEtcdTest, DdpJobOnTwoAgentsAndAgainWithTheSameRunId) {
  const std::string run_id = "ddp-etcd-" + std::to_string(::getpid());
  for (int round = 0; round < 2; ++round) {
    const auto agent = [&](int node) {
      return kBinary + " launch --nnodes 2 --node-rank " + std::to_string(node) +
             " --nproc-per-node 2 --rdzv-backend etcd --rdzv-endpoint 127.0.0.1:" +
             std::to_string(etcd_.port()) + " --rdzv-id " + run_id + " --python /usr/bin/python3 " +
             kJob + " --steps 3";
    };
    const std::string tag = "round" + std::to_string(round);
    BackgroundLauncher node0(agent(0), dir_ + "/" + tag + "_node0.log");
    BackgroundLauncher node1(agent(1), dir_ + "/" + tag + "_node1.log");
    EXPECT_EQ(node0.wait(std::chrono::seconds(90)), 0) << node0.output();
    EXPECT_EQ(node1.wait(std::chrono::seconds(90)), 0) << node1.output();
    EXPECT_NE(node0.output().find("[rank 0] ddp ok rank=0 world=4 restart=0"), std::string::npos)
        << tag << "\n"
        << node0.output();
    EXPECT_NE(node1.output().find("[rank 3] ddp ok rank=3 world=4 restart=0"), std::string::npos)
        << tag << "\n"
        << node1.output();
  }
}

}  // namespace
}  // namespace shardtrain
