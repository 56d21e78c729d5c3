// The LoRA dropout mask as a pure function of (seed, element index), shared by the CPU backend
// and the CUDA kernel (the same bits on both), so backward regenerates forward's mask instead of
// saving it (ops/ops.h Ops::dropout).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SHARDTRAIN_HOST_DEVICE __host__ __device__
#else
#define SHARDTRAIN_HOST_DEVICE
#endif

namespace shardtrain {

// Elements whose 32-bit draw is below this are dropped: floor(p * 2^32). REQUIRES: 0 <= p < 1.
inline SHARDTRAIN_HOST_DEVICE uint32_t lora_dropout_threshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
}

// splitmix64 of (seed, index): a uniform 32-bit draw per element; kept when >= threshold.
inline SHARDTRAIN_HOST_DEVICE bool lora_dropout_keep(uint64_t seed, uint64_t index,
                                                     uint32_t threshold) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<uint32_t>(z >> 32) >= threshold;
}

}  // namespace shardtrain
