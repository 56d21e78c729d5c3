// CudaOps mixture-of-experts ops: shape and dtype checks, then the kernels of cuda_moe.cu and
// the grouped GEMMs. Each grouped linear is one launch over every expert with rows (forward;
// backward: one for d(x), one for d(weights)): on Hopper our wgmma kernel (cuda_moe_gemm.h) for
// bf16 forward and d(x) where its shapes fit (widths multiples of 64), else one cuBLAS grouped
// launch (cuda_grouped_gemm.h), each expert's row-major product mapped to column-major as
// CudaOps::linear_* map one linear (cuda_gemm.cpp); the f32 weight gradients of bf16 experts are
// our own kernel's (cuda_moe_wgrad.cu), one launch. SHARDTRAIN_MOE_GEMM=wgmma or =cublas picks
// the forward and d(x) GEMMs over the default (read at every call: the tests compare both).
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/cuda_grouped_gemm.h"
#include "ops/cuda/cuda_moe_gemm.h"
#include "ops/cuda/cuda_moe_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops_switches.h"

namespace shardtrain {
namespace {

void require_float_cuda(const Tensor& t, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda, "{}: tensor is not on the GPU", what);
  SHARDTRAIN_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16, "{}: dtype {}", what,
                   dtype_name(t.dtype()));
}

void require(const Tensor& t, DType dtype, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda && t.dtype() == dtype, "{}: {} on {}, want {}", what,
                   dtype_name(t.dtype()), t.device() == Device::kCuda ? "GPU" : "host",
                   dtype_name(dtype));
}

struct RouteShape {
  int64_t N, E, K;
};

RouteShape route_shape(const Tensor& logits_NE, const Tensor& expert_NK, const Tensor& weight_NK) {
  require_float_cuda(logits_NE, "moe logits");
  require(expert_NK, DType::kI32, "moe experts");
  require(weight_NK, DType::kF32, "moe weights");
  SHARDTRAIN_CHECK(logits_NE.shape().rank() == 2 && expert_NK.shape() == weight_NK.shape() &&
                       expert_NK.shape().rank() == 2 && expert_NK.dim(0) == logits_NE.dim(0),
                   "moe routing: logits {}, experts {}, weights {}", logits_NE.shape().to_string(),
                   expert_NK.shape().to_string(), weight_NK.shape().to_string());
  const RouteShape s{logits_NE.dim(0), logits_NE.dim(1), expert_NK.dim(1)};
  SHARDTRAIN_CHECK(s.K >= 1 && s.K <= s.E && s.K <= cuda_moe::kMaxTopK,
                   "moe routing: top-{} of {} experts (the CUDA router holds at most {})", s.K, s.E,
                   cuda_moe::kMaxTopK);
  return s;
}

// Each expert's slice: rows [start, start + rows) of a row-major (M, width) tensor.
const char* row_pointer(const Tensor& t, int64_t row) {
  return static_cast<const char*>(t.data()) + row * t.dim(1) * dtype_size(t.dtype());
}
const char* expert_pointer(const Tensor& w_EOI, int64_t e) {
  return static_cast<const char*>(w_EOI.data()) +
         e * w_EOI.dim(1) * w_EOI.dim(2) * dtype_size(w_EOI.dtype());
}

std::vector<int64_t> row_starts(const std::vector<int64_t>& rows_E, int64_t M) {
  std::vector<int64_t> start(rows_E.size() + 1, 0);
  for (size_t e = 0; e < rows_E.size(); ++e) start[e + 1] = start[e] + rows_E[e];
  SHARDTRAIN_CHECK(start.back() == M, "grouped linear: expert rows sum to {}, tensor has {}",
                   start.back(), M);
  return start;
}

// The problems in one grouped launch; where cuBLAS runs no grouped GEMM of these dtypes (bf16
// inputs into an fp32 weight gradient of a shape cuda_moe_wgrad.cu does not take), one
// cublasGemmEx each (no per-shape
// autotuning or plan: the row counts change every step); cuBLASLt one by one as the last resort.
void run_grouped(CudaGroupedGemm& grouped, CublasLtGemm& gemm, bool transpose_a, bool transpose_b,
                 DType ab_dtype, DType c_dtype, float beta,
                 const std::vector<GroupedGemmProblem>& problems) {
  if (grouped.run(transpose_a, transpose_b, ab_dtype, c_dtype, beta, problems)) return;
  if (grouped.run_each(transpose_a, transpose_b, ab_dtype, c_dtype, beta, problems)) return;
  for (const GroupedGemmProblem& p : problems) {
    if (p.m == 0 || p.n == 0 || p.k == 0) continue;
    GemmCall call;
    call.transpose_a = transpose_a;
    call.transpose_b = transpose_b;
    call.m = p.m;
    call.n = p.n;
    call.k = p.k;
    call.a = p.a;
    call.a_dtype = ab_dtype;
    call.lda = p.lda;
    call.b = p.b;
    call.b_dtype = ab_dtype;
    call.ldb = p.ldb;
    call.c = p.c;
    call.c_dtype = c_dtype;
    call.ldc = p.ldc;
    call.beta = beta;
    gemm.run(call);
  }
}

// Forward and d(x) run our expert GEMM (cuda_moe_gemm.h) where it fits, unless
// SHARDTRAIN_MOE_GEMM=cublas (ops/ops_switches.h): it ran Qwen3-30B-A3B's expert GEMMs at
// 438-553 TFLOP/s against cuBLAS grouped's 286-310 (ops/cuda/MOE_NOTES.md).
bool expert_gemm_chosen(const Tensor& a, const Tensor& weight_EOI, const Tensor& out) {
  return moe_gemm_switch() == MoeGemmChoice::kWgmma && a.dtype() == DType::kBF16 &&
         cuda_moe::expert_gemm_fit(a.dim(0), weight_EOI.dim(0), weight_EOI.dim(1),
                                   weight_EOI.dim(2), a.data(), weight_EOI.data(), out.data());
}

}  // namespace

void CudaOps::moe_route(Tensor logits_NE, bool renormalize, Tensor expert_NK, Tensor weight_NK,
                        Tensor prob_sum_E) {
  const RouteShape s = route_shape(logits_NE, expert_NK, weight_NK);
  if (prob_sum_E.defined()) require(prob_sum_E, DType::kF32, "moe router mass");
  cuda_moe::route(logits_NE.dtype(), logits_NE.data(), s.N, s.E, s.K, renormalize, expert_NK.i32(),
                  weight_NK.f32(), prob_sum_E.defined() ? prob_sum_E.f32() : nullptr, stream_);
}

void CudaOps::moe_route_backward(Tensor dweight_NK, Tensor logits_NE, Tensor expert_NK,
                                 Tensor weight_NK, bool renormalize, Tensor aux_grad_E,
                                 Tensor dlogits_NE) {
  const RouteShape s = route_shape(logits_NE, expert_NK, weight_NK);
  require(dweight_NK, DType::kF32, "moe dweight");
  require(dlogits_NE, logits_NE.dtype(), "moe dlogits");
  if (aux_grad_E.defined()) require(aux_grad_E, DType::kF32, "moe aux gradient");
  cuda_moe::route_backward(logits_NE.dtype(), dweight_NK.f32(), logits_NE.data(), expert_NK.i32(),
                           weight_NK.f32(), s.N, s.E, s.K, renormalize,
                           aux_grad_E.defined() ? aux_grad_E.f32() : nullptr, dlogits_NE.data(),
                           stream_);
}

std::vector<int64_t> CudaOps::moe_dispatch(Tensor expert_NK, int64_t experts, Tensor source_M,
                                           Tensor row_NK) {
  require(expert_NK, DType::kI32, "moe experts");
  require(source_M, DType::kI32, "moe source rows");
  require(row_NK, DType::kI32, "moe rows");
  const int64_t slots = expert_NK.numel();
  SHARDTRAIN_CHECK(source_M.numel() == slots && row_NK.numel() == slots && experts > 0,
                   "moe dispatch: {} slots, {} sources, {} rows, {} experts", slots,
                   source_M.numel(), row_NK.numel(), experts);
  auto* rows_device = reinterpret_cast<int32_t*>(scratch_floats(static_cast<size_t>(experts)));
  cuda_moe::count_rows(expert_NK.i32(), slots, experts, rows_device, stream_);
  cuda_moe::group_rows(expert_NK.i32(), slots, experts, rows_device, source_M.i32(), row_NK.i32(),
                       stream_);
  std::vector<int32_t> rows32(experts);
  SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(rows32.data(), rows_device, experts * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, stream_));
  wait_for_stream();
  return std::vector<int64_t>(rows32.begin(), rows32.end());
}

void CudaOps::moe_gather(Tensor x_NC, Tensor source_M, Tensor x_MC) {
  require_float_cuda(x_NC, "moe gather x");
  require(x_MC, x_NC.dtype(), "moe gather out");
  require(source_M, DType::kI32, "moe source rows");
  const int64_t N = x_NC.dim(0), C = x_NC.dim(1), M = x_MC.dim(0);
  SHARDTRAIN_CHECK(N > 0 && x_MC.dim(1) == C && M % N == 0 && source_M.numel() == M,
                   "moe gather: x {} into {}", x_NC.shape().to_string(), x_MC.shape().to_string());
  cuda_moe::gather(x_NC.dtype(), x_NC.data(), source_M.i32(), M, M / N, C, x_MC.data(), stream_);
}

void CudaOps::moe_gather_backward(Tensor dx_MC, Tensor row_NK, Tensor dx_NC, bool accumulate) {
  require_float_cuda(dx_NC, "moe gather dx");
  require(dx_MC, dx_NC.dtype(), "moe gather dx rows");
  require(row_NK, DType::kI32, "moe rows");
  const int64_t N = dx_NC.dim(0), C = dx_NC.dim(1);
  SHARDTRAIN_CHECK(N > 0 && row_NK.numel() % N == 0 && dx_MC.numel() == row_NK.numel() * C,
                   "moe gather backward: {} rows into {}", dx_MC.shape().to_string(),
                   dx_NC.shape().to_string());
  cuda_moe::gather_backward(dx_NC.dtype(), dx_MC.data(), row_NK.i32(), N, row_NK.numel() / N, C,
                            dx_NC.data(), accumulate, stream_);
}

void CudaOps::moe_combine(Tensor y_MC, Tensor row_NK, Tensor weight_NK, Tensor residual_NC,
                          Tensor out_NC) {
  require_float_cuda(out_NC, "moe combine out");
  require(y_MC, out_NC.dtype(), "moe combine y");
  require(residual_NC, out_NC.dtype(), "moe combine residual");
  require(row_NK, DType::kI32, "moe rows");
  require(weight_NK, DType::kF32, "moe weights");
  const int64_t N = out_NC.dim(0), C = out_NC.dim(1);
  SHARDTRAIN_CHECK(N > 0 && residual_NC.numel() == N * C && row_NK.numel() == weight_NK.numel() &&
                       y_MC.numel() == row_NK.numel() * C,
                   "moe combine: y {} into {}", y_MC.shape().to_string(),
                   out_NC.shape().to_string());
  cuda_moe::combine(out_NC.dtype(), y_MC.data(), row_NK.i32(), weight_NK.f32(), residual_NC.data(),
                    N, row_NK.numel() / N, C, out_NC.data(), stream_);
}

void CudaOps::moe_combine_backward(Tensor dout_NC, Tensor y_MC, Tensor row_NK, Tensor weight_NK,
                                   Tensor dy_MC, Tensor dweight_NK) {
  require_float_cuda(dout_NC, "moe combine dout");
  require(y_MC, dout_NC.dtype(), "moe combine y");
  require(dy_MC, dout_NC.dtype(), "moe combine dy");
  require(row_NK, DType::kI32, "moe rows");
  require(weight_NK, DType::kF32, "moe weights");
  require(dweight_NK, DType::kF32, "moe dweight");
  const int64_t N = dout_NC.dim(0), C = dout_NC.dim(1);
  SHARDTRAIN_CHECK(N > 0 && y_MC.numel() == row_NK.numel() * C && dy_MC.numel() == y_MC.numel(),
                   "moe combine backward: dout {}, y {}", dout_NC.shape().to_string(),
                   y_MC.shape().to_string());
  cuda_moe::combine_backward(dout_NC.dtype(), dout_NC.data(), y_MC.data(), row_NK.i32(),
                             weight_NK.f32(), N, row_NK.numel() / N, C, dy_MC.data(),
                             dweight_NK.f32(), stream_);
}

void CudaOps::grouped_linear_forward(Tensor x_MI, Tensor weight_EOI,
                                     const std::vector<int64_t>& rows_E, Tensor out_MO) {
  require_float_cuda(x_MI, "grouped linear x");
  require(weight_EOI, x_MI.dtype(), "grouped linear weight");
  require(out_MO, x_MI.dtype(), "grouped linear out");
  SHARDTRAIN_CHECK(weight_EOI.shape().rank() == 3 &&
                       weight_EOI.dim(0) == static_cast<int64_t>(rows_E.size()) &&
                       x_MI.dim(1) == weight_EOI.dim(2) && out_MO.dim(1) == weight_EOI.dim(1),
                   "grouped linear: x {}, weights {}, out {}, {} experts", x_MI.shape().to_string(),
                   weight_EOI.shape().to_string(), out_MO.shape().to_string(), rows_E.size());
  const int64_t O = weight_EOI.dim(1), I = weight_EOI.dim(2);
  const std::vector<int64_t> start = row_starts(rows_E, x_MI.dim(0));
  if (expert_gemm_chosen(x_MI, weight_EOI, out_MO) &&
      cuda_moe::expert_gemm(cuda_moe::ExpertGemm::kForward, x_MI.data(), weight_EOI.data(), rows_E,
                            O, I, out_MO.data(), false, stream_)) {
    return;
  }
  // out_e^T (O x rows) = W_e (col-major I x O, transposed) x_e^T (col-major I x rows).
  std::vector<GroupedGemmProblem> problems;
  for (size_t e = 0; e < rows_E.size(); ++e) {
    problems.push_back({O, rows_E[e], I, expert_pointer(weight_EOI, e), I,
                        row_pointer(x_MI, start[e]), I,
                        const_cast<char*>(row_pointer(out_MO, start[e])), O});
  }
  if (!grouped_gemm_) grouped_gemm_ = std::make_shared<CudaGroupedGemm>(stream_);
  run_grouped(*grouped_gemm_, *gemm_, true, false, x_MI.dtype(), out_MO.dtype(), 0.0f, problems);
}

void CudaOps::grouped_linear_backward(Tensor dout_MO, Tensor x_MI, Tensor weight_EOI,
                                      const std::vector<int64_t>& rows_E, Tensor dx_MI,
                                      Tensor dweight_EOI, bool accumulate_dx,
                                      bool accumulate_dweight) {
  require_float_cuda(x_MI, "grouped linear x");
  require(dout_MO, x_MI.dtype(), "grouped linear dout");
  require(weight_EOI, x_MI.dtype(), "grouped linear weight");
  const int64_t O = weight_EOI.dim(1), I = weight_EOI.dim(2);
  const std::vector<int64_t> start = row_starts(rows_E, x_MI.dim(0));
  if (!grouped_gemm_) grouped_gemm_ = std::make_shared<CudaGroupedGemm>(stream_);
  bool dx_done = false;
  if (dx_MI.defined()) {
    require(dx_MI, x_MI.dtype(), "grouped linear dx");
    SHARDTRAIN_CHECK(dx_MI.numel() == x_MI.numel() && dout_MO.dim(1) == O,
                     "grouped linear backward: dx {}, dout {} for x {}", dx_MI.shape().to_string(),
                     dout_MO.shape().to_string(), x_MI.shape().to_string());
    if (expert_gemm_chosen(dout_MO, weight_EOI, dx_MI) &&
        cuda_moe::expert_gemm(cuda_moe::ExpertGemm::kInputGradient, dout_MO.data(),
                              weight_EOI.data(), rows_E, O, I, dx_MI.data(), accumulate_dx,
                              stream_)) {
      dx_done = true;
    }
  }
  if (dx_MI.defined() && !dx_done) {
    // dx_e^T (I x rows) = W_e (col-major I x O) dout_e^T (col-major O x rows).
    std::vector<GroupedGemmProblem> problems;
    for (size_t e = 0; e < rows_E.size(); ++e) {
      problems.push_back({I, rows_E[e], O, expert_pointer(weight_EOI, e), I,
                          row_pointer(dout_MO, start[e]), O,
                          const_cast<char*>(row_pointer(dx_MI, start[e])), I});
    }
    run_grouped(*grouped_gemm_, *gemm_, false, false, x_MI.dtype(), dx_MI.dtype(),
                accumulate_dx ? 1.0f : 0.0f, problems);
  }
  if (!dweight_EOI.defined()) return;  // frozen experts
  require_float_cuda(dweight_EOI, "grouped linear dweight");
  SHARDTRAIN_CHECK(dweight_EOI.numel() == weight_EOI.numel(), "grouped dweight {} for {}",
                   dweight_EOI.shape().to_string(), weight_EOI.shape().to_string());
  if (dweight_EOI.dtype() == DType::kF32 && x_MI.dtype() == DType::kBF16 &&
      cuda_moe::expert_weight_gradients_fit(O, I, dout_MO.data(), x_MI.data(), dweight_EOI.f32())) {
    // cuBLAS runs no grouped GEMM of bf16 inputs into f32 (cuda_moe_wgrad.cu says why a kernel).
    cuda_moe::expert_weight_gradients(dout_MO.data(), x_MI.data(), rows_E, O, I, dweight_EOI.f32(),
                                      accumulate_dweight, stream_);
    return;
  }
  // dW_e^T (I x O) = x_e^T (col-major I x rows) dout_e (col-major O x rows, transposed).
  std::vector<GroupedGemmProblem> problems;
  for (size_t e = 0; e < rows_E.size(); ++e) {
    char* dweight = const_cast<char*>(expert_pointer(dweight_EOI, e));
    if (rows_E[e] == 0) {  // no rows: the GEMM would not run; the gradient is zero
      if (!accumulate_dweight) {
        SHARDTRAIN_CUDA_CHECK(
            cudaMemsetAsync(dweight, 0, O * I * dtype_size(dweight_EOI.dtype()), stream_));
      }
      continue;
    }
    problems.push_back({I, O, rows_E[e], row_pointer(x_MI, start[e]), I,
                        row_pointer(dout_MO, start[e]), O, dweight, I});
  }
  run_grouped(*grouped_gemm_, *gemm_, false, true, x_MI.dtype(), dweight_EOI.dtype(),
              accumulate_dweight ? 1.0f : 0.0f, problems);
}

}  // namespace shardtrain
