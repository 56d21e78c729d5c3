// Test support, included only by *_gpu_test.cpp files: registers a GoogleTest environment that
// reads SHARDTRAIN_TEST_DEVICE_LIMITS (a100, a10g, l4 or h100; unset or empty: the present GPU)
// once before the first test and makes the CUDA kernel dispatcher see that GPU kind's limits
// (compute capability, opt-in shared memory per block, SM count, L2) for the whole test binary
// (set_test_cuda_device_limits, ops/backend.h). So `SHARDTRAIN_TEST_DEVICE_LIMITS=l4 ctest -L gpu`
// runs, on an H200, every kernel configuration an L4 would get, under an L4's shared-memory limit.
// Test code reads the variable (here and in the test worker, cli/testing/); the product never.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ops/backend.h"

namespace shardtrain::testing_support {

class TestDeviceLimitsEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* kind = std::getenv("SHARDTRAIN_TEST_DEVICE_LIMITS");
    if (kind == nullptr || *kind == '\0') return;
    set_test_cuda_device_limits(kind);
    std::printf("SHARDTRAIN_TEST_DEVICE_LIMITS=%s: kernels dispatched for that GPU's limits\n",
                kind);
  }
  void TearDown() override { set_test_cuda_device_limits(""); }
};

inline const ::testing::Environment* const kTestDeviceLimitsEnvironment =
    ::testing::AddGlobalTestEnvironment(new TestDeviceLimitsEnvironment);

}  // namespace shardtrain::testing_support
