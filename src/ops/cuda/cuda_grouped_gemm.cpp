#include "ops/cuda/cuda_grouped_gemm.h"

#include <climits>

#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/cuda_check.h"

namespace shardtrain {
namespace {

cudaDataType_t grouped_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      SHARDTRAIN_CHECK(false, "grouped GEMM dtype {} is not supported", dtype_name(dtype));
  }
  return CUDA_R_32F;
}

int narrow(int64_t value, const char* what) {
  SHARDTRAIN_CHECK(value >= 0 && value <= INT_MAX, "grouped GEMM {} = {} exceeds int", what, value);
  return static_cast<int>(value);
}

}  // namespace

CudaGroupedGemm::CudaGroupedGemm(cudaStream_t stream) : stream_(stream) {
  SHARDTRAIN_CUBLAS_CHECK(cublasCreate(&handle_));
  SHARDTRAIN_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
}

CudaGroupedGemm::~CudaGroupedGemm() {
  if (device_pointers_ != nullptr) cudaFree(device_pointers_);
  if (handle_ != nullptr) cublasDestroy(handle_);
}

bool CudaGroupedGemm::run(bool transpose_a, bool transpose_b, DType ab_dtype, DType c_dtype,
                          float beta, const std::vector<GroupedGemmProblem>& problems) {
  const std::pair<DType, DType> types{ab_dtype, c_dtype};
  for (const auto& refused : unsupported_) {
    if (refused == types) return false;
  }
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<const void*> pointers;  // A of every problem, then B, then C
  std::vector<const GroupedGemmProblem*> live;
  for (const GroupedGemmProblem& p : problems) {
    if (p.m > 0 && p.n > 0 && p.k > 0) live.push_back(&p);
  }
  if (live.empty()) return true;
  const size_t count = live.size();
  pointers.resize(3 * count);
  for (size_t i = 0; i < count; ++i) {
    const GroupedGemmProblem& p = *live[i];
    m.push_back(narrow(p.m, "m"));
    n.push_back(narrow(p.n, "n"));
    k.push_back(narrow(p.k, "k"));
    lda.push_back(narrow(p.lda, "lda"));
    ldb.push_back(narrow(p.ldb, "ldb"));
    ldc.push_back(narrow(p.ldc, "ldc"));
    size.push_back(1);
    pointers[i] = p.a;
    pointers[count + i] = p.b;
    pointers[2 * count + i] = p.c;
  }
  if (device_capacity_ < pointers.size()) {
    // Growing: the stream may still read the old array, so it is drained first.
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (device_pointers_ != nullptr) SHARDTRAIN_CUDA_CHECK(cudaFree(device_pointers_));
    device_capacity_ = pointers.size() * 2;
    SHARDTRAIN_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&device_pointers_), device_capacity_ * sizeof(void*)));
  }
  // Pageable source: the copy is staged before cudaMemcpyAsync returns.
  SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(device_pointers_, pointers.data(),
                                        pointers.size() * sizeof(void*), cudaMemcpyHostToDevice,
                                        stream_));
  const std::vector<cublasOperation_t> op_a(count, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  const std::vector<cublasOperation_t> op_b(count, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  const std::vector<float> alpha(count, 1.0f), betas(count, beta);
  const cublasStatus_t status = cublasGemmGroupedBatchedEx(
      handle_, op_a.data(), op_b.data(), m.data(), n.data(), k.data(), alpha.data(),
      const_cast<const void* const*>(device_pointers_), grouped_type(ab_dtype), lda.data(),
      const_cast<const void* const*>(device_pointers_ + count), grouped_type(ab_dtype), ldb.data(),
      betas.data(), device_pointers_ + 2 * count, grouped_type(c_dtype), ldc.data(),
      static_cast<int>(count), size.data(), CUBLAS_COMPUTE_32F);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    log::info("cuBLAS runs no grouped GEMM of {} inputs into {}: one GEMM per expert instead",
              dtype_name(ab_dtype), dtype_name(c_dtype));
    unsupported_.push_back(types);
    return false;
  }
  SHARDTRAIN_CUBLAS_CHECK(status);
  return true;
}

bool CudaGroupedGemm::run_each(bool transpose_a, bool transpose_b, DType ab_dtype, DType c_dtype,
                               float beta, const std::vector<GroupedGemmProblem>& problems) {
  const float alpha = 1.0f;
  bool first = true;
  for (const GroupedGemmProblem& p : problems) {
    if (p.m == 0 || p.n == 0 || p.k == 0) continue;
    const cublasStatus_t status = cublasGemmEx(
        handle_, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        narrow(p.m, "m"), narrow(p.n, "n"), narrow(p.k, "k"), &alpha, p.a, grouped_type(ab_dtype),
        narrow(p.lda, "lda"), p.b, grouped_type(ab_dtype), narrow(p.ldb, "ldb"), &beta, p.c,
        grouped_type(c_dtype), narrow(p.ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (first && status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    SHARDTRAIN_CUBLAS_CHECK(status);
    first = false;
  }
  return true;
}

}  // namespace shardtrain
