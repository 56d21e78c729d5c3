#include "fsdp/shard_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/init_weights.h"
#include "obs/phase_progress.h"
#include "ops/device_buffer.h"

namespace shardtrain {

ShardIo::ShardIo(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, UnitShards& shards,
                 Comm& shard, Comm& expert_shard, bool log_progress)
    : ops_(ops),
      layout_(layout),
      plan_(plan),
      shards_(shards),
      shard_(shard),
      expert_shard_(expert_shard),
      log_progress_(log_progress) {}

void ShardIo::fill_shards(int unit, const UnitSource& source) {
  const UnitShard& shard = plan_.units[unit];
  const int rank = group_of(unit).rank();
  std::vector<float> values;
  // One region: this rank's slice [begin, begin + count) of region elements, which are unit
  // elements from `region_start` and exist up to `region_end` (zeros beyond: padding).
  const auto slice = [&](int64_t region_start, int64_t region_end, int64_t count) {
    values.assign(count, 0.0f);
    const int64_t lo = region_start + rank * count;
    const int64_t hi = std::min(lo + count, region_end);
    if (hi > lo) source(lo, hi, values.data());
  };
  if (shard.frozen_shard_numel > 0) {
    slice(0, shard.frozen_numel, shard.frozen_shard_numel);
    shards_.upload_frozen(unit, values.data());
  }
  if (shard.shard_numel > 0) {
    slice(shard.frozen_numel, layout_.units[unit].numel, shard.shard_numel);
    ops_.copy_from_host(shards_.master_shard(unit), values.data());
  }
}

void ShardIo::init_random(uint64_t seed, double std) {
  // Two units drawn at once where the host has the cores (each draws its large parameters on
  // threads of their own, model/init_weights.h), then copied in order: the same values.
  const int unit_count = static_cast<int>(layout_.units.size());
  const int ahead = std::thread::hardware_concurrency() >= 8 ? 2 : 1;
  std::vector<std::vector<float>> unit_values(ahead);
  for (int first = 0; first < unit_count; first += ahead) {
    const int count = std::min(ahead, unit_count - first);
    std::vector<std::future<void>> draws;
    for (int k = 0; k < count; ++k) {
      unit_values[k].resize(layout_.units[first + k].numel);  // every element is written
      draws.push_back(std::async(std::launch::async, [this, &unit_values, first, k, seed, std] {
        init_unit_random(layout_.units[first + k], first + k, seed, std, unit_values[k].data());
      }));
    }
    for (std::future<void>& draw : draws) draw.get();
    for (int k = 0; k < count; ++k) {
      const std::vector<float>& whole = unit_values[k];
      fill_shards(first + k, [&whole](int64_t lo, int64_t hi, float* dst) {
        std::copy(whole.begin() + lo, whole.begin() + hi, dst);
      });
    }
  }
  shards_.refresh_compute_params();
}

void ShardIo::load_pretrained(const HfCheckpoint& checkpoint) {
  load([&checkpoint](const ParamSpec& spec, int64_t begin, int64_t count, float* dst) {
    checkpoint.read_range_into_f32(spec.name, spec.shape, begin, count, dst);
  });
}

void ShardIo::load(const ParamReader& read) {
  const int unit_count = static_cast<int>(layout_.units.size());
  PhaseProgress progress("load pretrained weights", static_cast<uint64_t>(unit_count), "units",
                         log_progress_);
  for (int u = 0; u < unit_count; ++u) {
    const UnitLayout& unit = layout_.units[u];
    fill_shards(u, [&](int64_t lo, int64_t hi, float* dst) {
      for (const ParamSpec& spec : unit.params) {
        const int64_t from = std::max(lo, spec.offset);
        const int64_t to = std::min(hi, spec.offset + spec.numel());
        if (from >= to) continue;
        read(spec, from - spec.offset, to - from, dst + (from - lo));
      }
    });
    progress.advance();
  }
  shards_.refresh_compute_params();
}

void ShardIo::gather_to_host(int unit, float* host_values) {
  const UnitShard& shard = plan_.units[unit];
  const int64_t numel = layout_.units[unit].numel;
  const DType act = ops_.activation_dtype();
  const bool sharded = plan_.sharded(unit);
  const std::string context =
      fmt::format("unit {} ({}) checkpoint gather", unit, layout_.units[unit].name);
  if (shard.frozen_numel > 0) {
    const int64_t padded = shard.frozen_padded_numel;
    DeviceBuffer gathered;
    Tensor frozen = shards_.frozen_shard(unit);  // G = 1: the whole region
    if (sharded) {
      gathered = DeviceBuffer(ops_, static_cast<size_t>(padded) * dtype_size(act));
      const Tensor whole = gathered.view(act, {padded});
      group_of(unit).set_context(context);
      group_of(unit).all_gather(whole, frozen);
      frozen = whole;
    }
    DeviceBuffer widened;
    if (act != DType::kF32) {
      widened = DeviceBuffer(ops_, static_cast<size_t>(padded) * sizeof(float));
      const Tensor frozen_f32 = widened.view(DType::kF32, {padded});
      ops_.cast(frozen_f32, frozen);
      frozen = frozen_f32;
    }
    ops_.copy_to_host(host_values, frozen.rows(0, shard.frozen_numel));
  }
  const int64_t trainable = numel - shard.frozen_numel;
  if (trainable == 0) return;
  float* trainable_values = host_values + shard.frozen_numel;
  if (!sharded) {
    ops_.copy_to_host(trainable_values, shards_.master_shard(unit).rows(0, trainable));
    return;
  }
  DeviceBuffer full(ops_, static_cast<size_t>(shard.padded_numel) * sizeof(float));
  const Tensor full_flat = full.view(DType::kF32, {shard.padded_numel});
  group_of(unit).set_context(context);
  group_of(unit).all_gather(full_flat, shards_.master_shard(unit));
  ops_.copy_to_host(trainable_values, full_flat.rows(0, trainable));
}

}  // namespace shardtrain
