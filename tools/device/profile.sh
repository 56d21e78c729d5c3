#!/usr/bin/env bash
# Profiles on the GPU machine (through the device tool, carrying .devkit; builds $BUILD_DIR,
# sm_90a by default, when what it runs is missing). Measurement aids, not benchmarks (those are
# bench/run_bench.sh's, with PyTorch in the same call).
#   ops [SHAPE[@SEQ[xMB]] ...]   a 3-step run of ours per shape (bench/shapes/SHAPE, default
#                                qwen2.5-1.5b at 4096 x 2, random tokens) with
#                                SHARDTRAIN_PROFILE_OPS=1: device time per op class, each op
#                                synchronised (so the step is slower than in a benchmark)
#   ncu [KERNEL_REGEX]           Nsight Compute (clocks left alone) of the first forward and
#                                backward launch of the attention kernels at the benchmark
#                                shapes (DISABLED_AttentionThroughputBenchShape; default regex:
#                                the warp-specialised and wgmma kernels); report $OUT/ncu.txt
# Usage: tools/device/profile.sh ops|ncu [ARGS...]
source "$(dirname "$0")/common.sh"
mode=${1:-}
shift || true
case $mode in
  ops)
    [[ -x $build/shardtrain ]] || build_gpu || exit 1
    shapes=("$@")
    ((${#shapes[@]})) || shapes=(qwen2.5-1.5b)
    mkdir -p "$out/profile"
    for run in "${shapes[@]}"; do
      shape=${run%%@*} seq=4096 mb=2
      if [[ $run == *@* ]]; then size=${run#*@} seq=${size%%x*}; [[ $size == *x* ]] && mb=${size#*x}; fi
      config=bench/shapes/$shape/config.json tokens=$out/profile/tokens-$shape-$seq.bin
      [[ -f $config ]] || { echo "no $config" >&2; exit 2; }
      python3 bench/benchlib.py tokens "$config" "$tokens" "$seq" 16
      SHARDTRAIN_PROFILE_OPS=1 "$build/shardtrain" train --config bench/bench.toml \
        --model.path="bench/shapes/$shape" --data.path="$tokens" --data.seq_len="$seq" \
        --train.micro_batch="$mb" --train.steps=3 >"$out/profile/$run.log" 2>&1
      echo "== $run (rc $?)"
      sed -n '/op profile/,$p' "$out/profile/$run.log"
    done
    ;;
  ncu)
    [[ -x $build/cuda_ops_throughput_gpu_test ]] || build_gpu cuda_ops_throughput_gpu_test || exit 1
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
    [[ -n $ncu ]] || { echo "no ncu (Nsight Compute) on this machine" >&2; exit 2; }
    timeout 300 "$ncu" --clock-control none -k "regex:${1:-wgmma.*(forward|backward)}" -c 4 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section Occupancy --section MemoryWorkloadAnalysis \
      "$build/cuda_ops_throughput_gpu_test" --gtest_also_run_disabled_tests \
      --gtest_filter='*AttentionThroughputBenchShape*' >"$out/ncu.txt" 2>&1
    echo "ncu rc $?"
    grep -E "wgmma|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|ERR|error" \
      "$out/ncu.txt" | head -60
    ;;
  *)
    sed -n '2,14p' "$0"
    exit 2
    ;;
esac
echo "profile: $(elapsed) s"
