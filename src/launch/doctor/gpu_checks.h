// Doctor checks of the GPUs and the driver, over a GpuReport (gpu_info.h) and the facts of this
// build (ops/cuda_build_info.h), so tests give made-up GPUs and builds.
//   gpus:        count, names, memory; FAIL with none, or with one this build cannot run
//                (compute capability below 8.0, or no code for it); WARN when only PTX fits
//   gpu_health:  NVML's ECC mode, uncorrected volatile ECC errors, retired pages and row
//                remapping; FAIL for a pending retirement / remap or a failed remap (reset or
//                replace the GPU), WARN when NVML is absent or ECC is off
//   cuda_driver: the driver's CUDA version against the runtime the binary was built with; FAIL
//                for an older major version or no driver, WARN for an older minor (CUDA minor
//                version compatibility: runs, but PTX JIT and newest APIs may not)
#pragma once

#include "launch/doctor/check_result.h"
#include "launch/doctor/gpu_info.h"
#include "ops/cuda_build_info.h"

namespace shardtrain::doctor {

CheckResult check_gpus(const GpuReport& report, const CudaBuildInfo& build);
CheckResult check_gpu_health(const GpuReport& report);
CheckResult check_cuda_driver(const GpuReport& report, const CudaBuildInfo& build);

// "13.0" from 13000.
std::string cuda_version_text(int version);

}  // namespace shardtrain::doctor
