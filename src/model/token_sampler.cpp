#include "model/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace shardtrain {

TokenSampler::TokenSampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  if (!(options.temperature >= 0 && std::isfinite(options.temperature))) {
    fail(
        "--temperature {} must be a finite number >= 0; HINT: use 0 for greedy decoding or a "
        "value > 0",
        options.temperature);
  }
  if (!(options.top_p >= 0 && options.top_p <= 1)) {
    fail("--top-p {} is outside [0, 1]; HINT: use e.g. 0.9 (1 = the whole distribution)",
         options.top_p);
  }
}

int32_t TokenSampler::next(std::span<const float> logits_V) {
  SHARDTRAIN_CHECK(!logits_V.empty(), "no logits to sample from");
  const auto top = std::max_element(logits_V.begin(), logits_V.end());
  if (options_.temperature <= 0) return static_cast<int32_t>(top - logits_V.begin());
  // Unnormalised probabilities relative to the largest logit (no overflow at any temperature).
  std::vector<double> probs(logits_V.size());
  double total = 0;
  for (size_t i = 0; i < logits_V.size(); ++i) {
    probs[i] = std::exp((double{logits_V[i]} - *top) / options_.temperature);
    total += probs[i];
  }
  std::vector<int32_t> order(logits_V.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  double kept = 0;
  size_t count = 0;
  while (count < order.size() && (count == 0 || kept / total < options_.top_p))
    kept += probs[order[count++]];
  double draw = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  for (size_t i = 0; i < count; ++i) {
    draw -= probs[order[i]];
    if (draw <= 0) return order[i];
  }
  return order[count - 1];
}

}  // namespace shardtrain
