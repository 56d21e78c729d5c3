#include "train/training_data.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/log.h"
#include "data/data_sources.h"
#include "data/jsonl_lines.h"
#include "data/mixture_dataset.h"
#include "data/prepare_cache.h"
#include "io/read_file.h"

namespace shardtrain {
namespace {

// True when the first non-blank line of a JSONL file holds pre-tokenized `input_ids`.
bool first_line_has_input_ids(const std::string& path) {
  if (is_special_file(path)) return true;  // not read here: the JSONL reader names it
  std::ifstream in(path);
  size_t line_number = 1;
  for (std::string line; read_jsonl_line(in, line, path, line_number); ++line_number) {
    if (is_blank_line(line)) continue;
    if (json_nesting_problem(line)) return false;  // the chat/text reader reports it
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

DataFormat resolve_training_data_format(const DataConfig& data) {
  if (data.format == DataFormat::kExamples) return DataFormat::kExamples;
  const DataFormat format = resolve_data_format(data.path, data.format);
  if (format == DataFormat::kJsonl && data.format == DataFormat::kAuto &&
      std::filesystem::exists(data.path) && !first_line_has_input_ids(data.path)) {
    return DataFormat::kExamples;
  }
  return format;
}

namespace {

std::unique_ptr<SequenceDataset> open_one_file(const DataConfig& data,
                                               const std::string& model_path, uint64_t seed) {
  const DataFormat format = resolve_training_data_format(data);
  // REQUIRES: resolved (with_packing_resolved).
  const PackingMode packing = data.packing.value_or(PackingMode::kDocuments);
  if (format != DataFormat::kExamples) {
    return open_dataset(data.path, format, data.seq_len, data.pad_id, packing);
  }

  PrepareOptions options;
  options.tokenizer_path = data.tokenizer.empty() ? model_path : data.tokenizer;
  options.data_path = data.path;
  options.seq_len = data.seq_len;
  options.format = data.example_format;
  options.chat_template = data.chat_template;
  options.overlong = data.overlong;
  options.packing = packing;
  options.on_bad_line = data.on_bad_line;
  options.invalid_utf8 = data.invalid_utf8;
  options.train_on_prompt = data.train_on_prompt;
  options.train_on_eos = data.train_on_eos;
  options.seed = seed;
  const std::string cache_dir = data.cache_dir.empty() ? default_cache_dir() : data.cache_dir;
  const std::string token_file = prepare_cached(options, cache_dir);
  log::info("data {}: prepared examples cached as {}", data.path, token_file);
  return open_dataset(token_file, DataFormat::kTokens, data.seq_len, data.pad_id, packing);
}

}  // namespace

DataConfig with_packing_resolved(const DataConfig& data) {
  if (data.packing) return data;
  DataConfig resolved = data;
  resolved.packing = PackingMode::kDocuments;  // every backend's attention masks documents apart
  return resolved;
}

std::unique_ptr<SequenceDataset> open_training_data(const DataConfig& configured,
                                                    const std::string& model_path, uint64_t seed) {
  const DataConfig data = with_packing_resolved(configured);
  if (!names_several_files(data.path)) {
    if (!data.weights.empty()) parse_source_weights(data.weights, 1);  // still checked
    return open_one_file(data, model_path, seed);
  }
  const std::vector<DataSource> sources = expand_data_sources(data.path, "data.path");
  const std::vector<double> weights = parse_source_weights(data.weights, sources.size());
  std::vector<std::unique_ptr<SequenceDataset>> mixed;
  for (const DataSource& source : sources) {
    std::vector<std::unique_ptr<SequenceDataset>> files;
    for (const std::string& file : source.files) {
      DataConfig one = data;
      one.path = file;
      files.push_back(open_one_file(one, model_path, seed));
    }
    mixed.push_back(files.size() == 1 ? std::move(files.front())
                                      : std::make_unique<MixtureDataset>(
                                            std::move(files), std::vector<double>{}, seed));
  }
  auto mixture = std::make_unique<MixtureDataset>(std::move(mixed), weights, seed);
  for (size_t i = 0; i < sources.size(); ++i) {
    log::info("data source {} ({} files): {} sequences in the mix", sources[i].spec,
              sources[i].files.size(), mixture->count_of(i));
  }
  return mixture;
}

}  // namespace shardtrain
