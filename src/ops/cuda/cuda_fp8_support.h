// Where FP8 matmuls run, and the gradient format: plain C++ (no device code), so the refusal
// rules are unit-tested without a GPU.
//
// FP8 tensor cores exist from compute capability 8.9 (Ada: L4, L40S; Hopper: H100, H200); cuBLASLt
// has no FP8 GEMM below that. On older GPUs train.precision = "fp8" is refused before any work.
#pragma once

#include <string>

#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_fp8.h"

namespace shardtrain::cuda_kernels {

// Gradients (dout of every FP8 linear) are cast to e5m2: its range (57344 down to 2^-16, 32
// binades against e4m3's 18) keeps a gradient's small entries from flushing to zero next to
// its outliers, at one mantissa bit less; weights and activations, whose range is narrow and
// whose precision matters more, are e4m3. This is the split Transformer Engine's HYBRID recipe
// and torchao's tensorwise recipe use; the FP8 GPU test measures both formats' GEMM error on
// gradient-like (heavy-tailed) inputs.
constexpr Fp8Format kDefaultFp8GradFormat = Fp8Format::kE5M2;

constexpr int kFp8MinComputeCapability = 89;

// "" when the GPU runs FP8 GEMMs, else one sentence naming it and its compute capability.
std::string fp8_unsupported_reason(const DeviceLimits& limits);

// Whether the MLP's SwiGLU kernels write FP8 directly: backward casts SwiGLU's gradients inside
// the SwiGLU kernel (CudaOps::swiglu_linears_backward_fp8), forward casts act for the down
// projection inside it (CudaOps::swiglu_linear_forward_fp8). On unless
// SHARDTRAIN_FP8_FUSED_SWIGLU=0 (ops/ops_switches.h: a switch for measuring the fusions and for
// ruling them out).
bool fp8_fused_swiglu_enabled();  // the environment's value, read once

// Whether the gradient GEMMs (dgrad dout W, wgrad dout^T x) use cuBLASLt's fast accumulation,
// as the forward GEMM always does: on unless SHARDTRAIN_FP8_GRAD_FAST_ACCUM=0. Fast accumulation
// skips the periodic promotion of the tensor cores' partial sums to full fp32 (FP8_NOTES.md has
// the measured speed and the numerics test's loss both ways).
bool fp8_grad_fast_accum_enabled();  // the environment's value, read once

}  // namespace shardtrain::cuda_kernels
