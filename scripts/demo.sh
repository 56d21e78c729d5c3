#!/usr/bin/env bash
# The README's main job: installs what building and the demo need (scripts/setup.sh build: no
# etcd, Prometheus, PyTorch, clang, debootstrap or npm, which only the tests use), builds for
# the GPU it finds, and runs the demo fine-tune (examples/demo.toml) on it (CPU if no GPU).
# The fat binary (every supported GPU) is for the package, the image and CI: scripts/test.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" build
# CUDA kernels only for the GPU present: its compute capability (nvidia-smi), 9.0 as 90a for the
# Hopper kernels; no GPU, or no nvcc: the CPU build, no CUDA kernels at all. The fuzz targets
# are the tests' (scripts/test.sh).
build_args=(-DSHARDTRAIN_FUZZ=OFF)
capability=""
if command -v nvidia-smi >/dev/null 2>&1; then
  capability=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 |
    tr -d ' .' || true)
fi
if [[ $capability =~ ^[0-9]+$ ]] && { command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  [[ $capability == 90 ]] && capability=90a
  echo "demo: building for the GPU found (sm_$capability)"
  build_args+=(-DSHARDTRAIN_CUDA=ON "-DSHARDTRAIN_CUDA_ARCH=$capability")
else
  echo "demo: no GPU (or no CUDA toolkit) found: building for the CPU"
  build_args+=(-DSHARDTRAIN_CUDA=OFF)
fi
"$root/scripts/build.sh" "${build_args[@]}"
cd "$root"
./build/shardtrain train --config examples/demo.toml --metrics out/demo-metrics.jsonl "$@"
./build/shardtrain eval --model out/demo-model --data examples/demo-data.bin --seq-len 128 \
  --batch 8 --max-sequences 512 --device cpu
