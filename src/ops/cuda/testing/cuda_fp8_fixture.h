// The fixture of the FP8 GPU tests (cuda_fp8_gpu_test, cuda_fp8_throughput_gpu_test):
// CudaOpsTest that also skips, naming the reason, where CudaOps runs no FP8 (below sm_89, or a
// bad SHARDTRAIN_FP8_* value).
#pragma once

#include <string>

#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain::cuda_testing {

class CudaFp8Test : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    const std::string reason = gpu_->fp8_unsupported_reason();
    if (!reason.empty()) GTEST_SKIP() << "no FP8 on this GPU: " << reason;
  }
};

}  // namespace shardtrain::cuda_testing
