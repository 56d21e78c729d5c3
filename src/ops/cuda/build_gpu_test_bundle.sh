#!/usr/bin/env bash
# Builds cuda_ops_gpu_test by hand into build-cuda/gpu_run/ (a self-contained bundle: the test
# binary with static gtest/OpenBLAS/libstdc++ plus libfmt.so.9), for the lent GPU machine, whose
# image lacks toml++ and other Debian packages the project's CMake configure requires.
# Run it on the GPU machine with:
#   cd build-cuda/gpu_run && LD_LIBRARY_PATH=$PWD:/usr/local/cuda/lib64 ./cuda_ops_gpu_test
# (carry "build-cuda/gpu_run"). Only the files the test needs are compiled: core, ops/cpu,
# ops/cuda.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
objects=build-cuda/gpu_bundle/obj
bundle=build-cuda/gpu_run
mkdir -p "$objects" "$bundle"
nvcc="/usr/local/cuda/bin/nvcc -std=c++20 -O2 -g -lineinfo -arch=sm_90 --expt-relaxed-constexpr -Isrc"
cxx="g++ -std=c++20 -O2 -g -Isrc -I/usr/local/cuda/include -DSHARDTRAIN_WITH_CUDA=1"
{
  for f in src/ops/cuda/*.cu; do echo "$nvcc -c $f -o $objects/$(basename "$f").o"; done
  for f in src/core/dtype.cpp src/core/error.cpp src/core/tensor.cpp src/core/host_buffer.cpp \
           src/core/log.cpp src/ops/cpu/cpu_ops.cpp src/ops/cpu/cpu_layers.cpp \
           src/ops/cpu/cpu_attention.cpp src/ops/cpu/cpu_cross_entropy.cpp \
           src/ops/cuda/cuda_ops.cpp src/ops/cuda/cuda_layers.cpp src/ops/cuda/cuda_gemm.cpp \
           src/ops/cuda/cuda_ops_gpu_test.cpp; do
    echo "$cxx -c $f -o $objects/$(basename "$f").o"
  done
} | xargs -P "${SHARDTRAIN_JOBS:-2}" -I{} sh -c "{}"
g++ -o "$bundle/cuda_ops_gpu_test" "$objects"/*.o -L/usr/local/cuda/lib64 -lcublasLt \
  -lcudart_static -lgtest_main -lgtest /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a \
  -lgfortran -lfmt -lpthread -ldl -lrt -static-libstdc++ -static-libgcc
cp -L /lib/x86_64-linux-gnu/libfmt.so.9 "$bundle/"
echo "built $bundle/cuda_ops_gpu_test"
