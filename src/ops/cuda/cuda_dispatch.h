// Which kernel runs where: the one table of the CUDA backend's kernel variants, chosen from the
// device's properties (read once per device at first use) and the op's shape and dtype.
//
//   op                 | variant (first row that applies wins)            | where
//   -------------------+--------------------------------------------------+------------------------
//   attention fwd/bwd  | wgmma, warp-specialised (TMA producer warp,      | cc 9.0, build with 90a
//                      |   mbarrier rings; ping-pong consumers forward),  |
//                      |   D 64 / 128, bf16 (cuda_attention_ws_*.cu)      |
//                      | wgmma + cp.async (cuda_attention_wgmma_*.cu)     | cc 9.0, 90a, when no
//                      TMA |                                                  | descriptor (or the
//                      hook) | mma.sync + cp.async, 8 warps, 2 stages           | cc >= 8.0, if it
//                      fits | mma.sync, 4 warps, 2 stages                      | cc >= 8.0, if it
//                      fits | mma.sync, 4 warps, 1 stage (backward only)       | cc >= 8.0
//                      (sm_86/89 |   D128)                                          | | mma.sync D
//                      256, 4 warps, 2 or 1 stages, backward | cc >= 8.0, if it fits |   in two
//                      passes (dV; dK and dQ)                  | (H100 2, A100 1) | SIMT fp32
//                      tiles: other head dims <= 128, f32     | any, if it fits
//   On Hopper the forward's first row is where timing starts, not where it ends: the first
//   forward of each shape times it against the cp.async wgmma row and keeps the faster
//   (cuda_attention_tuning.h; SHARDTRAIN_ATTENTION_AUTOTUNE=0 keeps the table's row).
//   every attention row reads the mask (ops/attention_mask.h: causal, window, documents;
//   cuda_attention_mask.cuh) and skips the key / query tiles it masks whole. A logit soft cap
//   (Gemma's attn_logit_softcapping, AttentionShape::logit_softcap) skips the two wgmma rows:
//   the mma.sync and SIMT kernels apply it on every GPU from sm_80 (one capped path to keep
//   correct, not three), and the Hopper kernels, tuned to their last register, keep the
//   uncapped case that every supported model's config (Gemma 3's included) has.
//   rmsnorm forward    | warp per row (bf16, 16-byte, C <= 2048)          | any
//                      | block per row, 16-byte (bf16, C <= 8192)         | any
//                      | block per row, scalar (f32, unaligned, wider)    | any
//   rmsnorm backward   | block per row, 16-byte (bf16, C <= 8192)         | any
//                      | block per row, scalar (C floats of shared)       | any, if it fits
//   split/pack q,k,v   | one fused 16-byte kernel (bf16, D/2 % 8 == 0)    | any
//                      | rope_rows + a strided copy                       | any
//   q/k norm + rope    | D/16 lanes a head row, 16-byte (bf16, D 64, 128  | any
//   (+ split / pack)   |   or 256)                                        |
//                      | a warp a head row, scalar (f32, other D <= 512)  | any
//   GEMM               | cuBLASLt (its own heuristics per architecture)   | any
//   collectives        | NCCL                                             | any
// "if it fits": the kernel's dynamic shared memory is at most the device's opt-in limit per
// block (A100 163 KB, A10G / L4 (sm_86 / sm_89) 99 KB, H100 / H200 227 KB); the launchers
// raise each kernel's limit to exactly its need with cudaFuncSetAttribute after checking it
// against device_limits() (require_shared_fits). Nothing below compute capability 8.0 runs
// (no bf16 tensor cores): require_supported_device says so before any work.
//
// Test support: set_device_limits_override makes device_limits() report another GPU's limits
// (device_limits_preset: "a100", "l4", "a10g", "h100"), so the kernel configurations of those
// GPUs run, under their shared-memory limits, on the GPU that is present (which must offer at
// least as much). set_kernel_overrides (ops/kernel_overrides.h) forces a row of the attention
// table: the cp.async wgmma kernels instead of the warp-specialised ones (the Hopper default
// they replaced; bench/run_bench.sh RUN+wgmma measures them), the mma.sync kernels, 4-warp
// blocks, a backward head slice. Only tests set either (gtest binaries directly, the test
// worker binary from its SHARDTRAIN_TEST_* variables); the product never reads them.
//
// Plain C++17 (no CUDA device code): included by the launchers (.cu) and by cuda_layers.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/kernel_overrides.h"

namespace shardtrain::cuda_kernels {

// What the dispatcher knows of a GPU.
struct DeviceLimits {
  std::string name;                   // "NVIDIA H200", or the preset's name
  int major = 0, minor = 0;           // compute capability
  size_t shared_per_block_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
  int sm_count = 0;
  size_t l2_bytes = 0;
  int compute_capability() const { return major * 10 + minor; }
};

// The current device's limits, read with cudaDeviceGetAttribute once per device (thread-safe),
// or the test override.
const DeviceLimits& device_limits();
// Throws Error (exit 2) naming the GPU when its compute capability is below 8.0.
void require_supported_device(const DeviceLimits& limits, int device_index);
// Test support: replace what device_limits() returns (nullopt restores the real device). The
// override's shared memory must not exceed the real device's (checked; Error otherwise).
void set_device_limits_override(const std::optional<DeviceLimits>& limits);
// Test support: the attention rows tests force (ops/kernel_overrides.h); thread-safe.
void set_kernel_overrides(const KernelOverrides& overrides);
KernelOverrides kernel_overrides();
// Datasheet limits of a GPU kind: "a100" (sm_80, 108 SMs, 163 KB, 40 MB L2), "a10g" (sm_86,
// 80 SMs, 99 KB, 6 MB), "l4" (sm_89, 58 SMs, 99 KB, 48 MB), "h100" (sm_90, 132 SMs, 227 KB,
// 50 MB); nullopt for any other name.
std::optional<DeviceLimits> device_limits_preset(std::string_view name);
// Aborts with file:line (a broken table, not a user error) unless `bytes` fit `limits`.
void require_shared_fits(size_t bytes, const DeviceLimits& limits, const char* kernel);

// ---- attention ----

enum class AttentionKernel { kSimt, kMmaSync, kWgmma, kWgmmaWs };
const char* attention_kernel_name(AttentionKernel kernel);

struct AttentionConfig {
  AttentionKernel kernel = AttentionKernel::kSimt;
  int warps = 0;            // mma.sync: 16 query (forward) or key (backward) rows a warp
  int stages = 0;           // mma.sync backward: Q/dO tiles in flight (1 or 2)
  size_t shared_bytes = 0;  // the largest of the configuration's kernels
};

// The configuration for this dtype, shape and device. Throws Error (exit 2) naming the head dim,
// the bytes and the GPU when no kernel fits its shared memory. `wgmma_compiled`: this binary
// holds the sm_90a kernels (cuda_attention_wgmma_*.cu).
AttentionConfig attention_forward_config(DType dtype, const AttentionShape& shape,
                                         const DeviceLimits& limits, bool wgmma_compiled);
AttentionConfig attention_backward_config(DType dtype, const AttentionShape& shape,
                                          const DeviceLimits& limits, bool wgmma_compiled);
// The same for the current device and build (cuda_attention_wgmma_forward.cu says whether the
// wgmma kernels were compiled).
AttentionConfig attention_forward_config(DType dtype, const AttentionShape& shape);
AttentionConfig attention_backward_config(DType dtype, const AttentionShape& shape);
bool wgmma_kernels_compiled();

// Launches of the warp-specialised attention kernels (cuda_attention_ws_*.cu count each one) and
// their fallbacks to the wgmma kernels when the TMA descriptors cannot be made (the first one is
// logged as a warning, naming the reason). Thread-safe; tests read them to know which kernel ran.
struct WarpSpecialisedLaunches {
  int64_t forward = 0, backward = 0, fallbacks = 0;
};
void count_warp_specialised_launch(bool backward);
void count_warp_specialised_fallback(const char* why);
WarpSpecialisedLaunches warp_specialised_launches();

// Query heads of the GQA group per flash-backward block of `warps` warps over `key_tiles` key
// tiles: the slice whose launch finishes first on device_limits().sm_count SMs by a
// list-scheduling model (cuda_dispatch.cpp says how it was checked), cached per shape;
// KernelOverrides::attention_backward_heads_per_block forces one (when it divides the group).
int attention_backward_heads_per_block(const AttentionShape& shape, int key_tiles, int warps);

// Shared memory of each attention kernel, as the kernels carve it (bytes). kTile = 64.
constexpr size_t kFlashTile = 64;
constexpr size_t flash_pitch(int head_dim) { return static_cast<size_t>(head_dim) + 8; }
constexpr size_t mma_forward_shared_bytes(int head_dim, int warps) {
  // Q + 2 stages of K, V tiles of 64 keys (32 at head dim 256).
  const size_t keys = head_dim > 128 ? kFlashTile / 2 : kFlashTile;
  return 2 * (warps * 16 + 4 * keys) * flash_pitch(head_dim);
}
constexpr size_t mma_backward_shared_bytes(int head_dim, int warps, int stages) {
  // K, V (16 rows a warp) + `stages` of Q and dO tiles, dS^T (a row per key), lse and delta,
  // each key's query end (the mask).
  return 2 * ((2 * warps * 16 + 2 * stages * kFlashTile) * flash_pitch(head_dim) +
              warps * 16 * (kFlashTile + 8)) +
         4 * 2 * stages * kFlashTile + 4 * warps * 16;
}
constexpr size_t kWgmmaAlignSlack = 1024;
constexpr size_t wgmma_forward_shared_bytes(int head_dim) {
  const size_t keys = head_dim == 64 ? 64 : 128;
  return 2 * (128 + 4 * keys) * head_dim + kWgmmaAlignSlack;
}
// Q (192 rows at D = 64, 128 at D = 128) + 3 (D = 64) or 2 (D = 128) stages of 128-key K and V
// tiles + 1 + 4 * stages mbarriers.
constexpr size_t wgmma_ws_forward_shared_bytes(int head_dim) {
  const size_t stages = head_dim == 64 ? 3 : 2;
  const size_t query_rows = head_dim == 64 ? 192 : 128;
  return 2 * (query_rows + 2 * stages * 128) * head_dim + 8 * (1 + 4 * stages) + kWgmmaAlignSlack;
}
// K, V, 3 stages of 64-row Q and dO tiles, two dS^T buffers, two fp32 64 x 64 dQ tiles, 3
// stages of lse and delta, 11 mbarriers: 226.6 KiB at head dim 128 (227 KiB on Hopper).
constexpr size_t wgmma_ws_backward_shared_bytes(int head_dim) {
  return 2 * (2 * 128 * head_dim + 2 * 3 * 64 * head_dim + 2 * 128 * 64) + 2 * 4 * 64 * 64 +
         4 * 2 * 3 * 64 + 8 * 11 + kWgmmaAlignSlack;
}
constexpr size_t wgmma_backward_shared_bytes(int head_dim) {
  return 2 * (2 * 128 * head_dim + 4 * 64 * head_dim + 128 * 64) + 4 * 4 * 64 + kWgmmaAlignSlack;
}
constexpr size_t kSimtTile = 64;
constexpr int kSimtMaxHeadDim = 128;  // the SIMT kernels' largest head dim (4 chunks of 32)
constexpr size_t simt_forward_shared_bytes(int d) {
  return 4 * (kSimtTile * d * 2 + kSimtTile * (d + 1) + kSimtTile * kSimtTile);
}
constexpr size_t simt_dq_shared_bytes(int d) {
  return 4 * (kSimtTile * d * 2 + kSimtTile * (d + 1) * 2 + kSimtTile * kSimtTile);
}
constexpr size_t simt_dkdv_shared_bytes(int d) {
  return 4 *
         (kSimtTile * d * 2 + kSimtTile * (d + 1) * 2 + 2 * kSimtTile + 2 * kSimtTile * kSimtTile);
}

// ---- RMSNorm ----

enum class RmsnormKernel { kWarpPerRow, kBlockPerRowVector, kBlockPerRowScalar };
const char* rmsnorm_kernel_name(RmsnormKernel kernel);
constexpr int kRmsnormThreads = 256;
constexpr int64_t kRmsnormWarpMaxChannels = 32 * 8 * 8;                 // 8 16-byte chunks a lane
constexpr int64_t kRmsnormVectorMaxChannels = kRmsnormThreads * 8 * 4;  // 4 chunks a thread
// `aligned`: every activation pointer is 16-byte aligned; `weight_aligned`: the weight is f32 or a
// 16-byte aligned bf16 (the warp kernel loads bf16 weights 16 bytes at a time).
RmsnormKernel choose_rmsnorm_forward(DType act_dtype, int64_t channels, bool aligned,
                                     bool weight_aligned);
RmsnormKernel choose_rmsnorm_backward(DType act_dtype, int64_t channels, bool aligned);
// Throws Error (exit 2) when the scalar backward's channels floats of shared memory do not fit.
void require_rmsnorm_backward_fits(int64_t channels, const DeviceLimits& limits);

// ---- packed q/k/v with rope ----

// True when the fused kernel applies: bf16, head_dim / 2 a multiple of 8, all pointers aligned.
bool qkv_rope_fused(DType dtype, int64_t head_dim, bool aligned);

// ---- per-head q/k norms with the split and rope ----

enum class QkNormRopeKernel { kVector, kScalar };
constexpr int64_t kQkNormRopeMaxHeadDim = 512;  // both kernels' per-block weight-gradient sums
// kVector: bf16, head_dim 64, 128 or 256 (D / 16 lanes a row, 8 rotation pairs a lane), every
// pointer 16-byte aligned. Throws Error (exit 2) for an odd head dim or one above
// kQkNormRopeMaxHeadDim.
QkNormRopeKernel choose_qk_norm_rope(DType dtype, int64_t head_dim, bool aligned);

}  // namespace shardtrain::cuda_kernels
