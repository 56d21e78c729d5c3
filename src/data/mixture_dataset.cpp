#include "data/mixture_dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace shardtrain {
namespace {

// Sequences each part contributes (the header's c_i).
std::vector<size_t> part_counts(const std::vector<size_t>& sizes,
                                const std::vector<double>& weights) {
  if (weights.empty()) return sizes;
  const double total = static_cast<double>(std::accumulate(sizes.begin(), sizes.end(), size_t{0}));
  const double weight_sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<size_t> counts;
  for (size_t p = 0; p < sizes.size(); ++p) {
    if (weights[p] == 0) {
      counts.push_back(0);
      continue;
    }
    const double share = std::llround(total * weights[p] / weight_sum);
    counts.push_back(std::max<size_t>(1, static_cast<size_t>(share)));
  }
  return counts;
}

}  // namespace

MixtureDataset::MixtureDataset(std::vector<std::unique_ptr<SequenceDataset>> parts,
                               std::vector<double> weights, uint64_t seed)
    : parts_(std::move(parts)) {
  SHARDTRAIN_CHECK(!parts_.empty(), "a mixture needs a part");
  SHARDTRAIN_CHECK(weights.empty() || weights.size() == parts_.size(), "{} weights for {} parts",
                   weights.size(), parts_.size());
  std::vector<size_t> sizes;
  for (const auto& part : parts_) {
    SHARDTRAIN_CHECK(part->size() > 0 && part->seq_len() == parts_.front()->seq_len(),
                     "mixture part of {} sequences of {}", part->size(), part->seq_len());
    sizes.push_back(part->size());
  }
  counts_ = part_counts(sizes, weights);
  for (size_t p = 0; p < parts_.size(); ++p) {
    const size_t n = sizes[p], count = counts_[p];
    for (size_t pass = 0; pass < count / n; ++pass) {
      for (size_t i = 0; i < n; ++i) index_.emplace_back(static_cast<uint32_t>(p), i);
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::mt19937_64 rng(seed * 1000003u + p);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<size_t> rest(order.begin(), order.begin() + static_cast<ptrdiff_t>(count % n));
    std::sort(rest.begin(), rest.end());
    for (size_t i : rest) index_.emplace_back(static_cast<uint32_t>(p), i);
  }
}

Example MixtureDataset::get(size_t i) const {
  SHARDTRAIN_CHECK(i < index_.size(), "sequence {} of {}", i, index_.size());
  return parts_[index_[i].first]->get(index_[i].second);
}

int64_t MixtureDataset::max_token_id() const {
  int64_t largest = 0;
  for (size_t p = 0; p < parts_.size(); ++p) {
    if (counts_[p] > 0) largest = std::max(largest, parts_[p]->max_token_id());
  }
  return largest;
}

size_t MixtureDataset::truncated_count() const {
  size_t total = 0;
  for (const auto& part : parts_) total += part->truncated_count();
  return total;
}

std::optional<int64_t> MixtureDataset::padding_id() const {
  for (const auto& part : parts_) {
    if (part->padding_id()) return part->padding_id();
  }
  return std::nullopt;
}

std::string MixtureDataset::describe_example(size_t i) const {
  return parts_[index_[i].first]->describe_example(index_[i].second);
}

}  // namespace shardtrain
