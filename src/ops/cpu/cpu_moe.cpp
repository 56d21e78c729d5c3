// CpuOps mixture-of-experts ops: routing (fp32 softmax, top-k), the expert-grouped permutation
// and its inverse, and the grouped linear as one sgemm per expert (the reference the CUDA
// grouped launch is tested against). Sums accumulate in double where a row is reduced.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

// softmax of one row of logits in double, into p (E entries).
void softmax_row(const float* logits, int64_t E, std::vector<double>& p) {
  double max = logits[0];
  for (int64_t e = 1; e < E; ++e) max = std::max(max, static_cast<double>(logits[e]));
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(logits[e] - max);
  for (int64_t e = 0; e < E; ++e) p[e] /= sum;
}

struct RouteSizes {
  int64_t N, E, K;
};

RouteSizes route_sizes(const Tensor& logits_NE, const Tensor& expert_NK, const Tensor& weight_NK) {
  SHARDTRAIN_CHECK(logits_NE.shape().rank() == 2 && expert_NK.shape().rank() == 2 &&
                       expert_NK.shape() == weight_NK.shape() &&
                       expert_NK.dim(0) == logits_NE.dim(0),
                   "moe routing: logits {} experts {} weights {}", logits_NE.shape().to_string(),
                   expert_NK.shape().to_string(), weight_NK.shape().to_string());
  const RouteSizes s{logits_NE.dim(0), logits_NE.dim(1), expert_NK.dim(1)};
  SHARDTRAIN_CHECK(s.K >= 1 && s.K <= s.E, "moe routing: top-{} of {} experts", s.K, s.E);
  return s;
}

// The rows of the experts before each expert, and in total.
std::vector<int64_t> row_starts(const std::vector<int64_t>& rows_E, int64_t M) {
  std::vector<int64_t> start(rows_E.size() + 1, 0);
  for (size_t e = 0; e < rows_E.size(); ++e) start[e + 1] = start[e] + rows_E[e];
  SHARDTRAIN_CHECK(start.back() == M, "grouped linear: expert rows sum to {}, tensor has {}",
                   start.back(), M);
  return start;
}

Tensor rows_of(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t width = t.dim(1);
  return Tensor(t.f32() + begin * width, t.dtype(), Shape{count, width}, t.device());
}

Tensor expert_of(const Tensor& w_EOI, int64_t e) {
  const int64_t O = w_EOI.dim(1), I = w_EOI.dim(2);
  return Tensor(w_EOI.f32() + e * O * I, w_EOI.dtype(), Shape{O, I}, w_EOI.device());
}

}  // namespace

void CpuOps::moe_route(Tensor logits_NE, bool renormalize, Tensor expert_NK, Tensor weight_NK,
                       Tensor prob_sum_E) {
  const RouteSizes s = route_sizes(logits_NE, expert_NK, weight_NK);
  std::vector<double> p(s.E), sums(s.E, 0.0);
  std::vector<int64_t> order(s.E);
  for (int64_t n = 0; n < s.N; ++n) {
    softmax_row(logits_NE.f32() + n * s.E, s.E, p);
    for (int64_t e = 0; e < s.E; ++e) sums[e] += p[e];
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + s.K, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double total = 0;
    for (int64_t k = 0; k < s.K; ++k) total += p[order[k]];
    for (int64_t k = 0; k < s.K; ++k) {
      expert_NK.i32()[n * s.K + k] = static_cast<int32_t>(order[k]);
      weight_NK.f32()[n * s.K + k] =
          static_cast<float>(renormalize ? p[order[k]] / total : p[order[k]]);
    }
  }
  if (prob_sum_E.defined()) {
    SHARDTRAIN_CHECK(prob_sum_E.numel() == s.E, "moe router mass {} for {} experts",
                     prob_sum_E.numel(), s.E);
    for (int64_t e = 0; e < s.E; ++e) prob_sum_E.f32()[e] += static_cast<float>(sums[e]);
  }
}

void CpuOps::moe_route_backward(Tensor dweight_NK, Tensor logits_NE, Tensor expert_NK,
                                Tensor weight_NK, bool renormalize, Tensor aux_grad_E,
                                Tensor dlogits_NE) {
  const RouteSizes s = route_sizes(logits_NE, expert_NK, weight_NK);
  std::vector<double> p(s.E), dp(s.E);
  for (int64_t n = 0; n < s.N; ++n) {
    softmax_row(logits_NE.f32() + n * s.E, s.E, p);
    for (int64_t e = 0; e < s.E; ++e) dp[e] = aux_grad_E.defined() ? aux_grad_E.f32()[e] : 0.0;
    const float* dw = dweight_NK.f32() + n * s.K;
    const float* w = weight_NK.f32() + n * s.K;
    const int32_t* expert = expert_NK.i32() + n * s.K;
    // w_k = p_k / Z (Z = sum of the chosen p, or 1): dp_k = (dw_k - sum_j dw_j w_j) / Z.
    double dot = 0, chosen = 0;
    for (int64_t k = 0; k < s.K; ++k) {
      dot += static_cast<double>(dw[k]) * w[k];
      chosen += p[expert[k]];
    }
    for (int64_t k = 0; k < s.K; ++k) {
      dp[expert[k]] += renormalize ? (dw[k] - dot) / chosen : dw[k];
    }
    // Softmax backward: dl_e = p_e (dp_e - sum_j p_j dp_j).
    double mean = 0;
    for (int64_t e = 0; e < s.E; ++e) mean += p[e] * dp[e];
    float* dl = dlogits_NE.f32() + n * s.E;
    for (int64_t e = 0; e < s.E; ++e) dl[e] = static_cast<float>(p[e] * (dp[e] - mean));
  }
}

std::vector<int64_t> CpuOps::moe_dispatch(Tensor expert_NK, int64_t experts, Tensor source_M,
                                          Tensor row_NK) {
  const int64_t slots = expert_NK.numel();
  SHARDTRAIN_CHECK(source_M.numel() == slots && row_NK.numel() == slots,
                   "moe dispatch: {} slots, {} sources, {} rows", slots, source_M.numel(),
                   row_NK.numel());
  std::vector<int64_t> rows(experts, 0);
  for (int64_t i = 0; i < slots; ++i) {
    const int32_t e = expert_NK.i32()[i];
    SHARDTRAIN_CHECK(e >= 0 && e < experts, "moe dispatch: expert {} of {}", e, experts);
    ++rows[e];
  }
  std::vector<int64_t> next(experts, 0);
  for (int64_t e = 1; e < experts; ++e) next[e] = next[e - 1] + rows[e - 1];
  for (int64_t i = 0; i < slots; ++i) {
    const int64_t m = next[expert_NK.i32()[i]]++;
    source_M.i32()[m] = static_cast<int32_t>(i);
    row_NK.i32()[i] = static_cast<int32_t>(m);
  }
  return rows;
}

void CpuOps::moe_gather(Tensor x_NC, Tensor source_M, Tensor x_MC) {
  const int64_t N = x_NC.dim(0), C = x_NC.dim(1), M = x_MC.dim(0);
  SHARDTRAIN_CHECK(x_MC.dim(1) == C && M % N == 0 && source_M.numel() == M,
                   "moe gather: x {} into {}", x_NC.shape().to_string(), x_MC.shape().to_string());
  const int64_t K = M / N;
  for (int64_t m = 0; m < M; ++m) {
    const float* src = x_NC.f32() + (source_M.i32()[m] / K) * C;
    std::copy(src, src + C, x_MC.f32() + m * C);
  }
}

void CpuOps::moe_gather_backward(Tensor dx_MC, Tensor row_NK, Tensor dx_NC, bool accumulate) {
  const int64_t N = dx_NC.dim(0), C = dx_NC.dim(1), K = row_NK.numel() / N;
  for (int64_t n = 0; n < N; ++n) {
    float* dx = dx_NC.f32() + n * C;
    for (int64_t c = 0; c < C; ++c) {
      double sum = accumulate ? dx[c] : 0.0;
      for (int64_t k = 0; k < K; ++k) sum += dx_MC.f32()[row_NK.i32()[n * K + k] * C + c];
      dx[c] = static_cast<float>(sum);
    }
  }
}

void CpuOps::moe_combine(Tensor y_MC, Tensor row_NK, Tensor weight_NK, Tensor residual_NC,
                         Tensor out_NC) {
  const int64_t N = out_NC.dim(0), C = out_NC.dim(1), K = row_NK.numel() / N;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        sum += static_cast<double>(weight_NK.f32()[n * K + k]) *
               y_MC.f32()[row_NK.i32()[n * K + k] * C + c];
      }
      out_NC.f32()[n * C + c] = static_cast<float>(residual_NC.f32()[n * C + c] + sum);
    }
  }
}

void CpuOps::moe_combine_backward(Tensor dout_NC, Tensor y_MC, Tensor row_NK, Tensor weight_NK,
                                  Tensor dy_MC, Tensor dweight_NK) {
  const int64_t N = dout_NC.dim(0), C = dout_NC.dim(1), K = row_NK.numel() / N;
  for (int64_t n = 0; n < N; ++n) {
    const float* dout = dout_NC.f32() + n * C;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t m = row_NK.i32()[n * K + k];
      const float w = weight_NK.f32()[n * K + k];
      const float* y = y_MC.f32() + m * C;
      float* dy = dy_MC.f32() + m * C;
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        dy[c] = w * dout[c];
        dot += static_cast<double>(dout[c]) * y[c];
      }
      dweight_NK.f32()[n * K + k] = static_cast<float>(dot);
    }
  }
}

void CpuOps::grouped_linear_forward(Tensor x_MI, Tensor weight_EOI,
                                    const std::vector<int64_t>& rows_E, Tensor out_MO) {
  SHARDTRAIN_CHECK(
      weight_EOI.shape().rank() == 3 && weight_EOI.dim(0) == static_cast<int64_t>(rows_E.size()),
      "grouped linear: weights {} for {} experts", weight_EOI.shape().to_string(), rows_E.size());
  const std::vector<int64_t> start = row_starts(rows_E, x_MI.dim(0));
  for (size_t e = 0; e < rows_E.size(); ++e) {
    if (rows_E[e] == 0) continue;
    linear_forward(rows_of(x_MI, start[e], rows_E[e]), expert_of(weight_EOI, e), Tensor(),
                   rows_of(out_MO, start[e], rows_E[e]));
  }
}

void CpuOps::grouped_linear_backward(Tensor dout_MO, Tensor x_MI, Tensor weight_EOI,
                                     const std::vector<int64_t>& rows_E, Tensor dx_MI,
                                     Tensor dweight_EOI, bool accumulate_dx,
                                     bool accumulate_dweight) {
  const std::vector<int64_t> start = row_starts(rows_E, x_MI.dim(0));
  for (size_t e = 0; e < rows_E.size(); ++e) {
    const Tensor dweight = dweight_EOI.defined() ? expert_of(dweight_EOI, e) : Tensor();
    if (rows_E[e] == 0) {
      if (dweight.defined() && !accumulate_dweight) fill_zero(dweight);
      continue;
    }
    linear_backward(rows_of(dout_MO, start[e], rows_E[e]), rows_of(x_MI, start[e], rows_E[e]),
                    expert_of(weight_EOI, e),
                    dx_MI.defined() ? rows_of(dx_MI, start[e], rows_E[e]) : Tensor(), dweight,
                    Tensor(), accumulate_dx, accumulate_dweight);
  }
}

}  // namespace shardtrain
