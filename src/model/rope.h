// Rotary position embedding tables, computed exactly as Hugging Face transformers does in
// fp32: inv_freq[i] = 1 / theta^(2i / D) (with llama3 frequency scaling when configured),
// angle = float(p) * inv_freq[i], cos/sin of that angle. Attention scaling is 1 for the
// supported rope types ("default", "llama3").
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace shardtrain {

// The D/2 inverse frequencies for head_dim D, llama3-scaled when the config says so.
std::vector<float> rope_inverse_frequencies(const RopeConfig& rope, int64_t head_dim);

struct RopeTables {
  int64_t positions = 0;   // P
  int64_t half_dim = 0;    // R = D/2
  std::vector<float> cos;  // (P, R)
  std::vector<float> sin;  // (P, R)
};

RopeTables make_rope_tables(const RopeConfig& rope, int64_t head_dim, int64_t positions);

}  // namespace shardtrain
