// Choosing a kernel by timing: cuBLASLt's algorithms for CublasLtGemm (bf16/f32, cuda_gemm.h)
// and Fp8Gemm (cuda_gemm_fp8.h), and the Hopper attention forward's two kernels
// (cuda_attention_tuning.h). cuBLASLt's heuristic ranks its candidates by a model, and its first
// answer is not the fastest at several training shapes; the first call of a problem key times
// the candidates on the call's own operands and keeps the fastest, if it beats the first
// (accepted) candidate, the default, by kTuneMargin (3%: less is within the timing noise, and a
// stable choice is worth more than a marginal one).
// The timing runs must leave the call's result unaffected: a call that accumulates in place
// (beta != 0, D is C) runs them on a scratch copy of the output (its contents do not matter for
// timing); any other call writes its own output, which the real launch then overwrites. Outputs
// larger than kMaxTunedOutputBytes are not timed (callers check gemm_output_tunable), nor are
// in-place accumulations when the scratch cannot be allocated (a nearly full GPU).
// Tuning synchronises the stream once per key (first step only). On by default;
// SHARDTRAIN_GEMM_AUTOTUNE=0 keeps the heuristic's choice (run-to-run identical algorithms),
// SHARDTRAIN_ATTENTION_AUTOTUNE=0 the attention table's.
// Internal to ops/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "ops/ops_switches.h"  // gemm_autotune_switch: GEMM classes read it once, at construction

namespace shardtrain {

inline constexpr size_t kMaxTunedOutputBytes = size_t{256} << 20;
inline constexpr float kTuneMargin = 0.97f;  // a candidate must take < 97% of the first's time
// Launches per timing: kTuneMinRepeats, or more (at most kTuneMaxRepeats, the same for every
// candidate of the key) when the first accepted candidate's runs take under kTuneMinTimedMs,
// where the launches' own latency would decide the comparison.
inline constexpr int kTuneMinRepeats = 3;
inline constexpr int kTuneMaxRepeats = 32;
inline constexpr float kTuneMinTimedMs = 0.2f;

// Whether a call writing `output_bytes` of output may be timed (no scratch larger than this).
inline bool gemm_output_tunable(size_t output_bytes) {
  return output_bytes <= kMaxTunedOutputBytes;
}

// The output side of the call being tuned.
struct TuneOutput {
  void* c = nullptr;        // C as the call passes it (read when accumulating)
  void* d = nullptr;        // the call's output
  size_t bytes = 0;         // the output's extent in bytes (ld * columns * element size)
  bool accumulate = false;  // beta != 0
};

// Enqueues candidate `index` on the stream with C = c and D = d; false when cuBLASLt refuses it
// (NOT_SUPPORTED: nothing enqueued). Any other failure throws.
using CandidateLaunch = std::function<bool(int index, void* c, void* d)>;

// Times candidates 0 .. count-1 (a warm-up launch, then the repeats above between two events; a
// refused candidate is skipped) and returns the one to keep: the fastest, if it beats the first
// accepted candidate by kTuneMargin, else that first. -1 when nothing was timed (every
// candidate refused, or no scratch for an in-place accumulation): the caller keeps its default.
// `times_ms`, when given, receives each candidate's milliseconds a launch (0: refused).
int fastest_candidate(cudaStream_t stream, int count, const TuneOutput& output,
                      const CandidateLaunch& launch, std::vector<float>* times_ms = nullptr);

}  // namespace shardtrain
