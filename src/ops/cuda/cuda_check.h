// Checks for CUDA runtime and cuBLASLt calls. A failing call is a broken invariant or a broken
// machine, never a user error: print file:line, the call and the library's error string, then
// abort. Usable from both .cu (nvcc) and .cpp (host compiler) files; depends on no fmt.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace shardtrain::cuda_detail {

[[noreturn]] inline void cuda_failed(const char* file, int line, const char* call,
                                     cudaError_t status) {
  std::fprintf(stderr,
               "%s:%d: CUDA error %s (%s) in %s\nHINT: run nvidia-smi; an illegal "
               "address usually means a kernel bug (rerun under compute-sanitizer)\n",
               file, line, cudaGetErrorName(status), cudaGetErrorString(status), call);
  std::abort();
}

[[noreturn]] inline void cublas_failed(const char* file, int line, const char* call,
                                       cublasStatus_t status) {
  std::fprintf(stderr, "%s:%d: cuBLASLt error %d (%s) in %s\n", file, line,
               static_cast<int>(status), cublasLtGetStatusString(status), call);
  std::abort();
}

}  // namespace shardtrain::cuda_detail

#define SHARDTRAIN_CUDA_CHECK(call)                                                          \
  do {                                                                                       \
    const cudaError_t shardtrain_status_ = (call);                                           \
    if (shardtrain_status_ != cudaSuccess)                                                   \
      ::shardtrain::cuda_detail::cuda_failed(__FILE__, __LINE__, #call, shardtrain_status_); \
  } while (0)

#define SHARDTRAIN_CUBLAS_CHECK(call)                                                          \
  do {                                                                                         \
    const cublasStatus_t shardtrain_status_ = (call);                                          \
    if (shardtrain_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::shardtrain::cuda_detail::cublas_failed(__FILE__, __LINE__, #call, shardtrain_status_); \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define SHARDTRAIN_CUDA_CHECK_LAUNCH() SHARDTRAIN_CUDA_CHECK(cudaGetLastError())
