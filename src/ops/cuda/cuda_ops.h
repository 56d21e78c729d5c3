// CudaOps: the CUDA backend of the Ops interface (ops/ops.h): bf16 activations, fp32
// accumulation, cuBLASLt GEMMs, hand-written kernels for everything else.
//
// One CudaOps drives the device that is current when it is constructed and owns one compute
// stream; every op is enqueued on that stream (asynchronous), and only copy_to_host and
// read_scalar synchronise (their time is host_wait_seconds()). `stream()` is exposed for the
// FSDP/NCCL layer, which orders its own streams against this one with events.
//
// Files: cuda_ops.cpp (memory, elementwise, optimizer), cuda_layers.cpp (the layer ops),
// cuda_gemm.cpp (linear, through cuBLASLt) check their Tensors and call the raw-pointer kernel
// launchers of cuda_kernels.h, which live one op family per .cu file, forward and backward side
// by side. The .cu files never include fmt (nvcc rejects its compile-time format checks).
//
// Dtypes: activations and gathered params bf16 (f32 is also accepted where the model could
// pass it); parameter grads f32 or bf16; rstd, lse, loss and optimizer state f32; ids, targets
// and positions i32. Unsupported combinations abort with file:line.
//
// CUDA and cuBLASLt failures abort with file:line and the library's message: they are broken
// invariants or broken machines, not user errors.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>

#include "ops/ops.h"
#include "ops/ops_switches.h"

namespace shardtrain {

class CublasLtGemm;
class CudaGroupedGemm;
class Fp8Linear;
namespace cuda_kernels {
class AdamWMultiLauncher;
class AttentionForwardTuning;
enum class Fp8Format;
}  // namespace cuda_kernels

class CudaOps final : public Ops {
 public:
  // REQUIRES: a visible GPU (cuda_device_count() > 0); uses the current device.
  // aside_by_default: whether aside work runs aside when SHARDTRAIN_OPS_ASIDE is unset
  // (ops/ops_switches.h: on for a job of one rank).
  explicit CudaOps(bool aside_by_default = false);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  Device device() const override { return Device::kCuda; }
  DType activation_dtype() const override { return DType::kBF16; }
  // "" on compute capability 8.9+ (device_limits(), so a test override counts), else why not.
  std::string fp8_unsupported_reason() const override;
  cudaStream_t stream() const { return stream_; }
  // The attention forward kernels chosen so far, by shape (cuda_attention_tuning.h; tests).
  const cuda_kernels::AttentionForwardTuning& attention_forward_tuning() const {
    return *attention_tuning_;
  }
  int device_index() const { return device_index_; }

  // ---- memory (cuda_ops.cpp): cudaMalloc, zero-filled on the compute stream ----
  void* allocate(size_t bytes) override;
  void release(void* pointer) override;
  void copy_from_host(Tensor dst, const void* src) override;
  void copy_to_host(void* dst, Tensor src) override;
  void fill_zero(Tensor dst) override;
  void cast(Tensor dst, Tensor src) override;
  void synchronize() override;
  std::optional<double> host_wait_seconds() const override;

  // ---- elementwise (cuda_ops.cpp) ----
  void add(Tensor out, Tensor a, Tensor b) override;
  void scale(Tensor x, float factor) override;  // x *= factor

  // ---- layers (cuda_layers.cpp) ----
  void embedding_forward(Tensor ids_N, Tensor table_VC, Tensor out_NC) override;
  void embedding_backward(Tensor ids_N, Tensor dout_NC, Tensor dtable_VC) override;
  void rmsnorm_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                       Tensor rstd_N) override;
  void rmsnorm_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N, Tensor dx_NC,
                        Tensor dweight_C, bool accumulate_dx, bool accumulate_dweight) override;
  void split_qkv_rope(Tensor qkv_NX, Tensor positions_N, Tensor cos_PR, Tensor sin_PR, Tensor q_NHD,
                      Tensor k_NKD, Tensor v_NKD) override;
  void pack_qkv_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD, Tensor positions_N,
                              Tensor cos_PR, Tensor sin_PR, Tensor dqkv_NX) override;
  // ---- per-head q/k norms with the split and rope (cuda_qk_norm_rope_ops.cpp) ----
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
  // ---- LoRA column blocks and dropout (cuda_lora_ops.cpp) ----
  void copy_columns(Tensor src_NX, int64_t src_col, Tensor dst_NY, int64_t dst_col, int64_t width,
                    float alpha, bool accumulate) override;
  void dropout(Tensor x, Tensor out, float p, uint64_t seed, bool accumulate) override;
  // ---- LoRA's rank-wide products (cuda_lora_linear.cpp; kernels in cuda_lora_gemm.cu) ----
  void lora_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                           Tensor residual_NO, Tensor out_NO) override;
  void lora_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float alpha,
                            Tensor dx_NI, Tensor dweight_OI, bool accumulate_dx,
                            bool accumulate_dweight) override;
  void swiglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) override;
  void swiglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                       Tensor dup_NF) override;
  // ---- Gemma's ops (cuda_activation_ops.cpp): 1 + weight RMSNorm, GeGLU, soft-capping ----
  void rmsnorm1p_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                         Tensor rstd_N) override;
  void rmsnorm1p_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N, Tensor dx_NC,
                          Tensor dweight_C, bool accumulate_dx, bool accumulate_dweight) override;
  void geglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) override;
  void geglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                      Tensor dup_NF) override;
  void softcap_forward(Tensor x, float cap, Tensor out) override;
  void softcap_backward(Tensor dout, Tensor x, float cap, Tensor dx) override;
  void cross_entropy(Tensor logits_NV, Tensor targets_N, float grad_scale, Tensor loss_sum_1,
                     bool compute_grad) override;

  // ---- linear (cuda_gemm.cpp) ----
  void linear_forward(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor out_NO) override;
  void linear_forward_residual(Tensor x_NI, Tensor weight_OI, Tensor residual_NO,
                               Tensor out_NO) override;
  void linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                       Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                       bool accumulate_dweight) override;

  // ---- FP8 linear (cuda_linear_fp8.cpp): Fp8Linear, made at the first call ----
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
  // Outside the interface: the gradient format (default e5m2; the GPU tests measure e4m3), the
  // gradient GEMMs' fast accumulation (default: SHARDTRAIN_FP8_GRAD_FAST_ACCUM) and the bytes of
  // FP8 copies held now.
  void set_fp8_gradient_format(cuda_kernels::Fp8Format format);
  void set_fp8_gradient_fast_accumulation(bool on);
  size_t fp8_workspace_bytes() const;

  // ---- FP8 all-gather casts (cuda_fp8_gather_ops.cpp; kernels: cuda_fp8_gather.cu) ----
  void fp8_range_amax(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S) override;
  void fp8_range_quantize(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                          Tensor bytes_u8) override;
  void fp8_range_dequantize(Tensor bytes_u8, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                            Tensor out) override;

  // ---- optimizer and norms (cuda_ops.cpp) ----
  // One launch; the segment table is uploaded only when the segments change (cuda_kernels.h).
  void adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step) override;
  void sum_squares(Tensor x, Tensor out_1) override;
  float read_scalar(Tensor x_1) override;
  void sum_squares_aside(Tensor x, Tensor out_1) override;
  void join_aside() override;
  bool runs_aside() const override { return aside_; }
  int64_t adamw_multi_aside(const std::vector<AdamWSegment>& segments,
                            const AdamWStep& step) override;
  void wait_aside(int64_t ticket) override;

  // ---- outside the Ops interface: compared with CpuOps's references by the GPU tests ----
  // AdamW on one contiguous range, one launch (cuda_ops.cpp).
  void adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& step);

 protected:
  // Every mask of ops/attention_mask.h (causal, window, documents), in every kernel of the
  // dispatch table (cuda_dispatch.h).
  void masked_attention_forward(Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD, float scale,
                                const AttentionMask& mask, Tensor out_BTHD,
                                Tensor lse_BHT) override;
  void masked_attention_backward(Tensor dout_BTHD, Tensor q_BTHD, Tensor k_BTKD, Tensor v_BTKD,
                                 Tensor out_BTHD, Tensor lse_BHT, float scale,
                                 const AttentionMask& mask, Tensor dq_BTHD, Tensor dk_BTKD,
                                 Tensor dv_BTKD) override;

  // ---- mixture of experts (cuda_moe_ops.cpp; kernels: cuda_moe.cu, cuda_grouped_gemm.cpp) ----
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

 private:
  // The grouped GEMMs' cuBLAS handle, made at the first grouped linear (shared_ptr: its
  // deleter is bound there, so this header needs no complete type).
  std::shared_ptr<CudaGroupedGemm> grouped_gemm_;
  // linear_forward(_residual) and linear_backward with the product scaled by alpha (in
  // backward, d(x)'s only): cuBLASLt's alpha, no scaling pass (cuda_gemm.cpp). LoRA's products
  // take them (cuda_lora_linear.cpp). REQUIRES: no bias with a residual; alpha 1 with a bias.
  void scaled_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                             Tensor residual_NO, Tensor out_NO);
  void scaled_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float dx_alpha,
                              Tensor dx_NI, Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                              bool accumulate_dweight);
  // fp32 scratch of at least `count` floats, valid until the next call (ops run in stream
  // order, so one op's scratch is never live when the next op is enqueued). Growing it
  // synchronises the stream once.
  float* scratch_floats(size_t count);
  // cudaStreamSynchronize on the compute stream, its time added to host_wait_seconds().
  void wait_for_stream();
  // `bytes` from device `src` into host `dst` after the stream's earlier work, the copy and the
  // synchronisation timed together as a host wait.
  void read_to_host(void* dst, const void* src, size_t bytes);
  // Runs `call` (a CUDA call that may block the host on the device: a stream synchronisation,
  // cudaFree, a copy from pageable memory) and adds its time to host_wait_seconds().
  template <typename Call>
  void count_host_wait(Call&& call);
  // The FP8 linears' state; throws Error (fp8_unsupported_reason) below compute capability 8.9.
  Fp8Linear& fp8();

  int device_index_ = 0;
  cudaStream_t stream_ = nullptr;
  // The aside work's stream (sum_squares_aside, adamw_multi_aside); fork_: recorded on stream_
  // before each aside launch, join_: on aside_stream_ when joining; aside_pending_: launched and
  // not yet joined. With aside work on, stream_ has the device's highest priority, so the block
  // scheduler starts its kernels' blocks first and the aside work fills what they leave idle.
  cudaStream_t aside_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  bool aside_pending_ = false;
  // adamw_multi_aside's tickets: ticket t was recorded into ticket_events_[t % size] on
  // aside_stream_. A ring: when a ticket's event has been recorded again by a newer ticket, waiting
  // on it waits for more aside work than asked, never less.
  std::vector<cudaEvent_t> ticket_events_;
  int64_t next_ticket_ = 1;
  // The newest ticket the compute stream has been made to wait for: updates issued after it are
  // still pending (from the host's view, which enqueues ahead of the device).
  int64_t waited_ticket_ = 0;
  // SHARDTRAIN_ASIDE_GEMM_SMS (with aside work on): while updates are pending, the bf16 GEMMs
  // are planned for this many fewer SMs than the device has (CublasLtGemm::set_sm_count_target).
  int aside_gemm_sms_ = 0;
  int device_sms_ = 0;
  // The GEMMs' SM target for whether updates are pending now.
  void update_gemm_sm_target();
  // adamw_multi on `stream` (stream_, or aside_stream_ for adamw_multi_aside).
  void launch_adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step,
                          cudaStream_t stream);
  bool aside_ = false;  // SHARDTRAIN_OPS_ASIDE: on runs aside work on aside_stream_
  std::unique_ptr<CublasLtGemm> gemm_;
  std::unique_ptr<Fp8Linear> fp8_;
  std::unique_ptr<cuda_kernels::AdamWMultiLauncher> adamw_multi_;
  std::unique_ptr<cuda_kernels::AttentionForwardTuning> attention_tuning_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  // Nanoseconds spent in count_host_wait (atomic: a checkpoint writer thread reads shards too).
  std::atomic<int64_t> host_wait_ns_{0};
};

// Makes `device_index` the current device (cudaSetDevice), then a CudaOps on it. Throws Error
// (exit 2) naming the GPU when its compute capability is below 8.0 (cuda_dispatch.h).
std::unique_ptr<Ops> make_cuda_ops(int device_index = 0);
// Visible CUDA devices; 0 (not an error) when there is no driver or no GPU.
int cuda_device_count();
// Free and total memory of the current device (cudaMemGetInfo).
void cuda_memory_info(size_t* free_bytes, size_t* total_bytes);

}  // namespace shardtrain
