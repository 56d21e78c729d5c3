// The real GpuInfoSource: the CUDA driver API (libcuda.so.1) for the GPUs CUDA sees (count,
// name, compute capability, memory) and the driver's CUDA version, and NVML
// (libnvidia-ml.so.1) for the driver version and health (ECC mode and errors, retired pages,
// row remapping), matched to CUDA's devices by PCI bus id. Both are opened through the
// LibraryLoader, so the binary runs, and says so, where they are absent.
//
// All of doctor's NVML use is in this one file (obs/ has its own sampler for metrics).
#pragma once

#include <memory>

#include "launch/doctor/gpu_info.h"
#include "launch/doctor/system_view.h"

namespace shardtrain::doctor {

// REQUIRES: `libraries` outlives the source.
std::unique_ptr<GpuInfoSource> make_driver_gpu_info(LibraryLoader& libraries);

}  // namespace shardtrain::doctor
