#include "ops/backend.h"

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"

#if defined(SHARDTRAIN_WITH_CUDA)
#include "ops/cuda/cuda_ops.h"
#endif

namespace shardtrain {

bool cuda_available() {
#if defined(SHARDTRAIN_WITH_CUDA)
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Ops> make_ops(const std::string& device_choice) {
  if (device_choice == "cpu") return make_cpu_ops();
  if (device_choice == "cuda" || device_choice == "auto") {
#if defined(SHARDTRAIN_WITH_CUDA)
    if (cuda_available()) return make_cuda_ops();
#endif
    if (device_choice == "auto") return make_cpu_ops();
#if defined(SHARDTRAIN_WITH_CUDA)
    fail("device 'cuda' requested but no GPU is visible; HINT: check nvidia-smi and "
         "CUDA_VISIBLE_DEVICES, or use --train.device=cpu");
#else
    fail("device 'cuda' requested but this shardtrain was built without CUDA; HINT: rebuild "
         "where nvcc is installed (-DSHARDTRAIN_CUDA=ON) or use --train.device=cpu");
#endif
  }
  fail("unknown device '{}'; HINT: use cpu, cuda or auto", device_choice);
}

}  // namespace shardtrain
