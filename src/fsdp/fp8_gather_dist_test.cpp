// The FP8 all-gather (fsdp/fp8_gather.h) with real Gloo ranks (threads of one process, each its
// own CPU backend and communicator): world sizes 2 and 4, FULL_SHARD, SHARD_GRAD_OP and
// HYBRID_SHARD, FP8 weights in the trainable region and, as with LoRA, in the frozen one.
//
// A block holds a norm, a packed q/k pair (one FP8 weight over two parameters, as the layout
// packs q, k and v), an o weight that crosses shard boundaries at 4 ranks, a bias, then two
// more parameters (LoRA-like adapters, trainable). Checked on every rank, before and after
// optimizer steps (plain SGD, so the weights change): each gathered unit is, in its FP8
// weights, the e4m3 round trip of the weight's exact values (gather_unit_to_host) with the
// scale of the whole weight's amax (core/fp8_e4m3.h), and exact everywhere else; units without
// FP8 weights (the root) and at a shard group of one are gathered exactly; the bytes held and
// planned; the updates never run aside while the FP8 gather is on.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/fp8_e4m3.h"
#include "core/testing/test_support.h"
#include "dist/file_store.h"
#include "dist/gloo_comm.h"
#include "dist/mesh.h"
#include "fsdp/fsdp_units.h"
#include "ops/testing/deferred_aside_ops.h"

namespace shardtrain {
namespace {

constexpr int kSteps = 2;

ParamSpec param(const std::string& name, Shape shape, int64_t offset, bool trainable) {
  ParamSpec spec;
  spec.name = name;
  spec.shape = shape;
  spec.offset = offset;
  spec.trainable = trainable;
  return spec;
}

// freeze: the block's base (norm .. bias) frozen, as LoRA lays it out.
ParamLayout test_layout(bool freeze) {
  ParamLayout layout;
  layout.units.push_back(
      {"root", {param("embed", {5, 40}, 0, true), param("norm", {40}, 256, true)}, 320});
  for (int l = 0; l < 2; ++l) {
    const std::string n = "layers." + std::to_string(l) + ".";
    layout.units.push_back(
        {n.substr(0, n.size() - 1),
         {param(n + "norm", {40}, 0, !freeze), param(n + "q", {8, 8}, 64, !freeze),
          param(n + "k", {36}, 128, !freeze), param(n + "o", {20, 10}, 192, !freeze),
          param(n + "bias", {10}, 448, !freeze), param(n + "adapter_a", {100}, 512, true),
          param(n + "adapter_b", {64}, 640, true)},
         704});
  }
  return layout;
}

// The FP8 weights: q and k as one operand, and o (unit elements).
std::vector<std::vector<ElementRange>> fp8_ranges(const ParamLayout& layout) {
  std::vector<std::vector<ElementRange>> ranges(layout.units.size());
  for (size_t u = 1; u < layout.units.size(); ++u) ranges[u] = {{64, 164}, {192, 392}};
  return ranges;
}

// What the FP8 gather must deliver for `exact` (the unit's values): each weight's e4m3 round
// trip at its own amax's scale, every other element unchanged.
std::vector<float> expected_gather(const std::vector<float>& exact,
                                   const std::vector<ElementRange>& weights) {
  std::vector<float> want = exact;
  for (const ElementRange& w : weights) {
    float amax = 0;
    for (int64_t e = w.begin; e < w.end; ++e) amax = std::fmax(amax, std::fabs(exact[e]));
    const float scale = fp8_gather_scale(amax);
    for (int64_t e = w.begin; e < w.end; ++e) {
      want[e] = e4m3_to_f32(f32_to_e4m3(exact[e] * scale)) * (1.0f / scale);
    }
  }
  return want;
}

// Plain SGD over the shards.
class Sgd final : public ShardOptimizer {
 public:
  void step(const std::vector<UnitBuffers>& units, double lr, int64_t, float grad_scale,
            GradsAfterStep grads_after) override {
    for (const UnitBuffers& u : units) {
      float* param = static_cast<float*>(u.param.data());
      float* grad = static_cast<float*>(u.grad.data());
      for (int64_t i = 0; i < u.param.numel(); ++i) {
        param[i] -= static_cast<float>(lr) * grad_scale * grad[i];
        if (grads_after == GradsAfterStep::kZero) grad[i] = 0.0f;
      }
    }
  }
};

struct Case {
  int world, group;
  FsdpStrategy strategy;
  bool freeze;
};

struct RankReport {
  int64_t checked = 0;  // gathered elements compared
  int64_t rounded = 0;  // of them, FP8 weight elements that the round trip changed
  bool gathers_fp8 = false, updates_aside = true;
  FsdpMemory memory, planned;
};

// Trains kSteps steps and checks every gathered unit (forward and backward) against the
// expected gather of the unit's exact values at that time.
std::vector<RankReport> run(const Case& c) {
  const ParamLayout layout = test_layout(c.freeze);
  const std::vector<std::vector<ElementRange>> ranges = fp8_ranges(layout);
  std::vector<RankReport> reports(c.world);
  testing::TempDir dir("shardtrain_fp8_gather_");
  FileStore store(dir.path());
  testing::run_threads(c.world, [&](int rank) {
    testing::DeferredAsideCpuOps ops;  // runs_aside: the FP8 gather must still update in order
    std::unique_ptr<Comm> comm = make_gloo_comm(store, rank, c.world, "fp8_gather");
    Mesh mesh(*comm, c.group, ops);
    FsdpOptions options;
    options.strategy = c.strategy;
    options.fp8_gather_ranges = ranges;
    FsdpUnits units(ops, layout, mesh, options);
    units.init_random(11, 0.02);
    RankReport& report = reports[rank];
    report.gathers_fp8 = units.gathers_fp8();
    report.updates_aside = units.updates_aside();
    std::vector<std::vector<float>> want(layout.units.size());
    const auto refresh_expected = [&] {
      for (int u = 0; u < units.unit_count(); ++u) {
        std::vector<float> exact(static_cast<size_t>(layout.units[u].numel));
        units.gather_unit_to_host(u, exact.data());
        want[u] = c.group > 1 ? expected_gather(exact, ranges[u]) : exact;
        for (const ElementRange& w : ranges[u]) {
          for (int64_t e = w.begin; e < w.end; ++e) report.rounded += want[u][e] != exact[e];
        }
      }
    };
    const auto check = [&](int u, Tensor gathered, const char* phase, int64_t step) {
      ASSERT_EQ(gathered.numel(), layout.units[u].numel);
      const float* got = static_cast<const float*>(gathered.data());
      for (const ParamSpec& p : layout.units[u].params) {
        for (int64_t e = p.offset; e < p.offset + p.numel(); ++e) {
          ASSERT_EQ(got[e], want[u][e]) << "rank " << rank << " unit " << u << " " << p.name
                                        << " element " << e << " " << phase << " step " << step;
          ++report.checked;
        }
      }
    };
    Sgd sgd;
    for (int64_t step = 1; step <= kSteps; ++step) {
      refresh_expected();
      units.begin_step(1);
      units.begin_micro_batch(0, 1);
      check(kRootUnit, units.acquire_params(kRootUnit), "forward", step);
      for (int u = 1; u < units.unit_count(); ++u) {
        check(u, units.acquire_params(u), "forward", step);
        units.release_params(u);
      }
      // Backward as the model walks it: the root's head first, the blocks in reverse, then the
      // root is done (its embedding).
      const auto write_grads = [&](int u) {
        const GradBuffer grads = units.acquire_grads(u);
        float* flat = static_cast<float*>(grads.flat.data());
        for (int64_t i = 0; i < grads.flat.numel(); ++i) {
          const float g = static_cast<float>((i * 5 + step) % 7 - 3) * 0.25f;
          flat[i] = grads.accumulate ? flat[i] + g : g;
        }
      };
      write_grads(kRootUnit);
      for (int u = units.unit_count() - 1; u >= 1; --u) {
        check(u, units.acquire_params(u), "backward", step);
        write_grads(u);
        units.release_params(u);
        units.grads_ready(u);
      }
      units.release_params(kRootUnit);
      units.grads_ready(kRootUnit);
      units.end_backward(1, 0.0);
      units.apply_optimizer(sgd, 0.01, step, 1.0f);
    }
    report.memory = units.memory();
    FsdpMemoryOptions planned;
    for (const std::vector<ElementRange>& r : ranges)
      planned.fp8_gather_units.push_back(!r.empty());
    report.planned =
        estimate_fsdp_memory(units.plan(), c.strategy, planned, ops.activation_dtype());
  });
  return reports;
}

class FsdpFp8Gather : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpFp8Gather, GathersEachWeightsE4m3RoundTripAndTheRestExactly) {
  const Case c = GetParam();
  const std::vector<RankReport> reports = run(c);
  const ParamLayout layout = test_layout(c.freeze);
  const ShardPlan plan = make_shard_plan(layout, c.group);
  for (int r = 0; r < c.world; ++r) {
    const RankReport& report = reports[r];
    EXPECT_TRUE(report.gathers_fp8) << "rank " << r;
    EXPECT_FALSE(report.updates_aside) << "rank " << r;
    EXPECT_GT(report.checked, 0);
    EXPECT_GT(report.rounded, 0) << "no FP8 weight element changed: the round trip never ran";
    // The e4m3 shards: one byte per element of the region holding the weights; besides them
    // the amaxes (2 weights per block) and the side vector (the region's other parameters).
    size_t shards = 0, side = 0;
    for (int u = 1; u < static_cast<int>(layout.units.size()); ++u) {
      shards += static_cast<size_t>(c.freeze ? plan.units[u].frozen_shard_numel
                                             : plan.units[u].shard_numel);
      side += c.freeze ? 40 + 10 : 40 + 10 + 100 + 64;
    }
    EXPECT_EQ(report.planned.fp8_shard_bytes, shards) << "rank " << r;
    EXPECT_EQ(report.memory.fp8_shard_bytes, shards + 4 * sizeof(float) + side * sizeof(float))
        << "rank " << r;
    // The pool held one unit's bytes beside its gathered units, as planned.
    EXPECT_EQ(report.memory.gathered_peak_bytes, report.planned.gathered_peak_bytes)
        << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, FsdpFp8Gather,
                         ::testing::Values(Case{2, 2, FsdpStrategy::kFullShard, false},
                                           Case{4, 4, FsdpStrategy::kFullShard, false},
                                           Case{4, 2, FsdpStrategy::kHybridShard, false},
                                           Case{2, 2, FsdpStrategy::kShardGradOp, false},
                                           Case{2, 2, FsdpStrategy::kFullShard, true},
                                           Case{4, 4, FsdpStrategy::kFullShard, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(fsdp_strategy_name(info.param.strategy)) + "_world" +
                                  std::to_string(info.param.world) + "_group" +
                                  std::to_string(info.param.group) +
                                  (info.param.freeze ? "_frozen" : "");
                         });

// At a shard group of one nothing is gathered: the FP8 gather stays off and units are exact.
TEST(FsdpFp8GatherOneRank, NothingIsGatheredSoNothingIsRounded) {
  const std::vector<RankReport> reports = run({2, 1, FsdpStrategy::kNoShard, false});
  for (const RankReport& report : reports) {
    EXPECT_FALSE(report.gathers_fp8);
    EXPECT_TRUE(report.updates_aside);  // the test backend runs aside work
    EXPECT_EQ(report.rounded, 0);
    EXPECT_EQ(report.memory.fp8_shard_bytes, 0u);
  }
}

}  // namespace
}  // namespace shardtrain
