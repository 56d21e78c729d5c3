// cuBLASLt GEMMs and CudaOps::linear_forward / linear_backward.
//
// Row-major X (r x c) is column-major X^T (c x r, leading dimension c). So each row-major product
// of the model maps to a column-major cuBLASLt call on the transposes:
//   out_NO = x_NI @ W_OI^T   ->  out^T (O x N) = op_T(W: I x O, ld I) * x^T (I x N, ld I)
//   dx_NI  = dout_NO @ W_OI  ->  dx^T  (I x N) = W^T (I x O, ld I)      * dout^T (O x N, ld O)
//   dW_OI += dout^T @ x_NI   ->  dW^T  (I x O) = x^T (I x N, ld I)      * op_T(dout^T: O x N, ld O)
// The forward bias (length O = m) is the cuBLASLt BIAS epilogue; the bias gradient is a
// deterministic column sum over tokens (cuda_reduce.cu), accumulated into f32 or bf16 dbias.
#include "ops/cuda/cuda_gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_ops.h"

namespace shardtrain {
namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      SHARDTRAIN_CHECK(false, "GEMM dtype {} is not supported", dtype_name(dtype));
  }
  return CUDA_R_32F;
}

void* output_of(const GemmCall& call) { return call.d != nullptr ? call.d : call.c; }
size_t output_bytes(const GemmCall& call) {
  return static_cast<size_t>(call.ldc) * call.n * dtype_size(call.c_dtype);
}

// Largest power of two (at most 16 bytes) that divides the address: cuBLASLt's algorithm choice
// depends on it, and slices of activations (e.g. lm-head chunks) need not be 16-byte aligned.
int alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  int alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

// The workspace limit and the call's pointer alignments, for cuBLASLt's heuristic.
cublasLtMatmulPreference_t preference_for(const GemmCall& call) {
  cublasLtMatmulPreference_t preference = nullptr;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  set_preference(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 uint64_t{CublasLtGemm::kWorkspaceBytes});
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                 static_cast<uint32_t>(alignment_of(call.a)));
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 static_cast<uint32_t>(alignment_of(call.b)));
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                 static_cast<uint32_t>(alignment_of(call.c)));
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                 static_cast<uint32_t>(alignment_of(output_of(call))));
  return preference;
}

}  // namespace

CublasLtGemm::CublasLtGemm(cudaStream_t stream, const Tuning& tuning)
    : stream_(stream), tuning_(tuning) {
  SHARDTRAIN_CHECK(tuning.candidates >= 1, "GEMM tuning with {} candidates", tuning.candidates);
  SHARDTRAIN_CUBLAS_CHECK(cublasLtCreate(&handle_));
  SHARDTRAIN_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

CublasLtGemm::~CublasLtGemm() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

bool CublasLtGemm::skinny(const GemmCall& call) {
  return std::min(call.m, call.n) <= kSkinnyWidth && call.k >= 2 * kMinSplitDepth;
}

CublasLtGemm::Plan& CublasLtGemm::plan_for(const GemmCall& call) {
  const bool has_bias = call.bias != nullptr;
  const Key key{call.transpose_a,
                call.transpose_b,
                call.m,
                call.n,
                call.k,
                static_cast<int>(call.a_dtype),
                static_cast<int>(call.b_dtype),
                static_cast<int>(call.c_dtype),
                call.lda,
                call.ldb,
                call.ldc,
                has_bias,
                has_bias ? static_cast<int>(call.bias_dtype) : -1,
                call.beta != 0,
                alignment_of(call.a),
                alignment_of(call.b),
                alignment_of(call.c),
                has_bias ? alignment_of(call.bias) : 0,
                alignment_of(output_of(call)),
                sm_count_target_};
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;

  Plan plan;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = call.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = call.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  const cublasLtEpilogue_t epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (has_bias) {
    const cudaDataType_t bias_type = cuda_type(call.bias_dtype);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
  }
  if (sm_count_target_ > 0) {
    const int32_t sms = sm_count_target_;
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sms);
  }
  // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k when transposed).
  const uint64_t a_rows = call.transpose_a ? call.k : call.m;
  const uint64_t a_cols = call.transpose_a ? call.m : call.k;
  const uint64_t b_rows = call.transpose_b ? call.n : call.k;
  const uint64_t b_cols = call.transpose_b ? call.k : call.n;
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.a, cuda_type(call.a_dtype), a_rows, a_cols, call.lda));
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.b, cuda_type(call.b_dtype), b_rows, b_cols, call.ldb));
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.c, cuda_type(call.c_dtype), call.m, call.n, call.ldc));

  cublasLtMatmulPreference_t preference = preference_for(call);
  const bool tune = tuning_.autotune && gemm_output_tunable(output_bytes(call));
  const bool skinny_split = tuning_.split_k == SplitK::kSkinny && skinny(call);
  const bool weigh_split_k =
      tune && (skinny_split || (tuning_.split_k == SplitK::kEvery && call.k >= 2 * kMinSplitDepth));
  const int requested = !tune          ? 1
                        : skinny_split ? std::max(kSkinnyHeuristicCandidates, tuning_.candidates)
                                       : tuning_.candidates;
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(requested));
  int found_count = 0;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c,
                                                         plan.c, preference, requested,
                                                         results.data(), &found_count));
  cublasLtMatmulPreferenceDestroy(preference);
  SHARDTRAIN_CHECK(found_count > 0,
                   "cuBLASLt has no algorithm for m={} n={} k={} trans={}{} dtypes {}/{}/{} "
                   "bias={}",
                   call.m, call.n, call.k, call.transpose_a, call.transpose_b,
                   dtype_name(call.a_dtype), dtype_name(call.b_dtype), dtype_name(call.c_dtype),
                   has_bias);
  for (int i = 0; i < found_count; ++i) plan.algos.push_back(results[i].algo);
  if (weigh_split_k) add_split_k_variants(plan, call);
  if (plan.algos.size() > 1) {
    const TuneOutput output{call.c, output_of(call), output_bytes(call), call.beta != 0};
    const int chosen = fastest_candidate(
        stream_, static_cast<int>(plan.algos.size()), output, [&](int i, void* c, void* d) {
          const cublasStatus_t status = launch(plan, plan.algos[i], call, c, d);
          if (status == CUBLAS_STATUS_SUCCESS) return true;
          // A heuristic answer that fails is an error, as the real launch would be; a variant
          // of ours that cuBLASLt refuses at launch is only left out.
          if (i < found_count) SHARDTRAIN_CUBLAS_CHECK(status);
          return false;
        });
    plan.chosen = chosen < 0 ? 0 : static_cast<size_t>(chosen);  // not timed: the first
  }
  return plans_.emplace(key, std::move(plan)).first->second;
}

void CublasLtGemm::add_split_k_variants(Plan& plan, const GemmCall& call) const {
  const size_t heuristic = plan.algos.size();
  int bases = 0;
  for (size_t i = 0; i < heuristic && bases < kSplitKBases; ++i) {
    const cublasLtMatmulAlgo_t base = plan.algos[i];  // a copy: add_splits_of appends
    if (add_splits_of(plan, call, base)) ++bases;
  }
  if (bases > 0) return;
  // No heuristic answer splits k: the best configuration of each other algorithm id (the
  // heuristic limited to that id) as a base.
  constexpr int kMaxIds = 128;
  int ids[kMaxIds];
  int id_count = 0;
  const cudaDataType_t a_type = cuda_type(call.a_dtype), b_type = cuda_type(call.b_dtype);
  const cudaDataType_t c_type = cuda_type(call.c_dtype);
  if (cublasLtMatmulAlgoGetIds(handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F, a_type, b_type, c_type,
                               c_type, kMaxIds, ids, &id_count) != CUBLAS_STATUS_SUCCESS) {
    return;
  }
  cublasLtMatmulPreference_t preference = preference_for(call);
  set_preference(preference, CUBLASLT_MATMUL_PREF_SEARCH_MODE,
                 static_cast<uint32_t>(CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID));
  for (int i = 0; i < id_count && bases < kSplitKBases; ++i) {
    cublasLtMatmulHeuristicResult_t result{};
    if (cublasLtMatmulAlgoInit(handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F, a_type, b_type, c_type,
                               c_type, ids[i], &result.algo) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                       preference, 1, &result, &found) != CUBLAS_STATUS_SUCCESS ||
        found < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    if (add_splits_of(plan, call, result.algo)) ++bases;
  }
  cublasLtMatmulPreferenceDestroy(preference);
}

bool CublasLtGemm::add_splits_of(Plan& plan, const GemmCall& call,
                                 const cublasLtMatmulAlgo_t& base) const {
  int32_t supported = 0;
  uint32_t schemes = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &supported,
                                        sizeof(supported), &written) != CUBLAS_STATUS_SUCCESS ||
      supported == 0 ||
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                        sizeof(schemes), &written) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  // Partial sums in fp32 and reduced in a separate pass: deterministic, and no rounding of the
  // partials to a bf16 output (INPLACE would add them in the output type).
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if ((schemes & scheme) == 0) {
    if (call.c_dtype != DType::kF32 || (schemes & CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE) == 0) {
      return false;
    }
    scheme = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  }
  for (const int32_t splits : kSplitKCounts) {
    if (call.k < splits * kMinSplitDepth) break;
    cublasLtMatmulAlgo_t variant = base;
    if (cublasLtMatmulAlgoConfigSetAttribute(&variant, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof(splits)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&variant, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                             &scheme, sizeof(scheme)) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, &variant,
                                &check) != CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > kWorkspaceBytes) {
      continue;
    }
    const bool known = std::any_of(plan.algos.begin(), plan.algos.end(), [&](const auto& algo) {
      return std::memcmp(&algo, &variant, sizeof(variant)) == 0;
    });
    if (!known) plan.algos.push_back(variant);
  }
  return true;
}

cublasStatus_t CublasLtGemm::launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                                    const GemmCall& call, void* c, void* d) {
  if (call.bias != nullptr) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
  const float alpha = call.alpha;
  const float beta = call.beta;
  return cublasLtMatmul(handle_, plan.desc, &alpha, call.a, plan.a, call.b, plan.b, &beta, c,
                        plan.c, d, plan.c, &algo, workspace_, kWorkspaceBytes, stream_);
}

void CublasLtGemm::run(const GemmCall& call) {
  if (call.m == 0 || call.n == 0) return;
  SHARDTRAIN_CHECK(call.alpha == 1.0f || call.bias == nullptr,
                   "GEMM alpha {} with a bias (cuBLASLt would add the bias unscaled)", call.alpha);
  const Plan& plan = plan_for(call);
  SHARDTRAIN_CUBLAS_CHECK(launch(plan, plan.algos[plan.chosen], call, call.c, output_of(call)));
}

CublasLtGemm::Choice CublasLtGemm::choice(const GemmCall& call) {
  const Plan& plan = plan_for(call);
  Choice choice;
  choice.candidates = plan.algos.size();
  choice.chosen = plan.chosen;
  size_t written = 0;
  for (const cublasLtMatmulAlgo_t& algo : plan.algos) {
    int32_t splits = 1;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                         sizeof(splits), &written);
    choice.splits.push_back(splits);
  }
  const cublasLtMatmulAlgo_t& algo = plan.algos[plan.chosen];
  int32_t id = -1;
  uint32_t tile = 0, reduction = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction,
                                       sizeof(reduction), &written);
  choice.algo_id = id;
  choice.tile_id = static_cast<int>(tile);
  choice.split_k = choice.splits[plan.chosen];
  choice.reduction = reduction;
  return choice;
}

bool CublasLtGemm::run_candidate(const GemmCall& call, size_t index) {
  const Plan& plan = plan_for(call);
  SHARDTRAIN_CHECK(index < plan.algos.size(), "GEMM candidate {} of {}", index, plan.algos.size());
  const cublasStatus_t status = launch(plan, plan.algos[index], call, call.c, output_of(call));
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  SHARDTRAIN_CUBLAS_CHECK(status);
  return true;
}

// ---- CudaOps linear ----

namespace {

int64_t row_width(const Tensor& t) { return t.shape().rank() == 0 ? 1 : t.dim(-1); }

void require_gemm_input(const Tensor& t, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda, "{} is not a CUDA tensor", what);
  SHARDTRAIN_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF32,
                   "{} dtype {} (want bf16 or f32)", what, dtype_name(t.dtype()));
}

}  // namespace

namespace {

// The one place a GemmCall is filled from tensors: D (m x n) = op(A) op(B) + beta * D, column
// major with leading dimensions lda, ldb, ldc (cuBLAS's view of our row-major tensors).
struct GemmOperands {
  const Tensor& a;
  int64_t lda;
  const Tensor& b;
  int64_t ldb;
  const Tensor& out;
  int64_t ldc;
};
GemmCall gemm_of(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                 const GemmOperands& operands, float beta) {
  const auto& [a, lda, b, ldb, out, ldc] = operands;
  GemmCall call;
  call.transpose_a = transpose_a;
  call.transpose_b = transpose_b;
  call.m = m;
  call.n = n;
  call.k = k;
  call.a = a.data();
  call.a_dtype = a.dtype();
  call.lda = lda;
  call.b = b.data();
  call.b_dtype = b.dtype();
  call.ldb = ldb;
  call.c = out.data();
  call.c_dtype = out.dtype();
  call.ldc = ldc;
  call.beta = beta;
  return call;
}

// The GEMM of out_NO = x_NI @ weight_OI^T (overwriting out), after the shape and dtype checks.
GemmCall forward_call(const Tensor& x_NI, const Tensor& weight_OI, const Tensor& out_NO) {
  const int64_t in_features = row_width(x_NI);
  const int64_t rows = in_features == 0 ? 0 : x_NI.numel() / in_features;
  const int64_t out_features = weight_OI.dim(0);
  SHARDTRAIN_CHECK(
      weight_OI.numel() == out_features * in_features && out_NO.numel() == rows * out_features,
      "linear: x {}, weight {}, out {}", x_NI.shape().to_string(), weight_OI.shape().to_string(),
      out_NO.shape().to_string());
  require_gemm_input(x_NI, "linear x");
  require_gemm_input(weight_OI, "linear weight");
  require_gemm_input(out_NO, "linear out");
  SHARDTRAIN_CHECK(x_NI.dtype() == weight_OI.dtype(), "linear: x {} but weight {}",
                   dtype_name(x_NI.dtype()), dtype_name(weight_OI.dtype()));
  return gemm_of(true, false, out_features, rows, in_features,
                 {weight_OI, in_features, x_NI, in_features, out_NO, out_features}, 0.0f);
}

}  // namespace

void CudaOps::linear_forward(Tensor x_NI, Tensor weight_OI, Tensor bias_O, Tensor out_NO) {
  scaled_linear_forward(x_NI, weight_OI, 1.0f, bias_O, Tensor(), out_NO);
}

void CudaOps::linear_forward_residual(Tensor x_NI, Tensor weight_OI, Tensor residual_NO,
                                      Tensor out_NO) {
  scaled_linear_forward(x_NI, weight_OI, 1.0f, Tensor(), residual_NO, out_NO);
}

void CudaOps::scaled_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                                    Tensor residual_NO, Tensor out_NO) {
  GemmCall call = forward_call(x_NI, weight_OI, out_NO);
  call.alpha = alpha;
  if (bias_O.defined()) {
    SHARDTRAIN_CHECK(bias_O.numel() == call.m, "linear bias {} for {} outputs",
                     bias_O.shape().to_string(), call.m);
    require_gemm_input(bias_O, "linear bias");
    call.bias = bias_O.data();
    call.bias_dtype = bias_O.dtype();
  }
  if (residual_NO.defined()) {
    SHARDTRAIN_CHECK(residual_NO.numel() == out_NO.numel() && residual_NO.dtype() == out_NO.dtype(),
                     "linear residual {} {} for out {} {}", residual_NO.shape().to_string(),
                     dtype_name(residual_NO.dtype()), out_NO.shape().to_string(),
                     dtype_name(out_NO.dtype()));
    require_gemm_input(residual_NO, "linear residual");
    call.c = residual_NO.data();
    call.d = out_NO.data();  // the epilogue adds C = residual, so out may alias it
    call.beta = 1.0f;
  }
  gemm_->run(call);
}

void CudaOps::linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, Tensor dx_NI,
                              Tensor dweight_OI, Tensor dbias_O, bool accumulate_dx,
                              bool accumulate_dweight) {
  scaled_linear_backward(dout_NO, x_NI, weight_OI, 1.0f, dx_NI, dweight_OI, dbias_O, accumulate_dx,
                         accumulate_dweight);
}

void CudaOps::scaled_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float dx_alpha,
                                     Tensor dx_NI, Tensor dweight_OI, Tensor dbias_O,
                                     bool accumulate_dx, bool accumulate_dweight) {
  const int64_t in_features = row_width(x_NI);
  const int64_t rows = in_features == 0 ? 0 : x_NI.numel() / in_features;
  const int64_t out_features = weight_OI.dim(0);
  const bool frozen = !dweight_OI.defined();  // no weight gradient wanted
  SHARDTRAIN_CHECK(weight_OI.numel() == out_features * in_features &&
                       (frozen || dweight_OI.numel() == out_features * in_features) &&
                       dout_NO.numel() == rows * out_features,
                   "linear backward: x {}, weight {}, dweight {}, dout {}",
                   x_NI.shape().to_string(), weight_OI.shape().to_string(),
                   dweight_OI.shape().to_string(), dout_NO.shape().to_string());
  require_gemm_input(dout_NO, "linear dout");
  require_gemm_input(x_NI, "linear x");
  require_gemm_input(weight_OI, "linear weight");
  if (!frozen) require_gemm_input(dweight_OI, "linear dweight");
  SHARDTRAIN_CHECK(dout_NO.dtype() == weight_OI.dtype() && dout_NO.dtype() == x_NI.dtype(),
                   "linear backward: dout {}, x {}, weight {} must share a dtype",
                   dtype_name(dout_NO.dtype()), dtype_name(x_NI.dtype()),
                   dtype_name(weight_OI.dtype()));
  if (rows == 0 || out_features == 0 || in_features == 0) {
    if (dx_NI.defined() && !accumulate_dx) fill_zero(dx_NI);
    if (!accumulate_dweight && !frozen) {
      fill_zero(dweight_OI);
      if (dbias_O.defined()) fill_zero(dbias_O);
    }
    return;
  }
  if (dx_NI.defined()) {
    SHARDTRAIN_CHECK(dx_NI.numel() == x_NI.numel(), "linear dx {} for x {}",
                     dx_NI.shape().to_string(), x_NI.shape().to_string());
    require_gemm_input(dx_NI, "linear dx");
    GemmCall dx_call = gemm_of(false, false, in_features, rows, out_features,
                               {weight_OI, in_features, dout_NO, out_features, dx_NI, in_features},
                               accumulate_dx ? 1.0f : 0.0f);
    dx_call.alpha = dx_alpha;
    gemm_->run(dx_call);
  }
  if (frozen) return;
  // beta 0: the fp32 gradient is not read
  gemm_->run(gemm_of(false, true, in_features, out_features, rows,
                     {x_NI, in_features, dout_NO, out_features, dweight_OI, in_features},
                     accumulate_dweight ? 1.0f : 0.0f));
  if (dbias_O.defined()) {
    SHARDTRAIN_CHECK(dbias_O.numel() == out_features, "linear dbias {} for {} outputs",
                     dbias_O.shape().to_string(), out_features);
    require_gemm_input(dbias_O, "linear dbias");
    float* scratch = scratch_floats(cuda_kernels::column_sums_scratch_floats(rows, out_features));
    cuda_kernels::column_sums(dout_NO.dtype(), dout_NO.data(), rows, out_features, dbias_O.dtype(),
                              dbias_O.data(), accumulate_dweight, scratch, stream_);
  }
}

}  // namespace shardtrain
