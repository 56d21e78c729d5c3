#include "dist/nccl_build_version.h"

#if defined(SHARDTRAIN_WITH_NCCL)
#include <nccl.h>
#endif

namespace shardtrain {

int nccl_build_version() {
#if defined(SHARDTRAIN_WITH_NCCL)
  return NCCL_VERSION_CODE;
#else
  return 0;
#endif
}

}  // namespace shardtrain
