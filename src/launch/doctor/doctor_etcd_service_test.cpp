// The rendezvous and clock checks against a real etcd (Debian etcd-server) that the test starts
// on loopback: healthy etcd passes both (this machine's clock against itself), a stopped one
// fails the rendezvous.
#include <gtest/gtest.h>

#include "dist/etcd_store_test_server.h"
#include "launch/doctor/rendezvous_checks.h"

namespace shardtrain::doctor {
namespace {

TEST(DoctorEtcd, HealthyEtcdPassesStoppedFails) {
  shardtrain::testing::EtcdTestServer etcd;
  etcd.start();
  if (!etcd.found()) GTEST_SKIP() << "etcd not installed (Debian etcd-server)";
  ASSERT_TRUE(etcd.healthy()) << "etcd did not come up; see " << etcd.log();
  const std::vector<CheckResult> up =
      check_rendezvous({"etcd", "127.0.0.1", etcd.port()}, std::chrono::milliseconds(3000));
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(up[0].status, CheckStatus::kPass) << up[0].detail;
  EXPECT_NE(up[0].detail.find("etcd 3."), std::string::npos) << up[0].detail;
  EXPECT_EQ(up[1].name, "clock");
  EXPECT_EQ(up[1].status, CheckStatus::kPass) << up[1].detail;  // same machine, same clock
  const int port = etcd.port();
  etcd.stop();
  const std::vector<CheckResult> down =
      check_rendezvous({"etcd", "127.0.0.1", port}, std::chrono::milliseconds(500));
  EXPECT_EQ(down[0].status, CheckStatus::kFail);
  EXPECT_EQ(down[1].status, CheckStatus::kWarn);
}

}  // namespace
}  // namespace shardtrain::doctor
