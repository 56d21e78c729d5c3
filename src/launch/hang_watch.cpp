#include "launch/hang_watch.h"

#include "core/log.h"
#include "dist/tcp_store.h"

namespace shardtrain::launch {

HangWatch::HangWatch() = default;

HangWatch::HangWatch(const HeartbeatSource& source, std::chrono::milliseconds connect_timeout,
                     std::chrono::milliseconds timeout, std::chrono::milliseconds poll)
    : client_(std::make_unique<TcpStoreClient>(source.host, source.port, connect_timeout,
                                               source.secret)),
      heartbeats_(std::make_unique<Watchdog>(*client_, source.key_prefix, source.world_size,
                                             timeout, poll)) {}

HangWatch::HangWatch(std::chrono::milliseconds timeout,
                     std::vector<ProcessWatchdog::Worker> workers)
    : processes_(std::make_unique<ProcessWatchdog>(timeout)), workers_(std::move(workers)) {}

HangWatch::~HangWatch() { stop(); }

std::optional<std::string> HangWatch::check() {
  if (heartbeats_) return heartbeats_->report();  // the watchdog's thread logged it
  if (processes_) {
    std::optional<std::string> hang = processes_->check(workers_);
    if (hang) log::warn("launch: watchdog: {}", *hang);
    return hang;
  }
  return std::nullopt;
}

void HangWatch::stop() {
  // The order matters (see the header): the thread first, then what it reads.
  heartbeats_.reset();
  client_.reset();
  processes_.reset();
  workers_.clear();
}

}  // namespace shardtrain::launch
