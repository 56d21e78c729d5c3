#include "model/layers/lm_head.h"

#include <algorithm>
#include <vector>

namespace shardtrain {

// A chunk holds at most max_logits (by default DecoderModel::kDefaultHeadChunkLogits), so peak
// memory does not grow with tokens x vocab; chunks are as large as that allows because each one
// re-reads and re-writes the whole fp32 lm-head gradient (vocab x hidden) in its weight-gradient
// GEMM: with ~200-row chunks that traffic, not the FLOPs, bounded the head.
int64_t head_chunk_rows(int64_t tokens, int64_t vocab, int64_t max_logits) {
  const int64_t max_rows = std::max<int64_t>(max_logits / std::max<int64_t>(vocab, 1), 1);
  const int64_t chunks = (tokens + max_rows - 1) / max_rows;
  int64_t rows = (tokens + chunks - 1) / chunks;
  if (rows > 128) rows = std::min(max_rows, (rows + 127) / 128 * 128);
  return std::clamp<int64_t>(rows, 1, std::max<int64_t>(tokens, 1));
}

HeadScratch HeadScratch::declare(ActivationPlan& plan, const LayerDims& d, int64_t chunk_rows,
                                 bool softcap) {
  const int64_t N = d.tokens(), C = d.hidden;
  HeadScratch s;
  s.final_norm = RmsNormSaved::declare(plan, ActivationUse::kScratch, N, C);
  s.dxf_NC = plan.take(ActivationUse::kScratch, {N, C});
  s.logits_RV = plan.take(ActivationUse::kHeadLogits, {chunk_rows, d.vocab});
  if (softcap) s.capped_RV = plan.take(ActivationUse::kHeadLogits, {chunk_rows, d.vocab});
  return s;
}

void copy_logits_to_host(Ops& ops, Tensor logits, float* host) {
  if (logits.dtype() == DType::kF32) {
    ops.copy_to_host(host, logits);
    return;
  }
  std::vector<uint16_t> bits(logits.numel());
  ops.copy_to_host(bits.data(), logits);
  convert_to_f32(bits.data(), logits.dtype(), host, bits.size());
}

void LmHead::run(Ops& ops, const RootWeights& root, const RootWeights* grads, bool accumulate_grads,
                 float grad_scale, Tensor last_NC, Tensor targets_N, const HeadScratch& scratch,
                 Tensor loss_sum_1, float* logits_host_NV, Tensor dlast_NC) const {
  const int64_t N = d_.tokens(), C = d_.hidden, V = d_.vocab;
  const RmsNormSaved xf = scratch.final_norm.sized(N, C);
  norm_.forward(ops, root.final_norm, last_NC, xf);
  const bool with_grad = grads != nullptr;
  const Tensor dxf = fit(scratch.dxf_NC, {N, C});
  const Linear head{root.lm_head, Tensor(), false};
  const Linear head_grad{with_grad ? grads->lm_head : Tensor(), Tensor(), false};
  for (int64_t begin = 0; begin < N; begin += chunk_rows_) {
    const int64_t end = std::min(N, begin + chunk_rows_);
    const Tensor logits = fit(scratch.logits_RV, {end - begin, V});
    const Tensor xf_chunk = xf.out_RC.rows(begin, end);
    head.forward(ops, xf_chunk, logits);
    // With a soft cap the loss reads the capped copy and backward the head's output.
    const bool capped = final_softcap_ > 0;
    const Tensor out = capped ? fit(scratch.capped_RV, {end - begin, V}) : logits;
    if (capped) ops.softcap_forward(logits, final_softcap_, out);
    if (logits_host_NV != nullptr) copy_logits_to_host(ops, out, logits_host_NV + begin * V);
    if (loss_sum_1.defined() || with_grad) {
      ops.cross_entropy(out, targets_N.rows(begin, end), grad_scale, loss_sum_1, with_grad);
    }
    if (with_grad) {  // out now holds d(out); logits become d(head output)
      if (capped) ops.softcap_backward(out, logits, final_softcap_, logits);
      head.backward(ops, head_grad, accumulate_grads || begin > 0, logits, xf_chunk,
                    dxf.rows(begin, end), false);
    }
  }
  if (with_grad) {
    norm_.backward(ops, root.final_norm, grads->final_norm, accumulate_grads, dxf, last_NC, xf,
                   dlast_NC, false);
  }
}

void LmHead::last_logits(Ops& ops, const RootWeights& root, Tensor last_NC,
                         const HeadScratch& scratch, float* logits_host_BV) const {
  const int64_t N = d_.tokens(), C = d_.hidden, V = d_.vocab;
  const RmsNormSaved xf = scratch.final_norm.sized(N, C);
  norm_.forward(ops, root.final_norm, last_NC, xf);
  const Tensor logits = fit(scratch.logits_RV, {1, V});
  const Linear head{root.lm_head, Tensor(), false};
  for (int64_t b = 0; b < d_.batch; ++b) {
    const int64_t last = b * d_.seq + d_.seq - 1;
    head.forward(ops, xf.out_RC.rows(last, last + 1), logits);
    if (final_softcap_ > 0) ops.softcap_forward(logits, final_softcap_, logits);
    copy_logits_to_host(ops, logits, logits_host_BV + b * V);
  }
}

}  // namespace shardtrain
