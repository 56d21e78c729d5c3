// LoRA: a low-rank adapter on a Linear (model/layers/linear.h), as PEFT computes it:
//   out_NO += scale * dropout(x_NI) @ A^T @ B^T      A (r, I), B (O, r), scale = alpha / r
// A Linear that packs several projections (q, k and v: one (Oq + Ok + Ov, I) weight) has one
// adapter per targeted projection, each writing its own block of output columns; their A
// matrices lie back to back (A_SI, S = slices x r rows), so one GEMM computes every slice's
// h = x @ A^T. Their B matrices are laid into one block-diagonal (O, S) matrix (slice s's B in
// its output rows and its r columns, zeros elsewhere), so one GEMM adds every slice's output
// into the packed output and one GEMM gives every slice's d(h) and d(B): the zeros cost
// O x S x N multiply-adds (S = 3 x 16 against O = 6144: nothing), where per-slice GEMMs and
// column copies cost several passes over N x O.
//
// Saved activations: none. Backward recomputes h = dropout(x) @ A^T from the input x (which
// the base Linear's backward reads anyway) and regenerates the dropout mask from its seed
// (Ops::dropout), so LoRA adds no per-block activation memory, only LoraScratch, shared by
// every Linear.
//
// Backward (g = d(out), hs = scale * h, Bd the block-diagonal B):
//   dBd = g^T @ hs (its diagonal blocks are the slices' dB);  dh = scale * g @ Bd;
//   dA = dh^T @ dropout(x);  dx += dropout'(dh @ A)
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/layers/activation_plan.h"
#include "model/layers/layer_dims.h"
#include "ops/ops.h"

namespace shardtrain {

// Scratch every LoRA Linear shares (one Linear runs at a time), sized for the largest.
struct LoraScratch {
  Tensor h_NS, dh_NS;    // x @ A^T of every slice, and its gradient (S = slices x r)
  Tensor B_OS, dB_OS;    // a packed Linear's block-diagonal B, and its gradient
  Tensor xd_NI, dxd_NI;  // dropout(x) and d(dropout(x)); declared only with dropout > 0

  // rank: r; max_slices: the most slices one Linear has (3 for q/k/v); packed_width: the
  // output width of the packed Linear with adapters (0: none); max_in: the widest input (I).
  static LoraScratch declare(ActivationPlan& plan, int64_t tokens, int64_t rank, int64_t max_slices,
                             int64_t packed_width, int64_t max_in, bool dropout);
};

struct LoraSlice {
  Tensor B_OR;          // (O_s, r); in a gradient view, that of B
  int64_t out_col = 0;  // the first output column of the Linear this slice writes
};

struct LoraAdapter {
  Tensor A_SI;                    // (slices x r, I); in a gradient view, that of A
  std::vector<LoraSlice> slices;  // in A_SI's row order
  int64_t rank = 0;
  float scale = 0;
  float dropout = 0;          // 0 in evaluation
  uint64_t dropout_seed = 0;  // this Linear's mask in this micro-batch
  const LoraScratch* scratch = nullptr;

  bool defined() const { return A_SI.defined(); }
  // out_NO (the base output, written) += the adapters' output.
  void forward(Ops& ops, Tensor x_NI, Tensor out_NO) const;
  // grad: the gradient views (A_SI and each slice's B_OR). dx_NI (when defined) += the adapters'
  // part of d(x); grads overwritten or added to (accumulate_grad).
  void backward(Ops& ops, const LoraAdapter& grad, bool accumulate_grad, Tensor dout_NO,
                Tensor x_NI, Tensor dx_NI) const;

 private:
  // dropout(x) (x itself without dropout).
  Tensor dropped_input(Ops& ops, Tensor x_NI) const;
  // The block-diagonal B of a packed Linear with out_width output columns, in scratch.
  Tensor block_diagonal_B(Ops& ops, int64_t out_width) const;
  // The single slice covers every output column: no column copies.
  bool whole_output(Tensor out_NO) const {
    return slices.size() == 1 && slices[0].out_col == 0 && slices[0].B_OR.dim(0) == out_NO.dim(1);
  }
};

}  // namespace shardtrain
