// DataFormat: what a data file holds (`data.format`, `eval --format`):
//   tokens     a token file written by `prepare` (data/token_file.h);
//   jsonl      pre-tokenized JSONL, `input_ids` per line (data/jsonl_dataset.h);
//   examples   raw examples (text, prompt/completion, alpaca, chat JSONL: data/formats.h),
//              tokenized and packed into a cached token file first;
//   auto       by extension (.bin/.tokens = tokens, .jsonl/.json = JSONL) and, for JSONL, by
//              the first line's keys (input_ids = jsonl, else examples).
#pragma once

#include "core/choice_names.h"

namespace shardtrain {

enum class DataFormat { kAuto, kTokens, kJsonl, kExamples };

// auto, tokens, jsonl, examples.
const ChoiceNames<DataFormat>& data_format_names();

}  // namespace shardtrain
