#!/usr/bin/env bash
# Speed of the non-Hopper code path on the H200 (issue 17): per shape, shardtrain built for
# sm_80 only (build-80: the mma.sync kernels an A100 or L4 runs, JIT-compiled from PTX), the fat
# build (build-fat: the H200 runs its sm_90a wgmma kernels) and compiled PyTorch FSDP2
# (bench/pytorch_fsdp2.py --compile), one after the other in this call, seq 4096, micro-batch 2,
# 8 steps (shardtrain timed from step 2, PyTorch after 3 warm-up steps), random init and tokens.
# REQUIRES: build-fat/shardtrain and build-80/shardtrain (tools/device/arch_session.sh builds
# both). Usage: tools/device/arch_bench.sh [shapes...] (default qwen2.5-1.5b llama3.2-1b).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}/bench
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$root"
shapes=("$@")
((${#shapes[@]})) || shapes=(qwen2.5-1.5b llama3.2-1b)
lib=bench/benchlib.py seq=4096 mb=2 steps=${BENCH_STEPS:-8}
printf '%-14s %12s %12s %12s %9s %9s %9s\n' shape sm80-tok/s 90a-tok/s torch-tok/s \
  sm80/90a sm80/torch 90a/torch >"$out/arch-table.txt"
for shape in "${shapes[@]}"; do
  config=bench/shapes/$shape/config.json tokens=/tmp/tokens-$shape-$seq.bin
  [[ -f $tokens ]] || python3 "$lib" tokens "$config" "$tokens" "$seq" 64
  declare -A tps=()
  for build in build-80 build-fat; do
    rm -f "$out/$shape-$build.jsonl"
    timeout 150 "$build/shardtrain" train --config bench/bench.toml --model.path="bench/shapes/$shape" \
      --data.path="$tokens" --data.seq_len=$seq --train.micro_batch=$mb --train.steps="$steps" \
      --metrics "$out/$shape-$build.jsonl" >"$out/$shape-$build.log" 2>&1
    tps[$build]=$(python3 "$lib" ours-tps "$out/$shape-$build.jsonl" 1 2>/dev/null || echo 0)
  done
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/pytorch_fsdp2.py "$config" $seq $mb "$steps" --compile \
    >"$out/$shape-torch.log" 2>&1
  tps[torch]=$(python3 "$lib" torch-tps "$out/$shape-torch.log" 2>/dev/null || echo 0)
  if [[ ${tps[torch]} == 0 ]]; then  # compilation failed: say so, and measure eager instead
    echo "$shape: compiled PyTorch failed ($(grep -m1 -i error "$out/$shape-torch.log")); eager:"
    timeout 120 python3 bench/pytorch_fsdp2.py "$config" $seq $mb "$steps" >"$out/$shape-torch-eager.log" 2>&1
    tps[torch]=$(python3 "$lib" torch-tps "$out/$shape-torch-eager.log" 2>/dev/null || echo 0)
  fi
  python3 - "$shape" "${tps[build-80]}" "${tps[build-fat]}" "${tps[torch]}" >>"$out/arch-table.txt" <<'PY'
import sys
shape, sm80, h, torch = sys.argv[1], *map(float, sys.argv[2:])
ratio = lambda a, b: f"{a / b:.3f}" if b > 0 else "-"
print(f"{shape:14s} {sm80:12,.0f} {h:12,.0f} {torch:12,.0f} {ratio(sm80, h):>9s} "
      f"{ratio(sm80, torch):>9s} {ratio(h, torch):>9s}")
PY
  unset tps
done
cat "$out/arch-table.txt"
