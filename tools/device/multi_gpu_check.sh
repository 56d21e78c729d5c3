#!/usr/bin/env bash
# 2-GPU FSDP over NCCL against 1 GPU, on the GPU machine (after build_on_device.sh):
#   tools/device/multi_gpu_check.sh [BUILD_DIR] [STEPS]
# Trains tests/golden/llama_gqa on a small generated JSONL (the data of fsdp_dist_test) for
# STEPS (20) steps on one GPU, then with `shardtrain launch --standalone --nproc-per-node 2` for
# each strategy below. The global batch (4 sequences) is the same in every run (grad_accum 4 on
# one GPU, 2 per rank on two), so the per-step losses must agree within bf16 tolerance: prints
# the largest relative loss difference per strategy (and the step), and exits 1 if one is over
# 2e-2. NCCL_NVLS_ENABLE=0 is exported (keep it on shared machines). CHECK_DEVICE=cpu runs the
# same comparison on CPU ranks over Gloo (to try the script where there is no GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
steps=${2:-20}
binary=$build/shardtrain
[[ -x $binary ]] || { echo "no $binary; HINT: run tools/device/build_on_device.sh first" >&2; exit 2; }
source "$root/tools/device/common.sh"  # .devkit libraries, NCCL_NVLS_ENABLE=0
export SHARDTRAIN_COMM_TIMEOUT_S=${SHARDTRAIN_COMM_TIMEOUT_S:-120}
work=$(mktemp -d /tmp/shardtrain_multi_gpu_XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$work/data.jsonl" <<'EOF'
import json, random, sys
rng = random.Random(11)
with open(sys.argv[1], "w") as out:
    for line in range(40):
        length = 6 + rng.randrange(11)
        ids = [rng.randrange(96) for _ in range(length)]
        labels = [-100 if i < 2 and line % 3 == 0 else t for i, t in enumerate(ids)]
        out.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
EOF
cat >"$work/job.toml" <<EOF
[model]
path = "$root/tests/golden/llama_gqa"
init = "pretrained"
dtype = "fp32"
[data]
path = "$work/data.jsonl"
seq_len = 16
[train]
steps = $steps
micro_batch = 1
global_batch = 4
seed = 7
device = "${CHECK_DEVICE:-cuda}"
max_grad_norm = 1.0
[optim]
lr = 3e-3
warmup_steps = 2
weight_decay = 0.01
EOF

run() {  # name, then the command's arguments
  local name=$1
  shift
  local start=$SECONDS
  if ! timeout 180 "$@" >"$work/$name.log" 2>&1; then
    echo "[$name] FAILED; its log:"
    cat "$work/$name.log"
    exit 1
  fi
  echo "[$name] done in $((SECONDS - start)) s: $(grep -m1 'last loss' "$work/$name.log" || true)"
}

run gpu1 "$binary" train --config "$work/job.toml" --metrics "$work/gpu1.jsonl"
strategies=(FULL_SHARD SHARD_GRAD_OP NO_SHARD)
for strategy in "${strategies[@]}"; do
  run "gpu2_$strategy" "$binary" launch --standalone --nproc-per-node 2 -- train \
    --config "$work/job.toml" --metrics "$work/gpu2_$strategy.jsonl" \
    --fsdp.strategy="$strategy"
  grep -m2 'memory measured' "$work/gpu2_$strategy.log" | sed "s/^/[gpu2_$strategy] /" || true
done

python3 - "$work" "$steps" "${strategies[@]}" <<'EOF'
import json, sys
work, steps, strategies = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def losses(name):
    with open(f"{work}/{name}.jsonl") as f:
        return [json.loads(line)["loss"] for line in f]
base = losses("gpu1")
assert len(base) == steps, f"1-GPU run logged {len(base)} steps, want {steps}"
ok = True
runs = {s: losses(f"gpu2_{s}") for s in strategies}
for s, got in runs.items():
    if len(got) != steps:
        print(f"{s}: logged {len(got)} steps, want {steps}")
        ok = False
        runs[s] = got + [float("nan")] * (steps - len(got))
print("relative loss difference, 2 GPUs vs 1 GPU, per step:")
print(f"{'step':>4} {'1-GPU loss':>10} " + " ".join(f"{s:>13}" for s in strategies) + "  largest")
for i in range(steps):
    diffs = [abs(runs[s][i] - base[i]) / abs(base[i]) for s in strategies]
    print(f"{i + 1:4d} {base[i]:10.5f} " + " ".join(f"{d:13.2e}" for d in diffs) +
          f"  {max(diffs):.2e}")
for s, got in runs.items():
    diffs = [abs(g - b) / abs(b) for g, b in zip(got, base)]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    verdict = "ok" if diffs[worst] < 2e-2 else "TOO LARGE"
    ok &= diffs[worst] < 2e-2
    print(f"2 GPUs {s}: largest relative loss difference {diffs[worst]:.3g} at step {worst + 1} "
          f"(tolerance 2e-2): {verdict}")
print(f"1 GPU: first loss {base[0]:.4f}, last {base[-1]:.4f}")
sys.exit(0 if ok else 1)
EOF
