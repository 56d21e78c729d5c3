// The CUDA attention kernels under every mask of ops/attention_mask.h (a sliding window, packed
// documents, both) against the CpuOps fp32 reference, forward and backward: every row of the
// dispatch table (cuda_dispatch.h) — the warp-specialised and cp.async wgmma kernels (Hopper),
// mma.sync with 8 and 4 warps (forced with ScopedKernelOverrides), the single-stage mma.sync
// backward (under an L4's limits), the SIMT kernels (head dims other than 64 / 128) — with the
// whole GQA group in a backward block and with one head a block. Documents of 1, 17, 200 and
// 3000 tokens, documents crossing tile boundaries, runs of one-token documents; head counts and
// GQA ratios of the supported models. Gemma's logit soft cap (AttentionMask::logit_softcap) on
// the mma.sync rows it runs on (head dims 64, 128, 256; the wgmma rows leave it to them) and the
// SIMT kernels, causal, with a window and with documents, caps that bite hard and that barely do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "ops/attention_mask.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain::cuda_testing {
namespace {

struct MaskCase {
  const char* name;
  AttentionCase shape;
  int64_t window;  // 0: none
  // Per sequence, the lengths of its documents (summing to seq); empty: one document.
  std::vector<std::vector<int64_t>> documents;
  float softcap = 0;  // attn_logit_softcapping; 0: none
};

// document_start[b][t] of the case's documents (zeros where a sequence is one document).
std::vector<int32_t> document_starts(const MaskCase& c) {
  const int64_t T = c.shape.seq;
  std::vector<int32_t> starts(static_cast<size_t>(c.shape.batch * T), 0);
  for (size_t b = 0; b < c.documents.size(); ++b) {
    const std::vector<int64_t>& lengths = c.documents[b];
    EXPECT_EQ(std::accumulate(lengths.begin(), lengths.end(), int64_t{0}), T) << c.name;
    int64_t position = 0;
    for (const int64_t length : lengths) {
      for (int64_t t = position; t < position + length && t < T; ++t) {
        starts[b * T + t] = static_cast<int32_t>(position);
      }
      position += length;
    }
  }
  return starts;
}

// n documents of one token each, then one of the rest.
std::vector<int64_t> one_token_documents(int64_t n, int64_t seq) {
  std::vector<int64_t> lengths(static_cast<size_t>(n), 1);
  lengths.push_back(seq - n);
  return lengths;
}

// The kernels' shape of a case (its soft cap included).
cuda_kernels::AttentionShape kernel_shape(const MaskCase& c) {
  cuda_kernels::AttentionShape s{
      static_cast<int>(c.shape.batch), static_cast<int>(c.shape.seq),
      static_cast<int>(c.shape.heads), static_cast<int>(c.shape.kv_heads),
      static_cast<int>(c.shape.head_dim)};
  s.logit_softcap = c.softcap;
  return s;
}

// Makes the dispatcher see GPU `kind`'s limits (device_limits_preset); false, saying so, when
// that GPU has more shared memory than the one present (its rows could not run here).
bool use_limits_of(const char* kind, const cuda_kernels::DeviceLimits& present) {
  const std::optional<cuda_kernels::DeviceLimits> limits = cuda_kernels::device_limits_preset(kind);
  EXPECT_TRUE(limits.has_value()) << kind;
  if (!limits || limits->shared_per_block_optin > present.shared_per_block_optin) {
    std::printf("%s: skipped, more shared memory than this GPU has\n", kind);
    return false;
  }
  cuda_kernels::set_device_limits_override(limits);
  return true;
}

class CudaAttentionMaskTest : public CudaOpsTest {
 protected:
  struct Run {
    Pair q, k, v, dout, out, lse, dq, dk, dv, starts;
    AttentionMask cpu_mask, gpu_mask;
    float scale = 1;
  };

  // Random inputs of case `c`, the CPU reference forward and backward under its mask.
  Run prepare(const MaskCase& c) {
    const AttentionCase& s = c.shape;
    const Shape q_shape{s.batch, s.seq, s.heads, s.head_dim};
    const Shape kv_shape{s.batch, s.seq, s.kv_heads, s.head_dim};
    Run r;
    r.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    r.q = random_input(q_shape, DType::kBF16, -2, 2);
    r.k = random_input(kv_shape, DType::kBF16, -2, 2);
    r.v = random_input(kv_shape);
    r.dout = random_input(q_shape);
    r.out = output(q_shape);
    r.lse = output({s.batch, s.heads, s.seq}, DType::kF32);
    r.dq = output(q_shape);
    r.dk = output(kv_shape);
    r.dv = output(kv_shape);
    r.cpu_mask.window = r.gpu_mask.window = c.window;
    r.cpu_mask.logit_softcap = r.gpu_mask.logit_softcap = c.softcap;
    if (!c.documents.empty()) {
      r.starts = ints(document_starts(c), {s.batch, s.seq});
      r.cpu_mask.document_start_BT = r.starts.cpu;
      r.gpu_mask.document_start_BT = r.starts.gpu;
    }
    cpu_->attention_forward(r.q.cpu, r.k.cpu, r.v.cpu, r.scale, r.out.cpu, r.lse.cpu, r.cpu_mask);
    cpu_->attention_backward(r.dout.cpu, r.q.cpu, r.k.cpu, r.v.cpu, r.out.cpu, r.lse.cpu, r.scale,
                             r.dq.cpu, r.dk.cpu, r.dv.cpu, r.cpu_mask);
    return r;
  }

  // The GPU forward of `kernel` (attention_kernel names) into poisoned outputs, against the CPU.
  // The backward then starts from this kernel's output and lse.
  void expect_forward(Run& r, const std::string& kernel) {
    poison(r.out.gpu);
    poison(r.lse.gpu);
    {
      const ScopedKernelOverrides forced(attention_kernel(kernel));
      gpu_->attention_forward(r.q.gpu, r.k.gpu, r.v.gpu, r.scale, r.out.gpu, r.lse.gpu,
                              r.gpu_mask);
    }
    EXPECT_BF16_CLOSE(r.out) << "forward kernel " << kernel;
    EXPECT_LE(error(r.lse), 1e-5) << "forward kernel " << kernel;
  }

  // The GPU backward of `kernel` with `heads_per_block` query heads a block (0: the launcher's
  // choice) into poisoned outputs, against the CPU gradients.
  void expect_backward(Run& r, const std::string& kernel, int heads_per_block) {
    poison(r.dq.gpu);
    poison(r.dk.gpu);
    poison(r.dv.gpu);
    {
      KernelOverrides overrides = attention_kernel(kernel);
      overrides.attention_backward_heads_per_block = heads_per_block;
      const ScopedKernelOverrides forced(overrides);
      gpu_->attention_backward(r.dout.gpu, r.q.gpu, r.k.gpu, r.v.gpu, r.out.gpu, r.lse.gpu,
                               r.scale, r.dq.gpu, r.dk.gpu, r.dv.gpu, r.gpu_mask);
    }
    EXPECT_BF16_CLOSE(r.dq) << "backward kernel " << kernel << ", heads a block "
                            << heads_per_block;
    EXPECT_BF16_CLOSE(r.dk) << "backward kernel " << kernel << ", heads a block "
                            << heads_per_block;
    EXPECT_BF16_CLOSE(r.dv) << "backward kernel " << kernel << ", heads a block "
                            << heads_per_block;
  }

  // The kernels the dispatch table picks for `c` (under whatever limits are in force): forward,
  // and backward with the launcher's and one query head a block.
  void expect_default_kernels_match(const MaskCase& c) {
    Run r = prepare(c);
    expect_forward(r, "default");
    expect_backward(r, "default", 0);
    expect_backward(r, "default", 1);
  }

  // Every kernel of the table this GPU and build run, forward then backward (the SIMT kernels,
  // at head dims other than 64 and 128, ignore the overrides and run each time).
  void expect_every_kernel(const MaskCase& c) {
    SCOPED_TRACE(c.name);
    Run r = prepare(c);
    const int group = static_cast<int>(c.shape.heads / c.shape.kv_heads);
    {
      // The Hopper backward's dQ through the consumers' atomics (its writer is the default).
      const shardtrain::testing::ScopedEnv dq_atomics("SHARDTRAIN_ATTENTION_DQ_WRITER", "0");
      for (const char* kernel : {"default", "wgmma", "8", "4"}) {
        expect_forward(r, kernel);
        expect_backward(r, kernel, group);
        if (group > 1) expect_backward(r, kernel, 1);  // dK, dV through fp32 atomics
      }
    }
    // The Hopper backward's dQ writer (ops/ops_switches.h), where the default is that kernel.
    if (!dq_writer_tested()) return;
    const shardtrain::testing::ScopedEnv dq_writer("SHARDTRAIN_ATTENTION_DQ_WRITER", "1");
    expect_backward(r, "default", group);
    if (group > 1) expect_backward(r, "default", 1);
  }
};

class CudaAttentionMaskCaseTest : public CudaAttentionMaskTest,
                                  public ::testing::WithParamInterface<MaskCase> {};

TEST_P(CudaAttentionMaskCaseTest, EveryKernelMatchesTheCpu) { expect_every_kernel(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Masks, CudaAttentionMaskCaseTest,
    ::testing::Values(
        // Documents of 1, 17, 200 and 3000 tokens (Qwen2.5-1.5B's 12 / 2 heads, D = 128); the
        // second sequence's documents cross 64- and 128-row tiles at odd places and hold a
        // one-token document mid-tile.
        MaskCase{"Documents1_17_200_3000_D128", {2, 3218, 12, 2, 128}, 0,
                 {{1, 17, 200, 3000}, {64, 63, 1, 130, 2960}}},
        // Llama-3.2's 32 / 8 heads at D = 64; a sequence of one document beside a packed one.
        MaskCase{"DocumentsGqa4_D64", {2, 700, 32, 8, 64}, 0, {{700}, {129, 1, 1, 300, 269}}},
        // Runs of one-token documents (every query sees only itself), then a longer one.
        MaskCase{"OneTokenDocuments_D64", {1, 200, 4, 2, 64}, 0, {one_token_documents(130, 200)}},
        MaskCase{"OneTokenDocuments_D128", {1, 150, 4, 1, 128}, 0, {one_token_documents(70, 150)}},
        // Sliding windows shorter than the sequence (Mistral's 32 / 8 heads at D = 128; windows
        // that are and are not tile multiples).
        MaskCase{"Window100_D128", {1, 1000, 32, 8, 128}, 100, {}},
        MaskCase{"Window37_D64", {2, 500, 8, 2, 64}, 37, {}},
        MaskCase{"Window128_D64", {1, 640, 4, 4, 64}, 128, {}},
        MaskCase{"Window1_D128", {1, 130, 4, 2, 128}, 1, {}},
        // Both: a window inside documents longer and shorter than it.
        MaskCase{"WindowAndDocuments_D64", {2, 1000, 8, 2, 64}, 150,
                 {{300, 1, 77, 622}, {17, 983}}},
        MaskCase{"WindowAndDocuments_D128", {1, 777, 6, 1, 128}, 64, {{1, 200, 17, 559}}},
        // Head dim 256 (Gemma 3's 1B: 4 query heads, 1 kv head): the mma.sync rows (32-key
        // forward tiles, two-pass backward), causal and masked.
        MaskCase{"Causal_D256", {2, 300, 4, 1, 256}, 0, {}},
        MaskCase{"CausalGqa2_D256", {1, 1000, 8, 4, 256}, 0, {}},
        MaskCase{"WindowAndDocuments_D256", {1, 300, 4, 1, 256}, 50, {{100, 1, 199}}},
        MaskCase{"Documents_D256", {2, 520, 4, 2, 256}, 0, {{1, 17, 200, 302}, {520}}},
        // The SIMT kernels (other head dims): window, documents, both.
        MaskCase{"WindowAndDocuments_D48", {2, 300, 6, 2, 48}, 40, {{1, 17, 282}, {150, 150}}},
        MaskCase{"Documents_D32", {1, 200, 4, 2, 32}, 0, {{1, 64, 135}}},
        // Soft-capped scores (the inputs' scaled scores reach about +-5): a cap of 2 saturates
        // the tanh, one of 50 (Gemma 2's) barely bends it. Causal, windowed (Gemma's local
        // layers) and with documents; head dims 64, 128, 256 (mma.sync) and 48 (SIMT).
        MaskCase{"SoftcapCausal_D64", {2, 300, 8, 2, 64}, 0, {}, 2.0f},
        MaskCase{"SoftcapWindow_D64", {1, 500, 4, 1, 64}, 37, {}, 50.0f},
        MaskCase{"SoftcapCausal_D128", {1, 400, 12, 2, 128}, 0, {}, 2.0f},
        MaskCase{"SoftcapWindow_D128", {1, 600, 8, 4, 128}, 100, {}, 2.0f},
        MaskCase{"SoftcapWindowAndDocuments_D128", {2, 333, 4, 2, 128}, 64,
                 {{1, 200, 132}, {333}}, 5.0f},
        MaskCase{"SoftcapCausal_D256", {2, 300, 4, 1, 256}, 0, {}, 2.0f},
        MaskCase{"SoftcapWindow_D256", {1, 520, 8, 4, 256}, 50, {}, 2.0f},
        MaskCase{"SoftcapWindowAndDocuments_D256", {1, 300, 4, 1, 256}, 40, {{17, 283}}, 50.0f},
        MaskCase{"SoftcapWindowAndDocuments_D48", {2, 300, 6, 2, 48}, 40,
                 {{1, 17, 282}, {150, 150}}, 2.0f}),
    [](const ::testing::TestParamInfo<MaskCase>& info) { return std::string(info.param.name); });

// Rows that run only under smaller GPUs' limits: the single-stage mma.sync backward (an L4's
// 99 KB at D = 128; an A100's 163 KB at D = 256) and the 4-warp forward; window and documents.
TEST_F(CudaAttentionMaskTest, SmallerGpusRowsMatchTheCpu) {
  const cuda_kernels::DeviceLimits before = cuda_kernels::device_limits();
  for (const auto& [kind, c] :
       {std::pair{"l4", MaskCase{"L4WindowAndDocuments_D128", {1, 600, 8, 2, 128}, 90,
                                 {{1, 250, 349}}}},
        std::pair{"l4", MaskCase{"L4Documents_D64", {1, 400, 4, 2, 64}, 0, {{17, 1, 382}}}},
        std::pair{"a100", MaskCase{"A100WindowAndDocuments_D256", {1, 500, 4, 1, 256}, 100,
                                   {{1, 17, 482}}}},
        std::pair{"a100", MaskCase{"A100Causal_D256", {1, 257, 8, 2, 256}, 0, {}}}}) {
    SCOPED_TRACE(c.name);
    if (!use_limits_of(kind, before)) continue;
    const cuda_kernels::AttentionConfig backward =
        cuda_kernels::attention_backward_config(DType::kBF16, kernel_shape(c));
    std::printf("%s: backward %s %d warps %d stages\n", c.name,
                cuda_kernels::attention_kernel_name(backward.kernel), backward.warps,
                backward.stages);
    expect_default_kernels_match(c);
    cuda_kernels::set_device_limits_override(before);
  }
}

// A window as long as the sequence masks nothing: the result is plain causal attention's.
TEST_F(CudaAttentionMaskTest, CoveringWindowIsCausal) {
  const int64_t B = 1, T = 64, H = 2, D = 64;
  Pair q = random_input({B, T, H, D}), k = random_input({B, T, H, D}),
       v = random_input({B, T, H, D});
  Pair out = output({B, T, H, D}), lse = output({B, H, T}, DType::kF32);
  const AttentionMask covering = AttentionMask::sliding_window(T, T);
  gpu_->attention_forward(q.gpu, k.gpu, v.gpu, 0.125f, out.gpu, lse.gpu, covering);
  cpu_->attention_forward(q.cpu, k.cpu, v.cpu, 0.125f, out.cpu, lse.cpu);
  EXPECT_LT(error(out), kBf16Tolerance);
}

// A soft cap runs on the mma.sync rows on every GPU kind, Hopper included (the wgmma rows keep
// the uncapped case), and on smaller GPUs' rows: the single-stage backward under an L4's and an
// A100's limits, with a window.
TEST_F(CudaAttentionMaskTest, SoftcapRunsOnTheMmaSyncRows) {
  const cuda_kernels::DeviceLimits before = cuda_kernels::device_limits();
  for (const auto& [kind, c] :
       {std::pair{"", MaskCase{"SoftcapDefault_D128", {1, 256, 4, 2, 128}, 0, {}, 2.0f}},
        std::pair{"l4", MaskCase{"L4SoftcapWindow_D128", {1, 400, 8, 2, 128}, 90, {}, 2.0f}},
        std::pair{"a100", MaskCase{"A100SoftcapWindow_D256", {1, 300, 4, 1, 256}, 70, {}, 2.0f}}}) {
    SCOPED_TRACE(c.name);
    if (*kind != '\0' && !use_limits_of(kind, before)) continue;
    const cuda_kernels::AttentionShape s = kernel_shape(c);
    EXPECT_EQ(cuda_kernels::attention_forward_config(DType::kBF16, s).kernel,
              cuda_kernels::AttentionKernel::kMmaSync);
    EXPECT_EQ(cuda_kernels::attention_backward_config(DType::kBF16, s).kernel,
              cuda_kernels::AttentionKernel::kMmaSync);
    expect_default_kernels_match(c);
    cuda_kernels::set_device_limits_override(before);
  }
}

// The cap changes the result: capped and uncapped attention of the same inputs differ by far
// more than the tolerance (so the cases above test the cap, not plain attention).
TEST_F(CudaAttentionMaskTest, SoftcapChangesTheOutput) {
  MaskCase c{"SoftcapBites_D128", {1, 200, 4, 2, 128}, 0, {}, 2.0f};
  Run capped = prepare(c);
  expect_forward(capped, "default");
  Pair plain = output({1, 200, 4, 128});
  Pair plain_lse = output({1, 4, 200}, DType::kF32);
  gpu_->attention_forward(capped.q.gpu, capped.k.gpu, capped.v.gpu, capped.scale, plain.gpu,
                          plain_lse.gpu, AttentionMask::causal());
  EXPECT_GT(error(Pair{capped.out.cpu, plain.gpu}), 10 * kBf16Tolerance);
}

// Many short documents cost less than one causal sequence: the kernels skip every tile outside
// the documents. Timing: run with --gtest_also_run_disabled_tests on a GPU.
TEST_F(CudaAttentionMaskTest, DISABLED_DocumentsCostLessThanCausal) {
  for (const AttentionCase c : {AttentionCase{1, 16384, 32, 8, 64}, AttentionCase{2, 4096, 12, 2, 128},
                                AttentionCase{2, 4096, 4, 1, 256}}) {
    const Shape q_shape{c.batch, c.seq, c.heads, c.head_dim};
    const Shape kv_shape{c.batch, c.seq, c.kv_heads, c.head_dim};
    Pair q = random_input(q_shape), k = random_input(kv_shape), v = random_input(kv_shape);
    Pair dout = random_input(q_shape), out = output(q_shape);
    Pair lse = output({c.batch, c.heads, c.seq}, DType::kF32);
    Pair dq = output(q_shape), dk = output(kv_shape), dv = output(kv_shape);
    // 16 documents of seq / 16 tokens each.
    MaskCase documents{"timing", c, 0, {}};
    for (int64_t b = 0; b < c.batch; ++b) {
      documents.documents.push_back(std::vector<int64_t>(16, c.seq / 16));
    }
    Pair starts = ints(document_starts(documents), {c.batch, c.seq});
    AttentionMask packed;
    packed.document_start_BT = starts.gpu;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    double ms[2][2];
    for (int masked = 0; masked < 2; ++masked) {
      const AttentionMask mask = masked ? packed : AttentionMask::causal();
      ms[masked][0] = time_ms(
          [&] {
            gpu_->attention_forward(q.gpu, k.gpu, v.gpu, scale, out.gpu, lse.gpu, mask);
          },
          10);
      ms[masked][1] = time_ms(
          [&] {
            gpu_->attention_backward(dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, scale,
                                     dq.gpu, dk.gpu, dv.gpu, mask);
          },
          10);
    }
    std::printf(
        "B=%ld T=%ld H=%ld K=%ld D=%ld: causal forward %.3f ms backward %.3f ms; 16 documents "
        "forward %.3f ms (%.2fx) backward %.3f ms (%.2fx)\n",
        static_cast<long>(c.batch), static_cast<long>(c.seq), static_cast<long>(c.heads),
        static_cast<long>(c.kv_heads), static_cast<long>(c.head_dim), ms[0][0], ms[0][1],
        ms[1][0], ms[0][0] / ms[1][0], ms[1][1], ms[0][1] / ms[1][1]);
    EXPECT_LT(ms[1][0], ms[0][0] / 2);
    EXPECT_LT(ms[1][1], ms[0][1] / 2);
  }
}

// Document-masked attention at the benchmark shapes (bench/flex_attention_documents.py times
// FlexAttention on the same shapes and documents: lengths 200 + x % 2801 of the LCG
// x <- 1103515245 x + 12345 mod 2^31 from x = 1, the last one cut to fill the sequence; the same
// documents in every sequence of the batch). Prints forward and forward + backward milliseconds.
TEST_F(CudaAttentionMaskTest, DISABLED_DocumentMaskedAttentionAgainstFlexShapes) {
  struct BenchShape {
    const char* name;
    AttentionCase shape;
  };
  for (const BenchShape& bench : {BenchShape{"Qwen2.5-1.5B", {2, 4096, 12, 2, 128}},
                                  BenchShape{"Llama-3.2-1B", {1, 16384, 32, 8, 64}},
                                  BenchShape{"Gemma-3-1B", {2, 4096, 4, 1, 256}}}) {
    const AttentionCase& c = bench.shape;
    std::vector<int64_t> lengths;
    uint64_t x = 1;
    for (int64_t total = 0; total < c.seq;) {
      x = (1103515245u * x + 12345u) % (uint64_t{1} << 31);
      const int64_t length = std::min<int64_t>(200 + static_cast<int64_t>(x % 2801), c.seq - total);
      lengths.push_back(length);
      total += length;
    }
    MaskCase documents{bench.name, c, 0, std::vector<std::vector<int64_t>>(c.batch, lengths)};
    const Shape q_shape{c.batch, c.seq, c.heads, c.head_dim};
    const Shape kv_shape{c.batch, c.seq, c.kv_heads, c.head_dim};
    Pair q = random_input(q_shape), k = random_input(kv_shape), v = random_input(kv_shape);
    Pair dout = random_input(q_shape), out = output(q_shape);
    Pair lse = output({c.batch, c.heads, c.seq}, DType::kF32);
    Pair dq = output(q_shape), dk = output(kv_shape), dv = output(kv_shape);
    Pair starts = ints(document_starts(documents), {c.batch, c.seq});
    AttentionMask mask;
    mask.document_start_BT = starts.gpu;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const double forward = time_ms(
        [&] { gpu_->attention_forward(q.gpu, k.gpu, v.gpu, scale, out.gpu, lse.gpu, mask); }, 20);
    const double backward = time_ms(
        [&] {
          gpu_->attention_backward(dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, scale, dq.gpu,
                                   dk.gpu, dv.gpu, mask);
        },
        20);
    std::printf("{\"name\": \"%s\", \"documents\": %zu, \"forward_ms\": %.4f, "
                "\"forward_backward_ms\": %.4f}\n",
                bench.name, lengths.size(), forward, forward + backward);
  }
}

}  // namespace
}  // namespace shardtrain::cuda_testing
