// Probe of the wgmma building blocks (ops/cuda/cuda_wgmma.cuh) against a host reference: the
// descriptor layouts of K-major and MN-major swizzled tiles, descriptor (SS) and register (RS) A
// operands, N = 64 and 128, K = 128 (two column blocks). Prints one line per case with the
// largest difference. Build: nvcc -std=c++17 -arch=sm_90a -I src tools/device/wgmma_probe.cu
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/cuda/cuda_wgmma.cuh"

using namespace shardtrain::cuda_kernels;
using bf16 = __nv_bfloat16;
constexpr int M = 64, K = 128;

__device__ uint32_t pack2(bf16 lo, bf16 hi) {
  __nv_bfloat162 v;
  v.x = lo;
  v.y = hi;
  return *reinterpret_cast<uint32_t*>(&v);
}

// mode 0: SS, A [M][K] K-major, B [N][K] K-major: C = A B^T
// mode 1: RS, A registers from A [M][K], B stored [K][N] MN-major: C = A B
// mode 2: SS, A stored [K][M] MN-major (A(m,k) = As[k][m]), B [N][K] K-major
// mode 3: like 1 with leading/stride swapped in the B descriptor
template <int N>
__global__ void probe(int mode, const bf16* a, const bf16* b, float* c) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* a_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* b_s = a_s + M * K;
  const int tid = threadIdx.x;
  const bool a_mn = mode == 2, b_mn = mode == 1 || mode == 3;
  for (int i = tid; i < M * K; i += 128) {
    const int r = i / K, col = i % K;  // logical A(r, col)
    if (a_mn) {
      a_s[wgmma::swizzled_offset(K, col, r)] = a[i];
    } else {
      a_s[wgmma::swizzled_offset(M, r, col)] = a[i];
    }
  }
  for (int i = tid; i < N * K; i += 128) {
    const int n = i / K, k = i % K;  // logical B^T(n, k) = b[n][k]
    if (b_mn) {
      b_s[wgmma::swizzled_offset(K, k, n)] = b[i];
    } else {
      b_s[wgmma::swizzled_offset(N, n, k)] = b[i];
    }
  }
  wgmma::fence_shared_for_async_proxy();
  __syncthreads();
  const uint32_t a_addr = static_cast<uint32_t>(__cvta_generic_to_shared(a_s));
  const uint32_t b_addr = static_cast<uint32_t>(__cvta_generic_to_shared(b_s));
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#if SHARDTRAIN_WGMMA_COMPILED
  wgmma::fence();
  for (int kk = 0; kk < K / 16; ++kk) {
    if (mode == 0 || mode == 2) {
      const uint64_t ad = mode == 0 ? wgmma::k_major(a_addr, M, 0, kk) : wgmma::mn_major(a_addr, K, kk);
      const uint64_t bd = wgmma::k_major(b_addr, N, 0, kk);
      if constexpr (N == 64) {
        if (mode == 0) wgmma::wgmma_ss_n64<0, 0>(d, ad, bd, 1); else wgmma::wgmma_ss_n64<1, 0>(d, ad, bd, 1);
      } else {
        if (mode == 0) wgmma::wgmma_ss_n128<0, 0>(d, ad, bd, 1); else wgmma::wgmma_ss_n128<1, 0>(d, ad, bd, 1);
      }
    } else {
      uint32_t af[4];
      const bf16* row0 = a + (16 * warp + g) * K + 16 * kk + 2 * t;
      const bf16* row8 = row0 + 8 * K;
      af[0] = pack2(row0[0], row0[1]);
      af[1] = pack2(row8[0], row8[1]);
      af[2] = pack2(row0[8], row0[9]);
      af[3] = pack2(row8[8], row8[9]);
      uint64_t bd = wgmma::mn_major(b_addr, K, kk);
      if (mode == 3) {
        const uint32_t address = b_addr + kk * 16 * 128;
        bd = wgmma::descriptor(address, 1024, K * 128);
      }
      if constexpr (N == 64) wgmma::wgmma_rs_n64<1>(d, af, bd, 1); else wgmma::wgmma_rs_n128<1>(d, af, bd, 1);
    }
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_registers(d);
#endif
  for (int i = 0; i < N / 2; ++i) {
    const int j = i / 4, e = i % 4;
    const int row = 16 * warp + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
    c[row * N + col] = d[i];
  }
}

template <int N>
void run(int mode) {
  std::vector<bf16> a(M * K), b(N * K);
  std::vector<float> af(M * K), bf(N * K);
  srand(7 + mode * 13 + N);
  for (int i = 0; i < M * K; ++i) { a[i] = __float2bfloat16((rand() % 2001 - 1000) / 1000.0f); af[i] = __bfloat162float(a[i]); }
  for (int i = 0; i < N * K; ++i) { b[i] = __float2bfloat16((rand() % 2001 - 1000) / 1000.0f); bf[i] = __bfloat162float(b[i]); }
  bf16 *da, *db; float* dc;
  cudaMalloc(&da, a.size() * 2); cudaMalloc(&db, b.size() * 2); cudaMalloc(&dc, M * N * 4);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dc, 0, M * N * 4);
  const size_t smem = (M * K + N * K) * 2;
  cudaFuncSetAttribute(probe<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  probe<N><<<1, 128, smem>>>(mode, da, db, dc);
  cudaError_t err = cudaDeviceSynchronize();
  std::vector<float> c(M * N);
  cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost);
  double worst = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(af[m * K + k]) * bf[n * K + k];
      worst = std::fmax(worst, std::fabs(ref - c[m * N + n]));
    }
  std::printf("wgmma probe mode %d N %d: %s largest difference %.3g -> %s\n", mode, N,
              cudaGetErrorString(err), worst, worst < 1e-2 ? "OK" : "WRONG");
  cudaFree(da); cudaFree(db); cudaFree(dc);
}

int main() {
  for (int mode = 0; mode < 4; ++mode) { run<64>(mode); run<128>(mode); }
  return 0;
}
