// Fp8Gemm (cuda_gemm_fp8.h): cuBLASLt FP8 GEMMs, TN layout, per-tensor device scales.
#include "ops/cuda/cuda_gemm_fp8.h"

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace shardtrain {
namespace {

cudaDataType_t fp8_type(cuda_kernels::Fp8Format format) {
  return format == cuda_kernels::Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

cudaDataType_t output_type(DType dtype) {
  SHARDTRAIN_CHECK(dtype == DType::kBF16 || dtype == DType::kF32,
                   "FP8 GEMM output dtype {} (want bf16 or f32)", dtype_name(dtype));
  return dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void* output_of(const Fp8GemmCall& call) { return call.d != nullptr ? call.d : call.c; }
// C as cuBLASLt gets it: the output when the call names none (beta 0: not read).
void* input_of(const Fp8GemmCall& call) { return call.c != nullptr ? call.c : output_of(call); }

}  // namespace

bool fp8_gemm_shape_ok(int64_t m, int64_t n, int64_t k) {
  return m > 0 && n > 0 && k > 0 && m % 16 == 0 && n % 16 == 0 && k % 16 == 0;
}

Fp8Gemm::Fp8Gemm(cudaStream_t stream, bool autotune) : stream_(stream), autotune_(autotune) {
  SHARDTRAIN_CUBLAS_CHECK(cublasLtCreate(&handle_));
  SHARDTRAIN_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

Fp8Gemm::Plan& Fp8Gemm::plan_for(const Fp8GemmCall& call) {
  const bool has_bias = call.bias != nullptr;
  const Key key{call.m,
                call.n,
                call.k,
                static_cast<int>(call.a_format),
                static_cast<int>(call.b_format),
                static_cast<int>(call.c_dtype),
                call.ldc,
                has_bias,
                call.beta != 0,
                call.fast_accumulation};
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;

  Plan plan;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                static_cast<int8_t>(call.fast_accumulation ? 1 : 0));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  if (has_bias) {
    SHARDTRAIN_CHECK(call.c_dtype == DType::kBF16, "FP8 GEMM bias needs a bf16 output");
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  }
  // The scale (and bias) pointers are set before the heuristic runs, as XLA does: cuBLASLt may
  // otherwise choose a kernel without scaling, which cublasLtMatmul then refuses. run() sets each
  // call's own pointers.
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                static_cast<const void*>(call.a_scale));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                static_cast<const void*>(call.b_scale));
  if (has_bias) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.a, fp8_type(call.a_format), call.k, call.m, call.k));
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.b, fp8_type(call.b_format), call.k, call.n, call.k));
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.c, output_type(call.c_dtype), call.m, call.n, call.ldc));

  cublasLtMatmulPreference_t preference = nullptr;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = kWorkspaceBytes;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found_count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, preference,
                                     kCandidates, results, &found_count);
  cublasLtMatmulPreferenceDestroy(preference);
  SHARDTRAIN_CHECK(status == CUBLAS_STATUS_SUCCESS && found_count > 0,
                   "cuBLASLt has no FP8 algorithm for m={} n={} k={} {} x {} -> {} (status {})",
                   call.m, call.n, call.k, cuda_kernels::fp8_format_name(call.a_format),
                   cuda_kernels::fp8_format_name(call.b_format), dtype_name(call.c_dtype),
                   static_cast<int>(status));
  for (int i = 0; i < found_count; ++i) plan.algos.push_back(results[i].algo);
  return plans_.emplace(key, plan).first->second;
}

Fp8Gemm::Plan& Fp8Gemm::prepare(const Fp8GemmCall& call) {
  SHARDTRAIN_CHECK(fp8_gemm_shape_ok(call.m, call.n, call.k) && call.ldc >= call.m,
                   "FP8 GEMM m={} n={} k={} ldc={}: sizes must be multiples of 16", call.m, call.n,
                   call.k, call.ldc);
  SHARDTRAIN_CHECK(call.a_format == cuda_kernels::Fp8Format::kE4M3 ||
                       call.b_format == cuda_kernels::Fp8Format::kE4M3,
                   "FP8 GEMM: e5m2 x e5m2 is not supported by cuBLASLt");
  void* d = call.d != nullptr ? call.d : call.c;
  SHARDTRAIN_CHECK(aligned16(call.a) && aligned16(call.b) && aligned16(d) &&
                       (call.beta == 0 || aligned16(call.c)) && aligned16(call.a_scale) &&
                       aligned16(call.b_scale),
                   "FP8 GEMM operands and scale pointers must be 16-byte aligned");
  Plan& plan = plan_for(call);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                static_cast<const void*>(call.a_scale));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                static_cast<const void*>(call.b_scale));
  if (call.bias != nullptr) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
  return plan;
}

cublasStatus_t Fp8Gemm::launch(Plan& plan, const Fp8GemmCall& call, size_t index, void* c,
                               void* d) {
  const float alpha = 1.0f;
  const float beta = call.beta;
  return cublasLtMatmul(handle_, plan.desc, &alpha, call.a, plan.a, call.b, plan.b, &beta, c,
                        plan.c, d, plan.c, &plan.algos[index], workspace_, kWorkspaceBytes,
                        stream_);
}

void Fp8Gemm::tune(Plan& plan, const Fp8GemmCall& call) {
  plan.tuned = true;
  const size_t bytes = static_cast<size_t>(call.ldc) * call.n * dtype_size(call.c_dtype);
  if (!autotune_ || plan.algos.size() < 2 || !gemm_output_tunable(bytes)) return;
  const TuneOutput output{input_of(call), output_of(call), bytes, call.beta != 0};
  const int best = fastest_candidate(
      stream_, static_cast<int>(plan.algos.size()), output, [&](int i, void* c, void* out) {
        const cublasStatus_t status = launch(plan, call, static_cast<size_t>(i), c, out);
        if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
        if (status != CUBLAS_STATUS_SUCCESS) {
          cuda_detail::cublas_failed(__FILE__, __LINE__, "cublasLtMatmul (FP8, tuning)", status);
        }
        return true;
      });
  if (best < 0) return;  // nothing timed: run() takes the first accepted candidate
  plan.chosen = static_cast<size_t>(best);
  ++timed_keys_;
}

void Fp8Gemm::run(const Fp8GemmCall& call) {
  Plan& plan = prepare(call);
  if (!plan.tuned) tune(plan, call);
  void* d = output_of(call);
  for (; plan.chosen < plan.algos.size(); ++plan.chosen) {
    const cublasStatus_t status = launch(plan, call, plan.chosen, input_of(call), d);
    if (status == CUBLAS_STATUS_SUCCESS) return;
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
      cuda_detail::cublas_failed(__FILE__, __LINE__, "cublasLtMatmul (FP8)", status);
    }
  }
  cuda_detail::cublas_failed(__FILE__, __LINE__, "cublasLtMatmul (FP8): every candidate refused",
                             CUBLAS_STATUS_NOT_SUPPORTED);
}

size_t Fp8Gemm::candidate_count(const Fp8GemmCall& call) { return prepare(call).algos.size(); }

bool Fp8Gemm::run_candidate(const Fp8GemmCall& call, size_t index) {
  Plan& plan = prepare(call);
  SHARDTRAIN_CHECK(index < plan.algos.size(), "FP8 GEMM candidate {} of {}", index,
                   plan.algos.size());
  const cublasStatus_t status = launch(plan, call, index, input_of(call), output_of(call));
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  if (status != CUBLAS_STATUS_SUCCESS) {
    cuda_detail::cublas_failed(__FILE__, __LINE__, "cublasLtMatmul (FP8)", status);
  }
  return true;
}

}  // namespace shardtrain
