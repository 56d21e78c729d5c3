#!/usr/bin/env bash
# Training throughput on the GPU machine: shardtrain and PyTorch FSDP2 in the same call, same
# shapes (bench/shapes/*), random init, random tokens, bf16, AdamW, one GPU.
# Usage: bench/run_bench.sh SHARDTRAIN_BIN OUT_DIR [SHAPE ...]   (default: qwen2.5-1.5b llama3.2-1b;
# also llama2-7b, which needs BENCH_MICRO_BATCH=1 and +ckpt on one GPU)
# A shape ending in "+ckpt" (e.g. qwen2.5-1.5b+ckpt) runs both engines with full activation
# checkpointing; "+sel" runs ours with selective checkpointing (attention outputs kept) against
# PyTorch's full checkpointing (transformers offers no selective mode): compare the memory too.
# Prints a table: tokens/s, MFU (790 TFLOP/s ceiling), peak GPU memory, and the ratio.
# BENCH_PROFILE=1 adds, per shape, a separate 3-step run of ours with SHARDTRAIN_PROFILE_OPS=1
# (device time per op class, synchronised per op; OUT_DIR/SHAPE-profile.txt), never timed.
set -euo pipefail
bin=$1 out=$2
shift 2
shapes=("$@")
((${#shapes[@]})) || shapes=(qwen2.5-1.5b llama3.2-1b)
root=$(cd "$(dirname "$0")/.." && pwd)
seq=${BENCH_SEQ:-4096} mb=${BENCH_MICRO_BATCH:-2} steps=${BENCH_STEPS:-8}
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
lib=$root/bench/benchlib.py  # FLOPs, MFU, token files, metrics parsing (shared with run_scaling.sh)
peak_mib() {  # samples nvidia-smi while "$@" runs; prints the peak used MiB on stderr-free stdout
  local log=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 >"$log.mem" &
  local sampler=$!
  "$@" >"$log" 2>&1 || { kill $sampler; cat "$log" >&2; return 1; }
  kill $sampler
  sort -n "$log.mem" | tail -1
}
printf '%-14s %-10s %12s %7s %9s\n' shape engine tokens/s MFU peakGiB >"$out/table.txt"
for run in "${shapes[@]}"; do
  shape=${run%+ckpt} shape=${shape%+sel}
  ours_ckpt=() torch_ckpt=()
  if [[ $run == *+ckpt ]]; then
    ours_ckpt=(--train.activation_checkpointing=full) torch_ckpt=(--checkpointing)
  elif [[ $run == *+sel ]]; then  # transformers has no selective mode: PyTorch runs full
    ours_ckpt=(--train.activation_checkpointing=selective) torch_ckpt=(--checkpointing)
  fi
  config=$root/bench/shapes/$shape/config.json
  flops=$(python3 "$lib" flops "$config" "$seq")
  tokens=$out/tokens-$shape-$seq.bin  # random ids below the shape's vocab_size
  [[ -f $tokens ]] || python3 "$lib" tokens "$config" "$tokens" "$seq" 64
  rm -f "$out/$run-metrics.jsonl"  # --metrics appends
  ours_mib=$(peak_mib "$out/$run-shardtrain.log" "$bin" train --config "$root/bench/bench.toml" \
    --model.path="$root/bench/shapes/$shape" --data.path="$tokens" --data.seq_len="$seq" \
    --train.micro_batch="$mb" --train.steps="$steps" --metrics "$out/$run-metrics.jsonl" \
    "${ours_ckpt[@]}")
  ours=$(python3 "$lib" ours-tps "$out/$run-metrics.jsonl" 1)
  if [[ -n ${BENCH_PROFILE:-} ]]; then
    SHARDTRAIN_PROFILE_OPS=1 "$bin" train --config "$root/bench/bench.toml" \
      --model.path="$root/bench/shapes/$shape" --data.path="$tokens" --data.seq_len="$seq" \
      --train.micro_batch="$mb" --train.steps=3 "${ours_ckpt[@]}" >"$out/$run-profile.log" 2>&1 || true
    sed -n '/op profile/,$p' "$out/$run-profile.log" >"$out/$run-profile.txt"
  fi
  torch_mib=$(peak_mib "$out/$run-pytorch.log" python3 "$root/bench/pytorch_fsdp2.py" "$config" "$seq" "$mb" "$steps" "${torch_ckpt[@]}")
  theirs=$(python3 "$lib" torch-tps "$out/$run-pytorch.log")
  python3 "$lib" bench-rows "$run" "$ours" "$theirs" "$flops" "$ours_mib" "$torch_mib" >>"$out/table.txt"
done
cat "$out/table.txt"
