// The LoRA ops on CUDA against the CPU reference: column-block copies (scaled, written or added,
// between two matrices of different widths) and dropout, whose mask must be the CPU's element
// for element (backward regenerates it, and the CPU is the reference); and the adapters' products
// (lora_linear_forward / lora_linear_backward: cuBLASLt with the scale as alpha by default, the
// rank-wide kernels of cuda_lora_gemm.cu when opted in) against the CPU's linear_* on shapes that
// take every path: ranks 1..128, rows and columns off the tiles, odd strides (element loads),
// split reductions, bias, residual in place, accumulation.
// Also CublasLtGemm's split-K candidates for skinny keys: every candidate (the heuristic's and
// the split-K variants) against an fp64 reference, scaled, written and accumulated once; and a
// DISABLED_ timing of every LoRA product of Llama-3.2-1B r16 at 4096 tokens (CUDA graphs, so no
// launch latency): the heuristic's first, timed without split-K, timed with it.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/testing/cuda_gemm_products.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;
using SplitK = CublasLtGemm::SplitK;

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
// (cuBLASLt, the scale as the GEMM's alpha).
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
  const LoraCase cases[] = {{1030, 48, 2056}, {67, 5, 77},   {300, 128, 520}, {129, 1, 4104},
                            {1030, 3072, 48}, {67, 131, 5},  {200, 264, 128}, {2000, 72, 100},
                            {4100, 16, 64},   {1, 40, 2048}, {33, 2048, 16},  {5, 112, 9}};
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

// Every candidate of a skinny key (the heuristic's answers and the split-K variants) computes
// the product: scaled by alpha into a poisoned output, and added once into an accumulated f32
// output (the split parts are reduced once, with beta applied once); the chosen one through
// run() adds twice over two calls. A split-K variant must exist for these keys.
TEST_F(GemmProductTest, SplitKCandidatesOfSkinnyGemmsMatchTheFp64Reference) {
  const cudaStream_t stream = gpu_ref().stream();
  const ColumnMajorProduct products[] = {
      {"h = x A^T (S 48, I 2048)", true, false, 48, 1024, 2048, DType::kBF16},
      {"dh = g B (S 16, O 3072)", false, false, 16, 1024, 3072, DType::kBF16},
      {"dA = dh^T x (I 2048, S 16)", false, true, 2048, 16, 2048, DType::kF32},
      {"dB = g^T hs (S 48, O 768)", false, true, 48, 768, 2048, DType::kF32},
      {"odd: m 7, n 301, k 1032", true, false, 7, 301, 1032, DType::kBF16},
  };
  for (const ColumnMajorProduct& p : products) {
    SCOPED_TRACE(p.name);
    const ProductOperands operands = product_operands(p);
    const Tensor &a_g = operands.a, &b_g = operands.b, &d_g = operands.d;
    const std::vector<double>& product = operands.product;
    const double bound = operands.bound;
    GemmCall call = call_of(p, a_g.data(), b_g.data(), d_g.data());
    call.alpha = p.out == DType::kF32 ? 1.0f : 2.0f;  // the LoRA scale on h and d(h)
    ASSERT_TRUE(CublasLtGemm::skinny(call));

    CublasLtGemm split(stream, {true, SplitK::kSkinny, CublasLtGemm::kTuneCandidates}),
        plain(stream, {true, SplitK::kNone, CublasLtGemm::kTuneCandidates});
    poison(d_g);
    const CublasLtGemm::Choice chosen = split.choice(call);  // plans and times the key
    const size_t without = plain.choice(call).candidates;
    const auto split_count = [](const CublasLtGemm::Choice& c) {
      return std::count_if(c.splits.begin(), c.splits.end(), [](int s) { return s > 1; });
    };
    EXPECT_GT(split_count(chosen), split_count(plain.choice(call))) << "no split-K variant added";
    std::printf(
        "%-28s %zu candidates, %td split-K (without the variants: %zu, %td split-K); "
        "chosen #%zu: algo %d tile %d split-K %d reduction %u\n",
        p.name, chosen.candidates, split_count(chosen), without, split_count(plain.choice(call)),
        chosen.chosen, chosen.algo_id, chosen.tile_id, chosen.split_k, chosen.reduction);
    size_t split_ran = 0;
    for (size_t i = 0; i < chosen.candidates; ++i) {
      SCOPED_TRACE(::testing::Message() << "candidate " << i << " split-K " << chosen.splits[i]);
      poison(d_g);
      if (!split.run_candidate(call, i)) continue;
      split_ran += chosen.splits[i] > 1;
      EXPECT_LE(product_error(download(d_g), product, call.alpha, {}), bound) << "written";
    }
    EXPECT_GT(split_ran, 0u) << "every split-K candidate was refused";
    // In-place accumulation (its own key, its own candidates): every candidate adds once.
    GemmCall accumulate = call;
    accumulate.beta = 1.0f;
    const std::vector<float> before = random(p.m * p.n);
    if (p.out == DType::kF32) {
      const size_t accumulating = split.choice(accumulate).candidates;
      for (size_t i = 0; i < accumulating; ++i) {
        SCOPED_TRACE(::testing::Message() << "accumulating candidate " << i);
        upload(d_g, before);
        if (!split.run_candidate(accumulate, i)) continue;
        EXPECT_LE(product_error(download(d_g), product, call.alpha, before), bound) << "added";
      }
    }
    // The chosen one through run(), in place: once, then twice.
    upload(d_g, before);
    split.run(accumulate);
    const double once_bound = p.out == DType::kF32 ? 1e-5 : 1e-2;
    EXPECT_LE(product_error(download(d_g), product, call.alpha, before), once_bound) << "once";
    split.run(accumulate);
    EXPECT_LE(product_error(download(d_g), product, 2.0 * call.alpha, before), once_bound)
        << "twice";
  }
}

// Every LoRA product of Llama-3.2-1B r16 all-linear at 4096 tokens (one layer's Linears: packed
// q/k/v with S = 48, o, gate, up, down with S = 16), each as CudaOps calls it, in device time
// per call: the heuristic's first candidate, the fastest of its 8 without split-K, the fastest
// with the split-K variants (CublasLtGemm's split_k, off by default); the chosen configuration; the
// bytes it moves at the fastest time; and the per-step sums (x 16 layers). Run with
// --gtest_also_run_disabled_tests.
TEST_F(CudaOpsTest, DISABLED_LoraGemmTimesAtLlama1BShape) {
  constexpr int64_t kTokens = 4096, kLayers = 16;
  struct LinearShape {
    const char* name;
    int64_t in, out, slices_rank;
    int per_layer;
  };
  const LinearShape linears[] = {{"qkv", 2048, 3072, 48, 1},
                                 {"o", 2048, 2048, 16, 1},
                                 {"gate/up", 2048, 8192, 16, 2},
                                 {"down", 8192, 2048, 16, 1}};
  // Operands never exceed 4096 x 8192 bf16 (64 MiB) nor the output 64 MiB: three buffers.
  const size_t bytes = size_t{kTokens} * 8192 * 2;
  DeviceBuffer a_buffer(*gpu_, bytes), b_buffer(*gpu_, bytes), d_buffer(*gpu_, bytes);
  for (const DeviceBuffer* buffer : {&a_buffer, &b_buffer, &d_buffer}) {
    SHARDTRAIN_CUDA_CHECK(cudaMemset(buffer->data(), 0x3C, bytes));  // bf16 ~0.0115
  }
  SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CublasLtGemm heuristic(stream, {false, SplitK::kNone, 1}),
      tuned(stream, {true, SplitK::kNone, CublasLtGemm::kTuneCandidates}),
      split(stream, {true, SplitK::kSkinny, CublasLtGemm::kTuneCandidates});
  double step_us[3] = {0, 0, 0};
  std::printf("%-8s %-14s %5s %5s %5s | %9s %9s %9s | %-22s %4s | %7s\n", "linear", "product", "m",
              "n", "k", "heur us", "tuned us", "split us", "chosen (algo/tile/splitK)", "cand",
              "GB/s");
  for (const LinearShape& l : linears) {
    const int64_t N = kTokens, I = l.in, O = l.out, S = l.slices_rank;
    const ColumnMajorProduct products[] = {
        {"x A^T", true, false, S, N, I, DType::kBF16},
        {"hs B^T", true, false, O, N, S, DType::kBF16},
        {"dh = g B", false, false, S, N, O, DType::kBF16},
        {"dB = g^T hs", false, true, S, O, N, DType::kF32},
        {"dA = dh^T x", false, true, I, S, N, DType::kF32},
        {"dx = dh A", false, false, I, N, S, DType::kBF16},
    };
    for (const ColumnMajorProduct& p : products) {
      const GemmCall call = call_of(p, a_buffer.data(), b_buffer.data(), d_buffer.data());
      double us[3];
      CublasLtGemm* gemms[3] = {&heuristic, &tuned, &split};
      for (int v = 0; v < 3; ++v) {
        us[v] = graph_us(*gemms[v], call, stream);
        step_us[v] += us[v] * kLayers * l.per_layer;
      }
      const CublasLtGemm::Choice chosen = split.choice(call);
      const double moved =
          2.0 * (p.m * p.k + p.k * p.n) + static_cast<double>(dtype_size(p.out)) * p.m * p.n;
      const double best = std::min({us[0], us[1], us[2]});
      char config[64];
      std::snprintf(config, sizeof(config), "%d/%d/%d", chosen.algo_id, chosen.tile_id,
                    chosen.split_k);
      std::printf("%-8s %-14s %5lld %5lld %5lld | %9.1f %9.1f %9.1f | %-22s %4zu | %7.0f\n", l.name,
                  p.name, static_cast<long long>(p.m), static_cast<long long>(p.n),
                  static_cast<long long>(p.k), us[0], us[1], us[2], config, chosen.candidates,
                  moved / (best * 1e3));
    }
  }
  std::printf(
      "per step (x %lld layers): heuristic %.2f ms, tuned %.2f ms, tuned with split-K "
      "%.2f ms\n",
      static_cast<long long>(kLayers), step_us[0] / 1e3, step_us[1] / 1e3, step_us[2] / 1e3);
  EXPECT_LE(step_us[2], step_us[1] * 1.05) << "split-K candidates made the products slower";
  SHARDTRAIN_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace shardtrain
