#!/usr/bin/env bash
# Every GPU test on the GPU machine (through the device tool, carrying .devkit; after
# build_on_device.sh, or builds $BUILD_DIR itself when a binary is missing): each gpu test binary
# (gpu_test_names in common.sh) under a 150 s timeout, one log, then a summary line (passed,
# failed, the GPU-vs-CPU training parity figures) and the first failures.
#   GPU_TESTS_LIMITS="l4 a100"  also runs every binary with the dispatcher told that GPU kind's
#                               limits (SHARDTRAIN_TEST_DEVICE_LIMITS, read by the tests'
#                               ops/testing/test_device_limits.h): the kernel configurations
#                               of an L4 or A100 on this GPU
#   GPU_TESTS_TIMING=1          also the kernel timings at the benchmark shapes (the DISABLED_
#                               tests of cuda_ops_throughput_gpu_test; attention lines also in
#                               $OUT/attention-timing.txt)
#   GPU_TESTS_SANITIZER=1       also compute-sanitizer memcheck and racecheck on the attention
#                               kernel tests
# A suite that times out (rc 124) in the attention tests is a stuck pipeline: rebuild with
# SHARDTRAIN_CMAKE_ARGS=-DSHARDTRAIN_DEBUG_PIPELINES=ON to have the wait that never ended named.
# Usage: tools/device/gpu_tests.sh; exit status 1 when a test failed.
source "$(dirname "$0")/common.sh"
mapfile -t tests < <(gpu_test_names)
missing=()
for t in "${tests[@]}"; do [[ -x $build/$t ]] || missing+=("$t"); done
if ((${#missing[@]})); then build_gpu "${tests[@]}" || exit 1; fi
status=0
suite() {  # NAME [ENV...]: every binary, one log; prints the summary
  local name=$1
  shift
  for t in "${tests[@]}"; do
    echo "== $t"
    env OPENBLAS_NUM_THREADS=8 "$@" timeout 150 "$build/$t" 2>&1
    echo "rc $?"
  done >"$out/gpu-tests-$name.log"
  local passed failed
  passed=$(grep -h "^\[  PASSED  \]" "$out/gpu-tests-$name.log" | awk '{s += $4} END {print s + 0}')
  failed=$(grep -c "^\[  FAILED  \] [A-Za-z]" "$out/gpu-tests-$name.log")
  echo "gpu tests ($name): $passed passed, $failed failed ($(elapsed) s); parity:" \
    "$(grep -o 'largest relative difference [0-9.e-]*' "$out/gpu-tests-$name.log" | awk '{print $4}' | tr '\n' ' ')"
  grep "^\[  FAILED  \] [A-Za-z]" "$out/gpu-tests-$name.log" | head -8
  grep -B1 "^rc 124" "$out/gpu-tests-$name.log" | head -4
  ((failed == 0)) && ! grep -q "^rc [1-9]" "$out/gpu-tests-$name.log" || status=1
}
suite present
for kind in ${GPU_TESTS_LIMITS:-}; do suite "$kind" SHARDTRAIN_TEST_DEVICE_LIMITS="$kind"; done
if [[ -n ${GPU_TESTS_TIMING:-} ]]; then
  OUT=$out "$build/cuda_ops_throughput_gpu_test" --gtest_also_run_disabled_tests \
    >"$out/kernel-timing.log" 2>&1
  "$build/cuda_ops_gpu_test" --gtest_also_run_disabled_tests \
    --gtest_filter='*AdamWMultiThroughput*' >>"$out/kernel-timing.log" 2>&1
  grep -E "^(attention|linear|rmsnorm|cross|optimizer)" "$out/kernel-timing.log" | head -16
fi
if [[ -n ${GPU_TESTS_SANITIZER:-} ]]; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  for tool in memcheck racecheck; do
    timeout 240 "$sanitizer" --tool "$tool" "$build/cuda_attention_gpu_test" \
      --gtest_filter='*ForEveryKernel*' >"$out/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc $? $(grep -E 'ERROR SUMMARY' "$out/sanitizer-$tool.log" | tail -1)"
  done
fi
exit "$status"
