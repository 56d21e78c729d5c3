#include "ops/profiled_ops.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/log.h"

namespace shardtrain {

const char* op_class_name(OpClass op_class) {
  switch (op_class) {
    case OpClass::kGemm:
      return "gemm (linear, lm head)";
    case OpClass::kAttention:
      return "attention";
    case OpClass::kNorm:
      return "rmsnorm";
    case OpClass::kElementwise:
      return "elementwise (add, rope, qkv, swiglu, geglu, softcap)";
    case OpClass::kEmbedding:
      return "embedding";
    case OpClass::kLoss:
      return "cross-entropy";
    case OpClass::kOptimizer:
      return "optimizer (adamw, norms, casts)";
    case OpClass::kMemory:
      return "memory (copies, fills)";
    case OpClass::kCount:
      break;
  }
  return "?";
}

ProfiledOps::ProfiledOps(std::unique_ptr<Ops> inner)
    : inner_(std::move(inner)), created_(std::chrono::steady_clock::now()) {}

ProfiledOps::Table ProfiledOps::sum_from_step(size_t first) const {
  Table sum = first == 0 ? current_step_ : Table{};
  for (size_t step = first; step < steps_.size(); ++step) {
    for (size_t c = 0; c < sum.size(); ++c) {
      sum[c].calls += steps_[step][c].calls;
      sum[c].seconds += steps_[step][c].seconds;
    }
  }
  return sum;
}

ProfiledOps::ClassTotals ProfiledOps::totals(OpClass op_class) const {
  return sum_from_step(0)[static_cast<int>(op_class)];
}

void ProfiledOps::end_step() {
  steps_.push_back(current_step_);
  current_step_ = {};
}

ProfiledOps::~ProfiledOps() {
  Table table = sum_from_step(0);
  std::string scope = "totals over the run";
  if (steps_.size() >= 2) {
    table = sum_from_step(1);
    const double count = static_cast<double>(steps_.size() - 1);
    for (ClassTotals& t : table) {
      t.calls = static_cast<int64_t>(static_cast<double>(t.calls) / count + 0.5);
      t.seconds /= count;
    }
    scope = fmt::format("per step, mean of steps 2..{}", steps_.size());
  }
  double total = 0;
  for (const ClassTotals& t : table) total += t.seconds;
  std::string text =
      fmt::format("op profile (SHARDTRAIN_PROFILE_OPS; synchronised per op; {}):", scope);
  for (int c = 0; c < static_cast<int>(OpClass::kCount); ++c) {
    const ClassTotals& t = table[c];
    text += fmt::format("\n  {:<34} {:>8} calls {:>11.2f} ms {:>6.1f}%",
                        op_class_name(static_cast<OpClass>(c)), t.calls, t.seconds * 1e3,
                        total > 0 ? 100.0 * t.seconds / total : 0.0);
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count();
  text += fmt::format("\n  {:<34} {:>14} {:>11.2f} ms (process wall time {:.1f} s)", "all ops", "",
                      total * 1e3, wall);
  text += op_name_table();
  text += gemm_shape_table();
  log::info("{}", text);
}

void ProfiledOps::record_gemm(bool backward, const Tensor& x_NI, const Tensor& weight_OI,
                              int products) {
  if (steps_.empty()) return;  // step 1 also holds the algorithm searches
  const int64_t out = weight_OI.dim(0), in = out > 0 ? weight_OI.numel() / out : 0;
  const int64_t rows = in > 0 ? x_NI.numel() / in : 0;
  GemmShapeTotals& t = gemm_shapes_[{backward, rows, in, out}];
  ++t.calls;
  t.seconds += last_op_seconds_;
  t.flops += 2.0 * products * static_cast<double>(rows) * in * out;
}

namespace {

// The rows of a totals map (values with a `seconds` field), slowest first.
template <typename Map>
std::vector<std::pair<typename Map::key_type, typename Map::mapped_type>> slowest_first(
    const Map& totals) {
  std::vector<std::pair<typename Map::key_type, typename Map::mapped_type>> rows(totals.begin(),
                                                                                 totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  return rows;
}

// A log table: `title`, then line(key, totals, steps) for each row of `totals`, slowest first;
// "" when there are no rows or `steps` (the per-step divisor) is still 0.
template <typename Map, typename Line>
std::string per_step_table(const Map& totals, double steps, const char* title, Line line) {
  if (totals.empty() || steps == 0) return "";
  std::string text = title;
  for (const auto& [key, t] : slowest_first(totals)) text += line(key, t, steps);
  return text;
}

}  // namespace

double ProfiledOps::steps_after_first() const {
  return steps_.size() < 2 ? 0.0 : static_cast<double>(steps_.size() - 1);
}

std::string ProfiledOps::gemm_shape_table() const {
  return per_step_table(
      gemm_shapes_, steps_after_first(),
      "\n  gemm by shape (per step; backward = dx + dweight [+ dbias]):",
      [](const auto& key, const auto& t, double count) {
        const auto& [backward, tokens, in, out] = key;
        return fmt::format(
            "\n    {:<8} {:>6} x {:>6} -> {:>6} {:>8.1f} calls {:>9.2f} ms {:>6.0f} TFLOP/s",
            backward ? "backward" : "forward", tokens, in, out,
            static_cast<double>(t.calls) / count, t.seconds / count * 1e3,
            t.seconds > 0 ? t.flops / t.seconds / 1e12 : 0.0);
      });
}

std::string ProfiledOps::op_name_table() const {
  return per_step_table(op_names_, steps_after_first(),
                        "\n  by op (per step):", [](const auto& name, const auto& t, double count) {
                          return fmt::format("\n    {:<34} {:>8.1f} calls {:>9.2f} ms", name,
                                             static_cast<double>(t.calls) / count,
                                             t.seconds / count * 1e3);
                        });
}

template <typename Op>
void ProfiledOps::timed(const char* op_name, OpClass op_class, Op&& op) {
  inner_->synchronize();
  const auto start = std::chrono::steady_clock::now();
  op();
  inner_->synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  last_op_seconds_ = seconds;
  ClassTotals& t = current_step_[static_cast<int>(op_class)];
  ++t.calls;
  t.seconds += seconds;
  if (!steps_.empty()) {  // step 1 also holds one-time work
    ClassTotals& named = op_names_[op_name];
    ++named.calls;
    named.seconds += seconds;
  }
}

void* ProfiledOps::allocate(size_t bytes) { return inner_->allocate(bytes); }
void ProfiledOps::release(void* pointer) { inner_->release(pointer); }
void ProfiledOps::copy_from_host(Tensor dst, const void* src) {
  timed(__func__, OpClass::kMemory, [&] { inner_->copy_from_host(dst, src); });
}
void ProfiledOps::copy_to_host(void* dst, Tensor src) {
  timed(__func__, OpClass::kMemory, [&] { inner_->copy_to_host(dst, src); });
}
void ProfiledOps::fill_zero(Tensor dst) {
  timed(__func__, OpClass::kMemory, [&] { inner_->fill_zero(dst); });
}
void ProfiledOps::cast(Tensor dst, Tensor src) {
  timed(__func__, OpClass::kOptimizer, [&] { inner_->cast(dst, src); });
}
void ProfiledOps::add(Tensor out, Tensor a, Tensor b) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->add(out, a, b); });
}
void ProfiledOps::embedding_forward(Tensor ids_N, Tensor table_VC, Tensor out_NC) {
  timed(__func__, OpClass::kEmbedding, [&] { inner_->embedding_forward(ids_N, table_VC, out_NC); });
}
void ProfiledOps::embedding_backward(Tensor ids_N, Tensor dout_NC, Tensor dtable_VC) {
  timed(__func__, OpClass::kEmbedding,
        [&] { inner_->embedding_backward(ids_N, dout_NC, dtable_VC); });
}
void ProfiledOps::rmsnorm_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                                  Tensor rstd_N) {
  timed(__func__, OpClass::kNorm,
        [&] { inner_->rmsnorm_forward(x_NC, weight_C, eps, out_NC, rstd_N); });
}
void ProfiledOps::rmsnorm_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                                   Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                                   bool accumulate_dweight) {
  timed(__func__, OpClass::kNorm, [&] {
    inner_->rmsnorm_backward(dout_NC, x_NC, weight_C, rstd_N, dx_NC, dweight_C, accumulate_dx,
                             accumulate_dweight);
  });
}
void ProfiledOps::linear_forward(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor out_NO) {
  timed(__func__, OpClass::kGemm, [&] { inner_->linear_forward(x_NI, weight_OI, bias_O, out_NO); });
  record_gemm(false, x_NI, weight_OI, 1);
}
void ProfiledOps::linear_forward_residual(Tensor x_NI, Tensor weight_OI, Tensor residual_NO,
                                          Tensor out_NO) {
  timed(__func__, OpClass::kGemm,
        [&] { inner_->linear_forward_residual(x_NI, weight_OI, residual_NO, out_NO); });
  record_gemm(false, x_NI, weight_OI, 1);
}
void ProfiledOps::linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                                  Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                                  bool accumulate_dweight) {
  timed(__func__, OpClass::kGemm, [&] {
    inner_->linear_backward(dout_NO, x_NI, weight_OI, dx_NI, dweight_OI, dbias_O, accumulate_dx,
                            accumulate_dweight);
  });
  record_gemm(true, x_NI, weight_OI, (dx_NI.defined() ? 1 : 0) + (dweight_OI.defined() ? 1 : 0));
}
void ProfiledOps::linear_forward_fp8(Tensor x_NI, Tensor weight_OI, Tensor bias_O,
                                     Tensor residual_NO, Tensor out_NO, Fp8Site site) {
  timed(__func__, OpClass::kGemm,
        [&] { inner_->linear_forward_fp8(x_NI, weight_OI, bias_O, residual_NO, out_NO, site); });
  record_gemm(false, x_NI, weight_OI, 1);
}
void ProfiledOps::linear_backward_fp8(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                                      Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                                      bool accumulate_dweight, Fp8Site site) {
  timed(__func__, OpClass::kGemm, [&] {
    inner_->linear_backward_fp8(dout_NO, x_NI, weight_OI, dx_NI, dweight_OI, dbias_O,
                                accumulate_dx, accumulate_dweight, site);
  });
  record_gemm(true, x_NI, weight_OI, (dx_NI.defined() ? 1 : 0) + (dweight_OI.defined() ? 1 : 0));
}
void ProfiledOps::swiglu_linears_backward_fp8(Tensor dact_NF, Tensor gate_NF, Tensor up_NF,
                                              Tensor x_NC, Tensor gate_weight_FC,
                                              Tensor up_weight_FC, Tensor dgate_NF, Tensor dup_NF,
                                              Tensor dx_NC, Tensor dgate_weight_FC,
                                              Tensor dup_weight_FC, bool accumulate_dweight,
                                              Fp8Site gate_site, Fp8Site up_site) {
  timed(__func__, OpClass::kGemm, [&] {
    inner_->swiglu_linears_backward_fp8(dact_NF, gate_NF, up_NF, x_NC, gate_weight_FC,
                                        up_weight_FC, dgate_NF, dup_NF, dx_NC, dgate_weight_FC,
                                        dup_weight_FC, accumulate_dweight, gate_site, up_site);
  });
  record_gemm(true, x_NC, gate_weight_FC, 4);  // gate's and up's dgrad and wgrad: one shape
}
void ProfiledOps::swiglu_linear_forward_fp8(Tensor gate_NF, Tensor up_NF, Tensor act_NF,
                                            Tensor weight_CF, Tensor residual_NC, Tensor out_NC,
                                            Fp8Site site) {
  // One op, timed as a GEMM: its SwiGLU pass is inside (the FP8 cast's pass it replaces was too).
  timed(__func__, OpClass::kGemm, [&] {
    inner_->swiglu_linear_forward_fp8(gate_NF, up_NF, act_NF, weight_CF, residual_NC, out_NC,
                                      site);
  });
  record_gemm(false, act_NF, weight_CF, 1);
}
void ProfiledOps::split_qkv_rope(Tensor qkv_NX, Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                                 Tensor q_NHD, Tensor k_NKD, Tensor v_NKD) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->split_qkv_rope(qkv_NX, positions_N, cos_PR, sin_PR, q_NHD, k_NKD, v_NKD); });
}
void ProfiledOps::pack_qkv_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD,
                                         Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                                         Tensor dqkv_NX) {
  timed(__func__, OpClass::kElementwise, [&] {
    inner_->pack_qkv_rope_backward(dq_NHD, dk_NKD, dv_NKD, positions_N, cos_PR, sin_PR, dqkv_NX);
  });
}
void ProfiledOps::split_qkv_norm_rope(Tensor qkv_NX, const QkNorm& norm, Tensor positions_N,
                                      Tensor cos_PR, Tensor sin_PR, Tensor q_raw_NHD,
                                      Tensor k_raw_NKD, Tensor v_NKD, Tensor q_NHD, Tensor k_NKD) {
  timed(__func__, OpClass::kNorm, [&] {
    inner_->split_qkv_norm_rope(qkv_NX, norm, positions_N, cos_PR, sin_PR, q_raw_NHD, k_raw_NKD,
                                v_NKD, q_NHD, k_NKD);
  });
}
void ProfiledOps::qk_norm_rope(Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm,
                               Tensor positions_N, Tensor cos_PR, Tensor sin_PR, Tensor q_NHD,
                               Tensor k_NKD) {
  timed(__func__, OpClass::kNorm, [&] {
    inner_->qk_norm_rope(q_raw_NHD, k_raw_NKD, norm, positions_N, cos_PR, sin_PR, q_NHD, k_NKD);
  });
}
void ProfiledOps::pack_qkv_norm_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD,
                                              Tensor q_raw_NHD, Tensor k_raw_NKD,
                                              const QkNorm& norm, Tensor positions_N,
                                              Tensor cos_PR, Tensor sin_PR, Tensor dq_weight_D,
                                              Tensor dk_weight_D, bool accumulate_dweight,
                                              Tensor dqkv_NX) {
  timed(__func__, OpClass::kNorm, [&] {
    inner_->pack_qkv_norm_rope_backward(dq_NHD, dk_NKD, dv_NKD, q_raw_NHD, k_raw_NKD, norm,
                                        positions_N, cos_PR, sin_PR, dq_weight_D, dk_weight_D,
                                        accumulate_dweight, dqkv_NX);
  });
}
// Named by the public method, as the profile's tables always were.
void ProfiledOps::masked_attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale,
                                           const AttentionMask& mask, Tensor out_BTHD,
                                           Tensor lse_BHT) {
  timed("attention_forward", OpClass::kAttention,
        [&] { inner_->attention_forward(q_BTHD, k_BTKD, v_BTKD, scale, out_BTHD, lse_BHT, mask); });
}
void ProfiledOps::masked_attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD,
                                            Tensor v_BTKD, Tensor out_BTHD, Tensor lse_BHT,
                                            float scale, const AttentionMask& mask, Tensor dq_BTHD,
                                            Tensor dk_BTKD, Tensor dv_BTKD) {
  timed("attention_backward", OpClass::kAttention, [&] {
    inner_->attention_backward(dout_BTHD, q_BTHD, k_BTKD, v_BTKD, out_BTHD, lse_BHT, scale, dq_BTHD,
                               dk_BTKD, dv_BTKD, mask);
  });
}
void ProfiledOps::copy_columns(Tensor src_NX, int64_t src_col, Tensor dst_NY, int64_t dst_col,
                               int64_t width, float alpha, bool accumulate) {
  timed(__func__, OpClass::kElementwise, [&] {
    inner_->copy_columns(src_NX, src_col, dst_NY, dst_col, width, alpha, accumulate);
  });
}
void ProfiledOps::dropout(Tensor x, Tensor out, float p, uint64_t seed, bool accumulate) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->dropout(x, out, p, seed, accumulate); });
}
void ProfiledOps::lora_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                                      Tensor residual_NO, Tensor out_NO) {
  timed(__func__, OpClass::kGemm, [&] {
    inner_->lora_linear_forward(x_NI, weight_OI, alpha, bias_O, residual_NO, out_NO);
  });
  record_gemm(false, x_NI, weight_OI, 1);
}
void ProfiledOps::lora_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float alpha,
                                       Tensor dx_NI, Tensor dweight_OI, bool accumulate_dx,
                                       bool accumulate_dweight) {
  timed(__func__, OpClass::kGemm, [&] {
    inner_->lora_linear_backward(dout_NO, x_NI, weight_OI, alpha, dx_NI, dweight_OI, accumulate_dx,
                                 accumulate_dweight);
  });
  record_gemm(true, x_NI, weight_OI, (dx_NI.defined() ? 1 : 0) + (dweight_OI.defined() ? 1 : 0));
}
void ProfiledOps::geglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->geglu_forward(gate_NF, up_NF, out_NF); });
}
void ProfiledOps::geglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                                 Tensor dup_NF) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->geglu_backward(dout_NF, gate_NF, up_NF, dgate_NF, dup_NF); });
}
void ProfiledOps::rmsnorm1p_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                                    Tensor rstd_N) {
  timed(__func__, OpClass::kNorm,
        [&] { inner_->rmsnorm1p_forward(x_NC, weight_C, eps, out_NC, rstd_N); });
}
void ProfiledOps::rmsnorm1p_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                                     Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                                     bool accumulate_dweight) {
  timed(__func__, OpClass::kNorm, [&] {
    inner_->rmsnorm1p_backward(dout_NC, x_NC, weight_C, rstd_N, dx_NC, dweight_C, accumulate_dx,
                               accumulate_dweight);
  });
}
void ProfiledOps::softcap_forward(Tensor x, float cap, Tensor out) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->softcap_forward(x, cap, out); });
}
void ProfiledOps::softcap_backward(Tensor dout, Tensor x, float cap, Tensor dx) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->softcap_backward(dout, x, cap, dx); });
}
void ProfiledOps::scale(Tensor x, float factor) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->scale(x, factor); });
}
void ProfiledOps::swiglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->swiglu_forward(gate_NF, up_NF, out_NF); });
}
void ProfiledOps::swiglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                                  Tensor dup_NF) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->swiglu_backward(dout_NF, gate_NF, up_NF, dgate_NF, dup_NF); });
}
void ProfiledOps::moe_route(Tensor logits_NE, bool renormalize, Tensor expert_NK,
                            Tensor weight_NK, Tensor prob_sum_E) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->moe_route(logits_NE, renormalize, expert_NK, weight_NK, prob_sum_E); });
}
void ProfiledOps::moe_route_backward(Tensor dweight_NK, Tensor logits_NE, Tensor expert_NK,
                                     Tensor weight_NK, bool renormalize, Tensor aux_grad_E,
                                     Tensor dlogits_NE) {
  timed(__func__, OpClass::kElementwise, [&] {
    inner_->moe_route_backward(dweight_NK, logits_NE, expert_NK, weight_NK, renormalize,
                               aux_grad_E, dlogits_NE);
  });
}
std::vector<int64_t> ProfiledOps::moe_dispatch(Tensor expert_NK, int64_t experts,
                                               Tensor source_M, Tensor row_NK) {
  std::vector<int64_t> rows;
  timed(__func__, OpClass::kElementwise,
        [&] { rows = inner_->moe_dispatch(expert_NK, experts, source_M, row_NK); });
  return rows;
}
void ProfiledOps::moe_gather(Tensor x_NC, Tensor source_M, Tensor x_MC) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->moe_gather(x_NC, source_M, x_MC); });
}
void ProfiledOps::moe_gather_backward(Tensor dx_MC, Tensor row_NK, Tensor dx_NC,
                                      bool accumulate) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->moe_gather_backward(dx_MC, row_NK, dx_NC, accumulate); });
}
void ProfiledOps::moe_combine(Tensor y_MC, Tensor row_NK, Tensor weight_NK, Tensor residual_NC,
                              Tensor out_NC) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->moe_combine(y_MC, row_NK, weight_NK, residual_NC, out_NC); });
}
void ProfiledOps::moe_combine_backward(Tensor dout_NC, Tensor y_MC, Tensor row_NK,
                                       Tensor weight_NK, Tensor dy_MC, Tensor dweight_NK) {
  timed(__func__, OpClass::kElementwise, [&] {
    inner_->moe_combine_backward(dout_NC, y_MC, row_NK, weight_NK, dy_MC, dweight_NK);
  });
}
void ProfiledOps::grouped_linear_forward(Tensor x_MI, Tensor weight_EOI,
                                         const std::vector<int64_t>& rows_E, Tensor out_MO) {
  timed(__func__, OpClass::kGemm,
        [&] { inner_->grouped_linear_forward(x_MI, weight_EOI, rows_E, out_MO); });
}
void ProfiledOps::grouped_linear_backward(Tensor dout_MO, Tensor x_MI, Tensor weight_EOI,
                                          const std::vector<int64_t>& rows_E, Tensor dx_MI,
                                          Tensor dweight_EOI, bool accumulate_dx,
                                          bool accumulate_dweight) {
  timed(__func__, OpClass::kGemm, [&] {
    inner_->grouped_linear_backward(dout_MO, x_MI, weight_EOI, rows_E, dx_MI, dweight_EOI,
                                    accumulate_dx, accumulate_dweight);
  });
}
void ProfiledOps::cross_entropy(Tensor logits_NV, Tensor targets_N, float grad_scale,
                                Tensor loss_sum_1, bool compute_grad) {
  timed(__func__, OpClass::kLoss,
        [&] { inner_->cross_entropy(logits_NV, targets_N, grad_scale, loss_sum_1, compute_grad); });
}
void ProfiledOps::adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step) {
  timed(__func__, OpClass::kOptimizer, [&] { inner_->adamw_multi(segments, step); });
}
void ProfiledOps::sum_squares(Tensor x, Tensor out_1) {
  timed(__func__, OpClass::kOptimizer, [&] { inner_->sum_squares(x, out_1); });
}
void ProfiledOps::fp8_range_amax(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S) {
  timed(__func__, OpClass::kElementwise, [&] { inner_->fp8_range_amax(x, ranges, amax_S); });
}
void ProfiledOps::fp8_range_quantize(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                                     Tensor bytes_u8) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->fp8_range_quantize(x, ranges, amax_S, bytes_u8); });
}
void ProfiledOps::fp8_range_dequantize(Tensor bytes_u8, const std::vector<Fp8Range>& ranges,
                                       Tensor amax_S, Tensor out) {
  timed(__func__, OpClass::kElementwise,
        [&] { inner_->fp8_range_dequantize(bytes_u8, ranges, amax_S, out); });
}
float ProfiledOps::read_scalar(Tensor x_1) {
  float value = 0;
  timed(__func__, OpClass::kMemory, [&] { value = inner_->read_scalar(x_1); });
  return value;
}

}  // namespace shardtrain
