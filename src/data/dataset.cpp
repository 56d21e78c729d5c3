#include "data/dataset.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "data/jsonl_dataset.h"
#include "data/token_file.h"

namespace shardtrain {
namespace {

// A token file cut into non-overlapping seq_len windows; the tail shorter than seq_len is unused.
class TokenWindowDataset : public SequenceDataset {
 public:
  TokenWindowDataset(const std::string& path, int64_t seq_len, PackingMode packing)
      : file_(path), seq_len_(static_cast<size_t>(seq_len)) {
    if (file_.size() < seq_len_) {
      fail(
          "token file {}: has {} tokens, fewer than data.seq_len = {}; use a smaller seq_len or "
          "more data",
          path, file_.size(), seq_len_);
    }
    windows_ = file_.size() / seq_len_;
    const auto used = file_.tokens().first(windows_ * seq_len_);
    max_token_id_ = *std::max_element(used.begin(), used.end());
    if (packing == PackingMode::kConcatenate) return;
    if (!file_.has_documents()) {
      log::info(
          "token file {}: version {} records no document boundaries, so data.packing = {} reads "
          "it as concatenate (a sequence is one causal stream); regenerate it with shardtrain "
          "prepare to mask per document",
          path, file_.version(), packing_mode_name(packing));
      return;
    }
    if (packing == PackingMode::kNone) require_one_document_per_window();
    documents_ = packing == PackingMode::kDocuments;
  }

  size_t size() const override { return windows_; }
  int64_t max_token_id() const override { return max_token_id_; }
  int64_t seq_len() const override { return static_cast<int64_t>(seq_len_); }

  Example get(size_t i) const override {
    SHARDTRAIN_CHECK(i < windows_, "window {} of {}", i, windows_);
    const size_t begin = i * seq_len_;
    const auto tokens = file_.tokens().subspan(begin, seq_len_);
    Example example;
    example.input_ids.reserve(seq_len_);
    example.labels.reserve(seq_len_);
    const auto mask = file_.loss_mask();
    for (size_t t = 0; t < seq_len_; ++t) {
      // Ids above INT32_MAX cannot be valid for any vocab; validate_vocab rejects them first.
      const auto id = static_cast<int32_t>(tokens[t]);
      example.input_ids.push_back(id);
      example.labels.push_back(mask.empty() || mask[begin + t] != 0 ? id : kIgnoreIndex);
    }
    if (documents_) {
      // Starts strictly inside the window; the window's first token begins a document anyway.
      const auto starts = file_.document_starts();
      for (auto it = std::upper_bound(starts.begin(), starts.end(), begin);
           it != starts.end() && *it < begin + seq_len_; ++it) {
        example.document_starts.push_back(static_cast<int32_t>(*it - begin));
      }
    }
    return example;
  }

  std::string describe_example(size_t i) const override {
    return fmt::format("{} tokens [{}, {})", file_.path(), i * seq_len_, (i + 1) * seq_len_);
  }

 private:
  // data.packing = none: no document may begin inside a window.
  void require_one_document_per_window() const {
    const size_t used = windows_ * seq_len_;
    for (const uint64_t start : file_.document_starts()) {
      if (start >= used) break;
      if (start % seq_len_ == 0) continue;
      const size_t window = start / seq_len_;
      fail(
          "token file {}: sequence {} (tokens [{}, {})) holds more than one document (one begins "
          "at token {}) but data.packing = none wants one per sequence; set data.packing = "
          "documents, or prepare the file with --packing none at --seq-len {}",
          file_.path(), window, window * seq_len_, (window + 1) * seq_len_, start, seq_len_);
    }
  }

  TokenFile file_;
  size_t seq_len_;
  size_t windows_ = 0;
  int64_t max_token_id_ = 0;
  bool documents_ = false;  // examples carry the file's document starts
};

bool has_extension(const std::string& path, std::initializer_list<const char*> extensions) {
  const std::string extension = std::filesystem::path(path).extension().string();
  return std::any_of(extensions.begin(), extensions.end(),
                     [&](const char* candidate) { return extension == candidate; });
}

}  // namespace

DataFormat resolve_data_format(const std::string& path, DataFormat format) {
  if (format == DataFormat::kTokens || format == DataFormat::kJsonl) return format;
  SHARDTRAIN_CHECK(format == DataFormat::kAuto, "data {}: raw examples open as a prepared token file",
                   path);
  if (has_extension(path, {".bin", ".tokens"})) return DataFormat::kTokens;
  if (has_extension(path, {".jsonl", ".json"})) return DataFormat::kJsonl;
  fail(
      "data {}: cannot tell the format from the extension (.bin/.tokens = token file, "
      ".jsonl/.json = JSONL); set data.format to \"tokens\" or \"jsonl\"",
      path);
}

std::unique_ptr<SequenceDataset> open_dataset(const std::string& path, DataFormat format,
                                              int64_t seq_len, int64_t pad_id,
                                              PackingMode packing) {
  if (seq_len < 2) fail("data {}: data.seq_len must be >= 2, got {}", path, seq_len);
  if (pad_id < 0) fail("data {}: data.pad_id must be >= 0, got {}", path, pad_id);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    fail("data {}: no such file; check data.path", path);
  }
  if (resolve_data_format(path, format) == DataFormat::kTokens) {
    return std::make_unique<TokenWindowDataset>(path, seq_len, packing);
  }
  return std::make_unique<JsonlDataset>(path, seq_len, pad_id);
}

void validate_vocab(const SequenceDataset& dataset, int64_t vocab_size, const std::string& path) {
  SHARDTRAIN_CHECK(vocab_size > 0, "vocab_size {}", vocab_size);
  if (dataset.max_token_id() < vocab_size) return;
  if (const auto pad = dataset.padding_id(); pad && *pad >= vocab_size) {
    fail(
        "data {}: data.pad_id = {} is >= the model's vocab_size {}; set data.pad_id to a token "
        "id below {} (e.g. the eos id)",
        path, *pad, vocab_size, vocab_size);
  }
  for (size_t i = 0; i < dataset.size(); ++i) {
    const Example example = dataset.get(i);
    for (size_t t = 0; t < example.input_ids.size(); ++t) {
      // A token file stores uint32; ids >= 2^31 wrap negative in the int32 example.
      const int64_t id = static_cast<uint32_t>(example.input_ids[t]);
      const int64_t label = example.labels[t];
      const int64_t bad = id >= vocab_size ? id : label >= vocab_size ? label : -1;
      if (bad < 0) continue;
      fail(
          "data {}: token id {} (position {}) is >= the model's vocab_size {}; the data was "
          "tokenized for another model",
          dataset.describe_example(i), bad, t, vocab_size);
    }
  }
  SHARDTRAIN_CHECK(false, "max_token_id {} >= vocab {} but no example holds it",
                   dataset.max_token_id(), vocab_size);
}

}  // namespace shardtrain
