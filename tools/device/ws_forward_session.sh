#!/usr/bin/env bash
# GPU-machine calls (through the device tool, carrying .devkit) that check and measure the
# warp-specialised attention kernels (src/ops/cuda/cuda_attention_ws_{forward,backward}.cu,
# picked under SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma-ws) before they may become the default.
# Both modes first build (sm_90a, build-gpu; kept between calls on a warm machine) the dispatch
# and cuda-op gpu tests and shardtrain.
#   check: the attention gpu tests (every forward and backward kernel, the hook's pick), each
#          binary under a timeout so that a deadlocked pipeline costs 90 s, not the call (then a
#          build with -DSHARDTRAIN_DEBUG_PIPELINES=ON names the mbarrier wait that never ended);
#          compute-sanitizer memcheck, racecheck (shared memory) and synccheck (barriers), 100 s
#          each at most, on the forward and backward kernel tests; kernel timings at the
#          benchmark shapes (DISABLED_AttentionThroughputBenchShape: default wgmma, wgmma-ws,
#          mma.sync side by side).
#   bench: bench/run_bench.sh for each RUN with and without +ws (one compiled-PyTorch
#          measurement per shape, reused by both rows of the call) while the time guard
#          (WS_BUDGET_S, default 570 s) allows; the two runs of a shape train the same job, so
#          their per-step losses are compared too (the model-level check: the tiny models of
#          train_parity_gpu_test have head dims 16 and 48, which take the SIMT kernels).
# Prints a short summary per stage; logs under $OUT (one archive).
# Usage: tools/device/ws_forward_session.sh check
#        tools/device/ws_forward_session.sh bench [RUN ...]  (default: qwen2.5-1.5b llama3.2-1b@16384x1)
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
tests=(cuda_dispatch_test cuda_ops_gpu_test)
SHARDTRAIN_CUDA_ARCH=90a tools/device/build_on_device.sh build-gpu shardtrain "${tests[@]}" \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $(elapsed) s"

attention='*Attention*:*WgmmaWs*:CudaDispatch.*'
if [[ $mode == check ]] && room 100 "attention tests"; then
  for t in cuda_dispatch_test cuda_ops_gpu_test; do
    echo "== $t"
    timeout 90 "build-gpu/$t" --gtest_filter="$attention" 2>&1
    echo "rc $?"
  done >"$out/attention-tests.log"
  grep -E "^rc |^\[  (PASSED|FAILED|SKIPPED) " "$out/attention-tests.log" | head -12
  grep -E "Failure|Expected|which is|forward kernel|error" "$out/attention-tests.log" | head -16
  # A hang (rc 124): the diagnostic build says which mbarrier wait never completed.
  if grep -q "^rc 124" "$out/attention-tests.log" && room 150 "pipeline diagnosis"; then
    SHARDTRAIN_CMAKE_ARGS=-DSHARDTRAIN_DEBUG_PIPELINES=ON SHARDTRAIN_CUDA_ARCH=90a \
      tools/device/build_on_device.sh build-gpu-debug cuda_ops_gpu_test \
      >"$out/build-debug.log" 2>&1 &&
      SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma-ws timeout 60 build-gpu-debug/cuda_ops_gpu_test \
        --gtest_filter="$attention" >"$out/attention-debug.log" 2>&1
    grep -m5 "mbarrier wait never completed" "$out/attention-debug.log"
  fi
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ $mode == check && -n $sanitizer ]] && room 320 "compute-sanitizer"; then
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
for run in "${runs[@]}"; do bench_runs+=("$run" "$run+ws"); done
if [[ $mode == bench ]] && room 200 "bench"; then
  # Eager PyTorch left out (BENCH_EAGER=0): four runs of ours and two compiled PyTorch runs
  # already fill most of a 10-minute call.
  BENCH_EAGER=0 timeout $((budget - $(elapsed))) bench/run_bench.sh build-gpu/shardtrain "$out/bench" \
    "${bench_runs[@]}" >"$out/bench.txt" 2>&1
  echo "bench (rc $?, $(elapsed) s):"
  cat "$out/bench/table.txt"
  for run in "${runs[@]}"; do
    a=$out/bench/$run-metrics.jsonl b=$out/bench/$run+ws-metrics.jsonl
    [[ -f $a && -f $b ]] && echo "$run: largest relative loss difference default vs +ws:" \
      "$(python3 bench/benchlib.py loss-diff "$a" "$b")"
  done
fi
echo "call: $(elapsed) s"
(cd "$out" && tar czf /tmp/ws-logs.tgz . && find . -mindepth 1 -delete && mv /tmp/ws-logs.tgz .)
