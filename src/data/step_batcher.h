// StepBatcher: this rank's micro-batches for each optimizer step of a data-parallel job.
//
// Every rank draws the same global batch of micro_batch x grad_accum x world dataset indices
// per step from one seeded ShuffleSampler over the whole dataset, as a single process would,
// and keeps its slice: micro-batch m of rank r holds global positions
// [(m x world + r) x micro_batch, + micro_batch). So any world size trains on the same
// sequences per step, and a resumed run (restore) continues with the batches it would have
// drawn. The whole accumulation window is drawn at once because the loss is normalised by its
// target count.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace shardtrain {

struct StepBatchShape {
  int64_t micro_batch = 1;  // sequences per micro-batch
  int64_t grad_accum = 1;   // micro-batches per step on each rank
  int64_t world = 1;        // data-parallel ranks
  int64_t rank = 0;         // this rank, < world
};

// One step's data on this rank.
struct StepBatches {
  std::vector<Batch> micro_batches;  // grad_accum of them
  int64_t target_count = 0;          // loss targets over micro_batches
  int64_t token_count = 0;           // tokens over micro_batches
};

class StepBatcher {
 public:
  // `dataset` must outlive this object. REQUIRES: shape's fields >= 1, rank < world.
  StepBatcher(const SequenceDataset& dataset, uint64_t seed, StepBatchShape shape);

  StepBatches next();

  // The sampler position, for checkpoints (the same on every rank).
  SamplerState state() const { return sampler_.state(); }
  // Throws Error when `state` was saved by a sampler over other data (data/sampler.h).
  void restore(const SamplerState& state) { sampler_.restore(state); }

 private:
  const SequenceDataset& dataset_;
  StepBatchShape shape_;
  ShuffleSampler sampler_;
  std::vector<size_t> step_indices_;  // (micro_batch x grad_accum x world) global positions
};

}  // namespace shardtrain
