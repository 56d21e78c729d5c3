// Logit soft-capping (Gemma's final_logit_softcapping): out = cap * tanh(x / cap), and its
// backward dx = dout * (1 - tanh(x / cap)^2) from the op's input. Elementwise over a chunk of
// logits (rows x vocab); each thread reads its element's inputs before writing, so outputs may
// alias inputs.
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::grid_for;
using cuda_detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void softcap_forward_kernel(const T* x, float cap, T* out, int64_t n) {
  const float inverse_cap = 1.0f / cap;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(cap * tanhf(to_float(x[i]) * inverse_cap));
  }
}

template <typename T>
__global__ void softcap_backward_kernel(const T* dout, const T* x, float cap, T* dx, int64_t n) {
  const float inverse_cap = 1.0f / cap;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float t = tanhf(to_float(x[i]) * inverse_cap);
    dx[i] = from_float<T>(to_float(dout[i]) * (1.0f - t * t));
  }
}

}  // namespace

void softcap_forward(DType dtype, const void* x, float cap, void* out, int64_t n,
                     cudaStream_t stream) {
  if (n == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    softcap_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), cap, static_cast<T*>(out), n);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void softcap_backward(DType dtype, const void* dout, const void* x, float cap, void* dx, int64_t n,
                      cudaStream_t stream) {
  if (n == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    softcap_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(dout), static_cast<const T*>(x), cap, static_cast<T*>(dx), n);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
