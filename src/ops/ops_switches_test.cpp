#include "ops/ops_switches.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

using testing::ScopedEnv;

TEST(OpsSwitchesTest, DefaultsWhenUnset) {
  EXPECT_FALSE(profile_ops_switch());
  EXPECT_TRUE(gemm_autotune_switch());
  EXPECT_EQ(moe_gemm_switch(), MoeGemmChoice::kWgmma);
  EXPECT_FALSE(lora_kernels_switch());
  EXPECT_TRUE(fp8_fused_swiglu_switch());
  EXPECT_TRUE(fp8_grad_fast_accum_switch());
  EXPECT_TRUE(attention_dq_writer_switch());
  EXPECT_TRUE(attention_autotune_switch());
  EXPECT_NO_THROW(check_ops_switches());
}

TEST(OpsSwitchesTest, EachSwitchReadsItsVariable) {
  {
    ScopedEnv env("SHARDTRAIN_PROFILE_OPS", "1");
    EXPECT_TRUE(profile_ops_switch());
  }
  {
    ScopedEnv env("SHARDTRAIN_GEMM_AUTOTUNE", "0");
    EXPECT_FALSE(gemm_autotune_switch());
  }
  {
    ScopedEnv env("SHARDTRAIN_MOE_GEMM", "cublas");
    EXPECT_EQ(moe_gemm_switch(), MoeGemmChoice::kCublas);
  }
  {
    ScopedEnv env("SHARDTRAIN_MOE_GEMM", "wgmma");
    EXPECT_EQ(moe_gemm_switch(), MoeGemmChoice::kWgmma);
  }
  {
    ScopedEnv env("SHARDTRAIN_LORA_KERNELS", "1");
    EXPECT_TRUE(lora_kernels_switch());
  }
  {
    ScopedEnv env("SHARDTRAIN_FP8_FUSED_SWIGLU", "0");
    EXPECT_FALSE(fp8_fused_swiglu_switch());
  }
  {
    ScopedEnv env("SHARDTRAIN_FP8_GRAD_FAST_ACCUM", "0");
    EXPECT_FALSE(fp8_grad_fast_accum_switch());
  }
  for (const char* value : {"0", "1"}) {
    ScopedEnv keep("SHARDTRAIN_FP8_KEEP_DOWN_INPUT", value);
    EXPECT_EQ(fp8_keep_down_input_switch(), value[0] == '1');
  }
  for (const char* value : {"0", "1"}) {
    ScopedEnv writer("SHARDTRAIN_ATTENTION_DQ_WRITER", value);
    EXPECT_EQ(attention_dq_writer_switch(), value[0] == '1');
  }
  for (const char* value : {"0", "1"}) {
    ScopedEnv tune("SHARDTRAIN_ATTENTION_AUTOTUNE", value);
    EXPECT_EQ(attention_autotune_switch(), value[0] == '1');
  }
  EXPECT_FALSE(ops_aside_switch(false));  // unset: the caller's default (one rank: on)
  EXPECT_TRUE(ops_aside_switch(true));
  {
    ScopedEnv aside("SHARDTRAIN_OPS_ASIDE", "1");
    EXPECT_TRUE(ops_aside_switch(false));
  }
  {
    ScopedEnv aside("SHARDTRAIN_OPS_ASIDE", "0");
    EXPECT_FALSE(ops_aside_switch(true));
  }
  EXPECT_EQ(aside_gemm_sms_switch(), 0);
  for (const int sms : {0, 8, 16, 24, 32}) {
    ScopedEnv gemm_sms("SHARDTRAIN_ASIDE_GEMM_SMS", std::to_string(sms));
    EXPECT_EQ(aside_gemm_sms_switch(), sms);
  }
  EXPECT_EQ(gemm_search_switch(), GemmSearch::kTop8);
  {
    ScopedEnv search("SHARDTRAIN_GEMM_SEARCH", "wide");
    EXPECT_EQ(gemm_search_switch(), GemmSearch::kWide);
  }
  {
    ScopedEnv search("SHARDTRAIN_GEMM_SEARCH", "split-k");
    EXPECT_EQ(gemm_search_switch(), GemmSearch::kSplitK);
  }
}

TEST(OpsSwitchesTest, CheckRefusesAnyMalformedSwitch) {
  for (const char* name :
       {"SHARDTRAIN_PROFILE_OPS", "SHARDTRAIN_GEMM_AUTOTUNE", "SHARDTRAIN_MOE_GEMM",
        "SHARDTRAIN_LORA_KERNELS", "SHARDTRAIN_FP8_FUSED_SWIGLU", "SHARDTRAIN_FP8_GRAD_FAST_ACCUM",
        "SHARDTRAIN_FP8_KEEP_DOWN_INPUT", "SHARDTRAIN_ATTENTION_DQ_WRITER",
        "SHARDTRAIN_ATTENTION_AUTOTUNE", "SHARDTRAIN_GEMM_SEARCH", "SHARDTRAIN_OPS_ASIDE",
        "SHARDTRAIN_ASIDE_GEMM_SMS"}) {
    ScopedEnv env(name, "maybe");
    try {
      check_ops_switches();
      ADD_FAILURE() << name << "=maybe accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace shardtrain
