// CpuOps: the fp32 reference backend of the Ops interface (ops/ops.h).
//
// Everything is fp32 on the host: activations, statistics, gradients. GEMMs go through OpenBLAS
// (cblas_sgemm, which threads large products itself); the rest are plain loops. Numerics follow
// Hugging Face transformers' fp32 Llama (RMSNorm in fp32, HF rotate-half RoPE, max-subtracted
// softmax) and torch.optim.AdamW's single-tensor formula, so golden tests against transformers
// hold at 1e-4 on logits. Reductions that feed a single number (RMSNorm mean, log-sum-exp sums,
// sum of squares) accumulate in double.
//
// The op families live in separate files: cpu_ops.cpp (memory, elementwise, optimizer),
// cpu_layers.cpp (embedding, RMSNorm, linear, RoPE, SwiGLU), cpu_qk_norm_rope.cpp (per-head q/k
// norms fused with the split and rope), cpu_activation_ops.cpp (GeGLU, soft-capping),
// cpu_attention.cpp, cpu_cross_entropy.cpp, cpu_fp8_gather.cpp (the FP8 all-gather's casts).
#pragma once

#include <memory>

#include "ops/ops.h"

namespace shardtrain {

// Not final: tests derive from it to replay its ops in another order (ops/testing/).
class CpuOps : public Ops {
 public:
  Device device() const override { return Device::kCpu; }
  DType activation_dtype() const override { return DType::kF32; }
  // FP8 is a GPU feature: the reference backend computes in fp32 (train.precision = "bf16").
  std::string fp8_unsupported_reason() const override {
    return "the CPU backend computes in fp32; FP8 matmuls run on CUDA GPUs of compute "
           "capability 8.9+ (L4, H100, H200)";
  }

  // ---- memory: 64-byte aligned, zero-filled host allocations ----
  void* allocate(size_t bytes) override;
  void release(void* pointer) override;
  void copy_from_host(Tensor dst, const void* src) override;
  void copy_to_host(void* dst, Tensor src) override;
  void fill_zero(Tensor dst) override;
  void cast(Tensor dst, Tensor src) override;
  void synchronize() override {}

  // ---- elementwise ----
  void add(Tensor out, Tensor a, Tensor b) override;
  void scale(Tensor x, float factor) override;  // x *= factor

  // ---- layers (cpu_layers.cpp) ----
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
  void split_qkv_rope(Tensor qkv_NX, Tensor positions_N, Tensor cos_PR, Tensor sin_PR, Tensor q_NHD,
                      Tensor k_NKD, Tensor v_NKD) override;
  void pack_qkv_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD, Tensor positions_N,
                              Tensor cos_PR, Tensor sin_PR, Tensor dqkv_NX) override;
  // ---- per-head q/k norms with the split and rope (cpu_qk_norm_rope.cpp) ----
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
  // ---- LoRA column blocks and dropout (cpu_lora.cpp) ----
  void copy_columns(Tensor src_NX, int64_t src_col, Tensor dst_NY, int64_t dst_col, int64_t width,
                    float alpha, bool accumulate) override;
  void dropout(Tensor x, Tensor out, float p, uint64_t seed, bool accumulate) override;
  void swiglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) override;
  void swiglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                       Tensor dup_NF) override;
  void rmsnorm1p_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                         Tensor rstd_N) override;
  void rmsnorm1p_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N, Tensor dx_NC,
                          Tensor dweight_C, bool accumulate_dx, bool accumulate_dweight) override;
  // ---- GeGLU and soft-capping (cpu_activation_ops.cpp) ----
  void geglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) override;
  void geglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                      Tensor dup_NF) override;
  void softcap_forward(Tensor x, float cap, Tensor out) override;
  void softcap_backward(Tensor dout, Tensor x, float cap, Tensor dx) override;

  // ---- mixture of experts (cpu_moe.cpp): grouped GEMMs loop over the experts ----
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

  // ---- loss (cpu_cross_entropy.cpp) ----
  void cross_entropy(Tensor logits_NV, Tensor targets_N, float grad_scale, Tensor loss_sum_1,
                     bool compute_grad) override;

  // ---- optimizer and norms ----
  // Segment by segment: adamw, cast, fill_zero (the definition of the op's result).
  void adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step) override;
  // ---- FP8 all-gather (cpu_fp8_gather.cpp): core/fp8_e4m3.h's conversions ----
  void fp8_range_amax(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S) override;
  void fp8_range_quantize(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                          Tensor bytes_u8) override;
  void fp8_range_dequantize(Tensor bytes_u8, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                            Tensor out) override;
  void sum_squares(Tensor x, Tensor out_1) override;
  float read_scalar(Tensor x_1) override;

  // ---- pieces outside the Ops interface: the references tests compare against ----
  // AdamW on one contiguous range (all fp32, same n); adamw_multi applies it per segment.
  void adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& step);

 protected:
  // ---- attention (cpu_attention.cpp): causal, with an optional sliding window ----
  void masked_attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale,
                                const AttentionMask& mask, Tensor out_BTHD,
                                Tensor lse_BHT) override;
  void masked_attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD,
                                 Tensor out_BTHD, Tensor lse_BHT, float scale,
                                 const AttentionMask& mask, Tensor dq_BTHD, Tensor dk_BTKD,
                                 Tensor dv_BTKD) override;
};

std::unique_ptr<Ops> make_cpu_ops();

}  // namespace shardtrain
