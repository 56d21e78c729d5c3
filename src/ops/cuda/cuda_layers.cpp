// CudaOps layer ops: shape and dtype checks, the kernel variant from the dispatch table
// (cuda_dispatch.h) where an op has several, then the kernel launchers of cuda_kernels.h.
// Kernels live one family per .cu file (cuda_embedding, cuda_rmsnorm, cuda_rope, cuda_swiglu,
// cuda_attention, cuda_cross_entropy).
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "ops/cuda/cuda_attention_tuning.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_checks.h"
#include "ops/ops_switches.h"

namespace shardtrain {
namespace {

using op_checks::row_count;
using op_checks::row_width;

void require_cuda(const Tensor& t, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda, "{} is a {} tensor, want cuda", what,
                   device_name(t.device()));
}
void require_float(const Tensor& t, const char* what) {
  require_cuda(t, what);
  SHARDTRAIN_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
                   "{} is {}, want bf16 or f32", what, dtype_name(t.dtype()));
}
void require_dtype(const Tensor& t, DType dtype, const char* what) {
  require_cuda(t, what);
  SHARDTRAIN_CHECK(t.dtype() == dtype, "{} is {}, want {}", what, dtype_name(t.dtype()),
                   dtype_name(dtype));
}
using op_checks::require_same_numel;

cuda_kernels::AttentionShape attention_shape(const Tensor& q_BTHD, const Tensor& k_BTKD,
                                             const Tensor& v_BTKD) {
  SHARDTRAIN_CHECK(q_BTHD.shape().rank() == 4 && k_BTKD.shape().rank() == 4,
                   "attention wants q [B,T,H,D] and k [B,T,K,D], got {} and {}",
                   q_BTHD.shape().to_string(), k_BTKD.shape().to_string());
  cuda_kernels::AttentionShape s;
  s.batch = static_cast<int>(q_BTHD.dim(0));
  s.seq = static_cast<int>(q_BTHD.dim(1));
  s.heads = static_cast<int>(q_BTHD.dim(2));
  s.head_dim = static_cast<int>(q_BTHD.dim(3));
  s.kv_heads = static_cast<int>(k_BTKD.dim(2));
  SHARDTRAIN_CHECK(k_BTKD.shape() == Shape({s.batch, s.seq, s.kv_heads, s.head_dim}) &&
                       v_BTKD.shape() == k_BTKD.shape() && s.kv_heads > 0 &&
                       s.heads % s.kv_heads == 0,
                   "attention: q {}, k {}, v {}", q_BTHD.shape().to_string(),
                   k_BTKD.shape().to_string(), v_BTKD.shape().to_string());
  SHARDTRAIN_CHECK(s.head_dim % 2 == 0 && (s.head_dim <= 128 || s.head_dim == 256),
                   "CUDA attention supports even head dims up to 128, and 256, got {}", s.head_dim);
  require_float(q_BTHD, "attention q");
  SHARDTRAIN_CHECK(k_BTKD.dtype() == q_BTHD.dtype() && v_BTKD.dtype() == q_BTHD.dtype(),
                   "attention q, k, v must share a dtype");
  return s;
}

void check_rope(const Tensor& x_NHD, const Tensor& positions_N, const Tensor& cos_PR,
                const Tensor& sin_PR) {
  const int64_t tokens = positions_N.numel();
  const int64_t head_dim = row_width(x_NHD);
  SHARDTRAIN_CHECK(head_dim % 2 == 0 && tokens > 0 && x_NHD.numel() % (tokens * head_dim) == 0,
                   "rope: x {} for {} positions", x_NHD.shape().to_string(), tokens);
  SHARDTRAIN_CHECK(row_width(cos_PR) == head_dim / 2 && cos_PR.shape() == sin_PR.shape(),
                   "rope tables cos {} sin {} for head dim {}", cos_PR.shape().to_string(),
                   sin_PR.shape().to_string(), head_dim);
  require_float(x_NHD, "rope x");
  require_dtype(positions_N, DType::kI32, "rope positions");
  require_dtype(cos_PR, DType::kF32, "rope cos");
  require_dtype(sin_PR, DType::kF32, "rope sin");
}

}  // namespace

// ---- embedding ----

void CudaOps::embedding_forward(Tensor ids_N, Tensor table_VC, Tensor out_NC) {
  const int64_t tokens = ids_N.numel();
  const int64_t channels = row_width(table_VC);
  SHARDTRAIN_CHECK(out_NC.numel() == tokens * channels, "embedding out {} for {} ids x {}",
                   out_NC.shape().to_string(), tokens, channels);
  require_dtype(ids_N, DType::kI32, "embedding ids");
  require_float(table_VC, "embedding table");
  require_float(out_NC, "embedding out");
  cuda_kernels::embedding_forward(ids_N.i32(), tokens, table_VC.dtype(), table_VC.data(), channels,
                                  out_NC.dtype(), out_NC.data(), stream_);
}

void CudaOps::embedding_backward(Tensor ids_N, Tensor dout_NC, Tensor dtable_VC) {
  const int64_t tokens = ids_N.numel();
  const int64_t channels = row_width(dtable_VC);
  SHARDTRAIN_CHECK(dout_NC.numel() == tokens * channels, "embedding dout {} for {} ids x {}",
                   dout_NC.shape().to_string(), tokens, channels);
  require_dtype(ids_N, DType::kI32, "embedding ids");
  require_float(dout_NC, "embedding dout");
  require_float(dtable_VC, "embedding dtable");
  cuda_kernels::embedding_backward(ids_N.i32(), tokens, dout_NC.dtype(), dout_NC.data(), channels,
                                   dtable_VC.dtype(), dtable_VC.data(), stream_);
}

// ---- RMSNorm ----

void CudaOps::rmsnorm_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                              Tensor rstd_N) {
  const int64_t rows = row_count(x_NC);
  const int64_t channels = row_width(x_NC);
  op_checks::check_rmsnorm_forward(x_NC, weight_C, out_NC, rstd_N);
  require_float(x_NC, "rmsnorm x");
  require_float(weight_C, "rmsnorm weight");
  require_float(out_NC, "rmsnorm out");
  require_dtype(rstd_N, DType::kF32, "rmsnorm rstd");
  cuda_kernels::rmsnorm_forward(x_NC.dtype(), x_NC.data(), weight_C.dtype(), weight_C.data(), eps,
                                rows, channels, out_NC.dtype(), out_NC.data(), rstd_N.f32(),
                                stream_);
}

void CudaOps::rmsnorm_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                               Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                               bool accumulate_dweight) {
  const int64_t rows = row_count(x_NC);
  const int64_t channels = row_width(x_NC);
  op_checks::check_rmsnorm_backward(dout_NC, x_NC, weight_C, rstd_N, dx_NC, dweight_C);
  require_float(x_NC, "rmsnorm x");
  require_float(weight_C, "rmsnorm weight");
  require_float(dweight_C, "rmsnorm dweight");
  require_dtype(dout_NC, x_NC.dtype(), "rmsnorm dout");
  require_dtype(dx_NC, x_NC.dtype(), "rmsnorm dx");
  require_dtype(rstd_N, DType::kF32, "rmsnorm rstd");
  if (rows == 0) {  // no rows: nothing to add, and an overwritten dweight is zero
    if (!accumulate_dweight) fill_zero(dweight_C);
    return;
  }
  float* scratch = scratch_floats(cuda_kernels::rmsnorm_backward_scratch_floats(rows, channels));
  cuda_kernels::rmsnorm_backward(x_NC.dtype(), dout_NC.data(), x_NC.data(), weight_C.dtype(),
                                 weight_C.data(), rstd_N.f32(), rows, channels, dx_NC.data(),
                                 accumulate_dx, dweight_C.dtype(), dweight_C.data(),
                                 accumulate_dweight, scratch, stream_);
}

// ---- packed q/k/v ----

namespace {

// Checks the packed q/k/v tensors of one dtype and the rope inputs; returns the sizes.
op_checks::PackedQkv check_packed(const Tensor& qkv, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& positions, const Tensor& cos_PR,
                                  const Tensor& sin_PR) {
  const op_checks::PackedQkv p = op_checks::check_packed_qkv(qkv, q, k, v, positions);
  check_rope(q, positions, cos_PR, sin_PR);
  for (const Tensor* t : {&q, &k, &v}) require_dtype(*t, qkv.dtype(), "packed qkv part");
  return p;
}

// Copies `tokens` rows of `width` elements between row strides (v, which rope leaves alone).
void copy_rows(const Tensor& like, const void* src, int64_t src_row, void* dst, int64_t dst_row,
               int64_t tokens, int64_t width, cudaStream_t stream) {
  const size_t element = dtype_size(like.dtype());
  SHARDTRAIN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_row * element, src, src_row * element,
                                          width * element, tokens, cudaMemcpyDeviceToDevice,
                                          stream));
}

}  // namespace

void CudaOps::split_qkv_rope(Tensor qkv_NX, Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                             Tensor q_NHD, Tensor k_NKD, Tensor v_NKD) {
  const op_checks::PackedQkv p =
      check_packed(qkv_NX, q_NHD, k_NKD, v_NKD, positions_N, cos_PR, sin_PR);
  const DType dtype = qkv_NX.dtype();
  if (cuda_kernels::rope_qkv_packed(dtype, qkv_NX.data(), q_NHD.data(), k_NKD.data(), v_NKD.data(),
                                    positions_N.i32(), p.tokens, p.q_heads, p.kv_heads, p.head_dim,
                                    cos_PR.f32(), sin_PR.f32(), false, stream_)) {
    return;
  }
  const char* row = static_cast<const char*>(qkv_NX.data());
  const size_t element = dtype_size(dtype);
  cuda_kernels::rope_rows(dtype, row, p.row(), q_NHD.data(), p.q_width(), positions_N.i32(),
                          p.tokens, p.q_heads, p.head_dim, cos_PR.f32(), sin_PR.f32(), 1.0f,
                          stream_);
  cuda_kernels::rope_rows(dtype, row + p.q_width() * element, p.row(), k_NKD.data(), p.kv_width(),
                          positions_N.i32(), p.tokens, p.kv_heads, p.head_dim, cos_PR.f32(),
                          sin_PR.f32(), 1.0f, stream_);
  copy_rows(qkv_NX, row + (p.q_width() + p.kv_width()) * element, p.row(), v_NKD.data(),
            p.kv_width(), p.tokens, p.kv_width(), stream_);
}

void CudaOps::pack_qkv_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD,
                                     Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                                     Tensor dqkv_NX) {
  const op_checks::PackedQkv p =
      check_packed(dqkv_NX, dq_NHD, dk_NKD, dv_NKD, positions_N, cos_PR, sin_PR);
  const DType dtype = dqkv_NX.dtype();
  if (cuda_kernels::rope_qkv_packed(
          dtype, dqkv_NX.data(), dq_NHD.data(), dk_NKD.data(), dv_NKD.data(), positions_N.i32(),
          p.tokens, p.q_heads, p.kv_heads, p.head_dim, cos_PR.f32(), sin_PR.f32(), true, stream_)) {
    return;
  }
  char* row = static_cast<char*>(dqkv_NX.data());
  const size_t element = dtype_size(dtype);
  cuda_kernels::rope_rows(dtype, dq_NHD.data(), p.q_width(), row, p.row(), positions_N.i32(),
                          p.tokens, p.q_heads, p.head_dim, cos_PR.f32(), sin_PR.f32(), -1.0f,
                          stream_);
  cuda_kernels::rope_rows(dtype, dk_NKD.data(), p.kv_width(), row + p.q_width() * element, p.row(),
                          positions_N.i32(), p.tokens, p.kv_heads, p.head_dim, cos_PR.f32(),
                          sin_PR.f32(), -1.0f, stream_);
  copy_rows(dqkv_NX, dv_NKD.data(), p.kv_width(), row + (p.q_width() + p.kv_width()) * element,
            p.row(), p.tokens, p.kv_width(), stream_);
}

// ---- SwiGLU ----

void CudaOps::swiglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) {
  require_same_numel(gate_NF, up_NF, "swiglu up");
  require_same_numel(gate_NF, out_NF, "swiglu out");
  require_float(gate_NF, "swiglu gate");
  require_dtype(up_NF, gate_NF.dtype(), "swiglu up");
  require_dtype(out_NF, gate_NF.dtype(), "swiglu out");
  cuda_kernels::swiglu_forward(gate_NF.dtype(), gate_NF.data(), up_NF.data(), out_NF.data(),
                               gate_NF.numel(), stream_);
}

void CudaOps::swiglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                              Tensor dup_NF) {
  require_same_numel(gate_NF, up_NF, "swiglu up");
  require_same_numel(gate_NF, dout_NF, "swiglu dout");
  require_same_numel(gate_NF, dgate_NF, "swiglu dgate");
  require_same_numel(gate_NF, dup_NF, "swiglu dup");
  require_float(gate_NF, "swiglu gate");
  for (const Tensor* t : {&dout_NF, &up_NF, &dgate_NF, &dup_NF}) {
    require_dtype(*t, gate_NF.dtype(), "swiglu tensor");
  }
  cuda_kernels::swiglu_backward(gate_NF.dtype(), dout_NF.data(), gate_NF.data(), up_NF.data(),
                                dgate_NF.data(), dup_NF.data(), gate_NF.numel(), stream_);
}

// ---- attention ----

namespace {

// The mask into the kernels' shape (cuda_kernels.h): a window covering the whole sequence masks
// nothing (the plain causal kernels' bounds); document starts are an i32 (B, T) CUDA tensor.
// The logit soft cap travels with the mask (the dispatch table reads it to pick the kernel).
void apply_mask(const AttentionMask& mask, cuda_kernels::AttentionShape& s) {
  s.logit_softcap = mask.has_softcap() ? mask.logit_softcap : 0.0f;
  s.window = mask.window > 0 && mask.window < s.seq ? static_cast<int>(mask.window) : 0;
  if (!mask.has_documents()) return;
  const Tensor& starts = mask.document_start_BT;
  require_dtype(starts, DType::kI32, "attention document starts");
  SHARDTRAIN_CHECK(starts.numel() == int64_t{s.batch} * s.seq,
                   "attention document starts {} for batch {} x seq {}", starts.shape().to_string(),
                   s.batch, s.seq);
  s.document_start_BT = starts.i32();
}

}  // namespace

void CudaOps::masked_attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale,
                                       const AttentionMask& mask, Tensor out_BTHD, Tensor lse_BHT) {
  cuda_kernels::AttentionShape s = attention_shape(q_BTHD, k_BTKD, v_BTKD);
  apply_mask(mask, s);
  SHARDTRAIN_CHECK(
      out_BTHD.shape() == q_BTHD.shape() && lse_BHT.numel() == int64_t{s.batch} * s.heads * s.seq,
      "attention out {} lse {} for q {}", out_BTHD.shape().to_string(), lse_BHT.shape().to_string(),
      q_BTHD.shape().to_string());
  require_dtype(out_BTHD, q_BTHD.dtype(), "attention out");
  require_dtype(lse_BHT, DType::kF32, "attention lse");
  cuda_kernels::AttentionConfig config = cuda_kernels::attention_forward_config(q_BTHD.dtype(), s);
  if (config.kernel != cuda_kernels::AttentionKernel::kSimt) {  // tensor cores
    const auto launch = [&](cuda_kernels::AttentionKernel kernel) {
      cuda_kernels::AttentionConfig run = config;
      run.kernel = kernel;
      cuda_kernels::flash_attention_forward(run, q_BTHD.data(), k_BTKD.data(), v_BTKD.data(), scale,
                                            s, out_BTHD.data(), lse_BHT.f32(), stream_);
    };
    if (attention_autotune_switch()) {
      config.kernel = attention_tuning_->choose(config.kernel, s, stream_, out_BTHD.data(),
                                                out_BTHD.bytes(), launch);
    }
    launch(config.kernel);
    return;
  }
  cuda_kernels::attention_forward(q_BTHD.dtype(), q_BTHD.data(), k_BTKD.data(), v_BTKD.data(),
                                  scale, s, out_BTHD.data(), lse_BHT.f32(), stream_);
}

void CudaOps::masked_attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD,
                                        Tensor v_BTKD, Tensor out_BTHD, Tensor lse_BHT, float scale,
                                        const AttentionMask& mask, Tensor dq_BTHD, Tensor dk_BTKD,
                                        Tensor dv_BTKD) {
  cuda_kernels::AttentionShape s = attention_shape(q_BTHD, k_BTKD, v_BTKD);
  apply_mask(mask, s);
  SHARDTRAIN_CHECK(out_BTHD.shape() == q_BTHD.shape() && dout_BTHD.shape() == q_BTHD.shape() &&
                       dq_BTHD.shape() == q_BTHD.shape() && dk_BTKD.shape() == k_BTKD.shape() &&
                       dv_BTKD.shape() == v_BTKD.shape() &&
                       lse_BHT.numel() == int64_t{s.batch} * s.heads * s.seq,
                   "attention backward shapes: q {}, dq {}, dk {}, dv {}, lse {}",
                   q_BTHD.shape().to_string(), dq_BTHD.shape().to_string(),
                   dk_BTKD.shape().to_string(), dv_BTKD.shape().to_string(),
                   lse_BHT.shape().to_string());
  for (const Tensor* t : {&dout_BTHD, &out_BTHD, &dq_BTHD, &dk_BTKD, &dv_BTKD}) {
    require_dtype(*t, q_BTHD.dtype(), "attention tensor");
  }
  require_dtype(lse_BHT, DType::kF32, "attention lse");
  const cuda_kernels::AttentionConfig config =
      cuda_kernels::attention_backward_config(q_BTHD.dtype(), s);
  if (config.kernel != cuda_kernels::AttentionKernel::kSimt) {  // tensor cores
    float* scratch = scratch_floats(cuda_kernels::flash_attention_backward_scratch_floats(s));
    cuda_kernels::flash_attention_backward(
        config, dout_BTHD.data(), q_BTHD.data(), k_BTKD.data(), v_BTKD.data(), out_BTHD.data(),
        lse_BHT.f32(), scale, s, dq_BTHD.data(), dk_BTKD.data(), dv_BTKD.data(), scratch, stream_);
    return;
  }
  float* scratch = scratch_floats(cuda_kernels::attention_backward_scratch_floats(s));
  cuda_kernels::attention_backward(q_BTHD.dtype(), dout_BTHD.data(), q_BTHD.data(), k_BTKD.data(),
                                   v_BTKD.data(), out_BTHD.data(), lse_BHT.f32(), scale, s,
                                   dq_BTHD.data(), dk_BTKD.data(), dv_BTKD.data(), scratch,
                                   stream_);
}

// ---- loss ----

void CudaOps::cross_entropy(Tensor logits_NV, Tensor targets_N, float grad_scale, Tensor loss_sum_1,
                            bool compute_grad) {
  const int64_t rows = row_count(logits_NV);
  const int64_t vocab = row_width(logits_NV);
  SHARDTRAIN_CHECK(targets_N.numel() == rows, "cross_entropy: logits {} targets {}",
                   logits_NV.shape().to_string(), targets_N.shape().to_string());
  require_float(logits_NV, "cross_entropy logits");
  require_dtype(targets_N, DType::kI32, "cross_entropy targets");
  float* loss_sum = nullptr;  // undefined: only the gradient is wanted
  if (loss_sum_1.defined()) {
    require_dtype(loss_sum_1, DType::kF32, "cross_entropy loss");
    SHARDTRAIN_CHECK(loss_sum_1.numel() >= 1, "cross_entropy into an empty loss tensor");
    loss_sum = loss_sum_1.f32();
  }
  cuda_kernels::cross_entropy(logits_NV.dtype(), logits_NV.data(), targets_N.i32(), rows, vocab,
                              grad_scale, loss_sum, compute_grad, stream_);
}

}  // namespace shardtrain
