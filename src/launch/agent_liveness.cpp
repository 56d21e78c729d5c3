#include "launch/agent_liveness.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "dist/store_keys.h"

namespace shardtrain::launch {

using Clock = std::chrono::steady_clock;

AgentLiveness::AgentLiveness(Mode mode, Store& publisher, Store& observer, std::string self_id,
                             std::chrono::milliseconds interval, int max_attempt)
    : mode_(mode),
      publisher_(publisher),
      observer_(observer),
      key_(store_keys::alive(self_id)),
      interval_(interval),
      max_attempt_(max_attempt) {
  SHARDTRAIN_CHECK(max_attempt_ >= 1);
  if (mode_ == Mode::kLease) {
    publisher_.set(key_, "1");
    return;
  }
  publisher_.add(key_, 1);
  thread_ = std::thread([this] { heartbeat_loop(); });
}

AgentLiveness::~AgentLiveness() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::chrono::milliseconds AgentLiveness::check_interval() const {
  return std::clamp(interval_ / 2, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

void AgentLiveness::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    try {
      publisher_.add(key_, 1);
    } catch (const Error& error) {
      // The store's host is gone; the agent's own calls fail with the same error and say so.
      log::warn("launch: heartbeat stopped: {}", error.what());
      return;
    }
    lock.lock();
  }
}

std::optional<std::string> AgentLiveness::departed(const std::string& id) {
  std::optional<std::string> value = observer_.try_get(store_keys::alive(id));
  if (mode_ == Mode::kLease) {
    if (value) return std::nullopt;
    return fmt::format("its etcd lease expired (no keep-alive for {:.3g} s)",
                       std::chrono::duration<double>(window()).count());
  }
  if (!value) return "it has no heartbeat in the store";
  const auto now = Clock::now();
  auto [it, inserted] = observed_.try_emplace(id, Observed{value, now});
  Observed& seen = it->second;
  if (!inserted && seen.value != value) {
    seen.value = std::move(value);
    seen.changed = now;
  }
  // The slack covers the spacing of this observer's own reads.
  if (now - seen.changed < window() + check_interval()) return std::nullopt;
  return fmt::format("no heartbeat for {:.3g} s",
                     std::chrono::duration<double>(now - seen.changed).count());
}

}  // namespace shardtrain::launch
