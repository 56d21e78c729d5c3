#include "model/rope.h"

#include <cmath>

namespace shardtrain {

std::vector<float> rope_inverse_frequencies(const RopeConfig& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  const float base = static_cast<float>(rope.theta);
  for (int64_t i = 0; i < half; ++i) {
    // transformers: arange(0, D, 2).float() / D in fp32, then base ** that, then 1 / that.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(base), exponent));
    inv_freq[i] = 1.0f / power;
  }
  if (rope.type == RopeType::kLinear) {  // transformers' linear: inv_freq /= factor
    for (auto& f : inv_freq) f /= static_cast<float>(rope.factor);
  }
  if (rope.type == RopeType::kLlama3) {
    const double pi = 3.14159265358979323846;
    const double old_context = static_cast<double>(rope.original_max_position_embeddings);
    const double low_freq_wavelen = old_context / rope.low_freq_factor;
    const double high_freq_wavelen = old_context / rope.high_freq_factor;
    const float factor = static_cast<float>(rope.factor);
    for (auto& f : inv_freq) {
      const float wavelen = static_cast<float>(2 * pi) / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = static_cast<float>(
            (old_context / wavelen - rope.low_freq_factor) /
            (rope.high_freq_factor - rope.low_freq_factor));
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv_freq;
}

RopeTables make_rope_tables(const RopeConfig& rope, int64_t head_dim, int64_t positions) {
  RopeTables tables;
  tables.positions = positions;
  tables.half_dim = head_dim / 2;
  const std::vector<float> inv_freq = rope_inverse_frequencies(rope, head_dim);
  tables.cos.resize(positions * tables.half_dim);
  tables.sin.resize(positions * tables.half_dim);
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < tables.half_dim; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      tables.cos[p * tables.half_dim + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      tables.sin[p * tables.half_dim + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return tables;
}

}  // namespace shardtrain
