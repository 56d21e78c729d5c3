// ShuffleSampler: the order in which a rank visits dataset examples, epoch after epoch.
//
// Epoch e uses a permutation of [0, dataset_size) computed from seed + e with std::mt19937_64
// and a hand-written Fisher-Yates shuffle (unbiased rejection sampling, no std::shuffle or
// std::uniform_int_distribution), so the order is identical across standard libraries and
// machines. With (rank, world), rank r takes positions r, r + world, r + 2*world, ... of each
// epoch's global permutation: ranks see disjoint slices, and together they cover the epoch.
// Every rank takes the same number of indices per epoch, dataset_size / world (the remainder
// of the permutation is skipped that epoch), so ranks stay in lockstep.
//
// Position: (epoch, index) = the epoch of the next index and how many indices of that epoch
// this rank has already taken. Saving position() and later seek()ing to it resumes exactly:
// the following next() calls return what they would have returned without the restart.
// Throws shardtrain::Error if the dataset has fewer examples than world (some rank would get none)
// or seek() is given an index past the end of an epoch.
//
// SamplerState is the part of training state that belongs to the sampler: the position plus
// what the position means (seed, dataset size, world). state() takes it; restore() seeks to it
// after checking that the sampler was built the same way (else throws Error saying which field
// differs, since the same position would then name other examples).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardtrain {

struct SamplerState {
  uint64_t epoch = 0;
  uint64_t index = 0;
  uint64_t seed = 0;
  uint64_t dataset_size = 0;
  uint64_t world = 1;

  bool operator==(const SamplerState&) const = default;
};

class ShuffleSampler {
 public:
  ShuffleSampler(size_t dataset_size, uint64_t seed) : ShuffleSampler(dataset_size, seed, 0, 1) {}
  // REQUIRES: world >= 1, rank < world.
  ShuffleSampler(size_t dataset_size, uint64_t seed, size_t rank, size_t world);

  // The next dataset index for this rank; moves to the next epoch after the last one.
  size_t next();

  uint64_t epoch() const { return epoch_; }
  size_t index() const { return index_; }
  // Indices this rank takes per epoch.
  size_t epoch_length() const { return epoch_length_; }
  void seek(uint64_t epoch, size_t index);

  SamplerState state() const;
  void restore(const SamplerState& state);

 private:
  void build_permutation();

  size_t dataset_size_;
  uint64_t seed_;
  size_t rank_;
  size_t world_;
  size_t epoch_length_;
  uint64_t epoch_ = 0;
  size_t index_ = 0;
  std::vector<size_t> permutation_;  // global permutation of epoch_
};

// The global permutation of [0, size) for one (seed + epoch); exposed for tests and tools.
std::vector<size_t> shuffled_indices(size_t size, uint64_t seed);

}  // namespace shardtrain
