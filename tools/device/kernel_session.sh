#!/usr/bin/env bash
# One GPU-machine call that checks the open kernel work end to end (through the device tool,
# carrying .devkit, or a tarball of it extracted first): the build, the attention kernel tests
# first (a failure of the kernels every run uses ends the call, since every bench row runs them;
# one of the backward's dQ writer alone, the Hopper default, is reported, and the call goes on
# with the dQ atomics everywhere: SHARDTRAIN_TEST_SKIP_DQ_WRITER=1 for the tests,
# SHARDTRAIN_ATTENTION_DQ_WRITER=0 for every run after, no writer timing),
# every GPU test (gpu_tests.sh), the kernel timings at the bench shapes (the DISABLED_ timings of
# attention, the MoE expert GEMMs, LoRA's skinny products, the FP8 linears and the projections'
# cuBLASLt choices), then bench rows
# with op profiles in the order given, each group skipped once the call's budget (BUDGET_S,
# default 560 s) has no room for it, and each run of a group that the group's longest run so far
# would carry past the budget (bench/run_bench.sh BENCH_DEADLINE: no run cut before its
# PyTorch), and last an FP8 op profile with each switch of ops/ops_switches.h named in
# FP8_BEFORE set to 0 (the before of that choice, in the same call).
#   TIMINGS="attention moe lora fp8 gemm"   which timings (default all five; empty: none)
#   GPU_TESTS=0                the attention tests only, not every GPU test (and only their
#                              binaries and the timings' are built): ~60-90 s less for a call
#                              that benches kernels a call before has tested
#   GPU_TESTS="a_gpu_test ..."  the attention tests and these test binaries only (e.g.
#                              "cuda_attention_mask_gpu_test cuda_gemma_ops_gpu_test" for a change
#                              to the mma.sync kernels); any failure ends the call before the
#                              benches
#   FP8_BENCH, MOE_BENCH, LORA_BENCH, BF16_BENCH   the runs of each bench group, in this order
#                              (run_bench.sh's RUN syntax; defaults below; empty: skipped).
#                              MOE_BENCH runs only on a GPU with more than 120 GB (the
#                              Qwen3-30B-A3B shape needs ~100 GiB)
#   TESTS_AFTER="a_gpu_test ..."  test binaries built with the rest but run after the benches
#                              (tests that never ran on a GPU: a failure of theirs costs no bench)
#   FP8_BEFORE="GEMM_AUTOTUNE FP8_KEEP_DOWN_INPUT"   the switches whose before is profiled
#   BENCH_PROFILE=0            the bench rows without their op profiles (~20 s a run less)
# Logs: $OUT/logs.tgz, every log of the call in one file (the device tool returns at most 8
# files, and none whose name has the bench folders' @ or +); the summary is the output.
# Usage: tools/device/kernel_session.sh
source "$(dirname "$0")/common.sh"
gpu_info
timings=${TIMINGS-attention moe lora fp8 gemm}
gpu_tests=${GPU_TESTS:-1}
listed=()  # GPU_TESTS given as test names
[[ $gpu_tests == 0 || $gpu_tests == 1 ]] || read -r -a listed <<<"$gpu_tests"
if [[ $gpu_tests != 1 ]]; then
  tests=(cuda_attention_gpu_test "${listed[@]}")
  [[ $timings == *attention* ]] && tests+=(cuda_ops_throughput_gpu_test)
  [[ $timings == *moe* ]] && tests+=(cuda_moe_gpu_test)
  [[ $timings == *lora* ]] && tests+=(cuda_lora_gpu_test)
  [[ $timings == *fp8* ]] && tests+=(cuda_fp8_throughput_gpu_test)
  [[ $timings == *gemm* ]] && tests+=(cuda_gemm_gpu_test)
else
  mapfile -t tests < <(gpu_test_names)
fi
read -r -a tests_after <<<"${TESTS_AFTER:-}"
build_gpu "${tests[@]}" "${tests_after[@]}" || exit 1
echo "build: $(elapsed) s"
attention_tests() {  # LOG: the attention kernel tests; their status
  timeout 120 "$build/cuda_attention_gpu_test" >"$out/$1" 2>&1
  local rc=$?
  echo "attention tests rc $rc ($(elapsed) s), $1"
  ((rc == 0)) || grep -E "^\[  FAILED  \] [A-Za-z]|Failure" "$out/$1" | head -20
  return $rc
}
writers="0 1"
if ! attention_tests attention-tests.log; then
  export SHARDTRAIN_TEST_SKIP_DQ_WRITER=1 SHARDTRAIN_ATTENTION_DQ_WRITER=0
  attention_tests attention-tests-without-writer.log || exit 1
  echo "only the dQ writer failed: going on with the dQ atomics (SHARDTRAIN_ATTENTION_DQ_WRITER=0)"
  writers="0"
fi
if [[ $gpu_tests == 1 ]]; then
  tools/device/gpu_tests.sh
else
  for t in "${listed[@]}"; do
    timeout 120 "$build/$t" >"$out/$t.log" 2>&1
    rc=$?
    summary=$(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | head -2 | tr '\n' ' ')
    echo "$t rc $rc ($(elapsed) s): $summary"
    ((rc == 0)) || { grep -E "^\[  FAILED  \] [A-Za-z]|Failure" "$out/$t.log" | head -20; exit 1; }
  done
  echo "every other GPU test skipped (GPU_TESTS=$gpu_tests)"
fi
# Attention under the backward's dQ atomics (0) and its dQ writer (1, ops/ops_switches.h).
for writer in $writers; do
  [[ $timings == *attention* ]] && room 40 "attention timing" || break
  SHARDTRAIN_ATTENTION_DQ_WRITER=$writer OUT=$out timeout 30 "$build/cuda_ops_throughput_gpu_test" \
    --gtest_also_run_disabled_tests --gtest_filter='*AttentionThroughput*' \
    >"$out/attention-timing-writer$writer.log" 2>&1
  echo "attention timing, dQ writer $writer: rc $?"
  grep "^attention" "$out/attention-timing-writer$writer.log" | head -8
done
if [[ $timings == *moe* ]] && room 60 "moe timing"; then
  timeout 40 "$build/cuda_moe_gpu_test" --gtest_also_run_disabled_tests \
    --gtest_filter='*Timing*' >"$out/moe-timing.log" 2>&1
  echo "moe timing rc $?"; grep -i "tflop" "$out/moe-timing.log" | head -24
fi
if [[ $timings == *lora* ]] && room 60 "lora timing"; then
  timeout 40 "$build/cuda_lora_gpu_test" --gtest_also_run_disabled_tests \
    --gtest_filter='*DISABLED_*' >"$out/lora-timing.log" 2>&1
  echo "lora timing rc $?"; grep -E " us|ms" "$out/lora-timing.log" | head -30
fi
if [[ $timings == *fp8* ]] && room 70 "fp8 timing"; then
  OUT=$out timeout 50 "$build/cuda_fp8_throughput_gpu_test" --gtest_also_run_disabled_tests \
    --gtest_filter='*LinearCastsAndGemms*:*KeptSwiglu*' >"$out/fp8-timing.log" 2>&1
  echo "fp8 timing rc $?"; grep -E "FP8 / bf16|Down projection" "$out/fp8-timing.log" | head -30
fi
if [[ $timings == *gemm* ]] && room 60 "gemm timing"; then
  timeout 50 "$build/cuda_gemm_gpu_test" --gtest_also_run_disabled_tests \
    --gtest_filter='*DISABLED_*' >"$out/gemm-timing.log" 2>&1
  echo "gemm timing rc $?"; grep -E "tokens|per step|^  " "$out/gemm-timing.log" | head -40
fi
bench() {  # NAME SECONDS RUN...: a bench group when SECONDS fit
  local name=$1 need=$2
  shift 2
  (($#)) && room "$need" "bench $name" || return 0
  BENCH_EAGER=0 BENCH_PROFILE=${BENCH_PROFILE:-1} BENCH_DEADLINE=$((start + budget)) \
    timeout $((budget - $(elapsed))) bench/run_bench.sh \
    "$root/$build/shardtrain" "$out/bench-$name" "$@" >"$out/bench-$name.log" 2>&1
  echo "bench $name (rc $?, $(elapsed) s):"
  cat "$out/bench-$name/table.txt"
  grep "host waited" "$out/bench-$name.log"
  tail -3 "$out/bench-$name.log"
}
# shellcheck disable=SC2086  # the run lists split on spaces
bench fp8 150 ${FP8_BENCH-qwen2.5-1.5b@4096x2+fp8 qwen2.5-1.5b@4096x2}
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)
((gpu_mib > 120000)) || MOE_BENCH=
# shellcheck disable=SC2086
bench moe 170 ${MOE_BENCH-qwen3-30b-a3b-8l@4096x1+accum8}
# shellcheck disable=SC2086
bench lora 100 ${LORA_BENCH-llama3.2-1b@4096x1+lora}
# shellcheck disable=SC2086
bench bf16 90 ${BF16_BENCH-}
tokens=$out/bench-fp8/tokens-qwen2.5-1.5b-4096.bin
for switch in ${FP8_BEFORE-GEMM_AUTOTUNE FP8_KEEP_DOWN_INPUT}; do
  [[ -f $tokens ]] && room 25 "fp8 profile with SHARDTRAIN_$switch=0" || continue
  env "SHARDTRAIN_$switch=0" SHARDTRAIN_PROFILE_OPS=1 timeout $((budget - $(elapsed))) \
    "$build/shardtrain" train --config bench/bench.toml --model.path=bench/shapes/qwen2.5-1.5b \
    --data.path="$tokens" --data.seq_len=4096 --train.micro_batch=2 --train.precision=fp8 \
    --train.steps=3 >"$out/bench-fp8/profile-without-$switch.log" 2>&1
  echo "fp8 profile with SHARDTRAIN_$switch=0: rc $? ($(elapsed) s)"
done
for t in "${tests_after[@]}"; do
  room 30 "$t (after the benches)" || continue
  timeout $((budget - $(elapsed))) "$build/$t" >"$out/$t.log" 2>&1
  rc=$?
  summary=$(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | head -2 | tr '\n' ' ')
  echo "$t rc $rc ($(elapsed) s, after the benches): $summary"
  ((rc == 0)) || grep -E "^\[  FAILED  \] [A-Za-z]|Failure" "$out/$t.log" | head -20
done
echo "session: $(elapsed) s"
(cd "$out" && tar czf /tmp/kernel-session-logs.tgz . && find . -mindepth 1 -delete &&
  mv /tmp/kernel-session-logs.tgz logs.tgz)
