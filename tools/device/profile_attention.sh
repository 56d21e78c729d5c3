#!/usr/bin/env bash
# Nsight Compute profile of the wgmma attention kernels at the Qwen shape (first forward and
# backward launch of DISABLED_AttentionThroughputBenchShape), clocks left alone
# (--clock-control none). Through the device tool, carrying .devkit; report in $OUT/ncu.txt.
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/.devkit/usr/lib/x86_64-linux-gnu:$PWD/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
SHARDTRAIN_CUDA_ARCH=${SHARDTRAIN_CUDA_ARCH:-90a} tools/device/build_on_device.sh build-gpu cuda_ops_gpu_test > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 150 $NCU --clock-control none -k regex:"wgmma_(forward|backward)_kernel" -c 2 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section Occupancy --section MemoryWorkloadAnalysis build-gpu/cuda_ops_gpu_test --gtest_also_run_disabled_tests --gtest_filter='*AttentionThroughputBenchShape*' > $OUT/ncu.txt 2>&1
echo "rc $?"; grep -E "wgmma_|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Stall|Achieved Occupancy|L1/TEX Hit|Shared|ERR|error" $OUT/ncu.txt | head -60
