#include "data/batch.h"

#include <gtest/gtest.h>

namespace shardtrain {
namespace {

TEST(MakeBatch, ShiftsLabelsIntoTargets) {
  const std::vector<Example> examples = {
      {{10, 11, 12, 13}, {10, 11, 12, 13}},
      {{20, 21, 0, 0}, {-100, 21, -100, -100}},
  };
  const Batch batch = make_batch(examples);
  EXPECT_EQ(batch.batch_size, 2);
  EXPECT_EQ(batch.seq_len, 4);
  EXPECT_EQ(batch.input_ids, (std::vector<int32_t>{10, 11, 12, 13, 20, 21, 0, 0}));
  // Row 0: targets are the next tokens, last position ignored.
  // Row 1: position 0 predicts label[1] = 21; the rest are ignored.
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{11, 12, 13, -100, 21, -100, -100, -100}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(batch.target_count, 4);
}

TEST(MakeBatch, FirstLabelIsNeverATarget) {
  // HF's shifted loss drops labels[0]: a masked first token changes nothing.
  const Batch batch = make_batch({{{1, 2}, {-100, 2}}});
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{2, -100}));
  EXPECT_EQ(batch.target_count, 1);
}

TEST(MakeBatch, AllIgnoredGivesZeroTargets) {
  const Batch batch = make_batch({{{1, 2, 3}, {-100, -100, -100}}});
  EXPECT_EQ(batch.target_count, 0);
}

}  // namespace
}  // namespace shardtrain
