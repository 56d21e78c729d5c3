#!/usr/bin/env bash
# Attention-only GPU-machine check (through the device tool, carrying .devkit): builds
# cuda_ops_gpu_test, runs the attention gpu tests, times the attention kernels at the benchmark
# shapes (wgmma and mma.sync side by side; also $OUT/attention-timing.txt) and runs the forward
# tests under compute-sanitizer memcheck. About 45 s; logs under $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/.devkit/usr/lib/x86_64-linux-gnu:$PWD/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
s=$(date +%s)
SHARDTRAIN_CUDA_ARCH=${SHARDTRAIN_CUDA_ARCH:-90a} tools/device/build_on_device.sh build-gpu cuda_ops_gpu_test > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - s )) s"
build-gpu/cuda_ops_gpu_test --gtest_filter='*Attention*' > $OUT/attn-tests.log 2>&1; tail -4 $OUT/attn-tests.log; grep -E "FAILED|Failure|Expected|error" $OUT/attn-tests.log | head -20
build-gpu/cuda_ops_gpu_test --gtest_also_run_disabled_tests --gtest_filter='*AttentionThroughputBenchShape*' 2>&1 | grep "^attention"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$CS" ] && timeout 200 $CS --tool memcheck build-gpu/cuda_ops_gpu_test --gtest_filter='*ForwardForEveryKernel*' 2>&1 | tail -4
echo "total $(( $(date +%s) - s )) s"
