// What `shardtrain doctor` knows about this node's GPUs and driver, behind one interface so the
// checks run on made-up answers in tests. The real source (nvml_gpu_info.h) asks the CUDA driver
// (libcuda.so.1) and NVML (libnvidia-ml.so.1), both opened with dlopen.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain::doctor {

struct GpuInfo {
  int index = 0;
  std::string name;          // "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability
  uint64_t memory_bytes = 0;
  // From NVML; nullopt when NVML is absent or does not say (e.g. GPUs without ECC).
  std::optional<bool> ecc_enabled;
  std::optional<uint64_t> ecc_uncorrected_volatile;  // uncorrected errors since the driver loaded
  std::optional<uint64_t> retired_pages;             // pages retired for double-bit errors
  std::optional<bool> retirement_pending;            // a retirement waiting for a GPU reset
  std::optional<bool> row_remap_failed;              // A100+: a row remap failed (RMA the GPU)
  std::optional<bool> row_remap_pending;             // A100+: remap waiting for a reset
};

struct GpuReport {
  // Why the driver could not be asked ("libcuda.so.1 not found", "cuInit: error 100"); empty
  // when it answered (with zero GPUs or more).
  std::string driver_error;
  int driver_cuda_version = 0;  // cuDriverGetVersion: newest CUDA the driver runs (13000 = 13.0)
  std::string driver_version;   // NVML's driver version, e.g. "580.65.06"; "" without NVML
  std::string nvml_error;       // why NVML gave nothing; empty when it answered
  std::vector<GpuInfo> gpus;    // visible GPUs, in CUDA order
};

class GpuInfoSource {
 public:
  virtual ~GpuInfoSource() = default;
  virtual GpuReport read() = 0;
};

}  // namespace shardtrain::doctor
