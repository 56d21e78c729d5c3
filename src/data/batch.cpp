#include "data/batch.h"

#include "core/error.h"

namespace shardtrain {

Batch make_batch(const std::vector<Example>& examples) {
  SHARDTRAIN_CHECK(!examples.empty(), "make_batch needs at least one example");
  Batch batch;
  batch.batch_size = static_cast<int64_t>(examples.size());
  batch.seq_len = static_cast<int64_t>(examples.front().input_ids.size());
  const size_t T = static_cast<size_t>(batch.seq_len);
  SHARDTRAIN_CHECK(T >= 1, "empty example");
  batch.input_ids.reserve(examples.size() * T);
  batch.targets.reserve(examples.size() * T);
  batch.positions.reserve(examples.size() * T);
  for (const Example& example : examples) {
    SHARDTRAIN_CHECK(example.input_ids.size() == T && example.labels.size() == T,
                     "example lengths ({}, {}) differ from seq_len {}", example.input_ids.size(),
                     example.labels.size(), T);
    batch.input_ids.insert(batch.input_ids.end(), example.input_ids.begin(),
                           example.input_ids.end());
    for (size_t t = 0; t < T; ++t) {
      const int32_t target = t + 1 < T ? example.labels[t + 1] : kIgnoreIndex;
      batch.targets.push_back(target);
      if (target != kIgnoreIndex) ++batch.target_count;
      batch.positions.push_back(static_cast<int32_t>(t));
    }
  }
  return batch;
}

}  // namespace shardtrain
