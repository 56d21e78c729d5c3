// CUDA attention under a mask it does not implement yet: a sliding window that drops keys is
// refused with one line saying so and what to do, forward and backward; a window that covers
// the whole sequence is the causal mask and runs, equal to the CPU reference.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "ops/attention_mask.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain::cuda_testing {
namespace {

class CudaAttentionMaskTest : public CudaOpsTest {};

TEST_F(CudaAttentionMaskTest, SlidingWindowIsRefusedWithOneLine) {
  const int64_t B = 1, T = 64, H = 2, D = 64;
  Pair q = random_input({B, T, H, D}), k = random_input({B, T, H, D}),
       v = random_input({B, T, H, D});
  Pair out = output({B, T, H, D}), lse = output({B, H, T}, DType::kF32);
  const float scale = 0.125f;
  const AttentionMask window = AttentionMask::sliding_window(16, T);
  try {
    gpu_->attention_forward(q.gpu, k.gpu, v.gpu, scale, out.gpu, lse.gpu, window);
    ADD_FAILURE() << "no Error for a sliding window";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("sliding-window attention (window 16)"), std::string::npos) << message;
    EXPECT_NE(message.find("HINT"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  Pair dq = output({B, T, H, D}), dk = output({B, T, H, D}), dv = output({B, T, H, D});
  EXPECT_THROW(gpu_->attention_backward(out.gpu, q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, scale,
                                        dq.gpu, dk.gpu, dv.gpu, window),
               Error);
  // A window as long as the sequence masks nothing: it runs, as plain causal attention does.
  const AttentionMask covering = AttentionMask::sliding_window(T, T);
  gpu_->attention_forward(q.gpu, k.gpu, v.gpu, scale, out.gpu, lse.gpu, covering);
  cpu_->attention_forward(q.cpu, k.cpu, v.cpu, scale, out.cpu, lse.cpu, covering);
  EXPECT_LT(error(out), kBf16Tolerance);
}

}  // namespace
}  // namespace shardtrain::cuda_testing
