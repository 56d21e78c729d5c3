#!/usr/bin/env bash
# Exploration on the GPU machine (through the device tool, carrying .devkit): builds everything,
# runs the attention gpu tests, times the attention kernels with every GQA slice size of the
# backward (SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK), then a 3-step op profile of ours per shape
# given (default qwen2.5-1.5b). A measurement aid, not a benchmark: logs under $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
root=$PWD
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
s=$(date +%s)
SHARDTRAIN_CUDA_ARCH=${SHARDTRAIN_CUDA_ARCH:-90a} tools/device/build_on_device.sh build-gpu > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - s )) s"
build-gpu/cuda_ops_gpu_test --gtest_filter='*Attention*' > "$OUT/attn-tests.log" 2>&1
tail -2 "$OUT/attn-tests.log"; grep -E "FAILED|Failure" "$OUT/attn-tests.log" | head -10
for hpb in default ${PROBE_SLICES:-1 2 3 6}; do
  if [[ $hpb == default ]]; then unset SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK
  else export SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK=$hpb; fi
  echo "== heads per backward block: $hpb"
  filter='*AttentionThroughputBenchShape*'
  [[ $hpb == default ]] && filter+=':*DISABLED_Throughput'
  build-gpu/cuda_ops_gpu_test --gtest_also_run_disabled_tests --gtest_filter="$filter" 2>&1 |
    grep -E "^(attention|linear|rmsnorm|cross)"
done
unset SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK
mkdir -p "$OUT/bench"
for shape in ${PROBE_SHAPES:-qwen2.5-1.5b}; do
  config=bench/shapes/$shape/config.json tokens=$OUT/bench/tokens-$shape.bin
  python3 bench/benchlib.py tokens "$config" "$tokens" 4096 16
  SHARDTRAIN_PROFILE_OPS=1 build-gpu/shardtrain train --config bench/bench.toml \
    --model.path=bench/shapes/$shape --data.path="$tokens" --data.seq_len=4096 \
    --train.micro_batch=2 --train.steps=3 > "$OUT/bench/$shape-profile.log" 2>&1
  echo "== $shape"; sed -n '/op profile/,$p' "$OUT/bench/$shape-profile.log"
done
echo "total $(( $(date +%s) - s )) s"
