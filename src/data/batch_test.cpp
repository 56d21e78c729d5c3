#include "data/batch.h"

#include <gtest/gtest.h>

namespace shardtrain {
namespace {

TEST(MakeBatch, ShiftsLabelsIntoTargets) {
  const std::vector<Example> examples = {
      {{10, 11, 12, 13}, {10, 11, 12, 13}, {}},
      {{20, 21, 0, 0}, {-100, 21, -100, -100}, {}},
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
  const Batch batch = make_batch({{{1, 2}, {-100, 2}, {}}});
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{2, -100}));
  EXPECT_EQ(batch.target_count, 1);
}

TEST(MakeBatch, DocumentsRestartPositionsAndNeverTargetAFirstToken) {
  // Row 0: documents [0, 3) and [3, 6); row 1 is one document (padded at the end).
  Example packed{{1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}, {3}};
  Example single{{7, 8, 9, 0, 0, 0}, {7, 8, 9, -100, -100, -100}, {}};
  const Batch batch = make_batch({packed, single});
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(batch.document_start_BT, (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 0, 0, 0, 0, 0, 0}));
  // Position 2 would predict token 4, the first of the second document: ignored although its
  // label is set.
  EXPECT_EQ(batch.targets,
            (std::vector<int32_t>{2, 3, -100, 5, 6, -100, 8, 9, -100, -100, -100, -100}));
  EXPECT_EQ(batch.target_count, 6);
  EXPECT_EQ(batch.max_documents, 2);
  EXPECT_TRUE(batch.has_documents());
  // Three documents, one of a single token.
  const Batch three = make_batch({{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}, {2, 3}}});
  EXPECT_EQ(three.positions, (std::vector<int32_t>{0, 1, 0, 0, 1}));
  EXPECT_EQ(three.document_start_BT, (std::vector<int32_t>{0, 0, 2, 3, 3}));
  EXPECT_EQ(three.targets, (std::vector<int32_t>{2, -100, -100, 5, -100}));
  EXPECT_EQ(three.max_documents, 3);
}

TEST(MakeBatch, OneDocumentPerSequenceCarriesNoStarts) {
  const Batch batch = make_batch({{{1, 2, 3}, {1, 2, 3}, {}}, {{4, 5, 6}, {4, 5, 6}, {}}});
  EXPECT_FALSE(batch.has_documents());
  EXPECT_EQ(batch.max_documents, 1);
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

TEST(MakeBatch, AllIgnoredGivesZeroTargets) {
  const Batch batch = make_batch({{{1, 2, 3}, {-100, -100, -100}, {}}});
  EXPECT_EQ(batch.target_count, 0);
}

}  // namespace
}  // namespace shardtrain
