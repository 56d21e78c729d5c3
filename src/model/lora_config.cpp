#include "model/lora_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace shardtrain {
namespace {

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string name = trimmed(list.substr(begin, end - begin));
    if (!name.empty()) names.push_back(name);
    begin = end + 1;
  }
  return names;
}

}  // namespace

const std::vector<std::string>& lora_module_names() {
  static const std::vector<std::string> names = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

void check_lora_supports(const ModelConfig& config) {
  if (!config.multimodal_model_type.empty()) {
    fail(
        "[lora] is not supported for the multimodal model_type {} yet (its PEFT adapter names "
        "the text model's modules under model.language_model); HINT: train the text-only "
        "checkpoint ({}) with LoRA, or this one without lora.enabled",
        config.multimodal_model_type, config.model_type);
  }
  static const std::vector<std::string> supported = {"llama", "qwen2", "qwen3", "mistral",
                                                     "gemma3_text"};
  if (std::find(supported.begin(), supported.end(), config.model_type) == supported.end()) {
    fail(
        "[lora] is not supported for model_type {} yet (it is for {}); HINT: train it without "
        "lora.enabled",
        config.model_type, fmt::join(supported, ", "));
  }
}

std::string lora_module_path(const std::string& module) {
  const bool attention =
      module == "q_proj" || module == "k_proj" || module == "v_proj" || module == "o_proj";
  return (attention ? "self_attn." : "mlp.") + module;
}

std::string lora_param_name(int64_t layer, const std::string& module, char which) {
  return fmt::format("model.layers.{}.{}.lora_{}.weight", layer, lora_module_path(module), which);
}

void LoraConfig::register_config(ConfigSchema& schema) {
  schema.add("lora.enabled", &enabled,
             "train LoRA adapters over a frozen base (the base gets no master, moments or grads)");
  schema.add("lora.rank", &rank, "LoRA rank r (> 0)");
  schema.add("lora.alpha", &alpha, "lora_alpha: adapters are scaled by alpha / r");
  schema.add("lora.dropout", &dropout, "lora_dropout on the adapters' input in training, [0, 1)");
  schema.add("lora.target_modules", &target_modules,
             "comma-separated PEFT module names (q_proj, ..., down_proj) or all-linear");
  schema.add("lora.use_rslora", &use_rslora, "rank-stabilised scale alpha / sqrt(r)");
  schema.add("lora.adapter", &adapter,
             "PEFT adapter dir to start from (its r, alpha, targets replace these keys)");
}

std::vector<std::string> LoraConfig::keys_set_while_disabled() const {
  if (enabled) return {};
  const LoraConfig defaults;
  std::vector<std::string> keys;
  if (rank != defaults.rank) keys.push_back("lora.rank");
  if (alpha != defaults.alpha) keys.push_back("lora.alpha");
  if (dropout != defaults.dropout) keys.push_back("lora.dropout");
  if (target_modules != defaults.target_modules) keys.push_back("lora.target_modules");
  if (use_rslora != defaults.use_rslora) keys.push_back("lora.use_rslora");
  if (!adapter.empty()) keys.push_back("lora.adapter");
  return keys;
}

void LoraConfig::validate() const {
  if (!enabled) {
    // An adapter to continue, with LoRA off, would train the whole model instead; the other
    // keys may stay in a config that turns LoRA off (the train command names them).
    if (!adapter.empty()) {
      fail(
          "config key 'lora.adapter' ({}) is set but 'lora.enabled' is false; HINT: set "
          "lora.enabled = true to train that adapter, or drop lora.adapter to train the whole "
          "model",
          adapter);
    }
    return;
  }
  if (rank <= 0) {
    fail("config key 'lora.rank' must be > 0, got {}; HINT: 8 or 16 are usual", rank);
  }
  if (!(dropout >= 0.0 && dropout < 1.0)) {
    fail("config key 'lora.dropout' must be in [0, 1), got {}", dropout);
  }
  if (!std::isfinite(alpha) || alpha <= 0.0) {
    fail("config key 'lora.alpha' must be > 0, got {}", alpha);
  }
  const std::vector<std::string> names = split_names(target_modules);
  if (names.empty()) {
    fail(
        "config key 'lora.target_modules' is empty; HINT: \"all-linear\" or e.g. "
        "\"q_proj,v_proj\"");
  }
  const std::vector<std::string>& known = lora_module_names();
  for (const std::string& name : names) {
    if (name == "all-linear" && names.size() == 1) continue;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      fail(
          "config key 'lora.target_modules' names '{}', which the model does not have; its linear "
          "modules are {} (or \"all-linear\" for all of them)",
          name, fmt::join(known, ", "));
    }
  }
}

float LoraConfig::scale() const {
  const double r = static_cast<double>(rank);
  return static_cast<float>(use_rslora ? alpha / std::sqrt(r) : alpha / r);
}

std::vector<std::string> LoraConfig::modules() const {
  const std::vector<std::string> names = split_names(target_modules);
  if (names.size() == 1 && names[0] == "all-linear") return lora_module_names();
  std::vector<std::string> ordered;
  for (const std::string& known : lora_module_names()) {
    if (std::find(names.begin(), names.end(), known) != names.end()) ordered.push_back(known);
  }
  return ordered;
}

bool LoraConfig::targets(const std::string& module) const {
  if (!enabled) return false;
  const std::vector<std::string> chosen = modules();
  return std::find(chosen.begin(), chosen.end(), module) != chosen.end();
}

}  // namespace shardtrain
