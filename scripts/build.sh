#!/usr/bin/env bash
# Configures and builds shardtrain into build/ (or $SHARDTRAIN_BUILD_DIR). Extra arguments are
# passed to cmake's configure step, e.g. -DSHARDTRAIN_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${SHARDTRAIN_BUILD_DIR:-$root/build}
# ccache, where installed, makes rebuilds in several build dirs of one checkout cheap.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" \
  >/dev/null
cmake --build "$build_dir" -j "${SHARDTRAIN_JOBS:-$(nproc)}"
