// JsonlDataset: training sequences from a JSONL file, one sequence per line:
//   {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}
// input_ids: non-empty array of integer token ids >= 0. labels (optional): same length, each a
// token id >= 0 or -100 (no loss); absent means labels = input_ids. Other fields are ignored, as
// are blank lines.
//
// Each sequence becomes one seq_len example: shorter ones are padded at the end with pad_id
// (labels -100 there), longer ones truncated to seq_len and counted in truncated_count().
// Loading parses and validates the whole file; every problem throws shardtrain::Error naming
// "file:line" (not JSON, not an object, missing or empty input_ids, non-integer or negative ids,
// labels of another length or with invalid values); an empty file or one with no sequences
// throws naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace shardtrain {

class JsonlDataset : public SequenceDataset {
 public:
  // REQUIRES: seq_len >= 1, pad_id >= 0.
  JsonlDataset(const std::string& path, int64_t seq_len, int64_t pad_id);

  size_t size() const override { return line_numbers_.size(); }
  Example get(size_t i) const override;
  int64_t max_token_id() const override { return max_token_id_; }
  int64_t seq_len() const override { return seq_len_; }
  size_t truncated_count() const override { return truncated_count_; }
  std::optional<int64_t> padding_id() const override;
  std::string describe_example(size_t i) const override;

 private:
  void parse_line(const std::string& line, size_t line_number);

  std::string path_;
  int64_t seq_len_;
  int64_t pad_id_;
  // Sequence i is [offsets_[i], offsets_[i + 1]) of ids_ and labels_, already cut to seq_len.
  std::vector<int32_t> ids_;
  std::vector<int32_t> labels_;
  std::vector<size_t> offsets_{0};
  std::vector<size_t> line_numbers_;  // 1-based line of sequence i
  size_t truncated_count_ = 0;
  size_t padded_count_ = 0;
  int64_t max_token_id_ = -1;
};

}  // namespace shardtrain
