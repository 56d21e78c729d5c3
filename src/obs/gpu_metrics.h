// GPU metrics under the NVIDIA DCGM exporter's names, units and labels, so dashboards and
// alerts written for dcgm-exporter work unchanged:
//   DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_MEM_COPY_UTIL (%), DCGM_FI_DEV_FB_USED and
//   DCGM_FI_DEV_FB_FREE (MiB), DCGM_FI_DEV_SM_CLOCK and DCGM_FI_DEV_MEM_CLOCK (MHz),
//   DCGM_FI_DEV_GPU_TEMP (C), DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION
//   (mJ, counter), DCGM_FI_DEV_XID_ERRORS (value of the last XID error, 0 = none),
//   DCGM_FI_DEV_PCIE_REPLAY_COUNTER (counter);
//   labels gpu (NVML index), UUID, device ("nvidia<N>"), modelName, Hostname.
//
// GpuSampler reads every GPU of the node through NVML (obs/nvml_library.h) on its own thread
// every `interval` and waits for XID events in between; latest() returns the last readings.
// It owns the library; destruction stops the thread within about 200 ms.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "obs/nvml_library.h"
#include "obs/prometheus_text.h"

namespace shardtrain {

struct GpuSample {
  int index = 0;
  std::string uuid, model_name;
  GpuReading reading;
  uint64_t last_xid = 0;
};

class GpuSampler {
 public:
  // REQUIRES: library non-null. Takes the first sample before returning.
  GpuSampler(std::unique_ptr<NvmlLibrary> library, std::chrono::milliseconds interval);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  std::vector<GpuSample> latest() const;
  int device_count() const { return library_->device_count(); }

 private:
  void sample_all();
  void run();

  std::unique_ptr<NvmlLibrary> library_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::vector<GpuSample> samples_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Adds the DCGM-named families for `gpus` (readings a device lacks are left out).
void add_dcgm_families(Exposition& out, const std::string& hostname,
                       const std::vector<GpuSample>& gpus);

}  // namespace shardtrain
