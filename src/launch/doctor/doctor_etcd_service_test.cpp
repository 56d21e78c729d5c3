// The rendezvous and clock checks against a real etcd (Debian etcd-server) that the test starts
// on loopback: healthy etcd passes both (this machine's clock against itself), a stopped one
// fails the rendezvous. And etcd's member ids as they come: uint64 in decimal strings, about half
// of them above int64 (a server on loopback answers /v3/maintenance/status as etcd does).
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "dist/testing/etcd_store_test_server.h"
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

// Regression: the leader id was read as int64, so an id above 2^63 (a random half of all etcd
// clusters; CI's etcd drew one) read as 0 and doctor reported "no leader" of a healthy etcd.
TEST(DoctorEtcd, LeaderIdAboveInt64IsALeader) {
  httplib::Server server;
  server.Post("/v3/maintenance/status", [](const httplib::Request&, httplib::Response& response) {
    response.set_content(
        R"({"header":{"member_id":"17237436991929493444"},"version":"3.5.16",)"
        R"("leader":"17237436991929493444","raftIndex":"4"})",
        "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::vector<CheckResult> up =
      check_rendezvous({"etcd", "127.0.0.1", port}, std::chrono::milliseconds(2000));
  server.stop();
  serving.join();
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(up[0].status, CheckStatus::kPass) << up[0].detail;
  EXPECT_NE(up[0].detail.find("leader 17237436991929493444"), std::string::npos) << up[0].detail;
}

}  // namespace
}  // namespace shardtrain::doctor
