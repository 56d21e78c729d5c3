// Document ends for the attention backward (cuda_kernels.h: attention_document_ends): the
// key-major backward loops need, per key, the last query of its document; the mask gives the
// starts. One thread per token binary-searches the (never decreasing) starts for the first
// position whose document starts after the token: log2(seq) reads, once per backward call, so
// every backward block reads its bounds with one load per key row instead of searching itself.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

__global__ void document_ends_kernel(const int32_t* start_BT, int batch, int seq,
                                     int32_t* end_BT) {
  const int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (index >= int64_t{batch} * seq) return;
  const int t = static_cast<int>(index % seq);
  const int32_t* starts = start_BT + (index - t);
  int low = t + 1, high = seq;  // the answer lies in (t, seq]
  while (low < high) {
    const int middle = low + (high - low) / 2;
    if (starts[middle] <= t) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  end_BT[index] = low;
}

}  // namespace

void attention_document_ends(const int32_t* start_BT, int batch, int seq, int32_t* end_BT,
                             cudaStream_t stream) {
  const int64_t count = int64_t{batch} * seq;
  if (count == 0) return;
  constexpr int kThreads = 256;
  document_ends_kernel<<<cuda_detail::grid_for(count, kThreads), kThreads, 0, stream>>>(
      start_BT, batch, seq, end_BT);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

size_t attention_mask_scratch_floats(const AttentionShape& shape) {
  static_assert(sizeof(float) == sizeof(int32_t), "document ends are stored in float scratch");
  if (shape.document_start_BT == nullptr) return 0;
  const size_t n = static_cast<size_t>(shape.batch) * shape.seq;
  return (n + 3) / 4 * 4;
}

}  // namespace shardtrain::cuda_kernels
