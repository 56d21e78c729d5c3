// Fp8Linear: what CudaOps::linear_forward_fp8 / linear_backward_fp8 run (ops/ops.h): each
// linear's GEMMs in FP8 with per-tensor current scaling, bf16 activations in and out.
//
//   forward  out_NO = x_NI W_OI^T:   x -> e4m3 (N x I), W -> e4m3 (O x I); TN GEMM, K = I
//   dgrad    dx_NI = dout_NO W_OI:   dout -> grad format (N x O), W -> e4m3 W^T (I x O); K = O
//   wgrad    dW_OI = dout^T x_NI:    dout -> grad format dout^T (O x N), x -> e4m3 x^T (I x N);
//                                    K = N
// Scaling, per call (Fp8Site, ops/ops.h):
//  - current (site id -1): each operand's amax over the whole tensor (one pass), then one cast
//    pass writes its FP8 copies (dout: both layouts in the same pass) and its dequantisation
//    factor;
//  - delayed (site id >= 0): the linear keeps, per operand (x, W, dout), an amax history of its
//    last kFp8AmaxHistory casts on the device (cuda_fp8.h fp8_cast_delayed); a cast scales by
//    the history's max and records its own amax in the same pass, so each operand is read once.
//    The first cast of an operand (empty history) runs the amax pass first. x and W enter their
//    history in forward, so backward's x^T and W^T casts never saturate; dout can, for one call,
//    when it outgrows its last 16 amaxes (the overflow policy of cuda_fp8.h).
// Nothing waits for the host. The weight's amax is over the gathered bf16 weight the GEMM reads,
// so every rank quantises the same values the same way.
// With Fp8Site::same_input_as_previous the previous call's FP8 copy of x (and its scale) is
// reused when that call was in the same direction, made the copy, and had the same x pointer
// and shape (the MLP's up after gate).
//
// Kept input (Fp8Site::input_kept_in_fp8, the MLP's down projection): swiglu_forward writes the
// product's FP8 transposed copy (what the weight gradient reads) into the caller's act buffer,
// in place of the bf16 product: its I x N bytes, then at byte fp8_copy_bytes(N * I) the f32
// dequantisation factor (fp8_kept_input_bytes in all; the bf16 product's 2 N I bytes hold it).
// The cast is forward's own (the site's delayed x scale), so backward casts no x^T, and the
// forward kernel writes no bf16 product. The site remembers the buffer and shape; its next
// backward with that same x reads the copy and forgets it, and any other forward of the site
// forgets it too, so a bf16 x is never read as FP8.
//
// The gradient GEMMs use fast accumulation unless SHARDTRAIN_FP8_GRAD_FAST_ACCUM=0
// (cuda_fp8_support.h). Gradients default to e5m2 (cuda_fp8_support.h kDefaultFp8GradFormat says why); e4m3 is
// selectable for measurements (CudaOps::set_fp8_gradient_format).
//
// Workspace: the FP8 copies of the largest linear so far, grown on demand (growing
// synchronises the stream once); fp8_linear_workspace_bytes gives its size for a shape.
// Internal to ops/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "core/dtype.h"
#include "ops/cuda/cuda_fp8.h"
#include "ops/cuda/cuda_gemm_fp8.h"
#include "ops/ops.h"

namespace shardtrain {

struct Fp8LinearShape {
  int64_t rows = 0, in_features = 0, out_features = 0;  // N, I, O
};

// True when all three GEMMs of the shape meet the FP8 GEMM's size rules; other shapes run bf16.
bool fp8_linear_shape_ok(const Fp8LinearShape& shape);
// Bytes of FP8 copies one forward or backward of the shape needs (the larger of the two).
size_t fp8_linear_workspace_bytes(const Fp8LinearShape& shape);
// Bytes of a kept input of rows x cols (above): the FP8 copy and its scale's 256-byte slot.
size_t fp8_kept_input_bytes(int64_t rows, int64_t cols);

class Fp8Linear {
 public:
  explicit Fp8Linear(cudaStream_t stream);
  ~Fp8Linear();
  Fp8Linear(const Fp8Linear&) = delete;
  Fp8Linear& operator=(const Fp8Linear&) = delete;

  void set_gradient_format(cuda_kernels::Fp8Format format) { grad_format_ = format; }
  cuda_kernels::Fp8Format gradient_format() const { return grad_format_; }
  // cuBLASLt fast accumulation in the dgrad and wgrad GEMMs (the forward GEMM always has it);
  // default: cuda_kernels::fp8_grad_fast_accum_enabled().
  void set_gradient_fast_accumulation(bool on) { grad_fast_accumulation_ = on; }

  // out = x W^T (+ bias) (+ residual: beta 1, out may alias it). x, W, bias, residual, out bf16.
  // REQUIRES: fp8_linear_shape_ok(shape).
  void forward(const Fp8LinearShape& shape, const void* x, const void* weight, const void* bias,
               const void* residual, void* out, const Fp8Site& site = Fp8Site());
  // dx = dout W (= or +=; skipped when dx is null); dweight = or += dout^T x (skipped when
  // null), dweight bf16 or f32. With site.input_kept_in_fp8 and x the buffer this site's last
  // swiglu_forward kept its input in (same shape), x is read as that FP8 copy (class comment).
  void backward(const Fp8LinearShape& shape, const void* dout, const void* x, const void* weight,
                void* dx, bool accumulate_dx, void* dweight, DType dweight_dtype,
                bool accumulate_dweight, const Fp8Site& site = Fp8Site());

  // The MLP's gate and up backward from SwiGLU's output gradient (Ops::swiglu_linears_backward_fp8)
  // with SwiGLU's gradients cast to FP8 in the SwiGLU kernel (cuda_fp8.h swiglu_backward_fp8):
  // shape is gate's and up's (N, C, F); dx overwritten (gate) then added to (up); the weight
  // gradients as backward's. Returns false, doing nothing, until both sites' dout has a history
  // (the caller then runs the unfused path, which starts it). REQUIRES: both sites' ids >= 0.
  bool swiglu_backward(const Fp8LinearShape& shape, const void* dact, const void* gate_act,
                       const void* up_act, const void* x, const void* gate_weight,
                       const void* up_weight, void* dx, void* dgate_weight, void* dup_weight,
                       DType dweight_dtype, bool accumulate_dweight, const Fp8Site& gate_site,
                       const Fp8Site& up_site);

  // The MLP's down projection from SwiGLU's inputs (Ops::swiglu_linear_forward_fp8): act =
  // silu(gate) * up (N x I, bf16) written to act (unless null) and cast to FP8 in the same pass
  // with the site's delayed x scale (cuda_fp8.h swiglu_forward_fp8), then forward's GEMM.
  // Returns false, doing nothing, until the site's x has a history (the caller then runs the
  // unfused path, which starts it). With site.input_kept_in_fp8 and act non-null, act receives
  // the kept FP8 input instead of the bf16 product (class comment), and a first call starts the
  // history itself (the bf16 product into act, its amax, then the fused cast over it): never
  // false. REQUIRES: site.id >= 0, fp8_linear_shape_ok(shape); with a kept input, act holds
  // fp8_kept_input_bytes(rows, in_features) and is 16-byte aligned.
  bool swiglu_forward(const Fp8LinearShape& shape, const void* gate, const void* up, void* act,
                      const void* weight, const void* residual, void* out, const Fp8Site& site);

  size_t workspace_bytes() const { return capacity_; }
  // A linear ran outside this class (the bf16 fallback): no x copy is reusable after it.
  void forget_input() { last_input_ = LastInput{}; }
  // Whether `site`'s last swiglu_forward kept its input in x (rows x cols), unread so far.
  bool holds_kept_input(const Fp8Site& site, const void* x, int64_t rows, int64_t cols) const;
  // The site's forward ran outside this class (the bf16 fallback): what it kept is overwritten.
  void forget_kept_input(const Fp8Site& site) { kept_.erase(site.id); }

 private:
  uint8_t* workspace(size_t bytes);  // at least `bytes`, 256-byte aligned
  // Delayed-scaling state of one linear: per operand (kX, kW, kDout) kFp8StateFloats device
  // floats, and how many casts each has had (the next history slot; 0: bootstrap).
  enum Operand { kX = 0, kW = 1, kDout = 2, kOperands = 3 };
  struct SiteState {
    float* device = nullptr;
    int64_t casts[kOperands] = {0, 0, 0};
  };
  SiteState* site_state(const Fp8Site& site);  // null for id -1 (current scaling)
  // Operand slot `slot` (0, 1, 2: its amax and scale slots) = the bf16 (rows, cols) `src` in FP8:
  // the row-major and/or transposed copies (either may be null) and the scale; current scaling
  // when `site` is null, else delayed with the site's state of `operand`.
  void quantize(int slot, const void* src, int64_t rows, int64_t cols,
                cuda_kernels::Fp8Format format, uint8_t* row_major, uint8_t* transposed,
                SiteState* site, Operand operand);
  // What the last call's x copy was, for Fp8Site::same_input_as_previous.
  struct LastInput {
    bool backward = false;
    const void* x = nullptr;
    int64_t rows = 0, cols = 0;
    uint8_t* copy = nullptr;  // null: the call made no copy of x
  };
  bool reusable_input(const Fp8Site& site, bool backward, const void* x, int64_t rows,
                      int64_t cols, const uint8_t* copy) const;
  // A gradient GEMM (dgrad or wgrad): out (m x n, column-major, ld m; bf16 or f32) = (or +=, with
  // accumulate) the e4m3 operand a (k x m, its dequantisation factor at a_scale) times the
  // gradient b (k x n in grad_format_, factor at b_scale), fast accumulation as
  // grad_fast_accumulation_ says.
  void gradient_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, const float* a_scale,
                     const uint8_t* b, const float* b_scale, void* out, DType out_dtype,
                     bool accumulate);
  // forward's second half: W's cast and the GEMM, x's FP8 copy (its factor at x_scale) already
  // made.
  void forward_gemm(const Fp8LinearShape& shape, uint8_t* x_q, const float* x_scale,
                    const void* weight, const void* bias, const void* residual, void* out,
                    SiteState* state);
  // Where a kept input's dequantisation factor lives in its buffer.
  static float* kept_scale(void* buffer, int64_t rows, int64_t cols);

  cudaStream_t stream_;
  Fp8Gemm gemm_;
  cuda_kernels::Fp8Format grad_format_;
  bool grad_fast_accumulation_;
  // amax[3], inv_scale[4], each in its own 256-byte slot: cuBLAS from 12.9.1 needs scale pointers
  // aligned to at least 16 bytes (Transformer Engine aligns them to 256 for the same reason).
  // With all six packed in 24 bytes, cuBLAS 13.0 on the H200 refused every FP8 algorithm with
  // NOT_SUPPORTED; in these slots every FP8 test passes there.
  static constexpr size_t kScalarSlotFloats = 64;
  float* scalar(int index) const { return scalars_ + index * kScalarSlotFloats; }
  float* scalars_ = nullptr;  // kScalars slots (cuda_linear_fp8.cpp)
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  std::unordered_map<int64_t, SiteState> sites_;
  LastInput last_input_;
  // Kept inputs not yet read, by site id: the buffer and its shape (rows x cols of the input).
  struct KeptInput {
    const void* buffer = nullptr;
    int64_t rows = 0, cols = 0;
  };
  std::unordered_map<int64_t, KeptInput> kept_;
};

}  // namespace shardtrain
