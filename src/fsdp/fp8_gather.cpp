#include "fsdp/fp8_gather.h"

#include <algorithm>

#include "core/error.h"

namespace shardtrain {

Fp8Gather::Fp8Gather(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, UnitShards& shards,
                     int shard_rank, const std::vector<std::vector<ElementRange>>& ranges)
    : ops_(ops),
      layout_(layout),
      plan_(plan),
      shards_(shards),
      shard_rank_(shard_rank),
      act_(ops.activation_dtype()),
      units_(layout.units.size()) {
  SHARDTRAIN_CHECK(ranges.empty() || ranges.size() == layout.units.size(),
                   "FP8 weight ranges for {} units, the layout has {}", ranges.size(),
                   layout.units.size());
  for (int u = 0; u < static_cast<int>(ranges.size()); ++u) {
    if (ranges[u].empty()) continue;
    SHARDTRAIN_CHECK(!plan.units[u].experts, "FP8 weights in unit of experts {}",
                     layout.units[u].name);
    if (!plan.sharded(u)) continue;  // nothing is gathered
    plan_region(u, kFrozen, ranges[u]);
    plan_region(u, kTrainable, ranges[u]);
  }
  if (!active_) return;
  amax_ = DeviceBuffer(ops, static_cast<size_t>(scale_count_) * sizeof(float));
  side_ = DeviceBuffer(ops, static_cast<size_t>(side_numel_) * dtype_size(act_));
}

void Fp8Gather::plan_region(int unit, Region region, const std::vector<ElementRange>& weights) {
  const UnitShard& shard = plan_.units[unit];
  const UnitLayout& layout = layout_.units[unit];
  RegionState& r = units_[unit].regions[region];
  // Unit elements of the region's parameters.
  const int64_t first = region == kFrozen ? 0 : shard.frozen_numel;
  const int64_t last = region == kFrozen ? shard.frozen_numel : layout.numel;
  r.begin = first;
  r.padded = region == kFrozen ? shard.frozen_padded_numel : shard.padded_numel;
  r.shard_numel = region == kFrozen ? shard.frozen_shard_numel : shard.shard_numel;
  const int64_t shard_first = first + r.shard_numel * shard_rank_;  // unit elements
  const int64_t shard_last = shard_first + r.shard_numel;
  r.first_scale = scale_count_;
  for (const ElementRange& w : weights) {
    if (w.begin < first || w.begin >= last) continue;
    SHARDTRAIN_CHECK(w.end <= last && w.begin < w.end,
                     "unit {}: FP8 weight [{}, {}) crosses [{}, {})", layout.name, w.begin, w.end,
                     first, last);
    const int64_t scale = scale_count_++;
    r.unit_ranges.push_back({w.begin, w.end, scale});
    const int64_t begin = std::max(w.begin, shard_first), end = std::min(w.end, shard_last);
    if (begin < end) r.shard_pieces.push_back({begin - shard_first, end - shard_first, scale});
  }
  r.scales = scale_count_ - r.first_scale;
  if (r.scales == 0) return;
  r.covered = active_ = true;
  // Every parameter of the region outside the FP8 weights goes through the side vector.
  for (const ParamSpec& p : layout.params) {
    const int64_t begin = p.offset, end = p.offset + p.numel();
    if (begin < first || begin >= last) continue;
    const bool in_weight =
        std::any_of(r.unit_ranges.begin(), r.unit_ranges.end(),
                    [&](const Fp8Range& w) { return begin >= w.begin && end <= w.end; });
    if (in_weight) continue;
    r.side_out.push_back({side_numel_, begin, p.numel()});
    const int64_t mine_begin = std::max(begin, shard_first), mine_end = std::min(end, shard_last);
    if (mine_begin < mine_end) {
      r.side_in.push_back(
          {mine_begin - shard_first, side_numel_ + (mine_begin - begin), mine_end - mine_begin});
    }
    side_numel_ += p.numel();
  }
  r.e4m3_shard = DeviceBuffer(ops_, static_cast<size_t>(r.shard_numel));
}

Tensor Fp8Gather::shard_values(int unit, Region region) const {
  return region == kFrozen ? shards_.frozen_shard(unit) : shards_.trainable_forward_shard(unit);
}

void Fp8Gather::refresh(Comm& shard_group) {
  if (!active_ || !(trainable_stale_ || frozen_stale_)) return;
  const Tensor amax = amax_.view(DType::kF32, {scale_count_});
  // Each stale weight's amax over this rank's pieces, then over the group: one all-reduce for
  // the whole model (the entries of weights that did not change are equal on every rank).
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    for (const Region region : {kFrozen, kTrainable}) {
      const RegionState& r = units_[u].regions[region];
      const bool stale = region == kFrozen ? frozen_stale_ : trainable_stale_;
      if (!r.covered || !stale) continue;
      ops_.fill_zero(amax.rows(r.first_scale, r.first_scale + r.scales));
      if (!r.shard_pieces.empty())
        ops_.fp8_range_amax(shard_values(u, region), r.shard_pieces, amax);
    }
  }
  shard_group.all_reduce(amax, ReduceOp::kMax);
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    for (const Region region : {kFrozen, kTrainable}) {
      const RegionState& r = units_[u].regions[region];
      const bool stale = region == kFrozen ? frozen_stale_ : trainable_stale_;
      if (!r.covered || !stale || r.shard_pieces.empty()) continue;
      ops_.fp8_range_quantize(shard_values(u, region), r.shard_pieces, amax,
                              r.e4m3_shard.view(DType::kU8, {r.shard_numel}));
    }
  }
  // The side vector, whole: this rank's elements, zeros elsewhere, summed over the group.
  if (side_numel_ > 0) {
    const Tensor side = side_.view(act_, {side_numel_});
    ops_.fill_zero(side);
    for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
      for (const Region region : {kFrozen, kTrainable}) {
        const RegionState& r = units_[u].regions[region];
        if (!r.covered) continue;
        const Tensor values = shard_values(u, region);
        for (const Copy& c : r.side_in) {
          ops_.cast(side.rows(c.to, c.to + c.count), values.rows(c.from, c.from + c.count));
        }
      }
    }
    shard_group.all_reduce(side, ReduceOp::kSum);
  }
  trainable_stale_ = frozen_stale_ = false;
}

Tensor Fp8Gather::send(int unit, Region region) const {
  const RegionState& r = units_[unit].regions[region];
  SHARDTRAIN_CHECK(r.covered, "unit {} region {} is not gathered in FP8", unit, int{region});
  return r.e4m3_shard.view(DType::kF32, {r.shard_numel / 4});
}

Tensor Fp8Gather::receive(int unit, Region region, Tensor bytes) const {
  const RegionState& r = units_[unit].regions[region];
  SHARDTRAIN_CHECK(r.covered && static_cast<size_t>(r.begin + r.padded) <= bytes.bytes(),
                   "unit {} region {}: {} bytes to receive into", unit, int{region}, bytes.bytes());
  return Tensor(static_cast<char*>(bytes.data()) + r.begin, DType::kF32, {r.padded / 4},
                bytes.device());
}

size_t Fp8Gather::gathered_bytes(int unit) const {
  return static_cast<size_t>(plan_.units[unit].gathered_numel());
}

void Fp8Gather::unpack(int unit, Tensor bytes, Tensor gathered) {
  const Tensor bytes_u8(bytes.data(), DType::kU8, {static_cast<int64_t>(bytes.bytes())},
                        bytes.device());
  const Tensor amax = amax_.view(DType::kF32, {scale_count_});
  const Tensor side = side_.view(act_, {side_numel_});
  for (const Region region : {kFrozen, kTrainable}) {
    const RegionState& r = units_[unit].regions[region];
    if (!r.covered) continue;
    ops_.fp8_range_dequantize(bytes_u8.rows(0, gathered.numel()), r.unit_ranges, amax, gathered);
    for (const Copy& c : r.side_out) {
      ops_.cast(gathered.rows(c.to, c.to + c.count), side.rows(c.from, c.from + c.count));
    }
  }
}

size_t Fp8Gather::held_bytes() const {
  size_t bytes = amax_.bytes() + side_.bytes();
  for (const UnitState& u : units_) {
    for (const RegionState& r : u.regions) bytes += r.e4m3_shard.bytes();
  }
  return bytes;
}

}  // namespace shardtrain
