// CpuOps grouped-query attention under an AttentionMask (causal, optionally a sliding window
// and packed documents). Per (batch, query head) the T x T score block is built with one sgemm
// (q and k are read in place through their row strides), softmaxed with max subtraction over
// the keys the mask leaves (row i: keys mask.first_key(i, document start of i)..i), and
// multiplied into v. With mask.logit_softcap (Gemma) each score s becomes cap * tanh(s / cap)
// first, and backward multiplies d(capped score) by 1 - tanh^2. Backward recomputes the
// probabilities from the saved log-sum-exp instead of storing them.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace shardtrain {

namespace {

// Dimensions of one attention call, checked against every tensor's shape.
struct AttentionDims {
  int64_t batch, seq, heads, kv_heads, head_dim;

  AttentionDims(const Tensor& q_BTHD, const Tensor& k_BTKD, const Tensor& v_BTKD) {
    SHARDTRAIN_CHECK(q_BTHD.shape().rank() == 4 && k_BTKD.shape().rank() == 4,
                     "attention wants q [B,T,H,D] and k [B,T,K,D], got {} and {}",
                     q_BTHD.shape().to_string(), k_BTKD.shape().to_string());
    batch = q_BTHD.dim(0);
    seq = q_BTHD.dim(1);
    heads = q_BTHD.dim(2);
    head_dim = q_BTHD.dim(3);
    kv_heads = k_BTKD.dim(2);
    SHARDTRAIN_CHECK(k_BTKD.shape() == Shape({batch, seq, kv_heads, head_dim}) &&
                         v_BTKD.shape() == k_BTKD.shape() && kv_heads > 0 && heads % kv_heads == 0,
                     "attention: q {}, k {}, v {}", q_BTHD.shape().to_string(),
                     k_BTKD.shape().to_string(), v_BTKD.shape().to_string());
  }
  int64_t group() const { return heads / kv_heads; }     // query heads per kv head
  int64_t q_stride() const { return heads * head_dim; }  // between tokens in q/out/dq
  int64_t kv_stride() const { return kv_heads * head_dim; }
  // Offset of (b, t=0, head h) in a [B,T,H,D] tensor, and of its kv head in [B,T,K,D].
  int64_t q_offset(int64_t b, int64_t h) const { return b * seq * q_stride() + h * head_dim; }
  int64_t kv_offset(int64_t b, int64_t h) const {
    return b * seq * kv_stride() + (h / group()) * head_dim;
  }
};

// The document start of each query of sequence b (T values), or nullptr without documents.
const int32_t* document_starts(const AttentionMask& mask, const AttentionDims& dims, int64_t b) {
  if (!mask.has_documents()) return nullptr;
  SHARDTRAIN_CHECK(mask.document_start_BT.dtype() == DType::kI32 &&
                       mask.document_start_BT.numel() == dims.batch * dims.seq,
                   "attention document starts {} for B {} T {}",
                   mask.document_start_BT.shape().to_string(), dims.batch, dims.seq);
  return mask.document_start_BT.i32() + b * dims.seq;
}

// The first key query i attends to: the window's and its document's bound.
int64_t first_key(const AttentionMask& mask, const int32_t* document_start_T, int64_t i) {
  return document_start_T != nullptr ? mask.first_key(i, document_start_T[i]) : mask.first_key(i);
}

// scores_TT = q_h k_h^T * scale for one (batch, head), soft-capped when the mask says so
// (every entry: masked ones are overwritten by the callers).
void compute_scores(const AttentionDims& dims, const float* q, const float* k, float scale,
                    const AttentionMask& mask, float* scores_TT) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, dims.seq, dims.seq, dims.head_dim, scale, q,
              dims.q_stride(), k, dims.kv_stride(), 0.0f, scores_TT, dims.seq);
  if (!mask.has_softcap()) return;
  const float cap = mask.logit_softcap;
  for (int64_t i = 0; i < dims.seq * dims.seq; ++i) {
    scores_TT[i] = cap * std::tanh(scores_TT[i] / cap);
  }
}

}  // namespace

void CpuOps::masked_attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale,
                                      const AttentionMask& mask, Tensor out_BTHD,
                                      Tensor lse_BHT) {
  const AttentionDims dims(q_BTHD, k_BTKD, v_BTKD);
  SHARDTRAIN_CHECK(
      out_BTHD.shape() == q_BTHD.shape() && lse_BHT.numel() == dims.batch * dims.heads * dims.seq,
      "attention out {} lse {} for q {}", out_BTHD.shape().to_string(), lse_BHT.shape().to_string(),
      q_BTHD.shape().to_string());
  const int64_t seq = dims.seq;
  if (seq == 0) return;
  std::vector<float> probs_TT(static_cast<size_t>(seq * seq));
  float* lse = lse_BHT.f32();
  for (int64_t b = 0; b < dims.batch; ++b) {
    const int32_t* document_start_T = document_starts(mask, dims, b);
    for (int64_t h = 0; h < dims.heads; ++h) {
      const float* q = q_BTHD.f32() + dims.q_offset(b, h);
      const float* k = k_BTKD.f32() + dims.kv_offset(b, h);
      const float* v = v_BTKD.f32() + dims.kv_offset(b, h);
      float* lse_T = lse + (b * dims.heads + h) * seq;
      compute_scores(dims, q, k, scale, mask, probs_TT.data());
      for (int64_t i = 0; i < seq; ++i) {
        float* row = probs_TT.data() + i * seq;
        const int64_t first = first_key(mask, document_start_T, i);
        float row_max = row[first];
        for (int64_t j = first + 1; j <= i; ++j) row_max = row[j] > row_max ? row[j] : row_max;
        double exp_sum = 0;
        for (int64_t j = first; j <= i; ++j) {
          row[j] = std::exp(row[j] - row_max);
          exp_sum += row[j];
        }
        const float inverse_sum = static_cast<float>(1.0 / exp_sum);
        for (int64_t j = first; j <= i; ++j) row[j] *= inverse_sum;
        for (int64_t j = 0; j < first; ++j) row[j] = 0;    // outside the window or document
        for (int64_t j = i + 1; j < seq; ++j) row[j] = 0;  // causal mask
        lse_T[i] = static_cast<float>(row_max + std::log(exp_sum));
      }
      // out_h = probs_TT @ v_h
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, seq, dims.head_dim, seq, 1.0f,
                  probs_TT.data(), seq, v, dims.kv_stride(), 0.0f,
                  out_BTHD.f32() + dims.q_offset(b, h), dims.q_stride());
    }
  }
}

// With P = softmax(S), S = q k^T * scale:
//   dP = dO v^T;  dS = P * (dP - rowsum(dO * O));  dq = dS k * scale;
//   dk += dS^T q * scale;  dv += P^T dO  (dk, dv summed over the query heads of a kv head).
void CpuOps::masked_attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD,
                                       Tensor v_BTKD, Tensor out_BTHD, Tensor lse_BHT, float scale,
                                       const AttentionMask& mask, Tensor dq_BTHD, Tensor dk_BTKD,
                                       Tensor dv_BTKD) {
  const AttentionDims dims(q_BTHD, k_BTKD, v_BTKD);
  SHARDTRAIN_CHECK(out_BTHD.shape() == q_BTHD.shape() && dout_BTHD.shape() == q_BTHD.shape() &&
                       dq_BTHD.shape() == q_BTHD.shape() && dk_BTKD.shape() == k_BTKD.shape() &&
                       dv_BTKD.shape() == v_BTKD.shape() &&
                       lse_BHT.numel() == dims.batch * dims.heads * dims.seq,
                   "attention backward shapes: q {}, dq {}, dk {}, dv {}, lse {}",
                   q_BTHD.shape().to_string(), dq_BTHD.shape().to_string(),
                   dk_BTKD.shape().to_string(), dv_BTKD.shape().to_string(),
                   lse_BHT.shape().to_string());
  fill_zero(dk_BTKD);
  fill_zero(dv_BTKD);
  const int64_t seq = dims.seq;
  const int64_t head_dim = dims.head_dim;
  if (seq == 0) return;
  std::vector<float> probs_TT(static_cast<size_t>(seq * seq));
  std::vector<float> dprobs_TT(static_cast<size_t>(seq * seq));
  std::vector<float> softcap_slope_T(mask.has_softcap() ? static_cast<size_t>(seq) : 0);
  const float* lse = lse_BHT.f32();
  for (int64_t b = 0; b < dims.batch; ++b) {
    const int32_t* document_start_T = document_starts(mask, dims, b);
    for (int64_t h = 0; h < dims.heads; ++h) {
      const int64_t q_offset = dims.q_offset(b, h);
      const int64_t kv_offset = dims.kv_offset(b, h);
      const float* q = q_BTHD.f32() + q_offset;
      const float* k = k_BTKD.f32() + kv_offset;
      const float* v = v_BTKD.f32() + kv_offset;
      const float* dout = dout_BTHD.f32() + q_offset;
      const float* lse_T = lse + (b * dims.heads + h) * seq;
      compute_scores(dims, q, k, scale, mask, probs_TT.data());
      // dprobs_TT = dout_h @ v_h^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq, seq, head_dim, 1.0f, dout,
                  dims.q_stride(), v, dims.kv_stride(), 0.0f, dprobs_TT.data(), seq);
      for (int64_t i = 0; i < seq; ++i) {
        float* probs_row = probs_TT.data() + i * seq;
        float* dscores_row = dprobs_TT.data() + i * seq;  // becomes dS in place
        // rowsum(dO * O) = sum_j P_ij dP_ij, taken from the same dP values it is subtracted
        // from (not from O, which BLAS rounds differently): a query that sees one key gets a
        // softmax gradient of exactly zero, whatever OpenBLAS kernel the CPU selects.
        const int64_t first = first_key(mask, document_start_T, i);
        float out_dot = 0;
        for (int64_t j = first; j <= i; ++j) {
          // d(capped)/d(score) = 1 - tanh^2, from the capped score before it becomes P.
          if (mask.has_softcap()) {
            const float tanh_value = probs_row[j] / mask.logit_softcap;
            softcap_slope_T[j] = 1.0f - tanh_value * tanh_value;
          }
          probs_row[j] = std::exp(probs_row[j] - lse_T[i]);
          out_dot += probs_row[j] * dscores_row[j];
        }
        for (int64_t j = first; j <= i; ++j) {
          dscores_row[j] = probs_row[j] * (dscores_row[j] - out_dot);
          if (mask.has_softcap()) dscores_row[j] *= softcap_slope_T[j];
        }
        for (int64_t j = 0; j < first; ++j) {  // outside the window or the document
          probs_row[j] = 0;
          dscores_row[j] = 0;
        }
        for (int64_t j = i + 1; j < seq; ++j) {
          probs_row[j] = 0;
          dscores_row[j] = 0;
        }
      }
      // dq_h = dS @ k_h * scale
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, seq, head_dim, seq, scale,
                  dprobs_TT.data(), seq, k, dims.kv_stride(), 0.0f, dq_BTHD.f32() + q_offset,
                  dims.q_stride());
      // dk_h += dS^T @ q_h * scale
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, seq, head_dim, seq, scale,
                  dprobs_TT.data(), seq, q, dims.q_stride(), 1.0f, dk_BTKD.f32() + kv_offset,
                  dims.kv_stride());
      // dv_h += P^T @ dout_h
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, seq, head_dim, seq, 1.0f,
                  probs_TT.data(), seq, dout, dims.q_stride(), 1.0f, dv_BTKD.f32() + kv_offset,
                  dims.kv_stride());
    }
  }
}

}  // namespace shardtrain
