// Rotary embedding (HF rotate-half), one thread per (token, head, pair), or per two adjacent
// pairs for bf16 (4-byte accesses), from the rows of one buffer to another. Packed
// q/k/v in bf16 take one fused pass instead (rope_qkv_packed: 8 pairs a thread, 16-byte
// accesses, v copied in the same launch).
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void rope_kernel(const T* src, int64_t src_row, T* dst, int64_t dst_row,
                            const int32_t* positions_N, int64_t tokens, int64_t heads, int64_t half,
                            const float* cos_PR, const float* sin_PR, float direction) {
  const int64_t pairs = tokens * heads * half;
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < pairs;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = index % half;
    const int64_t token_head = index / half;  // n * heads + h
    const int64_t n = token_head / heads, h = token_head % heads;
    const int64_t p = positions_N[n];
    const float c = cos_PR[p * half + i];
    const float s = direction * sin_PR[p * half + i];
    const T* in = src + n * src_row + h * 2 * half;
    T* out = dst + n * dst_row + h * 2 * half;
    const float first = to_float(in[i]);
    const float second = to_float(in[i + half]);
    out[i] = from_float<T>(first * c - second * s);
    out[i + half] = from_float<T>(second * c + first * s);
  }
}

// The bf16 kernel for even half dims: each thread rotates two adjacent pairs (i, i + 1) with
// 4-byte loads and stores. REQUIRES: 4-byte aligned rows (even strides, aligned bases).
__global__ void rope_bf16x2_kernel(const cuda_detail::bf16* src, int64_t src_row,
                                   cuda_detail::bf16* dst, int64_t dst_row,
                                   const int32_t* positions_N, int64_t tokens, int64_t heads,
                                   int64_t half, const float* cos_PR, const float* sin_PR,
                                   float direction) {
  const int64_t pair_twos = tokens * heads * (half / 2);
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < pair_twos;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = 2 * (index % (half / 2));
    const int64_t token_head = index / (half / 2);  // n * heads + h
    const int64_t n = token_head / heads, h = token_head % heads;
    const int64_t p = positions_N[n];
    const float2 c = *reinterpret_cast<const float2*>(cos_PR + p * half + i);
    const float2 sin = *reinterpret_cast<const float2*>(sin_PR + p * half + i);
    const float2 s{direction * sin.x, direction * sin.y};
    const cuda_detail::bf16* in = src + n * src_row + h * 2 * half;
    cuda_detail::bf16* out = dst + n * dst_row + h * 2 * half;
    const float2 first = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(in + i));
    const float2 second =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(in + i + half));
    *reinterpret_cast<__nv_bfloat162*>(out + i) =
        __floats2bfloat162_rn(first.x * c.x - second.x * s.x, first.y * c.y - second.y * s.y);
    *reinterpret_cast<__nv_bfloat162*>(out + i + half) =
        __floats2bfloat162_rn(second.x * c.x + first.x * s.x, second.y * c.y + first.y * s.y);
  }
}

// Packed q/k/v <-> separate q, k, v in one pass (bf16, 16-byte accesses): per token, one
// thread per 8 rotation pairs of a q or k head (q heads then k heads, back to back in the packed
// row) and one per 8 elements of v (copied). kToPacked: q, k, v -> packed (the backward, with
// direction -1); else packed -> q, k, v. REQUIRES: half % 8 == 0, 16-byte aligned bases.
template <bool kToPacked>
__global__ void rope_qkv_vec_kernel(cuda_detail::bf16* packed, cuda_detail::bf16* q,
                                    cuda_detail::bf16* k, cuda_detail::bf16* v,
                                    const int32_t* positions_N, int64_t tokens, int q_heads,
                                    int kv_heads, int half, const float* cos_PR,
                                    const float* sin_PR, float direction) {
  using cuda_detail::bf16;
  using cuda_detail::kBf16PerVector;
  const int head_dim = 2 * half, chunks = half / kBf16PerVector;
  const int rotations = (q_heads + kv_heads) * chunks;
  const int per_token = rotations + kv_heads * head_dim / kBf16PerVector;
  const int64_t row = int64_t{q_heads + 2 * kv_heads} * head_dim;
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < tokens * per_token;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = index / per_token;
    const int unit = static_cast<int>(index - n * per_token);
    bf16* packed_row = packed + n * row;
    if (unit >= rotations) {  // v: a 16-byte copy
      const int column = (unit - rotations) * kBf16PerVector;
      uint4* packed_v =
          reinterpret_cast<uint4*>(packed_row + (q_heads + kv_heads) * head_dim + column);
      uint4* separate_v = reinterpret_cast<uint4*>(v + n * kv_heads * head_dim + column);
      if constexpr (kToPacked) {
        *packed_v = *separate_v;
      } else {
        *separate_v = *packed_v;
      }
      continue;
    }
    const int head = unit / chunks, i = unit % chunks * kBf16PerVector;
    bf16* separate = head < q_heads ? q + (n * q_heads + head) * head_dim
                                    : k + (n * kv_heads + head - q_heads) * head_dim;
    const bf16* in = kToPacked ? separate : packed_row + head * head_dim;
    bf16* out = kToPacked ? packed_row + head * head_dim : separate;
    float first[kBf16PerVector], second[kBf16PerVector], c[kBf16PerVector], s[kBf16PerVector];
    cuda_detail::load8(in + i, first);
    cuda_detail::load8(in + i + half, second);
    const int64_t table = int64_t{positions_N[n]} * half + i;
    *reinterpret_cast<float4*>(c) = *reinterpret_cast<const float4*>(cos_PR + table);
    *reinterpret_cast<float4*>(c + 4) = *reinterpret_cast<const float4*>(cos_PR + table + 4);
    *reinterpret_cast<float4*>(s) = *reinterpret_cast<const float4*>(sin_PR + table);
    *reinterpret_cast<float4*>(s + 4) = *reinterpret_cast<const float4*>(sin_PR + table + 4);
    float rotated_first[kBf16PerVector], rotated_second[kBf16PerVector];
    for (int j = 0; j < kBf16PerVector; ++j) {
      const float sin = direction * s[j];
      rotated_first[j] = first[j] * c[j] - second[j] * sin;
      rotated_second[j] = second[j] * c[j] + first[j] * sin;
    }
    cuda_detail::store8(out + i, rotated_first);
    cuda_detail::store8(out + i + half, rotated_second);
  }
}

}  // namespace

bool rope_qkv_packed(DType dtype, void* packed, void* q, void* k, void* v,
                     const int32_t* positions_N, int64_t tokens, int64_t q_heads, int64_t kv_heads,
                     int64_t head_dim, const float* cos_PR, const float* sin_PR, bool to_packed,
                     cudaStream_t stream) {
  using cuda_detail::aligned16;
  const int64_t half = head_dim / 2;
  if (!qkv_rope_fused(dtype, head_dim,
                      aligned16(packed) && aligned16(q) && aligned16(k) && aligned16(v) &&
                          aligned16(cos_PR) && aligned16(sin_PR))) {
    return false;  // the dispatch table's other variant: rope_rows + a copy (cuda_layers.cpp)
  }
  const int64_t rotations = (q_heads + kv_heads) * (half / cuda_detail::kBf16PerVector);
  const int64_t per_token = rotations + kv_heads * head_dim / cuda_detail::kBf16PerVector;
  if (tokens == 0) return true;
  const auto bf = [](void* p) { return static_cast<cuda_detail::bf16*>(p); };
  const unsigned blocks = cuda_detail::grid_for(tokens * per_token, kThreads);
  if (to_packed) {
    rope_qkv_vec_kernel<true><<<blocks, kThreads, 0, stream>>>(
        bf(packed), bf(q), bf(k), bf(v), positions_N, tokens, static_cast<int>(q_heads),
        static_cast<int>(kv_heads), static_cast<int>(half), cos_PR, sin_PR, -1.0f);
  } else {
    rope_qkv_vec_kernel<false><<<blocks, kThreads, 0, stream>>>(
        bf(packed), bf(q), bf(k), bf(v), positions_N, tokens, static_cast<int>(q_heads),
        static_cast<int>(kv_heads), static_cast<int>(half), cos_PR, sin_PR, 1.0f);
  }
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
  return true;
}

void rope_rows(DType dtype, const void* src, int64_t src_row, void* dst, int64_t dst_row,
               const int32_t* positions_N, int64_t tokens, int64_t heads, int64_t head_dim,
               const float* cos_PR, const float* sin_PR, float direction, cudaStream_t stream) {
  const int64_t pairs = tokens * heads * (head_dim / 2);
  if (pairs == 0) return;
  const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  const bool pairs_of_two = (head_dim / 2) % 2 == 0 && src_row % 2 == 0 && dst_row % 2 == 0 &&
                            aligned4(src) && aligned4(dst) &&
                            reinterpret_cast<uintptr_t>(cos_PR) % 8 == 0 &&
                            reinterpret_cast<uintptr_t>(sin_PR) % 8 == 0;
  if (dtype == DType::kBF16 && pairs_of_two) {
    rope_bf16x2_kernel<<<cuda_detail::grid_for(pairs / 2, kThreads), kThreads, 0, stream>>>(
        static_cast<const cuda_detail::bf16*>(src), src_row, static_cast<cuda_detail::bf16*>(dst),
        dst_row, positions_N, tokens, heads, head_dim / 2, cos_PR, sin_PR, direction);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    rope_kernel<T><<<cuda_detail::grid_for(pairs, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(src), src_row, static_cast<T*>(dst), dst_row, positions_N, tokens,
        heads, head_dim / 2, cos_PR, sin_PR, direction);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
