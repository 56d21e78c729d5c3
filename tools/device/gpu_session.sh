#!/usr/bin/env bash
# The GPU-machine session that checks a tree end to end (through the device tool, carrying
# .devkit): one build ($BUILD_DIR, default build-gpu; SHARDTRAIN_CUDA_ARCH, default 90a), every
# gpu test (tools/device/gpu_tests.sh), then bench/run_bench.sh: ours against compiled (and
# eager) PyTorch FSDP2 in the same call, with a per-op profile of ours (BENCH_PROFILE=1). Each
# stage after the build is skipped once the call passes its budget (BUDGET_S, default 560 s).
# Logs under $OUT: build-*.log, gpu-tests-*.log, bench/ (table.txt, per-run logs and profiles),
# bench-table.txt.
#   SKIP_TESTS=1 / SKIP_BENCH=1 leave a stage out; GPU_TESTS_LIMITS, GPU_TESTS_TIMING,
#   GPU_TESTS_SANITIZER are passed to gpu_tests.sh; BENCH_* to run_bench.sh.
# Usage: tools/device/gpu_session.sh [bench RUN ...]   (run_bench.sh's RUN syntax; default its own)
source "$(dirname "$0")/common.sh"
gpu_info
mapfile -t tests < <(gpu_test_names)
build_gpu "${tests[@]}" || exit 1
echo "build: $(elapsed) s"
status=0
if [[ -z ${SKIP_TESTS:-} ]] && room 90 "gpu tests"; then
  tools/device/gpu_tests.sh || status=1
fi
if [[ -z ${SKIP_BENCH:-} ]] && room 120 "bench"; then
  BENCH_PROFILE=${BENCH_PROFILE:-1} timeout $((budget - $(elapsed))) \
    bench/run_bench.sh "$root/$build/shardtrain" "$out/bench" "$@" >"$out/bench.log" 2>&1
  echo "bench (rc $?, $(elapsed) s):"
  cp "$out/bench/table.txt" "$out/bench-table.txt" 2>/dev/null && cat "$out/bench-table.txt"
  tail -3 "$out/bench.log"
fi
echo "session: $(elapsed) s"
exit "$status"
