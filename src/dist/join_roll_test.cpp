// The join roll over a FileStore: marks, the missing ranks and their one-line description.
#include "dist/join_roll.h"

#include <gtest/gtest.h>

#include "core/testing/test_support.h"
#include "dist/file_store.h"

namespace shardtrain {
namespace {

TEST(JoinRollTest, NamesTheRanksWithoutAMark) {
  testing::TempDir dir("shardtrain_join_roll_");
  FileStore store(dir.path());
  JoinRoll roll(store, "group", 4);
  EXPECT_EQ(roll.missing(), (std::vector<int>{0, 1, 2, 3}));
  roll.mark(0);
  roll.mark(2);
  EXPECT_EQ(roll.missing(), (std::vector<int>{1, 3}));
  EXPECT_EQ(roll.describe_missing(), "ranks 1, 3 did not join");
  roll.mark(3);
  EXPECT_EQ(roll.describe_missing(), "rank 1 did not join");
  // Another group's marks under its own prefix do not count.
  JoinRoll(store, "other", 4).mark(1);
  EXPECT_EQ(roll.describe_missing(), "rank 1 did not join");
  roll.mark(1);
  EXPECT_TRUE(roll.missing().empty());
  EXPECT_EQ(roll.describe_missing(), "");
}

}  // namespace
}  // namespace shardtrain
