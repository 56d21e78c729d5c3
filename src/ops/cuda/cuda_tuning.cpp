// fastest_candidate (cuda_tuning.h): event timing of cuBLASLt's candidates.
#include "ops/cuda/cuda_tuning.h"

#include <algorithm>
#include <cmath>

#include "ops/cuda/cuda_check.h"

namespace shardtrain {

int fastest_candidate(cudaStream_t stream, int count, const TuneOutput& output,
                      const CandidateLaunch& launch, std::vector<float>* times_ms) {
  if (times_ms != nullptr) times_ms->assign(static_cast<size_t>(count), 0.0f);
  // An in-place accumulating call must not see the trial runs: they read and write a scratch
  // C = D. Any other call may write its own output: the real launch that follows overwrites it.
  void* input = output.c;
  void* target = output.d;
  void* scratch = nullptr;
  if (output.accumulate && output.d == output.c) {
    if (cudaMallocAsync(&scratch, output.bytes, stream) != cudaSuccess) {
      // Tuning is optional: with no memory to spare, keep the default choice.
      (void)cudaGetLastError();  // clear the allocation error so later checks do not see it
      return -1;
    }
    input = target = scratch;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaEventCreate(&start));
  SHARDTRAIN_CUDA_CHECK(cudaEventCreate(&stop));
  // Milliseconds of `repeats` back-to-back launches of candidate i.
  auto time_ms = [&](int i, int repeats) {
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < repeats; ++r) launch(i, input, target);
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(stop, stream));
    SHARDTRAIN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    SHARDTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  };
  int repeats = kTuneMinRepeats;
  int best = -1;
  float best_ms = 0, first_ms = 0;
  for (int i = 0; i < count; ++i) {
    if (!launch(i, input, target)) continue;  // refused (warm-up; also loads the kernel)
    float ms = time_ms(i, repeats);
    if (best < 0) {
      // A few microseconds a launch (skinny products): more repeats, so that the events span
      // device work rather than the launches' latency; the same count for every candidate.
      if (ms < kTuneMinTimedMs && ms > 0) {
        const float per_launch = ms / static_cast<float>(repeats);
        repeats = std::clamp(static_cast<int>(std::ceil(kTuneMinTimedMs / per_launch)),
                             kTuneMinRepeats, kTuneMaxRepeats);
        ms = time_ms(i, repeats);
      }
      best = i;
      first_ms = best_ms = ms;
    } else if (ms < best_ms && ms < kTuneMargin * first_ms) {
      best = i;
      best_ms = ms;
    }
    if (times_ms != nullptr) (*times_ms)[static_cast<size_t>(i)] = ms / static_cast<float>(repeats);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (scratch != nullptr) SHARDTRAIN_CUDA_CHECK(cudaFreeAsync(scratch, stream));
  return best;
}

}  // namespace shardtrain
