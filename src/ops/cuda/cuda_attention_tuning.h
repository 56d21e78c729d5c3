// The Hopper attention forward's kernel, chosen by timing. The dispatch table (cuda_dispatch.h)
// names the warp-specialised kernel; the cp.async wgmma kernel has beaten it on some Hopper
// parts and head dims (an H100 at head dim 64 before the kernels' masks left the unmasked tiles:
// 0.493 ms against 0.632; since then 0.401 against 0.331, and 0.257 against 0.189 at head dim
// 128), so no fixed row was right everywhere and the tuning keeps each part honest. The first forward of each shape (batch, sequence, heads,
// head dim, window, whether documents are packed) times both on the call's own operands
// (cuda_tuning.h: events, the same repeats for both, the default kept unless the other is 3%
// faster), logs the times and the choice once, and every later forward of the shape runs the
// choice. The backward keeps the table's kernel (the warp-specialised one was the faster on both
// parts). Packed documents are timed with the first batch's layout.
// Not thread-safe: one per CudaOps, whose attention runs on the step's thread. Internal to
// ops/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include "ops/cuda/cuda_dispatch.h"

namespace shardtrain::cuda_kernels {

class AttentionForwardTuning {
 public:
  // Runs the forward with this kernel, writing the call's output and lse.
  using Launch = std::function<void(AttentionKernel kernel)>;

  // The kernel to run at shape `s` where the table chose `table_choice`: the table's unless it
  // is the warp-specialised kernel, which the first call of the shape times against the
  // cp.async wgmma kernel with `launch` (their outputs overwritten by the caller's launch).
  AttentionKernel choose(AttentionKernel table_choice, const AttentionShape& s, cudaStream_t stream,
                         void* out, size_t out_bytes, const Launch& launch);
  // What choose() settled on for this shape; nullopt before its first call (tests).
  std::optional<AttentionKernel> chosen(const AttentionShape& s) const;

 private:
  using Key = std::tuple<int, int, int, int, int, int, bool>;
  static Key key_of(const AttentionShape& s);
  std::map<Key, AttentionKernel> chosen_;
};

}  // namespace shardtrain::cuda_kernels
