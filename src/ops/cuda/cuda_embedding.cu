// Token embedding: forward gathers rows of the table; backward scatters dout rows back with
// atomic adds (fp32 adds into an fp32 grad table; bf16 atomics when the table is bf16). The
// order of the adds varies between runs, so the backward is not bitwise deterministic when a
// token repeats; the fp32 sum differs only by rounding.
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::bf16;
using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;

__device__ __forceinline__ void atomic_accumulate(float* address, float value) {
  atomicAdd(address, value);
}
__device__ __forceinline__ void atomic_accumulate(bf16* address, float value) {
  atomicAdd(address, __float2bfloat16_rn(value));
}

// One block per token (grid-stride over tokens), threads over channels.
template <typename Table, typename Out>
__global__ void embedding_forward_kernel(const int32_t* ids_N, int64_t tokens,
                                         const Table* table_VC, int64_t channels, Out* out_NC) {
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    const Table* row = table_VC + int64_t{ids_N[n]} * channels;
    Out* out_row = out_NC + n * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      out_row[c] = from_float<Out>(to_float(row[c]));
    }
  }
}

template <typename Dout, typename Table>
__global__ void embedding_backward_kernel(const int32_t* ids_N, int64_t tokens, const Dout* dout_NC,
                                          int64_t channels, Table* dtable_VC) {
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    Table* row = dtable_VC + int64_t{ids_N[n]} * channels;
    const Dout* dout_row = dout_NC + n * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      atomic_accumulate(row + c, to_float(dout_row[c]));
    }
  }
}

unsigned token_blocks(int64_t tokens) {
  return static_cast<unsigned>(tokens < 65535 ? tokens : 65535);
}

}  // namespace

void embedding_forward(const int32_t* ids_N, int64_t tokens, DType table_dtype,
                       const void* table_VC, int64_t channels, DType out_dtype, void* out_NC,
                       cudaStream_t stream) {
  if (tokens == 0 || channels == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(table_dtype, Table, {
    SHARDTRAIN_DISPATCH_FLOAT(out_dtype, Out, {
      embedding_forward_kernel<Table, Out><<<token_blocks(tokens), kThreads, 0, stream>>>(
          ids_N, tokens, static_cast<const Table*>(table_VC), channels, static_cast<Out*>(out_NC));
    });
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const int32_t* ids_N, int64_t tokens, DType dout_dtype, const void* dout_NC,
                        int64_t channels, DType dtable_dtype, void* dtable_VC,
                        cudaStream_t stream) {
  if (tokens == 0 || channels == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(dout_dtype, Dout, {
    SHARDTRAIN_DISPATCH_FLOAT(dtable_dtype, Table, {
      embedding_backward_kernel<Dout, Table><<<token_blocks(tokens), kThreads, 0, stream>>>(
          ids_N, tokens, static_cast<const Dout*>(dout_NC), channels,
          static_cast<Table*>(dtable_VC));
    });
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
