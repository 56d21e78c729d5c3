#!/usr/bin/env bash
# One GPU-machine call that checks a merged main end to end when device time is short (through
# the device tool, carrying .devkit): one sm_90a build (build-gpu), then, each stage skipped once
# the call passes its time guard (FINAL_BUDGET_S, default 540 s):
#   1. the gpu tests (cuda_dispatch, cuda ops, GPU-vs-CPU training parity, host-staged FSDP,
#      NCCL, the one-rank memory levers);
#   2. tools/device/perf_session.sh (Llama-2-7B on one GPU, ours against compiled PyTorch);
#   3. tools/device/metrics_vs_nvidia_smi.sh (DCGM-named /metrics values against nvidia-smi);
#   4. bench/run_bench.sh for Qwen2.5-1.5B (ours against compiled PyTorch FSDP2, same call).
# Prints a short summary per stage; logs under $OUT (one archive).
# Usage: tools/device/final_session.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
cd "$root"
start=$(date +%s) budget=${FINAL_BUDGET_S:-540}
elapsed() { echo $(($(date +%s) - start)); }
room() { (($(elapsed) + $1 < budget)) || { echo "$2: skipped (call at $(elapsed) s)"; return 1; }; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
tests=(cuda_dispatch_test cuda_ops_gpu_test train_parity_gpu_test fsdp_host_staged_gpu_test
  nccl_comm_gpu_test memory_levers_gpu_test)
SHARDTRAIN_CUDA_ARCH=90a tools/device/build_on_device.sh build-gpu shardtrain "${tests[@]}" \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $(elapsed) s"

if room 60 "gpu tests"; then
  for t in "${tests[@]}"; do
    [[ -x build-gpu/$t ]] || { echo "== $t: not built"; continue; }
    echo "== $t"
    OPENBLAS_NUM_THREADS=8 timeout 150 "build-gpu/$t" 2>&1
  done >"$out/gpu-tests.log"
  passed=$(grep -h "^\[  PASSED  \]" "$out/gpu-tests.log" | awk '{s += $4} END {print s + 0}')
  failed=$(grep -c "^\[  FAILED  \] [A-Za-z]" "$out/gpu-tests.log")
  echo "gpu tests: $passed passed, $failed failed ($(elapsed) s); parity:" \
    "$(grep -o 'largest relative difference [0-9.e-]*' "$out/gpu-tests.log" | awk '{print $4}' | tr '\n' ' ')"
  grep "^\[  FAILED  \] [A-Za-z]" "$out/gpu-tests.log" | head -8
fi

if room 120 "perf_session"; then
  mkdir -p "$out/perf-session"
  PERF_SKIP_TESTS=1 PERF_BIN=build-gpu/shardtrain PERF_BUDGET_S=$((budget - $(elapsed) - 200)) OUT=$out/perf-session \
    timeout $((budget - $(elapsed))) tools/device/perf_session.sh >"$out/perf.txt" 2>&1
  echo "perf_session (rc $?, $(elapsed) s):"
  tail -12 "$out/perf.txt"
fi

if room 60 "metrics"; then
  OUT=$out/metrics timeout 90 bash -c 'mkdir -p "$OUT" && tools/device/metrics_vs_nvidia_smi.sh' \
    >"$out/metrics.txt" 2>&1
  echo "metrics vs nvidia-smi (rc $?, $(elapsed) s):"
  tail -14 "$out/metrics.txt"
fi

if room 100 "bench qwen2.5-1.5b"; then
  timeout $((budget - $(elapsed))) bench/run_bench.sh build-gpu/shardtrain "$out/bench" qwen2.5-1.5b \
    >"$out/bench.txt" 2>&1
  echo "bench (rc $?, $(elapsed) s):"
  tail -6 "$out/bench.txt"
fi
echo "call: $(elapsed) s"
(cd "$out" && tar czf /tmp/final-logs.tgz . && find . -mindepth 1 -delete && mv /tmp/final-logs.tgz .)
