// The kernel table of the CUDA backend and the device properties it reads (cuda_dispatch.h).
#include "ops/cuda/cuda_dispatch.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/cuda_check.h"

namespace shardtrain::cuda_kernels {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

DeviceLimits read_device_limits(int device) {
  cudaDeviceProp properties{};
  SHARDTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  DeviceLimits limits;
  limits.name = properties.name;
  limits.major = properties.major;
  limits.minor = properties.minor;
  limits.shared_per_block_optin = properties.sharedMemPerBlockOptin;
  limits.sm_count = properties.multiProcessorCount;
  limits.l2_bytes = static_cast<size_t>(properties.l2CacheSize);
  return limits;
}

std::mutex& limits_mutex() {
  static std::mutex mutex;
  return mutex;
}
// Per device index, read once; the override (tests) replaces them all.
std::map<int, DeviceLimits>& limits_by_device() {
  static std::map<int, DeviceLimits> limits;
  return limits;
}
std::optional<DeviceLimits>& limits_override() {
  static std::optional<DeviceLimits> limits;
  return limits;
}

const DeviceLimits& real_device_limits(int device) {
  std::lock_guard<std::mutex> lock(limits_mutex());
  auto& by_device = limits_by_device();
  auto found = by_device.find(device);
  if (found == by_device.end()) found = by_device.emplace(device, read_device_limits(device)).first;
  return found->second;  // std::map nodes never move
}

int current_device() {
  int device = 0;
  SHARDTRAIN_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

std::mutex& overrides_mutex() {
  static std::mutex mutex;
  return mutex;
}
KernelOverrides& overrides_storage() {
  static KernelOverrides overrides;
  return overrides;
}

// ---- the attention table ----

// One row: where it applies (compute capability range, head dim, dtype) and what it runs. The
// first row that applies and fits the device's shared memory wins.
struct AttentionRow {
  int min_cc, max_cc;  // inclusive, major * 10 + minor
  int head_dim;        // 0: any even head dim <= kSimtMaxHeadDim
  bool bf16_only;
  AttentionKernel kernel;
  int warps, stages;
};

constexpr int kAnyCc = 1000;
constexpr std::array<AttentionRow, 13> kAttentionRows{{
    {90, 90, 128, true, AttentionKernel::kWgmmaWs, 12, 0},
    {90, 90, 64, true, AttentionKernel::kWgmmaWs, 12, 0},
    {90, 90, 128, true, AttentionKernel::kWgmma, 8, 2},
    {90, 90, 64, true, AttentionKernel::kWgmma, 8, 2},
    {80, kAnyCc, 128, true, AttentionKernel::kMmaSync, 8, 2},
    {80, kAnyCc, 64, true, AttentionKernel::kMmaSync, 8, 2},
    {80, kAnyCc, 128, true, AttentionKernel::kMmaSync, 4, 2},
    {80, kAnyCc, 64, true, AttentionKernel::kMmaSync, 4, 2},
    {80, kAnyCc, 128, true, AttentionKernel::kMmaSync, 4, 1},  // backward on sm_86 / sm_89
    {80, kAnyCc, 64, true, AttentionKernel::kMmaSync, 4, 1},
    // Head dim 256 (Gemma 3): 4 warps, 32-key K/V tiles forward; the backward in two passes (dV,
    // then dK and dQ), Q/dO two stages deep where shared memory allows (H100), else one (A100).
    {80, kAnyCc, 256, true, AttentionKernel::kMmaSync, 4, 2},
    {80, kAnyCc, 256, true, AttentionKernel::kMmaSync, 4, 1},
    {0, kAnyCc, 0, false, AttentionKernel::kSimt, 0, 0},
}};

size_t row_shared_bytes(const AttentionRow& row, int head_dim, bool backward) {
  switch (row.kernel) {
    case AttentionKernel::kWgmma:
      return backward ? wgmma_backward_shared_bytes(head_dim)
                      : wgmma_forward_shared_bytes(head_dim);
    case AttentionKernel::kWgmmaWs:
      return backward ? wgmma_ws_backward_shared_bytes(head_dim)
                      : wgmma_ws_forward_shared_bytes(head_dim);
    case AttentionKernel::kMmaSync:
      return backward ? mma_backward_shared_bytes(head_dim, row.warps, row.stages)
                      : mma_forward_shared_bytes(head_dim, row.warps);
    case AttentionKernel::kSimt:
      return backward ? std::max(simt_dq_shared_bytes(head_dim), simt_dkdv_shared_bytes(head_dim))
                      : simt_forward_shared_bytes(head_dim);
  }
  return 0;
}

// The rows tests force (ops/kernel_overrides.h): kWgmma skips the warp-specialised rows,
// kWgmmaForward those of the forward only, kMma both wgmma kinds, and 4 warps the 8-warp
// mma.sync rows.
bool row_allowed_by_overrides(const AttentionRow& row, bool backward) {
  const KernelOverrides forced = kernel_overrides();
  using Forced = KernelOverrides::Attention;
  const bool keeps_ws = forced.attention == Forced::kDefault ||
                        (forced.attention == Forced::kWgmmaForward && backward);
  if (row.kernel == AttentionKernel::kWgmmaWs && !keeps_ws) return false;
  if (row.kernel == AttentionKernel::kWgmma && forced.attention == Forced::kMma) return false;
  const int warps = backward ? forced.attention_backward_warps : forced.attention_forward_warps;
  if (row.kernel == AttentionKernel::kMmaSync && warps == 4 && row.warps != 4) return false;
  return true;
}

AttentionConfig attention_config(DType dtype, const AttentionShape& shape,
                                 const DeviceLimits& limits, bool wgmma_compiled, bool backward) {
  const int cc = limits.compute_capability();
  for (const AttentionRow& row : kAttentionRows) {
    if (cc < row.min_cc || cc > row.max_cc) continue;
    if (row.head_dim != 0 && row.head_dim != shape.head_dim) continue;
    if (row.head_dim == 0 && shape.head_dim > kSimtMaxHeadDim) continue;
    if (row.bf16_only && dtype != DType::kBF16) continue;
    const bool hopper_row =
        row.kernel == AttentionKernel::kWgmma || row.kernel == AttentionKernel::kWgmmaWs;
    if (hopper_row && !wgmma_compiled) continue;
    // A soft-capped shape runs on the mma.sync (or SIMT) rows, which apply the cap on every
    // GPU; the Hopper kernels keep the uncapped case (cuda_dispatch.h says why).
    if (hopper_row && shape.logit_softcap > 0) continue;
    if (!backward && row.stages == 1) continue;  // the forward has no 1-stage variant
    if (!row_allowed_by_overrides(row, backward)) continue;
    const size_t bytes = row_shared_bytes(row, shape.head_dim, backward);
    if (bytes > limits.shared_per_block_optin) continue;
    return AttentionConfig{row.kernel, row.warps, row.stages, bytes};
  }
  if (shape.head_dim > kSimtMaxHeadDim) {
    throw Error(fmt::format(
        "attention with head dim {} runs in bf16 on GPUs of compute capability 8.0 or newer with "
        "{} KB of shared memory per block; {} (compute capability {}.{}, {} KB) with {} does not "
        "qualify; HINT: train in bf16 (train.dtype = bf16) on an A100, H100 or H200",
        shape.head_dim,
        row_shared_bytes(kAttentionRows[kAttentionRows.size() - 2], shape.head_dim, backward) /
            kKiB,
        limits.name, limits.major, limits.minor, limits.shared_per_block_optin / kKiB,
        dtype_name(dtype)));
  }
  const size_t simt = row_shared_bytes(kAttentionRows.back(), shape.head_dim, backward);
  throw Error(fmt::format(
      "attention {} with head dim {} ({}) needs {} KB of shared memory per block, but {} "
      "(compute capability {}.{}) offers {} KB; HINT: use a model with head dim 64 or 128 in bf16 "
      "on this GPU, or a GPU with more shared memory (A100, H100)",
      backward ? "backward" : "forward", shape.head_dim, dtype_name(dtype), simt / kKiB,
      limits.name, limits.major, limits.minor, limits.shared_per_block_optin / kKiB));
}

}  // namespace

const DeviceLimits& device_limits() {
  {
    std::lock_guard<std::mutex> lock(limits_mutex());
    if (limits_override()) return *limits_override();
  }
  return real_device_limits(current_device());
}

void require_supported_device(const DeviceLimits& limits, int device_index) {
  if (limits.compute_capability() >= 80) return;
  throw Error(fmt::format(
      "GPU {} ({}) has compute capability {}.{}; shardtrain's CUDA kernels need 8.0 or newer "
      "(bf16 tensor cores: A100, A10G, L4, H100, H200); HINT: run on such a GPU, or train on the "
      "CPU with --train.device=cpu",
      device_index, limits.name, limits.major, limits.minor));
}

void set_device_limits_override(const std::optional<DeviceLimits>& limits) {
  if (limits) {
    const DeviceLimits& real = real_device_limits(current_device());
    if (limits->shared_per_block_optin > real.shared_per_block_optin) {
      throw Error(
          fmt::format("device limits override '{}' ({} KB shared per block) exceeds the "
                      "present GPU {} ({} KB); HINT: override with a smaller GPU's limits",
                      limits->name, limits->shared_per_block_optin / kKiB, real.name,
                      real.shared_per_block_optin / kKiB));
    }
  }
  std::lock_guard<std::mutex> lock(limits_mutex());
  limits_override() = limits;
}

void set_kernel_overrides(const KernelOverrides& overrides) {
  std::lock_guard<std::mutex> lock(overrides_mutex());
  overrides_storage() = overrides;
}

KernelOverrides kernel_overrides() {
  std::lock_guard<std::mutex> lock(overrides_mutex());
  return overrides_storage();
}

std::optional<DeviceLimits> device_limits_preset(std::string_view name) {
  // Datasheet values (NVIDIA's A100, A10G, L4 and H100 whitepapers / CUDA programming guide).
  if (name == "a100")
    return DeviceLimits{"A100 (limits override)", 8, 0, 163 * kKiB, 108, 40 * kMiB};
  if (name == "a10g") return DeviceLimits{"A10G (limits override)", 8, 6, 99 * kKiB, 80, 6 * kMiB};
  if (name == "l4") return DeviceLimits{"L4 (limits override)", 8, 9, 99 * kKiB, 58, 48 * kMiB};
  if (name == "h100")
    return DeviceLimits{"H100 (limits override)", 9, 0, 227 * kKiB, 132, 50 * kMiB};
  return std::nullopt;
}

void require_shared_fits(size_t bytes, const DeviceLimits& limits, const char* kernel) {
  if (bytes <= limits.shared_per_block_optin) return;
  std::fprintf(stderr, "%s:%d: %s needs %zu bytes of shared memory per block; %s offers %zu\n",
               __FILE__, __LINE__, kernel, bytes, limits.name.c_str(),
               limits.shared_per_block_optin);
  std::abort();
}

namespace {
std::atomic<int64_t> ws_forward_launches{0}, ws_backward_launches{0}, ws_fallbacks{0};
}  // namespace

void count_warp_specialised_launch(bool backward) {
  (backward ? ws_backward_launches : ws_forward_launches).fetch_add(1, std::memory_order_relaxed);
}

void count_warp_specialised_fallback(const char* why) {
  if (ws_fallbacks.fetch_add(1, std::memory_order_relaxed) == 0) {
    log::warn(
        "attention: the warp-specialised kernel falls back to the cp.async wgmma kernel ({}): the "
        "results are the same, attention is slower; HINT: TMA needs an NVIDIA driver of CUDA 12 "
        "(525) or newer",
        why);
  }
}

WarpSpecialisedLaunches warp_specialised_launches() {
  return {ws_forward_launches.load(), ws_backward_launches.load(), ws_fallbacks.load()};
}

bool wgmma_kernels_compiled() {
#if defined(SHARDTRAIN_CUDA_WGMMA)
  return true;  // this build has sm_90a code (CMakeLists.txt)
#else
  return false;
#endif
}

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kSimt:
      return "simt";
    case AttentionKernel::kMmaSync:
      return "mma.sync";
    case AttentionKernel::kWgmma:
      return "wgmma";
    case AttentionKernel::kWgmmaWs:
      return "wgmma-ws";
  }
  return "?";
}

AttentionConfig attention_forward_config(DType dtype, const AttentionShape& shape,
                                         const DeviceLimits& limits, bool wgmma_compiled) {
  return attention_config(dtype, shape, limits, wgmma_compiled, false);
}
AttentionConfig attention_backward_config(DType dtype, const AttentionShape& shape,
                                          const DeviceLimits& limits, bool wgmma_compiled) {
  return attention_config(dtype, shape, limits, wgmma_compiled, true);
}
AttentionConfig attention_forward_config(DType dtype, const AttentionShape& shape) {
  return attention_config(dtype, shape, device_limits(), wgmma_kernels_compiled(), false);
}
AttentionConfig attention_backward_config(DType dtype, const AttentionShape& shape) {
  return attention_config(dtype, shape, device_limits(), wgmma_kernels_compiled(), true);
}

// Query heads per backward block of `warps` warps (key tiles of 16 * warps rows): the slice
// of the GQA group whose grid finishes first on this GPU, by a list-scheduling model of the
// launch. Blocks start heaviest first (key tile 0 sees every query) on sms * (8 / warps) slots
// (both kernels hold 8 warps per SM); a block costs its causal query rows times its keys times
// its heads, plus one 128 x 128 tile's worth per 128 keys for loading K/V and writing dK/dV.
// Measured on the H200 (B = 2, T = 4096, wgmma): at 12/2 heads slices of 1, 2, 3, 6 heads took
// 0.808, 0.847, 0.777, 1.428 ms, the model's order (102, 109, 98, 193); at 32/8 heads 1 and 2
// took 1.300 and 1.272 ms (model 273, 266; 4 heads: 264). A slice smaller than the group
// accumulates dK, dV in fp32 with atomics; ties go to the larger slice.
int attention_backward_heads_per_block(const AttentionShape& s, int key_tiles, int warps) {
  const int sms = device_limits().sm_count;
  const int group = s.heads / s.kv_heads;
  // A slice size tests force (when it divides the group), so they reach every path on small
  // shapes.
  if (const int heads = kernel_overrides().attention_backward_heads_per_block;
      heads > 0 && group % heads == 0)
    return heads;
  // The model runs once per shape (per thread: ranks may be threads of one process).
  thread_local std::map<std::array<int, 7>, int> chosen;
  const std::array<int, 7> key{s.batch, s.seq, s.heads, s.kv_heads, key_tiles, warps, sms};
  if (const auto found = chosen.find(key); found != chosen.end()) return found->second;
  const int key_rows = 16 * warps;
  const int slots = sms * (8 / warps);
  int best_heads = group;
  double best_time = 0;
  for (int heads = group; heads >= 1; --heads) {
    if (group % heads != 0) continue;
    const int64_t blocks_per_tile = int64_t{s.kv_heads} * s.batch * (group / heads);
    std::priority_queue<double, std::vector<double>, std::greater<double>> finish(
        std::greater<double>{}, std::vector<double>(static_cast<size_t>(slots), 0.0));
    for (int tile = 0; tile < key_tiles; ++tile) {
      const double queries = s.seq - static_cast<double>(tile) * key_rows;
      const double cost = (queries * heads + 128.0) * key_rows / (128.0 * 128.0);
      for (int64_t b = 0; b < blocks_per_tile; ++b) {
        const double start = finish.top();
        finish.pop();
        finish.push(start + cost);
      }
    }
    double time = 0;
    while (!finish.empty()) {
      time = finish.top();
      finish.pop();
    }
    if (heads == group || time < best_time * 0.999) {
      best_time = time;
      best_heads = heads;
    }
  }
  chosen.emplace(key, best_heads);
  return best_heads;
}

// ---- RMSNorm ----

const char* rmsnorm_kernel_name(RmsnormKernel kernel) {
  switch (kernel) {
    case RmsnormKernel::kWarpPerRow:
      return "warp per row";
    case RmsnormKernel::kBlockPerRowVector:
      return "block per row, 16-byte";
    case RmsnormKernel::kBlockPerRowScalar:
      return "block per row, scalar";
  }
  return "?";
}

RmsnormKernel choose_rmsnorm_forward(DType act_dtype, int64_t channels, bool aligned,
                                     bool weight_aligned) {
  const bool vector = act_dtype == DType::kBF16 && channels % 8 == 0 && aligned;
  if (vector && weight_aligned && channels <= kRmsnormWarpMaxChannels) {
    return RmsnormKernel::kWarpPerRow;
  }
  if (vector && channels <= kRmsnormVectorMaxChannels) return RmsnormKernel::kBlockPerRowVector;
  return RmsnormKernel::kBlockPerRowScalar;
}

RmsnormKernel choose_rmsnorm_backward(DType act_dtype, int64_t channels, bool aligned) {
  // A warp-per-row backward measured slower (ops/cuda/NOTES.md, "scheduling and memory-bound ops"):
  // blocks only.
  const bool vector = act_dtype == DType::kBF16 && channels % 8 == 0 && aligned;
  if (vector && channels <= kRmsnormVectorMaxChannels) return RmsnormKernel::kBlockPerRowVector;
  return RmsnormKernel::kBlockPerRowScalar;
}

void require_rmsnorm_backward_fits(int64_t channels, const DeviceLimits& limits) {
  const size_t bytes = static_cast<size_t>(channels) * sizeof(float);
  if (bytes <= limits.shared_per_block_optin) return;
  throw Error(
      fmt::format("rmsnorm backward over {} channels needs {} KB of shared memory per "
                  "block; {} offers {} KB; HINT: use bf16 activations (the 16-byte "
                  "kernel) or a GPU with more shared memory",
                  channels, bytes / kKiB, limits.name, limits.shared_per_block_optin / kKiB));
}

bool qkv_rope_fused(DType dtype, int64_t head_dim, bool aligned) {
  return dtype == DType::kBF16 && head_dim % 2 == 0 && (head_dim / 2) % 8 == 0 && aligned;
}

QkNormRopeKernel choose_qk_norm_rope(DType dtype, int64_t head_dim, bool aligned) {
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kQkNormRopeMaxHeadDim) {
    throw Error(fmt::format(
        "the CUDA q/k norm kernels take even head dims up to {}, not {}; HINT: train this model "
        "on CPU (train.device = cpu)",
        kQkNormRopeMaxHeadDim, head_dim));
  }
  const bool vector_width = head_dim == 64 || head_dim == 128 || head_dim == 256;
  return dtype == DType::kBF16 && vector_width && aligned ? QkNormRopeKernel::kVector
                                                          : QkNormRopeKernel::kScalar;
}

}  // namespace shardtrain::cuda_kernels
