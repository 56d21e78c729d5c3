// ProfiledOps forwards every op unchanged (bit-identical results) and books each call to its
// class.
#include "ops/profiled_ops.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "core/host_buffer.h"
#include "ops/backend.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

HostTensor filled(Shape shape, float start) {
  HostTensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.tensor.numel(); ++i) t.tensor.f32()[i] = start + 0.01f * (i % 37);
  return t;
}

// A ProfiledOps over the CPU backend and what an optimizer step updates: a 16-element
// parameter `a`, its gradient `b` and AdamW moments `m`, `v`, at lr 1e-3.
class ProfiledOpsStepTest : public ::testing::Test {
 protected:
  ProfiledOpsStepTest() { step.lr = 1e-3f; }

  ProfiledOps profiled{make_cpu_ops()};
  HostTensor a = filled({16}, 0.1f), b = filled({16}, 0.2f), m = filled({16}, 0.0f),
             v = filled({16}, 0.0f);
  AdamWStep step;
};

TEST(ProfiledOps, ForwardsOpsUnchangedAndCountsClasses) {
  ProfiledOps profiled(make_cpu_ops());
  auto plain = make_cpu_ops();
  const HostTensor x = filled({4, 8}, -0.2f), weight = filled({6, 8}, 0.1f);
  HostTensor out_profiled(DType::kF32, {4, 6}), out_plain(DType::kF32, {4, 6});
  profiled.linear_forward(x.tensor, weight.tensor, Tensor(), out_profiled.tensor);
  plain->linear_forward(x.tensor, weight.tensor, Tensor(), out_plain.tensor);
  const HostTensor norm_weight = filled({6}, 0.9f);
  HostTensor rstd(DType::kF32, {4});
  profiled.rmsnorm_forward(out_profiled.tensor, norm_weight.tensor, 1e-6f, out_profiled.tensor,
                           rstd.tensor);
  plain->rmsnorm_forward(out_plain.tensor, norm_weight.tensor, 1e-6f, out_plain.tensor,
                         rstd.tensor);
  profiled.add(out_profiled.tensor, out_profiled.tensor, out_profiled.tensor);
  plain->add(out_plain.tensor, out_plain.tensor, out_plain.tensor);
  for (int64_t i = 0; i < out_plain.tensor.numel(); ++i) {
    ASSERT_EQ(out_profiled.tensor.f32()[i], out_plain.tensor.f32()[i]) << i;
  }
  EXPECT_EQ(profiled.totals(OpClass::kGemm).calls, 1);
  EXPECT_EQ(profiled.totals(OpClass::kNorm).calls, 1);
  EXPECT_EQ(profiled.totals(OpClass::kElementwise).calls, 1);
  EXPECT_EQ(profiled.totals(OpClass::kAttention).calls, 0);
  EXPECT_GE(profiled.totals(OpClass::kGemm).seconds, 0.0);
}

TEST_F(ProfiledOpsStepTest, StepsEndAtEndStep) {
  for (int s = 0; s < 3; ++s) {
    profiled.add(a.tensor, a.tensor, b.tensor);
    profiled.add(a.tensor, a.tensor, b.tensor);
    const std::vector<AdamWSegment> unit = {{a.tensor, b.tensor, m.tensor, v.tensor}};
    profiled.adamw_multi(unit, step);
    profiled.adamw_multi(unit, step);  // several updates per step
    profiled.end_step();
  }
  profiled.add(a.tensor, a.tensor, b.tensor);  // in a fourth step, not yet ended
  ASSERT_EQ(profiled.steps().size(), 3u);
  for (const ProfiledOps::Table& table : profiled.steps()) {
    EXPECT_EQ(table[static_cast<int>(OpClass::kElementwise)].calls, 2);
    EXPECT_EQ(table[static_cast<int>(OpClass::kOptimizer)].calls, 2);
  }
  EXPECT_EQ(profiled.totals(OpClass::kElementwise).calls, 7);
}

TEST(ProfiledOps, GemmShapesAreTabledFromTheSecondStep) {
  ProfiledOps profiled(make_cpu_ops());
  const HostTensor x = filled({4, 8}, -0.2f), weight = filled({6, 8}, 0.1f);
  HostTensor out(DType::kF32, {4, 6}), dx(DType::kF32, {4, 8}), dweight(DType::kF32, {6, 8});
  HostTensor m = filled({48}, 0.0f), v = filled({48}, 0.0f), p = filled({48}, 0.1f);
  AdamWStep step;
  step.lr = 1e-3f;
  for (int s = 0; s < 3; ++s) {
    profiled.linear_forward(x.tensor, weight.tensor, Tensor(), out.tensor);
    profiled.linear_backward(out.tensor, x.tensor, weight.tensor, dx.tensor, dweight.tensor,
                             Tensor(), false, true);
    if (s < 2) EXPECT_EQ(profiled.gemm_shape_table(), "") << "no table before a second step";
    if (s < 2) EXPECT_EQ(profiled.op_name_table(), "") << "no table before a second step";
    profiled.adamw_multi({{p.tensor, dweight.tensor.reshaped({48}), m.tensor, v.tensor}}, step);
    profiled.end_step();
  }
  const std::string table = profiled.gemm_shape_table();
  EXPECT_NE(table.find("forward       4 x      8 ->      6      1.0 calls"), std::string::npos)
      << table;
  EXPECT_NE(table.find("backward      4 x      8 ->      6      1.0 calls"), std::string::npos)
      << table;
  // Per Ops method, per step (steps 2 and 3): one call each.
  const std::string by_op = profiled.op_name_table();
  for (const char* name : {"linear_forward", "linear_backward", "adamw_multi"}) {
    EXPECT_NE(by_op.find(fmt::format("\n    {:<34}      1.0 calls", name)), std::string::npos)
        << name << by_op;
  }
}

TEST(ProfiledOps, EnvironmentVariableWrapsTheBackend) {
  ::setenv("SHARDTRAIN_PROFILE_OPS", "1", 1);
  auto wrapped = make_ops(DeviceChoice::kCpu);
  ::unsetenv("SHARDTRAIN_PROFILE_OPS");
  auto plain = make_ops(DeviceChoice::kCpu);
  EXPECT_NE(dynamic_cast<ProfiledOps*>(wrapped.get()), nullptr);
  EXPECT_EQ(dynamic_cast<ProfiledOps*>(plain.get()), nullptr);
}

TEST_F(ProfiledOpsStepTest, OnlyEndStepEndsAStep) {
  const std::vector<AdamWSegment> segments = {
      {a.tensor.rows(0, 9), b.tensor.rows(0, 9), m.tensor.rows(0, 9), v.tensor.rows(0, 9), 0.1f},
      {a.tensor.rows(9, 16), b.tensor.rows(9, 16), m.tensor.rows(9, 16), v.tensor.rows(9, 16)}};
  for (int s = 0; s < 2; ++s) {
    profiled.add(a.tensor, a.tensor, b.tensor);
    profiled.adamw_multi(segments, step);
    profiled.add(a.tensor, a.tensor, b.tensor);  // a compute op after the update: same step
    profiled.end_step();
  }
  profiled.add(a.tensor, a.tensor, b.tensor);  // in a third step, not yet ended
  ASSERT_EQ(profiled.steps().size(), 2u);
  for (const ProfiledOps::Table& table : profiled.steps()) {
    EXPECT_EQ(table[static_cast<int>(OpClass::kElementwise)].calls, 2);
    EXPECT_EQ(table[static_cast<int>(OpClass::kOptimizer)].calls, 1);  // one call, two ranges
  }
}

}  // namespace
}  // namespace shardtrain
