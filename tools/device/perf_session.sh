#!/usr/bin/env bash
# Issue 22 on one H200 (through the device tool, carrying .devkit): Llama-2-7B on one GPU, ours
# against compiled PyTorch FSDP2 (bench/pytorch_fsdp2.py --compile: per-layer torch.compile,
# flash/cuDNN SDPA, fused AdamW, no clipping), micro-batch 1, seq 4096, random init and tokens,
# with the plan's prediction (`shardtrain plan`, same flags) beside each measured peak.
#   0. builds build-perf (SHARDTRAIN_CUDA_ARCH=90a) unless PERF_BIN names a built shardtrain;
#   1. memory_levers_gpu_test: the on-demand bf16 copy and the update in backward give the
#      default's losses and parameters on the GPU (bit for bit where the default repeats itself);
#      cuda_ops_gpu_test's AdamWMulti test (the cached per-unit work tables);
#   2. in this order, each skipped once the session passes PERF_BUDGET_S (default 210 s):
#      ours lean + full checkpointing (fsdp.compute_copy=on_demand, optim.update_in_backward,
#      max_grad_norm 0), compiled PyTorch + full checkpointing, ours lean without
#      checkpointing, ours default settings + full checkpointing (compute copy auto -> on
#      demand on an H200, update after backward, clipping at 1.0).
# Ours: PERF_STEPS (7) steps, the first 2 untimed; PyTorch: 3 warm-up + 5 timed. Peak memory =
# the largest nvidia-smi memory.used sample (250 ms) during the run.
# Prints one short table; logs (one archive) under $OUT. PERF_DRY=1: no GPU needed, prints the
# commands and the plan figures (checks the script on any machine with a CPU build).
# PERF_SKIP_TESTS=1 skips step 1 (when the caller ran the gpu tests already).
# Usage: [PERF_BIN=build/shardtrain] [PERF_DRY=1] tools/device/perf_session.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
logs=$out/perf
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
cd "$root"
dry=${PERF_DRY:-} start=$(date +%s) budget=${PERF_BUDGET_S:-210} steps=${PERF_STEPS:-7}
elapsed() { echo $(($(date +%s) - start)); }
bin=${PERF_BIN:-build-perf/shardtrain}
if [[ -z ${PERF_BIN:-} && -z $dry ]]; then
  SHARDTRAIN_CUDA_ARCH=90a tools/device/build_on_device.sh build-perf shardtrain \
    memory_levers_gpu_test cuda_ops_gpu_test >"$logs/build.log" 2>&1 || { tail -30 "$logs/build.log"; exit 1; }
  echo "build: $(elapsed) s"
  start=$(date +%s)  # the budget counts from here
fi
[[ -x $bin ]] || { echo "no shardtrain at $bin (build it, or set PERF_BIN)"; exit 2; }
gpu_memory=h200
if [[ -z $dry ]]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
  gpu_memory="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)MiB"
  levers=$(dirname "$bin")/memory_levers_gpu_test
  if [[ -x $levers && -z ${PERF_SKIP_TESTS:-} ]]; then
    timeout 90 "$levers" >"$logs/levers.log" 2>&1
    echo "memory_levers_gpu_test rc $?: $(grep -E '^default run|update in backward' "$logs/levers.log" | tr '\n' ';')"
  fi
  if [[ -x $(dirname "$bin")/cuda_ops_gpu_test && -z ${PERF_SKIP_TESTS:-} ]]; then
    timeout 60 "$(dirname "$bin")/cuda_ops_gpu_test" --gtest_filter='*AdamWMulti*' >"$logs/adamw.log" 2>&1
    echo "cuda_ops_gpu_test AdamWMulti rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$logs/adamw.log" | tr '\n' ' ')"
  fi
fi
lib=bench/benchlib.py shape=llama2-7b seq=4096 mb=1
config=bench/shapes/$shape/config.json tokens=$logs/tokens-$shape-$seq.bin
python3 "$lib" tokens "$config" "$tokens" "$seq" 16
flops=$(python3 "$lib" flops "$config" "$seq")
lean=(--fsdp.compute_copy=on_demand --optim.update_in_backward=true --train.max_grad_norm=0)
ckpt=(--train.activation_checkpointing=full)
export SAMPLE_PEAK_DRY=$dry
source bench/sample_peak.sh  # sample_peak_mib LOG COMMAND...: the peak MiB while it runs
rows=()
ours() {  # name flags...: one run of ours, its plan, one table row
  local name=$1
  shift
  if (($(elapsed) > budget)); then
    rows+=("$(printf '%-22s skipped (session at %s s)' "$name" "$(elapsed)")")
    return
  fi
  local job=(--config bench/bench.toml --model.path="bench/shapes/$shape" --data.path="$tokens"
    --data.seq_len=$seq --train.micro_batch=$mb "$@")
  "$bin" plan "${job[@]}" --world-size 1 --gpu-memory "$gpu_memory" >"$logs/$name-plan.txt" 2>&1
  local plan tps=0 mib
  plan=$(python3 "$lib" plan-total "$logs/$name-plan.txt" full_shard)
  rm -f "$logs/$name.jsonl"
  mib=$(sample_peak_mib "$logs/$name.log" timeout 100 "$bin" train "${job[@]}" --train.steps="$steps" \
    --metrics "$logs/$name.jsonl")
  [[ -z $dry ]] && tps=$(python3 "$lib" ours-tps "$logs/$name.jsonl" 1 2>/dev/null || echo 0)
  rows+=("$(python3 - "$name" "$tps" "$flops" "${mib:-0}" "$plan" <<'PY'
import sys
sys.path.insert(0, "bench")
import benchlib
name, tps, flops, mib, plan = sys.argv[1], *map(float, sys.argv[2:])
ratio = f"{mib / plan:.3f}" if plan > 0 else "-"
print(f"{name:<22} {tps:9,.0f} {benchlib.mfu_percent(tps, flops):5.1f}% {mib / 1024:8.1f} "
      f"{plan / 1024:8.1f} {ratio:>9}")
PY
)")
  ours_tps[$name]=$tps ours_mib[$name]=${mib:-0}
}
declare -A ours_tps=() ours_mib=()
ours ours-lean-ckpt "${ckpt[@]}" "${lean[@]}"
torch_tps=0 torch_mib=0
if (($(elapsed) <= budget)); then
  torch_mib=$(PYTHONUNBUFFERED=1 sample_peak_mib "$logs/torch-ckpt.log" timeout 170 python3 \
    bench/pytorch_fsdp2.py "$config" $seq $mb 5 --checkpointing --compile)
  [[ -z $dry ]] && torch_tps=$(python3 "$lib" torch-tps "$logs/torch-ckpt.log" 2>/dev/null || echo 0)
fi
ours ours-lean-none "${lean[@]}"
ours ours-default-ckpt "${ckpt[@]}"
{
  printf '%-22s %9s %6s %8s %8s %9s\n' "Llama-2-7B, 1 GPU" tok/s MFU peakGiB planGiB meas/plan
  printf '%s\n' "${rows[@]}"
  python3 - "$torch_tps" "${torch_mib:-0}" "$flops" <<'PY'
import sys
sys.path.insert(0, "bench")
import benchlib
tps, mib, flops = map(float, sys.argv[1:])
print(f"{'pytorch-compiled-ckpt':<22} {tps:9,.0f} {benchlib.mfu_percent(tps, flops):5.1f}% "
      f"{mib / 1024:8.1f}")
PY
  for name in "${!ours_tps[@]}"; do
    python3 -c "import sys; n,a,b,c,d=sys.argv[1:]; a,b,c,d=map(float,(a,b,c,d)); \
print(f'{n:<22} vs compiled PyTorch: tok/s {a/c:.3f}, memory {b/d:.3f}' if c>0 and d>0 else f'{n:<22} vs PyTorch: -')" \
      "$name" "${ours_tps[$name]}" "${ours_mib[$name]}" "$torch_tps" "${torch_mib:-0}"
  done | sort
} | tee "$logs/table.txt"
echo "session: $(elapsed) s after the build"
# At most 8 files come back from $OUT: the logs go into one archive, the table beside it.
(cd "$out" && tar czf perf-logs.tgz --exclude='tokens-*' perf && cp perf/table.txt perf-table.txt && rm -rf perf)
