#include "data/sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "core/error.h"

namespace shardtrain {
namespace {

// Uniform in [0, bound), unbiased: rejects draws from the incomplete last block of 2^64.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    const uint64_t draw = engine();
    if (draw >= threshold) return draw % bound;
  }
}

}  // namespace

std::vector<size_t> shuffled_indices(size_t size, uint64_t seed) {
  std::vector<size_t> indices(size);
  std::iota(indices.begin(), indices.end(), size_t{0});
  std::mt19937_64 engine(seed);
  for (size_t i = size; i > 1; --i) {
    const size_t j = static_cast<size_t>(uniform_below(engine, i));
    std::swap(indices[i - 1], indices[j]);
  }
  return indices;
}

ShuffleSampler::ShuffleSampler(size_t dataset_size, uint64_t seed, size_t rank, size_t world)
    : dataset_size_(dataset_size),
      seed_(seed),
      rank_(rank),
      world_(world),
      epoch_length_(world == 0 ? 0 : dataset_size / world) {
  SHARDTRAIN_CHECK(world >= 1 && rank < world, "rank {} world {}", rank, world);
  if (epoch_length_ == 0) {
    fail(
        "data: the dataset has {} sequences, fewer than the {} ranks; every rank needs at least "
        "one (use more data or a smaller data.seq_len)",
        dataset_size, world);
  }
  build_permutation();
}

void ShuffleSampler::build_permutation() {
  permutation_ = shuffled_indices(dataset_size_, seed_ + epoch_);
}

size_t ShuffleSampler::next() {
  if (index_ == epoch_length_) {
    ++epoch_;
    index_ = 0;
    build_permutation();
  }
  return permutation_[index_++ * world_ + rank_];
}

void ShuffleSampler::seek(uint64_t epoch, size_t index) {
  if (index > epoch_length_) {
    fail(
        "data: cannot resume the sampler at index {} of epoch {}: an epoch has only {} indices "
        "on this rank (was the checkpoint written with other data or another world size?)",
        index, epoch, epoch_length_);
  }
  const bool rebuild = epoch != epoch_;
  epoch_ = epoch;
  index_ = index;
  if (rebuild) build_permutation();
}

SamplerState ShuffleSampler::state() const {
  return {epoch_, index_, seed_, dataset_size_, world_};
}

void ShuffleSampler::restore(const SamplerState& state) {
  const auto mismatch = [](const char* field, uint64_t saved, uint64_t now) {
    fail(
        "data: cannot resume the sampler: the saved state has {} {} but this run has {}; resume "
        "with the same data, seed and world size",
        field, saved, now);
  };
  if (state.seed != seed_) mismatch("seed", state.seed, seed_);
  if (state.dataset_size != dataset_size_) {
    mismatch("dataset size", state.dataset_size, dataset_size_);
  }
  if (state.world != world_) mismatch("world size", state.world, world_);
  seek(state.epoch, static_cast<size_t>(state.index));
}

}  // namespace shardtrain
