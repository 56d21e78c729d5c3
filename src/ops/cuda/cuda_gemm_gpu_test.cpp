// CublasLtGemm's candidate choice at the projections' shapes: with split-K weighed for every key
// (CublasLtGemm::SplitK::kEvery), each candidate of a weight-gradient and a forward product still
// computes the product (against fp64, written and accumulated); and a DISABLED_ timing of every
// projection GEMM of Qwen2.5-1.5B and Llama-3.2-1B at 8192 tokens, in CUDA graphs, under four
// choices: the heuristic's first, the fastest of its top 8 (the default), of its top 32, and of
// the top 8 with split-K variants. The projections whose weight gradient has fewer output tiles
// than the GPU has SMs (q/k/v and o at hidden 1536-2048: 512-589 TFLOP/s in the model, against
// ~750 for the MLP's) are where a split of the token reduction or another configuration could
// help. Run with --gtest_also_run_disabled_tests. Also: plans made for fewer SMs than the device
// has (SHARDTRAIN_ASIDE_GEMM_SMS) against the same reference.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/testing/cuda_gemm_products.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;
using SplitK = CublasLtGemm::SplitK;

TEST_F(GemmProductTest, SplitKCandidatesOfProjectionsMatchTheFp64Reference) {
  const cudaStream_t stream = gpu_ref().stream();
  const ColumnMajorProduct products[] = {
      // dW^T (I x O) = x^T (I x N) op_T(dout^T): a weight gradient over 4096 tokens
      {"dW (I 384, O 320, N 4096)", false, true, 384, 320, 4096, DType::kF32},
      // out^T (O x N) = op_T(W) x^T: a forward product with a deep inner dimension
      {"forward (O 320, N 512, I 2048)", true, false, 320, 512, 2048, DType::kBF16},
  };
  for (const ColumnMajorProduct& p : products) {
    SCOPED_TRACE(p.name);
    // Wider than kSkinnyWidth on both output sides: only SplitK::kEvery splits these.
    ASSERT_GT(std::min(p.m, p.n), CublasLtGemm::kSkinnyWidth);
    const ProductOperands operands = product_operands(p);
    const Tensor &a_g = operands.a, &b_g = operands.b, &d_g = operands.d;
    const std::vector<double>& product = operands.product;
    const double bound = operands.bound;
    const GemmCall call = call_of(p, a_g.data(), b_g.data(), d_g.data());

    CublasLtGemm every(stream, CublasLtGemm::Tuning{true, SplitK::kEvery, 8});
    const CublasLtGemm::Choice chosen = every.choice(call);
    const auto split =
        std::count_if(chosen.splits.begin(), chosen.splits.end(), [](int s) { return s > 1; });
    std::printf("%-32s %zu candidates, %td split-K; chosen #%zu: algo %d tile %d split-K %d\n",
                p.name, chosen.candidates, split, chosen.chosen, chosen.algo_id, chosen.tile_id,
                chosen.split_k);
    EXPECT_GT(split, 0) << "no split-K variant weighed";
    for (size_t i = 0; i < chosen.candidates; ++i) {
      SCOPED_TRACE(::testing::Message() << "candidate " << i << " split-K " << chosen.splits[i]);
      poison(d_g);
      if (!every.run_candidate(call, i)) continue;
      EXPECT_LE(product_error(download(d_g), product, 1.0, {}), bound) << "written";
    }
    if (p.out != DType::kF32) continue;
    // The weight gradient of a later micro-batch adds in place (its own key and candidates).
    GemmCall accumulate = call;
    accumulate.beta = 1.0f;
    const std::vector<float> before = random(p.m * p.n);
    const CublasLtGemm::Choice adding = every.choice(accumulate);
    for (size_t i = 0; i < adding.candidates; ++i) {
      SCOPED_TRACE(::testing::Message()
                   << "accumulating candidate " << i << " split-K " << adding.splits[i]);
      upload(d_g, before);
      if (!every.run_candidate(accumulate, i)) continue;
      EXPECT_LE(product_error(download(d_g), product, 1.0, before), bound) << "added";
    }
    upload(d_g, before);
    every.run(accumulate);
    every.run(accumulate);
    EXPECT_LE(product_error(download(d_g), product, 2.0, before), bound) << "run twice";
  }
}

// SHARDTRAIN_ASIDE_GEMM_SMS's plans: a GEMM planned for fewer SMs than the device has (cuBLASLt's
// SM count target; its own plan key, tuned apart) still computes the product, and going back to
// the whole device (target 0) runs the first plan again.
TEST_F(GemmProductTest, SmCountTargetedPlansMatchTheFp64Reference) {
  const cudaStream_t stream = gpu_ref().stream();
  int device_sms = 0;
  SHARDTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, 0));
  const ColumnMajorProduct products[] = {
      {"dW (I 384, O 320, N 4096)", false, true, 384, 320, 4096, DType::kF32},
      {"forward (O 2048, N 1024, I 2048)", true, false, 2048, 1024, 2048, DType::kBF16},
  };
  for (const ColumnMajorProduct& p : products) {
    SCOPED_TRACE(p.name);
    const ProductOperands operands = product_operands(p);
    const GemmCall call = call_of(p, operands.a.data(), operands.b.data(), operands.d.data());
    CublasLtGemm gemm(stream, CublasLtGemm::Tuning{});
    for (const int fewer : {0, 16, 32, 0}) {
      SCOPED_TRACE(::testing::Message() << fewer << " SMs fewer");
      gemm.set_sm_count_target(fewer == 0 ? 0 : std::max(device_sms - fewer, 1));
      poison(operands.d);
      gemm.run(call);
      EXPECT_LE(product_error(download(operands.d), operands.product, 1.0, {}), operands.bound);
    }
  }
}

TEST_F(CudaOpsTest, DISABLED_ProjectionGemmChoicesAtTheBenchShapes) {
  constexpr int64_t kTokens = 8192;
  struct Linear {
    const char* name;
    int64_t in, out;
    int per_layer;
  };
  struct Model {
    const char* name;
    int layers;
    std::vector<Linear> linears;
  };
  const Model models[] = {
      {"qwen2.5-1.5b",
       28,
       {{"qkv", 1536, 2048, 1},
        {"o", 1536, 1536, 1},
        {"gate|up", 1536, 8960, 2},
        {"down", 8960, 1536, 1}}},
      {"llama3.2-1b",
       16,
       {{"qkv", 2048, 3072, 1},
        {"o", 2048, 2048, 1},
        {"gate|up", 2048, 8192, 2},
        {"down", 8192, 2048, 1}}},
  };
  const size_t bytes = size_t{kTokens} * 8960 * 4;  // the largest operand or output
  DeviceBuffer a_buffer(*gpu_, bytes), b_buffer(*gpu_, bytes), d_buffer(*gpu_, bytes);
  for (const DeviceBuffer* buffer : {&a_buffer, &b_buffer, &d_buffer}) {
    SHARDTRAIN_CUDA_CHECK(cudaMemset(buffer->data(), 0x3C, bytes));  // bf16 ~0.0115
  }
  SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  constexpr int kChoices = 4;
  const char* const choice_names[kChoices] = {"heuristic", "top 8", "top 32", "top 8+splitK"};
  CublasLtGemm heuristic(stream, CublasLtGemm::Tuning{false, SplitK::kNone, 1}),
      top8(stream, CublasLtGemm::Tuning{true, SplitK::kNone, 8}),
      top32(stream, CublasLtGemm::Tuning{true, SplitK::kNone, 32}),
      split(stream, CublasLtGemm::Tuning{true, SplitK::kEvery, 8});
  CublasLtGemm* gemms[kChoices] = {&heuristic, &top8, &top32, &split};
  for (const Model& model : models) {
    double step_us[kChoices] = {};
    std::printf("%s, %lld tokens: us a call (TFLOP/s) for %s / %s / %s / %s; chosen of the best\n",
                model.name, static_cast<long long>(kTokens), choice_names[0], choice_names[1],
                choice_names[2], choice_names[3]);
    for (const Linear& l : model.linears) {
      const int64_t N = kTokens, I = l.in, O = l.out;
      const ColumnMajorProduct products[] = {
          {"forward", true, false, O, N, I, DType::kBF16},
          {"dx", false, false, I, N, O, DType::kBF16},
          {"dW", false, true, I, O, N, DType::kF32},
      };
      for (const ColumnMajorProduct& p : products) {
        const GemmCall call = call_of(p, a_buffer.data(), b_buffer.data(), d_buffer.data());
        const double flops = 2.0 * p.m * p.n * p.k;
        double us[kChoices];
        int best = 0;
        for (int v = 0; v < kChoices; ++v) {
          us[v] = graph_us(*gemms[v], call, stream);
          step_us[v] += us[v] * model.layers * l.per_layer;
          if (us[v] < us[best]) best = v;
        }
        const CublasLtGemm::Choice chosen = gemms[best]->choice(call);
        std::printf("  %-8s %-7s m %5lld n %5lld k %5lld |", l.name, p.name,
                    static_cast<long long>(p.m), static_cast<long long>(p.n),
                    static_cast<long long>(p.k));
        for (int v = 0; v < kChoices; ++v) {
          std::printf(" %7.1f (%3.0f)", us[v], flops / us[v] * 1e-6);
        }
        std::printf(" | best %s: algo %d tile %d split-K %d of %zu\n", choice_names[best],
                    chosen.algo_id, chosen.tile_id, chosen.split_k, chosen.candidates);
      }
    }
    std::printf("%s per step (x %d layers):", model.name, model.layers);
    for (int v = 0; v < kChoices; ++v)
      std::printf(" %s %.2f ms", choice_names[v], step_us[v] / 1e3);
    std::printf("\n");
  }
  SHARDTRAIN_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace shardtrain
