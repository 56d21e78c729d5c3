#!/usr/bin/env bash
# On the GPU machine (through the device tool, carrying .carry with the devkit): our masked
# attention against PyTorch's FlexAttention, and GPU-vs-CPU training parity (dense, LoRA, MoE).
#  1. builds cuda_attention_flex_gpu_test, cpu_attention_flex_test and train_parity_gpu_test
#     (with the product, build_gpu in common.sh);
#  2. writes the FlexAttention reference files (tools/device/flex_attention_reference.py:
#     torch.compile'd flex_attention forward + backward under causal & document & window block
#     masks, GQA, D 64 / 128 / 256, T up to 4096) into $FLEX_DIR (default /tmp/flex-reference);
#  3. runs, with SHARDTRAIN_TEST_FLEX_DIR=$FLEX_DIR, cuda_attention_flex_gpu_test (every attention
#     kernel against FlexAttention and the float64 truth, and the kernel-time table against
#     FlexAttention's), train_parity_gpu_test (50 steps GPU vs CPU: five dense fixtures, three
#     LoRA cases, three MoE fixtures), then, when the call's budget (BUDGET_S, common.sh) has
#     room, cpu_attention_flex_test (the fp32 CPU reference against the same files).
# Logs: $OUT/flex-parity.tgz (every log, with the CPU's and every kernel's per-tensor lines) and
# a summary on stdout: the reference script's lines (FlexAttention against float64), the
# default kernels' per-tensor errors against FlexAttention, every kernel's largest, the timing
# lines, the parity lines, failures. Exit status 1 when anything failed.
# Usage: tar -xzf .carry/devkit.tgz && tools/device/flex_parity_run.sh
#        (SKIP_BUILD=1 when build-gpu already holds the three tests)
source "$(dirname "$0")/common.sh"
flex_dir=${FLEX_DIR:-/tmp/flex-reference}
status=0
gpu_info
if [[ -z ${SKIP_BUILD:-} ]]; then
  build_gpu cuda_attention_flex_gpu_test cpu_attention_flex_test train_parity_gpu_test || exit 1
fi
echo "built: $(elapsed) s"

timeout 300 python3 tools/device/flex_attention_reference.py "$flex_dir" >"$out/flex-reference.log" 2>&1 ||
  { status=1; echo "flex_attention_reference.py failed:"; tail -20 "$out/flex-reference.log"; }
grep '^{' "$out/flex-reference.log"
echo "reference files: $(elapsed) s"

export SHARDTRAIN_TEST_FLEX_DIR=$flex_dir OPENBLAS_NUM_THREADS=8
run() {  # LOG SECONDS BINARY ARGS...: one test binary under a timeout, its log in $out
  local log=$1 seconds=$2
  shift 2
  timeout "$seconds" "$@" >"$out/$log" 2>&1
  local rc=$?
  echo "== $(basename "$1"): rc $rc ($(elapsed) s)"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]" "$out/$log" | head -12
  ((rc == 0)) || status=1
}
run flex-gpu.log 200 "$build/cuda_attention_flex_gpu_test" --gtest_also_run_disabled_tests
grep -E "gpu\[default\] vs flex|largest relative L2|^\{" "$out/flex-gpu.log"
run train-parity.log 240 "$build/train_parity_gpu_test"
grep -E "largest relative|adapters:" "$out/train-parity.log"
# The CPU reference against the same files last: the least news, and the call's time may be
# short by then.
room 60 cpu_attention_flex_test && run flex-cpu.log 120 "$build/cpu_attention_flex_test"

tar -czf "$out/flex-parity.tgz" -C "$out" $(cd "$out" && ls ./*.log) 2>/dev/null
echo "done: $(elapsed) s, status $status"
exit $status
