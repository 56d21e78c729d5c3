#include "train/training_data.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "data/jsonl_lines.h"
#include "data/prepare_cache.h"

namespace shardtrain {
namespace {

// True when the first non-blank line of a JSONL file holds pre-tokenized `input_ids`.
bool first_line_has_input_ids(const std::string& path) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (is_blank_line(line)) continue;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    return record.is_object() && record.contains("input_ids");
  }
  return true;  // empty file: let the JSONL reader report it
}

std::string default_cache_dir() {
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/shardtrain/data";
}

}  // namespace

std::string resolve_training_data_format(const DataConfig& data) {
  if (data.format == "examples") return "examples";
  const std::string format = resolve_data_format(data.path, data.format);
  if (format == "jsonl" && data.format == "auto" && std::filesystem::exists(data.path) &&
      !first_line_has_input_ids(data.path)) {
    return "examples";
  }
  return format;
}

std::unique_ptr<SequenceDataset> open_training_data(const DataConfig& data,
                                                    const std::string& model_path, uint64_t seed) {
  const std::string format = resolve_training_data_format(data);
  if (format != "examples") return open_dataset(data.path, format, data.seq_len, data.pad_id);

  PrepareOptions options;
  options.tokenizer_path = data.tokenizer.empty() ? model_path : data.tokenizer;
  options.data_path = data.path;
  options.seq_len = data.seq_len;
  options.format = data.example_format;
  options.chat_template = data.chat_template;
  options.overlong = data.overlong;
  options.on_bad_line = data.on_bad_line;
  options.invalid_utf8 = data.invalid_utf8;
  options.train_on_prompt = data.train_on_prompt;
  options.train_on_eos = data.train_on_eos;
  options.seed = seed;
  const std::string cache_dir = data.cache_dir.empty() ? default_cache_dir() : data.cache_dir;
  const std::string token_file = prepare_cached(options, cache_dir);
  log::info("data {}: prepared examples cached as {}", data.path, token_file);
  return open_dataset(token_file, "tokens", data.seq_len, data.pad_id);
}

}  // namespace shardtrain
