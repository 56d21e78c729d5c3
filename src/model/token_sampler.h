// TokenSampler: picks the next token from a model's logits for `shardtrain generate`. Greedy
// (the first argmax) at temperature 0; otherwise a draw from softmax(logits / temperature)
// restricted to the nucleus: the smallest set of most likely tokens whose probability reaches
// top_p (at least the most likely one; equal probabilities keep the lower token id first).
// Draws come from a std::mt19937_64 seeded once, so a seed reproduces a generation.
// Throws Error naming the flag for a temperature below 0 or a top_p outside [0, 1].
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace shardtrain {

struct SamplingOptions {
  double temperature = 0.0;  // 0 = greedy (--temperature)
  double top_p = 0.9;        // nucleus mass, with temperature > 0 (--top-p; 0 = top-1)
  uint64_t seed = 0;         // --seed
};

class TokenSampler {
 public:
  explicit TokenSampler(const SamplingOptions& options);
  // The index of the next token. REQUIRES: logits_V is not empty and holds no NaN.
  int32_t next(std::span<const float> logits_V);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace shardtrain
