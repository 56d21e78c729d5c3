// SwiGLU: out = silu(gate) * up, and its backward. Each thread reads all of its element's
// inputs before writing, so outputs may alias inputs (the model reuses buffers in place).
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_swiglu_math.cuh"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::grid_for;
using cuda_detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void swiglu_forward_kernel(const T* gate, const T* up, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(cuda_detail::swiglu_value(to_float(gate[i]), to_float(up[i])));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* dout, const T* gate, const T* up, T* dgate, T* dup,
                                       int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float dg, du;
    cuda_detail::swiglu_gradients(to_float(dout[i]), to_float(gate[i]), to_float(up[i]), dg, du);
    dgate[i] = from_float<T>(dg);
    dup[i] = from_float<T>(du);
  }
}

// bf16 with n a multiple of 8 and 16-byte aligned pointers: the same math, 16-byte accesses.
using cuda_detail::bf16;
using cuda_detail::kBf16PerVector;

__global__ void swiglu_forward_vec_kernel(const bf16* gate, const bf16* up, bf16* out,
                                          int64_t vectors) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    float g[kBf16PerVector], u[kBf16PerVector], y[kBf16PerVector];
    cuda_detail::load8(gate + i * kBf16PerVector, g);
    cuda_detail::load8(up + i * kBf16PerVector, u);
    for (int j = 0; j < kBf16PerVector; ++j) y[j] = cuda_detail::swiglu_value(g[j], u[j]);
    cuda_detail::store8(out + i * kBf16PerVector, y);
  }
}

__global__ void swiglu_backward_vec_kernel(const bf16* dout, const bf16* gate, const bf16* up,
                                           bf16* dgate, bf16* dup, int64_t vectors) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    float g[kBf16PerVector], u[kBf16PerVector], dy[kBf16PerVector];
    float dg[kBf16PerVector], du[kBf16PerVector];
    cuda_detail::load8(gate + i * kBf16PerVector, g);
    cuda_detail::load8(up + i * kBf16PerVector, u);
    cuda_detail::load8(dout + i * kBf16PerVector, dy);
    for (int j = 0; j < kBf16PerVector; ++j) {
      cuda_detail::swiglu_gradients(dy[j], g[j], u[j], dg[j], du[j]);
    }
    cuda_detail::store8(dgate + i * kBf16PerVector, dg);
    cuda_detail::store8(dup + i * kBf16PerVector, du);
  }
}

}  // namespace

void swiglu_forward(DType dtype, const void* gate, const void* up, void* out, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  if (cuda_detail::bf16_vectorizable(dtype, n, {gate, up, out})) {
    const int64_t vectors = n / kBf16PerVector;
    swiglu_forward_vec_kernel<<<grid_for(vectors, kThreads), kThreads, 0, stream>>>(
        static_cast<const bf16*>(gate), static_cast<const bf16*>(up), static_cast<bf16*>(out),
        vectors);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    swiglu_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(DType dtype, const void* dout, const void* gate, const void* up, void* dgate,
                     void* dup, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (cuda_detail::bf16_vectorizable(dtype, n, {dout, gate, up, dgate, dup})) {
    const int64_t vectors = n / kBf16PerVector;
    swiglu_backward_vec_kernel<<<grid_for(vectors, kThreads), kThreads, 0, stream>>>(
        static_cast<const bf16*>(dout), static_cast<const bf16*>(gate),
        static_cast<const bf16*>(up), static_cast<bf16*>(dgate), static_cast<bf16*>(dup), vectors);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    swiglu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(dout), static_cast<const T*>(gate), static_cast<const T*>(up),
        static_cast<T*>(dgate), static_cast<T*>(dup), n);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
