#include "launch/watchdog.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "core/log.h"
#include "dist/heartbeat_record.h"
#include "dist/store_keys.h"

namespace shardtrain::launch {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Watchdog::Watchdog(Store& store, std::string key_prefix, int world_size,
                   std::chrono::milliseconds timeout, std::chrono::milliseconds poll)
    : store_(store),
      timeout_(timeout),
      key_prefix_(std::move(key_prefix)),
      poll_(poll),
      started_(Clock::now()),
      ranks_(static_cast<size_t>(world_size)) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, poll_, [this] { return stopping_; })) {
    lock.unlock();
    std::optional<std::string> report;
    try {
      report = check(Clock::now());
    } catch (const Error& error) {
      // The store is hosted by this agent: an error here means the agent is shutting down.
      log::warn("launch: watchdog stopped: {}", error.what());
      return;
    }
    lock.lock();
    if (report) {
      log::warn("launch: watchdog: {}", *report);
      report_ = std::move(report);
      return;
    }
  }
}

std::optional<std::string> Watchdog::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return report_;
}

std::optional<std::string> Watchdog::check(Clock::time_point now) {
  bool any_seen = false;
  Clock::time_point newest{};
  for (size_t r = 0; r < ranks_.size(); ++r) {
    std::optional<std::string> value =
        store_.try_get(key_prefix_ + store_keys::heartbeat(static_cast<int>(r)));
    RankState& state = ranks_[r];
    if (value && value != state.value) {
      state.value = std::move(value);
      state.changed = now;
    }
    std::optional<std::string> alive =
        store_.try_get(key_prefix_ + store_keys::heartbeat_alive(static_cast<int>(r)));
    if (alive && alive != state.alive) {
      state.alive = std::move(alive);
      state.alive_changed = now;
    }
    if (!state.value) continue;
    newest = any_seen ? std::max(newest, state.changed) : state.changed;
    any_seen = true;
  }
  if (!any_seen || now - newest < timeout_) return std::nullopt;

  // The likely cause: a frozen process first (its liveness counter stopped too: its published
  // phase may be older than where it stopped, so the rules below could name a waiting peer);
  // then behind the others, not waiting for them, idle longest (by the ranks' own clocks:
  // finer than this poll, and they only break ties within one hung group).
  const auto frozen_after =
      std::max<std::chrono::steady_clock::duration>(3 * poll_, std::chrono::milliseconds(1500));
  const auto frozen = [&](const RankState& state) {
    return state.alive && now - state.alive_changed >= frozen_after;
  };
  // A rank that never published while its peers are stuck did not reach its first step in
  // time (still loading, or stopped or hung before its first heartbeat): the others wait for it
  // in their first collective, so it is the cause, and naming one of them would mislead.
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (ranks_[r].value || ranks_[r].alive) continue;
    const double silent_s = std::chrono::duration<double>(now - started_).count();
    return fmt::format(
        "rank {} made no progress for {:.0f} s: it has sent no heartbeat since the workers "
        "started (still loading, or stopped before its first step)",
        r, silent_s);
  }
  // A counter that stopped less than frozen_after ago may be a process frozen just after its
  // peers began to wait for it (they stall first, so the hang is seen before the freeze is):
  // wait for it to be judged rather than blame a waiting peer.
  const auto freezing = [&](const RankState& state) {
    return state.alive && now - state.alive_changed >= poll_ && !frozen(state);
  };
  if (std::none_of(ranks_.begin(), ranks_.end(), frozen) &&
      std::any_of(ranks_.begin(), ranks_.end(), freezing)) {
    return std::nullopt;
  }
  std::optional<std::tuple<bool, int64_t, bool, int64_t, size_t>> culprit;
  HeartbeatRecord culprit_value;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r].value) continue;
    const std::optional<HeartbeatRecord> parsed = decode_heartbeat(*ranks_[r].value);
    if (!parsed) continue;
    const auto key = std::make_tuple(!frozen(ranks_[r]), parsed->step,
                                     parsed->waits_in_collective(), parsed->unix_ms, r);
    if (!culprit || key < *culprit) {
      culprit = key;
      culprit_value = *parsed;
    }
  }
  if (!culprit) return std::nullopt;
  const size_t rank = std::get<4>(*culprit);
  const double idle_s = std::chrono::duration<double>(now - ranks_[rank].changed).count();
  return fmt::format("rank {} made no progress for {:.0f} s at step {}, waiting in {}{}", rank,
                     idle_s, culprit_value.step, culprit_value.describe(),
                     frozen(ranks_[rank]) ? "; its process is not running" : "");
}

}  // namespace shardtrain::launch
