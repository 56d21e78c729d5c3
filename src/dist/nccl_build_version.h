// The NCCL version this binary was compiled against, for `shardtrain doctor` to compare with the
// libnccl.so.2 found at run time.
#pragma once

namespace shardtrain {

// NCCL_VERSION_CODE of the nccl.h the build used (2.28.3 = 22803); 0 in builds without NCCL.
int nccl_build_version();

}  // namespace shardtrain
