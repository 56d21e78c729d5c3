// Fp8Linear (cuda_linear_fp8.h) and CudaOps's FP8 linears (ops/ops.h linear_*_fp8).
//
// Row-major to cuBLASLt TN (cuda_gemm_fp8.h: A is an m x k row-major array, B an n x k one, D the
// n x m row-major result):
//   forward  out (N x O):  m = O, n = N, k = I;  A = W_q (O x I),    B = x_q (N x I)
//   dgrad    dx  (N x I):  m = I, n = N, k = O;  A = W^T_q (I x O),  B = dout_q (N x O)
//   wgrad    dW  (O x I):  m = I, n = O, k = N;  A = x^T_q (I x N),  B = dout^T_q (O x N)
#include "ops/cuda/cuda_linear_fp8.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_fp8_support.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/fp8_workspace.h"
#include "ops/ops_switches.h"

namespace shardtrain {
namespace {

using cuda_kernels::Fp8Format;

size_t aligned(size_t bytes) { return fp8_copy_bytes(static_cast<int64_t>(bytes)); }

size_t forward_bytes(const Fp8LinearShape& s) {
  return fp8_linear_forward_bytes(s.rows, s.in_features, s.out_features);
}
size_t backward_bytes(const Fp8LinearShape& s) {
  return fp8_linear_backward_bytes(s.rows, s.in_features, s.out_features);
}

// kScaleD: the second gradient's scale of swiglu_backward (dup beside dgate's kScaleA).
enum Scalar {
  kAmaxA = 0,
  kAmaxB = 1,
  kAmaxC = 2,
  kScaleA = 3,
  kScaleB = 4,
  kScaleC = 5,
  kScaleD = 6,
  kScalars
};

}  // namespace

bool fp8_linear_shape_ok(const Fp8LinearShape& s) {
  return fp8_gemm_shape_ok(s.out_features, s.rows, s.in_features);  // all three use N, I, O
}

size_t fp8_linear_workspace_bytes(const Fp8LinearShape& shape) {
  return fp8_linear_copies_bytes(shape.rows, shape.in_features, shape.out_features);
}

size_t fp8_kept_input_bytes(int64_t rows, int64_t cols) {
  return fp8_copy_bytes(rows * cols) + kFp8CopyAlignment;
}

float* Fp8Linear::kept_scale(void* buffer, int64_t rows, int64_t cols) {
  return reinterpret_cast<float*>(static_cast<uint8_t*>(buffer) + fp8_copy_bytes(rows * cols));
}

bool Fp8Linear::holds_kept_input(const Fp8Site& site, const void* x, int64_t rows,
                                 int64_t cols) const {
  if (!site.input_kept_in_fp8) return false;
  const auto found = kept_.find(site.id);
  return found != kept_.end() && found->second.buffer == x && found->second.rows == rows &&
         found->second.cols == cols;
}

Fp8Linear::Fp8Linear(cudaStream_t stream)
    : stream_(stream),
      gemm_(stream),
      grad_format_(cuda_kernels::kDefaultFp8GradFormat),
      grad_fast_accumulation_(cuda_kernels::fp8_grad_fast_accum_enabled()) {
  SHARDTRAIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scalars_),
                                   kScalars * kScalarSlotFloats * sizeof(float)));
}

Fp8Linear::~Fp8Linear() {
  cudaStreamSynchronize(stream_);
  cudaFree(scalars_);
  if (buffer_ != nullptr) cudaFree(buffer_);
  for (auto& [id, state] : sites_) cudaFree(state.device);
}

uint8_t* Fp8Linear::workspace(size_t bytes) {
  if (bytes > capacity_) {
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old copies may be in use
    if (buffer_ != nullptr) SHARDTRAIN_CUDA_CHECK(cudaFree(buffer_));
    buffer_ = nullptr;
    capacity_ = 0;
    last_input_ = LastInput{};  // its copy lived in the old buffer
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&buffer_, bytes));
    capacity_ = bytes;
  }
  return static_cast<uint8_t*>(buffer_);
}

Fp8Linear::SiteState* Fp8Linear::site_state(const Fp8Site& site) {
  if (site.id < 0) return nullptr;
  auto found = sites_.find(site.id);
  if (found != sites_.end()) return &found->second;
  // First call of this linear: its state, zeroed (empty histories, counters at 0). cudaMalloc
  // returns 256-byte aligned memory; each operand's state is 256 bytes.
  SiteState state;
  const size_t bytes = kOperands * cuda_kernels::kFp8StateFloats * sizeof(float);
  SHARDTRAIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&state.device), bytes));
  SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(state.device, 0, bytes, stream_));
  return &sites_.emplace(site.id, state).first->second;
}

void Fp8Linear::quantize(int slot, const void* src, int64_t rows, int64_t cols, Fp8Format format,
                         uint8_t* row_major, uint8_t* transposed, SiteState* site,
                         Operand operand) {
  if (site == nullptr) {
    cuda_kernels::fp8_amax(DType::kBF16, src, rows * cols, scalar(kAmaxA + slot), stream_);
    cuda_kernels::fp8_cast(DType::kBF16, src, rows, cols, format, scalar(kAmaxA + slot), row_major,
                           transposed, scalar(kScaleA + slot), stream_);
    return;
  }
  float* state = site->device + operand * cuda_kernels::kFp8StateFloats;
  int64_t& casts = site->casts[operand];
  // Bootstrap: with no history yet, this call scales by its own amax.
  if (casts == 0) {
    cuda_kernels::fp8_amax(DType::kBF16, src, rows * cols, state + cuda_kernels::kFp8ScaleAmaxIndex,
                           stream_);
  }
  cuda_kernels::fp8_cast_delayed(DType::kBF16, src, rows, cols, format, state,
                                 static_cast<int>(casts % cuda_kernels::kFp8AmaxHistory), row_major,
                                 transposed, scalar(kScaleA + slot), stream_);
  ++casts;
}

bool Fp8Linear::reusable_input(const Fp8Site& site, bool backward, const void* x, int64_t rows,
                               int64_t cols, const uint8_t* copy) const {
  return site.same_input_as_previous && last_input_.copy == copy &&
         last_input_.backward == backward && last_input_.x == x && last_input_.rows == rows &&
         last_input_.cols == cols;
}

void Fp8Linear::forward(const Fp8LinearShape& s, const void* x, const void* weight,
                        const void* bias, const void* residual, void* out, const Fp8Site& site) {
  uint8_t* x_q = workspace(forward_bytes(s));
  SiteState* state = site_state(site);
  kept_.erase(site.id);  // whatever the site kept is not this forward's input
  // x's copy and scale (slot A) stay from the previous call when it quantised this same x.
  if (!reusable_input(site, false, x, s.rows, s.in_features, x_q)) {
    quantize(kAmaxA, x, s.rows, s.in_features, Fp8Format::kE4M3, x_q, nullptr, state, kX);
  }
  last_input_ = LastInput{false, x, s.rows, s.in_features, x_q};
  forward_gemm(s, x_q, scalar(kScaleA), weight, bias, residual, out, state);
}

void Fp8Linear::forward_gemm(const Fp8LinearShape& s, uint8_t* x_q, const float* x_scale,
                             const void* weight, const void* bias, const void* residual, void* out,
                             SiteState* state) {
  uint8_t* w_q = x_q + aligned(s.rows * s.in_features);
  quantize(kAmaxB, weight, s.out_features, s.in_features, Fp8Format::kE4M3, w_q, nullptr, state,
           kW);
  Fp8GemmCall call;
  call.m = s.out_features;
  call.n = s.rows;
  call.k = s.in_features;
  call.a = w_q;
  call.a_scale = scalar(kScaleB);
  call.b = x_q;
  call.b_scale = x_scale;
  call.c_dtype = DType::kBF16;
  call.ldc = s.out_features;
  call.bias = bias;
  call.fast_accumulation = true;
  if (residual != nullptr) {
    call.c = const_cast<void*>(residual);  // read only: D is `out`
    call.d = out;
    call.beta = 1.0f;
  } else {
    call.c = out;
  }
  gemm_.run(call);
}

bool Fp8Linear::swiglu_forward(const Fp8LinearShape& s, const void* gate, const void* up, void* act,
                               const void* weight, const void* residual, void* out,
                               const Fp8Site& site) {
  SiteState* state = site_state(site);
  if (state == nullptr) return false;
  const bool keep = site.input_kept_in_fp8 && act != nullptr;
  float* x_state = state->device + kX * cuda_kernels::kFp8StateFloats;
  if (state->casts[kX] == 0) {
    if (!keep) return false;
    // No history yet: this call scales by its own amax, as a first unfused cast would. The bf16
    // product goes through act (then overwritten by the kept copy: the fused kernel reads only
    // gate and up).
    cuda_kernels::swiglu_forward(DType::kBF16, gate, up, act, s.rows * s.in_features, stream_);
    cuda_kernels::fp8_amax(DType::kBF16, act, s.rows * s.in_features,
                           x_state + cuda_kernels::kFp8ScaleAmaxIndex, stream_);
  }
  kept_.erase(site.id);
  uint8_t* x_q = workspace(forward_bytes(s));
  const int pos = static_cast<int>(state->casts[kX]++ % cuda_kernels::kFp8AmaxHistory);
  // Kept: the transposed copy and its factor go to act (the GEMM reads the factor there too),
  // and no bf16 product is written.
  uint8_t* x_t = keep ? static_cast<uint8_t*>(act) : nullptr;
  float* x_scale = keep ? kept_scale(act, s.rows, s.in_features) : scalar(kScaleA);
  cuda_kernels::swiglu_forward_fp8(gate, up, s.rows, s.in_features, x_state, pos,
                                   keep ? nullptr : act, x_q, x_t, x_scale, stream_);
  last_input_ = LastInput{};  // no bf16 x was cast: nothing a later call may match
  forward_gemm(s, x_q, x_scale, weight, nullptr, residual, out, state);
  if (keep) kept_[site.id] = KeptInput{act, s.rows, s.in_features};
  return true;
}

void Fp8Linear::backward(const Fp8LinearShape& s, const void* dout, const void* x,
                         const void* weight, void* dx, bool accumulate_dx, void* dweight,
                         DType dweight_dtype, bool accumulate_dweight, const Fp8Site& site) {
  if (dx == nullptr && dweight == nullptr) {
    last_input_ = LastInput{};
    kept_.erase(site.id);
    return;
  }
  uint8_t* dout_q = workspace(backward_bytes(s));
  uint8_t* dout_t = dout_q + aligned(s.rows * s.out_features);
  uint8_t* w_t = dout_t + aligned(s.rows * s.out_features);
  uint8_t* x_t = w_t + aligned(s.out_features * s.in_features);
  SiteState* state = site_state(site);
  // x is this site's kept FP8 input (x^T and its factor, from forward), read once.
  const bool kept = holds_kept_input(site, x, s.rows, s.in_features);
  kept_.erase(site.id);
  quantize(kAmaxA, dout, s.rows, s.out_features, grad_format_, dx != nullptr ? dout_q : nullptr,
           dweight != nullptr ? dout_t : nullptr, state, kDout);
  const bool reuse_x = !kept && reusable_input(site, true, x, s.rows, s.in_features, x_t);
  last_input_ = kept
                    ? LastInput{}
                    : LastInput{true, x, s.rows, s.in_features, dweight != nullptr ? x_t : nullptr};
  if (dx != nullptr) {
    quantize(kAmaxB, weight, s.out_features, s.in_features, Fp8Format::kE4M3, nullptr, w_t, state,
             kW);
    gradient_gemm(s.in_features, s.rows, s.out_features, w_t, scalar(kScaleB), dout_q,
                  scalar(kScaleA), dx, DType::kBF16, accumulate_dx);
  }
  if (dweight != nullptr) {
    const uint8_t* x_t_read = x_t;
    const float* x_scale = scalar(kScaleC);
    if (kept) {
      x_t_read = static_cast<const uint8_t*>(x);
      x_scale = kept_scale(const_cast<void*>(x), s.rows, s.in_features);
    } else if (!reuse_x) {
      // x^T and its scale (slot C) stay from the previous call when it quantised this same x.
      quantize(kAmaxC, x, s.rows, s.in_features, Fp8Format::kE4M3, nullptr, x_t, state, kX);
    }
    gradient_gemm(s.in_features, s.out_features, s.rows, x_t_read, x_scale, dout_t, scalar(kScaleA),
                  dweight, dweight_dtype, accumulate_dweight);
  }
}

void Fp8Linear::gradient_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a,
                              const float* a_scale, const uint8_t* b, const float* b_scale,
                              void* out, DType out_dtype, bool accumulate) {
  Fp8GemmCall call;
  call.m = m;
  call.n = n;
  call.k = k;
  call.a = a;
  call.a_scale = a_scale;
  call.b = b;
  call.b_format = grad_format_;
  call.b_scale = b_scale;
  call.c = out;
  call.c_dtype = out_dtype;
  call.ldc = m;
  call.beta = accumulate ? 1.0f : 0.0f;
  call.fast_accumulation = grad_fast_accumulation_;
  gemm_.run(call);
}

bool Fp8Linear::swiglu_backward(const Fp8LinearShape& s, const void* dact, const void* gate_act,
                                const void* up_act, const void* x, const void* gate_weight,
                                const void* up_weight, void* dx, void* dgate_weight,
                                void* dup_weight, DType dweight_dtype, bool accumulate_dweight,
                                const Fp8Site& gate_site, const Fp8Site& up_site) {
  SiteState* gate = site_state(gate_site);
  SiteState* up = site_state(up_site);
  if (gate == nullptr || up == nullptr || gate->casts[kDout] == 0 || up->casts[kDout] == 0) {
    return false;
  }
  const int64_t N = s.rows, C = s.in_features, F = s.out_features;
  uint8_t* dgate_q = workspace(fp8_swiglu_backward_bytes(N, C, F));
  uint8_t* dgate_t = dgate_q + aligned(N * F);
  uint8_t* dup_q = dgate_t + aligned(N * F);
  uint8_t* dup_t = dup_q + aligned(N * F);
  uint8_t* w_t = dup_t + aligned(N * F);
  uint8_t* x_t = w_t + aligned(F * C);
  last_input_ = LastInput{};
  const int pos_gate = static_cast<int>(gate->casts[kDout]++ % cuda_kernels::kFp8AmaxHistory);
  const int pos_up = static_cast<int>(up->casts[kDout]++ % cuda_kernels::kFp8AmaxHistory);
  float* gate_dout_state = gate->device + kDout * cuda_kernels::kFp8StateFloats;
  float* up_dout_state = up->device + kDout * cuda_kernels::kFp8StateFloats;
  cuda_kernels::swiglu_backward_fp8(dact, gate_act, up_act, N, F, grad_format_, gate_dout_state,
                                    pos_gate, up_dout_state, pos_up, dgate_q, dgate_t, dup_q, dup_t,
                                    scalar(kScaleA), scalar(kScaleD), stream_);
  quantize(kAmaxC, x, N, C, Fp8Format::kE4M3, nullptr, x_t, gate, kX);
  // Per linear: dgrad (dx = dout W, K = F), then wgrad (dW = dout^T x, K = N); W^T's copy and
  // slot B are reused by up after gate's dgrad is enqueued (one stream: it has run by then).
  const struct {
    const void* weight;
    SiteState* state;
    const uint8_t *dout_q, *dout_t;
    int scale;
    void* dweight;
  } linears[2] = {{gate_weight, gate, dgate_q, dgate_t, kScaleA, dgate_weight},
                  {up_weight, up, dup_q, dup_t, kScaleD, dup_weight}};
  for (int i = 0; i < 2; ++i) {
    quantize(kAmaxB, linears[i].weight, F, C, Fp8Format::kE4M3, nullptr, w_t, linears[i].state, kW);
    // Gate writes dx, up adds to it.
    gradient_gemm(C, N, F, w_t, scalar(kScaleB), linears[i].dout_q, scalar(linears[i].scale), dx,
                  DType::kBF16, i > 0);
    gradient_gemm(C, F, N, x_t, scalar(kScaleC), linears[i].dout_t, scalar(linears[i].scale),
                  linears[i].dweight, dweight_dtype, accumulate_dweight);
  }
  return true;
}

// ---- CudaOps ----

namespace {

int64_t row_width(const Tensor& t) { return t.shape().rank() == 0 ? 1 : t.dim(-1); }

Fp8LinearShape shape_of(const Tensor& x_NI, const Tensor& weight_OI) {
  Fp8LinearShape s;
  s.in_features = row_width(x_NI);
  s.rows = s.in_features == 0 ? 0 : x_NI.numel() / s.in_features;
  s.out_features = weight_OI.dim(0);
  return s;
}

bool all_bf16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && t->dtype() != DType::kBF16) return false;
  return true;
}

bool aligned16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && reinterpret_cast<uintptr_t>(t->data()) % 16 != 0) return false;
  return true;
}

}  // namespace

std::string CudaOps::fp8_unsupported_reason() const {
  // A bad SHARDTRAIN_FP8_FUSED_SWIGLU or SHARDTRAIN_FP8_GRAD_FAST_ACCUM is refused here, before
  // training starts.
  try {
    cuda_kernels::fp8_fused_swiglu_enabled();
    cuda_kernels::fp8_grad_fast_accum_enabled();
  } catch (const Error& e) {
    return e.what();
  }
  return cuda_kernels::fp8_unsupported_reason(cuda_kernels::device_limits());
}

void CudaOps::set_fp8_gradient_format(cuda_kernels::Fp8Format format) {
  fp8().set_gradient_format(format);
}

void CudaOps::set_fp8_gradient_fast_accumulation(bool on) {
  fp8().set_gradient_fast_accumulation(on);
}

size_t CudaOps::fp8_workspace_bytes() const { return fp8_ ? fp8_->workspace_bytes() : 0; }

Fp8Linear& CudaOps::fp8() {
  if (!fp8_) {
    const std::string reason = fp8_unsupported_reason();
    if (!reason.empty()) throw Error(reason);
    fp8_ = std::make_unique<Fp8Linear>(stream_);
  }
  return *fp8_;
}

void CudaOps::linear_forward_fp8(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor residual_NO,
                                 Tensor out_NO, Fp8Site site) {
  const Fp8LinearShape s = shape_of(x_NI, weight_OI);
  // Shapes FP8 cannot run (sizes off the multiple of 16, f32 tensors, unaligned views) take the
  // bf16 path, which also checks every shape and dtype.
  const bool fp8_path = fp8_linear_shape_ok(s) &&
                        weight_OI.numel() == s.out_features * s.in_features &&
                        out_NO.numel() == s.rows * s.out_features &&
                        all_bf16({&x_NI, &weight_OI, &bias_O, &residual_NO, &out_NO}) &&
                        aligned16({&x_NI, &weight_OI, &residual_NO, &out_NO});
  if (!fp8_path) {
    if (fp8_) {
      fp8_->forget_input();
      fp8_->forget_kept_input(site);
    }
    if (residual_NO.defined()) {
      SHARDTRAIN_CHECK(!bias_O.defined(), "a residual linear has no bias");
      linear_forward_residual(x_NI, weight_OI, residual_NO, out_NO);
    } else {
      linear_forward(x_NI, weight_OI, bias_O, out_NO);
    }
    return;
  }
  SHARDTRAIN_CHECK(!bias_O.defined() || bias_O.numel() == s.out_features,
                   "linear bias {} for {} outputs", bias_O.shape().to_string(), s.out_features);
  SHARDTRAIN_CHECK(!residual_NO.defined() || residual_NO.numel() == out_NO.numel(),
                   "linear residual {} for out {}", residual_NO.shape().to_string(),
                   out_NO.shape().to_string());
  fp8().forward(s, x_NI.data(), weight_OI.data(), bias_O.defined() ? bias_O.data() : nullptr,
                residual_NO.defined() ? residual_NO.data() : nullptr, out_NO.data(), site);
}

void CudaOps::linear_backward_fp8(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                                  Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                                  bool accumulate_dweight, Fp8Site site) {
  const Fp8LinearShape s = shape_of(x_NI, weight_OI);
  const bool frozen = !dweight_OI.defined();
  const bool fp8_path =
      fp8_linear_shape_ok(s) && weight_OI.numel() == s.out_features * s.in_features &&
      dout_NO.numel() == s.rows * s.out_features &&
      (!dx_NI.defined() || dx_NI.numel() == x_NI.numel()) &&
      (frozen || dweight_OI.numel() == weight_OI.numel()) &&
      all_bf16({&dout_NO, &x_NI, &weight_OI, &dx_NI}) &&
      (frozen || dweight_OI.dtype() == DType::kBF16 || dweight_OI.dtype() == DType::kF32) &&
      aligned16({&dout_NO, &x_NI, &weight_OI, &dx_NI, &dweight_OI});
  if (!fp8_path) {
    // A kept FP8 input is no bf16 x: the bf16 path cannot read it (never in the model, whose
    // backward of a kept site has the shapes and dtypes of its forward).
    SHARDTRAIN_CHECK(!fp8_ || !fp8_->holds_kept_input(site, x_NI.data(), s.rows, s.in_features),
                     "FP8 linear {}: its input is kept in FP8, but this backward runs in bf16",
                     site.id);
    if (fp8_) fp8_->forget_input();
    linear_backward(dout_NO, x_NI, weight_OI, dx_NI, dweight_OI, dbias_O, accumulate_dx,
                    accumulate_dweight);
    return;
  }
  fp8().backward(s, dout_NO.data(), x_NI.data(), weight_OI.data(),
                 dx_NI.defined() ? dx_NI.data() : nullptr, accumulate_dx,
                 frozen ? nullptr : dweight_OI.data(), frozen ? DType::kF32 : dweight_OI.dtype(),
                 accumulate_dweight, site);
  if (frozen || !dbias_O.defined()) return;
  // The bias gradient is a column sum of dout (not a GEMM): the same bf16-input kernel as the
  // bf16 path.
  SHARDTRAIN_CHECK(dbias_O.numel() == s.out_features, "linear dbias {} for {} outputs",
                   dbias_O.shape().to_string(), s.out_features);
  float* scratch = scratch_floats(cuda_kernels::column_sums_scratch_floats(s.rows, s.out_features));
  cuda_kernels::column_sums(dout_NO.dtype(), dout_NO.data(), s.rows, s.out_features,
                            dbias_O.dtype(), dbias_O.data(), accumulate_dweight, scratch, stream_);
}

void CudaOps::swiglu_linears_backward_fp8(Tensor dact_NF, Tensor gate_NF, Tensor up_NF, Tensor x_NC,
                                          Tensor gate_weight_FC, Tensor up_weight_FC,
                                          Tensor dgate_NF, Tensor dup_NF, Tensor dx_NC,
                                          Tensor dgate_weight_FC, Tensor dup_weight_FC,
                                          bool accumulate_dweight, Fp8Site gate_site,
                                          Fp8Site up_site) {
  const Fp8LinearShape s = shape_of(x_NC, gate_weight_FC);
  const int64_t cells = s.rows * s.out_features;
  const bool fused =
      cuda_kernels::fp8_fused_swiglu_enabled() && gate_site.id >= 0 && up_site.id >= 0 &&
      fp8_linear_shape_ok(s) && gate_weight_FC.numel() == s.out_features * s.in_features &&
      up_weight_FC.shape() == gate_weight_FC.shape() && dact_NF.numel() == cells &&
      gate_NF.numel() == cells && up_NF.numel() == cells && dx_NC.numel() == x_NC.numel() &&
      dgate_weight_FC.numel() == gate_weight_FC.numel() &&
      dup_weight_FC.numel() == gate_weight_FC.numel() &&
      dgate_weight_FC.dtype() == dup_weight_FC.dtype() &&
      (dgate_weight_FC.dtype() == DType::kBF16 || dgate_weight_FC.dtype() == DType::kF32) &&
      all_bf16({&dact_NF, &gate_NF, &up_NF, &x_NC, &gate_weight_FC, &up_weight_FC, &dx_NC}) &&
      aligned16({&dact_NF, &gate_NF, &up_NF, &x_NC, &gate_weight_FC, &up_weight_FC, &dx_NC,
                 &dgate_weight_FC, &dup_weight_FC});
  if (fused &&
      fp8().swiglu_backward(s, dact_NF.data(), gate_NF.data(), up_NF.data(), x_NC.data(),
                            gate_weight_FC.data(), up_weight_FC.data(), dx_NC.data(),
                            dgate_weight_FC.data(), dup_weight_FC.data(), dgate_weight_FC.dtype(),
                            accumulate_dweight, gate_site, up_site)) {
    return;
  }
  Ops::swiglu_linears_backward_fp8(dact_NF, gate_NF, up_NF, x_NC, gate_weight_FC, up_weight_FC,
                                   dgate_NF, dup_NF, dx_NC, dgate_weight_FC, dup_weight_FC,
                                   accumulate_dweight, gate_site, up_site);
}

void CudaOps::swiglu_linear_forward_fp8(Tensor gate_NF, Tensor up_NF, Tensor act_NF,
                                        Tensor weight_CF, Tensor residual_NC, Tensor out_NC,
                                        Fp8Site site) {
  const Fp8LinearShape s = shape_of(act_NF, weight_CF);
  const int64_t cells = s.rows * s.in_features;
  // A kept input needs act's bytes for the FP8 copy and its factor (N x F bf16 hold them from
  // 128 elements on), and SHARDTRAIN_FP8_KEEP_DOWN_INPUT not 0 (ops/ops_switches.h); otherwise
  // act keeps its bf16 values, and backward reads those.
  if (site.input_kept_in_fp8 && (!fp8_keep_down_input_switch() ||
                                 act_NF.bytes() < fp8_kept_input_bytes(s.rows, s.in_features))) {
    site.input_kept_in_fp8 = false;
  }
  const bool fused = cuda_kernels::fp8_fused_swiglu_enabled() && site.id >= 0 &&
                     fp8_linear_shape_ok(s) &&
                     weight_CF.numel() == s.out_features * s.in_features &&
                     gate_NF.numel() == cells && up_NF.numel() == cells &&
                     act_NF.numel() == cells && out_NC.numel() == s.rows * s.out_features &&
                     (!residual_NC.defined() || residual_NC.numel() == out_NC.numel()) &&
                     all_bf16({&gate_NF, &up_NF, &act_NF, &weight_CF, &residual_NC, &out_NC}) &&
                     aligned16({&gate_NF, &up_NF, &act_NF, &weight_CF, &residual_NC, &out_NC});
  if (fused && fp8().swiglu_forward(
                   s, gate_NF.data(), up_NF.data(), act_NF.data(), weight_CF.data(),
                   residual_NC.defined() ? residual_NC.data() : nullptr, out_NC.data(), site)) {
    return;
  }
  Ops::swiglu_linear_forward_fp8(gate_NF, up_NF, act_NF, weight_CF, residual_NC, out_NC, site);
}

}  // namespace shardtrain
