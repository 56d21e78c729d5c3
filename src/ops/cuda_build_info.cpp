#include "ops/cuda_build_info.h"

#include <algorithm>

namespace shardtrain {

#if defined(SHARDTRAIN_WITH_CUDA)
CudaBuildInfo cuda_build_info_from_nvcc();  // ops/cuda/cuda_build_info.cu
#endif

CudaBuildInfo cuda_build_info() {
#if defined(SHARDTRAIN_WITH_CUDA)
  return cuda_build_info_from_nvcc();
#else
  return {};
#endif
}

ArchSupport build_supports_compute_capability(const CudaBuildInfo& build, int major, int minor) {
  const int gpu = major * 10 + minor;
  if (major < 8 || build.archs.empty()) return ArchSupport::kNo;
  const int newest = *std::max_element(build.archs.begin(), build.archs.end());
  for (const int arch : build.archs) {
    // SASS runs on GPUs of the same major revision with an equal or higher minor one; an
    // arch-specific target (sm_90a) only on exactly its own.
    const bool specific = build.newest_arch_specific && arch == newest;
    if (arch / 10 == major && (specific ? arch == gpu : arch % 10 <= minor)) {
      return ArchSupport::kNative;
    }
  }
  // CMake embeds PTX of the newest architecture; arch-specific PTX does not JIT elsewhere.
  if (!build.newest_arch_specific && gpu > newest) return ArchSupport::kPtxJit;
  return ArchSupport::kNo;
}

std::string describe_archs(const CudaBuildInfo& build) {
  if (build.archs.empty()) return "none";
  const int newest = *std::max_element(build.archs.begin(), build.archs.end());
  std::string text;
  for (const int arch : build.archs) {
    if (!text.empty()) text += ", ";
    text += "sm_" + std::to_string(arch);
    if (build.newest_arch_specific && arch == newest) text += "a";
  }
  return text;
}

}  // namespace shardtrain
