// The attention kernels against the CpuOps fp32 reference: every kernel of the dispatch table
// (forced with ScopedKernelOverrides, ops/kernel_overrides.h) and the Hopper backward's dQ writer
// (the default; SHARDTRAIN_ATTENTION_DQ_WRITER=0: the consumers' dQ atomics, tested too), every
// GQA slicing of the backward,
// ragged tiles, and every GPU kind's configuration under that kind's limits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "ops/cuda/cuda_attention_tuning.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;

// Attention inputs with the CPU reference output and gradients, for checking the GPU kernels
// under several kernel shapes (ops/kernel_overrides.h).
class CudaAttentionKernelTest : public CudaOpsTest {
 protected:
  // Each test runs the kernel it names: the forward's choice by timing (cuda_attention_tuning.h)
  // is off here and has its own test.
  const shardtrain::testing::ScopedEnv no_forward_tuning_{"SHARDTRAIN_ATTENTION_AUTOTUNE", "0"};
  struct Inputs {
    Pair q, k, v, dout, out, lse, dq, dk, dv;
    float scale = 1;
  };
  // Random inputs of case `c`; forward on both backends, backward on the CPU.
  Inputs prepare(const AttentionCase& c) {
    const Shape q_shape{c.batch, c.seq, c.heads, c.head_dim};
    const Shape kv_shape{c.batch, c.seq, c.kv_heads, c.head_dim};
    Inputs in;
    in.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    in.q = random_input(q_shape, DType::kBF16, -2, 2);
    in.k = random_input(kv_shape, DType::kBF16, -2, 2);
    in.v = random_input(kv_shape);
    in.dout = random_input(q_shape);
    in.out = output(q_shape);
    in.lse = output({c.batch, c.heads, c.seq}, DType::kF32);
    cpu_->attention_forward(in.q.cpu, in.k.cpu, in.v.cpu, in.scale, in.out.cpu, in.lse.cpu);
    gpu_->attention_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.scale, in.out.gpu, in.lse.gpu);
    in.dq = output(q_shape);
    in.dk = output(kv_shape);
    in.dv = output(kv_shape);
    cpu_->attention_backward(in.dout.cpu, in.q.cpu, in.k.cpu, in.v.cpu, in.out.cpu, in.lse.cpu,
                             in.scale, in.dq.cpu, in.dk.cpu, in.dv.cpu);
    return in;
  }
  // The warp-specialised kernels exist here (a Hopper GPU and a 90a build) and the shape takes
  // them (bf16, head dim 64 or 128): by default they must then really launch (a silent fallback
  // to the cp.async wgmma kernel would test the wrong kernel).
  static bool warp_specialised_applies(const Inputs& in) {
    const int64_t d = in.q.gpu.dim(3);
    return cuda_kernels::device_limits().compute_capability() == 90 &&
           cuda_kernels::wgmma_kernels_compiled() && in.q.gpu.dtype() == DType::kBF16 &&
           (d == 64 || d == 128);
  }
  // False when the dispatch table has no backward kernel for these inputs on this device's
  // limits (attention_backward_config throws the user's Error).
  static bool backward_fits(const Inputs& in) {
    const cuda_kernels::AttentionShape s{
        static_cast<int>(in.q.gpu.dim(0)), static_cast<int>(in.q.gpu.dim(1)),
        static_cast<int>(in.q.gpu.dim(2)), static_cast<int>(in.k.gpu.dim(2)),
        static_cast<int>(in.q.gpu.dim(3))};
    try {
      cuda_kernels::attention_backward_config(in.q.gpu.dtype(), s);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  // The GPU backward of kernel `warps` ("default": the warp-specialised wgmma kernel on an H200
  // with dQ through the consumers' atomics, SHARDTRAIN_ATTENTION_DQ_WRITER=0; "writer": the same
  // with its dQ writer, =1, the product's default, ops/ops_switches.h;
  // "wgmma": the cp.async wgmma kernel (KernelOverrides::Attention::kWgmma), the default
  // where it does not apply; "8" or "4": the mma.sync kernel with that many warps a block) and
  // `heads_per_block` (empty: the launcher's choice) into poisoned outputs, against the CPU
  // gradients. The SIMT kernels ignore the overrides.
  void expect_backward(Inputs& in, const std::string& warps,
                       const std::string& heads_per_block = "") {
    poison(in.dq.gpu);
    poison(in.dk.gpu);
    poison(in.dv.gpu);
    const int64_t ws_before = cuda_kernels::warp_specialised_launches().backward;
    const bool writer = warps == "writer";
    {
      const shardtrain::testing::ScopedEnv dq_writer("SHARDTRAIN_ATTENTION_DQ_WRITER",
                                                     writer ? "1" : "0");
      KernelOverrides overrides = attention_kernel(writer ? "default" : warps);
      if (!heads_per_block.empty())
        overrides.attention_backward_heads_per_block = std::stoi(heads_per_block);
      const ScopedKernelOverrides forced(overrides);
      if (!backward_fits(in)) {  // e.g. the SIMT backward at D = 96 under an L4's 99 KB
        EXPECT_THROW(
            gpu_->attention_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.out.gpu,
                                     in.lse.gpu, in.scale, in.dq.gpu, in.dk.gpu, in.dv.gpu),
            Error);
        std::printf("attention backward D=%ld does not fit %s: Error, as the table says\n",
                    static_cast<long>(in.q.gpu.dim(3)), cuda_kernels::device_limits().name.c_str());
      } else {
        gpu_->attention_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.out.gpu, in.lse.gpu,
                                 in.scale, in.dq.gpu, in.dk.gpu, in.dv.gpu);
      }
    }
    if (!backward_fits(in)) return;
    if ((warps == "default" || writer) && warp_specialised_applies(in)) {
      EXPECT_EQ(cuda_kernels::warp_specialised_launches().backward, ws_before + 1)
          << "the warp-specialised backward did not run";
    }
    Pair &dq = in.dq, &dk = in.dk, &dv = in.dv;
    EXPECT_BF16_CLOSE(dq) << "warps " << warps << ", heads per block " << heads_per_block;
    EXPECT_BF16_CLOSE(dk) << "warps " << warps << ", heads per block " << heads_per_block;
    EXPECT_BF16_CLOSE(dv) << "warps " << warps << ", heads per block " << heads_per_block;
  }
};

class CudaAttentionTest : public CudaAttentionKernelTest,
                          public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(CudaAttentionTest, ForwardAndBackward) {
  Inputs in = prepare(GetParam());
  Pair &out = in.out, &lse = in.lse;
  EXPECT_BF16_CLOSE(out);
  EXPECT_LE(error(lse), 1e-5);
  // The flash backward kernels (wgmma on an H200, the default; mma.sync with 8 warps and 128-key
  // tiles or 4 warps and 64-key tiles); the SIMT kernels ignore the hooks and simply run thrice.
  for (const std::string& warps : backward_kernels_tested()) expect_backward(in, warps);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    // D=64 and D=128 in bf16 take the tensor-core flash kernels (cuda_attention_tc_*.cu): tile
    // multiples, ragged last tiles (T=300, 100, 65, 1) and GQA ratios 1, 2, 4 and 6. The rest take
    // the SIMT kernels (cuda_attention.cu).
    ::testing::Values(AttentionCase{2, 256, 8, 2, 64}, AttentionCase{1, 128, 4, 4, 128},
                      AttentionCase{2, 16, 4, 2, 16}, AttentionCase{2, 100, 4, 2, 64},
                      AttentionCase{1, 100, 6, 2, 48}, AttentionCase{1, 77, 2, 1, 96},
                      AttentionCase{1, 512, 4, 2, 128}, AttentionCase{2, 300, 8, 2, 64},
                      AttentionCase{1, 256, 12, 2, 128}, AttentionCase{2, 65, 12, 2, 64},
                      AttentionCase{1, 1, 2, 1, 128}, AttentionCase{1, 200, 6, 1, 128}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) {
      const AttentionCase& c = info.param;
      return "B" + std::to_string(c.batch) + "T" + std::to_string(c.seq) + "H" +
             std::to_string(c.heads) + "K" + std::to_string(c.kv_heads) + "D" +
             std::to_string(c.head_dim);
    });

// The flash backward splits a GQA group over several blocks on small grids (dK, dV then add up
// in fp32); every slice size must give the reference gradients, with every kernel (wgmma,
// mma.sync with 8 and 4 warps) and both head dims. T = 200, 300: ragged last key tiles of
// either size.
TEST_F(CudaAttentionKernelTest, BackwardForEveryGroupSlicing) {
  for (const AttentionCase c :
       {AttentionCase{1, 200, 12, 2, 128}, AttentionCase{1, 300, 12, 2, 64}}) {
    SCOPED_TRACE(::testing::PrintToString(c));
    Inputs in = prepare(c);
    for (const std::string& warps : backward_kernels_tested()) {
      for (const char* heads_per_block : {"6", "3", "2", "1"}) {
        expect_backward(in, warps, heads_per_block);
      }
    }
  }
}

// The flash backward kernels: wgmma (the default on an H200; 128-key tiles of two warpgroups),
// mma.sync with 128-key tiles of 8 warps and with 64-key tiles of 4 warps
// (KernelOverrides::Attention::kMma, 8 or 4 backward warps), each with the whole GQA group
// in a block (dK, dV stored once) and with one head a block (fp32 atomics): all must give the
// reference gradients. T = 77, 100: a single 128-key tile over two query tiles, keys past T; 129: a
// last key tile with one real key; 192: a last key tile whose upper warps hold only padding keys;
// 200, 300, 1000: ragged last tiles of every size; GQA groups 1 to 4.
TEST_F(CudaAttentionKernelTest, BackwardForEveryKernel) {
  for (const AttentionCase c : {AttentionCase{1, 1, 2, 1, 64}, AttentionCase{2, 77, 4, 2, 64},
                                AttentionCase{1, 77, 2, 1, 128}, AttentionCase{1, 100, 4, 1, 64},
                                AttentionCase{2, 100, 4, 2, 128}, AttentionCase{1, 129, 2, 1, 64},
                                AttentionCase{1, 129, 4, 1, 128}, AttentionCase{2, 192, 4, 2, 64},
                                AttentionCase{1, 192, 2, 2, 128}, AttentionCase{1, 200, 6, 2, 64},
                                AttentionCase{1, 200, 6, 2, 128}, AttentionCase{1, 300, 4, 2, 64},
                                AttentionCase{1, 300, 8, 2, 128}, AttentionCase{1, 1000, 4, 2, 64},
                                AttentionCase{1, 1000, 4, 2, 128}}) {
    SCOPED_TRACE(::testing::PrintToString(c));
    Inputs in = prepare(c);
    const std::string whole_group = std::to_string(c.heads / c.kv_heads);
    for (const std::string& warps : backward_kernels_tested()) {
      for (const std::string& heads_per_block : {whole_group, std::string("1")}) {
        expect_backward(in, warps, heads_per_block);
      }
    }
  }
}

// The forward kernels: on an H200 the warp-specialised TMA kernel (cuda_attention_ws_forward.cu)
// by default (the launch is counted: it must have run), the cp.async wgmma kernel
// (cuda_attention_wgmma_forward.cu) forced with KernelOverrides::Attention::kWgmma; the mma.sync
// kernel (kMma) with 128-row query tiles of 8 warps, or 64-row tiles of 4 warps.
// All must give the reference output and lse. T = 1, 77, 100, 300, 1000: ragged last tiles of
// every size; 129 and 192: a last 128-row tile whose upper warps (warpgroup) hold only padding
// rows and skip or mask K/V tiles past the sequence; 256, 1000: several 128-key tiles.
TEST_F(CudaAttentionKernelTest, ForwardForEveryKernel) {
  for (const AttentionCase c :
       {AttentionCase{1, 1, 2, 1, 64}, AttentionCase{2, 77, 4, 2, 64},
        AttentionCase{1, 100, 4, 1, 128}, AttentionCase{1, 129, 2, 1, 128},
        AttentionCase{2, 192, 4, 2, 64}, AttentionCase{1, 200, 6, 2, 128},
        AttentionCase{2, 256, 4, 2, 128}, AttentionCase{1, 300, 4, 2, 64},
        AttentionCase{1, 1000, 4, 2, 128}, AttentionCase{1, 1000, 8, 2, 64}}) {
    SCOPED_TRACE(::testing::PrintToString(c));
    Inputs in = prepare(c);
    Pair &out = in.out, &lse = in.lse;
    for (const std::string kernel : {"default", "wgmma", "8", "4"}) {
      poison(out.gpu);
      poison(lse.gpu);
      const int64_t ws_before = cuda_kernels::warp_specialised_launches().forward;
      {
        const ScopedKernelOverrides forced(attention_kernel(kernel));
        gpu_->attention_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.scale, out.gpu, lse.gpu);
      }
      if (kernel == "default" && warp_specialised_applies(in)) {
        EXPECT_EQ(cuda_kernels::warp_specialised_launches().forward, ws_before + 1)
            << "the warp-specialised forward did not run";
      }
      EXPECT_BF16_CLOSE(out) << "forward kernel " << kernel;
      EXPECT_LE(error(lse), 1e-5) << "forward kernel " << kernel;
    }
  }
}

// A Hopper GPU with a 90a build runs the warp-specialised kernels by default (so the forward and
// backward kernel tests above checked them, at both head dims) and the cp.async wgmma kernels
// when forced (KernelOverrides::Attention::kWgmma); no launch fell back (the TMA descriptors were
// made).
TEST_F(CudaAttentionKernelTest, WarpSpecialisedKernelsAreTheHopperDefault) {
  if (cuda_kernels::device_limits().compute_capability() != 90 ||
      !cuda_kernels::wgmma_kernels_compiled()) {
    GTEST_SKIP() << "not a Hopper GPU with a 90a build: no warp-specialised kernel here";
  }
  for (const int d : {64, 128}) {
    const cuda_kernels::AttentionShape s{1, 1000, 4, 2, d};
    EXPECT_EQ(cuda_kernels::attention_forward_config(DType::kBF16, s).kernel,
              cuda_kernels::AttentionKernel::kWgmmaWs);
    EXPECT_EQ(cuda_kernels::attention_backward_config(DType::kBF16, s).kernel,
              cuda_kernels::AttentionKernel::kWgmmaWs);
    const ScopedKernelOverrides forced(attention_kernel("wgmma"));
    const cuda_kernels::AttentionKernel forward =
        cuda_kernels::attention_forward_config(DType::kBF16, s).kernel;
    const cuda_kernels::AttentionKernel backward =
        cuda_kernels::attention_backward_config(DType::kBF16, s).kernel;
    EXPECT_EQ(forward, cuda_kernels::AttentionKernel::kWgmma);
    EXPECT_EQ(backward, cuda_kernels::AttentionKernel::kWgmma);
  }
  EXPECT_EQ(cuda_kernels::warp_specialised_launches().fallbacks, 0);
}

// With the forward's tuning on (the product's default), a Hopper GPU times the warp-specialised
// and cp.async wgmma forwards at a shape's first call and keeps one; the output is the chosen
// kernel's, equal to the CPU's, the first call and every later one (no second timing: at most one
// warp-specialised launch a call). Elsewhere the table's kernel runs and nothing is timed.
TEST_F(CudaAttentionKernelTest, ForwardTuningKeepsOneKernelPerShape) {
  const shardtrain::testing::ScopedEnv tuning("SHARDTRAIN_ATTENTION_AUTOTUNE", "1");
  const auto& tuning_state = static_cast<const CudaOps&>(*gpu_).attention_forward_tuning();
  for (const AttentionCase c :
       {AttentionCase{2, 1000, 8, 2, 64}, AttentionCase{1, 700, 4, 2, 128}}) {
    SCOPED_TRACE(::testing::PrintToString(c));
    const cuda_kernels::AttentionShape s{static_cast<int>(c.batch), static_cast<int>(c.seq),
                                         static_cast<int>(c.heads), static_cast<int>(c.kv_heads),
                                         static_cast<int>(c.head_dim)};
    const bool hopper_ws = cuda_kernels::attention_forward_config(DType::kBF16, s).kernel ==
                           cuda_kernels::AttentionKernel::kWgmmaWs;
    EXPECT_FALSE(tuning_state.chosen(s).has_value());
    Inputs in = prepare(c);  // the shape's first forward: timed here
    Pair &out = in.out, &lse = in.lse;
    EXPECT_BF16_CLOSE(out);
    EXPECT_LE(error(lse), 1e-5);
    if (!hopper_ws) {
      EXPECT_FALSE(tuning_state.chosen(s).has_value()) << "timed where the table has one kernel";
      continue;
    }
    ASSERT_TRUE(tuning_state.chosen(s).has_value());
    const cuda_kernels::AttentionKernel kernel = *tuning_state.chosen(s);
    EXPECT_TRUE(kernel == cuda_kernels::AttentionKernel::kWgmmaWs ||
                kernel == cuda_kernels::AttentionKernel::kWgmma);
    std::printf("D=%d: the forward runs %s\n", c.head_dim,
                cuda_kernels::attention_kernel_name(kernel));
    for (int call = 0; call < 2; ++call) {
      poison(out.gpu);
      const int64_t ws_before = cuda_kernels::warp_specialised_launches().forward;
      gpu_->attention_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.scale, out.gpu, lse.gpu);
      const int64_t ws_launches = cuda_kernels::warp_specialised_launches().forward - ws_before;
      EXPECT_EQ(ws_launches, kernel == cuda_kernels::AttentionKernel::kWgmmaWs ? 1 : 0);
      EXPECT_BF16_CLOSE(out);
    }
  }
}

// The kernel configurations of every GPU kind of the reference deployments, run here under
// that kind's limits (cuda_dispatch.h set_device_limits_override; the launchers raise each
// kernel's shared memory only after checking it against those limits): A100 (163 KB, the 8-warp
// mma.sync kernels), L4 and A10G (99 KB: 4-warp forward and single-stage 4-warp backward at
// D = 128), H100 (wgmma where this build has it). Forward and backward against the CPU.
TEST_F(CudaAttentionKernelTest, EveryGpuKindsConfigurationMatchesTheCpu) {
  const cuda_kernels::DeviceLimits before = cuda_kernels::device_limits();  // maybe an override
  const size_t present = before.shared_per_block_optin;
  for (const char* kind : {"a100", "a10g", "l4", "h100"}) {
    const std::optional<cuda_kernels::DeviceLimits> limits =
        cuda_kernels::device_limits_preset(kind);
    ASSERT_TRUE(limits.has_value());
    if (limits->shared_per_block_optin > present) {
      std::printf("%s: skipped, more shared memory than this GPU has\n", kind);
      continue;
    }
    cuda_kernels::set_device_limits_override(limits);
    for (const AttentionCase c : {AttentionCase{1, 300, 4, 2, 128}, AttentionCase{2, 200, 6, 2, 64},
                                  AttentionCase{1, 129, 2, 1, 128}}) {
      SCOPED_TRACE(std::string(kind) + " " + ::testing::PrintToString(c));
      const cuda_kernels::AttentionShape s{static_cast<int>(c.batch), static_cast<int>(c.seq),
                                           static_cast<int>(c.heads), static_cast<int>(c.kv_heads),
                                           static_cast<int>(c.head_dim)};
      const cuda_kernels::AttentionConfig forward =
          cuda_kernels::attention_forward_config(DType::kBF16, s);
      const cuda_kernels::AttentionConfig backward =
          cuda_kernels::attention_backward_config(DType::kBF16, s);
      EXPECT_LE(forward.shared_bytes, limits->shared_per_block_optin);
      EXPECT_LE(backward.shared_bytes, limits->shared_per_block_optin);
      std::printf("%s D=%d: forward %s %d warps (%zu B), backward %s %d warps %d stages (%zu B)\n",
                  kind, c.head_dim, cuda_kernels::attention_kernel_name(forward.kernel),
                  forward.warps, forward.shared_bytes,
                  cuda_kernels::attention_kernel_name(backward.kernel), backward.warps,
                  backward.stages, backward.shared_bytes);
      Inputs in = prepare(c);  // the forward ran under the override
      Pair &out = in.out, &lse = in.lse;
      EXPECT_BF16_CLOSE(out);
      EXPECT_LE(error(lse), 1e-5);
      expect_backward(in, "default");
      expect_backward(in, "default", "1");  // one head a block: dK / dV through fp32 atomics
    }
  }
  cuda_kernels::set_device_limits_override(before);
}

}  // namespace
}  // namespace shardtrain
