#include "data/packing_mode.h"

#include "core/error.h"

namespace shardtrain {

PackingMode parse_packing_mode(const std::string& name, const std::string& key) {
  if (name == "documents") return PackingMode::kDocuments;
  if (name == "concatenate") return PackingMode::kConcatenate;
  if (name == "none") return PackingMode::kNone;
  fail("{} = \"{}\" is not a packing mode; choose documents, concatenate or none", key, name);
}

const char* packing_mode_name(PackingMode mode) {
  switch (mode) {
    case PackingMode::kDocuments:
      return "documents";
    case PackingMode::kConcatenate:
      return "concatenate";
    case PackingMode::kNone:
      return "none";
  }
  return "?";
}

std::vector<std::string> packing_mode_choices() { return {"documents", "concatenate", "none"}; }

std::vector<std::string> packing_choices_with_auto() {
  std::vector<std::string> choices{"auto"};
  for (const std::string& mode : packing_mode_choices()) choices.push_back(mode);
  return choices;
}

}  // namespace shardtrain
