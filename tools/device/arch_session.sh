#!/usr/bin/env bash
# Issue 17 on the H200 (through the device tool, carrying .devkit): the gpu tests
#   (a) with the default fat build (sm_80, 86, 89, 90a + compute_90 PTX; the H200 runs 90a),
#   (b) with an sm_80-only build (the H200 JIT-compiles its compute_80 PTX: the mma.sync code an
#       A100 or L4 runs, no wgmma),
#   (c) with the fat build and the dispatcher told an L4's and an A100's limits
#       (SHARDTRAIN_TEST_DEVICE_LIMITS, ops/test_device_limits.h),
# each including the 50-step GPU-vs-CPU training parity; then, with ARCH_BENCH=1 (or shapes
# given), the speed of both builds beside compiled PyTorch FSDP2 (tools/device/arch_bench.sh).
# Usage: [ARCH_BENCH=1] tools/device/arch_session.sh [bench shapes...]. Logs under $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
cd "$root"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
tests=(cuda_dispatch_test cuda_ops_gpu_test train_parity_gpu_test fsdp_host_staged_gpu_test
  nccl_comm_gpu_test)
start=$(date +%s)
half=$(($(nproc) / 2))
build() {  # dir arch(empty: fat) -> log; prints its time
  local dir=$1 arch=$2 s=$(date +%s)
  SHARDTRAIN_CUDA_ARCH=$arch BUILD_JOBS=$half NVCC_THREADS=${3:-1} \
    tools/device/build_on_device.sh "$dir" shardtrain "${tests[@]}" >"$out/$dir.log" 2>&1
  echo "$dir: rc $? in $(($(date +%s) - s)) s"
}
build build-fat "" 4 &
build build-80 80 1 &
wait
[[ -x build-fat/shardtrain && -x build-80/shardtrain ]] || { tail -20 "$out"/build-*.log; exit 1; }
suite() {  # name dir [env...]: every test binary, one log per suite; prints gtest's summary
  local name=$1 dir=$2
  shift 2
  for t in "${tests[@]}"; do
    echo "== $t"
    env "$@" "$dir/$t" 2>&1
  done >"$out/tests-$name.log"
  local passed failed
  passed=$(grep -h "^\[  PASSED  \]" "$out/tests-$name.log" | awk '{s += $4} END {print s + 0}')
  failed=$(grep -c "^\[  FAILED  \] [A-Za-z]" "$out/tests-$name.log")
  echo "$name: $passed passed, $failed failed; parity:" \
    "$(grep -o 'largest relative difference [0-9.e-]*' "$out/tests-$name.log" | awk '{print $4}' | tr '\n' ' ')"
  grep "^\[  FAILED  \] [A-Za-z]" "$out/tests-$name.log" | head -5
}
suite a-fat build-fat OPENBLAS_NUM_THREADS=4 &
suite b-sm80 build-80 OPENBLAS_NUM_THREADS=4 &
suite c-l4 build-fat OPENBLAS_NUM_THREADS=4 SHARDTRAIN_TEST_DEVICE_LIMITS=l4 &
suite c-a100 build-fat OPENBLAS_NUM_THREADS=4 SHARDTRAIN_TEST_DEVICE_LIMITS=a100 &
wait
grep -h "^\(a100\|a10g\|l4\|h100\) D=" "$out/tests-a-fat.log" "$out/tests-b-sm80.log" | sort -u | head -12
cuobjdump --list-elf build-fat/shardtrain 2>/dev/null | grep -o "sm_[0-9a]*" | sort | uniq -c
cuobjdump --list-ptx build-fat/shardtrain 2>/dev/null | grep -o "sm_[0-9a]*" | sort | uniq -c
echo "tests done: $(($(date +%s) - start)) s"
if [[ -n ${ARCH_BENCH:-} ]] || (($# > 0)); then
  tools/device/arch_bench.sh "$@"
fi
echo "session: $(($(date +%s) - start)) s"
# At most 8 files come back from $OUT: everything but the console log goes into one archive.
(cd "$out" && tar czf /tmp/logs.tgz --exclude=session.log . && find . -mindepth 1 \
  ! -name session.log -delete && mv /tmp/logs.tgz .)
