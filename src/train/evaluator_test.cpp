// evaluate_share (train/evaluator.h) on a tiny golden model on the CPU: the totals of one
// process are the sums of each sequence's own loss and targets; split over ranks, every rank's
// share adds up to the same totals (each sequence exactly once, padding passes adding nothing);
// eval_report turns totals into the mean loss and perplexity.
#include "train/evaluator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "data/batch.h"
#include "ops/device_buffer.h"
#include "train/inference_model.h"

namespace shardtrain {
namespace {

// `count` sequences of 12 tokens below vocab 96; every third label of sequence 1 ignored.
class MemoryDataset final : public SequenceDataset {
 public:
  explicit MemoryDataset(int count) {
    for (int s = 0; s < count; ++s) {
      Example e;
      for (int t = 0; t < 12; ++t) {
        e.input_ids.push_back((s * 17 + t * 5 + t * t) % 96);
        e.labels.push_back(s == 1 && t % 3 == 0 ? kIgnoreIndex : e.input_ids.back());
      }
      examples_.push_back(e);
    }
  }
  size_t size() const override { return examples_.size(); }
  Example get(size_t i) const override { return examples_.at(i); }
  int64_t max_token_id() const override { return 95; }
  int64_t seq_len() const override { return 12; }
  std::string describe_example(size_t i) const override { return std::to_string(i); }

 private:
  std::vector<Example> examples_;
};

class EvaluatorTest : public ::testing::Test {
 protected:
  EvaluatorTest()
      : loaded_(load_inference_model(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/llama_gqa",
                                     DeviceChoice::kCpu)),
        loss_(*loaded_.ops, sizeof(float)) {
    loaded_.model->reserve(2, 12);
  }
  EvalTotals run(const SequenceDataset& data, EvalShare share) {
    return evaluate_share(*loaded_.model, *loaded_.units, *loaded_.ops, data, share,
                          loss_.view(DType::kF32, {1}));
  }
  InferenceModel loaded_;
  DeviceBuffer loss_;
};

TEST_F(EvaluatorTest, OneProcessSumsEverySequencesLoss) {
  const MemoryDataset data(5);
  const EvalTotals all = run(data, {5, 2, 0, 1});
  double loss_sum = 0;
  int64_t targets = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const Batch batch = make_batch({data.get(i)});
    targets += batch.target_count;
    DeviceBuffer single(*loaded_.ops, sizeof(float));
    const Tensor loss_1 = single.view(DType::kF32, {1});
    loaded_.model->set_batch(batch);
    loaded_.ops->fill_zero(loss_1);
    loaded_.model->forward(*loaded_.units, loss_1, nullptr);
    loss_sum += loaded_.ops->read_scalar(loss_1);
  }
  EXPECT_EQ(all.sequences, 5);
  // 11 targets per sequence, less sequence 1's ignored labels at t = 3, 6, 9 (t = 0 is never a
  // target).
  EXPECT_EQ(targets, 5 * 11 - 3);
  EXPECT_EQ(all.targets, targets);
  EXPECT_NEAR(all.loss_sum, loss_sum, 1e-4 * loss_sum);
  EXPECT_GT(all.loss_sum, 0.0);
  // Fewer sequences than the data holds: only the first `count`.
  const EvalTotals first3 = run(data, {3, 2, 0, 1});
  EXPECT_EQ(first3.sequences, 3);
  EXPECT_EQ(first3.targets, 3 * 11 - 3);
}

TEST_F(EvaluatorTest, RankSharesAddUpToTheWhole) {
  // 7 sequences on 3 ranks, 2 a pass: ranks get 0,3,6 / 1,4 / 2,5, two passes each.
  const MemoryDataset seven(7);
  const EvalTotals whole = run(seven, {7, 2, 0, 1});
  EvalTotals sum;
  const std::vector<int64_t> want_sequences = {3, 2, 2};
  for (int rank = 0; rank < 3; ++rank) {
    const EvalTotals part = run(seven, {7, 2, rank, 3});
    EXPECT_EQ(part.sequences, want_sequences[rank]) << rank;
    sum.loss_sum += part.loss_sum;
    sum.targets += part.targets;
    sum.sequences += part.sequences;
  }
  EXPECT_EQ(sum.sequences, 7);
  EXPECT_EQ(sum.targets, whole.targets);
  EXPECT_NEAR(sum.loss_sum, whole.loss_sum, 1e-4 * whole.loss_sum);

  // 4 sequences on 3 ranks, 1 a pass: ranks 1 and 2 run a second, padding pass (all labels
  // ignored) so every rank makes the same number of forward passes; it adds nothing.
  const MemoryDataset four(4);
  const EvalTotals whole4 = run(four, {4, 1, 0, 1});
  EvalTotals sum4;
  for (int rank = 0; rank < 3; ++rank) {
    const EvalTotals part = run(four, {4, 1, rank, 3});
    EXPECT_EQ(part.sequences, rank == 0 ? 2 : 1) << rank;
    sum4.loss_sum += part.loss_sum;
    sum4.targets += part.targets;
  }
  EXPECT_EQ(sum4.targets, whole4.targets);
  EXPECT_NEAR(sum4.loss_sum, whole4.loss_sum, 1e-4 * whole4.loss_sum);
}

TEST(EvalReport, MeanLossAndPerplexity) {
  const EvalReport report = eval_report({.loss_sum = 6.0, .targets = 4, .sequences = 2}, 7, 0.5);
  EXPECT_EQ(report.step, 7);
  EXPECT_DOUBLE_EQ(report.loss, 1.5);
  EXPECT_DOUBLE_EQ(report.perplexity, std::exp(1.5));
  EXPECT_EQ(report.targets, 4);
  EXPECT_EQ(report.sequences, 2);
  EXPECT_DOUBLE_EQ(report.eval_time_s, 0.5);
  const EvalReport empty = eval_report({}, 1, 0);
  EXPECT_EQ(empty.loss, 0.0);
  EXPECT_EQ(empty.perplexity, 1.0);
}

}  // namespace
}  // namespace shardtrain
