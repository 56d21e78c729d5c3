// The files behind data.path (and data.eval_path) and the per-source mixing weights.
//
// Syntax (docs/data.md "Several files"):
//   data.path    = "chat.jsonl, code/*.jsonl, books/"   comma-separated sources; each one is
//                  a file, a glob (*, ?, [...]: the matching files, sorted by name) or a
//                  directory (its .jsonl/.json/.bin/.tokens files, sorted by name, not recursive)
//   data.weights = "3, 1, 1"   one non-negative number per source: the share of the mix each
//                  source gets (data/mixture_dataset.h); "" = every source in its natural size
// Errors (shardtrain::Error naming the key and the source): a missing file, a glob that matches
// nothing, a directory without data files, an empty source between commas, a weight count that
// differs from the source count, a weight that is not a number >= 0, or weights that are all 0.
#pragma once

#include <string>
#include <vector>

namespace shardtrain {

struct DataSource {
  std::string spec;                // as written in the path list, trimmed
  std::vector<std::string> files;  // >= 1, in order
};

// True when `path_list` names more than one file (a comma, a glob or a directory), so the
// data is a mixture rather than one file.
bool names_several_files(const std::string& path_list);

// `key` names the config key in errors ("data.path").
std::vector<DataSource> expand_data_sources(const std::string& path_list, const std::string& key);

// Empty for "" (natural sizes); else one weight per source.
std::vector<double> parse_source_weights(const std::string& weights, size_t source_count);

}  // namespace shardtrain
