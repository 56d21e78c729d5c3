// The CUDA expert permutation ops against the CPU reference at the shapes that choose their
// kernels (ops/cuda/cuda_moe.cu): the grouping over several passes of its blocks with a slot count
// that is not a multiple of the vector width and experts nobody chose; gather, combine and both
// backward ops on bf16 rows of widths the vector kernels take (2048, as Qwen3-30B-A3B's hidden
// size, and 40) and widths and dtypes only the scalar kernels take (bf16 width 12, f32 width 64).
#include <algorithm>
#include <random>

#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain::cuda_testing {
namespace {

// Each token's K distinct experts among the first `used` of E (the rest get no rows).
std::vector<int32_t> random_experts(int64_t N, int64_t K, int64_t used, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> all(static_cast<size_t>(used));
  for (int64_t e = 0; e < used; ++e) all[static_cast<size_t>(e)] = static_cast<int32_t>(e);
  std::vector<int32_t> expert;
  for (int64_t n = 0; n < N; ++n) {
    std::shuffle(all.begin(), all.end(), rng);
    expert.insert(expert.end(), all.begin(), all.begin() + K);
  }
  return expert;
}

class CudaMoePermuteTest : public CudaOpsTest {
 protected:
  // Dispatches on both backends and checks the GPU's permutation is exactly the CPU's.
  void dispatch(int64_t N, int64_t K, int64_t E, int64_t used, Pair& row) {
    const int64_t M = N * K;
    const Pair expert = ints(random_experts(N, K, used, 11u + static_cast<unsigned>(N)), {N, K});
    Pair source = ints(std::vector<int32_t>(M, -1), {M});
    row = ints(std::vector<int32_t>(M, -1), {N, K});
    const std::vector<int64_t> rows_cpu = cpu_->moe_dispatch(expert.cpu, E, source.cpu, row.cpu);
    const std::vector<int64_t> rows_gpu = gpu_->moe_dispatch(expert.gpu, E, source.gpu, row.gpu);
    EXPECT_EQ(rows_gpu, rows_cpu);
    // The experts nobody chose get no rows (a chosen one may get none too: 10 slots over 8).
    EXPECT_TRUE(
        std::all_of(rows_gpu.begin() + used, rows_gpu.end(), [](int64_t r) { return r == 0; }));
    std::vector<int32_t> source_gpu(M), row_gpu(M);
    gpu_->copy_to_host(source_gpu.data(), source.gpu);
    gpu_->copy_to_host(row_gpu.data(), row.gpu);
    EXPECT_TRUE(std::equal(source_gpu.begin(), source_gpu.end(), source.cpu.i32())) << N << K;
    EXPECT_TRUE(std::equal(row_gpu.begin(), row_gpu.end(), row.cpu.i32())) << N << K;
    source_ = source;
  }

  Pair source_;
};

TEST_F(CudaMoePermuteTest, GroupingOverSeveralPassesMatchesTheCpu) {
  Pair row;
  dispatch(3001, 3, 128, 100, row);  // 9003 slots: three passes of 4096, a ragged tail
  dispatch(5, 2, 8, 8, row);         // fewer slots than one thread's four
  dispatch(4096, 8, 128, 128, row);  // Qwen3-30B-A3B's micro-batch: 32768 slots
}

TEST_F(CudaMoePermuteTest, GatherAndCombineMatchTheCpuOnVectorAndScalarKernels) {
  constexpr int64_t N = 300, K = 8, E = 64;
  Pair row;
  dispatch(N, K, E, E, row);
  const Pair weight = random_input({N, K}, DType::kF32, 0, 1);
  struct Width {
    int64_t C;
    DType dtype;
  };
  for (const Width w : {Width{2048, DType::kBF16}, Width{40, DType::kBF16}, Width{12, DType::kBF16},
                        Width{64, DType::kF32}}) {
    SCOPED_TRACE(testing::Message() << "C " << w.C << " " << dtype_name(w.dtype));
    const double tolerance = w.dtype == DType::kF32 ? kF32Tolerance : kBf16Tolerance;
    const Pair x = random_input({N, w.C}, w.dtype);
    const Pair x_rows = output({N * K, w.C}, w.dtype);
    cpu_->moe_gather(x.cpu, source_.cpu, x_rows.cpu);
    gpu_->moe_gather(x.gpu, source_.gpu, x_rows.gpu);
    EXPECT_LE(error(x_rows), 0.0);  // a copy

    const Pair y = random_input({N * K, w.C}, w.dtype);
    const Pair residual = random_input({N, w.C}, w.dtype);
    const Pair out = output({N, w.C}, w.dtype);
    cpu_->moe_combine(y.cpu, row.cpu, weight.cpu, residual.cpu, out.cpu);
    gpu_->moe_combine(y.gpu, row.gpu, weight.gpu, residual.gpu, out.gpu);
    EXPECT_LE(error(out), tolerance);

    const Pair dout = random_input({N, w.C}, w.dtype);
    const Pair dy = output({N * K, w.C}, w.dtype);
    const Pair dweight = output({N, K}, DType::kF32);
    cpu_->moe_combine_backward(dout.cpu, y.cpu, row.cpu, weight.cpu, dy.cpu, dweight.cpu);
    gpu_->moe_combine_backward(dout.gpu, y.gpu, row.gpu, weight.gpu, dy.gpu, dweight.gpu);
    EXPECT_LE(error(dy), tolerance);
    EXPECT_LE(error(dweight), 1e-4);

    for (bool accumulate : {false, true}) {
      const Pair dx = accumulate ? random_input({N, w.C}, w.dtype) : output({N, w.C}, w.dtype);
      cpu_->moe_gather_backward(dy.cpu, row.cpu, dx.cpu, accumulate);
      gpu_->moe_gather_backward(dy.gpu, row.gpu, dx.gpu, accumulate);
      EXPECT_LE(error(dx), tolerance) << accumulate;
    }
  }
}

}  // namespace
}  // namespace shardtrain::cuda_testing
