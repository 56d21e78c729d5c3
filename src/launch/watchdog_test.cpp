// The hang watchdog against an in-memory store: it judges the group, not single ranks, and
// names the rank behind the others, outside a collective, idle longest.
#include "launch/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "dist/heartbeat_record.h"

namespace shardtrain::launch {
namespace {

using namespace std::chrono_literals;

// Only set/try_get are used by the watchdog; the rest is not needed here.
class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  std::optional<std::string> try_get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = data_.find(key);
    if (it == data_.end()) return std::nullopt;
    return it->second;
  }
  std::string get(const std::string&, Duration) override { return ""; }
  int64_t add(const std::string&, int64_t) override { return 0; }
  std::string compare_set(const std::string&, const std::string&, const std::string&) override {
    return "";
  }
  void wait(const std::vector<std::string>&, Duration) override {}
  bool remove(const std::string&) override { return false; }
  std::string endpoint() const override { return "memory"; }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> data_;
};

// A heartbeat record as a rank publishes it (dist/heartbeat_record.h).
std::string beat(int64_t step, int64_t unix_ms, HeartbeatPhase phase, const std::string& detail) {
  return encode_heartbeat(HeartbeatRecord{step, unix_ms, phase, 0, detail});
}

std::optional<std::string> report_within(const Watchdog& watchdog, std::chrono::milliseconds t) {
  const auto deadline = std::chrono::steady_clock::now() + t;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = watchdog.report()) return r;
    std::this_thread::sleep_for(5ms);
  }
  return watchdog.report();
}

TEST(WatchdogTest, SilentWithoutHeartbeatsAndWhileAnyRankAdvances) {
  MemoryStore store;
  Watchdog watchdog(store, "p/", 3, 300ms, 10ms);
  EXPECT_FALSE(report_within(watchdog, 400ms)) << "no rank has published: nothing to judge";
  // Ranks 1 and 2 wait in a barrier while rank 0 keeps advancing (e.g. writing the model).
  store.set("p/heartbeat/1", beat(20, 1000, HeartbeatPhase::kInCollective, "barrier"));
  store.set("p/heartbeat/2", beat(20, 1000, HeartbeatPhase::kInCollective, "barrier"));
  for (int i = 0; i < 25; ++i) {
    store.set("p/heartbeat/0", beat(20, 2000 + i, HeartbeatPhase::kInCollective,
                                    "all_gather: unit " + std::to_string(i)));
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_FALSE(watchdog.report());
  const auto report = report_within(watchdog, 2s);
  ASSERT_TRUE(report) << "the whole group stopped";
  // All wait in collectives at one step: the one idle longest by its own clock.
  EXPECT_EQ(report->rfind("rank 1 made no progress for ", 0), 0u) << *report;
  EXPECT_NE(report->find(" s at step 20, waiting in barrier"), std::string::npos) << *report;
}

TEST(WatchdogTest, NamesTheRankBehindThenTheOneOutsideACollective) {
  {
    MemoryStore store;
    store.set("heartbeat/0",
              beat(8, 500, HeartbeatPhase::kInCollective, "all_reduce: step totals"));
    store.set("heartbeat/1",
              beat(7, 400, HeartbeatPhase::kAfterCollective, "all_gather: unit 2 (layers.1)"));
    store.set("heartbeat/2",
              beat(8, 300, HeartbeatPhase::kInCollective, "all_reduce: step totals"));
    Watchdog watchdog(store, "", 3, 50ms, 10ms);
    const auto report = report_within(watchdog, 1s);
    ASSERT_TRUE(report);
    EXPECT_EQ(report->rfind("rank 1 made no progress for ", 0), 0u) << *report;
    EXPECT_NE(report->find("at step 7, waiting in compute after all_gather: unit 2 (layers.1)"),
              std::string::npos)
        << *report;
  }
  {
    MemoryStore store;
    store.set("heartbeat/0",
              beat(3, 100, HeartbeatPhase::kInCollective, "all_reduce: step totals"));
    store.set("heartbeat/1", beat(3, 900, HeartbeatPhase::kStepStart, ""));
    Watchdog watchdog(store, "", 2, 50ms, 10ms);
    const auto report = report_within(watchdog, 1s);
    ASSERT_TRUE(report);
    EXPECT_NE(report->find("rank 1 made no progress"), std::string::npos)
        << "rank 0 waits for rank 1, which is not in the collective: " << *report;
  }
}

TEST(WatchdogTest, NamesARankThatNeverPublishedBeforeThoseWaitingForIt) {
  // Ranks 0 and 2 reached step 1 and wait in its first all-gather; rank 1 never published (it
  // is still loading, or was stopped before its first heartbeat). Rank 0 would be named by the
  // ordinary rules (same step, both in collectives, idle longest), which would mislead.
  MemoryStore store;
  store.set("heartbeat/0", beat(1, 100, HeartbeatPhase::kInCollective,
                                "all_gather: unit 0 (root) parameter all-gather"));
  store.set("heartbeat/2", beat(1, 900, HeartbeatPhase::kInCollective,
                                "all_gather: unit 0 (root) parameter all-gather"));
  Watchdog watchdog(store, "", 3, 100ms, 10ms);
  const auto report = report_within(watchdog, 2s);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->rfind("rank 1 made no progress for ", 0), 0u) << *report;
  EXPECT_NE(report->find(" s: it has sent no heartbeat since the workers started"),
            std::string::npos)
      << *report;
}

// Bumps `heartbeat_alive/<r>` every `period` for each rank r in `frozen_after`, as a rank's
// publisher thread does, until that rank's time is up (a frozen process; nullopt: never).
class LivenessTicker {
 public:
  LivenessTicker(MemoryStore& store,
                 std::map<int, std::optional<std::chrono::milliseconds>> frozen_after,
                 std::chrono::milliseconds period)
      : thread_([this, &store, frozen_after, period] {
          const auto start = std::chrono::steady_clock::now();
          for (int tick = 0; !stop_; ++tick) {
            for (const auto& [rank, after] : frozen_after) {
              if (after && std::chrono::steady_clock::now() - start >= *after) continue;
              store.set("heartbeat_alive/" + std::to_string(rank), std::to_string(tick));
            }
            std::this_thread::sleep_for(period);
          }
        }) {}
  ~LivenessTicker() {
    stop_ = true;
    thread_.join();
  }
  LivenessTicker(const LivenessTicker&) = delete;
  LivenessTicker& operator=(const LivenessTicker&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The report names `rank` as a process that is not running.
void expect_names_frozen_rank(const std::optional<std::string>& report, int rank) {
  ASSERT_TRUE(report);
  EXPECT_EQ(report->rfind("rank " + std::to_string(rank) + " made no progress for ", 0), 0u)
      << *report;
  EXPECT_NE(report->find("; its process is not running"), std::string::npos) << *report;
}

TEST(WatchdogTest, NamesAFrozenProcessBeforeRanksThatWaitForIt) {
  // Rank 1 was stopped (SIGSTOP) before it could publish its newest phase: its last value says
  // it waits in a collective and is newer than rank 0's, so only liveness tells them apart:
  // rank 0's publisher keeps ticking, rank 1's does not.
  MemoryStore store;
  store.set("heartbeat/0", beat(5, 100, HeartbeatPhase::kInCollective, "all_reduce: step totals"));
  store.set("heartbeat/1", beat(5, 900, HeartbeatPhase::kInCollective,
                                "all_gather: unit 1 (layers.0) parameter all-gather"));
  store.set("heartbeat_alive/1", "17");
  {
    const LivenessTicker ticker(store, {{0, std::nullopt}}, 10ms);
    Watchdog watchdog(store, "", 2, 2s, 10ms);
    expect_names_frozen_rank(report_within(watchdog, 5s), 1);
  }
  {
    // Without liveness counters (both frozen alike or none published) the old rules apply:
    // the same step, both in collectives, rank 0 idle longest by its own clock.
    MemoryStore plain;
    plain.set("heartbeat/0",
              beat(5, 100, HeartbeatPhase::kInCollective, "all_reduce: step totals"));
    plain.set("heartbeat/1", beat(5, 900, HeartbeatPhase::kInCollective,
                                  "all_gather: unit 1 (layers.0) parameter all-gather"));
    Watchdog watchdog(plain, "", 2, 50ms, 10ms);
    const auto report = report_within(watchdog, 1s);
    ASSERT_TRUE(report);
    EXPECT_EQ(report->rfind("rank 0 made no progress for ", 0), 0u) << *report;
    EXPECT_EQ(report->find("not running"), std::string::npos) << *report;
  }
}

TEST(WatchdogTest, WaitsForTheVerdictOnARankThatFrozeAfterItsPeersStalled) {
  // The peers stalled (their values stop changing) while rank 1 still ran; rank 1 froze 0.5 s
  // later. The group counts as hung after 1 s, when rank 1's counter has been still for 0.5 s,
  // short of the 1.5 s that prove a freeze: the report must wait for that verdict, not name
  // waiting rank 0 (which the ordinary rules would: same step, both in collectives, rank 0
  // idle longest).
  MemoryStore store;
  store.set("heartbeat/0", beat(5, 100, HeartbeatPhase::kInCollective, "all_reduce: step totals"));
  store.set("heartbeat/1", beat(5, 900, HeartbeatPhase::kInCollective,
                                "all_gather: unit 1 (layers.0) parameter all-gather"));
  const LivenessTicker ticker(store, {{0, std::nullopt}, {1, 500ms}}, 2ms);
  Watchdog watchdog(store, "", 2, 1s, 10ms);
  expect_names_frozen_rank(report_within(watchdog, 5s), 1);
}

}  // namespace
}  // namespace shardtrain::launch
