#include "dist/join_roll.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace shardtrain {

JoinRoll::JoinRoll(Store& store, std::string prefix, int size)
    : store_(store), prefix_(std::move(prefix)), size_(size) {}

std::string JoinRoll::key(int rank) const { return prefix_ + "/joined/" + std::to_string(rank); }

void JoinRoll::mark(int rank) { store_.set(key(rank), "1"); }

std::vector<int> JoinRoll::missing() const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (!store_.try_get(key(r))) ranks.push_back(r);
  }
  return ranks;
}

std::string JoinRoll::describe_missing() const {
  const std::vector<int> ranks = missing();
  if (ranks.empty()) return "";
  return fmt::format("{} {} did not join", ranks.size() == 1 ? "rank" : "ranks",
                     fmt::join(ranks, ", "));
}

}  // namespace shardtrain
