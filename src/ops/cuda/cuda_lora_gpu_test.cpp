// The LoRA ops on CUDA against the CPU reference: column-block copies (scaled, written or added,
// between two matrices of different widths) and dropout, whose mask must be the CPU's element
// for element (backward regenerates it, and the CPU is the reference); and the adapters' products
// (lora_linear_forward / lora_linear_backward: the rank-wide kernels of cuda_lora_gemm.cu) against
// the CPU's linear_* on shapes that take every path: ranks 1..128, rows and columns off the
// tiles, odd strides (element loads), split reductions, bias, residual in place, accumulation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;

TEST_F(CudaOpsTest, LoraCopyColumnsAndDropout) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const double tolerance = dtype == DType::kF32 ? kF32Tolerance : kBf16Tolerance;
    Pair src = random_input({37, 20}, dtype);
    Pair dst = random_input({37, 12}, dtype);  // columns [3, 8) get 0.5 x src's [7, 12) added
    cpu_->copy_columns(src.cpu, 7, dst.cpu, 3, 5, 0.5f, true);
    gpu_->copy_columns(src.gpu, 7, dst.gpu, 3, 5, 0.5f, true);
    EXPECT_LE(error(dst), tolerance);
    Pair block = output({37, 5}, dtype);
    cpu_->copy_columns(src.cpu, 2, block.cpu, 0, 5, -2.0f, false);
    gpu_->copy_columns(src.gpu, 2, block.gpu, 0, 5, -2.0f, false);
    EXPECT_LE(error(block), tolerance);

    Pair x = random_input({41, 33}, dtype, 0.5f, 1.5f);  // never zero: a zero marks a drop
    Pair dropped = output({41, 33}, dtype);
    cpu_->dropout(x.cpu, dropped.cpu, 0.3f, 77, false);
    gpu_->dropout(x.gpu, dropped.gpu, 0.3f, 77, false);
    EXPECT_LE(error(dropped), tolerance);
    const std::vector<float> got = download(dropped.gpu);
    const std::vector<float> want = host_values(dropped.cpu);
    int zeros = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i] == 0.0f, want[i] == 0.0f) << "element " << i << ": another mask";
      zeros += want[i] == 0.0f;
    }
    EXPECT_GT(zeros, 41 * 33 / 5);
    Pair sum = random_input({41, 33}, dtype);
    cpu_->dropout(x.cpu, sum.cpu, 0.3f, 77, true);
    gpu_->dropout(x.gpu, sum.gpu, 0.3f, 77, true);
    EXPECT_LE(error(sum), tolerance);
  }
}

struct LoraCase {
  int64_t N, O, I;
};

// Both paths: the rank-wide kernels (SHARDTRAIN_LORA_KERNELS=1, opt-in) and the default
// (linear_* and a scaling pass).
class LoraLinearTest : public CudaOpsTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    setenv("SHARDTRAIN_LORA_KERNELS", GetParam(), 1);
  }
  void TearDown() override { unsetenv("SHARDTRAIN_LORA_KERNELS"); }
};
INSTANTIATE_TEST_SUITE_P(KernelsOnOff, LoraLinearTest, ::testing::Values("1", "0"));

TEST_P(LoraLinearTest, Products) {
  // (O, I): O rank-wide is an A (x @ A^T, d(h) @ A, d(A)); I rank-wide is a B (h @ B^T,
  // d(out) @ B, d(B) as the transpose of the reduction).
  const LoraCase cases[] = {{1030, 48, 2056}, {67, 5, 77},    {300, 128, 520}, {129, 1, 4104},
                            {1030, 3072, 48}, {67, 131, 5},   {200, 264, 128}, {2000, 72, 100},
                            {4100, 16, 64},   {1, 40, 2048},  {33, 2048, 16},  {5, 112, 9}};
  for (const LoraCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "N " << c.N << " O " << c.O << " I " << c.I);
    Pair x = random_input({c.N, c.I});
    Pair w = random_input({c.O, c.I});
    // forward, scaled
    Pair out = output({c.N, c.O});
    cpu_->lora_linear_forward(x.cpu, w.cpu, 0.75f, Tensor(), Tensor(), out.cpu);
    gpu_->lora_linear_forward(x.gpu, w.gpu, 0.75f, Tensor(), Tensor(), out.gpu);
    EXPECT_BF16_CLOSE(out);
    // forward + bias; forward + residual, in place
    Pair bias = random_input({c.O});
    Pair biased = output({c.N, c.O});
    cpu_->lora_linear_forward(x.cpu, w.cpu, 1.0f, bias.cpu, Tensor(), biased.cpu);
    gpu_->lora_linear_forward(x.gpu, w.gpu, 1.0f, bias.gpu, Tensor(), biased.gpu);
    EXPECT_BF16_CLOSE(biased);
    Pair residual = random_input({c.N, c.O});
    cpu_->lora_linear_forward(x.cpu, w.cpu, 1.0f, Tensor(), residual.cpu, residual.cpu);
    gpu_->lora_linear_forward(x.gpu, w.gpu, 1.0f, Tensor(), residual.gpu, residual.gpu);
    EXPECT_BF16_CLOSE(residual);

    // backward: dx scaled and written, dweight (f32) written; then dx and dweight (f32, then
    // bf16) added to.
    Pair dout = random_input({c.N, c.O});
    Pair dx = output({c.N, c.I});
    Pair dw = output({c.O, c.I}, DType::kF32);
    cpu_->lora_linear_backward(dout.cpu, x.cpu, w.cpu, 0.5f, dx.cpu, dw.cpu, false, false);
    gpu_->lora_linear_backward(dout.gpu, x.gpu, w.gpu, 0.5f, dx.gpu, dw.gpu, false, false);
    EXPECT_BF16_CLOSE(dx);
    EXPECT_BF16_CLOSE(dw);
    Pair dx_sum = random_input({c.N, c.I});
    Pair dw_sum = random_input({c.O, c.I}, DType::kF32);
    cpu_->lora_linear_backward(dout.cpu, x.cpu, w.cpu, 1.0f, dx_sum.cpu, dw_sum.cpu, true, true);
    gpu_->lora_linear_backward(dout.gpu, x.gpu, w.gpu, 1.0f, dx_sum.gpu, dw_sum.gpu, true, true);
    EXPECT_BF16_CLOSE(dx_sum);
    EXPECT_BF16_CLOSE(dw_sum);
    Pair dw_bf16 = random_input({c.O, c.I});
    cpu_->lora_linear_backward(dout.cpu, x.cpu, w.cpu, 1.0f, Tensor(), dw_bf16.cpu, false, true);
    gpu_->lora_linear_backward(dout.gpu, x.gpu, w.gpu, 1.0f, Tensor(), dw_bf16.gpu, false, true);
    EXPECT_BF16_CLOSE(dw_bf16);
  }
}

// Every padded width of the kernels (ranks 1..128): ranks that are not a multiple of 8 give odd
// row strides, which take the element loads; the others the 16-byte loads.
TEST_P(LoraLinearTest, EveryRank) {
  for (int64_t rank : {1, 2, 3, 7, 8, 15, 16, 17, 24, 31, 33, 47, 64, 65, 96, 127, 128}) {
    SCOPED_TRACE(::testing::Message() << "rank " << rank);
    const int64_t N = 97, I = 136, O = 72;
    Pair x = random_input({N, I});
    Pair a = random_input({rank, I});
    Pair h = output({N, rank});
    cpu_->lora_linear_forward(x.cpu, a.cpu, 2.0f, Tensor(), Tensor(), h.cpu);
    gpu_->lora_linear_forward(x.gpu, a.gpu, 2.0f, Tensor(), Tensor(), h.gpu);
    EXPECT_BF16_CLOSE(h);
    Pair b = random_input({O, rank});
    Pair out = output({N, O});
    cpu_->lora_linear_forward(h.cpu, b.cpu, 1.0f, Tensor(), Tensor(), out.cpu);
    gpu_->lora_linear_forward(h.gpu, b.gpu, 1.0f, Tensor(), Tensor(), out.gpu);
    EXPECT_BF16_CLOSE(out);
    Pair g = random_input({N, O});
    Pair dh = output({N, rank});
    Pair db = output({O, rank}, DType::kF32);
    cpu_->lora_linear_backward(g.cpu, h.cpu, b.cpu, 2.0f, dh.cpu, db.cpu, false, false);
    gpu_->lora_linear_backward(g.gpu, h.gpu, b.gpu, 2.0f, dh.gpu, db.gpu, false, false);
    EXPECT_BF16_CLOSE(dh);
    EXPECT_BF16_CLOSE(db);
    Pair dx = output({N, I});
    Pair da = output({rank, I}, DType::kF32);
    cpu_->lora_linear_backward(dh.cpu, x.cpu, a.cpu, 1.0f, dx.cpu, da.cpu, false, false);
    gpu_->lora_linear_backward(dh.gpu, x.gpu, a.gpu, 1.0f, dx.gpu, da.gpu, false, false);
    EXPECT_BF16_CLOSE(dx);
    EXPECT_BF16_CLOSE(da);
  }
}

}  // namespace
}  // namespace shardtrain
