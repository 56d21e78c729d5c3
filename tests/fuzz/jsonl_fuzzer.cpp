// libFuzzer target: JSONL training data on arbitrary bytes: the pre-tokenized form
// (JsonlDataset: {"input_ids", "labels"} lines) and, line by line, the raw example formats
// (text, prompt/completion, alpaca, chat) rendered as the data pipeline renders them.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"
#include "data/formats.h"
#include "data/jsonl_dataset.h"
#include "fuzz_input_file.h"

namespace {

void render_lines(const uint8_t* data, size_t size) {
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded()) continue;
    for (const auto format :
         {shardtrain::ExampleFormat::kText, shardtrain::ExampleFormat::kPromptCompletion,
          shardtrain::ExampleFormat::kAlpaca, shardtrain::ExampleFormat::kChat}) {
      shardtrain::RenderSettings settings;
      settings.format = shardtrain::detect_format(record).value_or(format);
      try {
        shardtrain::render_record(record, settings);
      } catch (const shardtrain::Error&) {
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shardtrain::fuzz::FuzzInputFile file;
  try {
    const shardtrain::JsonlDataset dataset(file.write(data, size), 16, 0);
    for (size_t i = 0; i < dataset.size(); ++i) dataset.get(i);
  } catch (const shardtrain::Error&) {
  }
  render_lines(data, size);
  return 0;
}
