// Models by Hugging Face Hub id: what `model.path` (and eval/generate --model, export/prepare
// --tokenizer) turn into a local directory, resolved as huggingface_hub resolves it so Python
// tools and shardtrain share one cache (io/hub/hub_cache.h):
//   1. a local path that exists is used as it is (a directory named like an id wins);
//   2. a text that is not shaped like "org/name" is returned unchanged (the caller's own
//      "not a directory" error follows);
//   3. the cache: refs/<revision> (or the commit itself) -> snapshots/<commit>/ with every file
//      of the set present (or recorded as absent in .no_exist/) is used without the network;
//   4. else, unless offline (HF_HUB_OFFLINE=1: an Error saying nothing is cached), the files of
//      the set are downloaded from the Hub (io/hub/hub_download.h), once per node: one process
//      holds the repo's lock in .locks/ and the others wait, then find the snapshot complete.
// The file sets: kConfigAndTokenizer = config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, chat_template.jinja/json; kModel adds the
// weights: model.safetensors.index.json and the shards it lists, or model.safetensors.
// Returns the snapshot directory. Every failure is one Error line starting with `context`.
#pragma once

#include <string>
#include <vector>

#include "io/hub/hub_settings.h"

namespace shardtrain {

enum class HubFiles { kConfigAndTokenizer, kModel };

struct HubRequest {
  std::string path_or_id;
  std::string revision = "main";  // a branch, tag or commit
  HubFiles files = HubFiles::kModel;
  std::string context;  // e.g. "model.path" or "eval --model": the error lines start with it
};

// Reads the Hub's environment variables (io/hub/hub_settings.h) only when it has to.
std::string resolve_hub_path(const HubRequest& request);
std::string resolve_hub_path(const HubRequest& request, const HubSettings& settings);

// The names of the fixed files of a set (the shards come from the index).
std::vector<std::string> hub_file_names(HubFiles files);

}  // namespace shardtrain
