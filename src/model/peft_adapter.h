// PEFT LoRA adapter directories, the files `PeftModel.from_pretrained` reads and
// `model.save_pretrained` writes: adapter_config.json (peft_type "LORA", r, lora_alpha,
// target_modules, ...) and adapter_model.safetensors, whose tensors are named
// "base_model.model." + the module path + ".lora_A.weight" / ".lora_B.weight".
//
// Every mistake in a directory a user points at is one Error line naming the file (exit 2):
// a missing or unparsable file, another peft_type, options we do not train (DoRA, bias, rank
// patterns, modules_to_save), targets that are no module of the model, tensors missing, extra
// or of another shape than the model's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/lora_config.h"
#include "model/model_config.h"
#include "model/param_layout.h"
#include "model/save_hf.h"

namespace shardtrain {

// "base_model.model." + name: the adapter file's name of layout parameter `name`.
std::string peft_tensor_name(const std::string& param_name);

struct PeftAdapterConfig {
  LoraConfig lora;  // enabled, with adapter = the directory
  std::string base_model_name_or_path;
};

// Reads DIR/adapter_config.json.
PeftAdapterConfig read_peft_adapter_config(const std::string& dir);

// The LoRA settings of a job: `configured` as it is, or, when it names an adapter (adapter
// set), that adapter's settings (which replace rank, alpha, dropout, targets and rslora).
// `model_path` is compared with the adapter's base_model_name_or_path: when they differ, one
// warning line (PEFT loads such an adapter onto any base of the right shapes).
LoraConfig resolve_lora_config(const LoraConfig& configured, const std::string& model_path);

// DIR/adapter_model.safetensors, checked against a LoRA layout: exactly its adapters, each of
// its shape.
class PeftAdapterWeights {
 public:
  static PeftAdapterWeights open(const std::string& dir, const ParamLayout& layout);
  // Elements [begin, begin + count) of adapter `spec` (a layout parameter) as fp32.
  void read_range(const ParamSpec& spec, int64_t begin, int64_t count, float* dst) const;

 private:
  explicit PeftAdapterWeights(SafetensorsFile file) : file_(std::move(file)) {}
  SafetensorsFile file_;
};

// Whether `spec` is a LoRA adapter (lora_A / lora_B) rather than a base parameter.
bool is_lora_param(const ParamSpec& spec);

// New adapters as PEFT initialises them (init_lora_weights = True): lora_A Kaiming-uniform
// (torch.nn.init.kaiming_uniform_(a = sqrt(5)): U(-1/sqrt(I), 1/sqrt(I))), lora_B zero.
// Deterministic in (seed, parameter name), so every rank and world size draws the same values.
// dst: spec.numel() floats.
void init_lora_param(const ParamSpec& spec, uint64_t seed, float* dst);

struct SavePeftOptions {
  std::string base_model_name_or_path;
  DType dtype = DType::kF32;             // of the saved tensors: f32 or bf16
  std::vector<std::string> extra_files;  // copied in (the tokenizer files)
  std::vector<std::pair<std::string, std::string>> extra_contents;  // (name, contents)
  std::vector<std::string> protected_dirs;  // OUT_DIR must not be one of them
};

// Writes OUT_DIR/adapter_config.json and OUT_DIR/adapter_model.safetensors (the layout's
// adapters only: the base is not copied) and the extra files. unit_values(u): the unit's fp32
// values, called once per unit in order.
void save_peft_adapter(const std::string& out_dir, const LoraConfig& lora,
                       const ParamLayout& layout, const UnitValues& unit_values,
                       const SavePeftOptions& options);

// Folds block unit `unit`'s adapters into its base weights: W += scale * B @ A for every
// targeted module (fp32, in place in the unit's values). The base part of a LoRA unit is laid
// out as the unit of the model without LoRA, so the result's first base-unit-numel values are
// that unit, merged.
void merge_lora_unit(const LoraConfig& lora, const UnitLayout& unit, float* unit_values);

}  // namespace shardtrain
