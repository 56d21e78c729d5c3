// StepBatcher: every rank's slice of one global batch, the same sequences at any world size,
// and a restored sampler continuing where it left off.
#include "data/step_batcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardtrain {
namespace {

// Example i: input_ids all i (seq_len 4); labels masked at position 0 of odd examples, so
// examples differ in target count (3 or 2 targets after the shift).
class CountingDataset final : public SequenceDataset {
 public:
  explicit CountingDataset(size_t size) : size_(size) {}
  size_t size() const override { return size_; }
  Example get(size_t i) const override {
    const int32_t id = static_cast<int32_t>(i);
    Example example{{id, id, id, id}, {id, id, id, id}, {}};
    if (i % 2 == 1) example.labels[1] = kIgnoreIndex;
    return example;
  }
  int64_t max_token_id() const override { return static_cast<int64_t>(size_) - 1; }
  int64_t seq_len() const override { return 4; }
  std::string describe_example(size_t i) const override { return std::to_string(i); }

 private:
  size_t size_;
};

// The first token of each sequence of each micro-batch (= its dataset index).
std::vector<std::vector<int32_t>> sequence_ids(const StepBatches& step) {
  std::vector<std::vector<int32_t>> ids;
  for (const Batch& batch : step.micro_batches) {
    ids.emplace_back();
    for (int64_t b = 0; b < batch.batch_size; ++b) ids.back().push_back(batch.input_ids[b * 4]);
  }
  return ids;
}

TEST(StepBatcher, RanksTakeInterleavedSlicesOfTheSingleProcessBatch) {
  const CountingDataset dataset(40);
  StepBatcher one(dataset, 9, {3, 4, 1, 0});
  StepBatcher rank0(dataset, 9, {3, 2, 2, 0}), rank1(dataset, 9, {3, 2, 2, 1});
  for (int step = 0; step < 5; ++step) {  // 60 sequences: crosses into the second epoch
    const StepBatches all = one.next(), first = rank0.next(), second = rank1.next();
    const auto all_ids = sequence_ids(all);
    ASSERT_EQ(all_ids.size(), 4u);
    // Micro-batch m of rank r is global micro-batch m * world + r.
    EXPECT_EQ(sequence_ids(first), (std::vector{all_ids[0], all_ids[2]})) << step;
    EXPECT_EQ(sequence_ids(second), (std::vector{all_ids[1], all_ids[3]})) << step;
    EXPECT_EQ(first.target_count + second.target_count, all.target_count) << step;
    EXPECT_EQ(first.token_count, 2 * 3 * 4);
    int64_t targets = 0;
    for (const Batch& batch : first.micro_batches) targets += batch.target_count;
    EXPECT_EQ(first.target_count, targets);
  }
}

TEST(StepBatcher, RestoredStateContinuesTheSameBatches) {
  const CountingDataset dataset(25);
  StepBatcher uninterrupted(dataset, 3, {2, 2, 2, 1});
  for (int step = 0; step < 4; ++step) uninterrupted.next();
  StepBatcher resumed(dataset, 3, {2, 2, 2, 1});
  resumed.restore(uninterrupted.state());
  for (int step = 0; step < 6; ++step) {
    EXPECT_EQ(sequence_ids(resumed.next()), sequence_ids(uninterrupted.next())) << step;
  }
}

}  // namespace
}  // namespace shardtrain
