// CublasLtGemm: column-major GEMMs through cuBLASLt with bf16 (or f32) inputs, fp32 compute and
// accumulation, and an f32 or bf16 output D = alpha op(A) op(B) + beta C (beta 0 or 1; D is C
// unless the call names another buffer, e.g. a residual stream added in the epilogue). The
// descriptors and the algorithm are chosen once per problem key (shape, transposes, dtypes,
// leading dimensions, epilogue, pointer alignments) and cached; alpha is no part of the key.
// Algorithm choice: the heuristic's first answer, unless autotuning is on (the default; off with
// SHARDTRAIN_GEMM_AUTOTUNE=0): then the first call of a key times the heuristic's top
// kTuneCandidates on the call's own operands and keeps the fastest if it beats the first by 3%
// (cuda_tuning.h, shared with Fp8Gemm: the scratch output of in-place accumulations, the
// size limit, the stream synchronisation once per key).
// Split-K for skinny keys (one output side <= kSkinnyWidth, a deep inner dimension: LoRA's
// rank-wide products, 16-112 x 4096 over k = 2048-8192), off unless a caller passes split_k:
// measured on one H100 (2026-12-06, cuda_lora_gpu_test DISABLED_LoraGemmTimesAtLlama1BShape, CUDA
// graphs) it gains nothing at Llama-3.2-1B r16 (6.52 ms of LoRA products a step against 6.58
// tuned without it and 6.55 for the heuristic's first), and the chosen variant's weight gradient
// at N 4100, O 16, I 64 (f32, written) was 3.1% off the CPU's (LoraLinearTest.Products), while
// every candidate checked alone in SplitKCandidatesOfSkinnyGemmsMatchTheFp64Reference passed: a
// bug not yet found. With split_k: more heuristic answers (kSkinnyHeuristicCandidates), and for
// the first kSplitKBases of them that support it, variants splitting k in kSplitKCounts ways
// (each part at least kMinSplitDepth deep) with the partial sums reduced in fp32 in the
// workspace; when no heuristic answer supports split-K, the bases come from cuBLASLt's other
// algorithm ids. Every variant passes cublasLtMatmulAlgoCheck before it is timed.
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
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/cuda_tuning.h"

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
  float alpha = 1;             // scales the product (LoRA's scale); REQUIRES: 1 with a bias
  float beta = 0;              // 0: overwrite, 1: accumulate
  const void* bias = nullptr;  // length m, added to every column (epilogue); optional
  DType bias_dtype = DType::kBF16;
};

class CublasLtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  static constexpr int kTuneCandidates = 8;
  static constexpr int64_t kSkinnyWidth = 256;
  static constexpr int kSkinnyHeuristicCandidates = 24;
  static constexpr int kSplitKBases = 4;
  static constexpr int kSplitKCounts[] = {2, 3, 4, 6, 8, 12, 16};
  static constexpr int64_t kMinSplitDepth = 256;

  // Which candidates a key's first run() weighs. autotune: time the heuristic's top `candidates`
  // (else run its first); split_k: which keys also weigh the split-K variants (above): none,
  // the skinny ones, or every key deep enough to split (measurements of the projections, whose
  // weight gradient can leave part of the GPU idle: cuda_gemm_gpu_test).
  enum class SplitK { kNone, kSkinny, kEvery };
  struct Tuning {
    bool autotune = true;
    SplitK split_k = SplitK::kNone;
    int candidates = kTuneCandidates;
  };
  explicit CublasLtGemm(cudaStream_t stream, const Tuning& tuning);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // D = alpha op(A) op(B) (+ bias) + beta * C, enqueued on the stream.
  void run(const GemmCall& call);
  // The GEMMs run() enqueues from now on are planned (and tuned, once per key and target) for
  // `sms` SMs (cuBLASLt's SM count target), leaving the others to work on another stream; 0:
  // the device's count (the default).
  void set_sm_count_target(int sms) { sm_count_target_ = sms; }

  // Whether a key counts as skinny (SplitK::kSkinny weighs its split-K variants).
  static bool skinny(const GemmCall& call);

  // For tests and measurements. The call's key is planned (and timed) first when new.
  struct Choice {
    size_t candidates = 0;    // algorithms weighed: heuristic answers, then split-K variants
    std::vector<int> splits;  // each candidate's split-K count (1: k not split)
    size_t chosen = 0;        // the index run() takes
    int algo_id = -1, tile_id = -1, split_k = 1;
    uint32_t reduction = 0;  // cublasLtReductionScheme_t of the chosen
  };
  Choice choice(const GemmCall& call);
  // One run of the call with candidate `index` (false, nothing enqueued, when cuBLASLt refuses).
  bool run_candidate(const GemmCall& call, size_t index);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    std::vector<cublasLtMatmulAlgo_t> algos;  // the candidates (one when not tuned)
    size_t chosen = 0;
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int, int, int, int64_t, int64_t,
                         int64_t, bool, int, bool, int, int, int, int, int, int>;

  Plan& plan_for(const GemmCall& call);
  // Appends the split-K variants of the plan's first candidates (or of other algorithm ids).
  void add_split_k_variants(Plan& plan, const GemmCall& call) const;
  // Split-K variants of `base` that pass cublasLtMatmulAlgoCheck, appended to plan.algos unless
  // already there; false when `base` supports no split-K with an fp32 reduction.
  bool add_splits_of(Plan& plan, const GemmCall& call, const cublasLtMatmulAlgo_t& base) const;
  cublasStatus_t launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmCall& call,
                        void* c, void* d);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  Tuning tuning_;
  int sm_count_target_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace shardtrain
