#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace shardtrain {
namespace {

std::vector<size_t> take(ShuffleSampler& sampler, size_t count) {
  std::vector<size_t> out;
  for (size_t i = 0; i < count; ++i) out.push_back(sampler.next());
  return out;
}

TEST(ShuffledIndices, IsAPermutation) {
  std::vector<size_t> indices = shuffled_indices(1000, 42);
  EXPECT_NE(indices, shuffled_indices(1000, 43));
  std::vector<size_t> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(indices, sorted) << "shuffled";
}

TEST(ShuffledIndices, FixedAcrossStandardLibraries) {
  // Pinned values, computed independently by a Python mt19937_64 + the same Fisher-Yates.
  // A change here changes every user's data order, which breaks resuming runs.
  EXPECT_EQ(shuffled_indices(10, 1234), (std::vector<size_t>{0, 3, 4, 7, 9, 8, 5, 6, 1, 2}));
}

TEST(ShuffleSampler, EachEpochIsAFreshPermutation) {
  ShuffleSampler sampler(50, 7);
  const std::vector<size_t> epoch0 = take(sampler, 50);
  EXPECT_EQ(sampler.epoch(), 0u);
  EXPECT_EQ(sampler.index(), 50u);
  const std::vector<size_t> epoch1 = take(sampler, 50);
  EXPECT_EQ(sampler.epoch(), 1u);
  EXPECT_EQ(epoch0, shuffled_indices(50, 7));
  EXPECT_EQ(epoch1, shuffled_indices(50, 8));
  EXPECT_NE(epoch0, epoch1);
}

TEST(ShuffleSampler, DeterministicForASeed) {
  ShuffleSampler a(97, 3), b(97, 3), c(97, 4);
  const std::vector<size_t> from_a = take(a, 300);
  EXPECT_EQ(from_a, take(b, 300));
  EXPECT_NE(from_a, take(c, 300));
}

TEST(ShuffleSampler, SeekResumesExactly) {
  ShuffleSampler original(23, 11);
  take(original, 40);  // into epoch 1
  const uint64_t epoch = original.epoch();
  const size_t index = original.index();
  EXPECT_EQ(epoch, 1u);
  EXPECT_EQ(index, 17u);
  const std::vector<size_t> expected = take(original, 60);

  ShuffleSampler resumed(23, 11);
  resumed.seek(epoch, index);
  EXPECT_EQ(take(resumed, 60), expected);
}

TEST(ShuffleSampler, SeekToEndOfEpochContinuesWithNextEpoch) {
  ShuffleSampler sampler(5, 1);
  sampler.seek(2, 5);
  EXPECT_EQ(sampler.next(), shuffled_indices(5, 1 + 3)[0]);
  EXPECT_EQ(sampler.epoch(), 3u);
}

TEST(ShuffleSampler, SeekPastEpochIsAnError) {
  ShuffleSampler sampler(5, 1);
  try {
    sampler.seek(0, 6);
    FAIL() << "expected Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("an epoch has only 5 indices"), std::string::npos);
  }
}

TEST(ShuffleSampler, RankSlicesAreDisjointAndInterleaveTheGlobalOrder) {
  const size_t size = 103, world = 4;
  const std::vector<size_t> global = shuffled_indices(size, 9);
  std::set<size_t> seen;
  for (size_t rank = 0; rank < world; ++rank) {
    ShuffleSampler sampler(size, 9, rank, world);
    EXPECT_EQ(sampler.epoch_length(), 25u);
    const std::vector<size_t> slice = take(sampler, 25);
    for (size_t i = 0; i < slice.size(); ++i) {
      EXPECT_EQ(slice[i], global[i * world + rank]);
      EXPECT_TRUE(seen.insert(slice[i]).second) << "index " << slice[i] << " on two ranks";
    }
    EXPECT_EQ(sampler.next(), shuffled_indices(size, 10)[rank]) << "next epoch";
  }
  EXPECT_EQ(seen.size(), 100u) << "3 indices (103 mod 4) skipped so ranks stay in lockstep";
}

TEST(ShuffleSampler, FewerExamplesThanRanksIsAnError) {
  EXPECT_THROW(ShuffleSampler(3, 1, 0, 4), Error);
}

}  // namespace
}  // namespace shardtrain
