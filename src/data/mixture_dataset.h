// MixtureDataset: several SequenceDatasets (the sources of data.path, data/data_sources.h) as
// one, each contributing its share.
//
// Without weights every sequence of every source appears once, sources in order. With weights
// w_i, the mixture keeps the natural total N = sum n_i and gives source i
// c_i = round(N x w_i / sum w) sequences (at least 1 when w_i > 0): all of its n_i sequences
// floor(c_i / n_i) times, plus c_i mod n_i of them chosen by a seeded shuffle (seed, i), so the
// mix is the same for a given seed on every rank and every run. The order within the mixture
// does not matter for training (the sampler shuffles it).
// REQUIRES: parts non-empty, each non-empty and of the same seq_len; weights empty or one per
// part (checked by parse_source_weights).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace shardtrain {

class MixtureDataset : public SequenceDataset {
 public:
  MixtureDataset(std::vector<std::unique_ptr<SequenceDataset>> parts, std::vector<double> weights,
                 uint64_t seed);

  size_t size() const override { return index_.size(); }
  Example get(size_t i) const override;
  int64_t max_token_id() const override;
  int64_t seq_len() const override { return parts_.front()->seq_len(); }
  size_t truncated_count() const override;
  std::optional<int64_t> padding_id() const override;
  std::string describe_example(size_t i) const override;

  // Sequences of part p in the mixture (c_p above).
  size_t count_of(size_t part) const { return counts_[part]; }

 private:
  std::vector<std::unique_ptr<SequenceDataset>> parts_;
  std::vector<std::pair<uint32_t, size_t>> index_;  // (part, sequence in the part)
  std::vector<size_t> counts_;
};

}  // namespace shardtrain
