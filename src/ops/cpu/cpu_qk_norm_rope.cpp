// CpuOps' per-head q/k norms fused with the packed q/k/v split and rope (ops/ops.h
// split_qkv_norm_rope, qk_norm_rope, pack_qkv_norm_rope_backward): the fp32 reference. Each head
// row is normalised (rmsnorm_forward's formula, rstd from a double sum) and rotated
// (split_qkv_rope's formula) in one loop; the backward rotates the gradient back, runs
// rmsnorm_backward's formula with rstd recomputed from the raw row, and packs. Rows are visited
// in (token, head) order, q before k, so the weight gradients add up in the order of the
// unfused norm backward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {
namespace {

using op_checks::PackedQkv;
using op_checks::row_width;

// The rope tables and positions, checked once per call.
struct RopeView {
  const int32_t* positions;
  const float* cos_table;
  const float* sin_table;
  int64_t max_positions, half;

  RopeView(const Tensor& positions_N, const Tensor& cos_PR, const Tensor& sin_PR, int64_t head_dim)
      : positions(positions_N.i32()),
        cos_table(cos_PR.f32()),
        sin_table(sin_PR.f32()),
        max_positions(cos_PR.dim(0)),
        half(head_dim / 2) {
    SHARDTRAIN_CHECK(row_width(cos_PR) == half && cos_PR.shape() == sin_PR.shape(),
                     "rope tables cos {} sin {} for head dim {}", cos_PR.shape().to_string(),
                     sin_PR.shape().to_string(), head_dim);
  }
  // Offset of token n's row in the tables.
  int64_t row(int64_t n) const {
    const int32_t p = positions[n];
    SHARDTRAIN_CHECK(p >= 0 && p < max_positions, "rope position {} outside [0, {})", p,
                     max_positions);
    return p * half;
  }
};

// 1 / sqrt(mean(x^2) + eps) of one row, the sum in double (as rmsnorm_forward).
float row_rstd(const float* x, int64_t channels, float eps) {
  double sum_squares = 0;
  for (int64_t c = 0; c < channels; ++c) sum_squares += static_cast<double>(x[c]) * x[c];
  return static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(channels) + eps));
}

// One norm weight with its offset (1 for Gemma's 1 + weight).
struct NormWeight {
  const float* weight;
  float offset;
  float at(int64_t c) const { return weight[c] + offset; }
};

// out = rope(norm(x)) for one head row at table offset `table`.
void norm_rope_row(const float* x, const NormWeight& w, float eps, const RopeView& rope,
                   int64_t table, float* out) {
  const int64_t half = rope.half, channels = 2 * half;
  const float r = row_rstd(x, channels, eps);
  for (int64_t i = 0; i < half; ++i) {
    const float c = rope.cos_table[table + i], s = rope.sin_table[table + i];
    const float first = w.at(i) * (x[i] * r);
    const float second = w.at(i + half) * (x[i + half] * r);
    out[i] = first * c - second * s;
    out[i + half] = second * c + first * s;
  }
}

// dx (one head row) from dout (the gradient of the rotated row) and the raw row x; dweight +=
// this row's part. dy: a row of scratch.
void norm_rope_row_backward(const float* dout, const float* x, const NormWeight& w, float eps,
                            const RopeView& rope, int64_t table, float* dy, float* dx,
                            float* dweight) {
  const int64_t half = rope.half, channels = 2 * half;
  for (int64_t i = 0; i < half; ++i) {  // the rotation by -angle
    const float c = rope.cos_table[table + i], s = -rope.sin_table[table + i];
    dy[i] = dout[i] * c - dout[i + half] * s;
    dy[i + half] = dout[i + half] * c + dout[i] * s;
  }
  // With y = s x r:  dx_c = r s_c dy_c - x_c r^3 / C * sum_k dy_k s_k x_k;  dw_c += dy_c x_c r.
  const float r = row_rstd(x, channels, eps);
  double weighted_dot = 0;
  for (int64_t c = 0; c < channels; ++c) {
    weighted_dot += static_cast<double>(dy[c]) * w.at(c) * x[c];
  }
  const float correction =
      static_cast<float>(weighted_dot * r * r * r / static_cast<double>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    dweight[c] += dy[c] * x[c] * r;
    dx[c] = r * w.at(c) * dy[c] - x[c] * correction;
  }
}

// rope(norm(.)) of `heads` head rows per token read at src + n * src_row, written to dst
// (tokens, heads, D).
void norm_rope_heads(const float* src, int64_t src_row, int64_t tokens, int64_t heads,
                     const NormWeight& w, float eps, const RopeView& rope, float* dst) {
  const int64_t head_dim = 2 * rope.half;
  for (int64_t n = 0; n < tokens; ++n) {
    const int64_t table = rope.row(n);
    for (int64_t h = 0; h < heads; ++h) {
      norm_rope_row(src + n * src_row + h * head_dim, w, eps, rope, table,
                    dst + (n * heads + h) * head_dim);
    }
  }
}

// `width` columns of each token's row from src to dst.
void copy_rows(const float* src, int64_t src_row, float* dst, int64_t dst_row, int64_t tokens,
               int64_t width) {
  for (int64_t n = 0; n < tokens; ++n) {
    std::copy(src + n * src_row, src + n * src_row + width, dst + n * dst_row);
  }
}

NormWeight q_weight(const QkNorm& norm) {
  return {norm.q_weight_D.f32(), norm.one_plus_weight ? 1.0f : 0.0f};
}
NormWeight k_weight(const QkNorm& norm) {
  return {norm.k_weight_D.f32(), norm.one_plus_weight ? 1.0f : 0.0f};
}

}  // namespace

void CpuOps::split_qkv_norm_rope(Tensor qkv_NX, const QkNorm& norm, Tensor positions_N,
                                 Tensor cos_PR, Tensor sin_PR, Tensor q_raw_NHD, Tensor k_raw_NKD,
                                 Tensor v_NKD, Tensor q_NHD, Tensor k_NKD) {
  const PackedQkv p = op_checks::check_packed_qkv(qkv_NX, q_NHD, k_NKD, v_NKD, positions_N);
  op_checks::check_qk_norm(p, q_raw_NHD, k_raw_NKD, q_NHD, k_NKD, norm);
  const RopeView rope(positions_N, cos_PR, sin_PR, p.head_dim);
  const float* row = qkv_NX.f32();
  const float* k_row = row + p.q_width();
  copy_rows(row, p.row(), q_raw_NHD.f32(), p.q_width(), p.tokens, p.q_width());
  copy_rows(k_row, p.row(), k_raw_NKD.f32(), p.kv_width(), p.tokens, p.kv_width());
  copy_rows(k_row + p.kv_width(), p.row(), v_NKD.f32(), p.kv_width(), p.tokens, p.kv_width());
  norm_rope_heads(row, p.row(), p.tokens, p.q_heads, q_weight(norm), norm.eps, rope, q_NHD.f32());
  norm_rope_heads(k_row, p.row(), p.tokens, p.kv_heads, k_weight(norm), norm.eps, rope,
                  k_NKD.f32());
}

void CpuOps::qk_norm_rope(Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm,
                          Tensor positions_N, Tensor cos_PR, Tensor sin_PR, Tensor q_NHD,
                          Tensor k_NKD) {
  SHARDTRAIN_CHECK(q_NHD.shape().rank() == 3 && k_NKD.shape().rank() == 3 &&
                       q_NHD.dim(0) == positions_N.numel() && k_NKD.dim(0) == q_NHD.dim(0) &&
                       q_NHD.dim(2) == k_NKD.dim(2) && q_NHD.dim(2) % 2 == 0,
                   "q/k norm: q {}, k {} for {} positions", q_NHD.shape().to_string(),
                   k_NKD.shape().to_string(), positions_N.numel());
  const PackedQkv p{q_NHD.dim(0), q_NHD.dim(1), k_NKD.dim(1), q_NHD.dim(2)};
  op_checks::check_qk_norm(p, q_raw_NHD, k_raw_NKD, q_NHD, k_NKD, norm);
  const RopeView rope(positions_N, cos_PR, sin_PR, p.head_dim);
  norm_rope_heads(q_raw_NHD.f32(), p.q_width(), p.tokens, p.q_heads, q_weight(norm), norm.eps, rope,
                  q_NHD.f32());
  norm_rope_heads(k_raw_NKD.f32(), p.kv_width(), p.tokens, p.kv_heads, k_weight(norm), norm.eps,
                  rope, k_NKD.f32());
}

void CpuOps::pack_qkv_norm_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD,
                                         Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm,
                                         Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                                         Tensor dq_weight_D, Tensor dk_weight_D,
                                         bool accumulate_dweight, Tensor dqkv_NX) {
  const PackedQkv p = op_checks::check_packed_qkv(dqkv_NX, dq_NHD, dk_NKD, dv_NKD, positions_N);
  op_checks::check_qk_norm(p, q_raw_NHD, k_raw_NKD, dq_NHD, dk_NKD, norm);
  op_checks::check_qk_norm_dweights(p, dq_weight_D, dk_weight_D);
  const RopeView rope(positions_N, cos_PR, sin_PR, p.head_dim);
  if (!accumulate_dweight) {
    fill_zero(dq_weight_D);
    fill_zero(dk_weight_D);
  }
  const int64_t D = p.head_dim;
  std::vector<float> dy(static_cast<size_t>(D));
  float* out = dqkv_NX.f32();
  // q rows, then k rows: each in (token, head) order.
  struct Part {
    const float* dout;
    const float* x;
    int64_t heads, column;
    NormWeight weight;
    float* dweight;
  };
  for (const Part& part :
       {Part{dq_NHD.f32(), q_raw_NHD.f32(), p.q_heads, 0, q_weight(norm), dq_weight_D.f32()},
        Part{dk_NKD.f32(), k_raw_NKD.f32(), p.kv_heads, p.q_width(), k_weight(norm),
             dk_weight_D.f32()}}) {
    for (int64_t n = 0; n < p.tokens; ++n) {
      const int64_t table = rope.row(n);
      for (int64_t h = 0; h < part.heads; ++h) {
        const int64_t at = (n * part.heads + h) * D;
        norm_rope_row_backward(part.dout + at, part.x + at, part.weight, norm.eps, rope, table,
                               dy.data(), out + n * p.row() + part.column + h * D, part.dweight);
      }
    }
  }
  copy_rows(dv_NKD.f32(), p.kv_width(), out + p.q_width() + p.kv_width(), p.row(), p.tokens,
            p.kv_width());
}

}  // namespace shardtrain
