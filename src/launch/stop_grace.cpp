#include "launch/stop_grace.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "dist/store_keys.h"
#include "dist/tcp_store.h"

namespace shardtrain::launch {

std::chrono::milliseconds grace_for(std::chrono::milliseconds stop_grace,
                                    std::chrono::milliseconds max_grace,
                                    const std::vector<std::optional<HeartbeatRecord>>& records) {
  const std::chrono::milliseconds cap = std::max(stop_grace, max_grace);
  std::chrono::milliseconds grace = stop_grace;
  for (const std::optional<HeartbeatRecord>& r : records) {
    if (!r || r->phase != HeartbeatPhase::kSaving) continue;
    // Clamped before doubling: a record's duration is whatever the worker (or anyone who can
    // write the store) put there, up to INT64_MAX.
    const int64_t save_ms = std::clamp<int64_t>(r->last_save_ms, 0, cap.count());
    grace = std::max({grace, kSavingGraceFloor, std::chrono::milliseconds(2 * save_ms)});
  }
  return std::min(grace, cap);
}

SaveAwareGrace::SaveAwareGrace(std::string host, int port, std::string secret, std::string prefix,
                               std::vector<int> ranks, std::chrono::milliseconds stop_grace,
                               std::chrono::milliseconds max_grace)
    : host_(std::move(host)),
      port_(port),
      secret_(std::move(secret)),
      prefix_(std::move(prefix)),
      ranks_(std::move(ranks)),
      stop_grace_(stop_grace),
      max_grace_(max_grace) {}

SaveAwareGrace::~SaveAwareGrace() = default;

std::chrono::milliseconds SaveAwareGrace::operator()() {
  if (unreachable_) return stop_grace_;
  std::vector<std::optional<HeartbeatRecord>> records;
  try {
    if (!store_) {
      store_ = std::make_unique<TcpStoreClient>(host_, port_, std::chrono::seconds(2), secret_);
    }
    for (const int rank : ranks_) {
      const std::optional<std::string> value =
          store_->try_get(prefix_ + store_keys::heartbeat(rank));
      records.push_back(value ? decode_heartbeat(*value) : std::nullopt);
    }
  } catch (const Error&) {
    unreachable_ = true;  // the store's host is gone: nobody can tell us about saves
    return stop_grace_;
  }
  const std::chrono::milliseconds grace = grace_for(stop_grace_, max_grace_, records);
  if (grace > stop_grace_ && !logged_) {
    logged_ = true;
    for (size_t i = 0; i < records.size(); ++i) {
      if (!records[i] || records[i]->phase != HeartbeatPhase::kSaving) continue;
      log::warn(
          "launch: rank {} is {} (last save took {:.1f} s); waiting up to {:.0f} s for it "
          "before SIGKILL (--max-stop-grace bounds it)",
          ranks_[i], records[i]->describe(), records[i]->last_save_ms / 1000.0,
          std::chrono::duration<double>(grace).count());
    }
  }
  return grace;
}

}  // namespace shardtrain::launch
