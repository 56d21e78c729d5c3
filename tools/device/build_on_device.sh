#!/usr/bin/env bash
# Builds shardtrain with CUDA (sm_90a) on the GPU machine against the carried .devkit (see
# make_devkit.sh). Usage: tools/device/build_on_device.sh [BUILD_DIR] [cmake targets...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
shift || true
kit=$root/.devkit/usr
export LD_LIBRARY_PATH=$kit/lib/x86_64-linux-gnu:$kit/lib:${LD_LIBRARY_PATH:-}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$kit" -DSHARDTRAIN_CUDA=${SHARDTRAIN_CUDA:-ON} -DSHARDTRAIN_CUDA_ARCH=90a \
  -DCMAKE_LIBRARY_PATH="$kit/lib/x86_64-linux-gnu;$kit/lib" >/dev/null
if (($# > 0)); then
  cmake --build "$build" -j "$(nproc)" --target "$@"
else
  cmake --build "$build" -j "$(nproc)"
fi
