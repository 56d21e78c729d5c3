# shellcheck shell=bash
# The shared preamble of the GPU-machine scripts (sourced, never run): strict-ish bash, the repo
# root as the working directory, $out (= $OUT, where the device tool collects files), the
# carried .devkit's libraries (tools/device/make_devkit.sh), the multi-GPU settings every run on a
# shared machine keeps, the build dir, and small helpers. Variables it reads:
#   OUT           where logs go (default /tmp/out)
#   BUILD_DIR     the CUDA build (default build-gpu, relative to the repo root)
#   BUDGET_S      the call's time budget for `room` (default 560 s: the device tool's 600 s less
#                 the time to return $OUT)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/out}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
kit=$root/.devkit/usr
export LD_LIBRARY_PATH=$kit/lib/x86_64-linux-gnu:$kit/lib:${LD_LIBRARY_PATH:-}
# NVLink multicast (NVLS) stays off on shared machines, for NCCL and for PyTorch's baseline.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
budget=${BUDGET_S:-560}
# Seconds since the script started.
elapsed() { echo $(($(date +%s) - start)); }
# room SECONDS WHAT: true when SECONDS more fit in the budget, else says WHAT was skipped.
room() { (($(elapsed) + $1 < budget)) || { echo "$2: skipped (call at $(elapsed) s)"; return 1; }; }
# The GPU test binaries: every src/**/*_gpu_test.cpp, and the dispatch table's test (a unit test
# that exists only in CUDA builds).
gpu_test_names() {
  echo cuda_dispatch_test
  find "$root/src" -name '*_gpu_test.cpp' -printf '%f\n' | sed 's/\.cpp$//' | sort
}
# Builds `$build` (SHARDTRAIN_CUDA_ARCH, default 90a: one architecture, a faster build) with the
# product, the test worker and the targets given; the log goes to $out/build-$(basename $build).log.
build_gpu() {
  SHARDTRAIN_CUDA_ARCH=${SHARDTRAIN_CUDA_ARCH:-90a} tools/device/build_on_device.sh "$build" \
    shardtrain shardtrain_test_worker "$@" >"$out/build-$(basename "$build").log" 2>&1 ||
    { tail -30 "$out/build-$(basename "$build").log"; return 1; }
}
gpu_info() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  git log -1 --format='commit %h %s' 2>/dev/null || true
}
