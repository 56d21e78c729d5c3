// Fp8Gemm: FP8 GEMMs through cuBLASLt, D = alpha_a * alpha_b * A^T B (+ bias) + beta C, with
// A and B FP8 (e4m3 or e5m2, not both e5m2), fp32 accumulation, and a bf16 or f32 output.
// alpha_a and alpha_b are per-tensor dequantisation factors in device memory
// (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER / B_SCALE_POINTER), written by the cast kernels
// (cuda_fp8.h), so a step never waits for the host.
//
// Layout: FP8 cuBLASLt runs only "TN" (A transposed, B not), column-major: A stored k x m
// (lda >= k), B stored k x n (ldb >= k), i.e. both operands with K contiguous. In row-major
// terms: A is an (m x k) row-major array, B an (n x k) one, and D the (n x m) row-major result.
// cuBLASLt also requires m, n, k and the leading dimensions to be multiples of 16 and the
// pointers 16-byte aligned (the scale pointers too: see Fp8Linear's scalar slots):
// fp8_gemm_shape_ok says whether a shape qualifies (callers fall back to bf16 otherwise).
//
// Descriptors and the algorithm are cached per problem key. The algorithm: with autotuning on
// (the default; SHARDTRAIN_GEMM_AUTOTUNE=0 off, the switch of the bf16 GEMMs), the first run() of
// a key times every heuristic candidate that cublasLtMatmul accepts on the call's own operands
// and scales and keeps the fastest if it beats the first accepted one by 3% (cuda_tuning.h,
// shared with CublasLtGemm: an in-place accumulation is timed on a scratch output, so the call
// adds its product exactly once; outputs over 256 MiB are not timed). Otherwise, or when nothing
// could be timed, the heuristic's first answer that cublasLtMatmul accepts (candidates refused
// with NOT_SUPPORTED are skipped, in order). The timing runs only read the scale and bias
// pointers (device memory the cast kernels write), so they change nothing a later launch reads.
// Internal to ops/cuda; needs compute capability 8.9+ (fp8_supported in cuda_fp8_support.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/cuda_fp8.h"
#include "ops/cuda/cuda_tuning.h"
#include "ops/fp8_workspace.h"

namespace shardtrain {

struct Fp8GemmCall {
  int64_t m = 0, n = 0, k = 0;  // D is m x n (column-major); A^T is m x k; B is k x n
  const uint8_t* a = nullptr;   // k x m column-major, ld k
  cuda_kernels::Fp8Format a_format = cuda_kernels::Fp8Format::kE4M3;
  const float* a_scale = nullptr;  // device: A's dequantisation factor
  const uint8_t* b = nullptr;      // k x n column-major, ld k
  cuda_kernels::Fp8Format b_format = cuda_kernels::Fp8Format::kE4M3;
  const float* b_scale = nullptr;
  void* c = nullptr;             // read when beta != 0
  void* d = nullptr;             // the output, C's layout; nullptr: D is C
  DType c_dtype = DType::kBF16;  // bf16 or f32
  int64_t ldc = 0;
  float beta = 0;              // 0: overwrite, 1: accumulate
  const void* bias = nullptr;  // bf16, length m, added to every column; optional
  // cuBLASLt's fast accumulation (fewer fp32 promotions of the tensor-core partial sums):
  // faster, slightly less precise. Fp8Linear's forward GEMM always uses it, its gradient GEMMs
  // unless SHARDTRAIN_FP8_GRAD_FAST_ACCUM=0 (Transformer Engine and torchao default to it off
  // there; FP8_NOTES.md has the measured cost and the numerics test both ways).
  bool fast_accumulation = false;
};

// True when an m x n x k TN FP8 GEMM meets cuBLASLt's size rules (multiples of 16).
bool fp8_gemm_shape_ok(int64_t m, int64_t n, int64_t k);

class Fp8Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = kFp8GemmWorkspaceBytes;  // ops/fp8_workspace.h

  // autotune: time the candidates at each key's first run() (above); tests pass it explicitly.
  explicit Fp8Gemm(cudaStream_t stream, bool autotune = gemm_autotune_switch());
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Enqueues D = a_scale * b_scale * A^T B (+ bias) + beta C on the stream.
  void run(const Fp8GemmCall& call);

  // For measurements (cuda_fp8_throughput_gpu_test): how many algorithms the heuristic offers
  // for the call's problem (run() takes the timed choice, or the first that cuBLASLt accepts), and
  // one run of the call with candidate `index` (false, nothing enqueued, when cuBLASLt refuses it).
  size_t candidate_count(const Fp8GemmCall& call);
  bool run_candidate(const Fp8GemmCall& call, size_t index);
  // For tests: how many keys chose their algorithm by timing.
  size_t timed_keys() const { return timed_keys_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's candidates, best first
    size_t chosen = 0;   // the fastest timed, or the first one cublasLtMatmul accepted
    bool tuned = false;  // run() has made its timing decision for this key
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int, int64_t, bool, bool, bool>;
  Plan& plan_for(const Fp8GemmCall& call);
  // Checks the call, sets its scale and bias pointers on the plan's descriptor: run()'s first half.
  Plan& prepare(const Fp8GemmCall& call);
  // Candidate `index` of the plan with C = c and D = d (the call's own, or the tuning scratch).
  cublasStatus_t launch(Plan& plan, const Fp8GemmCall& call, size_t index, void* c, void* d);
  // At a key's first run(): time the candidates and set plan.chosen (when autotuning is on).
  void tune(Plan& plan, const Fp8GemmCall& call);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  bool autotune_ = true;
  size_t timed_keys_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace shardtrain
