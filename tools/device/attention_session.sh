#!/usr/bin/env bash
# GPU-machine calls (through the device tool, carrying .devkit) for the warp-specialised attention
# kernels (src/ops/cuda/cuda_attention_ws_{forward,backward}.cu, the Hopper default since session
# 9; SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma runs the cp.async wgmma kernels they replaced).
# Both modes first build (sm_90a, build-gpu; kept between calls on a warm machine) shardtrain and
# the gpu tests.
#   check: every gpu test binary (the attention kernel tests cover every forward and backward
#          kernel; each binary under a timeout so that a deadlocked pipeline costs 150 s, not the
#          call, and then a build with -DSHARDTRAIN_DEBUG_PIPELINES=ON names the mbarrier wait
#          that never ended); with WS_SANITIZER=1 compute-sanitizer memcheck, racecheck and
#          synccheck on the attention kernel tests; kernel timings at the benchmark shapes
#          (DISABLED_AttentionThroughputBenchShape: default, cp.async wgmma, mma.sync).
#   bench: bench/run_bench.sh for each RUN and RUN+wgmma (one compiled-PyTorch measurement per
#          shape, reused by both rows of the call; eager PyTorch unless BENCH_EAGER=0) while the
#          time guard (WS_BUDGET_S, default 570 s) allows; the two runs of a shape train the same
#          job, so their per-step losses are compared too (the model-level check of the kernels:
#          train_parity_gpu_test's tiny models have head dims 16 and 48, which take SIMT kernels).
# Prints a short summary per stage; logs under $OUT (one archive).
# Usage: tools/device/attention_session.sh check
#        tools/device/attention_session.sh bench [RUN ...]  (default: qwen2.5-1.5b llama3.2-1b@16384x1)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
mode=${1:-}
[[ $mode == check || $mode == bench ]] || { sed -n '2,20p' "$0"; exit 2; }
shift
runs=("$@")
((${#runs[@]})) || runs=(qwen2.5-1.5b llama3.2-1b@16384x1)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
cd "$root"
start=$(date +%s) budget=${WS_BUDGET_S:-570}
elapsed() { echo $(($(date +%s) - start)); }
room() { (($(elapsed) + $1 < budget)) || { echo "$2: skipped (call at $(elapsed) s)"; return 1; }; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
git log -1 --format='commit %h %s' 2>/dev/null || true
tests=(cuda_dispatch_test cuda_ops_gpu_test train_parity_gpu_test fsdp_host_staged_gpu_test
  nccl_comm_gpu_test memory_levers_gpu_test)
SHARDTRAIN_CUDA_ARCH=90a tools/device/build_on_device.sh build-gpu shardtrain "${tests[@]}" \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $(elapsed) s"

attention='*Attention*:*WarpSpecialised*:CudaDispatch.*'
if [[ $mode == check ]] && room 100 "gpu tests"; then
  for t in "${tests[@]}"; do
    echo "== $t"
    OPENBLAS_NUM_THREADS=8 timeout 150 "build-gpu/$t" 2>&1
    echo "rc $?"
  done >"$out/gpu-tests.log"
  passed=$(grep -h "^\[  PASSED  \]" "$out/gpu-tests.log" | awk '{s += $4} END {print s + 0}')
  failed=$(grep -c "^\[  FAILED  \] [A-Za-z]" "$out/gpu-tests.log")
  echo "gpu tests: $passed passed, $failed failed ($(elapsed) s); rc: $(grep '^rc ' "$out/gpu-tests.log" | tr '\n' ' ')"
  grep "^\[  FAILED  \] [A-Za-z]" "$out/gpu-tests.log" | head -8
  grep -E "Failure|which is|did not run|error" "$out/gpu-tests.log" | head -12
  echo "parity: $(grep -o 'largest relative difference [0-9.e-]*' "$out/gpu-tests.log" | awk '{print $4}' | tr '\n' ' ')"
  # A hang (rc 124): the diagnostic build says which mbarrier wait never completed.
  if grep -q "^rc 124" "$out/gpu-tests.log" && room 150 "pipeline diagnosis"; then
    SHARDTRAIN_CMAKE_ARGS=-DSHARDTRAIN_DEBUG_PIPELINES=ON SHARDTRAIN_CUDA_ARCH=90a \
      tools/device/build_on_device.sh build-gpu-debug cuda_ops_gpu_test \
      >"$out/build-debug.log" 2>&1 &&
      timeout 60 build-gpu-debug/cuda_ops_gpu_test \
        --gtest_filter="$attention" >"$out/attention-debug.log" 2>&1
    grep -m5 "mbarrier wait never completed" "$out/attention-debug.log"
  fi
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ $mode == check && -n $sanitizer && -n ${WS_SANITIZER:-} ]] && room 320 "compute-sanitizer"; then
  for tool in memcheck racecheck synccheck; do
    timeout 100 "$sanitizer" --tool "$tool" build-gpu/cuda_ops_gpu_test \
      --gtest_filter='*ForwardForEveryKernel*:*BackwardForEveryKernel*' >"$out/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool (rc $?): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
      "$out/sanitizer-$tool.log" | tail -1)"
  done
fi
if [[ $mode == check ]] && room 40 "kernel timings"; then
  timeout 60 build-gpu/cuda_ops_gpu_test --gtest_also_run_disabled_tests \
    --gtest_filter='*AttentionThroughputBenchShape*' 2>&1 | grep "^attention" | tee "$out/timing.txt"
fi
bench_runs=()
for run in "${runs[@]}"; do bench_runs+=("$run" "$run+wgmma"); done
if [[ $mode == bench ]] && room 200 "bench"; then
  timeout $((budget - $(elapsed))) bench/run_bench.sh build-gpu/shardtrain "$out/bench" \
    "${bench_runs[@]}" >"$out/bench.txt" 2>&1
  echo "bench (rc $?, $(elapsed) s):"
  cat "$out/bench/table.txt"
  for run in "${runs[@]}"; do
    a=$out/bench/$run-metrics.jsonl b=$out/bench/$run+wgmma-metrics.jsonl
    [[ -f $a && -f $b ]] && echo "$run: largest relative loss difference warp-specialised vs cp.async wgmma:" \
      "$(python3 bench/benchlib.py loss-diff "$a" "$b")"
  done
fi
echo "call: $(elapsed) s"
(cd "$out" && tar czf /tmp/ws-logs.tgz . && find . -mindepth 1 -delete && mv /tmp/ws-logs.tgz .)
