#include "ops/ops_switches.h"

#include "core/env_switch.h"

namespace shardtrain {

bool profile_ops_switch() { return env_switch("SHARDTRAIN_PROFILE_OPS", false); }

bool gemm_autotune_switch() { return env_switch("SHARDTRAIN_GEMM_AUTOTUNE", true); }

GemmSearch gemm_search_switch() {
  // The order is GemmSearch's: the first is the default.
  switch (env_choice("SHARDTRAIN_GEMM_SEARCH", {"top8", "wide", "split-k"})) {
    case 1:
      return GemmSearch::kWide;
    case 2:
      return GemmSearch::kSplitK;
    default:
      return GemmSearch::kTop8;
  }
}

bool attention_autotune_switch() { return env_switch("SHARDTRAIN_ATTENTION_AUTOTUNE", true); }

MoeGemmChoice moe_gemm_switch() {
  // The order is MoeGemmChoice's: the first is the default.
  return env_choice("SHARDTRAIN_MOE_GEMM", {"wgmma", "cublas"}) == 0 ? MoeGemmChoice::kWgmma
                                                                     : MoeGemmChoice::kCublas;
}

bool lora_kernels_switch() { return env_switch("SHARDTRAIN_LORA_KERNELS", false); }

bool fp8_fused_swiglu_switch() { return env_switch("SHARDTRAIN_FP8_FUSED_SWIGLU", true); }

bool fp8_grad_fast_accum_switch() { return env_switch("SHARDTRAIN_FP8_GRAD_FAST_ACCUM", true); }

bool fp8_keep_down_input_switch() { return env_switch("SHARDTRAIN_FP8_KEEP_DOWN_INPUT", true); }

bool attention_dq_writer_switch() { return env_switch("SHARDTRAIN_ATTENTION_DQ_WRITER", true); }

bool ops_aside_switch(bool default_on) { return env_switch("SHARDTRAIN_OPS_ASIDE", default_on); }

int aside_gemm_sms_switch() {
  constexpr int kSms[] = {0, 8, 16, 24, 32};  // the choices below, in order
  return kSms[env_choice("SHARDTRAIN_ASIDE_GEMM_SMS", {"0", "8", "16", "24", "32"})];
}

void check_ops_switches() {
  profile_ops_switch();
  gemm_autotune_switch();
  gemm_search_switch();
  attention_autotune_switch();
  moe_gemm_switch();
  lora_kernels_switch();
  fp8_fused_swiglu_switch();
  fp8_grad_fast_accum_switch();
  fp8_keep_down_input_switch();
  attention_dq_writer_switch();
  ops_aside_switch(false);
  aside_gemm_sms_switch();
}

}  // namespace shardtrain
