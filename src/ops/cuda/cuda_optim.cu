// Optimizer kernels over fp32 shards: AdamW (torch.optim.AdamW's single-tensor formula, the
// same element math as CpuOps::adamw) and the sum of squares for the global gradient norm.
#include <algorithm>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grad[i] * c.grad_scale;
    const float p = param[i] * c.decay;
    const float m_old = m[i];
    const float m_new = m_old + c.m_weight * (g - m_old);
    const float v_new = c.v_decay * v[i] + c.v_weight * g * g;
    // IEEE sqrt and division (no fast-math): matches the CPU reference to rounding.
    const float denom = __fsqrt_rn(v_new) / c.bias_correction2_sqrt + c.eps;
    m[i] = m_new;
    v[i] = v_new;
    param[i] = p - c.step_size * (m_new / denom);
  }
}

__global__ void sum_squares_kernel(const float* x, int64_t n, float* out) {
  __shared__ float shared[32];
  float partial = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    partial += x[i] * x[i];
  }
  const float total = cuda_detail::block_sum(partial, shared);
  if (threadIdx.x == 0) atomicAdd(out, total);
}

}  // namespace

void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWCoefficients& coefficients, cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<cuda_detail::grid_for(n, kThreads), kThreads, 0, stream>>>(param, grad, m, v, n,
                                                                            coefficients);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void sum_squares(const float* x, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  // Few blocks: each adds one atomic; 4 per SM keeps the loads in flight.
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 4);
  sum_squares_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, out);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
