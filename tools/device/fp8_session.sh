#!/usr/bin/env bash
# The FP8 check in one GPU-machine call: build the product and the FP8 tests (90a), run the FP8
# GEMM / cast test and the FP8 training-numerics test, then time training steps in bf16 and
# train.precision = fp8 on the given bench shapes (bench/shapes/*; seq 4096, micro-batch 2,
# BENCH_STEPS steps, tokens/s from step 2 on as bench/run_bench.sh counts them), with
# `shardtrain plan`'s prediction for each. No PyTorch here: bench/run_bench.sh compares with it.
# Logs under $OUT: build-*.log, fp8-gemm-test.log, fp8-numerics-test.log, bench/*.log, and
# fp8-table.txt (run, precision, tokens/s, speedup over bf16, plan GiB).
# Usage: tools/device/fp8_session.sh [SHAPE ...]   (default qwen2.5-1.5b llama3.2-1b)
source "$(dirname "$0")/common.sh"
shapes=("$@")
((${#shapes[@]})) || shapes=(qwen2.5-1.5b llama3.2-1b)
gpu_info
SHARDTRAIN_CUDA_ARCH=${SHARDTRAIN_CUDA_ARCH:-90a} tools/device/build_on_device.sh "$build" \
  shardtrain cuda_fp8_gpu_test fp8_numerics_gpu_test >"$out/build-$(basename "$build").log" 2>&1 ||
  { tail -30 "$out/build-$(basename "$build").log"; exit 1; }
# cuBLASLt says why it refuses a call (level 2: errors only).
export CUBLASLT_LOG_LEVEL=2
echo "build: $(elapsed) s"
status=0
"$build/cuda_fp8_gpu_test" >"$out/fp8-gemm-test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|  SKIPPED) |dgrad relative error|Failure" "$out/fp8-gemm-test.log"
echo "fp8 gemm test (rc $status, $(elapsed) s)"
if room 100 "numerics test"; then
  "$build/fp8_numerics_gpu_test" >"$out/fp8-numerics-test.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|  SKIPPED) |loss, mean|Failure|Expected" "$out/fp8-numerics-test.log" | head -20
  echo "numerics test ($(elapsed) s)"
fi
mkdir -p "$out/bench"
steps=${BENCH_STEPS:-8} seq=${BENCH_SEQ:-4096} mb=${BENCH_MICRO_BATCH:-2}
printf '%-16s %-6s %10s %8s %9s\n' shape prec tokens/s vs_bf16 plan_GiB >"$out/fp8-table.txt"
for shape in "${shapes[@]}"; do
  config=bench/shapes/$shape/config.json
  tokens=/tmp/tokens-$shape-$seq.bin
  [[ -f $tokens ]] || python3 bench/benchlib.py tokens "$config" "$tokens" "$seq" 64
  bf16_tps=
  for precision in bf16 fp8; do
    room 45 "$shape $precision" || break
    job=(--config bench/bench.toml --model.path="bench/shapes/$shape" --data.path="$tokens"
      --data.seq_len="$seq" --train.micro_batch="$mb" --train.precision="$precision")
    "$build/shardtrain" plan "${job[@]}" --world-size 1 --gpu-memory h200 \
      >"$out/bench/$shape-$precision-plan.txt" 2>&1
    plan=$(python3 bench/benchlib.py plan-total "$out/bench/$shape-$precision-plan.txt" full_shard \
      2>/dev/null || echo 0)
    metrics=$out/bench/$shape-$precision-metrics.jsonl
    rm -f "$metrics"
    "$build/shardtrain" train "${job[@]}" --train.steps="$steps" --metrics "$metrics" \
      >"$out/bench/$shape-$precision.log" 2>&1 || { echo "$shape $precision: train failed"; tail -5 "$out/bench/$shape-$precision.log"; status=1; continue; }
    tps=$(python3 bench/benchlib.py ours-tps "$metrics" 1)
    [[ $precision == bf16 ]] && bf16_tps=$tps
    ratio=$(python3 -c "print(f'{$tps / $bf16_tps:.3f}' if '$bf16_tps' else '-')")
    printf '%-16s %-6s %10.0f %8s %9.1f\n' "$shape" "$precision" "$tps" "$ratio" \
      "$(python3 -c "print($plan / 1024)")" >>"$out/fp8-table.txt"
  done
done
cat "$out/fp8-table.txt"
echo "session: $(elapsed) s"
exit "$status"
