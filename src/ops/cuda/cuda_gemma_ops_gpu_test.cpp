// The ops Gemma 3 added, CUDA (bf16) against the fp32 CPU reference: RMSNorm scaled by
// 1 + weight (forward, backward with and without accumulation, dx over dout, a bf16 dweight),
// GeGLU with the tanh GELU (scalar and 16-byte vector kernels, in place), logit soft-capping
// (forward, backward, in place) and the in-place scale. Skips without a GPU (the fixture).
#include <gtest/gtest.h>

#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;

TEST_F(CudaOpsTest, RmsNorm1p) {
  struct Case {
    int64_t rows, channels;
  };
  // Gemma-3-1B's hidden (1152) and head_dim (256, the q/k norms), an odd width, many rows.
  for (const auto [rows, channels] :
       {Case{67, 1152}, Case{67 * 4, 256}, Case{67, 77}, Case{5000, 640}}) {
    Pair x = random_input({rows, channels}, DType::kBF16, -2, 2);
    Pair weight = random_input({channels}, DType::kBF16, -0.5f, 0.5f);  // offsets from 1
    Pair out = output({rows, channels});
    Pair rstd = output({rows}, DType::kF32);
    cpu_->rmsnorm1p_forward(x.cpu, weight.cpu, 1e-6f, out.cpu, rstd.cpu);
    gpu_->rmsnorm1p_forward(x.gpu, weight.gpu, 1e-6f, out.gpu, rstd.gpu);
    EXPECT_BF16_CLOSE(out) << " channels " << channels;
    EXPECT_F32_CLOSE(rstd);
    for (const bool accumulate : {false, true}) {
      Pair dout = random_input({rows, channels});
      Pair dx = accumulate ? random_input({rows, channels}) : output({rows, channels});
      Pair dweight = random_input({channels}, DType::kF32);
      cpu_->rmsnorm1p_backward(dout.cpu, x.cpu, weight.cpu, rstd.cpu, dx.cpu, dweight.cpu,
                               accumulate, accumulate);
      gpu_->rmsnorm1p_backward(dout.gpu, x.gpu, weight.gpu, rstd.gpu, dx.gpu, dweight.gpu,
                               accumulate, accumulate);
      EXPECT_BF16_CLOSE(dx) << " channels " << channels << " accumulate " << accumulate;
      EXPECT_LE(error(dweight), 1e-4) << "channels " << channels << " rows " << rows;
    }
    Pair dout = random_input({rows, channels});
    Pair dweight = random_input({channels}, DType::kBF16);
    cpu_->rmsnorm1p_backward(dout.cpu, x.cpu, weight.cpu, rstd.cpu, dout.cpu, dweight.cpu, false,
                             true);
    gpu_->rmsnorm1p_backward(dout.gpu, x.gpu, weight.gpu, rstd.gpu, dout.gpu, dweight.gpu, false,
                             true);
    EXPECT_BF16_CLOSE(dout);
    EXPECT_BF16_CLOSE(dweight);
  }
}

TEST_F(CudaOpsTest, GeGlu) {
  for (const Shape& shape : {Shape{33, 250}, Shape{32, 256}}) {  // scalar, then vector kernels
    Pair gate = random_input(shape, DType::kBF16, -4, 4), up = random_input(shape);
    Pair out = output(shape);
    cpu_->geglu_forward(gate.cpu, up.cpu, out.cpu);
    gpu_->geglu_forward(gate.gpu, up.gpu, out.gpu);
    EXPECT_BF16_CLOSE(out);
    Pair dout = random_input(shape);
    Pair dgate = output(shape), dup = output(shape);
    cpu_->geglu_backward(dout.cpu, gate.cpu, up.cpu, dgate.cpu, dup.cpu);
    gpu_->geglu_backward(dout.gpu, gate.gpu, up.gpu, dgate.gpu, dup.gpu);
    EXPECT_BF16_CLOSE(dgate);
    EXPECT_BF16_CLOSE(dup);
    cpu_->geglu_backward(dout.cpu, gate.cpu, up.cpu, gate.cpu, up.cpu);
    gpu_->geglu_backward(dout.gpu, gate.gpu, up.gpu, gate.gpu, up.gpu);
    EXPECT_BF16_CLOSE(gate);
    EXPECT_BF16_CLOSE(up);
  }
}

TEST_F(CudaOpsTest, SoftcapAndScale) {
  const Shape shape{37, 1000};
  Pair x = random_input(shape, DType::kBF16, -80, 80);  // beyond the cap: tanh saturates
  Pair out = output(shape);
  cpu_->softcap_forward(x.cpu, 30.0f, out.cpu);
  gpu_->softcap_forward(x.gpu, 30.0f, out.gpu);
  EXPECT_BF16_CLOSE(out);
  Pair dout = random_input(shape);
  Pair dx = output(shape);
  cpu_->softcap_backward(dout.cpu, x.cpu, 30.0f, dx.cpu);
  gpu_->softcap_backward(dout.gpu, x.gpu, 30.0f, dx.gpu);
  EXPECT_BF16_CLOSE(dx);
  cpu_->softcap_backward(dout.cpu, x.cpu, 30.0f, x.cpu);  // dx over the input, as the head does
  gpu_->softcap_backward(dout.gpu, x.gpu, 30.0f, x.gpu);
  EXPECT_BF16_CLOSE(x);
  cpu_->scale(dout.cpu, 33.75f);
  gpu_->scale(dout.gpu, 33.75f);
  EXPECT_BF16_CLOSE(dout);
}

}  // namespace
}  // namespace shardtrain
