// The LoRA ops on CUDA against the CPU reference: column-block copies (scaled, written or added,
// between two matrices of different widths) and dropout, whose mask must be the CPU's element
// for element (backward regenerates it, and the CPU is the reference).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shardtrain
