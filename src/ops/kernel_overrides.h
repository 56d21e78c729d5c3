// KernelOverrides: kernel choices a test forces on the CUDA dispatcher (ops/cuda/cuda_dispatch.h),
// so that every variant of the attention table runs, on small shapes, on the one GPU present.
// The product never sets them: gtest binaries call set_test_kernel_overrides (ops/backend.h)
// directly, and the test worker binary (cli/testing/test_worker_hooks.h) fills them from its
// SHARDTRAIN_TEST_ATTENTION_* variables. Default-constructed = the dispatch table's own choice.
//
// Plain C++17 with no dependencies: the CUDA launchers include it through cuda_dispatch.h.
#pragma once

namespace shardtrain {

struct KernelOverrides {
  enum class Attention {
    kDefault,  // the table's first row that applies
    kWgmma,    // cp.async wgmma kernels instead of the warp-specialised ones (Hopper)
    // The cp.async wgmma forward with the warp-specialised backward (Hopper): each direction's
    // fastest kernel where the forward's order differs, as one H100 timed at head dim 64.
    kWgmmaForward,
    kMma,  // mma.sync kernels instead of either wgmma kind
  };
  Attention attention = Attention::kDefault;
  // 4: 4-warp mma.sync blocks instead of 8; 0 (or 8): the table's choice.
  int attention_forward_warps = 0;
  int attention_backward_warps = 0;
  // Query heads per flash-backward block, used when it divides the GQA group; 0: the
  // scheduling model's choice (cuda_dispatch.h attention_backward_heads_per_block).
  int attention_backward_heads_per_block = 0;

  bool operator==(const KernelOverrides& other) const {
    return attention == other.attention &&
           attention_forward_warps == other.attention_forward_warps &&
           attention_backward_warps == other.attention_backward_warps &&
           attention_backward_heads_per_block == other.attention_backward_heads_per_block;
  }
};

}  // namespace shardtrain
