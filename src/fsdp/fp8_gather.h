// Fp8Gather: the FP8 all-gather (fp8.all_gather; docs/fsdp.md "FP8 all-gather"). The weights the
// FP8 linears read (model/decoder_model.h fp8_weight_ranges: one range per GEMM operand) travel
// as e4m3 bytes, one per element instead of the compute dtype's two, each weight with one
// per-tensor scale, as torchao's float8 all-gather with precomputed scales does.
//
// Covered: a region (fsdp/shard_plan.h: frozen, trainable) of a unit sharded over more than one
// rank that holds FP8 weights. For each, this rank keeps
//  - the region's e4m3 shard (one byte per element of its shard), cast from the compute-dtype
//    shard (what the bf16 all-gather would send) with each weight's scale fp8_gather_scale(amax)
//    (core/fp8_e4m3.h), amax taken over the whole weight: every rank takes it over its pieces,
//    and one all-reduce (max) over the shard group serves every unit;
//  - nothing else: the region's other elements (norms, biases, q/k norms) travel exact, through a
//    side vector of every covered region's other elements, each rank writing its own elements
//    and zeros elsewhere, made whole by one all-reduce (sum: x + 0 is exact) over the shard group.
// refresh() does both (two collectives for the whole model) when the shards have changed since
// the last one: after every optimizer step (the trainable regions) and after an init or a load
// (everything; frozen regions never change otherwise). It is collective over the shard group.
// A gather is then one all-gather of bytes per covered region; unpack() writes the FP8 weights
// into the gathered unit as bf16(q / scale) (the FP8 linears' own casts turn these values back
// into the same q: their scale differs from this one by bf16 rounding at most, far below half an
// e4m3 step) and copies the other elements from the side vector.
//
// Not covered (gathered in the compute dtype as before): units at G = 1 (nothing is gathered),
// units of experts (the experts run bf16), regions without FP8 weights (the root, LoRA's
// adapters, bf16 blocks).
#pragma once

#include <cstdint>
#include <vector>

#include "dist/comm.h"
#include "fsdp/shard_plan.h"
#include "fsdp/unit_shards.h"
#include "model/param_layout.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class Fp8Gather {
 public:
  enum Region { kFrozen = 0, kTrainable = 1 };

  // ranges: per unit of the layout, its FP8 weights in unit elements (empty: none). `ops`,
  // `layout`, `plan` and `shards` must outlive this object. shard_rank: this rank's index in the
  // shard group.
  Fp8Gather(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, UnitShards& shards,
            int shard_rank, const std::vector<std::vector<ElementRange>>& ranges);
  Fp8Gather(const Fp8Gather&) = delete;
  Fp8Gather& operator=(const Fp8Gather&) = delete;

  // Whether any region is covered (else this object does nothing).
  bool active() const { return active_; }
  bool covers(int unit, Region region) const { return units_[unit].regions[region].covered; }
  bool covers(int unit) const { return covers(unit, kFrozen) || covers(unit, kTrainable); }

  // The shards changed: the trainable regions after an optimizer step; everything after an init
  // or a load. Local.
  void trainable_changed() { trainable_stale_ = true; }
  void all_changed() { trainable_stale_ = frozen_stale_ = true; }
  // Collective over `shard_group` when anything changed (header comment); else nothing.
  void refresh(Comm& shard_group);

  // What a covered region's all-gather sends (its e4m3 shard), and where it lands in `bytes`
  // (a buffer of gathered_bytes(unit)), both as f32 views so that every Comm moves them bit for
  // bit (shard sizes are multiples of kParamAlignElems).
  Tensor send(int unit, Region region) const;
  Tensor receive(int unit, Region region, Tensor bytes) const;
  // Bytes of the buffer a covered unit's gathers land in.
  size_t gathered_bytes(int unit) const;
  // After the unit's gathers into `bytes` finished: writes its covered regions into `gathered`
  // (the unit, compute dtype): the FP8 weights dequantised, the other elements from the side
  // vector. Enqueued on the compute stream.
  void unpack(int unit, Tensor bytes, Tensor gathered);

  // Bytes this rank keeps (e4m3 shards, the side vector, the amaxes).
  size_t held_bytes() const;

 private:
  struct Copy {
    int64_t from = 0, to = 0, count = 0;
  };
  struct RegionState {
    bool covered = false;
    int64_t begin = 0;                    // unit element where the region starts
    int64_t padded = 0;                   // its padded numel (what the gather moves)
    int64_t shard_numel = 0;              // this rank's shard of it
    int64_t first_scale = 0, scales = 0;  // its weights' entries in the amax vector
    std::vector<Fp8Range> shard_pieces;   // weights within this rank's shard (shard elements)
    std::vector<Fp8Range> unit_ranges;    // the whole weights (unit elements)
    std::vector<Copy> side_in;   // this rank's other elements: shard element -> side element
    std::vector<Copy> side_out;  // every other element: side element -> unit element
    DeviceBuffer e4m3_shard;
  };
  struct UnitState {
    RegionState regions[2];
  };
  // The compute-dtype shard of a region (what the bf16 gather would send).
  Tensor shard_values(int unit, Region region) const;
  void plan_region(int unit, Region region, const std::vector<ElementRange>& weights);

  Ops& ops_;
  const ParamLayout& layout_;
  const ShardPlan& plan_;
  UnitShards& shards_;
  const int shard_rank_;
  const DType act_;
  std::vector<UnitState> units_;
  int64_t scale_count_ = 0, side_numel_ = 0;
  DeviceBuffer amax_, side_;
  bool active_ = false;
  bool trainable_stale_ = true, frozen_stale_ = true;
};

}  // namespace shardtrain
