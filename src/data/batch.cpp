#include "data/batch.h"

#include <algorithm>

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
  bool any_documents = false;
  for (const Example& example : examples) any_documents |= !example.document_starts.empty();
  if (any_documents) batch.document_start_BT.reserve(examples.size() * T);
  for (const Example& example : examples) {
    SHARDTRAIN_CHECK(example.input_ids.size() == T && example.labels.size() == T,
                     "example lengths ({}, {}) differ from seq_len {}", example.input_ids.size(),
                     example.labels.size(), T);
    batch.input_ids.insert(batch.input_ids.end(), example.input_ids.begin(),
                           example.input_ids.end());
    const std::vector<int32_t>& starts = example.document_starts;
    batch.max_documents = std::max<int64_t>(batch.max_documents, 1 + starts.size());
    size_t next_start = 0;  // index into starts of the next document to begin
    int32_t document_start = 0;
    for (size_t t = 0; t < T; ++t) {
      if (next_start < starts.size() && static_cast<size_t>(starts[next_start]) == t) {
        document_start = starts[next_start++];
      }
      const bool next_begins_document =
          next_start < starts.size() && static_cast<size_t>(starts[next_start]) == t + 1;
      const int32_t target =
          t + 1 < T && !next_begins_document ? example.labels[t + 1] : kIgnoreIndex;
      batch.targets.push_back(target);
      if (target != kIgnoreIndex) ++batch.target_count;
      batch.positions.push_back(static_cast<int32_t>(t) - document_start);
      if (any_documents) batch.document_start_BT.push_back(document_start);
    }
    SHARDTRAIN_CHECK(next_start == starts.size(),
                     "document starts must increase inside (0, {}); {} of {} were used", T,
                     next_start, starts.size());
  }
  return batch;
}

}  // namespace shardtrain
