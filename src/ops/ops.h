// Ops: the compute interface the model, the trainer and FSDP are written against.
//
// The model is written once on top of this interface; the CPU backend (ops/cpu, fp32, the
// numerical reference) and the CUDA backend (ops/cuda, bf16 storage with fp32 accumulation)
// implement it. Model code never branches on the backend.
//
// Conventions for every method:
//  - Tensors are contiguous, row-major, and live on `device()`.
//  - Activations use `activation_dtype()`; statistics saved for backward (rstd, lse) and loss
//    accumulators are fp32; token ids and targets are i32.
//  - Shape suffixes: N tokens (B*T flattened), C hidden, V vocab, F intermediate, O/I linear
//    out/in features, B batch, T sequence, H query heads, K kv heads, D head dim.
//  - "accumulates" means the result is added into the output; otherwise the output is
//    overwritten. Parameter gradients always accumulate (for gradient accumulation).
//  - Methods are asynchronous on CUDA (one compute stream); only `copy_to_host` and
//    `read_scalar` synchronise.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/adamw_coefficients.h"
#include "ops/attention_mask.h"

namespace shardtrain {

struct AdamWStep {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;  // decoupled: param -= lr * weight_decay * param
  int64_t step = 1;        // 1-based, for bias correction
  float grad_scale = 1;    // grads are multiplied by this first (clipping, normalisation)
};

// The update's scalars for `step`, shared by every backend. REQUIRES: step.step >= 1.
AdamWCoefficients adamw_coefficients(const AdamWStep& step);

// One contiguous range of a multi-range AdamW update (Ops::adamw_multi).
struct AdamWSegment {
  Tensor param, grad, exp_avg, exp_avg_sq;  // each (n) fp32
  float weight_decay = 0;                   // replaces AdamWStep::weight_decay for this range
  // Optional (n) bf16 or f16: receives the updated param converted (round to nearest), as
  // cast(compute_param, param) after the update would.
  Tensor compute_param;
  bool zero_grad = false;  // grad is zero-filled after it is read
};

// Which FP8 linear a call of Ops::linear_*_fp8 is. id >= 0 names one linear of the model
// (DecoderModel numbers them): the backend keeps its scaling state across calls and scales by
// delayed scaling (each operand's scale from the amax history of that linear's earlier calls,
// the amax of this call taken in the same pass as its cast). id -1: per-tensor current scaling
// (this call's own amax, one extra pass over each operand). same_input_as_previous: x is the
// previous FP8 call's x, unchanged (the MLP's up after gate, in forward and in backward), so
// the backend may reuse its FP8 copies (it checks the pointer and shape too).
// input_kept_in_fp8 (the MLP's down projection, when its input, the SwiGLU product, is saved
// for backward and read by nothing but this linear's backward): swiglu_linear_forward_fp8 may
// leave act_NF holding the backend's FP8 copy of the product for the weight gradient instead
// of its bf16 values, and this site's next linear_backward_fp8 with that same x_NI then reads
// the copy. A backend that keeps nothing (the default) writes and reads bf16 as without it.
struct Fp8Site {
  int64_t id = -1;
  bool same_input_as_previous = false;
  bool input_kept_in_fp8 = false;
};

// One range of a flat tensor that the FP8 all-gather (fsdp/fp8_gather.h) casts with one scale:
// elements [begin, end) of the tensor, scaled by the amax at index `scale` of an amax vector.
struct Fp8Range {
  int64_t begin = 0, end = 0;
  int64_t scale = 0;
};

// The per-head q/k norms of one attention layer (Ops::split_qkv_norm_rope): weights (D) for q
// and k, scaled by weight, or by 1 + weight when one_plus_weight (Gemma).
struct QkNorm {
  Tensor q_weight_D, k_weight_D;
  float eps = 1e-6f;
  bool one_plus_weight = false;
};

class Ops {
 public:
  virtual ~Ops() = default;

  virtual Device device() const = 0;
  virtual DType activation_dtype() const = 0;
  // The trainer calls this once per optimizer step, after the update: the profiling decorator
  // (ops/profiled_ops.h) closes its per-step table there. Backends do nothing.
  virtual void end_step() {}

  // ---- memory ----
  // Raw device allocation; zero-filled. Prefer the RAII `DeviceBuffer` (ops/device_buffer.h).
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* pointer) = 0;
  // Bytes held in DeviceBuffers made through this object, now and at most so far (they call
  // note_buffer). Backend-internal workspaces and the CUDA context are not included.
  size_t buffer_bytes() const { return buffer_bytes_.load(std::memory_order_relaxed); }
  size_t buffer_peak_bytes() const { return buffer_peak_bytes_.load(std::memory_order_relaxed); }
  void note_buffer(size_t bytes, bool allocated) {
    if (!allocated) {
      buffer_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
      return;
    }
    const size_t now = buffer_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    size_t peak = buffer_peak_bytes_.load(std::memory_order_relaxed);
    while (now > peak && !buffer_peak_bytes_.compare_exchange_weak(peak, now)) {
    }
  }
  virtual void copy_from_host(Tensor dst, const void* src) = 0;  // dst.bytes() bytes
  virtual void copy_to_host(void* dst, Tensor src) = 0;          // synchronises
  virtual void fill_zero(Tensor dst) = 0;
  // dst = src converted to dst's dtype (f32 <-> bf16/f16, same element count).
  virtual void cast(Tensor dst, Tensor src) = 0;
  virtual void synchronize() = 0;
  // Seconds the host has spent blocked waiting for the device's queued work (the synchronising
  // calls: copy_to_host, read_scalar, synchronize; and the calls that may wait: copy_from_host
  // from pageable memory, release, the backend's own waits), summed since the backend was made;
  // nullopt for a backend whose ops run on the host (CPU). Over a training step it says who sets
  // the pace: close to the step's time when the device does, near zero when the host cannot queue
  // work as fast as the device runs it (many small ops: a small micro-batch).
  virtual std::optional<double> host_wait_seconds() const { return std::nullopt; }

  // ---- elementwise ----
  virtual void add(Tensor out, Tensor a, Tensor b) = 0;  // out = a + b; out may alias a or b

  // ---- embedding ----
  // out_NC[n] = table_VC[ids_N[n]]. REQUIRES: 0 <= ids < V (checked by the caller on host).
  virtual void embedding_forward(Tensor ids_N, Tensor table_VC, Tensor out_NC) = 0;
  // dtable_VC[ids_N[n]] += dout_NC[n]; accumulates.
  virtual void embedding_backward(Tensor ids_N, Tensor dout_NC, Tensor dtable_VC) = 0;

  // ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight (HF Llama: normalise in fp32) ----
  virtual void rmsnorm_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                               Tensor rstd_N) = 0;
  // dx_NC overwritten (or accumulated when accumulate_dx); dweight_C accumulated when
  // accumulate_dweight, else overwritten (a backward that owns the whole gradient buffer skips
  // zeroing it: see UnitAccess::GradBuffer).
  virtual void rmsnorm_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                                Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                                bool accumulate_dweight) = 0;

  // ---- linear: out_NO = x_NI @ weight_OI^T (+ bias_O when bias_O.defined()) ----
  virtual void linear_forward(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor out_NO) = 0;
  // out_NO = x_NI @ weight_OI^T + residual_NO: the residual stream's add in the GEMM's epilogue
  // (one rounding, no separate pass). out_NO may alias residual_NO.
  virtual void linear_forward_residual(Tensor x_NI, Tensor weight_OI, Tensor residual_NO,
                                       Tensor out_NO) = 0;
  // dx_NI = dout_NO @ weight_OI (overwritten, or accumulated when accumulate_dx; skipped when
  // dx_NI is undefined); dweight_OI += dout_NO^T @ x_NI and dbias_O += sum_n dout_NO (if
  // defined) when accumulate_dweight, else both overwritten (= instead of +=). An undefined
  // dweight_OI means the weight is frozen: no weight-gradient GEMM and no bias gradient run.
  virtual void linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                               Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                               bool accumulate_dweight) = 0;

  // ---- LoRA adapters (model/layers/lora.h): column blocks and dropout ----
  // dst_NY[:, dst_col : dst_col + width] = (or += when accumulate) alpha * src_NX[:, src_col :
  // src_col + width], rows n < N of both. The LoRA path moves a projection's slice of a packed
  // output (q, k or v of the packed q/k/v) and scales by alpha / r with it. src and dst may be
  // the same tensor when src_col == dst_col. REQUIRES: same dtype, same rows.
  virtual void copy_columns(Tensor src_NX, int64_t src_col, Tensor dst_NY, int64_t dst_col,
                            int64_t width, float alpha, bool accumulate) = 0;
  // Inverted dropout with a mask that is a pure function of (seed, element index), so backward
  // regenerates forward's mask instead of saving it: out = (or += when accumulate)
  // x * keep / (1 - p), keep = 0 with probability p (lora_dropout_keep in ops/lora_dropout.h).
  // REQUIRES: 0 <= p < 1; same shape and dtype; out may alias x when not accumulating.
  virtual void dropout(Tensor x, Tensor out, float p, uint64_t seed, bool accumulate) = 0;
  // The adapters' own products: linear_forward(_residual) / linear_backward's contracts for a
  // weight with a rank-wide side (A_SI, B_OS), with alpha (the LoRA scale) folded in, so no pass
  // rescales h or d(h). A backend may run them as memory-bound kernels (CUDA); the defaults
  // (ops.cpp) call linear_* and scale with copy_columns.
  //   forward:  out_NO = alpha * x_NI @ weight_OI^T (+ bias_O) (+ residual_NO; out may alias it)
  //   backward: dx_NI = (or += when accumulate_dx) alpha * dout_NO @ weight_OI (skipped when
  //             undefined); dweight_OI = (or += when accumulate_dweight) dout_NO^T @ x_NI
  //             (unscaled; skipped when undefined).
  // REQUIRES: alpha == 1 with a bias or a residual (forward) or with accumulate_dx (backward);
  // not both a bias and a residual.
  virtual void lora_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                                   Tensor residual_NO, Tensor out_NO);
  virtual void lora_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float alpha,
                                    Tensor dx_NI, Tensor dweight_OI, bool accumulate_dx,
                                    bool accumulate_dweight);

  // ---- packed q/k/v projections with the rotary embedding: one GEMM writes qkv_NX ----
  // X = (H + 2K) * D. Each row of qkv_NX holds that token's q (H*D), then k (K*D), then v (K*D).
  // Copies them to q_NHD, k_NKD and v_NKD, rotating every head of q and k (HF rotate-half
  // convention): for token n at position p = positions_N[n] and pair index i < D/2,
  //   (x[i], x[i+D/2]) <- (x[i] cos - x[i+D/2] sin, x[i+D/2] cos + x[i] sin),
  // with cos/sin = cos_PR/sin_PR[p][i] (R = D/2; fp32 tables built by model/rope). Position 0
  // is the identity (cos 1, sin 0).
  virtual void split_qkv_rope(Tensor qkv_NX, Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                              Tensor q_NHD, Tensor k_NKD, Tensor v_NKD) = 0;
  // The transpose: each row of dqkv_NX (overwritten) becomes (dq rotated by -angle, dk rotated
  // by -angle, dv) of that token; dq, dk and dv are left unchanged.
  virtual void pack_qkv_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD,
                                      Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                                      Tensor dqkv_NX) = 0;

  // ---- packed q/k/v with per-head RMSNorm of q and k before the rotation (Qwen3, Gemma 3) ----
  // Every head row x (D values) of q and k becomes rope(norm(x)): norm(x) = x * r * w with
  // r = 1 / sqrt(mean(x^2) + eps) in fp32, w = weight (rounded as rmsnorm_forward: x * r to the
  // activation dtype, then times the weight) or 1 + weight when one_plus_weight (rounded once,
  // as rmsnorm1p_forward); the normed row is rounded to the activation dtype before the
  // rotation (split_qkv_rope's, at the token's position). Nothing but q_raw and k_raw is needed
  // later: backward recomputes r from them.
  // Splits qkv_NX (split_qkv_rope's layout): q_raw_NHD, k_raw_NKD and v_NKD get the projections
  // as they are, q_NHD and k_NKD the normed and rotated heads.
  virtual void split_qkv_norm_rope(Tensor qkv_NX, const QkNorm& norm, Tensor positions_N,
                                   Tensor cos_PR, Tensor sin_PR, Tensor q_raw_NHD, Tensor k_raw_NKD,
                                   Tensor v_NKD, Tensor q_NHD, Tensor k_NKD) = 0;
  // q_NHD and k_NKD again from q_raw_NHD and k_raw_NKD (what backward remakes for attention's
  // backward instead of keeping them), equal to split_qkv_norm_rope's.
  virtual void qk_norm_rope(Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm,
                            Tensor positions_N, Tensor cos_PR, Tensor sin_PR, Tensor q_NHD,
                            Tensor k_NKD) = 0;
  // The backward: each row of dqkv_NX (overwritten) becomes (dq through the rotation and q's
  // norm, dk likewise, dv) of that token; the norms' weight gradients (sum over rows of
  // d(norm out) * x * r) go to dq_weight_D and dk_weight_D, added when accumulate_dweight, else
  // overwritten. The roundings of the forward pass the gradient straight through (as in
  // rmsnorm_backward). dq, dk, dv, q_raw and k_raw are read only.
  virtual void pack_qkv_norm_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD,
                                           Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm,
                                           Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                                           Tensor dq_weight_D, Tensor dk_weight_D,
                                           bool accumulate_dweight, Tensor dqkv_NX) = 0;

  // ---- grouped-query attention under a mask: query head h reads kv head h / (H / K) ----
  // out_BTHD = softmax(q k^T * scale + mask) v; lse_BHT = log-sum-exp per row (fp32). The mask
  // (ops/attention_mask.h) is causal unless given; a backend that cannot run a mask throws
  // Error saying so.
  void attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale, Tensor out_BTHD,
                         Tensor lse_BHT, const AttentionMask& mask = {}) {
    masked_attention_forward(q_BTHD, k_BTKD, v_BTKD, scale, mask, out_BTHD, lse_BHT);
  }
  // dq, dk, dv overwritten.
  void attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD,
                          Tensor out_BTHD, Tensor lse_BHT, float scale, Tensor dq_BTHD,
                          Tensor dk_BTKD, Tensor dv_BTKD, const AttentionMask& mask = {}) {
    masked_attention_backward(dout_BTHD, q_BTHD, k_BTKD, v_BTKD, out_BTHD, lse_BHT, scale, mask,
                              dq_BTHD, dk_BTKD, dv_BTKD);
  }

  // ---- SwiGLU: out = silu(gate) * up ----
  virtual void swiglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) = 0;
  // dgate, dup overwritten.
  virtual void swiglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                               Tensor dup_NF) = 0;

  // ---- GeGLU with the tanh-approximated GELU (Gemma's gelu_pytorch_tanh): ----
  // out = gelu(gate) * up, gelu(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))).
  // Outputs may alias inputs (each element's inputs are read before it is written).
  virtual void geglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) = 0;
  // dgate, dup overwritten.
  virtual void geglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                              Tensor dup_NF) = 0;

  // ---- RMSNorm scaled by 1 + weight (Gemma): out = x * rstd * (1 + weight) ----
  // Normalised and scaled in fp32 and rounded once (transformers' Gemma3RMSNorm); the rest as
  // rmsnorm_forward / rmsnorm_backward (dweight gets sum dy * x * rstd, as d(1 + w) / dw = 1).
  virtual void rmsnorm1p_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                                 Tensor rstd_N) = 0;
  virtual void rmsnorm1p_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                                  Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                                  bool accumulate_dweight) = 0;

  // ---- logit soft-capping: out = cap * tanh(x / cap) (Gemma's final_logit_softcapping) ----
  // REQUIRES: cap > 0; same shape and dtype. out may alias x.
  virtual void softcap_forward(Tensor x, float cap, Tensor out) = 0;
  // dx = dout * (1 - tanh(x / cap)^2), from the capped op's input x; dx may alias dout or x.
  virtual void softcap_backward(Tensor dout, Tensor x, float cap, Tensor dx) = 0;

  // x *= factor, in place (Gemma's embedding scale, forward and backward).
  virtual void scale(Tensor x, float factor) = 0;

  // ---- mixture of experts (model/layers/moe_mlp.h): routing, permutation, grouped GEMMs ----
  // M = N * k rows: each token once per expert it is routed to, grouped by expert (dropless).
  // Routing (transformers' Qwen3-MoE and Mixtral routers): p = softmax(logits_NE) in fp32, the
  // k largest p (ties: the lower expert first) into expert_NK (i32, descending) and weight_NK
  // (f32), divided by their sum when renormalize (Mixtral's softmax over the top-k logits is the
  // same). prob_sum_E (f32, optional) += sum over tokens of p: the aux loss's router mass.
  virtual void moe_route(Tensor logits_NE, bool renormalize, Tensor expert_NK, Tensor weight_NK,
                         Tensor prob_sum_E) = 0;
  // dlogits_NE (activation dtype, overwritten) from dweight_NK (f32) through the routing above,
  // plus, when aux_grad_E (f32, per-expert d loss / d p) is defined, p's gradient aux_grad_E
  // on every row (the load-balancing loss).
  virtual void moe_route_backward(Tensor dweight_NK, Tensor logits_NE, Tensor expert_NK,
                                  Tensor weight_NK, bool renormalize, Tensor aux_grad_E,
                                  Tensor dlogits_NE) = 0;
  // Groups the N*k (token, slot) pairs by expert, stably (token order within an expert):
  // source_M[m] = n * k + slot of sorted row m; row_NK[n * k + slot] = its sorted row. Returns
  // the rows per expert (E entries) on the host; synchronises.
  virtual std::vector<int64_t> moe_dispatch(Tensor expert_NK, int64_t experts, Tensor source_M,
                                            Tensor row_NK) = 0;
  // x_MC[m] = x_NC[source_M[m] / k] (k = M / N).
  virtual void moe_gather(Tensor x_NC, Tensor source_M, Tensor x_MC) = 0;
  // dx_NC[n] = (or += when accumulate) sum over slots of dx_MC[row_NK[n, slot]].
  virtual void moe_gather_backward(Tensor dx_MC, Tensor row_NK, Tensor dx_NC, bool accumulate) = 0;
  // out_NC[n] = residual_NC[n] + sum over slots of weight_NK[n, slot] * y_MC[row_NK[n, slot]];
  // out may alias residual.
  virtual void moe_combine(Tensor y_MC, Tensor row_NK, Tensor weight_NK, Tensor residual_NC,
                           Tensor out_NC) = 0;
  // dy_MC[row_NK[n, s]] = weight_NK[n, s] * dout_NC[n]; dweight_NK[n, s] = <dout_NC[n],
  // y_MC[row_NK[n, s]]> (f32). Both overwritten.
  virtual void moe_combine_backward(Tensor dout_NC, Tensor y_MC, Tensor row_NK, Tensor weight_NK,
                                    Tensor dy_MC, Tensor dweight_NK) = 0;
  // Grouped linear over experts: rows [r_e, r_e + rows_E[e]) of x_MI (r_e = the rows of the
  // experts before e) times weight_EOI[e]^T into the same rows of out_MO. One launch for all
  // experts on CUDA. rows_E: moe_dispatch's host counts.
  virtual void grouped_linear_forward(Tensor x_MI, Tensor weight_EOI,
                                      const std::vector<int64_t>& rows_E, Tensor out_MO) = 0;
  // Per expert, linear_backward's contract: dx_MI (overwritten, or += when accumulate_dx) and
  // dweight_EOI[e] (overwritten, or += when accumulate_dweight; an expert without rows gets
  // zero, or is left as it is).
  virtual void grouped_linear_backward(Tensor dout_MO, Tensor x_MI, Tensor weight_EOI,
                                       const std::vector<int64_t>& rows_E, Tensor dx_MI,
                                       Tensor dweight_EOI, bool accumulate_dx,
                                       bool accumulate_dweight) = 0;

  // ---- cross-entropy over one chunk of logits, fp32 internally ----
  // Rows with targets_N[n] == -100 are ignored. loss_sum_1 (f32 [1]) += sum of -log p(target)
  // over the other rows. When compute_grad, logits_NV is overwritten with
  // dlogits = (softmax - onehot) * grad_scale (zero rows for ignored targets).
  virtual void cross_entropy(Tensor logits_NV, Tensor targets_N, float grad_scale,
                             Tensor loss_sum_1, bool compute_grad) = 0;

  // ---- optimizer and norms over fp32 buffers ----
  // AdamW (torch.optim.AdamW's single-tensor formula) on every segment: its param, exp_avg and
  // exp_avg_sq updated in place from its grad (all fp32, same n) with the segment's
  // weight_decay, then the param cast into its compute_param and its grad zeroed where asked;
  // the result equals the backends' one-range adamw (not in this interface), cast and fill_zero
  // per segment, bit for bit. CUDA: one launch for all segments. REQUIRES: segments do not
  // overlap.
  virtual void adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step) = 0;
  // out_1 (f32 [1]) += sum(x^2), x fp32.
  virtual void sum_squares(Tensor x, Tensor out_1) = 0;
  // sum_squares enqueued aside: it may run beside the ops enqueued after it (CUDA: a second
  // stream, ordered after every op enqueued so far, whose small blocks fill the SMs the compute
  // stream's kernels leave idle), so a reduction that is off the critical path (a unit's gradient
  // norm term, once its gradient is final) costs little. Until join_aside(), x must not be
  // written and out_1 neither read nor written by other ops; the synchronising calls
  // (copy_to_host, read_scalar, synchronize) join first. Default: sum_squares, in order.
  virtual void sum_squares_aside(Tensor x, Tensor out_1) { sum_squares(x, out_1); }
  // Every op enqueued after this runs after the work enqueued aside so far.
  virtual void join_aside() {}
  // Whether the *_aside ops really run beside the compute stream (CUDA with SHARDTRAIN_OPS_ASIDE
  // on); false: they run in order, and their tickets mean nothing.
  virtual bool runs_aside() const { return false; }
  // adamw_multi enqueued aside, ordered after every op enqueued so far, so the ops enqueued after
  // it (the next step's forward) may run beside it; returns a ticket for wait_aside. Until that
  // wait (or a join), no other op may touch the segments' tensors. Default: adamw_multi, in order.
  virtual int64_t adamw_multi_aside(const std::vector<AdamWSegment>& segments,
                                    const AdamWStep& step) {
    adamw_multi(segments, step);
    return 0;
  }
  // Every op enqueued after this runs after the aside work enqueued up to `ticket` (a ticket from
  // adamw_multi_aside; older tickets are covered by newer ones).
  virtual void wait_aside(int64_t ticket) { (void)ticket; }
  // Reads one fp32 scalar to the host; synchronises.
  virtual float read_scalar(Tensor x_1) = 0;

  // ---- FP8 linears (train.precision = "fp8": model/layers/linear.h) ----
  // "" when this backend runs the FP8 linears below, else one sentence saying why not (the
  // trainer refuses train.precision = "fp8" with it). Default: no FP8 (CUDA on compute
  // capability 8.9+ overrides).
  virtual std::string fp8_unsupported_reason() const;
  // out_NO = x_NI @ weight_OI^T (+ bias_O) (+ residual_NO when defined; out may alias it) with
  // the GEMM in FP8: x and weight quantised to e4m3 with per-tensor scales (scale = fp8_max /
  // amax: current or delayed as `site` says), fp32 accumulation, bf16 out. Shapes the FP8 GEMM
  // cannot run compute as linear_forward(_residual). REQUIRES: no bias with a residual.
  // Default: throws Error(fp8_unsupported_reason()).
  virtual void linear_forward_fp8(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor residual_NO,
                                  Tensor out_NO, Fp8Site site);
  // linear_backward's contract with both GEMMs in FP8 (dout quantised to e5m2, weight and x to
  // e4m3, per-tensor scales as `site` says); the bias gradient is dout's column sum as in bf16.
  // With site.input_kept_in_fp8, x_NI may hold what swiglu_linear_forward_fp8 left in its act_NF
  // for this site (Fp8Site): the backend then reads that copy, once (the next forward writes a
  // new one).
  virtual void linear_backward_fp8(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                                   Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                                   bool accumulate_dweight, Fp8Site site);
  // The MLP's backward from SwiGLU's output gradient to x with gate and up both FP8 linears
  // (unbiased, no adapters, trained): swiglu_backward(dact_NF, gate_NF, up_NF) into dgate_NF and
  // dup_NF, then gate's linear_backward_fp8 (dx_NC overwritten) and up's (dx_NC added to), the
  // weight gradients overwritten or added to as accumulate_dweight says. This default runs
  // exactly that; CUDA writes SwiGLU's gradients straight to FP8 (both layouts, delayed scales)
  // once both sites have a history, and then leaves dgate_NF and dup_NF unwritten.
  virtual void swiglu_linears_backward_fp8(Tensor dact_NF, Tensor gate_NF, Tensor up_NF,
                                           Tensor x_NC, Tensor gate_weight_FC, Tensor up_weight_FC,
                                           Tensor dgate_NF, Tensor dup_NF, Tensor dx_NC,
                                           Tensor dgate_weight_FC, Tensor dup_weight_FC,
                                           bool accumulate_dweight, Fp8Site gate_site,
                                           Fp8Site up_site);
  // The MLP's SwiGLU and its down projection, an unbiased FP8 linear: swiglu_forward(gate_NF,
  // up_NF) into act_NF, then linear_forward_fp8(act_NF, weight_CF, no bias, residual_NC, out_NC,
  // site). This default runs exactly that; CUDA casts act to FP8 inside the SwiGLU kernel (the
  // site's delayed scale) once the site has a history, instead of in a second pass over act_NF
  // (which it still writes, unless site.input_kept_in_fp8: then act_NF's bytes hold the
  // product's FP8 transposed copy and its scale, which down's linear_backward_fp8 reads).
  virtual void swiglu_linear_forward_fp8(Tensor gate_NF, Tensor up_NF, Tensor act_NF,
                                         Tensor weight_CF, Tensor residual_NC, Tensor out_NC,
                                         Fp8Site site);

  // ---- FP8 all-gather (fp8.all_gather: fsdp/fp8_gather.h) ----
  // Weights cast to e4m3 per range with one per-tensor scale each (core/fp8_e4m3.h: scale =
  // fp8_gather_scale(amax), round to nearest even, saturating), and back. Every backend gives the
  // same bytes and values bit for bit. amax_S: f32, one entry per scale index.
  // amax_S[r.scale] = max(amax_S[r.scale], max |x[r.begin, r.end)|) for each range (NaN ignored);
  // x: f32 or bf16. Ranges sharing a scale may come in one call.
  virtual void fp8_range_amax(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S) = 0;
  // bytes_u8[i] = e4m3(x[i] * fp8_gather_scale(amax_S[r.scale])) for i in each range; other bytes
  // untouched. x: f32 or bf16; bytes_u8: u8, at least as many elements as x.
  virtual void fp8_range_quantize(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                                  Tensor bytes_u8) = 0;
  // out[i] = e4m3_to_f32(bytes_u8[i]) * (1 / fp8_gather_scale(amax_S[r.scale])), rounded to out's
  // dtype (f32 or bf16), for i in each range; other elements untouched.
  virtual void fp8_range_dequantize(Tensor bytes_u8, const std::vector<Fp8Range>& ranges,
                                    Tensor amax_S, Tensor out) = 0;

 protected:
  // What attention_forward / attention_backward run (the causal default lives in one place).
  virtual void masked_attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale,
                                        const AttentionMask& mask, Tensor out_BTHD,
                                        Tensor lse_BHT) = 0;
  virtual void masked_attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD,
                                         Tensor v_BTKD, Tensor out_BTHD, Tensor lse_BHT,
                                         float scale, const AttentionMask& mask, Tensor dq_BTHD,
                                         Tensor dk_BTKD, Tensor dv_BTKD) = 0;

 private:
  std::atomic<size_t> buffer_bytes_{0}, buffer_peak_bytes_{0};
};

}  // namespace shardtrain
