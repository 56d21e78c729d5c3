// Every doctor node check passes, warns and fails on made-up systems (doctor_test_support.h):
// GPUs present / absent / too old for the build, NVML health, driver versions, NCCL present /
// missing / old, the net plugin present / missing / misnamed, libfabric with and without efa,
// EFA devices present / absent, IB ports up / down, the transport environment, /dev/shm 64 MB vs
// 8 GB, memlock limited, disk space against a job's checkpoints.
#include <gtest/gtest.h>

#include "launch/doctor/checkpoint_need.h"
#include "launch/doctor/testing/doctor_test_support.h"
#include "launch/doctor/gpu_checks.h"
#include "launch/doctor/host_checks.h"
#include "launch/doctor/network_checks.h"
#include "launch/doctor/node_checks.h"
#include "model/hf_config.h"
#include "model/param_layout.h"

namespace shardtrain::doctor {
namespace {

using testing::FakeSystem;
constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

CudaBuildInfo hopper_build() {  // the default build: sm_90a only, CUDA 13.0
  CudaBuildInfo b;
  b.with_cuda = true;
  b.runtime_built = b.runtime_loaded = 13000;
  b.archs = {90};
  b.newest_arch_specific = true;
  return b;
}

CudaBuildInfo fat_build() {  // sm_80, 86, 89 and 90 with PTX
  CudaBuildInfo b = hopper_build();
  b.archs = {80, 86, 89, 90};
  b.newest_arch_specific = false;
  return b;
}

GpuInfo gpu(const std::string& name, int major, int minor, int index = 0) {
  GpuInfo g;
  g.index = index;
  g.name = name;
  g.major = major;
  g.minor = minor;
  g.memory_bytes = 80 * kGiB;
  return g;
}

GpuReport report_with(std::vector<GpuInfo> gpus) {
  GpuReport r;
  r.driver_cuda_version = 13000;
  r.driver_version = "580.65.06";
  r.gpus = std::move(gpus);
  return r;
}

// ---- build support ----

TEST(ArchSupport, NativeJitAndRefused) {
  EXPECT_EQ(build_supports_compute_capability(hopper_build(), 9, 0), ArchSupport::kNative);
  EXPECT_EQ(build_supports_compute_capability(hopper_build(), 8, 0), ArchSupport::kNo);
  EXPECT_EQ(build_supports_compute_capability(hopper_build(), 10, 0), ArchSupport::kNo);  // 90a PTX
  EXPECT_EQ(build_supports_compute_capability(fat_build(), 8, 6), ArchSupport::kNative);
  EXPECT_EQ(build_supports_compute_capability(fat_build(), 8, 7), ArchSupport::kNative);  // sm_86
  EXPECT_EQ(build_supports_compute_capability(fat_build(), 10, 0), ArchSupport::kPtxJit);
  EXPECT_EQ(build_supports_compute_capability(fat_build(), 7, 0), ArchSupport::kNo);  // V100
  EXPECT_EQ(build_supports_compute_capability(CudaBuildInfo{}, 9, 0), ArchSupport::kNo);
  EXPECT_EQ(describe_archs(hopper_build()), "sm_90a");
  EXPECT_EQ(describe_archs(fat_build()), "sm_80, sm_86, sm_89, sm_90");
}

// ---- gpus ----

TEST(GpuCheck, NoGpuFails) {
  GpuReport none;
  none.driver_error = "libcuda.so.1: cannot open shared object file";
  const CheckResult r = check_gpus(none, hopper_build());
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("no GPU: libcuda.so.1"), std::string::npos) << r.detail;
  EXPECT_NE(r.hint.find("nvidia.com/gpu"), std::string::npos);
}

TEST(GpuCheck, SupportedGpuPasses) {
  const CheckResult r = check_gpus(report_with({gpu("NVIDIA H200", 9, 0)}), hopper_build());
  EXPECT_EQ(r.status, CheckStatus::kPass) << r.detail;
  EXPECT_EQ(r.detail, "1 GPU(s): 0: NVIDIA H200 (sm_90, 80 GiB); this build has code for sm_90a");
}

TEST(GpuCheck, GpuTooOldForTheBuildFails) {
  const CheckResult v100 = check_gpus(report_with({gpu("Tesla V100", 7, 0)}), fat_build());
  EXPECT_EQ(v100.status, CheckStatus::kFail);
  EXPECT_NE(v100.detail.find("cannot run on 0: Tesla V100 (sm_70"), std::string::npos);
  EXPECT_NE(v100.hint.find("8.0+"), std::string::npos);
  // An A100 with the Hopper-only build: no code for it either.
  const CheckResult a100 =
      check_gpus(report_with({gpu("H100", 9, 0, 0), gpu("A100", 8, 0, 1)}), hopper_build());
  EXPECT_EQ(a100.status, CheckStatus::kFail);
  EXPECT_NE(a100.detail.find("cannot run on 1: A100"), std::string::npos) << a100.detail;
}

TEST(GpuCheck, NewerGpuThroughPtxWarns) {
  const CheckResult r = check_gpus(report_with({gpu("B200", 10, 0)}), fat_build());
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_NE(r.detail.find("PTX JIT"), std::string::npos);
}

TEST(GpuCheck, CpuOnlyBuildFailsWithAGpu) {
  const CheckResult r = check_gpus(report_with({gpu("H200", 9, 0)}), CudaBuildInfo{});
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("CPU-only build"), std::string::npos);
}

// ---- gpu_health ----

TEST(GpuHealthCheck, PassWarnFail) {
  GpuReport healthy = report_with({gpu("H200", 9, 0)});
  healthy.gpus[0].ecc_enabled = true;
  healthy.gpus[0].row_remap_pending = false;
  healthy.gpus[0].row_remap_failed = false;
  healthy.gpus[0].ecc_uncorrected_volatile = 0;
  EXPECT_EQ(check_gpu_health(healthy).status, CheckStatus::kPass);
  EXPECT_EQ(check_gpu_health(healthy).detail, "driver 580.65.06; GPU 0 ECC on");

  GpuReport ecc_off = healthy;
  ecc_off.gpus[0].ecc_enabled = false;
  EXPECT_EQ(check_gpu_health(ecc_off).status, CheckStatus::kWarn);

  GpuReport pending = healthy;
  pending.gpus[0].row_remap_pending = true;
  const CheckResult r = check_gpu_health(pending);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("GPU 0 row remap pending reset"), std::string::npos);

  GpuReport errors = healthy;
  errors.gpus[0].ecc_uncorrected_volatile = 3;
  EXPECT_EQ(check_gpu_health(errors).status, CheckStatus::kFail);

  GpuReport no_nvml = healthy;
  no_nvml.nvml_error = "libnvidia-ml.so.1: cannot open shared object file";
  EXPECT_EQ(check_gpu_health(no_nvml).status, CheckStatus::kWarn);
  EXPECT_NE(check_gpu_health(no_nvml).detail.find("NVML unavailable"), std::string::npos);
}

// ---- cuda_driver ----

TEST(CudaDriverCheck, PassWarnFail) {
  GpuReport r = report_with({gpu("H200", 9, 0)});
  EXPECT_EQ(check_cuda_driver(r, hopper_build()).status, CheckStatus::kPass);
  CudaBuildInfo newer_minor = hopper_build();
  newer_minor.runtime_built = 13010;
  EXPECT_EQ(check_cuda_driver(r, newer_minor).status, CheckStatus::kWarn);
  r.driver_cuda_version = 12040;
  const CheckResult old = check_cuda_driver(r, hopper_build());
  EXPECT_EQ(old.status, CheckStatus::kFail);
  EXPECT_NE(old.detail.find("driver supports CUDA 12.4"), std::string::npos) << old.detail;
  EXPECT_NE(old.hint.find("CUDA 13.x"), std::string::npos) << old.hint;
  GpuReport none;
  none.driver_error = "libcuda.so.1: not found";
  EXPECT_EQ(check_cuda_driver(none, hopper_build()).status, CheckStatus::kFail);
}

// ---- nccl ----

int nccl_2_28_3(int* v) { return *v = 22803, 0; }
int nccl_2_18_1(int* v) { return *v = 21801, 0; }

TEST(NcclCheck, FoundMissingOld) {
  FakeSystem sys;
  EXPECT_EQ(check_nccl(sys.view, 22803).status, CheckStatus::kFail);  // missing
  sys.loader.libraries["libnccl.so.2"] = {{"ncclGetVersion", (void*)&nccl_2_28_3}};
  const CheckResult ok = check_nccl(sys.view, 22803);
  EXPECT_EQ(ok.status, CheckStatus::kPass);
  EXPECT_EQ(ok.detail, "NCCL 2.28.3, built with 2.28.3");
  EXPECT_EQ(check_nccl(sys.view, 22805).status, CheckStatus::kWarn);  // older patch
  EXPECT_EQ(check_nccl(sys.view, 0).status, CheckStatus::kWarn);      // build without NCCL
  sys.loader.libraries["libnccl.so.2"] = {{"ncclGetVersion", (void*)&nccl_2_18_1}};
  const CheckResult old = check_nccl(sys.view, 22803);
  EXPECT_EQ(old.status, CheckStatus::kFail);
  EXPECT_NE(old.hint.find("NCCL 2.28.0 or newer"), std::string::npos) << old.hint;
  EXPECT_EQ(nccl_version_text(2704), "2.7.4");
}

// ---- net plugin, libfabric, EFA, IB ----

TEST(NetPluginCheck, MissingPresentMisnamed) {
  FakeSystem sys;
  NetworkFacts facts = read_network_facts(sys.view);
  EXPECT_EQ(check_nccl_net_plugin(sys.view, facts, std::nullopt).status, CheckStatus::kPass);
  EXPECT_EQ(check_nccl_net_plugin(sys.view, facts, Transport::kEfa).status, CheckStatus::kFail);

  sys.rdma_device("rdmap16s27", "efa", {"4: ACTIVE"}, "Unspecified");
  facts = read_network_facts(sys.view);
  const CheckResult efa_no_plugin = check_nccl_net_plugin(sys.view, facts, std::nullopt);
  EXPECT_EQ(efa_no_plugin.status, CheckStatus::kWarn);
  EXPECT_NE(efa_no_plugin.detail.find("NCCL will use sockets"), std::string::npos);

  sys.write("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
  facts = read_network_facts(sys.view);
  ASSERT_EQ(facts.plugins, std::vector<std::string>{"/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"});
  EXPECT_EQ(check_nccl_net_plugin(sys.view, facts, std::nullopt).status, CheckStatus::kWarn);
  sys.view.env["NCCL_NET_PLUGIN"] = "ofi";
  EXPECT_EQ(check_nccl_net_plugin(sys.view, facts, Transport::kEfa).status, CheckStatus::kPass);
}

TEST(NetPluginCheck, FoundThroughLdLibraryPathAndLdSoConf) {
  FakeSystem sys;
  sys.write("/custom/lib/libnccl-net.so");
  EXPECT_TRUE(read_network_facts(sys.view).plugins.empty());
  sys.view.env["LD_LIBRARY_PATH"] = "/custom/lib";
  EXPECT_EQ(read_network_facts(sys.view).plugins,
            std::vector<std::string>{"/custom/lib/libnccl-net.so"});
  sys.view.env.erase("LD_LIBRARY_PATH");
  sys.write("/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  sys.write("/etc/ld.so.conf.d/efa.conf", "# aws\n/custom/lib\n");
  const NetworkFacts facts = read_network_facts(sys.view);
  EXPECT_EQ(facts.plugins, std::vector<std::string>{"/custom/lib/libnccl-net.so"});
  EXPECT_EQ(check_nccl_net_plugin(sys.view, facts, Transport::kEfa).status, CheckStatus::kPass);
}

fabric_abi::FabricAttr efa_attr{nullptr, nullptr, const_cast<char*>("efa"), 0, 0};
fabric_abi::FabricAttr tcp_attr{nullptr, nullptr, const_cast<char*>("tcp;ofi_rxm"), 0, 0};
fabric_abi::Info tcp_info{nullptr, 0,       0,       0,       0,       0,         nullptr, nullptr,
                          nullptr, nullptr, nullptr, nullptr, nullptr, &tcp_attr, nullptr};
fabric_abi::Info efa_info{&tcp_info, 0,       0,       0,         0,
                          0,         nullptr, nullptr, nullptr,   nullptr,
                          nullptr,   nullptr, nullptr, &efa_attr, nullptr};
int getinfo_efa(uint32_t, const char*, const char*, uint64_t, const fabric_abi::Info*,
                fabric_abi::Info** out) {
  return *out = &efa_info, 0;
}
int getinfo_tcp(uint32_t, const char*, const char*, uint64_t, const fabric_abi::Info*,
                fabric_abi::Info** out) {
  return *out = &tcp_info, 0;
}
void freeinfo(fabric_abi::Info*) {}
uint32_t fabric_1_22() { return (1u << 16) | 22u; }

TEST(LibfabricCheck, EfaProviderPresentAbsent) {
  FakeSystem sys;
  EXPECT_EQ(check_libfabric(read_network_facts(sys.view), std::nullopt).status, CheckStatus::kPass);
  EXPECT_EQ(check_libfabric(read_network_facts(sys.view), Transport::kEfa).status,
            CheckStatus::kFail);
  sys.loader.libraries["libfabric.so.1"] = {{"fi_getinfo", (void*)&getinfo_tcp},
                                            {"fi_freeinfo", (void*)&freeinfo},
                                            {"fi_version", (void*)&fabric_1_22}};
  NetworkFacts facts = read_network_facts(sys.view);
  EXPECT_EQ(facts.fabric.providers, (std::vector<std::string>{"tcp", "ofi_rxm"}));
  const CheckResult no_efa = check_libfabric(facts, Transport::kEfa);
  EXPECT_EQ(no_efa.status, CheckStatus::kFail);
  EXPECT_NE(no_efa.detail.find("libfabric 1.22: providers tcp, ofi_rxm; no efa provider"),
            std::string::npos)
      << no_efa.detail;
  sys.loader.libraries["libfabric.so.1"]["fi_getinfo"] = (void*)&getinfo_efa;
  facts = read_network_facts(sys.view);
  EXPECT_EQ(check_libfabric(facts, Transport::kEfa).status, CheckStatus::kPass);
}

TEST(EfaDevicesCheck, PresentAbsent) {
  FakeSystem sys;
  EXPECT_EQ(check_efa_devices(read_network_facts(sys.view), std::nullopt).status,
            CheckStatus::kPass);
  EXPECT_EQ(check_efa_devices(read_network_facts(sys.view), Transport::kEfa).status,
            CheckStatus::kFail);
  sys.rdma_device("rdmap16s27", "efa", {"4: ACTIVE"}, "Unspecified");
  sys.rdma_device("rdmap32s27", "efa", {"4: ACTIVE"}, "Unspecified");
  const NetworkFacts facts = read_network_facts(sys.view);
  EXPECT_TRUE(facts.devices.hcas.empty());  // EFA is not counted as an IB HCA
  const CheckResult r = check_efa_devices(facts, Transport::kEfa);
  EXPECT_EQ(r.status, CheckStatus::kPass);
  EXPECT_EQ(r.detail, "2 EFA device(s): rdmap16s27, rdmap32s27");
}

TEST(IbDevicesCheck, ActiveDownAbsent) {
  FakeSystem sys;
  EXPECT_EQ(check_ib_devices(read_network_facts(sys.view), Transport::kIb).status,
            CheckStatus::kFail);
  sys.rdma_device("mlx5_0", "mlx5_core", {"1: DOWN"});
  EXPECT_EQ(check_ib_devices(read_network_facts(sys.view), std::nullopt).status,
            CheckStatus::kWarn);
  EXPECT_EQ(check_ib_devices(read_network_facts(sys.view), Transport::kIb).status,
            CheckStatus::kFail);
  sys.rdma_device("mlx5_1", "mlx5_core", {"4: ACTIVE"});
  const CheckResult partly = check_ib_devices(read_network_facts(sys.view), Transport::kIb);
  EXPECT_EQ(partly.status, CheckStatus::kWarn);  // one port down
  EXPECT_EQ(partly.detail, "mlx5_0 port 1 DOWN (InfiniBand), mlx5_1 port 1 ACTIVE (InfiniBand)");
  std::filesystem::remove_all(sys.view.at("/sys/class/infiniband/mlx5_0"));
  EXPECT_EQ(check_ib_devices(read_network_facts(sys.view), Transport::kIb).status,
            CheckStatus::kPass);
}

// ---- transport ----

TEST(TransportCheck, PredictsAndComparesWithExpected) {
  FakeSystem sys;
  sys.mkdir("/sys/class/net/eth0");
  sys.mkdir("/sys/class/net/lo");
  EXPECT_EQ(predict_transport(sys.view, read_network_facts(sys.view)), Transport::kSocket);
  EXPECT_EQ(check_transport(sys.view, read_network_facts(sys.view), Transport::kSocket).status,
            CheckStatus::kPass);
  // Expecting EFA on a node without it: the seed's silent fall-back, caught.
  const CheckResult fallback =
      check_transport(sys.view, read_network_facts(sys.view), Transport::kEfa);
  EXPECT_EQ(fallback.status, CheckStatus::kFail);
  EXPECT_NE(fallback.detail.find("NCCL will use socket between nodes, but --expect-transport efa"),
            std::string::npos)
      << fallback.detail;

  sys.rdma_device("rdmap16s27", "efa", {"4: ACTIVE"}, "Unspecified");
  const CheckResult no_plugin =
      check_transport(sys.view, read_network_facts(sys.view), std::nullopt);
  EXPECT_EQ(no_plugin.status, CheckStatus::kWarn);  // EFA present, NCCL on sockets
  sys.write("/usr/lib/x86_64-linux-gnu/libnccl-net.so");
  NetworkFacts facts = read_network_facts(sys.view);
  EXPECT_EQ(predict_transport(sys.view, facts), Transport::kEfa);
  EXPECT_EQ(check_transport(sys.view, facts, Transport::kEfa).status, CheckStatus::kPass);

  sys.view.env["NCCL_NET"] = "Socket";
  EXPECT_EQ(check_transport(sys.view, facts, Transport::kEfa).status, CheckStatus::kFail);
  sys.view.env.erase("NCCL_NET");
  sys.view.env["FI_PROVIDER"] = "tcp";
  const CheckResult provider = check_transport(sys.view, facts, Transport::kEfa);
  EXPECT_EQ(provider.status, CheckStatus::kFail);
  EXPECT_NE(provider.detail.find("FI_PROVIDER=tcp hides the efa provider"), std::string::npos);
  sys.view.env.erase("FI_PROVIDER");
  sys.view.env["FI_EFA_USE_DEVICE_RDMA"] = "0";
  EXPECT_EQ(check_transport(sys.view, facts, Transport::kEfa).status, CheckStatus::kWarn);
}

TEST(TransportCheck, VariablesNamingMissingThingsFail) {
  FakeSystem sys;
  sys.mkdir("/sys/class/net/eth0");
  sys.mkdir("/sys/class/net/ens5");
  sys.rdma_device("mlx5_0", "mlx5_core", {"4: ACTIVE"});
  sys.view.env["NCCL_SOCKET_IFNAME"] = "eth,^lo";
  NetworkFacts facts = read_network_facts(sys.view);
  EXPECT_EQ(predict_transport(sys.view, facts), Transport::kIb);
  EXPECT_EQ(check_transport(sys.view, facts, Transport::kIb).status, CheckStatus::kPass);
  sys.view.env["NCCL_SOCKET_IFNAME"] = "=eth";  // exact: no interface is called "eth"
  const CheckResult ifname = check_transport(sys.view, facts, std::nullopt);
  EXPECT_EQ(ifname.status, CheckStatus::kFail);
  EXPECT_NE(ifname.detail.find("NCCL_SOCKET_IFNAME entry 'eth' matches no interface (have: ens5, "
                               "eth0)"),
            std::string::npos)
      << ifname.detail;
  sys.view.env.erase("NCCL_SOCKET_IFNAME");
  sys.view.env["NCCL_IB_HCA"] = "mlx5_0:1,mlx5_7";
  EXPECT_EQ(check_transport(sys.view, facts, std::nullopt).status, CheckStatus::kFail);
  sys.view.env["NCCL_IB_HCA"] = "mlx5";
  EXPECT_EQ(check_transport(sys.view, facts, std::nullopt).status, CheckStatus::kPass);
  sys.view.env["NCCL_IB_DISABLE"] = "1";
  EXPECT_EQ(predict_transport(sys.view, facts), Transport::kSocket);
}

// ---- shm, memlock, disk ----

TEST(ShmCheck, SixtyFourMegabytesFailsEightGigabytesPasses) {
  FakeSystem sys;
  EXPECT_EQ(check_shm(sys.view, 1).status, CheckStatus::kFail);  // no /dev/shm at all
  sys.mkdir("/dev/shm");
  sys.set_space("/dev/shm", 64 * kMiB, 64 * kMiB);
  const CheckResult small = check_shm(sys.view, 1);
  EXPECT_EQ(small.status, CheckStatus::kFail);
  EXPECT_EQ(small.detail, "/dev/shm 64.0 MiB (64.0 MiB free); 1.0 GiB for 1 local GPU(s) needed");
  EXPECT_NE(small.hint.find("medium: Memory"), std::string::npos);
  sys.set_space("/dev/shm", 8 * kGiB, 8 * kGiB);
  EXPECT_EQ(check_shm(sys.view, 8).status, CheckStatus::kPass);
  EXPECT_EQ(check_shm(sys.view, 0).status, CheckStatus::kPass);  // no GPU: one rank's worth
  sys.set_space("/dev/shm", 6 * kGiB, 6 * kGiB);
  EXPECT_EQ(check_shm(sys.view, 8).status, CheckStatus::kWarn);
  sys.set_space("/dev/shm", 8 * kGiB, 1 * kGiB);
  EXPECT_EQ(check_shm(sys.view, 8).status, CheckStatus::kWarn);  // full of stale files
}

TEST(MemlockCheck, LimitedFailsWithRdma) {
  FakeSystem sys;
  RdmaDevices none;
  EXPECT_EQ(check_memlock(sys.view, none, std::nullopt).status, CheckStatus::kPass);  // unlimited
  sys.view.memlock_bytes = 8 * kMiB;
  const CheckResult sockets = check_memlock(sys.view, none, std::nullopt);
  EXPECT_EQ(sockets.status, CheckStatus::kWarn);
  EXPECT_EQ(sockets.detail,
            "ulimit -l 8.0 MiB; fine for sockets, but EFA/InfiniBand need it unlimited");
  EXPECT_EQ(check_memlock(sys.view, none, Transport::kEfa).status, CheckStatus::kFail);
  sys.rdma_device("rdmap16s27", "efa", {"4: ACTIVE"});
  EXPECT_EQ(check_memlock(sys.view, find_rdma_devices(sys.view), std::nullopt).status,
            CheckStatus::kFail);
}

TEST(HostnameCheck, RoutablePassesLoopbackAndUnresolvedWarn) {
  const CheckResult ok = check_hostname("node-7", {true, "", "10.0.3.7"});
  EXPECT_EQ(ok.status, CheckStatus::kPass);
  EXPECT_NE(ok.detail.find("'node-7' resolves to 10.0.3.7"), std::string::npos) << ok.detail;
  const CheckResult loopback = check_hostname("node-7", {true, "", ""});
  EXPECT_EQ(loopback.status, CheckStatus::kWarn);
  EXPECT_NE(loopback.detail.find("only to loopback"), std::string::npos) << loopback.detail;
  EXPECT_NE(loopback.hint.find("/etc/hosts"), std::string::npos) << loopback.hint;
  const CheckResult none = check_hostname("node-7", {false, "Name or service not known", ""});
  EXPECT_EQ(none.status, CheckStatus::kWarn);
  EXPECT_NE(none.detail.find("does not resolve here (Name or service not known)"),
            std::string::npos)
      << none.detail;
  // In the node checks through the view's resolver; a view without one leaves the check out.
  FakeSystem sys;
  const auto names = [&] {
    std::map<std::string, CheckStatus> by_name;
    for (const CheckResult& c : run_node_checks(sys.view, hopper_build(), 22803, {})) {
      by_name[c.name] = c.status;
    }
    return by_name;
  };
  EXPECT_EQ(names().count("hostname"), 0u);
  sys.view.host_name = "node-7";
  sys.view.resolve_host = [](const std::string& name) {
    return HostResolution{true, "", name == "node-7" ? "10.0.3.7" : ""};
  };
  EXPECT_EQ(names().at("hostname"), CheckStatus::kPass);
}

TEST(DiskCheck, FreeSpaceAgainstCheckpoints) {
  FakeSystem sys;
  sys.mkdir("/ckpt");
  sys.set_space("/ckpt", 100 * kGiB, 40 * kGiB);
  const CheckpointNeed need{30 * kGiB, "test"};
  // A dir not made yet is judged by its nearest existing ancestor.
  const CheckResult ok = check_disk(sys.view, "/ckpt/run1", need);
  EXPECT_EQ(ok.status, CheckStatus::kPass) << ok.detail;
  EXPECT_NE(ok.detail.find("40.0 GiB free of 100.0 GiB"), std::string::npos) << ok.detail;
  EXPECT_EQ(check_disk(sys.view, "/ckpt", CheckpointNeed{35 * kGiB, "t"}).status,
            CheckStatus::kWarn);
  const CheckResult full = check_disk(sys.view, "/ckpt", CheckpointNeed{50 * kGiB, "t"});
  EXPECT_EQ(full.status, CheckStatus::kFail);
  EXPECT_NE(full.hint.find("keep_checkpoints"), std::string::npos);
  EXPECT_EQ(check_disk(sys.view, "/ckpt", std::nullopt).status, CheckStatus::kPass);
}

TEST(CheckpointNeed, TwelveBytesPerParameterPerKeptCheckpoint) {
  shardtrain::testing::TempDir dir("shardtrain_doctor_job_");
  const std::string model = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/llama_gqa";
  const std::string config = dir.path() + "/job.toml";
  std::ofstream(config) << "[model]\npath = \"" << model
                        << "\"\n[data]\npath = \"x.jsonl\"\n[train]\ncheckpoint_dir = \"/ck\"\n"
                           "keep_checkpoints = 2\n";
  const int64_t params =
      make_param_layout(read_hf_config(model + "/config.json")).parameter_count();
  const JobCheckpoints job = job_checkpoints_from_config(config);
  EXPECT_EQ(job.checkpoint_dir, "/ck");
  EXPECT_EQ(job.need.bytes, static_cast<uint64_t>(params * 12 * 3));
}

// ---- all of them ----

TEST(NodeChecks, NothingInstalledExplainsEveryMissingPiece) {
  FakeSystem sys;
  sys.gpus.report.driver_error = "libcuda.so.1: not found";
  NodeCheckOptions options;
  options.expect = Transport::kEfa;
  const std::vector<CheckResult> checks = run_node_checks(sys.view, hopper_build(), 22803, options);
  std::map<std::string, CheckStatus> by_name;
  for (const CheckResult& c : checks) by_name[c.name] = c.status;
  for (const char* name : {"gpus", "cuda_driver", "nccl", "nccl_net_plugin", "libfabric",
                           "efa_devices", "transport", "shm"}) {
    EXPECT_EQ(by_name[name], CheckStatus::kFail) << name;
  }
  EXPECT_EQ(by_name["clock"], CheckStatus::kWarn);
  EXPECT_FALSE(all_ok(checks));
  for (const CheckResult& c : checks) {
    if (c.status != CheckStatus::kPass) EXPECT_FALSE(c.hint.empty()) << c.name;
  }
}

}  // namespace
}  // namespace shardtrain::doctor
