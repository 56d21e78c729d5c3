#!/usr/bin/env bash
# Training throughput on the GPU machine: shardtrain and PyTorch FSDP2 in the same call, same
# shapes (bench/shapes/*), random init, random tokens, bf16, AdamW, one GPU.
# Usage: bench/run_bench.sh SHARDTRAIN_BIN OUT_DIR [SHAPE ...]   (default: qwen2.5-1.5b llama3.2-1b)
# A shape ending in "+ckpt" (e.g. qwen2.5-1.5b+ckpt) runs both engines with full activation
# checkpointing.
# Prints a table: tokens/s, MFU (790 TFLOP/s ceiling), peak GPU memory, and the ratio.
set -euo pipefail
bin=$1 out=$2
shift 2
shapes=("$@")
((${#shapes[@]})) || shapes=(qwen2.5-1.5b llama3.2-1b)
root=$(cd "$(dirname "$0")/.." && pwd)
seq=${BENCH_SEQ:-4096} mb=${BENCH_MICRO_BATCH:-2} steps=${BENCH_STEPS:-8}
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
python3 - "$out/tokens.bin" "$seq" <<'PY'
import struct, sys, numpy as np
n = 64 * int(sys.argv[2]) + 1
ids = np.random.default_rng(0).integers(0, 128000, n, dtype=np.uint32)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<8sIIQQ", b"SHTOKENS", 1, 0, n, 0)); f.write(ids.tobytes())
PY
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
  shape=${run%+ckpt}
  ours_ckpt=() torch_ckpt=()
  if [[ $run == *+ckpt ]]; then
    ours_ckpt=(--train.activation_checkpointing=full) torch_ckpt=(--checkpointing)
  fi
  config=$root/bench/shapes/$shape/config.json
  flops=$(python3 - "$config" "$seq" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); T = int(sys.argv[2])
C, F, L, H, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"], c["vocab_size"]
K = c["num_key_value_heads"]; D = c.get("head_dim") or C // H
per_layer = C * H * D * 2 + C * K * D * 2 + 3 * C * F
matmul = L * per_layer + V * C  # lm head (tied or not) included, embedding lookup excluded
print(6 * matmul + 6 * L * T * H * D)
PY
)
  ours_mib=$(peak_mib "$out/$run-shardtrain.log" "$bin" train --config "$root/bench/bench.toml" \
    --model.path="$root/bench/shapes/$shape" --data.path="$out/tokens.bin" --data.seq_len="$seq" \
    --train.micro_batch="$mb" --train.steps="$steps" --metrics "$out/$run-metrics.jsonl" \
    "${ours_ckpt[@]}")
  ours=$(python3 - "$out/$run-metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
a, b = r[1], r[-1]  # skip the first step (warm-up)
print((b["tokens"] - a["tokens"]) / (b["elapsed_s"] - a["elapsed_s"]))
PY
)
  torch_mib=$(peak_mib "$out/$run-pytorch.log" python3 "$root/bench/pytorch_fsdp2.py" "$config" "$seq" "$mb" "$steps" "${torch_ckpt[@]}")
  theirs=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["tokens_per_s"])' "$out/$run-pytorch.log")
  python3 - "$run" "$ours" "$theirs" "$flops" "$ours_mib" "$torch_mib" >>"$out/table.txt" <<'PY'
import sys
shape, ours, theirs, flops, om, tm = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
for name, tps, mib in (("shardtrain", ours, om), ("pytorch", theirs, tm)):
    print(f"{shape:<14} {name:<10} {tps:12.0f} {100 * tps * flops / 790e12:6.1f}% {mib / 1024:9.1f}")
print(f"{shape:<14} {'ratio':<10} {ours / theirs:12.3f}")
PY
done
cat "$out/table.txt"
