// The environment switches that change how ops run, for measuring one choice against another in
// one build and for ruling a choice out when something looks wrong. None changes what is computed
// beyond rounding and the order of sums. Each variable is read here and nowhere else, strictly
// (core/env_switch.h: a misspelt value is an Error naming the variable, exit 2); check_ops_switches
// reads them all when the ops are made (make_ops), so a bad value stops the run before any work,
// on every backend, even where the switch would not apply.
//
//   SHARDTRAIN_PROFILE_OPS=1        per-op device time (ProfiledOps), logged at exit; default off
//   SHARDTRAIN_GEMM_AUTOTUNE=0      cuBLASLt's first heuristic candidate for every bf16 and FP8
//                                   GEMM instead of the fastest of the candidates timed once per
//                                   shape; default on
//   SHARDTRAIN_GEMM_SEARCH=wide     the bf16 GEMMs' autotuning times cuBLASLt's top 32 candidates
//                                   instead of its top 8; =split-k: the top 8 plus split-K
//                                   variants of every key with a deep inner dimension (the
//                                   projections' weight gradients fill fewer tiles than SMs);
//                                   default (=top8) neither
//   SHARDTRAIN_ATTENTION_AUTOTUNE=0 the Hopper attention forward runs the dispatch table's
//                                   warp-specialised kernel instead of the faster of it and the
//                                   cp.async wgmma kernel, timed once per shape
//                                   (cuda_attention_tuning.h); default on
//   SHARDTRAIN_MOE_GEMM=cublas      the experts' forward and d(x) GEMMs through cuBLAS grouped
//                                   GEMMs instead of our Hopper expert GEMM (=wgmma, the default)
//   SHARDTRAIN_LORA_KERNELS=1       LoRA's rank-wide products on the rank-wide bf16 kernels
//                                   instead of cuBLASLt (measured slower); default off
//   SHARDTRAIN_FP8_FUSED_SWIGLU=0   FP8's SwiGLU casts as separate passes; default on (fused)
//   SHARDTRAIN_FP8_GRAD_FAST_ACCUM=0  FP8 gradient GEMMs without cuBLASLt's fast accumulation;
//                                   default on
//   SHARDTRAIN_FP8_KEEP_DOWN_INPUT=0  the MLP's down projection saves its bf16 input and casts
//                                   x^T in backward instead of keeping forward's FP8 x^T;
//                                   default on
//   SHARDTRAIN_ATTENTION_DQ_WRITER=0  the Hopper attention backward adds dQ through the
//                                   consumers' fp32 atomics instead of a writer warp's TMA
//                                   reductions; default on (the writer: head dim 64 backward
//                                   -8.5%, 128 unchanged on an H100; cuda_attention_ws_backward.cu)
//   SHARDTRAIN_OPS_ASIDE=1|0        work the ops may run aside (Ops::sum_squares_aside: the
//                                   gradient norm's terms in backward; Ops::adamw_multi_aside:
//                                   the update per unit beside the next forward) runs on a second
//                                   CUDA stream beside the compute stream's kernels, which get the
//                                   higher priority. Default: on for a job of one rank
//                                   (make_rank_ops; +0.6-1.2% in three H100 measurements,
//                                   bench/RESULTS.md), off with several ranks (the compute
//                                   stream's priority above NCCL's is unmeasured there) and for
//                                   backends made outside a job (tests)
//   SHARDTRAIN_ASIDE_GEMM_SMS=N     with SHARDTRAIN_OPS_ASIDE=1: while an optimizer update runs
//                                   aside, the bf16 GEMMs are planned for N fewer SMs
//                                   (cuBLASLt's SM count target), leaving them to the update;
//                                   N = 0 (default), 8, 16, 24 or 32; unmeasured
//
// Each accessor reads the environment when called (a test may flip a switch between calls);
// callers on hot paths that need a value fixed for the process keep their own copy.
#pragma once

namespace shardtrain {

bool profile_ops_switch();
bool gemm_autotune_switch();

enum class GemmSearch { kTop8, kWide, kSplitK };
GemmSearch gemm_search_switch();
bool attention_autotune_switch();

enum class MoeGemmChoice { kWgmma, kCublas };
MoeGemmChoice moe_gemm_switch();

bool lora_kernels_switch();
bool fp8_fused_swiglu_switch();
bool fp8_grad_fast_accum_switch();
bool fp8_keep_down_input_switch();
bool attention_dq_writer_switch();
// default_on: the caller's default when the variable is unset (one rank: on).
bool ops_aside_switch(bool default_on);
// 0, 8, 16, 24 or 32.
int aside_gemm_sms_switch();

// Reads every switch above; throws Error naming the first malformed one.
void check_ops_switches();

}  // namespace shardtrain
