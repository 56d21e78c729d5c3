// Frozen parameters under FSDP, with real Gloo ranks (threads of one process, each its own CPU
// backend and communicator): world sizes 1, 2 and 4 and the strategies that change the groups
// (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD).
//
// A synthetic model drives FsdpUnits exactly as the real one does (forward: root, blocks; backward:
// blocks reversed, root; two micro-batches per step) over a layout shaped like LoRA's: a frozen
// root and blocks of a frozen base followed by trainable adapters. Its gradient of unit
// element e on rank r is (r + 1) * w(e, m), a small dyadic number, so every sum over ranks is
// exact, and a plain SGD step (param -= lr * grad) makes every parameter's value predictable bit
// for bit on the host. Checked on every rank and step: the gathered unit (frozen values as
// initialised, trainable values as the host reference), the gradient buffers (only the trainable
// region, with GradBuffer::offset at its start), the optimizer's views (never a frozen element),
// the gradient norm (trainable elements only), the bytes held (no master, moment or gradient
// bytes for frozen parameters) and the trainable values against a run with nothing frozen.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "dist/file_store.h"
#include "dist/gloo_comm.h"
#include "dist/mesh.h"
#include "fsdp/fsdp_units.h"
#include "ops/backend.h"

namespace shardtrain {
namespace {

constexpr int kSteps = 3;
constexpr int kMicroBatches = 2;
constexpr float kLr = 0.0625f;

ParamSpec param(const std::string& name, Shape shape, int64_t offset, bool trainable) {
  ParamSpec spec;
  spec.name = name;
  spec.shape = shape;
  spec.offset = offset;
  spec.trainable = trainable;
  return spec;
}

// As LoRA lays units out: the root all frozen (two parameters and an alignment gap); each block a
// frozen base [0, 192) followed by trainable parameters [192, 384). 192 is not a multiple of the
// shard quantum at G = 4 (256), so there the trainable gather overwrites the frozen one's
// padding. `freeze` = false: the same layout with nothing frozen.
ParamLayout test_layout(bool freeze) {
  ParamLayout layout;
  layout.units.push_back(
      {"root", {param("embed", {5, 40}, 0, !freeze), param("norm", {40}, 256, !freeze)}, 320});
  for (int l = 0; l < 2; ++l) {
    const std::string name = "layers." + std::to_string(l);
    layout.units.push_back(
        {name,
         {param(name + ".base", {130}, 0, !freeze), param(name + ".lora_a", {100}, 192, true),
          param(name + ".lora_b", {64}, 320, true)},
         384});
  }
  return layout;
}

// The gradient weight of unit element e in micro-batch m: a small multiple of 1/8, 0 in the
// alignment gaps between parameters (backward never writes those).
float grad_weight(const UnitLayout& unit, int64_t e, int64_t micro) {
  for (const ParamSpec& p : unit.params) {
    if (e >= p.offset && e < p.offset + p.numel()) {
      return static_cast<float>((e * 7 + micro * 3) % 5 - 2) * 0.125f;
    }
  }
  return 0.0f;
}

// Plain SGD over the shards; records what it was given.
class RecordingSgd final : public ShardOptimizer {
 public:
  void step(const std::vector<UnitBuffers>& units, double lr, int64_t, float grad_scale,
            GradsAfterStep grads_after) override {
    views = units;
    for (const UnitBuffers& u : units) {
      float* param = static_cast<float*>(u.param.data());
      float* grad = static_cast<float*>(u.grad.data());
      for (int64_t i = 0; i < u.param.numel(); ++i) {
        param[i] -= static_cast<float>(lr) * grad_scale * grad[i];
        if (grads_after == GradsAfterStep::kZero) grad[i] = 0.0f;
      }
    }
  }
  std::vector<UnitBuffers> views;
};

struct RankResult {
  std::vector<std::vector<float>> initial;  // [unit] the whole unit after init
  std::vector<std::vector<float>> final;    // [unit] after kSteps steps
  std::vector<double> grad_norms;           // per step
  FsdpMemory memory;
  FsdpMemory planned;
};

// Runs kSteps steps on `world` ranks with shard groups of `group`; returns each rank's result.
std::vector<RankResult> train(int world, int group, FsdpStrategy strategy, bool freeze) {
  const ParamLayout layout = test_layout(freeze);
  std::vector<RankResult> results(world);
  testing::TempDir dir("shardtrain_frozen_");
  FileStore store(dir.path());
  testing::run_threads(world, [&](int rank) {
    std::unique_ptr<Ops> ops = make_ops(DeviceChoice::kCpu);
    std::unique_ptr<Comm> comm = make_gloo_comm(store, rank, world, "frozen");
    Mesh mesh(*comm, group, *ops);
    FsdpOptions options;
    options.strategy = strategy;
    FsdpUnits units(*ops, layout, mesh, options);
    units.init_random(5, 0.02);
    RankResult& result = results[rank];
    const auto whole_units = [&] {
      std::vector<std::vector<float>> values;
      for (int u = 0; u < units.unit_count(); ++u) {
        values.emplace_back(layout.units[u].numel);
        units.gather_unit_to_host(u, values.back().data());
      }
      return values;
    };
    result.initial = whole_units();
    std::vector<std::vector<float>> expected = result.initial;  // the host reference
    RecordingSgd sgd;
    const auto check_gathered = [&](int u, Tensor gathered, int64_t step) {
      ASSERT_EQ(gathered.numel(), layout.units[u].numel);
      const float* got = static_cast<const float*>(gathered.data());
      for (int64_t e = 0; e < gathered.numel(); ++e) {
        ASSERT_EQ(got[e], expected[u][e])
            << "rank " << rank << " unit " << u << " element " << e << " step " << step;
      }
    };
    const auto write_grads = [&](int u, int64_t micro) {
      const GradBuffer grads = units.acquire_grads(u);
      const int64_t frozen = freeze ? units.plan().units[u].frozen_numel : 0;
      EXPECT_EQ(grads.offset, frozen) << "unit " << u;
      ASSERT_EQ(grads.flat.numel(), layout.units[u].numel - frozen) << "unit " << u;
      float* flat = static_cast<float*>(grads.flat.data());
      for (int64_t i = 0; i < grads.flat.numel(); ++i) {
        const float g =
            static_cast<float>(rank + 1) * grad_weight(layout.units[u], frozen + i, micro);
        flat[i] = grads.accumulate ? flat[i] + g : g;
      }
    };
    for (int64_t step = 1; step <= kSteps; ++step) {
      units.begin_step(1);
      for (int64_t m = 0; m < kMicroBatches; ++m) {
        units.begin_micro_batch(m, kMicroBatches);
        check_gathered(kRootUnit, units.acquire_params(kRootUnit), step);
        for (int u = 1; u < units.unit_count(); ++u) {
          check_gathered(u, units.acquire_params(u), step);
          units.release_params(u);
        }
        write_grads(kRootUnit, m);
        for (int u = units.unit_count() - 1; u >= 1; --u) {
          check_gathered(u, units.acquire_params(u), step);
          write_grads(u, m);
          units.release_params(u);
          units.grads_ready(u);
        }
        units.release_params(kRootUnit);
        units.grads_ready(kRootUnit);
      }
      result.grad_norms.push_back(units.end_backward(1, 0.0).grad_norm);
      units.apply_optimizer(sgd, kLr, step, 1.0f);
      for (const UnitBuffers& view : sgd.views) {
        const int u = static_cast<int>(view.layout - layout.units.data());
        EXPECT_GE(view.offset, units.plan().units[u].frozen_numel) << "a frozen element updated";
        EXPECT_EQ(view.param.numel(), units.plan().units[u].shard_numel);
      }
      // The host reference: the global gradient summed over ranks and micro-batches.
      const float rank_sum = static_cast<float>(world * (world + 1) / 2);
      for (int u = 0; u < units.unit_count(); ++u) {
        const UnitLayout& unit = layout.units[u];
        for (int64_t e = units.plan().units[u].frozen_numel; e < unit.numel; ++e) {
          float grad = 0;
          for (int64_t m = 0; m < kMicroBatches; ++m) grad += rank_sum * grad_weight(unit, e, m);
          expected[u][e] -= kLr * 1.0f * grad;
        }
      }
    }
    result.final = whole_units();
    result.memory = units.memory();
    result.planned =
        estimate_fsdp_memory(units.plan(), strategy, FsdpMemoryOptions{}, ops->activation_dtype());
  });
  return results;
}

// sqrt(sum over trainable elements of the global gradient squared), on the host in double.
double expected_grad_norm(int world, bool freeze) {
  const ParamLayout layout = test_layout(freeze);
  const ShardPlan plan = make_shard_plan(layout, 1);
  const double rank_sum = world * (world + 1) / 2.0;
  double squares = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    for (int64_t e = plan.units[u].frozen_numel; e < layout.units[u].numel; ++e) {
      double grad = 0;
      for (int64_t m = 0; m < kMicroBatches; ++m) {
        grad += rank_sum * grad_weight(layout.units[u], e, m);
      }
      squares += grad * grad;
    }
  }
  return std::sqrt(squares);
}

struct Case {
  int world, group;
  FsdpStrategy strategy;
};

class FsdpFrozenParams : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpFrozenParams, FrozenStayTrainableMatchAndNoGradientMemory) {
  const Case c = GetParam();
  const std::vector<RankResult> frozen = train(c.world, c.group, c.strategy, true);
  const std::vector<RankResult> plain = train(c.world, c.group, c.strategy, false);
  const ParamLayout layout = test_layout(true);
  const ShardPlan plan = make_shard_plan(layout, c.group);
  const double want_norm = expected_grad_norm(c.world, true);
  EXPECT_LT(want_norm, expected_grad_norm(c.world, false)) << "the norm leaves frozen out";
  for (int r = 0; r < c.world; ++r) {
    const RankResult& f = frozen[r];
    const RankResult& p = plain[r];
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const int64_t frozen_numel = plan.units[u].frozen_numel;
      for (int64_t e = 0; e < layout.units[u].numel; ++e) {
        if (e < frozen_numel) {
          // Unchanged by training; the plain run trained the same elements.
          ASSERT_EQ(f.final[u][e], f.initial[u][e]) << "rank " << r << " unit " << u << " " << e;
          if (grad_weight(layout.units[u], e, 0) + grad_weight(layout.units[u], e, 1) != 0) {
            ASSERT_NE(p.final[u][e], p.initial[u][e]) << "unit " << u << " element " << e;
          }
        } else {
          // Trainable: updated exactly as with nothing frozen.
          ASSERT_EQ(f.final[u][e], p.final[u][e]) << "rank " << r << " unit " << u << " " << e;
        }
      }
    }
    ASSERT_EQ(f.grad_norms.size(), static_cast<size_t>(kSteps));
    for (double norm : f.grad_norms) EXPECT_NEAR(norm, want_norm, 1e-6 * want_norm);

    // Bytes: masters, moments and grad shards cover the trainable shards only; the frozen
    // shards are held once, in the compute dtype (fp32 here); everything as the plan says.
    int64_t trainable_shard = 0, frozen_shard = 0, all_shard = 0;
    for (const UnitShard& unit : plan.units) {
      trainable_shard += unit.shard_numel;
      frozen_shard += unit.frozen_shard_numel;
    }
    for (const UnitShard& unit : make_shard_plan(test_layout(false), c.group).units) {
      all_shard += unit.shard_numel;
    }
    EXPECT_EQ(f.memory.master_bytes, 4u * trainable_shard);
    EXPECT_EQ(f.memory.moment_bytes, 8u * trainable_shard);
    EXPECT_EQ(f.memory.grad_shard_bytes, 4u * trainable_shard);
    EXPECT_EQ(f.memory.frozen_shard_bytes, 4u * frozen_shard);
    EXPECT_EQ(p.memory.master_bytes, 4u * all_shard);
    EXPECT_EQ(p.memory.frozen_shard_bytes, 0u);
    EXPECT_LT(f.memory.master_bytes, p.memory.master_bytes);
    for (const RankResult* result : {&f, &p}) {
      EXPECT_EQ(result->memory.master_bytes, result->planned.master_bytes);
      EXPECT_EQ(result->memory.frozen_shard_bytes, result->planned.frozen_shard_bytes);
      EXPECT_EQ(result->memory.gathered_peak_bytes, result->planned.gathered_peak_bytes);
      EXPECT_EQ(result->memory.full_grad_peak_bytes, result->planned.full_grad_peak_bytes);
    }
    if (c.group > 1) {
      EXPECT_LT(f.memory.full_grad_peak_bytes, p.memory.full_grad_peak_bytes);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorldSizes, FsdpFrozenParams,
    ::testing::Values(Case{1, 1, FsdpStrategy::kFullShard}, Case{2, 2, FsdpStrategy::kFullShard},
                      Case{4, 4, FsdpStrategy::kFullShard}, Case{2, 2, FsdpStrategy::kShardGradOp},
                      Case{4, 2, FsdpStrategy::kHybridShard}, Case{2, 1, FsdpStrategy::kNoShard}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(fsdp_strategy_name(info.param.strategy)) + "_world" +
             std::to_string(info.param.world) + "_group" + std::to_string(info.param.group);
    });

// Four ranks, shard group of four (quantum 256): the byte counts by hand (fsdp/shard_plan.h).
// Root: 320 frozen elements padded to 512 (128 per rank), nothing trainable. Each block: 192
// frozen padded to 256 (64 per rank), 192 trainable padded to 256 (64 per rank), gathered as
// 192 + 256 = 448 elements.
TEST(FsdpFrozenParamsBytes, ByHandAtWorldFour) {
  const std::vector<RankResult> results = train(4, 4, FsdpStrategy::kFullShard, true);
  for (const RankResult& r : results) {
    EXPECT_EQ(r.memory.master_bytes, 4u * (64 + 64));
    EXPECT_EQ(r.memory.moment_bytes, 2 * 4u * (64 + 64));
    EXPECT_EQ(r.memory.grad_shard_bytes, 4u * (64 + 64));
    EXPECT_EQ(r.memory.frozen_shard_bytes, 4u * (128 + 64 + 64));
    EXPECT_EQ(r.memory.compute_shard_bytes, 0u);
    // Gathered: the root and two blocks (the one computed and the one prefetched). Full
    // gradients: the two blocks' trainable regions (the root has none) and the two
    // reduce-scatter outputs of 64.
    EXPECT_EQ(r.memory.gathered_peak_bytes, 4u * (512 + 2 * 448));
    EXPECT_EQ(r.memory.full_grad_peak_bytes, 4u * (2 * 256) + 2 * 4u * 64);
  }
}

}  // namespace
}  // namespace shardtrain
