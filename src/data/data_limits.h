// Bounds on data shapes, checked where users give them (train's config, eval's and prepare's
// flags) before anything is sized from them: sequence buffers, packing, activations, and a
// step's micro-batches, which are held on the host at once (data/step_batcher.h).
#pragma once

#include <cstdint>

namespace shardtrain::data_limits {

// Tokens of one sequence.
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
// Tokens of one forward pass: a micro-batch, an eval batch.
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 24;
// Tokens of one rank's optimizer step: room for the largest global batches trained (a few
// million tokens) on one rank.
inline constexpr int64_t kMaxStepTokens = int64_t{1} << 26;

}  // namespace shardtrain::data_limits
