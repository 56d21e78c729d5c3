#include "data/step_batcher.h"

#include "core/error.h"

namespace shardtrain {

StepBatcher::StepBatcher(const SequenceDataset& dataset, uint64_t seed, StepBatchShape shape)
    : dataset_(dataset),
      shape_(shape),
      sampler_(dataset.size(), seed),
      step_indices_(static_cast<size_t>(shape.micro_batch * shape.grad_accum * shape.world)) {
  SHARDTRAIN_CHECK(shape.micro_batch >= 1 && shape.grad_accum >= 1 && shape.world >= 1 &&
                       shape.rank >= 0 && shape.rank < shape.world,
                   "step batch shape: micro_batch {} grad_accum {} rank {} of {}",
                   shape.micro_batch, shape.grad_accum, shape.rank, shape.world);
}

StepBatches StepBatcher::next() {
  for (size_t& index : step_indices_) index = sampler_.next();
  StepBatches step;
  std::vector<Example> examples;
  for (int64_t m = 0; m < shape_.grad_accum; ++m) {
    examples.clear();
    const int64_t first = (m * shape_.world + shape_.rank) * shape_.micro_batch;
    for (int64_t b = 0; b < shape_.micro_batch; ++b) {
      examples.push_back(dataset_.get(step_indices_[first + b]));
    }
    step.micro_batches.push_back(make_batch(examples));
    const Batch& batch = step.micro_batches.back();
    step.target_count += batch.target_count;
    step.token_count += batch.batch_size * batch.seq_len;
  }
  return step;
}

}  // namespace shardtrain
