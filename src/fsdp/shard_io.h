// ShardIo: moves parameter values between the outside world and this rank's shards
// (fsdp/unit_shards.h), frozen and trainable regions alike (fsdp/shard_plan.h).
//
//  - init_random: generates each whole unit (the same values at every world size) and keeps
//    this rank's slices of both regions.
//  - load_pretrained: reads only the byte ranges of this rank's shards from the checkpoint's
//    memory-mapped files (no rank ever holds the whole model); world rank 0 logs progress with
//    an ETA when it takes long (obs/phase_progress.h).
//  - gather_to_host: collective over the shard group; the whole unit as fp32 on the host, for
//    the HF export: the trainable region from the fp32 masters, the frozen region from its
//    compute-dtype shards (exact when the frozen values came from a bf16 checkpoint).
// Frozen values are rounded to the compute dtype by the backend's cast, as the masters' copies
// are; padding beyond a region's elements is zero.
#pragma once

#include <cstdint>
#include <functional>

#include "dist/comm.h"
#include "fsdp/shard_plan.h"
#include "fsdp/unit_shards.h"
#include "io/hf_checkpoint.h"
#include "model/param_layout.h"
#include "ops/ops.h"

namespace shardtrain {

class ShardIo {
 public:
  // Everything passed must outlive this object. shard: the shard group's Comm; expert_shard:
  // the expert shard group's (units of experts, dist/mesh.h); log_progress:
  // this rank reports load progress (world rank 0).
  ShardIo(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, UnitShards& shards,
          Comm& shard, Comm& expert_shard, bool log_progress);

  void init_random(uint64_t seed, double std);
  void load_pretrained(const HfCheckpoint& checkpoint);
  // Writes elements [begin, begin + count) of parameter `spec` as fp32 into dst.
  using ParamReader =
      std::function<void(const ParamSpec& spec, int64_t begin, int64_t count, float* dst)>;
  // Like load_pretrained, with every parameter from `read` (LoRA: the base from the
  // checkpoint, the adapters from an adapter file or their initialisation).
  void load(const ParamReader& read);
  // host_values: the unit's numel floats.
  void gather_to_host(int unit, float* host_values);

 private:
  // Writes unit elements [lo, hi) into dst (dst[0] is element lo).
  using UnitSource = std::function<void(int64_t lo, int64_t hi, float* dst)>;
  // Fills this rank's frozen and trainable shards of `unit` from `source`.
  void fill_shards(int unit, const UnitSource& source);

  Ops& ops_;
  const ParamLayout& layout_;
  const ShardPlan& plan_;
  UnitShards& shards_;
  Comm& group_of(int unit) { return plan_.units[unit].experts ? expert_shard_ : shard_; }

  Comm& shard_;
  Comm& expert_shard_;
  const bool log_progress_;
};

}  // namespace shardtrain
