#include "model/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/error.h"
#include "core/json_message.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "io/read_file.h"

namespace shardtrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPeftPrefix = "base_model.model.";
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The module a PEFT target names ("q_proj", or a path ending in it: "self_attn.q_proj").
std::string module_of_target(const std::string& target) {
  const size_t dot = target.rfind('.');
  return dot == std::string::npos ? target : target.substr(dot + 1);
}

// Refuses a key set to something we do not train (it would change what the adapter computes).
void refuse_option(const nlohmann::json& j, const std::string& path, const char* key,
                   const nlohmann::json& plain, const char* what) {
  if (!j.contains(key) || j[key].is_null() || j[key] == plain) return;
  if ((j[key].is_object() || j[key].is_array()) && j[key].empty()) return;
  fail("{}: \"{}\" = {} ({}) is not supported; HINT: train a plain LoRA adapter", path, key,
       j[key].dump(), what);
}

uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the same on every platform
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string peft_tensor_name(const std::string& param_name) { return kPeftPrefix + param_name; }

bool is_lora_param(const ParamSpec& spec) {
  return ends_with(spec.name, ".lora_A.weight") || ends_with(spec.name, ".lora_B.weight");
}

PeftAdapterConfig read_peft_adapter_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kConfigFile).string();
  if (!fs::is_regular_file(path)) {
    fail(
        "{} not found; HINT: lora.adapter / --adapter takes a PEFT adapter dir (the one "
        "save_pretrained writes)",
        path);
  }
  nlohmann::json j;
  try {
    // PEFT writes a few hundred bytes.
    j = nlohmann::json::parse(read_small_file(path, std::uintmax_t{16} << 20, kConfigFile));
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", path, json_message(e));
  }
  if (!j.is_object()) fail("{} is not a JSON object", path);
  const std::string peft_type = j.value("peft_type", std::string());
  if (peft_type != "LORA") {
    fail("{}: peft_type is \"{}\", expected \"LORA\"; HINT: only LoRA adapters load", path,
         peft_type);
  }
  refuse_option(j, path, "use_dora", false, "DoRA");
  refuse_option(j, path, "bias", "none", "trained biases");
  refuse_option(j, path, "modules_to_save", nullptr, "fully trained modules");
  refuse_option(j, path, "rank_pattern", nlohmann::json::object(), "per-module ranks");
  refuse_option(j, path, "alpha_pattern", nlohmann::json::object(), "per-module alphas");
  refuse_option(j, path, "fan_in_fan_out", false, "transposed weights");
  refuse_option(j, path, "layers_to_transform", nullptr, "a subset of layers");
  PeftAdapterConfig out;
  LoraConfig& lora = out.lora;
  lora.enabled = true;
  lora.adapter = dir;
  try {
    lora.rank = j.at("r").get<int64_t>();
    lora.alpha = j.value("lora_alpha", 8.0);
    lora.dropout = j.value("lora_dropout", 0.0);
    lora.use_rslora = j.value("use_rslora", false);
    out.base_model_name_or_path = j.value("base_model_name_or_path", std::string());
    const nlohmann::json& targets = j.at("target_modules");
    std::vector<std::string> modules;
    if (targets.is_string()) {
      modules.push_back(targets.get<std::string>());
    } else {
      for (const auto& t : targets) modules.push_back(module_of_target(t.get<std::string>()));
    }
    std::string list;
    for (const std::string& m : modules) list += (list.empty() ? "" : ",") + m;
    lora.target_modules = list;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}; HINT: r (integer) and target_modules (list of names) are required", path,
         json_message(e));
  }
  try {
    lora.validate();
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  return out;
}

LoraConfig resolve_lora_config(const LoraConfig& configured, const std::string& model_path) {
  if (configured.adapter.empty()) return configured;
  const PeftAdapterConfig adapter = read_peft_adapter_config(configured.adapter);
  const std::string& base = adapter.base_model_name_or_path;
  if (!base.empty() && !model_path.empty()) {
    std::error_code ec;
    const bool same = base == model_path || fs::equivalent(base, model_path, ec) ||
                      fs::path(model_path).filename() == fs::path(base).filename();
    if (!same) {
      log::warn("adapter {} was trained on base_model_name_or_path {}, loading it onto {}",
                configured.adapter, base, model_path);
    }
  }
  return adapter.lora;
}

PeftAdapterWeights PeftAdapterWeights::open(const std::string& dir, const ParamLayout& layout) {
  const std::string path = (fs::path(dir) / kWeightsFile).string();
  if (!fs::is_regular_file(path)) {
    if (fs::is_regular_file(fs::path(dir) / "adapter_model.bin")) {
      fail(
          "{} not found (adapter_model.bin is a pickle); HINT: save the adapter with "
          "save_pretrained(..., safe_serialization=True)",
          path);
    }
    fail("{} not found; HINT: a PEFT adapter dir holds adapter_model.safetensors", path);
  }
  SafetensorsFile file = SafetensorsFile::open(path);
  std::set<std::string> expected;
  for (const UnitLayout& unit : layout.units) {
    for (const ParamSpec& spec : unit.params) {
      if (!is_lora_param(spec)) continue;
      const std::string name = peft_tensor_name(spec.name);
      expected.insert(name);
      const SafetensorsEntry* entry = file.find(name);
      if (entry == nullptr) {
        fail(
            "{}: tensor {} is missing (the model and lora targets need it); HINT: was the "
            "adapter trained for this model and these target_modules?",
            path, name);
      }
      if (entry->shape != spec.shape) {
        fail(
            "{}: tensor {} has shape {}, the model needs {}; HINT: the adapter belongs to "
            "another base model or rank",
            path, name, entry->shape.to_string(), spec.shape.to_string());
      }
    }
  }
  for (const SafetensorsEntry& entry : file.entries()) {
    if (expected.count(entry.name) == 0) {
      fail(
          "{}: tensor {} is not an adapter of this model's targets; HINT: was the adapter "
          "trained for this model (its adapter_config.json target_modules)?",
          path, entry.name);
    }
  }
  return PeftAdapterWeights(std::move(file));
}

void PeftAdapterWeights::read_range(const ParamSpec& spec, int64_t begin, int64_t count,
                                    float* dst) const {
  const SafetensorsEntry* entry = file_.find(peft_tensor_name(spec.name));
  SHARDTRAIN_CHECK(entry != nullptr && begin >= 0 && begin + count <= spec.numel(),
                   "adapter tensor {} range", spec.name);
  const size_t element = dtype_size(entry->dtype);
  convert_to_f32(static_cast<const char*>(entry->data) + static_cast<size_t>(begin) * element,
                 entry->dtype, dst, static_cast<size_t>(count));
}

void init_lora_param(const ParamSpec& spec, uint64_t seed, float* dst) {
  const int64_t n = spec.numel();
  if (ends_with(spec.name, ".lora_B.weight")) {
    std::fill(dst, dst + n, 0.0f);
    return;
  }
  // kaiming_uniform_(a = sqrt(5)) over fan_in = I: bound = sqrt(6 / ((1 + 5) I)) = 1/sqrt(I).
  const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
  std::mt19937_64 engine(seed * 1000003ull ^ name_hash(spec.name));
  const double scale = 1.0 / 18446744073709551616.0;  // 2^-64
  for (int64_t i = 0; i < n; ++i) {
    const double u = (static_cast<double>(engine()) + 0.5) * scale;  // (0, 1)
    dst[i] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
}

void save_peft_adapter(const std::string& out_dir, const LoraConfig& lora,
                       const ParamLayout& layout, const UnitValues& unit_values,
                       const SavePeftOptions& options) {
  std::error_code ec;
  const fs::path out(out_dir);
  for (const std::string& dir : options.protected_dirs) {
    if (!dir.empty() && fs::exists(out, ec) && fs::equivalent(out, dir, ec)) {
      fail("cannot save the adapter to {}: it is the input dir {}; HINT: choose another dir",
           out_dir, dir);
    }
  }
  fs::create_directories(out, ec);
  if (ec) fail("cannot create {}: {}", out_dir, ec.message());
  std::vector<SafetensorsTensorSpec> specs;
  for (const UnitLayout& unit : layout.units) {
    for (const ParamSpec& spec : unit.params) {
      if (is_lora_param(spec))
        specs.push_back({peft_tensor_name(spec.name), options.dtype, spec.shape});
    }
  }
  SafetensorsWriter writer((out / kWeightsFile).string(), specs, {{"format", "pt"}});
  std::vector<uint16_t> converted;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const float* values = unit_values(static_cast<int>(u));
    for (const ParamSpec& spec : layout.units[u].params) {
      if (!is_lora_param(spec)) continue;
      const float* src = values + spec.offset;
      if (options.dtype == DType::kF32) {
        writer.write_tensor(peft_tensor_name(spec.name), src,
                            static_cast<size_t>(spec.numel()) * sizeof(float));
      } else {
        converted.resize(spec.numel());
        convert_from_f32(src, options.dtype, converted.data(), converted.size());
        writer.write_tensor(peft_tensor_name(spec.name), converted.data(),
                            converted.size() * sizeof(uint16_t));
      }
    }
  }
  writer.finish();
  for (const std::string& extra : options.extra_files) {
    write_file_atomically((out / fs::path(extra).filename()).string(), read_file(extra));
  }
  for (const auto& [name, contents] : options.extra_contents) {
    write_file_atomically((out / name).string(), contents);
  }
  nlohmann::ordered_json j;
  j["alpha_pattern"] = nlohmann::json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = options.base_model_name_or_path;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["lora_alpha"] = lora.alpha;
  j["lora_dropout"] = lora.dropout;
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = lora.rank;
  j["rank_pattern"] = nlohmann::json::object();
  j["revision"] = nullptr;
  j["target_modules"] = lora.modules();
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = lora.use_rslora;
  write_file_atomically((out / kConfigFile).string(), j.dump(2) + "\n");
}

void merge_lora_unit(const LoraConfig& lora, const UnitLayout& unit, float* values) {
  const float scale = lora.scale();
  for (const ParamSpec& a : unit.params) {
    if (!ends_with(a.name, ".lora_A.weight")) continue;
    const std::string module =
        a.name.substr(0, a.name.size() - std::string(".lora_A.weight").size());
    const int b_index = unit.find(module + ".lora_B.weight");
    const int w_index = unit.find(module + ".weight");
    SHARDTRAIN_CHECK(b_index >= 0 && w_index >= 0, "LoRA module {} in unit {}", module, unit.name);
    const ParamSpec& b = unit.params[b_index];
    const ParamSpec& w = unit.params[w_index];
    const int64_t O = w.shape[0], I = w.shape[1], r = a.shape[0];
    const float* A = values + a.offset;  // (r, I)
    const float* B = values + b.offset;  // (O, r)
    float* W = values + w.offset;        // (O, I)
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t k = 0; k < r; ++k) {
        const float coefficient = scale * B[o * r + k];
        if (coefficient == 0.0f) continue;
        for (int64_t i = 0; i < I; ++i) W[o * I + i] += coefficient * A[k * I + i];
      }
    }
  }
}

}  // namespace shardtrain
