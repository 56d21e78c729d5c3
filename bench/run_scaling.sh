#!/usr/bin/env bash
# Multi-GPU scaling on one GPU machine (issue 6): shardtrain and PyTorch FSDP2 (compiled and eager,
# issue 22) on 1, 2, 4, 8 GPUs,
# FULL_SHARD and SHARD_GRAD_OP, same shapes and settings as bench/run_bench.sh (random init,
# random tokens, bf16, AdamW), micro-batch per GPU fixed (the global batch grows with the GPUs).
#
# Usage: bench/run_scaling.sh SHARDTRAIN_BIN OUT_DIR [--gpus "1 2 4 8"] [--shape "qwen2.5-1.5b"]
#          [--strategies "full_shard shard_grad_op"]
#          [--engines "shardtrain pytorch-compiled pytorch"]
#          [--seq 4096] [--micro-batch 2] [--steps 8] [--timeout 300] [--config bench/bench.toml]
#   --gpus        world sizes to run; those above the GPUs `nvidia-smi -L` lists are skipped
#   --shape       shapes (bench/shapes/NAME, or a dir holding a config.json); NAME+ckpt runs with
#                 full activation checkpointing (e.g. llama2-7b+ckpt --micro-batch 1); +fp8: ours
#                 with train.precision = fp8; +fp8gather: and fp8.all_gather = true (the FP8
#                 weights gathered as e4m3; PyTorch stays bf16: no torchao on the GPU machine)
#   --engines     shardtrain; pytorch-compiled: bench/pytorch_fsdp2.py --compile (per-layer
#                 torch.compile, the baseline that counts); pytorch: the same, eager
#   --timeout     seconds per run (then SIGTERM, SIGKILL 30 s later): one hang cannot eat the
#                 device budget; a failed or timed-out run is reported and the others go on
#   --config      the job TOML (default bench/bench.toml)
# Defaults of --seq/--micro-batch/--steps come from BENCH_SEQ/BENCH_MICRO_BATCH/BENCH_STEPS.
#
# shardtrain: `shardtrain launch --standalone --nproc-per-node N -- train ... --fsdp.strategy=S`;
# tokens/s per GPU from rank 0's --metrics (its tokens are summed over ranks; steps 1-2 untimed,
# as in run_bench.sh). PyTorch: `torchrun --standalone --nproc-per-node N bench/pytorch_fsdp2.py
# ... --strategy S [--compile]` (SHARD_GRAD_OP = fully_shard(reshard_after_forward=False)); rank 0's
# tokens/s (3 untimed warm-up steps). Peak memory: the largest nvidia-smi memory.used of GPUs
# 0..N-1, sampled every 250 ms. Prediction: the per-rank total of `shardtrain plan --world-size
# N` for the strategy. MFU and FLOPs/token: bench/benchlib.py (the formula of bench/RESULTS.md).
# Writes OUT_DIR/<run>.log|.mem.csv|.metrics.jsonl|.plan.txt, scaling-runs.jsonl, and prints the
# table last (also OUT_DIR/scaling-table.txt).
set -uo pipefail
usage() { sed -n '/^# Usage/,/^# Defaults/p' "$0" >&2; exit 2; }
(($# >= 2)) || usage
bin=$1 out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
# Our runs record each step's exposed communication (comm_wait_s in --metrics).
export SHARDTRAIN_MEASURE_COMM_WAIT=1
lib=$root/bench/benchlib.py
gpu_list="1 2 4 8" shapes="qwen2.5-1.5b" strategies="full_shard shard_grad_op"
engines="shardtrain pytorch-compiled pytorch" config=$root/bench/bench.toml run_timeout=300
seq=${BENCH_SEQ:-4096} mb=${BENCH_MICRO_BATCH:-2} steps=${BENCH_STEPS:-8}
while (($#)); do
  (($# >= 2)) || usage
  case $1 in
    --gpus) gpu_list=$2 ;;
    --shape | --shapes) shapes=$2 ;;
    --strategies) strategies=$2 ;;
    --engines) engines=$2 ;;
    --seq) seq=$2 ;;
    --micro-batch) mb=$2 ;;
    --steps) steps=$2 ;;
    --timeout) run_timeout=$2 ;;
    --config) config=$2 ;;
    *) echo "run_scaling.sh: unknown option $1" >&2; usage ;;
  esac
  shift 2
done
for s in $strategies; do
  [[ $s == full_shard || $s == shard_grad_op ]] ||
    { echo "run_scaling.sh: --strategies: $s is not full_shard or shard_grad_op" >&2; exit 2; }
done
for e in $engines; do
  [[ $e == shardtrain || $e == pytorch || $e == pytorch-compiled ]] ||
    { echo "run_scaling.sh: --engines: $e is not shardtrain, pytorch-compiled or pytorch" >&2; exit 2; }
done
for v in "$seq" "$mb" "$steps" "$run_timeout" $gpu_list; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "run_scaling.sh: '$v' is not a positive integer" >&2; exit 2; }
done
((steps >= 3)) || { echo "run_scaling.sh: --steps must be >= 3 (steps 1-2 are not timed)" >&2; exit 2; }
[[ -x $bin ]] || { echo "run_scaling.sh: $bin is not executable" >&2; exit 2; }
[[ -f $config ]] || { echo "run_scaling.sh: no job config $config" >&2; exit 2; }

export NCCL_NVLS_ENABLE=0
visible=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
torchrun=(torchrun)
command -v torchrun >/dev/null || torchrun=(python3 -m torch.distributed.run)
mkdir -p "$out"
out=$(cd "$out" && pwd)
runs=$out/scaling-runs.jsonl
rm -f "$runs"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/run_scaling_XXXXXX")  # token files (not results)
trap 'rm -rf "$scratch"' EXIT
sizes=()
for n in $gpu_list; do
  if ((n > visible)); then
    echo "skipping $n GPUs: nvidia-smi -L lists $visible"
  else
    sizes+=("$n")
  fi
done
((${#sizes[@]})) || { echo "run_scaling.sh: no world size fits the $visible GPUs" >&2; exit 1; }
largest=$(printf '%s\n' "${sizes[@]}" | sort -n | tail -1)

wait_gpus_idle() {  # a killed run's processes may take a moment to release their memory
  local i
  for ((i = 0; i < 60; i++)); do
    [[ -z $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null) ]] && return
    sleep 1
  done
  echo "warning: GPU processes still alive after 60 s:" \
    "$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
}

# run_one LABEL COMMAND...: runs COMMAND under the timeout with nvidia-smi sampling every GPU;
# sets $status to ok, "failed (exit N)" or "timeout (S s)". The run goes to the background so a
# TERM to this script (an outer timeout) stops it too: timeout(1) puts it in its own process group.
current="" sampler=""
stop_current() {
  [[ -n $sampler ]] && kill "$sampler" 2>/dev/null
  if [[ -n $current ]] && kill -TERM "$current" 2>/dev/null; then
    local i
    for ((i = 0; i < 20; i++)); do kill -0 "$current" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$current" 2>/dev/null
  fi
  exit 143
}
trap stop_current TERM INT
run_one() {
  local label=$1
  shift
  local begin=$SECONDS rc
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 250 \
    >"$out/$label.mem.csv" 2>/dev/null &
  sampler=$!
  timeout -k 30 "$run_timeout" "$@" >"$out/$label.log" 2>&1 </dev/null &
  current=$!
  wait "$current"
  rc=$?
  current=""
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  sampler=""
  case $rc in
    0) status=ok ;;
    124 | 137) status="timeout (${run_timeout} s)" ;;
    *) status="failed (exit $rc)" ;;
  esac
  echo "[$label] $status after $((SECONDS - begin)) s"
  [[ $status == ok ]] || tail -5 "$out/$label.log" | sed "s/^/[$label]   /"
  wait_gpus_idle
}

echo "scaling: GPUs ${sizes[*]} of $visible; shapes $shapes; strategies $strategies;" \
  "engines $engines; seq $seq, micro-batch $mb per GPU, $steps steps, $run_timeout s per run"
for run in $shapes; do
  shape=${run%%+*}
  ours_ckpt=() torch_ckpt=()
  for mod in $(tr '+' ' ' <<<"${run#"$shape"}"); do
    case $mod in
      ckpt) ours_ckpt+=(--train.activation_checkpointing=full) torch_ckpt=(--checkpointing) ;;
      fp8) ours_ckpt+=(--train.precision=fp8) ;;
      fp8gather) ours_ckpt+=(--train.precision=fp8 --fp8.all_gather=true) ;;
      *) echo "run_scaling.sh: unknown +$mod in $run (ckpt, fp8, fp8gather)" >&2; exit 2 ;;
    esac
  done
  shape_dir=$root/bench/shapes/$shape
  [[ $shape == */* ]] && shape_dir=$(cd "$shape" && pwd)
  name=$(basename "$shape_dir")${run#"$shape"}
  model_json=$shape_dir/config.json
  [[ -f $model_json ]] || { echo "run_scaling.sh: no $model_json" >&2; exit 2; }
  flops=$(python3 "$lib" flops "$model_json" "$seq")
  tokens=$scratch/tokens-$(basename "$shape_dir")-$seq.bin
  sequences=$((steps * mb * largest > 64 ? steps * mb * largest : 64))
  python3 "$lib" tokens "$model_json" "$tokens" "$seq" "$sequences"
  for n in "${sizes[@]}"; do
    plan=$out/$name-n$n.plan.txt
    "$bin" plan --config "$config" --world-size "$n" --model.path="$shape_dir" \
      --data.seq_len="$seq" --train.micro_batch="$mb" "${ours_ckpt[@]}" >"$plan" 2>&1 ||
      echo "[$name n=$n] shardtrain plan failed: $(tail -1 "$plan")"
    for strategy in $strategies; do
      for engine in $engines; do
        label=$name-$engine-$strategy-n$n
        if [[ $engine == shardtrain ]]; then
          rm -f "$out/$label.metrics.jsonl"  # --metrics appends
          run_one "$label" "$bin" launch --standalone --nproc-per-node "$n" -- train \
            --config "$config" --model.path="$shape_dir" --data.path="$tokens" \
            --data.seq_len="$seq" --train.micro_batch="$mb" --train.steps="$steps" \
            --train.log_every=1 --fsdp.strategy="${strategy^^}" \
            --metrics "$out/$label.metrics.jsonl" "${ours_ckpt[@]}"
          python3 "$lib" record "$runs" run="$name" engine=shardtrain strategy="$strategy" \
            gpus="$n" status="$status" flops="$flops" metrics="$out/$label.metrics.jsonl" \
            mem="$out/$label.mem.csv" plan="$plan"
        else
          compile=()
          [[ $engine == pytorch-compiled ]] && compile=(--compile)
          run_one "$label" "${torchrun[@]}" --standalone --nproc-per-node "$n" \
            "$root/bench/pytorch_fsdp2.py" "$model_json" "$seq" "$mb" "$steps" \
            --strategy "$strategy" "${torch_ckpt[@]}" "${compile[@]}"
          python3 "$lib" record "$runs" run="$name" engine="$engine" strategy="$strategy" \
            gpus="$n" status="$status" flops="$flops" log="$out/$label.log" \
            mem="$out/$label.mem.csv"
        fi
      done
    done
  done
done
python3 "$lib" scaling-table "$runs" | tee "$out/scaling-table.txt"
