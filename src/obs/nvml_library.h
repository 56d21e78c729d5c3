// NvmlLibrary: the few NVML calls the GPU metrics need, from libnvidia-ml opened with dlopen at
// run time, so the binary runs (without GPU metrics) where the driver is absent.
//
// open() returns null and says why in `why_not` when the library cannot be loaded, lacks a
// symbol, or nvmlInit fails (no driver, no GPU). Every reading is per device index
// (0..device_count()-1, NVML's order, which ignores CUDA_VISIBLE_DEVICES, as DCGM does); a
// reading the device does not support is nullopt. The XID event set is created once per
// library; wait_xid() waits up to `timeout_ms` for the next critical XID event.
// Thread-compatible: one thread samples (obs/gpu_sampler.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace shardtrain {

// One device's readings, in NVML's units.
struct GpuReading {
  std::optional<unsigned> gpu_util_percent, memory_util_percent;
  std::optional<uint64_t> fb_used_bytes, fb_free_bytes;
  std::optional<unsigned> sm_clock_mhz, memory_clock_mhz, temperature_c;
  std::optional<unsigned> power_mw;
  std::optional<uint64_t> energy_mj;  // since the driver loaded
  std::optional<unsigned> pcie_replays;
};

struct XidEvent {
  int device = -1;  // index, -1 when NVML named a device not among ours
  uint64_t xid = 0;
};

class NvmlLibrary {
 public:
  // `path`: a library name for dlopen (default "libnvidia-ml.so.1") or a file path.
  static std::unique_ptr<NvmlLibrary> open(const std::string& path, std::string& why_not);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  int device_count() const { return device_count_; }
  std::string device_name(int device) const;  // "NVIDIA H200"
  std::string device_uuid(int device) const;  // "GPU-..."
  GpuReading read(int device) const;
  // The next XID event within timeout_ms, or nullopt (timeout, or XID events unsupported:
  // then it just sleeps for the timeout).
  std::optional<XidEvent> wait_xid(unsigned timeout_ms);

 private:
  struct Api;
  NvmlLibrary(void* handle, std::unique_ptr<Api> api);
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  int device_count_ = 0;
  void* event_set_ = nullptr;  // nvmlEventSet_t, or null when events are unsupported
};

}  // namespace shardtrain
