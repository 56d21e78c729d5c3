// SequenceDataset: fixed-length training sequences, whatever file they come from.
//
// Every Example holds exactly seq_len input_ids and seq_len labels; labels[t] is the token id to
// predict at t (make_batch shifts it to the previous position) or kIgnoreIndex (-100) for tokens
// that carry no loss (padding, masked prompt tokens).
//
// Sources (open_dataset picks one by `format`; "auto" goes by extension: .bin/.tokens -> tokens,
// .jsonl/.json -> jsonl):
//   - token file (data/token_file.h): the token stream is cut into non-overlapping windows of
//     seq_len tokens; the remainder is dropped; fewer than seq_len tokens is an error. labels =
//     the token where the loss mask is 1 (or the file has no mask), else -100. `packing`
//     (data/packing_mode.h) reads the file's document table: documents = each window's
//     documents become the example's document_starts (a window's first token always begins
//     one); none = a window holding more than one document is an Error naming the file and
//     the window; concatenate = the table is ignored. A file without a table (versions 1 and 2)
//     is read as concatenate, with a one-line notice when documents or none was asked for.
//   - JSONL (data/jsonl_dataset.h): one sequence per line; shorter ones are padded with pad_id
//     (labels -100), longer ones truncated to seq_len and counted in truncated_count(). Each
//     line is one document whatever `packing` says.
// Every open error throws shardtrain::Error naming the file (and line for JSONL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/data_format.h"
#include "data/packing_mode.h"

namespace shardtrain {

constexpr int32_t kIgnoreIndex = -100;  // Hugging Face's ignore_index for labels

struct Example {
  std::vector<int32_t> input_ids;  // (seq_len)
  std::vector<int32_t> labels;     // (seq_len); kIgnoreIndex = no loss
  // Where the 2nd, 3rd, ... document of the sequence begins (data.packing = documents):
  // increasing positions in (0, seq_len). Empty = the sequence is one document.
  std::vector<int32_t> document_starts;
};

class SequenceDataset {
 public:
  virtual ~SequenceDataset() = default;
  virtual size_t size() const = 0;
  // REQUIRES: i < size().
  virtual Example get(size_t i) const = 0;
  // The largest id among all input_ids and labels (pad_id included when padding occurs).
  virtual int64_t max_token_id() const = 0;
  virtual int64_t seq_len() const = 0;
  // Sequences cut to seq_len (always 0 for token files).
  virtual size_t truncated_count() const { return 0; }
  // pad_id when some sequence was padded (so it appears in input_ids), else nullopt.
  virtual std::optional<int64_t> padding_id() const { return std::nullopt; }
  // Where example i came from, for error messages: "data.jsonl:3" or "data.bin tokens [a, b)".
  virtual std::string describe_example(size_t i) const = 0;
};

// kTokens or kJsonl for `format` (kAuto: by the extension); throws Error naming `path` when
// auto cannot tell from the extension, and for kExamples (raw examples are prepared into a token
// file first: train/training_data.h).
DataFormat resolve_data_format(const std::string& path, DataFormat format);

// Opens `path` as a dataset of seq_len-token examples. REQUIRES: seq_len >= 2, pad_id >= 0.
std::unique_ptr<SequenceDataset> open_dataset(const std::string& path, DataFormat format,
                                              int64_t seq_len, int64_t pad_id,
                                              PackingMode packing = PackingMode::kConcatenate);

// Throws Error naming the file (and line for JSONL), the offending id and vocab_size if any
// input id or label is >= vocab_size (pad_id included, reported as the data.pad_id key).
void validate_vocab(const SequenceDataset& dataset, int64_t vocab_size, const std::string& path);

}  // namespace shardtrain
