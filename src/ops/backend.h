// Choosing a compute backend: cpu, cuda, or auto (CUDA when this binary was built with it and a
// GPU is visible, else CPU): train.device and the --device flags.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "ops/device_choice.h"
#include "ops/kernel_overrides.h"
#include "ops/ops.h"

namespace shardtrain {

// The GPU and CUDA stream a CUDA backend enqueues its ops on (cudaStream_t as void*, so that
// code without CUDA headers can pass it along). device < 0: not a CUDA backend.
struct CudaComputeStream {
  int device = -1;
  void* stream = nullptr;
};

// Throws Error for cuda without a CUDA build or without a GPU.
// A CUDA backend drives GPU `cuda_device` (made current with cudaSetDevice first; one rank per
// GPU under the launcher, dist/dist_env.h make_rank_ops). REQUIRES: cuda_device <
// visible_gpu_count() when the choice resolves to CUDA.
// With SHARDTRAIN_PROFILE_OPS=1 in the environment the backend is wrapped in ProfiledOps
// (ops/profiled_ops.h): a per-op-class time table in the log at exit; slow, for profiling.
// `stream_out`, when given, receives the CUDA backend's device and compute stream (for the
// code that wires a NCCL communicator to it, dist/nccl_comm.h), or stays empty on the CPU.
// aside_by_default: the CUDA backend runs aside work aside unless SHARDTRAIN_OPS_ASIDE says
// otherwise (ops/ops_switches.h; make_rank_ops passes true for a job of one rank).
std::unique_ptr<Ops> make_ops(DeviceChoice device_choice, int cuda_device = 0,
                              struct CudaComputeStream* stream_out = nullptr,
                              bool aside_by_default = false);
// True when this binary includes the CUDA backend and at least one GPU is visible.
bool cuda_available();
// Visible GPUs; 0 without a CUDA build.
int visible_gpu_count();
// The current GPU's name and free / total memory (cudaMemGetInfo); nullopt without a CUDA build
// or a GPU.
struct GpuMemoryInfo {
  std::string name;
  size_t free_bytes = 0, total_bytes = 0;
};
std::optional<GpuMemoryInfo> current_gpu_memory();
// Test support (ops/testing/test_device_limits.h): makes the CUDA kernel dispatcher
// (ops/cuda/cuda_dispatch.h) see the limits of GPU kind `preset` ("a100", "a10g", "l4", "h100")
// instead of the present GPU's, so that GPU's kernel configurations run here; "" restores the
// present GPU. Throws Error for an unknown kind. No effect without a CUDA build or a GPU.
void set_test_cuda_device_limits(const std::string& preset);
// Test support: the attention kernels the CUDA dispatcher must pick (ops/kernel_overrides.h;
// {} = its own choice). Throws Error for a warp count other than 0, 4 or 8 or a negative head
// slice. No effect without a CUDA build.
void set_test_kernel_overrides(const KernelOverrides& overrides);

}  // namespace shardtrain
