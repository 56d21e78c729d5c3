// CublasLtGemm: column-major GEMMs through cuBLASLt with bf16 (or f32) inputs, fp32 compute and
// accumulation, and an f32 or bf16 output D = op(A) op(B) + beta C (beta 0 or 1; D is C unless
// the call names another buffer, e.g. a residual stream added in the epilogue). The descriptors
// and the algorithm are chosen once per problem key (shape, transposes, dtypes, leading dimensions,
// epilogue, pointer alignments) and cached.
// Algorithm choice: the heuristic's first answer, unless autotuning is on (the default; off with
// SHARDTRAIN_GEMM_AUTOTUNE=0): then the first call of a key times the heuristic's top
// kTuneCandidates on the call's own operands and keeps the fastest if it beats the first by 3%
// (cuda_gemm_tuning.h, shared with Fp8Gemm: the scratch output of in-place accumulations, the
// size limit, the stream synchronisation once per key).
// Internal to ops/cuda.
//
// Row-major callers (CudaOps::linear_*) express a row-major product as the column-major product
// of the transposes; cuda_gemm.cpp spells out each mapping.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"
#include "ops/cuda/cuda_gemm_tuning.h"

namespace shardtrain {

struct GemmCall {
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0;  // D is m x n; op(A) m x k; op(B) k x n
  const void* a = nullptr;
  DType a_dtype = DType::kBF16;
  int64_t lda = 0;
  const void* b = nullptr;
  DType b_dtype = DType::kBF16;
  int64_t ldb = 0;
  void* c = nullptr;  // C, read when beta != 0
  void* d = nullptr;  // D, the output, with C's layout; nullptr: D is C (in place)
  DType c_dtype = DType::kBF16;
  int64_t ldc = 0;
  float beta = 0;              // 0: overwrite, 1: accumulate
  const void* bias = nullptr;  // length m, added to every column (epilogue); optional
  DType bias_dtype = DType::kBF16;
};

class CublasLtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  static constexpr int kTuneCandidates = 8;

  explicit CublasLtGemm(cudaStream_t stream);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // D = op(A) op(B) (+ bias) + beta * C, enqueued on the stream.
  void run(const GemmCall& call);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int, int, int, int64_t, int64_t,
                         int64_t, bool, int, bool, int, int, int, int, int>;

  Plan& plan_for(const GemmCall& call);
  void launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmCall& call, void* c,
              void* d);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  bool autotune_ = true;
  std::map<Key, Plan> plans_;
};

}  // namespace shardtrain
