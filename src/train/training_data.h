// Opening the [data] of a training job, whatever form it takes:
//   - a token file (.bin/.tokens) or JSONL with `input_ids` per line: opened directly;
//   - JSONL of raw examples ({"text"}, {"prompt","completion"}, alpaca, chat {"messages"}):
//     tokenized with the model's tokenizer (or data.tokenizer), packed into seq_len sequences
//     with a loss mask, and cached (data.cache_dir) under a key of dataset, tokenizer and
//     settings, so later runs (and every rank) reuse the same token file.
// data.format = "auto" decides by extension and, for JSONL, by the first line's keys.
// data.packing (data/packing_mode.h) decides how raw examples are packed (none: one per
// sequence) and how a token file's recorded documents are read (documents: masked apart, with
// positions restarting; concatenate: one stream).
// Several files (a comma-separated list, globs, directories: data/data_sources.h) are each
// opened as above and mixed by data.weights (data/mixture_dataset.h, seeded by `seed`).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "train/train_config.h"

namespace shardtrain {

// `data` with data.packing = "auto" made a mode: documents, on every backend (the CPU reference
// and every CUDA attention kernel mask packed documents apart). Any other value is unchanged.
DataConfig with_packing_resolved(const DataConfig& data);

// kTokens, kJsonl or kExamples for the configured data. Throws Error if the file is missing.
DataFormat resolve_training_data_format(const DataConfig& data);

// REQUIRES: data validated (TrainConfig::validate). Throws Error for any data problem.
// data.packing = "auto" reads as `documents` (with_packing_resolved).
std::unique_ptr<SequenceDataset> open_training_data(const DataConfig& data,
                                                    const std::string& model_path, uint64_t seed);

}  // namespace shardtrain
