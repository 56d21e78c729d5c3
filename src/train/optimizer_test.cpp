// Tests for AdamW::step's mapping of a unit's parameters onto Ops::adamw_multi ranges: a shard
// that starts inside one parameter and ends in padding, weight decay per parameter, the compute
// copy and the grad zeroing limited to parameter ranges.
#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/host_buffer.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

// A unit of 128 elements: "w" (3 x 5, decayed) at 0, "norm" (7, not decayed) at 64.
UnitLayout two_param_unit() {
  UnitLayout unit;
  unit.name = "layers.0";
  unit.params.push_back({"w", Shape{3, 5}, 0, true});
  unit.params.push_back({"norm", Shape{7}, 64, false});
  unit.numel = 128;
  return unit;
}

// param, grad, exp_avg, exp_avg_sq (f32) and a bf16 compute copy, `numel` each, random values
// everywhere (padding too, so that writes outside parameters show).
struct ShardBuffers {
  std::vector<HostTensor> tensors;
  explicit ShardBuffers(int64_t numel) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(0.01f, 1.0f);
    for (int k = 0; k < 4; ++k) {
      tensors.emplace_back(DType::kF32, Shape{numel});
      for (int64_t i = 0; i < numel; ++i) tensors.back().tensor.f32()[i] = dist(rng);
    }
    tensors.emplace_back(DType::kBF16, Shape{numel});
  }
  UnitBuffers unit(const UnitLayout& layout, int64_t offset, bool with_compute) const {
    return {&layout,
            offset,
            tensors[0].tensor,
            tensors[1].tensor,
            tensors[2].tensor,
            tensors[3].tensor,
            with_compute ? tensors[4].tensor : Tensor()};
  }
};

TEST(AdamWTest, StepUpdatesParameterRangesOfAShardInOneCall) {
  const UnitLayout layout = two_param_unit();
  const int64_t shard_begin = 10, shard_numel = 100;  // [10, 110): w's last 5, all of norm
  ShardBuffers stepped(shard_numel), expected(shard_numel);
  CpuOps ops;
  AdamWSettings settings;
  settings.weight_decay = 0.1;
  AdamW optimizer(ops, settings);
  optimizer.step({stepped.unit(layout, shard_begin, true)}, 0.01, 2, 0.5f, GradsAfterStep::kZero);

  AdamWStep s;
  s.lr = 0.01f;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.step = 2;
  s.grad_scale = 0.5f;
  struct Range {
    int64_t begin, end;  // relative to the shard
    float weight_decay;
  };
  for (const Range& r : {Range{0, 5, 0.1f}, Range{54, 61, 0.0f}}) {
    const auto part = [&](int k) { return expected.tensors[k].tensor.rows(r.begin, r.end); };
    s.weight_decay = r.weight_decay;
    ops.adamw(part(0), part(1), part(2), part(3), s);
    ops.cast(part(4), part(0));
    ops.fill_zero(part(1));
  }
  for (int k = 0; k < 5; ++k) {
    const Tensor& got = stepped.tensors[k].tensor;
    EXPECT_EQ(std::memcmp(got.data(), expected.tensors[k].tensor.data(), got.bytes()), 0)
        << "buffer " << k;
  }
  EXPECT_EQ(stepped.tensors[1].tensor.f32()[4], 0.0f);  // grad of w, zeroed
  EXPECT_NE(stepped.tensors[1].tensor.f32()[5], 0.0f);  // padding, untouched
}

TEST(AdamWTest, StepKeepsGradsAndDecaysNormsWhenAsked) {
  const UnitLayout layout = two_param_unit();
  ShardBuffers stepped(128), expected(128);
  CpuOps ops;
  AdamWSettings settings;
  settings.weight_decay = 0.1;
  settings.decay_norms_and_biases = true;
  AdamW optimizer(ops, settings);
  optimizer.step({stepped.unit(layout, 0, false)}, 0.01, 1, 1.0f, GradsAfterStep::kKeep);

  AdamWStep s;
  s.lr = 0.01f;
  s.beta2 = 0.95f;
  s.weight_decay = 0.1f;
  for (const ParamSpec& spec : layout.params) {
    const auto part = [&](int k) {
      return expected.tensors[k].tensor.rows(spec.offset, spec.offset + spec.numel());
    };
    ops.adamw(part(0), part(1), part(2), part(3), s);
  }
  for (int k = 0; k < 5; ++k) {  // grads kept, compute copy untouched (not given)
    const Tensor& got = stepped.tensors[k].tensor;
    EXPECT_EQ(std::memcmp(got.data(), expected.tensors[k].tensor.data(), got.bytes()), 0)
        << "buffer " << k;
  }
}

}  // namespace
}  // namespace shardtrain
