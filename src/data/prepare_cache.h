// prepare_cached: prepare a JSONL dataset once and reuse the token file on later runs.
//
// The cache file is CACHE_DIR/<key>.bin, where <key> is 16 hex digits of a 64-bit FNV-1a hash of
//   - the dataset: absolute path, size in bytes and modification time (nanoseconds),
//   - the tokenizer: the contents of tokenizer.json and of tokenizer_config.json (if present),
//   - every setting that changes the output: seq_len, format, chat_template, overlong,
//     on_bad_line, invalid_utf8, train_on_prompt, seed, eos_token, and whether packing is none
//     (documents and concatenate write the same file) (not threads, not out_path),
//   - the cache layout version.
// A present cache file that opens as a valid token file is reused without reading the dataset.
// Otherwise the dataset is prepared into it: the token file is written atomically (temp file +
// rename), so a crash never leaves a partial <key>.bin, and a flock on CACHE_DIR/<key>.lock makes
// concurrent callers (e.g. every rank of a node) wait for the first one instead of preparing
// again. The human-readable report is saved next to it as <key>.report.txt and logged.
// Throws what prepare_dataset throws, and Error naming CACHE_DIR when it cannot be created or
// locked.
#pragma once

#include <string>

#include "data/prepare.h"

namespace shardtrain {

// The cache key of `options` (16 hex digits); exposed for tests and tools.
std::string prepare_cache_key(const PrepareOptions& options);

// Returns the path of the token file for `options` (options.out_path is ignored).
std::string prepare_cached(const PrepareOptions& options, const std::string& cache_dir);

}  // namespace shardtrain
