// Optimizer kernels over fp32 shards: AdamW (torch.optim.AdamW's single-tensor formula, the
// same element math as CpuOps::adamw) and the sum of squares for the global gradient norm.
#include <algorithm>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// One element: IEEE sqrt and division (no fast-math) match the CPU reference to rounding.
__device__ __forceinline__ void adamw_element(float& param, float grad, float& m, float& v,
                                              const AdamWCoefficients& c) {
  const float g = grad * c.grad_scale;
  const float p = param * c.decay;
  const float m_new = m + c.m_weight * (g - m);
  const float v_new = c.v_decay * v + c.v_weight * g * g;
  const float denom = __fsqrt_rn(v_new) / c.bias_correction2_sqrt + c.eps;
  m = m_new;
  v = v_new;
  param = p - c.step_size * (m_new / denom);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    adamw_element(param[i], grad[i], m[i], v[i], c);
  }
}

// The same with float4 accesses (n a multiple of 4, 16-byte aligned arrays): memory-bound.
__global__ void adamw_vec_kernel(float4* param, const float4* grad, float4* m, float4* v,
                                 int64_t vectors, AdamWCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    float4 p = param[i], mm = m[i], vv = v[i];
    const float4 g = grad[i];
    adamw_element(p.x, g.x, mm.x, vv.x, c);
    adamw_element(p.y, g.y, mm.y, vv.y, c);
    adamw_element(p.z, g.z, mm.z, vv.z, c);
    adamw_element(p.w, g.w, mm.w, vv.w, c);
    param[i] = p;
    m[i] = mm;
    v[i] = vv;
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
  using cuda_detail::aligned16;
  if (n % 4 == 0 && aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v)) {
    const int64_t vectors = n / 4;
    adamw_vec_kernel<<<cuda_detail::grid_for(vectors, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<float4*>(param), reinterpret_cast<const float4*>(grad),
        reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), vectors, coefficients);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
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
