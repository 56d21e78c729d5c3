#include "launch/node_metrics.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/read_file.h"

namespace shardtrain::launch {
namespace {

std::string make_private_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path base =
      fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path(ec);
  std::string pattern = (base / "shardtrain-metrics-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    fail("cannot create the metrics directory {}: {}; HINT: check that {} is writable", pattern,
         std::strerror(errno), base.string());
  }
  return pattern;
}

// The counters of a snapshot in a fixed order: steps, tokens, histogram buckets, its sum.
std::vector<double> counters_of(const RankSnapshot& s) {
  std::vector<double> values = {s.steps_total, s.tokens_total};
  for (uint64_t c : s.step_seconds_histogram.counts) values.push_back(static_cast<double>(c));
  values.push_back(s.step_seconds_histogram.sum);
  return values;
}

void set_counters(RankSnapshot& s, const std::vector<double>& values) {
  s.steps_total = values[0];
  s.tokens_total = values[1];
  auto& counts = s.step_seconds_histogram.counts;
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<uint64_t>(values[2 + i]);
  s.step_seconds_histogram.sum = values[2 + counts.size()];
}

}  // namespace

NodeMetrics::NodeMetrics(const MetricsOptions& options, NodeIdentity identity)
    : dir_(make_private_dir()) {
  try {
    endpoint_ = std::make_unique<NodeMetricsEndpoint>(
        options, std::move(identity), [this] { return read_ranks(); }, "--metrics-port");
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(dir_, ec);
    throw;
  }
}

NodeMetrics::~NodeMetrics() {
  endpoint_.reset();
  namespace fs = std::filesystem;
  std::error_code ec;
  // Only what the workers wrote here: local-N.json and their atomic-write temp files.
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().filename().string().rfind("local-", 0) == 0) fs::remove(entry.path(), ec);
  }
  fs::remove(dir_, ec);
}

void NodeMetrics::start_generation(int node_rank, int64_t restarts, int64_t generation,
                                   int local_ranks) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    local_ranks_ = local_ranks;
  }
  endpoint_->set_group_state(GroupState{restarts, generation}, std::to_string(node_rank));
}

std::vector<RankSnapshot> NodeMetrics::read_ranks() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<RankSnapshot> ranks;
  for (int local = 0; local < local_ranks_; ++local) {
    const std::string path = fmt::format("{}/local-{}.json", dir_, local);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;  // that rank has not finished a step yet
    try {
      RankSnapshot s = snapshot_from_json(nlohmann::json::parse(read_file(path)), path);
      set_counters(s, continuity_.continued(std::to_string(local), s.instance, counters_of(s)));
      ranks.push_back(std::move(s));
    } catch (const std::exception& e) {
      log::warn("metrics: skipping {} ({})", path, e.what());
    }
  }
  return ranks;
}

}  // namespace shardtrain::launch
