#!/usr/bin/env bash
# Builds shardtrain with CUDA on the GPU machine against the carried .devkit (see make_devkit.sh).
# Usage: [SHARDTRAIN_CUDA_ARCH=90a|80|...] [SHARDTRAIN_CMAKE_ARGS="-D..."]
#        tools/device/build_on_device.sh [BUILD_DIR] [targets...]
# Without SHARDTRAIN_CUDA_ARCH: the default fat binary (sm_80, 86, 89, 90a + compute_90 PTX).
# BUILD_JOBS (default nproc) and NVCC_THREADS (nvcc --threads: architectures of one file
# compiled in parallel; default 4) split the cores when two builds run side by side.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
shift || true
kit=$root/.devkit/usr
export LD_LIBRARY_PATH=$kit/lib/x86_64-linux-gnu:$kit/lib:${LD_LIBRARY_PATH:-}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
arch=()
[[ -n ${SHARDTRAIN_CUDA_ARCH:-} ]] && arch=(-DSHARDTRAIN_CUDA_ARCH="$SHARDTRAIN_CUDA_ARCH")
# SHARDTRAIN_CMAKE_ARGS: more -D options, e.g. -DSHARDTRAIN_DEBUG_PIPELINES=ON.
read -r -a extra <<<"${SHARDTRAIN_CMAKE_ARGS:-}"
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$kit" -DSHARDTRAIN_CUDA=${SHARDTRAIN_CUDA:-ON} "${arch[@]}" "${extra[@]}" \
  -DCMAKE_CUDA_FLAGS="--threads=${NVCC_THREADS:-4}" \
  -DCMAKE_LIBRARY_PATH="$kit/lib/x86_64-linux-gnu;$kit/lib" >/dev/null
if (($# > 0)); then
  cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}" --target "$@"
else
  cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}"
fi
