// CpuOps layer ops: embedding, RMSNorm, linear (OpenBLAS), RoPE, SwiGLU. Forward and backward
// of each op sit side by side.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {

using op_checks::require_same_numel;
using op_checks::row_count;
using op_checks::row_width;

// ---- embedding ----

void CpuOps::embedding_forward(Tensor ids_N, Tensor table_VC, Tensor out_NC) {
  const int64_t tokens = ids_N.numel();
  const int64_t vocab = table_VC.dim(0);
  const int64_t channels = row_width(table_VC);
  SHARDTRAIN_CHECK(out_NC.numel() == tokens * channels, "embedding out {} for {} ids x {}",
                   out_NC.shape().to_string(), tokens, channels);
  const int32_t* ids = ids_N.i32();
  const float* table = table_VC.f32();
  float* out = out_NC.f32();
  for (int64_t n = 0; n < tokens; ++n) {
    SHARDTRAIN_CHECK(ids[n] >= 0 && ids[n] < vocab, "token id {} outside [0, {})", ids[n], vocab);
    const float* row = table + ids[n] * channels;
    float* out_row = out + n * channels;
    for (int64_t c = 0; c < channels; ++c) out_row[c] = row[c];
  }
}

void CpuOps::embedding_backward(Tensor ids_N, Tensor dout_NC, Tensor dtable_VC) {
  const int64_t tokens = ids_N.numel();
  const int64_t vocab = dtable_VC.dim(0);
  const int64_t channels = row_width(dtable_VC);
  SHARDTRAIN_CHECK(dout_NC.numel() == tokens * channels, "embedding dout {} for {} ids x {}",
                   dout_NC.shape().to_string(), tokens, channels);
  const int32_t* ids = ids_N.i32();
  const float* dout = dout_NC.f32();
  float* dtable = dtable_VC.f32();
  for (int64_t n = 0; n < tokens; ++n) {
    SHARDTRAIN_CHECK(ids[n] >= 0 && ids[n] < vocab, "token id {} outside [0, {})", ids[n], vocab);
    float* row = dtable + ids[n] * channels;
    const float* dout_row = dout + n * channels;
    for (int64_t c = 0; c < channels; ++c) row[c] += dout_row[c];
  }
}

// ---- RMSNorm (scale = weight) and RMSNorm1p (scale = 1 + weight): one loop each way ----

namespace {

// out = x * rstd * (weight + weight_offset), normalised first (HF order), all in fp32.
void rmsnorm_forward_rows(const Tensor& x_NC, const Tensor& weight_C, float weight_offset,
                          float eps, Tensor out_NC, Tensor rstd_N) {
  const int64_t rows = row_count(x_NC);
  const int64_t channels = row_width(x_NC);
  op_checks::check_rmsnorm_forward(x_NC, weight_C, out_NC, rstd_N);
  const float* x = x_NC.f32();
  const float* weight = weight_C.f32();
  float* out = out_NC.f32();
  float* rstd = rstd_N.f32();
  for (int64_t n = 0; n < rows; ++n) {
    const float* x_row = x + n * channels;
    double sum_squares = 0;
    for (int64_t c = 0; c < channels; ++c) sum_squares += static_cast<double>(x_row[c]) * x_row[c];
    const double mean_square = sum_squares / static_cast<double>(channels);
    const float row_rstd = static_cast<float>(1.0 / std::sqrt(mean_square + eps));
    rstd[n] = row_rstd;
    float* out_row = out + n * channels;
    for (int64_t c = 0; c < channels; ++c) {
      out_row[c] = (weight[c] + weight_offset) * (x_row[c] * row_rstd);
    }
  }
}

// With y = s * x * r, s = weight + offset and r = (mean(x^2) + eps)^-1/2:
//   dx_c = r * s_c * dy_c - x_c * r^3 / C * sum_k dy_k s_k x_k;   dw_c += dy_c * x_c * r.
void rmsnorm_backward_rows(const Tensor& dout_NC, const Tensor& x_NC, const Tensor& weight_C,
                           float weight_offset, const Tensor& rstd_N, Tensor dx_NC,
                           Tensor dweight_C, bool accumulate_dx) {
  const int64_t rows = row_count(x_NC);
  const int64_t channels = row_width(x_NC);
  const float* dout = dout_NC.f32();
  const float* x = x_NC.f32();
  const float* weight = weight_C.f32();
  const float* rstd = rstd_N.f32();
  float* dx = dx_NC.f32();
  float* dweight = dweight_C.f32();
  for (int64_t n = 0; n < rows; ++n) {
    const float* dout_row = dout + n * channels;
    const float* x_row = x + n * channels;
    float* dx_row = dx + n * channels;
    const float r = rstd[n];
    double weighted_dot = 0;
    for (int64_t c = 0; c < channels; ++c) {
      weighted_dot += static_cast<double>(dout_row[c]) * (weight[c] + weight_offset) * x_row[c];
    }
    const float correction =
        static_cast<float>(weighted_dot * r * r * r / static_cast<double>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const float dy = dout_row[c];  // read before writing: dx may alias dout
      const float grad = r * (weight[c] + weight_offset) * dy - x_row[c] * correction;
      dweight[c] += dy * x_row[c] * r;
      dx_row[c] = accumulate_dx ? dx_row[c] + grad : grad;
    }
  }
}

}  // namespace

void CpuOps::rmsnorm_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                             Tensor rstd_N) {
  rmsnorm_forward_rows(x_NC, weight_C, 0.0f, eps, out_NC, rstd_N);
}

void CpuOps::rmsnorm_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                              Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                              bool accumulate_dweight) {
  op_checks::check_rmsnorm_backward(dout_NC, x_NC, weight_C, rstd_N, dx_NC, dweight_C);
  if (!accumulate_dweight) fill_zero(dweight_C);
  rmsnorm_backward_rows(dout_NC, x_NC, weight_C, 0.0f, rstd_N, dx_NC, dweight_C, accumulate_dx);
}

void CpuOps::rmsnorm1p_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                               Tensor rstd_N) {
  rmsnorm_forward_rows(x_NC, weight_C, 1.0f, eps, out_NC, rstd_N);
}

void CpuOps::rmsnorm1p_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                                Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                                bool accumulate_dweight) {
  op_checks::check_rmsnorm_backward(dout_NC, x_NC, weight_C, rstd_N, dx_NC, dweight_C);
  if (!accumulate_dweight) fill_zero(dweight_C);
  rmsnorm_backward_rows(dout_NC, x_NC, weight_C, 1.0f, rstd_N, dx_NC, dweight_C, accumulate_dx);
}

// ---- linear ----

namespace {

// The sizes of out_NO = x_NI @ weight_OI^T, checked.
struct LinearSizes {
  int64_t rows, in_features, out_features;
};
LinearSizes linear_sizes(const Tensor& x_NI, const Tensor& weight_OI, const Tensor& out_NO) {
  const LinearSizes s{row_count(x_NI), row_width(x_NI), weight_OI.dim(0)};
  SHARDTRAIN_CHECK(weight_OI.numel() == s.out_features * s.in_features &&
                       out_NO.numel() == s.rows * s.out_features,
                   "linear: x {}, weight {}, out {}", x_NI.shape().to_string(),
                   weight_OI.shape().to_string(), out_NO.shape().to_string());
  return s;
}

}  // namespace

void CpuOps::linear_forward(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor out_NO) {
  const auto [rows, in_features, out_features] = linear_sizes(x_NI, weight_OI, out_NO);
  if (rows == 0 || out_features == 0) return;
  float* out = out_NO.f32();
  float beta = 0;
  if (bias_O.defined()) {
    SHARDTRAIN_CHECK(bias_O.numel() == out_features, "linear bias {} for {} outputs",
                     bias_O.shape().to_string(), out_features);
    const float* bias = bias_O.f32();
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t o = 0; o < out_features; ++o) out[n * out_features + o] = bias[o];
    }
    beta = 1;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_features, in_features, 1.0f,
              x_NI.f32(), in_features, weight_OI.f32(), in_features, beta, out, out_features);
}

void CpuOps::linear_forward_residual(Tensor x_NI, Tensor weight_OI, Tensor residual_NO,
                                     Tensor out_NO) {
  const auto [rows, in_features, out_features] = linear_sizes(x_NI, weight_OI, out_NO);
  require_same_numel(out_NO, residual_NO, "linear residual");
  if (rows == 0 || out_features == 0) return;
  if (out_NO.data() != residual_NO.data()) {
    std::copy(residual_NO.f32(), residual_NO.f32() + residual_NO.numel(), out_NO.f32());
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_features, in_features, 1.0f,
              x_NI.f32(), in_features, weight_OI.f32(), in_features, 1.0f, out_NO.f32(),
              out_features);
}

void CpuOps::linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                             Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                             bool accumulate_dweight) {
  const auto [rows, in_features, out_features] = linear_sizes(x_NI, weight_OI, dout_NO);
  const bool frozen = !dweight_OI.defined();  // no weight gradient wanted
  if (!frozen) require_same_numel(weight_OI, dweight_OI, "linear dweight");
  // Overwrite = add into zeros: the BLAS call and the sums stay as they are.
  if (!accumulate_dweight && !frozen) {
    fill_zero(dweight_OI);
    if (dbias_O.defined()) fill_zero(dbias_O);
  }
  if (rows == 0 || out_features == 0) return;
  const float* dout = dout_NO.f32();
  if (dx_NI.defined()) {
    require_same_numel(x_NI, dx_NI, "linear dx");
    // dx_NI = dout_NO @ weight_OI
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in_features, out_features, 1.0f,
                dout, out_features, weight_OI.f32(), in_features, accumulate_dx ? 1.0f : 0.0f,
                dx_NI.f32(), in_features);
  }
  if (frozen) return;
  // dweight_OI += dout_NO^T @ x_NI
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_features, in_features, rows, 1.0f, dout,
              out_features, x_NI.f32(), in_features, 1.0f, dweight_OI.f32(), in_features);
  if (dbias_O.defined()) {
    SHARDTRAIN_CHECK(dbias_O.numel() == out_features, "linear dbias {} for {} outputs",
                     dbias_O.shape().to_string(), out_features);
    std::vector<double> column_sums(static_cast<size_t>(out_features), 0.0);
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t o = 0; o < out_features; ++o) column_sums[o] += dout[n * out_features + o];
    }
    float* dbias = dbias_O.f32();
    for (int64_t o = 0; o < out_features; ++o) dbias[o] += static_cast<float>(column_sums[o]);
  }
}

// ---- rotary embedding ----

namespace {

// Rotates every (x[i], x[i + R]) pair of `heads` heads per token by angle p*theta_i (direction
// = +1), by its negation (-1, the transpose used in backward) or not at all (0: a copy), reading
// token n's heads at src + n * src_row and writing them at dst + n * dst_row (src may be dst).
void rotate_rows(const float* src, int64_t src_row, float* dst, int64_t dst_row, int64_t tokens,
                 int64_t heads, int64_t head_dim, Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                 float direction) {
  const int64_t half = head_dim / 2;
  const int64_t max_positions = cos_PR.dim(0);
  SHARDTRAIN_CHECK(row_width(cos_PR) == half && cos_PR.shape() == sin_PR.shape(),
                   "rope tables cos {} sin {} for head dim {}", cos_PR.shape().to_string(),
                   sin_PR.shape().to_string(), head_dim);
  const int32_t* positions = positions_N.i32();
  const float* cos_table = cos_PR.f32();
  const float* sin_table = sin_PR.f32();
  for (int64_t n = 0; n < tokens; ++n) {
    const int32_t p = positions[n];
    SHARDTRAIN_CHECK(p >= 0 && p < max_positions, "rope position {} outside [0, {})", p,
                     max_positions);
    const float* cos_row = cos_table + p * half;
    const float* sin_row = sin_table + p * half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* in = src + n * src_row + h * head_dim;
      float* out = dst + n * dst_row + h * head_dim;
      if (direction == 0) {
        std::copy(in, in + head_dim, out);
        continue;
      }
      for (int64_t i = 0; i < half; ++i) {
        const float c = cos_row[i];
        const float s = direction * sin_row[i];
        const float first = in[i];
        const float second = in[i + half];
        out[i] = first * c - second * s;
        out[i + half] = second * c + first * s;
      }
    }
  }
}

}  // namespace

void CpuOps::split_qkv_rope(Tensor qkv_NX, Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                            Tensor q_NHD, Tensor k_NKD, Tensor v_NKD) {
  const op_checks::PackedQkv p =
      op_checks::check_packed_qkv(qkv_NX, q_NHD, k_NKD, v_NKD, positions_N);
  const float* row = qkv_NX.f32();
  rotate_rows(row, p.row(), q_NHD.f32(), p.q_width(), p.tokens, p.q_heads, p.head_dim, positions_N,
              cos_PR, sin_PR, 1.0f);
  rotate_rows(row + p.q_width(), p.row(), k_NKD.f32(), p.kv_width(), p.tokens, p.kv_heads,
              p.head_dim, positions_N, cos_PR, sin_PR, 1.0f);
  rotate_rows(row + p.q_width() + p.kv_width(), p.row(), v_NKD.f32(), p.kv_width(), p.tokens,
              p.kv_heads, p.head_dim, positions_N, cos_PR, sin_PR, 0.0f);
}

void CpuOps::pack_qkv_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD, Tensor positions_N,
                                    Tensor cos_PR, Tensor sin_PR, Tensor dqkv_NX) {
  const op_checks::PackedQkv p =
      op_checks::check_packed_qkv(dqkv_NX, dq_NHD, dk_NKD, dv_NKD, positions_N);
  float* row = dqkv_NX.f32();
  rotate_rows(dq_NHD.f32(), p.q_width(), row, p.row(), p.tokens, p.q_heads, p.head_dim, positions_N,
              cos_PR, sin_PR, -1.0f);
  rotate_rows(dk_NKD.f32(), p.kv_width(), row + p.q_width(), p.row(), p.tokens, p.kv_heads,
              p.head_dim, positions_N, cos_PR, sin_PR, -1.0f);
  rotate_rows(dv_NKD.f32(), p.kv_width(), row + p.q_width() + p.kv_width(), p.row(), p.tokens,
              p.kv_heads, p.head_dim, positions_N, cos_PR, sin_PR, 0.0f);
}

// ---- SwiGLU ----

void CpuOps::swiglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) {
  require_same_numel(gate_NF, up_NF, "swiglu up");
  require_same_numel(gate_NF, out_NF, "swiglu out");
  const float* gate = gate_NF.f32();
  const float* up = up_NF.f32();
  float* out = out_NF.f32();
  const int64_t n = gate_NF.numel();
  // silu(g) = g / (1 + exp(-g)), as PyTorch's CPU kernel computes it.
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void CpuOps::swiglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                             Tensor dup_NF) {
  require_same_numel(gate_NF, up_NF, "swiglu up");
  require_same_numel(gate_NF, dout_NF, "swiglu dout");
  require_same_numel(gate_NF, dgate_NF, "swiglu dgate");
  require_same_numel(gate_NF, dup_NF, "swiglu dup");
  const float* dout = dout_NF.f32();
  const float* gate = gate_NF.f32();
  const float* up = up_NF.f32();
  float* dgate = dgate_NF.f32();
  float* dup = dup_NF.f32();
  const int64_t n = gate_NF.numel();
  for (int64_t i = 0; i < n; ++i) {
    // Read all inputs before writing: the gradients may alias gate/up/dout in place.
    const float g = gate[i];
    const float u = up[i];
    const float dy = dout[i];
    const float sigmoid = 1.0f / (1.0f + std::exp(-g));
    const float silu = g * sigmoid;
    const float dsilu = sigmoid + g * sigmoid * (1.0f - sigmoid);
    dgate[i] = dy * u * dsilu;
    dup[i] = dy * silu;
  }
}

}  // namespace shardtrain
