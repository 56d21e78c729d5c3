#!/usr/bin/env bash
# The mixture-of-experts check in one GPU-machine call: build the product and the MoE op test
# (90a), run the CUDA MoE ops against the CPU reference (routing, dispatch, gather/combine, the
# grouped linears) with the grouped-forward timing at Qwen3-30B-A3B's geometry, a profiled run of
# the Qwen3-30B-A3B 8-layer shape for the time split (SHARDTRAIN_PROFILE_OPS=1: the per-method
# table separates the router (moe_route*), the permutation (moe_dispatch, moe_gather*,
# moe_combine*) and the grouped GEMMs (grouped_linear_*)), then bench/run_bench.sh on that shape
# (ours against compiled PyTorch FSDP2 with transformers' grouped_mm experts, same call).
# Logs under $OUT: build-*.log, moe-ops-test.log, moe-profile.log, bench/.
# Usage: tools/device/moe_session.sh [RUN ...]   (default qwen3-30b-a3b-8l@4096x1)
source "$(dirname "$0")/common.sh"
runs=("$@")
((${#runs[@]})) || runs=(qwen3-30b-a3b-8l@4096x1)
gpu_info
build_gpu cuda_moe_gpu_test || exit 1
echo "build: $(elapsed) s"
status=0
"$build/cuda_moe_gpu_test" --gtest_also_run_disabled_tests >"$out/moe-ops-test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|  SKIPPED) |grouped forward|Failure|Expected|cuBLAS runs no" \
  "$out/moe-ops-test.log" | head -20
echo "moe ops test (rc $status, $(elapsed) s)"
shape=qwen3-30b-a3b-8l seq=4096
tokens=/tmp/tokens-$shape-$seq.bin
[[ -f $tokens ]] || python3 bench/benchlib.py tokens "bench/shapes/$shape/config.json" "$tokens" \
  "$seq" 64
if room 120 "profiled run"; then
  SHARDTRAIN_PROFILE_OPS=1 "$build/shardtrain" train --config bench/bench.toml \
    --model.path="bench/shapes/$shape" --data.path="$tokens" --data.seq_len="$seq" \
    --train.micro_batch=1 --train.steps=4 >"$out/moe-profile.log" 2>&1 || status=1
  grep -E "aux_loss|moe_|grouped_linear|^  *(gemm|attention|elementwise)" "$out/moe-profile.log" |
    tail -30
  echo "profiled run ($(elapsed) s)"
fi
if room 240 "bench"; then
  BENCH_STEPS=${BENCH_STEPS:-8} bench/run_bench.sh "$build/shardtrain" "$out/bench" "${runs[@]}" ||
    status=1
fi
echo "session: $(elapsed) s"
exit "$status"
