// The EFA combinations doctor must judge, faked through its system view (doctor_test_support.h):
// the instance type from DMI, the aws-ofi-nccl version from the plugin file, libfabric's version
// and the FI_* variables; plus IPC_LOCK lifting the memlock verdict.
#include "launch/doctor/efa_checks.h"

#include <gtest/gtest.h>

#include "launch/doctor/testing/doctor_test_support.h"
#include "launch/doctor/host_checks.h"

namespace shardtrain::doctor {
namespace {

using testing::FakeSystem;

// An EFA node: one EFA device, the plugin file holding its init line, libfabric `fabric`.
struct EfaNode {
  FakeSystem sys;
  NetworkFacts network;
  EfaNode(const std::string& instance, const std::string& plugin_version,
          const std::string& fabric) {
    sys.rdma_device("rdmap16s27", "efa", {"4: ACTIVE"}, "Unspecified");
    sys.write("/sys/devices/virtual/dmi/id/product_name", instance + "\n");
    sys.write("/opt/amazon/ofi-nccl/lib/libnccl-net.so", std::string("\x7f"
                                                                     "ELF\0\0junk",
                                                                     10) +
                                                             "NET/OFI Initializing aws-ofi-nccl " +
                                                             plugin_version + "-aws");
    network = read_network_facts(sys.view);
    network.fabric.found = true;
    network.fabric.version = fabric;
    network.fabric.providers = {"efa"};
  }
  CheckResult check() {
    return check_efa_config(sys.view, network, read_efa_facts(sys.view, network), Transport::kEfa);
  }
};

TEST(EfaConfigCheck, FactsComeFromDmiAndThePluginFile) {
  EfaNode node("p5.48xlarge", "1.9.1", "1.22");
  const EfaFacts facts = read_efa_facts(node.sys.view, node.network);
  EXPECT_EQ(facts.instance_type, "p5.48xlarge");
  EXPECT_EQ(facts.rdma_read, true);
  EXPECT_EQ(facts.plugin_version, "1.9.1");
  const CheckResult r = node.check();
  EXPECT_EQ(r.status, CheckStatus::kPass);
  EXPECT_EQ(r.detail, "instance p5.48xlarge (RDMA read), aws-ofi-nccl 1.9.1, libfabric 1.22");
}

TEST(EfaConfigCheck, RdmaVariableOnADeviceWithoutRdmaReadFails) {
  EfaNode node("g6.12xlarge", "1.9.1", "1.22");
  node.sys.view.env["FI_EFA_USE_DEVICE_RDMA"] = "1";
  const CheckResult r = node.check();
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.hint.find("g6.12xlarge's EFA has no RDMA read"), std::string::npos) << r.hint;
  // The same variable on a p4d has RDMA read: only the advice that it is not needed.
  EfaNode p4d("p4d.24xlarge", "1.9.1", "1.22");
  p4d.sys.view.env["FI_EFA_USE_DEVICE_RDMA"] = "1";
  EXPECT_EQ(p4d.check().status, CheckStatus::kWarn);
  // Unset on the g6: fine.
  EfaNode g6("g6.12xlarge", "1.9.1", "1.22");
  EXPECT_EQ(g6.check().status, CheckStatus::kPass);
}

TEST(EfaConfigCheck, OldPluginWarnsAndRedundantVariablesWarn) {
  EfaNode old_plugin("p5.48xlarge", "1.6.0", "1.22");
  const CheckResult r = old_plugin.check();
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_NE(r.hint.find("before 1.7"), std::string::npos) << r.hint;

  EfaNode provider("p5.48xlarge", "1.9.1", "1.22");
  provider.sys.view.env["FI_PROVIDER"] = "efa";
  const CheckResult p = provider.check();
  EXPECT_EQ(p.status, CheckStatus::kWarn);
  EXPECT_NE(p.detail.find("FI_PROVIDER=efa"), std::string::npos);
  // With libfabric 1.17 the variables are still the way to ask: no warning.
  EfaNode old_fabric("p5.48xlarge", "1.9.1", "1.17");
  old_fabric.sys.view.env["FI_PROVIDER"] = "efa";
  EXPECT_EQ(old_fabric.check().status, CheckStatus::kPass);
}

TEST(EfaConfigCheck, NotAnEfaNodePassesAndUnknownsAreSaid) {
  FakeSystem sys;
  const NetworkFacts network = read_network_facts(sys.view);
  const CheckResult none =
      check_efa_config(sys.view, network, read_efa_facts(sys.view, network), std::nullopt);
  EXPECT_EQ(none.status, CheckStatus::kPass);
  EXPECT_EQ(none.detail, "not an EFA node");
  EfaNode unknown("m7i.large", "", "");
  const CheckResult r = unknown.check();
  EXPECT_EQ(r.status, CheckStatus::kPass);
  EXPECT_EQ(r.detail, "instance m7i.large (RDMA read unknown), aws-ofi-nccl ?, libfabric ?");
}

TEST(EfaConfigCheck, VersionsCompareByNumber) {
  EXPECT_TRUE(version_less("1.7", "1.18"));
  EXPECT_FALSE(version_less("1.18.1", "1.18"));
  EXPECT_TRUE(version_less("1.6.9", "1.7"));
  EXPECT_EQ(find_ofi_nccl_version("x aws-ofi-nccl  y aws-ofi-nccl 1.13.2-aws"), "1.13.2");
  EXPECT_EQ(find_ofi_nccl_version("aws-ofi-nccl x"), "");
  EXPECT_EQ(efa_rdma_read("p5en.48xlarge"), true);
  EXPECT_EQ(efa_rdma_read("g6e.12xlarge"), false);
  EXPECT_EQ(efa_rdma_read("x1.large"), std::nullopt);
}

TEST(MemlockCheck, IpcLockCapabilityPassesALimitedMemlock) {
  FakeSystem sys;
  sys.rdma_device("rdmap16s27", "efa", {"4: ACTIVE"});
  sys.view.memlock_bytes = 8ull << 20;
  const RdmaDevices devices = find_rdma_devices(sys.view);
  EXPECT_EQ(check_memlock(sys.view, devices, Transport::kEfa).status, CheckStatus::kFail);
  sys.view.ipc_lock = true;  // what `capabilities: add: [IPC_LOCK]` gives the pod
  const CheckResult r = check_memlock(sys.view, devices, Transport::kEfa);
  EXPECT_EQ(r.status, CheckStatus::kPass);
  EXPECT_NE(r.detail.find("CAP_IPC_LOCK"), std::string::npos);
}

}  // namespace
}  // namespace shardtrain::doctor
