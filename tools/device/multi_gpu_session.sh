#!/usr/bin/env bash
# One batched session on a multi-GPU machine (issue 6), logs under $OUT, a summary printed last:
#   1. build shardtrain with CUDA (tools/device/build_on_device.sh build-gpu shardtrain);
#   2. correctness: tools/device/multi_gpu_check.sh (2 GPUs vs 1, every strategy);
#   3. collective bandwidth: shardtrain launch --standalone --nproc-per-node N -- bench comm,
#      64 MiB .. 1 GiB, N = every GPU;
#   4. scaling: bench/run_scaling.sh (shardtrain and PyTorch FSDP2, FULL_SHARD and SHARD_GRAD_OP,
#      1 GPU .. every GPU).
# Usage (through the device tool, carrying .devkit): tools/device/multi_gpu_session.sh
# Knobs (environment): SESSION_BUDGET_S (default 540: the whole session stays inside one 10-minute
# device call; scaling gets what is left, and every scaling run has its own timeout),
# SCALING_SHAPES (qwen2.5-1.5b; e.g. "llama2-7b+ckpt" with SCALING_MICRO_BATCH=1),
# SCALING_GPUS ("1 2 4 8", capped at the GPUs present), SCALING_STRATEGIES, SCALING_ENGINES,
# SCALING_STEPS (6), SCALING_MICRO_BATCH (2), SCALING_SEQ (4096), SCALING_RUN_TIMEOUT_S (150),
# SCALING_CONFIG (bench/bench.toml), COMM_MIN_MIB/COMM_MAX_MIB (64/1024), CHECK_STEPS (20),
# BUILD_DIR (build-gpu), SKIP_BUILD=1 (use BUILD_DIR as it is). With a fake nvidia-smi on PATH,
# CHECK_DEVICE=cpu and a CPU job config the whole script runs on a machine without GPUs (PyTorch
# aside), to try it.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
budget=${SESSION_BUDGET_S:-540}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
cd "$root"
mkdir -p "$out"
start=$SECONDS
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m >"$out/topology.txt" 2>&1
build=${BUILD_DIR:-$root/build-gpu}
bin=$build/shardtrain
summary=()

if [[ -z ${SKIP_BUILD:-} ]]; then
  if ! tools/device/build_on_device.sh "$build" shardtrain >"$out/build.log" 2>&1; then
    tail -30 "$out/build.log"
    exit 1
  fi
fi
summary+=("build: $((SECONDS - start)) s")
echo "${summary[-1]}"

if ((gpus >= 2)); then
  t=$SECONDS
  timeout -k 10 240 tools/device/multi_gpu_check.sh "$build" "${CHECK_STEPS:-20}" \
    >"$out/multi-gpu-check.log" 2>&1
  rc=$?
  tail -5 "$out/multi-gpu-check.log"
  summary+=("correctness, 2 GPUs vs 1 (exit $rc, $((SECONDS - t)) s):")
  while IFS= read -r line; do summary+=("  $line"); done \
    < <(grep -E '^2 GPUs |FAILED|TOO LARGE' "$out/multi-gpu-check.log")

  t=$SECONDS
  timeout -k 10 120 "$bin" launch --standalone --nproc-per-node "$gpus" -- bench comm \
    --min-mib "${COMM_MIN_MIB:-64}" --max-mib "${COMM_MAX_MIB:-1024}" \
    >"$out/bench-comm-n$gpus.log" 2>&1
  rc=$?
  summary+=("bench comm, $gpus GPUs (exit $rc, $((SECONDS - t)) s):")
  while IFS= read -r line; do summary+=("  $line"); done \
    < <(grep -E '^(\[rank 0\] )?( *bytes| *[0-9]+ +[0-9.]+ )|bench comm:' "$out/bench-comm-n$gpus.log" |
        sed 's/^\[rank 0\] //')
else
  summary+=("only $gpus GPU: no correctness check or bench comm (they need 2)")
fi

left=$((budget - (SECONDS - start) - 40))  # room for run_scaling.sh to stop its run on TERM
if ((left > 60)); then
  timeout -k 30 "$left" bench/run_scaling.sh "$bin" "$out/scaling" \
    --gpus "${SCALING_GPUS:-1 2 4 8}" --shape "${SCALING_SHAPES:-qwen2.5-1.5b}" \
    --strategies "${SCALING_STRATEGIES:-full_shard shard_grad_op}" \
    --engines "${SCALING_ENGINES:-shardtrain pytorch-compiled pytorch}" --steps "${SCALING_STEPS:-6}" \
    --micro-batch "${SCALING_MICRO_BATCH:-2}" --seq "${SCALING_SEQ:-4096}" \
    --timeout "${SCALING_RUN_TIMEOUT_S:-150}" --config "${SCALING_CONFIG:-bench/bench.toml}" \
    >"$out/scaling.log" 2>&1
  rc=$?
  ((rc == 0)) || summary+=("scaling: exit $rc$( ((rc == 124)) && echo ", session budget ran out")")
  grep -E '^\[|^skipping' "$out/scaling.log" | tail -20
  # From the runs recorded, also when the budget cut the script short.
  [[ -f $out/scaling/scaling-runs.jsonl ]] &&
    python3 bench/benchlib.py scaling-table "$out/scaling/scaling-runs.jsonl" >"$out/scaling-table.txt"
else
  summary+=("scaling: skipped, $left s of the session budget left")
fi

echo
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $gpus GPUs)"
printf '%s\n' "${summary[@]}"
[[ -f $out/scaling-table.txt ]] && { echo "scaling:"; cat "$out/scaling-table.txt"; }
echo "session: $((SECONDS - start)) s"
