// The compiled architecture list and runtime version of this CUDA build (ops/cuda_build_info.h).
// nvcc defines __CUDA_ARCH_LIST__ (e.g. 800,860,900) in host and device passes alike.
#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

#include "ops/cuda_build_info.h"

#define SHARDTRAIN_STRINGIFY_INNER(...) #__VA_ARGS__
#define SHARDTRAIN_STRINGIFY(...) SHARDTRAIN_STRINGIFY_INNER(__VA_ARGS__)

namespace shardtrain {

CudaBuildInfo cuda_build_info_from_nvcc() {
  CudaBuildInfo info;
  info.with_cuda = true;
  info.runtime_built = CUDART_VERSION;
  int loaded = 0;
  if (cudaRuntimeGetVersion(&loaded) == cudaSuccess) info.runtime_loaded = loaded;
#if defined(__CUDA_ARCH_LIST__)
  std::stringstream list(SHARDTRAIN_STRINGIFY(__CUDA_ARCH_LIST__));
  for (std::string item; std::getline(list, item, ',');) {
    if (!item.empty()) info.archs.push_back(std::stoi(item) / 10);
  }
#endif
#if defined(SHARDTRAIN_CUDA_WGMMA)
  info.newest_arch_specific = true;  // CMake compiled 90a (ops/cuda's wgmma kernels)
#endif
  return info;
}

}  // namespace shardtrain
