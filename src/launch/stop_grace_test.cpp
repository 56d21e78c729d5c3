// The SIGTERM grace against what heartbeat records claim: a saving worker extends it, but a
// forged or corrupt record (an absurd, even INT64_MAX, save duration) cannot make the agent
// wait beyond --max-stop-grace (it waited practically forever before).
#include "launch/stop_grace.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/error.h"
#include "launch/launch_config.h"

namespace shardtrain::launch {
namespace {

using std::chrono::milliseconds;

std::optional<HeartbeatRecord> saving(int64_t last_save_ms) {
  HeartbeatRecord record;
  record.phase = HeartbeatPhase::kSaving;
  record.last_save_ms = last_save_ms;
  return record;
}

TEST(StopGrace, SavingWorkersExtendTheGraceUpToTheMaximum) {
  const milliseconds stop(5000), max(600000);
  EXPECT_EQ(grace_for(stop, max, {std::nullopt, HeartbeatRecord{}}), stop);
  EXPECT_EQ(grace_for(stop, max, {saving(1000)}), kSavingGraceFloor);
  EXPECT_EQ(grace_for(stop, max, {saving(100'000)}), milliseconds(200'000));
  EXPECT_EQ(grace_for(stop, max, {saving(400'000)}), max);
  EXPECT_EQ(grace_for(stop, max, {saving(std::numeric_limits<int64_t>::max())}), max);
  EXPECT_EQ(grace_for(stop, max, {saving(std::numeric_limits<int64_t>::max() / 2 + 1)}), max);
  EXPECT_EQ(grace_for(stop, max, {saving(-5)}), kSavingGraceFloor);
  // A maximum below the floor wins over the floor; never below --stop-grace.
  EXPECT_EQ(grace_for(stop, milliseconds(10000), {saving(100'000)}), milliseconds(10000));
  EXPECT_EQ(grace_for(milliseconds(20000), milliseconds(1000), {saving(100'000)}),
            milliseconds(20000));
}

TEST(StopGrace, ForgedRecordsFromTheStoreAreBoundedToo) {
  const std::optional<HeartbeatRecord> forged =
      decode_heartbeat("7 1700000000000 saving 9223372036854775807 step 7 before stopping");
  ASSERT_TRUE(forged.has_value());
  EXPECT_EQ(grace_for(milliseconds(5000), milliseconds(60000), {forged}), milliseconds(60000));
  EXPECT_FALSE(decode_heartbeat("7 1700000000000 saving 99999999999999999999999 x").has_value());
}

TEST(StopGrace, MaxStopGraceIsAFlagCheckedAgainstTheGrace) {
  const EnvLookup no_env = [](const std::string&) { return std::optional<std::string>(); };
  LaunchFlags flags;
  flags.standalone = true;
  flags.no_python = true;
  flags.command = {"/bin/true"};
  EXPECT_EQ(resolve_launch_config(flags, no_env).max_stop_grace, milliseconds(600000));
  flags.max_stop_grace = "45";
  EXPECT_EQ(resolve_launch_config(flags, no_env).max_stop_grace, milliseconds(45000));
  flags.stop_grace = "60";
  try {
    resolve_launch_config(flags, no_env);
    FAIL() << "a maximum below the grace was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()),
              "--max-stop-grace '45' is below --stop-grace (60 s); HINT: the maximum must be at "
              "least the grace");
  }
  flags.max_stop_grace = "1e300";
  EXPECT_THROW(resolve_launch_config(flags, no_env), Error);
}

}  // namespace
}  // namespace shardtrain::launch
