#include "model/fp8_memory.h"

#include <algorithm>

#include "model/layers/layer_dims.h"
#include "ops/fp8_workspace.h"

namespace shardtrain {

size_t fp8_workspace_bytes(const ModelConfig& config, int64_t tokens) {
  const LayerDims d = LayerDims::of(config, 1, tokens);
  const int64_t qkv = d.q_width() + 2 * d.kv_width();
  size_t largest = 0;
  for (const auto& [in, out] : {std::pair{d.hidden, qkv}, std::pair{d.q_width(), d.hidden},
                                std::pair{d.hidden, d.intermediate},
                                std::pair{d.intermediate, d.hidden}}) {
    largest = std::max(largest, fp8_linear_copies_bytes(tokens, in, out));
  }
  largest = std::max(largest, fp8_swiglu_backward_bytes(tokens, d.hidden, d.intermediate));
  return largest + kFp8GemmWorkspaceBytes;
}

}  // namespace shardtrain
