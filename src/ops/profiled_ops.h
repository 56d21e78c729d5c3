// ProfiledOps: an Ops decorator that measures where a step's device time goes, by op class
// (GEMM, attention, norms, elementwise, loss, optimizer, ...), for `SHARDTRAIN_PROFILE_OPS=1`
// (ops/backend.h make_ops wraps the backend when it is set).
//
// Each call synchronises the device before and after the wrapped op and adds the wall time to
// its class, so the figures are exact per-op device times but the run itself is slower (no
// overlap, no queued launches; work the backend would run aside runs in order: runs_aside() is
// false, sum_squares_aside is sum_squares, and FSDP updates in order): a profile run is for the
// breakdown, never for tokens/s. On
// destruction the table (class, calls, ms, share) is written to the log: per training step,
// averaged over the steps after the first (which also holds one-time work: weight upload,
// cuBLASLt algorithm search), when there are at least two; else totals. The trainer ends each
// step (Ops::end_step, after the optimizer update); ops after the last one (the final export)
// count in the run's totals only. A second table splits
// the time by Ops method, a third the GEMM time by direction and shape (tokens x in -> out) with
// the achieved TFLOP/s.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ops/ops.h"

namespace shardtrain {

enum class OpClass {
  kGemm,
  kAttention,
  kNorm,
  kElementwise,
  kEmbedding,
  kLoss,
  kOptimizer,
  kMemory,
  kCount
};
const char* op_class_name(OpClass op_class);

class ProfiledOps final : public Ops {
 public:
  explicit ProfiledOps(std::unique_ptr<Ops> inner);
  ~ProfiledOps() override;

  struct ClassTotals {
    int64_t calls = 0;
    double seconds = 0;
  };
  using Table = std::array<ClassTotals, static_cast<size_t>(OpClass::kCount)>;
  // Totals over every call so far.
  ClassTotals totals(OpClass op_class) const;
  // Closes the current step (see the header comment).
  void end_step() override;
  // Completed steps, each with its per-class totals.
  const std::vector<Table>& steps() const { return steps_; }
  // The GEMM-by-shape lines of the log table (steps 2..N; empty before a second step).
  std::string gemm_shape_table() const;
  // The per-op-method lines of the log table (steps 2..N, per step; empty before a second step).
  std::string op_name_table() const;

  Device device() const override { return inner_->device(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }

  void* allocate(size_t bytes) override;
  void release(void* pointer) override;
  void copy_from_host(Tensor dst, const void* src) override;
  void copy_to_host(void* dst, Tensor src) override;
  void fill_zero(Tensor dst) override;
  void cast(Tensor dst, Tensor src) override;
  void synchronize() override { inner_->synchronize(); }
  std::optional<double> host_wait_seconds() const override { return inner_->host_wait_seconds(); }

  void add(Tensor out, Tensor a, Tensor b) override;
  void embedding_forward(Tensor ids_N, Tensor table_VC, Tensor out_NC) override;
  void embedding_backward(Tensor ids_N, Tensor dout_NC, Tensor dtable_VC) override;
  void rmsnorm_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                       Tensor rstd_N) override;
  void rmsnorm_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N, Tensor dx_NC,
                        Tensor dweight_C, bool accumulate_dx, bool accumulate_dweight) override;
  void linear_forward(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor out_NO) override;
  void linear_forward_residual(Tensor x_NI, Tensor weight_OI, Tensor residual_NO,
                               Tensor out_NO) override;
  void linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                       Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                       bool accumulate_dweight) override;
  std::string fp8_unsupported_reason() const override { return inner_->fp8_unsupported_reason(); }
  void linear_forward_fp8(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor residual_NO,
                          Tensor out_NO, Fp8Site site) override;
  void linear_backward_fp8(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                           Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                           bool accumulate_dweight, Fp8Site site) override;
  void swiglu_linears_backward_fp8(Tensor dact_NF, Tensor gate_NF, Tensor up_NF, Tensor x_NC,
                                   Tensor gate_weight_FC, Tensor up_weight_FC, Tensor dgate_NF,
                                   Tensor dup_NF, Tensor dx_NC, Tensor dgate_weight_FC,
                                   Tensor dup_weight_FC, bool accumulate_dweight, Fp8Site gate_site,
                                   Fp8Site up_site) override;
  void swiglu_linear_forward_fp8(Tensor gate_NF, Tensor up_NF, Tensor act_NF, Tensor weight_CF,
                                 Tensor residual_NC, Tensor out_NC, Fp8Site site) override;
  void split_qkv_rope(Tensor qkv_NX, Tensor positions_N, Tensor cos_PR, Tensor sin_PR, Tensor q_NHD,
                      Tensor k_NKD, Tensor v_NKD) override;
  void pack_qkv_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD, Tensor positions_N,
                              Tensor cos_PR, Tensor sin_PR, Tensor dqkv_NX) override;
  void split_qkv_norm_rope(Tensor qkv_NX, const QkNorm& norm, Tensor positions_N, Tensor cos_PR,
                           Tensor sin_PR, Tensor q_raw_NHD, Tensor k_raw_NKD, Tensor v_NKD,
                           Tensor q_NHD, Tensor k_NKD) override;
  void qk_norm_rope(Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm, Tensor positions_N,
                    Tensor cos_PR, Tensor sin_PR, Tensor q_NHD, Tensor k_NKD) override;
  void pack_qkv_norm_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD, Tensor q_raw_NHD,
                                   Tensor k_raw_NKD, const QkNorm& norm, Tensor positions_N,
                                   Tensor cos_PR, Tensor sin_PR, Tensor dq_weight_D,
                                   Tensor dk_weight_D, bool accumulate_dweight,
                                   Tensor dqkv_NX) override;
  void copy_columns(Tensor src_NX, int64_t src_col, Tensor dst_NY, int64_t dst_col, int64_t width,
                    float alpha, bool accumulate) override;
  void dropout(Tensor x, Tensor out, float p, uint64_t seed, bool accumulate) override;
  void lora_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                           Tensor residual_NO, Tensor out_NO) override;
  void lora_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float alpha,
                            Tensor dx_NI, Tensor dweight_OI, bool accumulate_dx,
                            bool accumulate_dweight) override;
  void swiglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) override;
  void swiglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                       Tensor dup_NF) override;
  void geglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) override;
  void geglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                      Tensor dup_NF) override;
  void rmsnorm1p_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                         Tensor rstd_N) override;
  void rmsnorm1p_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N, Tensor dx_NC,
                          Tensor dweight_C, bool accumulate_dx, bool accumulate_dweight) override;
  void softcap_forward(Tensor x, float cap, Tensor out) override;
  void softcap_backward(Tensor dout, Tensor x, float cap, Tensor dx) override;
  void scale(Tensor x, float factor) override;
  // Mixture of experts: routing and permutations count as elementwise, the grouped linears as
  // GEMMs; the per-method table splits them (router, permutation, grouped GEMMs).
  void moe_route(Tensor logits_NE, bool renormalize, Tensor expert_NK, Tensor weight_NK,
                 Tensor prob_sum_E) override;
  void moe_route_backward(Tensor dweight_NK, Tensor logits_NE, Tensor expert_NK, Tensor weight_NK,
                          bool renormalize, Tensor aux_grad_E, Tensor dlogits_NE) override;
  std::vector<int64_t> moe_dispatch(Tensor expert_NK, int64_t experts, Tensor source_M,
                                    Tensor row_NK) override;
  void moe_gather(Tensor x_NC, Tensor source_M, Tensor x_MC) override;
  void moe_gather_backward(Tensor dx_MC, Tensor row_NK, Tensor dx_NC, bool accumulate) override;
  void moe_combine(Tensor y_MC, Tensor row_NK, Tensor weight_NK, Tensor residual_NC,
                   Tensor out_NC) override;
  void moe_combine_backward(Tensor dout_NC, Tensor y_MC, Tensor row_NK, Tensor weight_NK,
                            Tensor dy_MC, Tensor dweight_NK) override;
  void grouped_linear_forward(Tensor x_MI, Tensor weight_EOI, const std::vector<int64_t>& rows_E,
                              Tensor out_MO) override;
  void grouped_linear_backward(Tensor dout_MO, Tensor x_MI, Tensor weight_EOI,
                               const std::vector<int64_t>& rows_E, Tensor dx_MI, Tensor dweight_EOI,
                               bool accumulate_dx, bool accumulate_dweight) override;
  void cross_entropy(Tensor logits_NV, Tensor targets_N, float grad_scale, Tensor loss_sum_1,
                     bool compute_grad) override;
  void adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step) override;
  void sum_squares(Tensor x, Tensor out_1) override;
  float read_scalar(Tensor x_1) override;
  void fp8_range_amax(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S) override;
  void fp8_range_quantize(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                          Tensor bytes_u8) override;
  void fp8_range_dequantize(Tensor bytes_u8, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                            Tensor out) override;

 protected:
  void masked_attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale,
                                const AttentionMask& mask, Tensor out_BTHD,
                                Tensor lse_BHT) override;
  void masked_attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD,
                                 Tensor out_BTHD, Tensor lse_BHT, float scale,
                                 const AttentionMask& mask, Tensor dq_BTHD, Tensor dk_BTKD,
                                 Tensor dv_BTKD) override;

 private:
  // Completed steps 2..N so far: the tables' divisor; 0 before a second step.
  double steps_after_first() const;
  // Synchronises, runs `op`, synchronises, adds the time to `op_class` and (from step 2 on) to
  // the row of `op_name` (the Ops method's name).
  template <typename Op>
  void timed(const char* op_name, OpClass op_class, Op&& op);

  // Adds a GEMM's time (just measured by `timed`) to the row of its shape (rows of x_NI x in ->
  // out of weight_OI), from step 2 on; `products` GEMMs of that size ran (backward: dweight, and
  // dx when it was asked for).
  void record_gemm(bool backward, const Tensor& x_NI, const Tensor& weight_OI, int products);

  std::unique_ptr<Ops> inner_;
  struct GemmShapeTotals {
    int64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  // (backward, rows, in, out) -> totals over steps 2..N.
  std::map<std::tuple<bool, int64_t, int64_t, int64_t>, GemmShapeTotals> gemm_shapes_;
  std::map<std::string, ClassTotals> op_names_;  // Ops method -> totals over steps 2..N
  double last_op_seconds_ = 0;                   // duration of the latest `timed` call
  // Completed steps, then the current one (since the last step boundary). The totals over the
  // run and per step are sums of these.
  Table sum_from_step(size_t first) const;
  Table current_step_{};
  std::vector<Table> steps_;
  std::chrono::steady_clock::time_point created_;
};

}  // namespace shardtrain
