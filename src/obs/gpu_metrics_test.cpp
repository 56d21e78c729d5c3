// The DCGM-named families from NVML readings (no GPU needed): dcgm-exporter's units (MiB, W,
// mJ, MHz, %), its labels in its order, counters typed as counters, and readings a device
// lacks left out rather than shown as 0.
#include "obs/gpu_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace shardtrain {
namespace {

GpuSample h200() {
  GpuSample gpu;
  gpu.index = 1;
  gpu.uuid = "GPU-1234";
  gpu.model_name = "NVIDIA H200";
  gpu.last_xid = 79;
  gpu.reading.gpu_util_percent = 97;
  gpu.reading.memory_util_percent = 41;
  gpu.reading.fb_used_bytes = uint64_t{3} << 30;  // 3 GiB
  gpu.reading.fb_free_bytes = uint64_t{512} << 20;
  gpu.reading.sm_clock_mhz = 1980;
  gpu.reading.memory_clock_mhz = 3201;
  gpu.reading.temperature_c = 47;
  gpu.reading.power_mw = 612345;
  gpu.reading.energy_mj = 9876543210;
  gpu.reading.pcie_replays = 3;
  return gpu;
}

std::string rendered(const std::vector<GpuSample>& gpus) {
  Exposition out;
  add_dcgm_families(out, "node-a", gpus);
  return out.render();
}

bool has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(DcgmFamilies, UnitsAndLabelsAreDcgmExportersOwn) {
  const std::string text = rendered({h200()});
  const std::string labels =
      "{gpu=\"1\",UUID=\"GPU-1234\",device=\"nvidia1\",modelName=\"NVIDIA H200\","
      "Hostname=\"node-a\"}";
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_GPU_UTIL" + labels + " 97")) << text;
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_MEM_COPY_UTIL" + labels + " 41"));
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_FB_USED" + labels + " 3072")) << "MiB";
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_FB_FREE" + labels + " 512"));
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_SM_CLOCK" + labels + " 1980"));
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_MEM_CLOCK" + labels + " 3201"));
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_GPU_TEMP" + labels + " 47"));
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_POWER_USAGE" + labels + " 612.345")) << "W from NVML's mW";
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" + labels + " 9876543210"));
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_XID_ERRORS" + labels + " 79"));
  EXPECT_TRUE(has(text, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" + labels + " 3"));
  EXPECT_TRUE(has(text, "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"));
  EXPECT_TRUE(has(text, "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter"));
  EXPECT_TRUE(has(text, "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"));
}

TEST(DcgmFamilies, AReadingTheDeviceLacksIsLeftOut) {
  GpuSample partial = h200();
  partial.reading.power_mw.reset();
  partial.reading.pcie_replays.reset();
  const std::string text = rendered({partial});
  EXPECT_EQ(text.find("DCGM_FI_DEV_POWER_USAGE"), std::string::npos) << text;
  EXPECT_EQ(text.find("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_TEMP{"), std::string::npos);
  EXPECT_EQ(rendered({}), "") << "no GPUs: no families at all";
}

}  // namespace
}  // namespace shardtrain
