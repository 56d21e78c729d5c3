#!/usr/bin/env bash
# One GPU-machine call for issue 22's long-context rows when device time is short (through the
# device tool, carrying .devkit): one sm_90a build of shardtrain (build-gpu), then
# bench/run_bench.sh with BENCH_PROFILE=1 (ours against compiled PyTorch FSDP2 in the same call,
# plus a separate 3-step per-op profile of ours) for each RUN, each skipped once the call passes
# its time guard (LONG_BUDGET_S, default 320 s; a run is started only with LONG_RUN_S, default
# 110 s, left). Prints the table and each profile's top lines; logs under $OUT (one archive).
# Usage: tools/device/long_context_session.sh [RUN ...]
#        (default: llama3.2-1b@16384x1 llama3.2-1b@16384x1+ckpt)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
runs=("$@")
((${#runs[@]})) || runs=(llama3.2-1b@16384x1 llama3.2-1b@16384x1+ckpt)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
cd "$root"
start=$(date +%s) budget=${LONG_BUDGET_S:-320} per_run=${LONG_RUN_S:-110}
elapsed() { echo $(($(date +%s) - start)); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
git log -1 --format='commit %h %s' 2>/dev/null || true
SHARDTRAIN_CUDA_ARCH=90a tools/device/build_on_device.sh build-gpu shardtrain >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
echo "build: $(elapsed) s"
for run in "${runs[@]}"; do
  if (($(elapsed) + per_run > budget)); then
    echo "$run: skipped (call at $(elapsed) s)"
    continue
  fi
  BENCH_PROFILE=1 timeout $((budget - $(elapsed))) bench/run_bench.sh build-gpu/shardtrain \
    "$out/bench-$run" "$run" >"$out/bench-$run.txt" 2>&1
  echo "== $run (rc $?, call at $(elapsed) s)"
  tail -3 "$out/bench-$run.txt"
  [[ -f $out/bench-$run/$run-profile.txt ]] && head -24 "$out/bench-$run/$run-profile.txt"
done
echo "call: $(elapsed) s"
(cd "$out" && tar czf /tmp/long-logs.tgz . && find . -mindepth 1 -delete && mv /tmp/long-logs.tgz .)
