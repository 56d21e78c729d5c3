#include "model/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/read_file.h"
#include "model/family_table.h"

namespace shardtrain {
namespace {

using Json = nlohmann::json;

constexpr const char* kFixHint = "HINT: fix the value in config.json";
constexpr std::uintmax_t kMaxConfigJsonBytes = std::uintmax_t{16} << 20;

// Typed access to one JSON object of config.json. `prefix` qualifies nested keys in messages,
// e.g. "rope_scaling.". A key that is absent or null counts as absent.
class KeyReader {
 public:
  KeyReader(const std::string& path, const Json& object, std::string prefix = "")
      : path_(path), object_(object), prefix_(std::move(prefix)) {}

  const Json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  int64_t integer(const char* key, int64_t fallback) const {
    const Json* value = find(key);
    return value ? as_integer(key, *value) : fallback;
  }
  int64_t required_integer(const char* key) const {
    const Json* value = find(key);
    if (value == nullptr) {
      fail(
          "{}: required key '{}{}' is missing; HINT: use the config.json that came with the "
          "checkpoint",
          path_, prefix_, key);
    }
    return as_integer(key, *value);
  }
  double number(const char* key, double fallback) const {
    const Json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_number()) wrong_type(key, "a number", *value);
    return value->get<double>();
  }
  double required_number(const char* key) const {
    if (find(key) == nullptr) {
      fail("{}: required key '{}{}' is missing; {}", path_, prefix_, key, kFixHint);
    }
    return number(key, 0.0);
  }
  bool boolean(const char* key, bool fallback) const {
    const Json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) wrong_type(key, "true or false", *value);
    return value->get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    const Json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_string()) wrong_type(key, "a string", *value);
    return value->get<std::string>();
  }
  // The first integer of an integer-or-list key (eos_token_id may be a list).
  int64_t first_integer(const char* key, int64_t fallback) const {
    const Json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_array()) return as_integer(key, *value);
    if (value->empty()) return fallback;
    return as_integer(key, value->front());
  }

  [[noreturn]] void wrong_type(const char* key, const char* expected, const Json& value) const {
    std::string shown = value.dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    fail("{}: key '{}{}' must be {}, got {}; {}", path_, prefix_, key, expected, shown, kFixHint);
  }

 private:
  int64_t as_integer(const char* key, const Json& value) const {
    if (value.is_number_integer() &&
        (!value.is_number_unsigned() ||
         value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      return value.get<int64_t>();
    }
    wrong_type(key, "an integer", value);
  }

  const std::string& path_;
  const Json& object_;
  std::string prefix_;
};

Json parse_config_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    fail("config file {} does not exist; HINT: check the checkpoint path", path);
  }
  if (std::filesystem::is_directory(path, ec)) {
    fail("config file {} is a directory; HINT: pass the path of config.json", path);
  }
  // A genuine config.json is a few KiB (the multimodal ones tens).
  const std::string text = read_small_file(path, kMaxConfigJsonBytes, "config.json");
  Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    fail("config file {} is not valid JSON; HINT: re-download config.json or fix its syntax", path);
  }
  if (!root.is_object()) {
    fail("config file {} is not a JSON object; HINT: re-download config.json", path);
  }
  return root;
}

// One rope object (`key`: rope_scaling, rope_parameters or one layer type's entry of it): its
// type (default, llama3, linear) and their fields; rope_theta inside it overrides `rope`'s.
// Without a type: default, unless `type_required` (the classic rope_scaling needs one).
RopeConfig read_rope_object(const std::string& path, const KeyReader& top, const Json& object,
                            const std::string& key, RopeConfig rope, bool type_required) {
  if (!object.is_object()) top.wrong_type(key.c_str(), "an object or null", object);
  const KeyReader params(path, object, key + ".");
  rope.theta = params.number("rope_theta", rope.theta);
  std::string type = params.string("rope_type", params.string("type", ""));
  if (type.empty()) {
    if (type_required) fail("{}: key '{}' has no 'rope_type'; {}", path, key, kFixHint);
    type = "default";
  }
  if (type == "default") return rope;
  if (type == "linear") {  // every frequency divided by factor (Gemma 3's global layers)
    rope.type = RopeType::kLinear;
    rope.factor = params.required_number("factor");
    return rope;
  }
  if (type != "llama3") {
    fail(
        "{}: key '{}.rope_type' = '{}' is an unsupported rope type (supported: default, llama3, "
        "linear); HINT: use a model without {} rope scaling",
        path, key, type, type);
  }
  rope.type = RopeType::kLlama3;
  rope.factor = params.required_number("factor");
  rope.low_freq_factor = params.required_number("low_freq_factor");
  rope.high_freq_factor = params.required_number("high_freq_factor");
  rope.original_max_position_embeddings =
      params.required_integer("original_max_position_embeddings");
  return rope;
}

// Rope from either `rope_parameters` (newer transformers) or `rope_theta` + `rope_scaling`.
RopeConfig read_rope(const std::string& path, const KeyReader& top) {
  RopeConfig rope;
  const Json* parameters = top.find("rope_parameters");
  const Json* scaling = top.find("rope_scaling");
  rope.theta = top.number("rope_theta", 10000.0);
  if (parameters != nullptr) {
    return read_rope_object(path, top, *parameters, "rope_parameters", rope, false);
  }
  if (scaling != nullptr) return read_rope_object(path, top, *scaling, "rope_scaling", rope, true);
  return rope;
}

// Gemma 3's keys: the activation, the attention scale and soft caps, which layers are sliding
// (`layer_types`, or every `sliding_window_pattern`-th layer global in older configs) and the
// two ropes (transformers 5: `rope_parameters` per layer type; older: rope_theta + rope_scaling
// for the global layers, rope_local_base_freq for the local ones). Defaults are transformers'.
void read_gemma_keys(const std::string& path, const KeyReader& top, ModelConfig& c) {
  const std::string activation =
      top.string("hidden_activation", top.string("hidden_act", "gelu_pytorch_tanh"));
  if (activation != "gelu_pytorch_tanh" && activation != "gelu_tanh") {
    fail("{}: key 'hidden_activation' = '{}' is not supported (only gelu_pytorch_tanh); {}", path,
         activation, kFixHint);
  }
  c.hidden_activation = HiddenActivation::kGeluTanh;
  c.query_pre_attn_scalar = top.number("query_pre_attn_scalar", 256.0);
  c.attn_logit_softcapping = top.number("attn_logit_softcapping", 0.0);
  c.final_logit_softcapping = top.number("final_logit_softcapping", 0.0);
  c.sliding_window = top.integer("sliding_window", 4096);

  if (const Json* types = top.find("layer_types")) {
    if (!types->is_array()) top.wrong_type("layer_types", "a list of layer types", *types);
    if (static_cast<int64_t>(types->size()) != c.num_hidden_layers) {
      fail("{}: key 'layer_types' lists {} layers but num_hidden_layers = {}; {}", path,
           types->size(), c.num_hidden_layers, kFixHint);
    }
    for (const Json& type : *types) {
      const std::string name = type.is_string() ? type.get<std::string>() : type.dump();
      if (name != "sliding_attention" && name != "full_attention") {
        fail("{}: key 'layer_types' holds '{}' (supported: sliding_attention, full_attention); {}",
             path, name, kFixHint);
      }
      c.layer_types.push_back(name == "sliding_attention" ? LayerAttention::kSliding
                                                          : LayerAttention::kFull);
    }
  } else {
    const char* pattern_key =
        top.find("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    const int64_t pattern = top.integer(pattern_key, 6);
    if (pattern <= 0) {
      fail("{}: key '{}' must be positive, got {}; {}", path, pattern_key, pattern, kFixHint);
    }
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      c.layer_types.push_back((l + 1) % pattern != 0 ? LayerAttention::kSliding
                                                     : LayerAttention::kFull);
    }
  }

  RopeConfig base;
  base.theta = top.number("rope_theta", 1000000.0);
  const Json* parameters = top.find("rope_parameters");
  if (parameters != nullptr && parameters->is_object() &&
      (parameters->contains("full_attention") || parameters->contains("sliding_attention"))) {
    const KeyReader by_type(path, *parameters, "rope_parameters.");
    for (const char* type : {"full_attention", "sliding_attention"}) {
      if (by_type.find(type) == nullptr) {
        fail("{}: required key 'rope_parameters.{}' is missing; {}", path, type, kFixHint);
      }
    }
    c.rope = read_rope_object(path, top, *by_type.find("full_attention"),
                              "rope_parameters.full_attention", base, false);
    RopeConfig local;
    local.theta = 10000.0;
    c.rope_local = read_rope_object(path, top, *by_type.find("sliding_attention"),
                                    "rope_parameters.sliding_attention", local, false);
    return;
  }
  c.rope = read_rope(path, top);
  if (top.find("rope_theta") == nullptr && parameters == nullptr) c.rope.theta = base.theta;
  c.rope_local = RopeConfig{};
  c.rope_local.theta = top.number("rope_local_base_freq", 10000.0);
}

// The mixture-of-experts keys of qwen3_moe and mixtral, with transformers' defaults. transformers
// 5 writes Qwen3-MoE's expert count as `num_local_experts`, the Hub's configs as `num_experts`.
void read_moe_keys(const std::string& path, const KeyReader& top, ModelFamily::Moe kind,
                   ModelConfig& c) {
  MoeConfig& moe = c.moe;
  moe.experts_per_token =
      top.integer("num_experts_per_tok", kind == ModelFamily::Moe::kMixtral ? 2 : 8);
  moe.router_aux_loss_coef = top.number("router_aux_loss_coef", 0.001);
  if (kind == ModelFamily::Moe::kMixtral) {
    moe.num_experts = top.integer("num_local_experts", 8);
    moe.expert_intermediate = c.intermediate_size;
    moe.renormalize = true;
    return;
  }
  moe.num_experts = top.integer("num_experts", top.integer("num_local_experts", 128));
  moe.expert_intermediate = top.integer("moe_intermediate_size", 768);
  moe.renormalize = top.boolean("norm_topk_prob", false);
  moe.decoder_sparse_step = top.integer("decoder_sparse_step", 1);
  if (const Json* layers = top.find("mlp_only_layers")) {
    if (!layers->is_array()) top.wrong_type("mlp_only_layers", "a list of layer indices", *layers);
    for (const Json& layer : *layers) {
      if (!layer.is_number_integer()) {
        top.wrong_type("mlp_only_layers", "a list of layer indices", *layers);
      }
      moe.mlp_only_layers.push_back(layer.get<int64_t>());
    }
  }
}

// Every id of an integer-or-list key (eos_token_id may be a list) must be below vocab_size;
// the first one is also checked by ModelConfig::validate, the others only here.
void check_token_id_list(const std::string& path, const KeyReader& top, const char* key,
                         int64_t vocab_size) {
  const Json* value = top.find(key);
  if (value == nullptr || !value->is_array()) return;
  for (const Json& id : *value) {
    if (!id.is_number_integer()) top.wrong_type(key, "an integer or a list of integers", *value);
    if (id.get<int64_t>() >= vocab_size || id.get<int64_t>() < 0) {
      fail("{}: key '{}' lists {}, which is not in [0, vocab_size = {}); {}", path, key, id.dump(),
           vocab_size, kFixHint);
    }
  }
}

}  // namespace

ModelConfig read_hf_config(const std::string& path) {
  const Json file_root = parse_config_file(path);
  const KeyReader file_top(path, file_root);
  ModelConfig c;
  if (file_top.find("model_type") == nullptr) {
    fail(
        "{}: required key 'model_type' is missing; HINT: use the config.json that came with the "
        "checkpoint",
        path);
  }
  c.model_type = file_top.string("model_type", "");
  // A multimodal checkpoint (Gemma 3 4B-27B): its text model's config, under its own key.
  const MultimodalWrapper* wrapper = find_multimodal_wrapper(c.model_type);
  const Json* text_config = wrapper ? file_top.find(wrapper->text_key) : nullptr;
  if (wrapper != nullptr && (text_config == nullptr || !text_config->is_object())) {
    fail("{}: model_type '{}' needs its text model's config in key '{}' (an object); {}", path,
         c.model_type, wrapper->text_key, kFixHint);
  }
  // Keys the wrapper may hold for its text model (Gemma 3 writes dtype and token ids there).
  Json root = text_config ? *text_config : file_root;
  if (text_config != nullptr) {
    for (const char* key : {"tie_word_embeddings", "dtype", "torch_dtype", "bos_token_id",
                            "eos_token_id", "pad_token_id"}) {
      if (!root.contains(key) && file_root.contains(key)) root[key] = file_root[key];
    }
  }
  const KeyReader top(path, root, text_config ? std::string(wrapper->text_key) + "." : "");
  if (wrapper != nullptr) {
    c.multimodal_model_type = c.model_type;
    c.model_type = top.string("model_type", wrapper->text_model_type);
  }
  const ModelFamily* family = find_model_family(c.model_type);
  if (family == nullptr) {
    fail(
        "{}: model_type '{}' is not supported (supported: {}); HINT: use a checkpoint of a "
        "supported architecture",
        path, c.model_type, supported_model_types());
  }
  if (!family->gemma_blocks) {
    const std::string hidden_act = top.string("hidden_act", "silu");
    if (hidden_act != "silu") {
      fail("{}: key 'hidden_act' = '{}' is not supported (only silu); {}", path, hidden_act,
           kFixHint);
    }
  }

  c.vocab_size = top.required_integer("vocab_size");
  c.hidden_size = top.required_integer("hidden_size");
  c.intermediate_size = top.required_integer("intermediate_size");
  c.num_hidden_layers = top.required_integer("num_hidden_layers");
  c.num_attention_heads = top.required_integer("num_attention_heads");
  c.num_key_value_heads = top.integer("num_key_value_heads", c.num_attention_heads);
  const bool divisible = c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0;
  // 0 when it cannot be derived: validate() then names the offending keys.
  const int64_t derived_head_dim = divisible ? c.hidden_size / c.num_attention_heads : 0;
  c.head_dim = top.integer(
      "head_dim", family->default_head_dim > 0 ? family->default_head_dim : derived_head_dim);
  c.max_position_embeddings = top.integer("max_position_embeddings", family->default_max_positions);
  c.rms_norm_eps = top.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = top.boolean("tie_word_embeddings", family->gemma_blocks);

  using Bias = ModelFamily::Bias;
  using Window = ModelFamily::Window;
  c.attention_bias =
      family->attention_bias == Bias::kAlways ||
      (family->attention_bias == Bias::kConfigKey && top.boolean("attention_bias", false));
  if (family->mlp_bias_key) c.mlp_bias = top.boolean("mlp_bias", false);
  if (family->sliding_window == Window::kConfigKey) {
    c.sliding_window = top.integer("sliding_window", 0);
  }
  if (family->sliding_window == Window::kRefusedIfUsed &&
      top.boolean("use_sliding_window", false) &&
      top.integer("max_window_layers", 28) < c.num_hidden_layers) {
    fail(
        "{}: key 'use_sliding_window' = true is not supported for {}; HINT: set it to false "
        "(published Qwen checkpoints do)",
        path, c.model_type);
  }

  if (family->gemma_blocks) {
    read_gemma_keys(path, top, c);
  } else {
    c.rope = read_rope(path, top);
  }
  c.bos_token_id = top.integer("bos_token_id", -1);
  c.eos_token_id = top.first_integer("eos_token_id", -1);
  c.pad_token_id = top.integer("pad_token_id", -1);
  check_token_id_list(path, top, "eos_token_id", c.vocab_size);
  c.torch_dtype =
      top.find("dtype") ? top.string("dtype", "") : top.string("torch_dtype", "float32");
  if (family->moe != ModelFamily::Moe::kNone) read_moe_keys(path, top, family->moe, c);
  c.validate(path);
  return c;
}

namespace {

// A rope as one object of rope_scaling / rope_parameters (rope_type, its fields, rope_theta).
nlohmann::ordered_json rope_json(const RopeConfig& rope) {
  nlohmann::ordered_json j;
  switch (rope.type) {
    case RopeType::kDefault:
      j["rope_type"] = "default";
      break;
    case RopeType::kLinear:
      j["rope_type"] = "linear";
      j["factor"] = rope.factor;
      break;
    case RopeType::kLlama3:
      j["rope_type"] = "llama3";
      j["factor"] = rope.factor;
      j["low_freq_factor"] = rope.low_freq_factor;
      j["high_freq_factor"] = rope.high_freq_factor;
      j["original_max_position_embeddings"] = rope.original_max_position_embeddings;
      break;
  }
  j["rope_theta"] = rope.theta;
  return j;
}

// Gemma 3's keys as transformers 5 writes them: layer_types and rope_parameters per layer type.
void write_gemma_keys(const ModelConfig& c, nlohmann::ordered_json& j) {
  using Ordered = nlohmann::ordered_json;
  const auto optional_cap = [](double cap) { return cap > 0 ? Ordered(cap) : Ordered(nullptr); };
  // transformers types it int (its strict config refuses 256.0); published configs hold whole
  // numbers, and a fractional one (read as a double) is written as it was read.
  const double scalar = c.query_pre_attn_scalar;
  if (scalar == std::floor(scalar) && std::abs(scalar) < 1e15) {
    j["query_pre_attn_scalar"] = static_cast<int64_t>(scalar);
  } else {
    j["query_pre_attn_scalar"] = scalar;
  }
  j["attn_logit_softcapping"] = optional_cap(c.attn_logit_softcapping);
  j["final_logit_softcapping"] = optional_cap(c.final_logit_softcapping);
  j["sliding_window"] = c.sliding_window;
  Ordered types = Ordered::array();
  for (const LayerAttention type : c.layer_types) {
    types.push_back(type == LayerAttention::kSliding ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = types;
  j["use_bidirectional_attention"] = false;
  j["rope_parameters"] = {{"full_attention", rope_json(c.rope)},
                          {"sliding_attention", rope_json(c.rope_local)}};
}

}  // namespace

std::string write_hf_config_json(const ModelConfig& c) {
  using Ordered = nlohmann::ordered_json;
  const ModelFamily& family = model_family(c);
  using Window = ModelFamily::Window;
  const auto optional_id = [](int64_t id) { return id < 0 ? Ordered(nullptr) : Ordered(id); };
  Ordered j;
  j["architectures"] = {family.hf_architecture};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
  if (c.hidden_activation == HiddenActivation::kGeluTanh) {
    j["hidden_activation"] = "gelu_pytorch_tanh";
  } else {
    j["hidden_act"] = "silu";
  }
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (family.attention_bias == ModelFamily::Bias::kConfigKey) {
    j["attention_bias"] = c.attention_bias;
  }
  if (family.mlp_bias_key) j["mlp_bias"] = c.mlp_bias;
  if (family.sliding_window == Window::kRefusedIfUsed) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.num_hidden_layers;
  }
  if (family.sliding_window == Window::kConfigKey) {
    j["sliding_window"] = c.sliding_window > 0 ? Ordered(c.sliding_window) : Ordered(nullptr);
  }
  j["attention_dropout"] = 0.0;
  if (family.sliding_window == Window::kLayerTypes) {
    write_gemma_keys(c, j);
  } else {
    j["rope_theta"] = c.rope.theta;
    j["rope_scaling"] = c.rope.type == RopeType::kDefault ? Ordered(nullptr) : rope_json(c.rope);
  }
  j["bos_token_id"] = optional_id(c.bos_token_id);
  j["eos_token_id"] = optional_id(c.eos_token_id);
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  j["torch_dtype"] = c.torch_dtype;
  if (family.moe != ModelFamily::Moe::kNone) {  // the keys as the Hub's configs spell them
    const MoeConfig& moe = c.moe;
    j["num_experts_per_tok"] = moe.experts_per_token;
    j["router_aux_loss_coef"] = moe.router_aux_loss_coef;
    j["output_router_logits"] = false;
    if (family.moe == ModelFamily::Moe::kMixtral) {
      j["num_local_experts"] = moe.num_experts;
      j["router_jitter_noise"] = 0.0;
    } else {
      j["num_experts"] = moe.num_experts;
      j["moe_intermediate_size"] = moe.expert_intermediate;
      j["norm_topk_prob"] = moe.renormalize;
      j["decoder_sparse_step"] = moe.decoder_sparse_step;
      j["mlp_only_layers"] = moe.mlp_only_layers;
    }
  }
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace shardtrain
