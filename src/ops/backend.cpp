#include "ops/backend.h"

#include <string>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_switches.h"
#include "ops/profiled_ops.h"

#if defined(SHARDTRAIN_WITH_CUDA)
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_ops.h"
#endif

namespace shardtrain {

int visible_gpu_count() {
#if defined(SHARDTRAIN_WITH_CUDA)
  return cuda_device_count();
#else
  return 0;
#endif
}

bool cuda_available() { return visible_gpu_count() > 0; }

std::optional<GpuMemoryInfo> current_gpu_memory() {
#if defined(SHARDTRAIN_WITH_CUDA)
  if (!cuda_available()) return std::nullopt;
  GpuMemoryInfo info;
  cuda_memory_info(&info.free_bytes, &info.total_bytes);
  info.name = cuda_kernels::device_limits().name;
  return info;
#else
  return std::nullopt;
#endif
}

void set_test_kernel_overrides(const KernelOverrides& overrides) {
  for (const int warps : {overrides.attention_forward_warps, overrides.attention_backward_warps}) {
    if (warps != 0 && warps != 4 && warps != 8)
      fail("attention warps override {} is not 4 or 8; HINT: use 4, 8, or leave it unset", warps);
  }
  if (overrides.attention_backward_heads_per_block < 0) {
    fail("attention heads-per-block override {} is negative; HINT: use a divisor of the GQA group",
         overrides.attention_backward_heads_per_block);
  }
#if defined(SHARDTRAIN_WITH_CUDA)
  cuda_kernels::set_kernel_overrides(overrides);
#endif
}

void set_test_cuda_device_limits(const std::string& preset) {
  if (!preset.empty() && preset != "a100" && preset != "a10g" && preset != "l4" &&
      preset != "h100") {
    fail("unknown GPU kind '{}' for the test device limits; HINT: use a100, a10g, l4 or h100",
         preset);
  }
#if defined(SHARDTRAIN_WITH_CUDA)
  if (!cuda_available()) return;
  cuda_kernels::set_device_limits_override(
      preset.empty() ? std::nullopt : cuda_kernels::device_limits_preset(preset));
#endif
}

namespace {

std::unique_ptr<Ops> make_backend(DeviceChoice device_choice, int cuda_device,
                                  CudaComputeStream& stream_out, bool aside_by_default) {
  if (device_choice == DeviceChoice::kCpu) return make_cpu_ops();
#if defined(SHARDTRAIN_WITH_CUDA)
  if (cuda_available()) {
    SHARDTRAIN_CHECK(cuda_device >= 0 && cuda_device < visible_gpu_count(), "GPU {} of {}",
                     cuda_device, visible_gpu_count());
    SHARDTRAIN_CUDA_CHECK(cudaSetDevice(cuda_device));
    auto cuda = std::make_unique<CudaOps>(aside_by_default);
    stream_out = {cuda->device_index(), static_cast<void*>(cuda->stream())};
    return cuda;
  }
#endif
  if (device_choice == DeviceChoice::kAuto) return make_cpu_ops();
#if defined(SHARDTRAIN_WITH_CUDA)
  fail(
      "device 'cuda' requested but no GPU is visible; HINT: check nvidia-smi and "
      "CUDA_VISIBLE_DEVICES, or use --train.device=cpu");
#else
  fail(
      "device 'cuda' requested but this shardtrain was built without CUDA; HINT: rebuild "
      "where nvcc is installed (-DSHARDTRAIN_CUDA=ON) or use --train.device=cpu");
#endif
}

}  // namespace

std::unique_ptr<Ops> make_ops(DeviceChoice device_choice, int cuda_device,
                              CudaComputeStream* stream_out, bool aside_by_default) {
  check_ops_switches();  // a misspelt switch stops here, before any device work
  CudaComputeStream stream;
  std::unique_ptr<Ops> ops = make_backend(device_choice, cuda_device, stream, aside_by_default);
  if (stream_out != nullptr) *stream_out = stream;
  if (profile_ops_switch()) return std::make_unique<ProfiledOps>(std::move(ops));
  return ops;
}

}  // namespace shardtrain
