// Reading tokenizer.json components: small accessors that turn a missing or mistyped key into a
// shardtrain::Error naming the file, the component and the key.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtrain::tokenizer {

// Token ids (model.vocab, added_tokens) are below this bound: tables indexed by id are sized
// from the largest one, and the largest published vocabulary has 256K entries (model/
// model_config.h bounds vocab_size at the same 2^22).
inline constexpr int64_t kMaxTokenIdExclusive = int64_t{1} << 22;

// Where a component sits, for error messages: the file and a JSON-path-like location.
struct ConfigSite {
  std::string file;      // tokenizer.json path
  std::string location;  // e.g. "pre_tokenizer.pretokenizers[0]"

  ConfigSite child(std::string_view key) const;
  ConfigSite element(size_t index) const;
};

// The "type" string of a component object.
std::string component_type(const nlohmann::json& config, const ConfigSite& site);

std::string string_field(const nlohmann::json& config, std::string_view key,
                         const ConfigSite& site);
bool bool_field(const nlohmann::json& config, std::string_view key, bool default_value,
                const ConfigSite& site);
int64_t int_field(const nlohmann::json& config, std::string_view key, int64_t default_value,
                  const ConfigSite& site);
const nlohmann::json& array_field(const nlohmann::json& config, std::string_view key,
                                  const ConfigSite& site);

// The steps of a "Sequence" component: parse(element, its site) of each element of the array
// config[key], leaving out those that parse to nullptr (steps that do nothing).
template <typename Step, typename Parse>
std::vector<std::unique_ptr<Step>> sequence_steps(const nlohmann::json& config,
                                                  std::string_view key, const ConfigSite& site,
                                                  Parse parse) {
  const ConfigSite list_site = site.child(key);
  const nlohmann::json& list = array_field(config, key, site);
  std::vector<std::unique_ptr<Step>> steps;
  for (size_t i = 0; i < list.size(); ++i) {
    if (auto step = parse(list[i], list_site.element(i))) steps.push_back(std::move(step));
  }
  return steps;
}

// Throws Error("<file>: <location>: unsupported <what> type '<type>' ...").
[[noreturn]] void fail_unsupported(std::string_view what, std::string_view type,
                                   const ConfigSite& site);

}  // namespace shardtrain::tokenizer
