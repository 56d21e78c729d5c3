// The heartbeat record codec (dist/heartbeat_record.h) shared by workers and the launcher.
#include "dist/heartbeat_record.h"

#include <gtest/gtest.h>

namespace shardtrain {
namespace {

TEST(HeartbeatRecord, RoundTripsEveryPhaseWithSpacesInTheDetail) {
  for (const HeartbeatPhase phase : {HeartbeatPhase::kStepStart, HeartbeatPhase::kInCollective,
                                     HeartbeatPhase::kAfterCollective, HeartbeatPhase::kSaving}) {
    const HeartbeatRecord record{12, 1700000000123, phase, 4500,
                                 "all_gather: unit 3 (layers.2) parameter all-gather"};
    const std::optional<HeartbeatRecord> back = decode_heartbeat(encode_heartbeat(record));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->step, 12);
    EXPECT_EQ(back->unix_ms, 1700000000123);
    EXPECT_EQ(back->phase, phase);
    EXPECT_EQ(back->last_save_ms, 4500);
    EXPECT_EQ(back->detail, "all_gather: unit 3 (layers.2) parameter all-gather");
  }
  const auto empty = decode_heartbeat(encode_heartbeat({3, 9, HeartbeatPhase::kStepStart, 0, ""}));
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->detail, "");
}

TEST(HeartbeatRecord, DescribesThePhaseAsTheWatchdogReportsIt) {
  EXPECT_EQ((HeartbeatRecord{1, 1, HeartbeatPhase::kInCollective, 0, "barrier"}.describe()),
            "barrier");
  EXPECT_EQ((HeartbeatRecord{1, 1, HeartbeatPhase::kAfterCollective, 0, "barrier"}.describe()),
            "compute after barrier");
  EXPECT_EQ((HeartbeatRecord{1, 1, HeartbeatPhase::kStepStart, 0, ""}.describe()),
            "compute at step start");
  EXPECT_EQ((HeartbeatRecord{1, 1, HeartbeatPhase::kSaving, 0, "step 4"}.describe()),
            "saving a checkpoint: step 4");
  EXPECT_TRUE((HeartbeatRecord{1, 1, HeartbeatPhase::kInCollective, 0, ""}.waits_in_collective()));
  EXPECT_FALSE((HeartbeatRecord{1, 1, HeartbeatPhase::kSaving, 0, ""}.waits_in_collective()));
}

TEST(HeartbeatRecord, RefusesMalformedValues) {
  EXPECT_FALSE(decode_heartbeat("x 1 compute 0 phase"));
  EXPECT_FALSE(decode_heartbeat("3"));
  EXPECT_FALSE(decode_heartbeat("3 1.5 compute 0 x"));
  EXPECT_FALSE(decode_heartbeat("3 15 dancing 0 x")) << "unknown phase token";
  EXPECT_FALSE(decode_heartbeat("3 15 compute"));
  EXPECT_FALSE(decode_heartbeat("12 1700000000123 all_gather: unit 3")) << "the old format";
}

}  // namespace
}  // namespace shardtrain
