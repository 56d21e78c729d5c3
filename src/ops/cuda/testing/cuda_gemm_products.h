// Test support for CublasLtGemm's tests and timings (cuda_gemm_gpu_test, cuda_lora_gpu_test): a
// product in CublasLtGemm's column-major terms, its GemmCall on packed operands, its fp64
// reference and relative error, and a device-time stopwatch for one call in a CUDA graph (no
// launch latency).
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain::cuda_testing {

// A column-major product as CublasLtGemm takes it: D (m x n, ld m) = alpha op(A) op(B) + beta C,
// A stored m x k (k x m when transposed), B k x n (n x k when transposed), each with its stored
// rows as leading dimension: exactly the calls of CudaOps::linear_* (cuda_gemm.cpp), e.g. LoRA's
// x @ A^T is (T, N, m = S, n = tokens, k = I), d(h) = g @ B is (N, N, S, tokens, O) and d(A) =
// d(h)^T @ x is (N, T, I, S, tokens).
struct ColumnMajorProduct {
  const char* name;
  bool transpose_a, transpose_b;
  int64_t m, n, k;
  DType out;
};

// D's fp64 value (without C): sum_l op(A)(i, l) op(B)(l, j).
inline std::vector<double> reference_product(const ColumnMajorProduct& p,
                                             const std::vector<float>& a,
                                             const std::vector<float>& b) {
  std::vector<double> d(static_cast<size_t>(p.m * p.n));
  for (int64_t j = 0; j < p.n; ++j) {
    for (int64_t i = 0; i < p.m; ++i) {
      double sum = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double a_il = p.transpose_a ? a[l + i * p.k] : a[i + l * p.m];
        const double b_lj = p.transpose_b ? b[j + l * p.n] : b[l + j * p.k];
        sum += a_il * b_lj;
      }
      d[i + j * p.m] = sum;
    }
  }
  return d;
}

// The GEMM of p on packed operands (each leading dimension its operand's row count), written to d.
inline GemmCall call_of(const ColumnMajorProduct& p, const void* a, const void* b, void* d) {
  GemmCall call;
  call.transpose_a = p.transpose_a;
  call.transpose_b = p.transpose_b;
  call.m = p.m;
  call.n = p.n;
  call.k = p.k;
  call.a = a;
  call.lda = p.transpose_a ? p.k : p.m;
  call.b = b;
  call.ldb = p.transpose_b ? p.n : p.k;
  call.c = d;
  call.c_dtype = p.out;
  call.ldc = p.m;
  return call;
}

// A product's operands on the GPU (random bf16 A and B, a zeroed output of the product's dtype),
// its fp64 reference and the relative error a result may have (f32 output 1e-5, bf16 8e-3).
struct ProductOperands {
  Tensor a, b, d;
  std::vector<double> product;
  double bound = 0;
};

// CudaOpsTest with the operands of a product (the GEMM tests of every candidate).
class GemmProductTest : public CudaOpsTest {
 protected:
  ProductOperands product_operands(const ColumnMajorProduct& p) {
    const int64_t a_rows = p.transpose_a ? p.k : p.m, a_cols = p.transpose_a ? p.m : p.k;
    const int64_t b_rows = p.transpose_b ? p.n : p.k, b_cols = p.transpose_b ? p.k : p.n;
    const std::vector<float> a = random(a_rows * a_cols), b = random(b_rows * b_cols);
    ProductOperands o;
    o.a = gpu_tensor(a, DType::kBF16, Shape{a_cols, a_rows});
    o.b = gpu_tensor(b, DType::kBF16, Shape{b_cols, b_rows});
    o.d = gpu_tensor(std::vector<float>(p.m * p.n), p.out, Shape{p.n, p.m});
    o.product = reference_product(p, a, b);
    o.bound = p.out == DType::kF32 ? 1e-5 : 8e-3;
    return o;
  }
};

// ||got - (alpha product + c)|| / ||alpha product + c||; infinity when anything is not finite.
inline double product_error(const std::vector<float>& got, const std::vector<double>& product,
                            double alpha, const std::vector<float>& c) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double want = alpha * product[i] + (c.empty() ? 0.0 : c[i]);
    diff += (got[i] - want) * (got[i] - want);
    norm += want * want;
  }
  return std::sqrt(diff / norm);
}

// Device microseconds of one call: 20 runs captured in a CUDA graph (the key planned and timed
// before), replayed 5 times between two events.
inline double graph_us(CublasLtGemm& gemm, const GemmCall& call, cudaStream_t stream) {
  constexpr int kRuns = 20, kReplays = 5;
  gemm.run(call);
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kRuns; ++i) gemm.run(call);
  SHARDTRAIN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  SHARDTRAIN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  SHARDTRAIN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  const float ms = elapsed_device_ms(stream, [&] {
    for (int r = 0; r < kReplays; ++r) SHARDTRAIN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 1e3 * ms / (kRuns * kReplays);
}

}  // namespace shardtrain::cuda_testing
