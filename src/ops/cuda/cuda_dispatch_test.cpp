// The kernel table (cuda_dispatch.h) for every GPU kind of the reference deployments, with no GPU
// needed: wgmma only on compute capability 9.0 in a build that has it, mma.sync on 8.0-8.9 with
// tiles that fit each kind's shared memory, SIMT elsewhere, clear errors for what cannot run.
#include "ops/cuda/cuda_dispatch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "core/error.h"

namespace shardtrain::cuda_kernels {
namespace {

DeviceLimits preset(const char* name) {
  const std::optional<DeviceLimits> limits = device_limits_preset(name);
  EXPECT_TRUE(limits.has_value()) << name;
  return limits.value_or(DeviceLimits{});
}

AttentionShape shape(int head_dim) { return AttentionShape{2, 4096, 12, 2, head_dim}; }

TEST(CudaDispatch, PresetsCarryTheDatasheetLimits) {
  EXPECT_EQ(preset("a100").compute_capability(), 80);
  EXPECT_EQ(preset("a100").shared_per_block_optin, 163u * 1024);
  EXPECT_EQ(preset("a10g").compute_capability(), 86);
  EXPECT_EQ(preset("l4").compute_capability(), 89);
  EXPECT_EQ(preset("l4").shared_per_block_optin, 99u * 1024);
  EXPECT_EQ(preset("l4").sm_count, 58);
  EXPECT_EQ(preset("h100").compute_capability(), 90);
  EXPECT_EQ(preset("h100").shared_per_block_optin, 227u * 1024);
  EXPECT_FALSE(device_limits_preset("v100").has_value());
}

TEST(CudaDispatch, WgmmaOnlyOnHopperBuildsThatHaveIt) {
  for (const int d : {64, 128}) {
    const AttentionConfig hopper = attention_forward_config(DType::kBF16, shape(d), preset("h100"),
                                                            /*wgmma_compiled=*/true);
    EXPECT_EQ(hopper.kernel, AttentionKernel::kWgmmaWs) << d;
    EXPECT_EQ(attention_backward_config(DType::kBF16, shape(d), preset("h100"), true).kernel,
              AttentionKernel::kWgmmaWs);
    // An sm_80-only build on an H100 (PTX JIT): the mma.sync kernels, 8 warps.
    const AttentionConfig jit = attention_forward_config(DType::kBF16, shape(d), preset("h100"),
                                                         /*wgmma_compiled=*/false);
    EXPECT_EQ(jit.kernel, AttentionKernel::kMmaSync);
    EXPECT_EQ(jit.warps, 8);
    // Never wgmma below 9.0, even when the binary holds it.
    for (const char* kind : {"a100", "a10g", "l4"}) {
      EXPECT_EQ(attention_forward_config(DType::kBF16, shape(d), preset(kind), true).kernel,
                AttentionKernel::kMmaSync)
          << kind;
      EXPECT_EQ(attention_backward_config(DType::kBF16, shape(d), preset(kind), true).kernel,
                AttentionKernel::kMmaSync)
          << kind;
    }
  }
}

// On Hopper the warp-specialised kernels by default; the override kWgmma runs the cp.async wgmma
// kernels instead, kWgmmaForward its forward beside the warp-specialised backward, kMma the
// mma.sync ones; never where wgmma is not.
TEST(CudaDispatch, WarpSpecialisedKernelsAreTheHopperDefault) {
  for (const int d : {64, 128}) {
    const AttentionConfig forward =
        attention_forward_config(DType::kBF16, shape(d), preset("h100"), true);
    const AttentionConfig backward =
        attention_backward_config(DType::kBF16, shape(d), preset("h100"), true);
    EXPECT_EQ(forward.kernel, AttentionKernel::kWgmmaWs) << d;
    EXPECT_EQ(forward.shared_bytes, wgmma_ws_forward_shared_bytes(d)) << d;
    EXPECT_LE(forward.shared_bytes, preset("h100").shared_per_block_optin) << d;
    EXPECT_EQ(backward.kernel, AttentionKernel::kWgmmaWs) << d;
    EXPECT_EQ(backward.shared_bytes, wgmma_ws_backward_shared_bytes(d)) << d;
    EXPECT_LE(backward.shared_bytes, preset("h100").shared_per_block_optin) << d;
    EXPECT_STREQ(attention_kernel_name(forward.kernel), "wgmma-ws");
    EXPECT_EQ(attention_forward_config(DType::kF32, shape(d), preset("h100"), true).kernel,
              AttentionKernel::kSimt);

    // The kernels chosen at head dim d under `forced` (forward, backward).
    auto kernels_under = [d](KernelOverrides::Attention forced) {
      KernelOverrides overrides;
      overrides.attention = forced;
      set_kernel_overrides(overrides);
      return std::pair{
          attention_forward_config(DType::kBF16, shape(d), preset("h100"), true).kernel,
          attention_backward_config(DType::kBF16, shape(d), preset("h100"), true).kernel};
    };
    const auto [cp_async_forward, cp_async_backward] =
        kernels_under(KernelOverrides::Attention::kWgmma);
    const auto [split_forward, split_backward] =
        kernels_under(KernelOverrides::Attention::kWgmmaForward);
    const AttentionKernel mma = kernels_under(KernelOverrides::Attention::kMma).first;
    set_kernel_overrides({});
    EXPECT_EQ(cp_async_forward, AttentionKernel::kWgmma) << d;
    EXPECT_EQ(cp_async_backward, AttentionKernel::kWgmma) << d;
    EXPECT_EQ(split_forward, AttentionKernel::kWgmma) << d;
    EXPECT_EQ(split_backward, AttentionKernel::kWgmmaWs) << d;
    EXPECT_EQ(mma, AttentionKernel::kMmaSync) << d;
  }
}

TEST(CudaDispatch, MmaTilesFitEachGpusSharedMemory) {
  // A100 (163 KB): the 8-warp kernels in both directions at both head dims.
  for (const int d : {64, 128}) {
    const AttentionConfig forward =
        attention_forward_config(DType::kBF16, shape(d), preset("a100"), true);
    const AttentionConfig backward =
        attention_backward_config(DType::kBF16, shape(d), preset("a100"), true);
    EXPECT_EQ(forward.warps, 8) << d;
    EXPECT_EQ(backward.warps, 8) << d;
    EXPECT_EQ(backward.stages, 2) << d;
  }
  // L4 / A10G (99 KB): D = 128 forward with 4 warps (the 8-warp tile is 102 KB), backward with
  // 4 warps and single-buffered Q/dO (155 KB and 112 KB do not fit); D = 64 keeps 8 warps.
  for (const char* kind : {"l4", "a10g"}) {
    const AttentionConfig forward128 =
        attention_forward_config(DType::kBF16, shape(128), preset(kind), true);
    EXPECT_EQ(forward128.warps, 4) << kind;
    const AttentionConfig backward128 =
        attention_backward_config(DType::kBF16, shape(128), preset(kind), true);
    EXPECT_EQ(backward128.warps, 4) << kind;
    EXPECT_EQ(backward128.stages, 1) << kind;
    EXPECT_EQ(attention_forward_config(DType::kBF16, shape(64), preset(kind), true).warps, 8);
    const AttentionConfig backward64 =
        attention_backward_config(DType::kBF16, shape(64), preset(kind), true);
    EXPECT_EQ(backward64.warps, 8) << kind;
    EXPECT_EQ(backward64.stages, 2) << kind;
  }
  // Every choice fits its GPU, and the byte counts are the kernels' (spot values).
  for (const char* kind : {"a100", "a10g", "l4", "h100"}) {
    for (const int d : {64, 128}) {
      for (const bool wgmma : {false, true}) {
        const DeviceLimits limits = preset(kind);
        EXPECT_LE(attention_forward_config(DType::kBF16, shape(d), limits, wgmma).shared_bytes,
                  limits.shared_per_block_optin);
        EXPECT_LE(attention_backward_config(DType::kBF16, shape(d), limits, wgmma).shared_bytes,
                  limits.shared_per_block_optin);
      }
    }
  }
  EXPECT_EQ(mma_backward_shared_bytes(128, 8, 2), 159232u);  // ops/cuda/ATTENTION_NOTES.md: 155.5 KB
  EXPECT_EQ(mma_forward_shared_bytes(128, 8), 104448u);      // 102 KB
  EXPECT_EQ(mma_backward_shared_bytes(128, 4, 1), 79616u);
}

TEST(CudaDispatch, OtherDtypesAndHeadDimsTakeTheSimtKernels) {
  EXPECT_EQ(attention_forward_config(DType::kF32, shape(128), preset("h100"), true).kernel,
            AttentionKernel::kSimt);
  EXPECT_EQ(attention_backward_config(DType::kBF16, shape(96), preset("a100"), true).kernel,
            AttentionKernel::kSimt);
  EXPECT_EQ(attention_forward_config(DType::kBF16, shape(96), preset("l4"), true).kernel,
            AttentionKernel::kSimt);
  // The SIMT backward at D = 96 needs 129 KB: more than an L4 offers. One clear error.
  try {
    attention_backward_config(DType::kBF16, shape(96), preset("l4"), true);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("head dim 96"), std::string::npos) << message;
    EXPECT_NE(message.find("L4"), std::string::npos) << message;
    EXPECT_NE(message.find("HINT"), std::string::npos) << message;
  }
}

// Head dim 256 (Gemma 3): the 4-warp mma.sync rows on every GPU of compute capability 8.0 on
// (no wgmma row), two Q/dO stages where shared memory allows (H100) and one on an A100; an L4
// cannot hold the backward's 142 KB, and f32 has no kernel: one line each, naming the head dim.
TEST(CudaDispatch, HeadDim256TakesTheMmaSyncRows) {
  const AttentionConfig hopper =
      attention_backward_config(DType::kBF16, shape(256), preset("h100"), true);
  EXPECT_EQ(hopper.kernel, AttentionKernel::kMmaSync);
  EXPECT_EQ(hopper.warps, 4);
  EXPECT_EQ(hopper.stages, 2);
  const AttentionConfig a100 =
      attention_backward_config(DType::kBF16, shape(256), preset("a100"), false);
  EXPECT_EQ(a100.kernel, AttentionKernel::kMmaSync);
  EXPECT_EQ(a100.stages, 1);
  EXPECT_LE(a100.shared_bytes, preset("a100").shared_per_block_optin);
  for (const char* kind : {"a100", "l4", "h100"}) {
    const AttentionConfig forward =
        attention_forward_config(DType::kBF16, shape(256), preset(kind), true);
    EXPECT_EQ(forward.kernel, AttentionKernel::kMmaSync) << kind;
    EXPECT_EQ(forward.warps, 4) << kind;
  }
  for (const auto& [dtype, kind] :
       {std::pair{DType::kBF16, "l4"}, std::pair{DType::kF32, "h100"}}) {
    try {
      attention_backward_config(dtype, shape(256), preset(kind), true);
      FAIL() << "expected an Error for " << kind;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("head dim 256"), std::string::npos) << message;
      EXPECT_NE(message.find("HINT"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

// A logit soft cap (Gemma's attn_logit_softcapping) never takes the wgmma rows, which do not
// apply it: on Hopper the mma.sync rows (8 warps at D 64 and 128, as on an sm_80-only build),
// elsewhere the rows the uncapped shape takes; f32 and other head dims stay on SIMT.
TEST(CudaDispatch, SoftcapTakesTheMmaSyncRowsOnHopper) {
  for (const int d : {64, 128, 256}) {
    AttentionShape capped = shape(d);
    capped.logit_softcap = 50;
    for (const bool backward : {false, true}) {
      const auto config = [&](const AttentionShape& s, const char* kind) {
        return backward ? attention_backward_config(DType::kBF16, s, preset(kind), true)
                        : attention_forward_config(DType::kBF16, s, preset(kind), true);
      };
      const AttentionConfig hopper = config(capped, "h100");
      EXPECT_EQ(hopper.kernel, AttentionKernel::kMmaSync) << d << " backward " << backward;
      EXPECT_EQ(hopper.warps, d == 256 ? 4 : 8) << d;
      for (const char* kind : {"a100", "l4"}) {
        if (d == 256 && backward && std::string(kind) == "l4") continue;  // no row fits
        const AttentionConfig capped_config = config(capped, kind);
        const AttentionConfig plain_config = config(shape(d), kind);
        EXPECT_EQ(capped_config.kernel, plain_config.kernel) << kind << " " << d;
        EXPECT_EQ(capped_config.warps, plain_config.warps) << kind << " " << d;
        EXPECT_EQ(capped_config.stages, plain_config.stages) << kind << " " << d;
      }
    }
  }
  AttentionShape capped = shape(128);
  capped.logit_softcap = 50;
  EXPECT_EQ(attention_forward_config(DType::kF32, capped, preset("h100"), true).kernel,
            AttentionKernel::kSimt);
  capped = shape(96);
  capped.logit_softcap = 50;
  EXPECT_EQ(attention_backward_config(DType::kBF16, capped, preset("h100"), true).kernel,
            AttentionKernel::kSimt);
}

TEST(CudaDispatch, GpusBelowComputeCapability8AreRefusedByName) {
  DeviceLimits v100{"Tesla V100-SXM2-16GB", 7, 0, 96 * 1024, 80, 6 << 20};
  try {
    require_supported_device(v100, 3);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("GPU 3 (Tesla V100-SXM2-16GB)"), std::string::npos) << message;
    EXPECT_NE(message.find("compute capability 7.0"), std::string::npos) << message;
    EXPECT_NE(message.find("8.0"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
  }
  EXPECT_NO_THROW(require_supported_device(preset("a100"), 0));
  EXPECT_NO_THROW(require_supported_device(preset("l4"), 0));
}

TEST(CudaDispatch, RmsnormVariantsByWidthDtypeAndAlignment) {
  EXPECT_EQ(choose_rmsnorm_forward(DType::kBF16, 1536, true, true), RmsnormKernel::kWarpPerRow);
  EXPECT_EQ(choose_rmsnorm_forward(DType::kBF16, 2048, true, true), RmsnormKernel::kWarpPerRow);
  EXPECT_EQ(choose_rmsnorm_forward(DType::kBF16, 4096, true, true),
            RmsnormKernel::kBlockPerRowVector);
  EXPECT_EQ(choose_rmsnorm_forward(DType::kBF16, 1536, true, false),
            RmsnormKernel::kBlockPerRowVector);  // a misaligned bf16 weight
  EXPECT_EQ(choose_rmsnorm_forward(DType::kBF16, 8200, true, true),
            RmsnormKernel::kBlockPerRowScalar);
  EXPECT_EQ(choose_rmsnorm_forward(DType::kF32, 1536, true, true),
            RmsnormKernel::kBlockPerRowScalar);
  EXPECT_EQ(choose_rmsnorm_forward(DType::kBF16, 1536, false, true),
            RmsnormKernel::kBlockPerRowScalar);
  EXPECT_EQ(choose_rmsnorm_backward(DType::kBF16, 8192, true), RmsnormKernel::kBlockPerRowVector);
  EXPECT_EQ(choose_rmsnorm_backward(DType::kBF16, 1004, true), RmsnormKernel::kBlockPerRowScalar);
  // The scalar backward holds a float per channel in shared memory.
  EXPECT_NO_THROW(require_rmsnorm_backward_fits(8192, preset("l4")));
  EXPECT_THROW(require_rmsnorm_backward_fits(40000, preset("l4")), Error);
  EXPECT_NO_THROW(require_rmsnorm_backward_fits(40000, preset("a100")));
}

TEST(CudaDispatch, FusedQkvRopeNeedsBf16AndWholeVectors) {
  EXPECT_TRUE(qkv_rope_fused(DType::kBF16, 128, true));
  EXPECT_TRUE(qkv_rope_fused(DType::kBF16, 16, true));
  EXPECT_FALSE(qkv_rope_fused(DType::kBF16, 24, true));  // 12 pairs: not whole 8-element vectors
  EXPECT_FALSE(qkv_rope_fused(DType::kF32, 128, true));
  EXPECT_FALSE(qkv_rope_fused(DType::kBF16, 128, false));
}

TEST(CudaDispatch, QkNormRopeVectorKernelNeedsBf16AndItsHeadDims) {
  for (const int64_t head_dim : {64, 128, 256}) {
    EXPECT_EQ(choose_qk_norm_rope(DType::kBF16, head_dim, true), QkNormRopeKernel::kVector)
        << head_dim;
  }
  EXPECT_EQ(choose_qk_norm_rope(DType::kBF16, 96, true), QkNormRopeKernel::kScalar);
  EXPECT_EQ(choose_qk_norm_rope(DType::kBF16, 512, true), QkNormRopeKernel::kScalar);
  EXPECT_EQ(choose_qk_norm_rope(DType::kBF16, 6, true), QkNormRopeKernel::kScalar);
  EXPECT_EQ(choose_qk_norm_rope(DType::kF32, 128, true), QkNormRopeKernel::kScalar);
  EXPECT_EQ(choose_qk_norm_rope(DType::kBF16, 128, false), QkNormRopeKernel::kScalar);
  EXPECT_THROW(choose_qk_norm_rope(DType::kBF16, 1024, true), Error);
  EXPECT_THROW(choose_qk_norm_rope(DType::kF32, 7, true), Error);
}

}  // namespace
}  // namespace shardtrain::cuda_kernels
