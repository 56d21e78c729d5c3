// PhaseProgress: the line's counts, percentage and ETA; silence for short phases; at most one
// line per interval; the last line when a reported phase completes; concurrent advances.
#include "obs/phase_progress.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace shardtrain {
namespace {

struct Recorder {
  double now = 100;
  std::vector<std::string> lines;
  PhaseProgress make(uint64_t total, bool enabled = true) {
    return PhaseProgress(
        "prepare data.jsonl", total, "lines", enabled, 5.0,
        [this](const std::string& l) { lines.push_back(l); }, [this] { return now; });
  }
};

TEST(PhaseProgress, LineHasCountsPercentElapsedAndEta) {
  Recorder r;
  const PhaseProgress p = r.make(1000);
  EXPECT_EQ(p.line(250, 12), "prepare data.jsonl: 250/1000 lines (25.0%) | 0:00:12 | ETA 0:00:36");
  EXPECT_EQ(p.line(1000, 48), "prepare data.jsonl: 1000/1000 lines (100.0%) | 0:00:48");
}

TEST(PhaseProgress, ShortPhaseIsSilent) {
  Recorder r;
  PhaseProgress p = r.make(10);
  for (int i = 0; i < 10; ++i) {
    r.now += 0.4;
    p.advance();
  }
  EXPECT_TRUE(r.lines.empty());
}

TEST(PhaseProgress, OneLinePerIntervalAndTheLastOne) {
  Recorder r;
  PhaseProgress p = r.make(100);
  for (int i = 0; i < 100; ++i) {
    r.now += 0.5;  // 50 s in all: a line at 5 s, 10 s, ... and the completion
    p.advance();
  }
  ASSERT_EQ(r.lines.size(), 10u) << r.lines.front();
  EXPECT_EQ(r.lines.front(), "prepare data.jsonl: 10/100 lines (10.0%) | 0:00:05 | ETA 0:00:45");
  EXPECT_EQ(r.lines.back(), "prepare data.jsonl: 100/100 lines (100.0%) | 0:00:50");
}

TEST(PhaseProgress, DisabledWritesNothing) {
  Recorder r;
  PhaseProgress p = r.make(2, false);
  r.now += 60;
  p.advance(2);
  EXPECT_TRUE(r.lines.empty());
}

TEST(PhaseProgress, ConcurrentAdvancesCountEveryItem) {
  Recorder r;
  r.now = 0;
  std::mutex lines_mutex;
  std::vector<std::string> lines;
  PhaseProgress p(
      "load", 4000, "tensors", true, 0.0,
      [&](const std::string& l) {
        std::lock_guard<std::mutex> lock(lines_mutex);
        lines.push_back(l);
      },
      [] { return 1.0; });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) p.advance();
    });
  }
  for (std::thread& t : threads) t.join();
  bool saw_total = false;
  for (const std::string& l : lines) saw_total |= l.rfind("load: 4000/4000 tensors", 0) == 0;
  EXPECT_TRUE(saw_total);
}

}  // namespace
}  // namespace shardtrain
