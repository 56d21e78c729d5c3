#include "data/packing_mode.h"

namespace shardtrain {

const ChoiceNames<PackingMode>& packing_mode_names() {
  static const ChoiceNames<PackingMode> names = {{"documents", PackingMode::kDocuments},
                                                 {"concatenate", PackingMode::kConcatenate},
                                                 {"none", PackingMode::kNone}};
  return names;
}

const char* packing_mode_name(PackingMode mode) {
  for (const auto& [name, value] : packing_mode_names())
    if (value == mode) return name.c_str();
  return "?";
}

const ChoiceNames<PackingChoice>& packing_choice_names() {
  static const ChoiceNames<PackingChoice> names = [] {
    ChoiceNames<PackingChoice> out = {{"auto", std::nullopt}};
    for (const auto& [name, mode] : packing_mode_names()) out.emplace_back(name, mode);
    return out;
  }();
  return names;
}

}  // namespace shardtrain
