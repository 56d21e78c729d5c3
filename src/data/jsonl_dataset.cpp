#include "data/jsonl_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_message.h"
#include "data/jsonl_lines.h"
#include "io/read_file.h"

namespace shardtrain {
namespace {

// Reads element `index` of `array` (named `field`) as a token id; -100 is allowed for labels.
int32_t read_id(const nlohmann::json& element, const char* field, size_t index, bool allow_ignore,
                const std::string& where) {
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  if (!element.is_number_integer()) {
    fail("{}: {}[{}] is {}; token ids must be integers", where, field, index,
         element.dump().substr(0, 40));
  }
  if (element.is_number_unsigned() ? element.get<uint64_t>() > static_cast<uint64_t>(kMaxId)
                                   : element.get<int64_t>() > kMaxId) {
    fail("{}: {}[{}] is {}, larger than any supported token id ({})", where, field, index,
         element.dump(), kMaxId);
  }
  const int64_t value = element.get<int64_t>();
  if (value < 0 && !(allow_ignore && value == kIgnoreIndex)) {
    fail("{}: {}[{}] is {}; {} must be >= 0{}", where, field, index, value,
         allow_ignore ? "labels" : "token ids", allow_ignore ? " or -100 (ignored)" : "");
  }
  return static_cast<int32_t>(value);
}

}  // namespace

JsonlDataset::JsonlDataset(const std::string& path, int64_t seq_len, int64_t pad_id)
    : path_(path), seq_len_(seq_len), pad_id_(pad_id) {
  SHARDTRAIN_CHECK(seq_len >= 1 && pad_id >= 0, "seq_len {} pad_id {}", seq_len, pad_id);
  // A FIFO would hold the open, /dev/zero the read, forever.
  refuse_special_file(path, "jsonl " + path, "check data.path");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("jsonl {}: cannot open ({}); check data.path", path, std::strerror(errno));
  std::string line;
  size_t line_number = 0;
  while (read_jsonl_line(in, line, path, line_number + 1)) {
    ++line_number;
    if (!is_blank_line(line)) parse_line(line, line_number);
  }
  if (in.bad()) fail("jsonl {}: read failed ({})", path, std::strerror(errno));
  if (line_number == 0)
    fail("jsonl {}: the file is empty; it needs one JSON sequence per line", path);
  if (size() == 0) {
    fail("jsonl {}: contains no sequences (only blank lines); it needs one JSON sequence per line",
         path);
  }
}

void JsonlDataset::parse_line(const std::string& line, size_t line_number) {
  const std::string where = fmt::format("{}:{}", path_, line_number);
  nlohmann::json record;
  check_json_nesting(line, where);
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: not valid JSON ({})", where, json_message(error));
  }
  if (!record.is_object()) {
    fail("{}: expected a JSON object like {{\"input_ids\": [...]}}, got {}", where,
         record.type_name());
  }
  const auto ids_field = record.find("input_ids");
  if (ids_field == record.end()) {
    fail("{}: missing \"input_ids\"; each line needs {{\"input_ids\": [...]}}", where);
  }
  if (!ids_field->is_array()) {
    fail("{}: \"input_ids\" must be an array of token ids, got {}", where, ids_field->type_name());
  }
  if (ids_field->empty()) fail("{}: \"input_ids\" is empty; every sequence needs tokens", where);
  const nlohmann::json* labels_field = nullptr;
  if (const auto found = record.find("labels"); found != record.end()) {
    if (!found->is_array()) {
      fail("{}: \"labels\" must be an array of token ids or -100, got {}", where,
           found->type_name());
    }
    if (found->size() != ids_field->size()) {
      fail("{}: \"labels\" has {} entries but \"input_ids\" has {}; they must be the same length",
           where, found->size(), ids_field->size());
    }
    labels_field = &*found;
  }

  const size_t length = ids_field->size();
  const size_t kept = std::min(length, static_cast<size_t>(seq_len_));
  for (size_t i = 0; i < length; ++i) {
    // Every element is validated, even the truncated tail: a broken line is an error either way.
    const int32_t id = read_id((*ids_field)[i], "input_ids", i, /*allow_ignore=*/false, where);
    const int32_t label =
        labels_field == nullptr ? id : read_id((*labels_field)[i], "labels", i, true, where);
    if (i >= kept) continue;
    ids_.push_back(id);
    labels_.push_back(label);
    max_token_id_ = std::max<int64_t>({max_token_id_, id, label});
  }
  if (length > kept) ++truncated_count_;
  if (length < static_cast<size_t>(seq_len_)) {
    ++padded_count_;
    max_token_id_ = std::max(max_token_id_, pad_id_);
  }
  offsets_.push_back(ids_.size());
  line_numbers_.push_back(line_number);
}

Example JsonlDataset::get(size_t i) const {
  SHARDTRAIN_CHECK(i < size(), "example {} of {}", i, size());
  const auto begin = static_cast<std::ptrdiff_t>(offsets_[i]);
  const auto end = static_cast<std::ptrdiff_t>(offsets_[i + 1]);
  Example example;
  example.input_ids.assign(ids_.begin() + begin, ids_.begin() + end);
  example.labels.assign(labels_.begin() + begin, labels_.begin() + end);
  example.input_ids.resize(static_cast<size_t>(seq_len_), static_cast<int32_t>(pad_id_));
  example.labels.resize(static_cast<size_t>(seq_len_), kIgnoreIndex);
  return example;
}

std::optional<int64_t> JsonlDataset::padding_id() const {
  if (padded_count_ == 0) return std::nullopt;
  return pad_id_;
}

std::string JsonlDataset::describe_example(size_t i) const {
  return fmt::format("{}:{}", path_, line_numbers_.at(i));
}

}  // namespace shardtrain
