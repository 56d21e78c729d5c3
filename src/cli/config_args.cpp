#include "cli/config_args.h"

#include "core/error.h"

namespace shardtrain::cli {

std::vector<std::string> config_assignments(const std::vector<std::string>& extras) {
  std::vector<std::string> assignments;
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& word = extras[i];
    if (word.rfind("--", 0) != 0 || word.size() == 2) {
      fail(
          "unexpected argument '{}'; HINT: config overrides look like --section.key=value or "
          "--section.key value (see --help)",
          word);
    }
    if (word.find('=') != std::string::npos) {
      assignments.push_back(word.substr(2));
      continue;
    }
    if (i + 1 >= extras.size() || extras[i + 1].rfind("--", 0) == 0) {
      fail("config override '{}' has no value; HINT: write {} VALUE or {}=VALUE", word, word, word);
    }
    assignments.push_back(word.substr(2) + "=" + extras[i + 1]);
    ++i;
  }
  return assignments;
}

void apply_config_args(ConfigSchema& schema, const std::vector<std::string>& config_paths,
                       const std::vector<std::string>& extras) {
  // Parse the overrides first: a malformed one fails before any file is read.
  const std::vector<std::string> assignments = config_assignments(extras);
  for (const std::string& path : config_paths) schema.load_toml_file(path);
  for (const std::string& assignment : assignments) schema.apply_override(assignment);
}

}  // namespace shardtrain::cli
