// CudaGroupedGemm: many column-major GEMMs of one shape family in a single cuBLAS launch
// (cublasGemmGroupedBatchedEx: each problem its own group of one, so every expert may have its
// own row count), bf16 (or f32) inputs, fp32 compute, an f32 or bf16 output, beta 0 or 1 for all.
// The per-problem pointer arrays go to the device with one stream-ordered copy from pageable
// memory (the copy is staged before the call returns, so the host arrays are free again at once).
// Internal to ops/cuda: CudaOps::grouped_linear_* (cuda_moe_ops.cpp) express each expert's
// row-major product as cuda_gemm.cpp does for one linear.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace shardtrain {

struct GroupedGemmProblem {
  int64_t m = 0, n = 0, k = 0;  // D is m x n; op(A) m x k; op(B) k x n
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
};

class CudaGroupedGemm {
 public:
  explicit CudaGroupedGemm(cudaStream_t stream);
  ~CudaGroupedGemm();
  CudaGroupedGemm(const CudaGroupedGemm&) = delete;
  CudaGroupedGemm& operator=(const CudaGroupedGemm&) = delete;

  // C = op(A) op(B) + beta C for every problem (problems with m, n or k of 0 are skipped), in
  // one launch, enqueued on the stream. A and B share ab_dtype; C has c_dtype. Returns false,
  // having enqueued no GEMM, when this cuBLAS does not run the dtype combination grouped (then
  // never tries it again; the caller runs the problems one by one).
  bool run(bool transpose_a, bool transpose_b, DType ab_dtype, DType c_dtype, float beta,
           const std::vector<GroupedGemmProblem>& problems);
  // The same problems one cublasGemmEx each (cuBLAS's own heuristic, nothing cached per shape),
  // for the combinations run() refuses. Expert row counts change every step, so a per-shape
  // plan cache with autotuning (CublasLtGemm) would tune and keep a plan for almost every call.
  // Returns false, having enqueued no GEMM, when cuBLAS refuses the combination here too.
  bool run_each(bool transpose_a, bool transpose_b, DType ab_dtype, DType c_dtype, float beta,
                const std::vector<GroupedGemmProblem>& problems);

 private:
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  void** device_pointers_ = nullptr;                  // A, B and C arrays, back to back
  size_t device_capacity_ = 0;                        // pointers
  std::vector<std::pair<DType, DType>> unsupported_;  // (ab, c) combinations cuBLAS refused
};

}  // namespace shardtrain
