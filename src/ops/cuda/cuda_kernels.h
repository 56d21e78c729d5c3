// Kernel launchers of the CUDA backend, one group per .cu file. These are the raw-pointer layer
// below CudaOps: CudaOps (cuda_ops*.cpp) checks shapes and dtypes of its Tensors, then calls
// these. Everything here is asynchronous on `stream` and depends on no fmt, so that nvcc never
// sees the format-checking headers.
//
// Float-like dtypes are f32 or bf16 unless a comment says otherwise; a launcher given another
// dtype aborts with file:line. All shapes are row-major and contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "ops/adamw_coefficients.h"

namespace shardtrain::cuda_kernels {

// ---- cuda_lora.cu: LoRA column blocks and dropout (ops/ops.h copy_columns, dropout) ----
void copy_columns(DType dtype, const void* src, int64_t src_stride, int64_t src_col, void* dst,
                  int64_t dst_stride, int64_t dst_col, int64_t rows, int64_t width, float alpha,
                  bool accumulate, cudaStream_t stream);
void dropout(DType dtype, const void* x, void* out, int64_t n, float p, uint64_t seed,
             bool accumulate, cudaStream_t stream);

// ---- cuda_elementwise.cu ----
// out = a + b; all three of `dtype`; out may alias a or b.
void add(DType dtype, void* out, const void* a, const void* b, int64_t n, cudaStream_t stream);
// x *= factor.
void scale(DType dtype, void* x, float factor, int64_t n, cudaStream_t stream);
// dst = src converted; one side f32, the other f32, bf16 or f16 (same dtype: a copy).
void cast(DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n,
          cudaStream_t stream);

// ---- cuda_optim.cu ----
// Per-element coefficients of torch.optim.AdamW, formed on the host in double (as Python does).
using AdamWCoefficients = ::shardtrain::AdamWCoefficients;  // ops/adamw_coefficients.h
void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWCoefficients& coefficients, cudaStream_t stream);
// *out += sum(x^2), fp32.
void sum_squares(const float* x, int64_t n, float* out, cudaStream_t stream);
// The same sum in many short blocks (16 float4 loads a thread, one atomic a block): work that
// runs beside another stream's kernels takes SMs a few microseconds at a time.
void sum_squares_in_small_blocks(const float* x, int64_t n, float* out, cudaStream_t stream);

// One range of adamw_multi (ops/ops.h AdamWSegment as raw pointers).
struct AdamWRange {
  float* param;
  float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  void* compute_param;  // null: none; else compute_dtype (bf16 or f16)
  DType compute_dtype;
  int64_t numel;
  float weight_decay;
  bool zero_grad;
};

// Runs adamw_multi in one kernel launch over all ranges, with the per-range work table in device
// memory. A training step repeats the same ranges every step, so each distinct table is uploaded
// once (one cudaMemcpyAsync from pinned memory it keeps, no host wait) and kept: the whole-model
// update has one table, an update per unit in backward (fsdp/fsdp_units.h update_in_backward)
// one per unit, all reused every step. Past kMaxTables distinct tables the cache is emptied
// (after one stream synchronisation). The per-step scalars (lr, step) travel as kernel arguments.
class AdamWMultiLauncher {
 public:
  AdamWMultiLauncher() = default;
  ~AdamWMultiLauncher();
  AdamWMultiLauncher(const AdamWMultiLauncher&) = delete;
  AdamWMultiLauncher& operator=(const AdamWMultiLauncher&) = delete;

  // `coefficients` from adamw_coefficients (its decay is ignored: each range forms its own from
  // lr and its weight_decay). REQUIRES: ranges do not overlap. Launches may use several streams
  // (a table is uploaded on the stream of its first launch; a later launch of the same table on
  // another stream must be ordered after that one).
  // short_blocks: a block per 4096 elements (work beside another stream's kernels) instead of
  // a grid of resident blocks that loop over them.
  void launch(const AdamWRange* ranges, int count, float lr, const AdamWCoefficients& coefficients,
              cudaStream_t stream, bool short_blocks = false);

 private:
  struct Table {
    std::vector<unsigned char> bytes;  // the work table, as uploaded
    int count = 0;
    int64_t tiles = 0;
    void* pinned = nullptr;  // host staging of the upload (never rewritten: no wait for the copy)
    void* device = nullptr;  // the table the kernel reads
  };
  static constexpr size_t kMaxTables = 256;
  // The cached table equal to `bytes`, uploaded on `stream` first if there is none.
  const Table& table_for(std::vector<unsigned char> bytes, int count, int64_t tiles,
                         cudaStream_t stream);
  void release_tables();

  std::vector<Table> tables_;
  size_t last_ = 0;  // the table of the last launch (the next one is looked at first)
};

// ---- cuda_reduce.cu ----
// Scratch floats that column_sums needs for a rows x cols input.
size_t column_sums_scratch_floats(int64_t rows, int64_t cols);
// out_C += (accumulate) or = (not) the sum over rows of in_RC, in fp32 with a deterministic
// two-stage reduction.
void column_sums(DType in_dtype, const void* in_RC, int64_t rows, int64_t cols, DType out_dtype,
                 void* out_C, bool accumulate, float* scratch, cudaStream_t stream);
// out_C += (accumulate) or = (not) the sum over p of partials_PC (fp32), one thread per column,
// fixed order.
void accumulate_partials(const float* partials_PC, int64_t parts, int64_t cols, DType out_dtype,
                         void* out_C, bool accumulate, cudaStream_t stream);

// ---- cuda_embedding.cu ----
// out_NC[n] = table_VC[ids_N[n]]. REQUIRES: 0 <= ids < V (the caller checks on the host).
void embedding_forward(const int32_t* ids_N, int64_t tokens, DType table_dtype,
                       const void* table_VC, int64_t channels, DType out_dtype, void* out_NC,
                       cudaStream_t stream);
// dtable_VC[ids_N[n]] += dout_NC[n] with fp32 (or bf16) atomic adds.
void embedding_backward(const int32_t* ids_N, int64_t tokens, DType dout_dtype, const void* dout_NC,
                        int64_t channels, DType dtable_dtype, void* dtable_VC, cudaStream_t stream);

// ---- cuda_rmsnorm.cu ----
void rmsnorm_forward(DType x_dtype, const void* x_NC, DType weight_dtype, const void* weight_C,
                     float eps, int64_t rows, int64_t channels, DType out_dtype, void* out_NC,
                     float* rstd_N, cudaStream_t stream);
size_t rmsnorm_backward_scratch_floats(int64_t rows, int64_t channels);
// dx overwritten or accumulated (accumulate_dx); dweight likewise (accumulate_dweight). dout,
// x, dx share `act_dtype`; dx may alias dout.
void rmsnorm_backward(DType act_dtype, const void* dout_NC, const void* x_NC, DType weight_dtype,
                      const void* weight_C, const float* rstd_N, int64_t rows, int64_t channels,
                      void* dx_NC, bool accumulate_dx, DType dweight_dtype, void* dweight_C,
                      bool accumulate_dweight, float* scratch, cudaStream_t stream);

// ---- cuda_rmsnorm1p.cu ---- (out = x * rstd * (1 + weight), fp32 math rounded once; the
// rest as rmsnorm_forward / rmsnorm_backward)
void rmsnorm1p_forward(DType x_dtype, const void* x_NC, DType weight_dtype, const void* weight_C,
                       float eps, int64_t rows, int64_t channels, DType out_dtype, void* out_NC,
                       float* rstd_N, cudaStream_t stream);
size_t rmsnorm1p_backward_scratch_floats(int64_t rows, int64_t channels);
void rmsnorm1p_backward(DType act_dtype, const void* dout_NC, const void* x_NC, DType weight_dtype,
                        const void* weight_C, const float* rstd_N, int64_t rows, int64_t channels,
                        void* dx_NC, bool accumulate_dx, DType dweight_dtype, void* dweight_C,
                        bool accumulate_dweight, float* scratch, cudaStream_t stream);

// ---- cuda_geglu.cu ---- (tanh GELU; all tensors of `dtype`; outputs may alias inputs)
void geglu_forward(DType dtype, const void* gate, const void* up, void* out, int64_t n,
                   cudaStream_t stream);
void geglu_backward(DType dtype, const void* dout, const void* gate, const void* up, void* dgate,
                    void* dup, int64_t n, cudaStream_t stream);

// ---- cuda_softcap.cu ---- (out = cap * tanh(x / cap); outputs may alias inputs)
void softcap_forward(DType dtype, const void* x, float cap, void* out, int64_t n,
                     cudaStream_t stream);
void softcap_backward(DType dtype, const void* dout, const void* x, float cap, void* dx, int64_t n,
                      cudaStream_t stream);

// ---- cuda_rope.cu ----
// Rotates token n's `heads` heads read at src + n * src_row and writes them at dst + n * dst_row
// (elements); direction +1 rotates by +angle (forward), -1 by -angle (backward). REQUIRES:
// 0 <= positions < P (the caller's tables cover every position).
void rope_rows(DType dtype, const void* src, int64_t src_row, void* dst, int64_t dst_row,
               const int32_t* positions_N, int64_t tokens, int64_t heads, int64_t head_dim,
               const float* cos_PR, const float* sin_PR, float direction, cudaStream_t stream);

// Packed q/k/v rows [tokens, (q_heads + 2 kv_heads) * head_dim] <-> q, k, v [tokens, heads,
// head_dim] in one pass, rope applied to q and k: to_packed = false splits with direction +1
// (forward), true packs with -1 (backward). Returns false, doing nothing, unless the tensors are
// bf16, head_dim / 2 is a multiple of 8 and every base is 16-byte aligned (callers then use
// rope_rows and a copy).
bool rope_qkv_packed(DType dtype, void* packed, void* q, void* k, void* v,
                     const int32_t* positions_N, int64_t tokens, int64_t q_heads, int64_t kv_heads,
                     int64_t head_dim, const float* cos_PR, const float* sin_PR, bool to_packed,
                     cudaStream_t stream);

// ---- cuda_qk_norm_rope.cu ---- (per-head RMSNorm of q and k fused with the packed split and
// rope: ops/ops.h split_qkv_norm_rope, qk_norm_rope, pack_qkv_norm_rope_backward; activations
// f32 or bf16, weights and weight gradients f32 or bf16)
struct QkNormRope {
  int64_t tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  const int32_t* positions_N = nullptr;  // REQUIRES: 0 <= positions < the tables' rows
  const float* cos_PR = nullptr;         // (positions, head_dim / 2)
  const float* sin_PR = nullptr;
  DType weight_dtype = DType::kF32;
  const void* q_weight_D = nullptr;
  const void* k_weight_D = nullptr;
  float eps = 1e-6f;
  bool one_plus_weight = false;
};
// packed (tokens, (q_heads + 2 kv_heads) * head_dim) -> q_raw, k_raw, v (copies) and q, k
// (normed and rotated), one pass.
void split_qkv_norm_rope(DType dtype, const QkNormRope& shape, const void* packed, void* q_raw,
                         void* k_raw, void* v, void* q, void* k, cudaStream_t stream);
// q, k (normed and rotated) from q_raw, k_raw: bit for bit split_qkv_norm_rope's.
void qk_norm_rope(DType dtype, const QkNormRope& shape, const void* q_raw, const void* k_raw,
                  void* q, void* k, cudaStream_t stream);
size_t qk_norm_rope_backward_scratch_floats(const QkNormRope& shape);
// packed (overwritten) = (dq, dk through the rotation and the norms, dv); dq_weight_D and
// dk_weight_D (of dweight_dtype) += or = the norms' weight gradients (a fixed-order reduction
// of per-block partials in scratch: deterministic).
void pack_qkv_norm_rope_backward(DType dtype, const QkNormRope& shape, const void* dq,
                                 const void* dk, const void* dv, const void* q_raw,
                                 const void* k_raw, DType dweight_dtype, void* dq_weight_D,
                                 void* dk_weight_D, bool accumulate_dweight, void* packed,
                                 float* scratch, cudaStream_t stream);

// ---- cuda_swiglu.cu ---- (all tensors of `dtype`; outputs may alias inputs)
void swiglu_forward(DType dtype, const void* gate, const void* up, void* out, int64_t n,
                    cudaStream_t stream);
void swiglu_backward(DType dtype, const void* dout, const void* gate, const void* up, void* dgate,
                     void* dup, int64_t n, cudaStream_t stream);

// ---- cuda_attention.cu ----
// The shape of one attention call and its mask (ops/attention_mask.h), which every attention
// kernel reads: causal, plus a sliding window of `window` keys when window > 0, plus document
// boundaries when document_start_BT is set (device i32 (batch, seq): where each token's document
// begins; never decreasing along a sequence). document_end_BT (one past the last token of each
// token's document) is what the backward's key-major loops need; the backward launchers derive it
// from the starts into their scratch (attention_document_ends), so callers leave it null.
// logit_softcap > 0 (Gemma's attn_logit_softcapping) soft-caps each scaled score x to
// cap * tanh(x / cap) before the mask and softmax; only the mma.sync and SIMT kernels apply it
// (the dispatch table, cuda_dispatch.h, sends capped shapes there).
struct AttentionShape {
  int batch, seq, heads, kv_heads, head_dim;
  int window = 0;
  const int32_t* document_start_BT = nullptr;
  const int32_t* document_end_BT = nullptr;
  float logit_softcap = 0;  // 0: none
};
// ---- cuda_attention_mask.cu ----
// end_BT[b][t] = one past the last position of t's document (the first q > t whose document
// starts after t, or seq). REQUIRES: start_BT[b][t] <= t, never decreasing along t.
void attention_document_ends(const int32_t* start_BT, int batch, int seq, int32_t* end_BT,
                             cudaStream_t stream);
// Floats of scratch the backward launchers add for document_end_BT (0 without documents).
size_t attention_mask_scratch_floats(const AttentionShape& shape);
// REQUIRES: head_dim even and <= 128; heads % kv_heads == 0.
void attention_forward(DType dtype, const void* q_BTHD, const void* k_BTKD, const void* v_BTKD,
                       float scale, const AttentionShape& shape, void* out_BTHD, float* lse_BHT,
                       cudaStream_t stream);
size_t attention_backward_scratch_floats(const AttentionShape& shape);
void attention_backward(DType dtype, const void* dout_BTHD, const void* q_BTHD, const void* k_BTKD,
                        const void* v_BTKD, const void* out_BTHD, const float* lse_BHT, float scale,
                        const AttentionShape& shape, void* dq_BTHD, void* dk_BTKD, void* dv_BTKD,
                        float* scratch, cudaStream_t stream);

// ---- cuda_attention_tc_forward.cu, cuda_attention_tc_backward.cu ---- (tensor-core flash
// attention, mma.sync or, on Hopper, wgmma; same contract as above)
struct AttentionConfig;  // cuda_dispatch.h: the kernel, warps and stages the table chose
// REQUIRES: config from attention_forward_config (kernel mma.sync or wgmma: bf16, head dim 64
// or 128); all tensors bf16 except lse (fp32).
void flash_attention_forward(const AttentionConfig& config, const void* q_BTHD, const void* k_BTKD,
                             const void* v_BTKD, float scale, const AttentionShape& shape,
                             void* out_BTHD, float* lse_BHT, cudaStream_t stream);
// Scratch: delta (B*H*T, padded to 4) then an fp32 dq accumulator (B*T*H*D).
size_t flash_attention_backward_scratch_floats(const AttentionShape& shape);
// REQUIRES: config from attention_backward_config (mma.sync or wgmma).
void flash_attention_backward(const AttentionConfig& config, const void* dout_BTHD,
                              const void* q_BTHD, const void* k_BTKD, const void* v_BTKD,
                              const void* out_BTHD, const float* lse_BHT, float scale,
                              const AttentionShape& shape, void* dq_BTHD, void* dk_BTKD,
                              void* dv_BTKD, float* scratch, cudaStream_t stream);

// ---- cuda_cross_entropy.cu ----
// One block per row. REQUIRES: targets in [0, V) or -100. loss_sum_1 may be null (no loss).
void cross_entropy(DType dtype, void* logits_NV, const int32_t* targets_N, int64_t rows,
                   int64_t vocab, float grad_scale, float* loss_sum_1, bool compute_grad,
                   cudaStream_t stream);

}  // namespace shardtrain::cuda_kernels
