// AttentionForwardTuning (cuda_attention_tuning.h).
#include "ops/cuda/cuda_attention_tuning.h"

#include <vector>

#include "core/log.h"
#include "ops/cuda/cuda_tuning.h"

namespace shardtrain::cuda_kernels {

AttentionForwardTuning::Key AttentionForwardTuning::key_of(const AttentionShape& s) {
  return {
      s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, s.window, s.document_start_BT != nullptr};
}

std::optional<AttentionKernel> AttentionForwardTuning::chosen(const AttentionShape& s) const {
  const auto it = chosen_.find(key_of(s));
  if (it == chosen_.end()) return std::nullopt;
  return it->second;
}

AttentionKernel AttentionForwardTuning::choose(AttentionKernel table_choice,
                                               const AttentionShape& s, cudaStream_t stream,
                                               void* out, size_t out_bytes, const Launch& launch) {
  if (table_choice != AttentionKernel::kWgmmaWs) return table_choice;
  const Key key = key_of(s);
  if (const auto it = chosen_.find(key); it != chosen_.end()) return it->second;
  // Candidate 0 is the table's choice: the one kept unless the other is clearly faster.
  const AttentionKernel candidates[] = {AttentionKernel::kWgmmaWs, AttentionKernel::kWgmma};
  std::vector<float> times_ms;
  const TuneOutput output{out, out, out_bytes, false};
  const int best = fastest_candidate(
      stream, 2, output,
      [&](int index, void*, void*) {
        launch(candidates[index]);
        return true;
      },
      &times_ms);
  const AttentionKernel kernel = best < 0 ? table_choice : candidates[best];
  chosen_.emplace(key, kernel);
  log::info(
      "attention forward B {} T {} H {}/{} D {}{}{}: warp-specialised {:.3f} ms, cp.async wgmma "
      "{:.3f} ms a call; runs {}",
      s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, s.window > 0 ? " windowed" : "",
      s.document_start_BT != nullptr ? " documents" : "", times_ms.size() > 0 ? times_ms[0] : 0.0f,
      times_ms.size() > 1 ? times_ms[1] : 0.0f, attention_kernel_name(kernel));
  return kernel;
}

}  // namespace shardtrain::cuda_kernels
