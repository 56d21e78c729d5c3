// What GPU code this binary carries and which CUDA runtime it was built against, for
// `shardtrain doctor` (and anything else that must say whether a GPU can run this build before
// any kernel is launched).
//
// The architecture list is read from the compiler (nvcc's __CUDA_ARCH_LIST__ in a .cu file of
// ops/cuda), so it is always the list CMake really compiled (SHARDTRAIN_CUDA_ARCH); a CPU-only
// build has none. Nothing here needs a GPU or a driver.
#pragma once

#include <string>
#include <vector>

namespace shardtrain {

struct CudaBuildInfo {
  bool with_cuda = false;  // the CUDA backend is compiled in
  int runtime_built = 0;   // CUDART_VERSION the binary was compiled with (13000 = 13.0); 0 = none
  int runtime_loaded = 0;  // cudaRuntimeGetVersion() of the runtime in use; 0 = none
  std::vector<int> archs;  // compiled GPU architectures, e.g. {80, 86, 89, 90}
  bool newest_arch_specific = false;  // newest is an arch-specific target (sm_90a): no forward PTX
};

// The facts above for this binary.
CudaBuildInfo cuda_build_info();

// Whether a GPU of compute capability major.minor can run this build:
//   kNative: SASS of the same major and a minor <= the GPU's was compiled;
//   kPtxJit: only PTX of an older architecture fits (the driver compiles it at first load);
//   kNo:     below 8.0 (no bf16), or nothing compiled that the GPU can load.
enum class ArchSupport { kNative, kPtxJit, kNo };
ArchSupport build_supports_compute_capability(const CudaBuildInfo& build, int major, int minor);

// "sm_80, sm_86, sm_90a" (the newest marked "a" when arch-specific), or "none".
std::string describe_archs(const CudaBuildInfo& build);

}  // namespace shardtrain
