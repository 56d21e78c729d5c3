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
// The adapters run before the base GEMM, which adds its product to theirs in its epilogue
// (Linear): forward writes out = hs @ B^T (+ bias or residual) and the base GEMM accumulates
// into it, and backward writes (or adds to) d(x) and the base's d(x) GEMM accumulates into it.
// The adapters' small GEMMs are memory bound (one side rank-wide), so each of their passes over
// an N x O or N x I tensor costs what a pass of an elementwise op does; they go through
// Ops::lora_linear_*, which take the scale so a backend can fold it into the product. This order
// makes the adapter GEMM write the wide tensor without reading it, and the base GEMM, compute
// bound, reads it for free.
//
// Saved activations: hs = scale * dropout(x) @ A^T (N x S, S = slices x r: 112 columns per
// Llama block with all seven projections, 0.9 MiB a block at 4096 tokens) in the block's slot
// of LoraRun's h_store when there is one (training: DecoderModel), so backward does not
// re-read x for it; without one, backward recomputes it. dropout(x) is regenerated from its
// seed (Ops::dropout), never saved; the rest lives in LoraScratch, shared by every Linear.
//
// Backward (g = d(out), hs = scale * h, Bd the block-diagonal B):
//   dBd = g^T @ hs (its diagonal blocks are the slices' dB);  dh = scale * g @ Bd;
//   dA = dh^T @ dropout(x);  dx = (or +=) dropout'(dh @ A)
#pragma once

#include <cstdint>
#include <memory>
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
  // The block layout (out width, S, then each slice's first output row and height) whose zeros
  // B_OS holds off its diagonal blocks: block_diagonal_B zeroes B_OS only when the layout changes,
  // since its copies write the diagonal blocks alone (every packed q/k/v of a model shares one
  // layout). Empty: B_OS not yet zeroed. Shared by copies, which view the same B_OS.
  std::shared_ptr<std::vector<int64_t>> B_zeroed_layout =
      std::make_shared<std::vector<int64_t>>();

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

  // Where forward saves hs for backward: h_store (flat, the block's store; undefined: none,
  // backward recomputes hs) holds every adapted Linear of the block back to back, this one's
  // (N, S) block at element N x h_first.
  Tensor h_store;
  int64_t h_first = 0;

  bool defined() const { return A_SI.defined(); }
  // out_NO = the adapters' output, + bias_O or + residual_NO when defined (not both; out_NO may
  // alias residual_NO): written before the base GEMM, which then adds its product to it.
  void forward(Ops& ops, Tensor x_NI, Tensor bias_O, Tensor residual_NO, Tensor out_NO) const;
  // grad: the gradient views (A_SI and each slice's B_OR), overwritten or added to
  // (accumulate_grad). dx_NI (when defined) = the adapters' part of d(x), or += with
  // accumulate_dx. Reads x_NI and dout_NO only; hs from forward's h_store when there is one.
  void backward(Ops& ops, const LoraAdapter& grad, bool accumulate_grad, Tensor dout_NO,
                Tensor x_NI, Tensor dx_NI, bool accumulate_dx) const;

 private:
  // hs's (N, S) block in h_store, or undefined when there is none or it does not fit N rows.
  Tensor saved_h(int64_t N) const;
  // hs = scale * dropout(x) @ A^T into h_NS.
  void project(Ops& ops, Tensor xd_NI, Tensor h_NS) const;
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
