#include "data/tokenizer/post_processor.h"

#include <string>

#include "core/error.h"

namespace shardtrain::tokenizer {
namespace {

// Ids to put before and after the sequence.
class WrapProcessor : public PostProcessor {
 public:
  WrapProcessor(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}

  void add_special_tokens(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_;
  std::vector<int32_t> after_;
};

class NoOpProcessor : public PostProcessor {
 public:
  void add_special_tokens(std::vector<int32_t>&) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void add_special_tokens(std::vector<int32_t>& ids) const override {
    for (const auto& step : steps_) step->add_special_tokens(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> parse_template(const nlohmann::json& config,
                                              const ConfigSite& site) {
  const nlohmann::json& single = array_field(config, "single", site);
  const nlohmann::json& special_tokens =
      config.contains("special_tokens") ? config["special_tokens"] : nlohmann::json::object();
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const nlohmann::json& item = single[i];
    const ConfigSite item_site = site.child("single").element(i);
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken")) {
      fail("{}: {} must be {{\"SpecialToken\": ...}} or {{\"Sequence\": ...}}", site.file,
           item_site.location);
    }
    const std::string name = string_field(item["SpecialToken"], "id", item_site);
    if (!special_tokens.is_object() || !special_tokens.contains(name)) {
      fail("{}: {} names special token '{}', which {}.special_tokens does not define", site.file,
           item_site.location, name, site.location);
    }
    const nlohmann::json& ids =
        array_field(special_tokens[name], "ids", site.child("special_tokens").child(name));
    for (const nlohmann::json& id : ids) {
      if (!id.is_number_integer()) {
        fail("{}: {}.special_tokens.{}.ids must hold integers", site.file, site.location, name);
      }
      (seen_sequence ? after : before).push_back(id.get<int32_t>());
    }
  }
  return std::make_unique<WrapProcessor>(std::move(before), std::move(after));
}

// RobertaProcessing/BertProcessing write tokens as ["<s>", 0].
int32_t token_pair_id(const nlohmann::json& config, const char* key, const ConfigSite& site) {
  const nlohmann::json& pair = array_field(config, key, site);
  if (pair.size() != 2 || !pair[1].is_number_integer()) {
    fail("{}: {}.{} must be [\"token\", id]", site.file, site.location, key);
  }
  return pair[1].get<int32_t>();
}

}  // namespace

std::unique_ptr<PostProcessor> parse_post_processor(const nlohmann::json& config,
                                                    const ConfigSite& site) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, site);
  if (type == "TemplateProcessing") return parse_template(config, site);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    return std::make_unique<WrapProcessor>(
        std::vector<int32_t>{token_pair_id(config, "cls", site)},
        std::vector<int32_t>{token_pair_id(config, "sep", site)});
  }
  if (type == "ByteLevel") return std::make_unique<NoOpProcessor>();
  if (type == "Sequence") {
    return std::make_unique<SequenceProcessor>(
        sequence_steps<PostProcessor>(config, "processors", site, parse_post_processor));
  }
  fail_unsupported("post_processor", type, site);
}

}  // namespace shardtrain::tokenizer
