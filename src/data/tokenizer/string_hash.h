// Hash and map types keyed by std::string that can be searched with a std::string_view, so
// lookups on the encode path never allocate.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace shardtrain::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
using StringSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;

}  // namespace shardtrain::tokenizer
