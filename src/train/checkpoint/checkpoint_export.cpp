#include "train/checkpoint/checkpoint_export.h"

#include <toml++/toml.h>

#include <cctype>
#include <charconv>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/param_layout.h"
#include "model/peft_adapter.h"
#include "model/save_hf.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/dir_lock.h"
#include "train/checkpoint/export_tokenizer.h"
#include "train/expert_export.h"

namespace shardtrain {
namespace fs = std::filesystem;
namespace {

std::string resolve_step_dir(const std::string& checkpoint) {
  std::error_code ec;
  if (!fs::is_directory(checkpoint, ec)) {
    fail(
        "export: checkpoint {} does not exist; HINT: give a step_XXXXXXXX dir or the "
        "train.checkpoint_dir of a run",
        checkpoint);
  }
  return named_checkpoint(checkpoint, "export");
}

DType export_dtype(const std::string& choice, const std::string& config_toml) {
  std::string name = choice;
  if (name == "auto") {
    try {
      name = toml::parse(config_toml)["model"]["dtype"].value_or(std::string("fp32"));
    } catch (const toml::parse_error&) {
      name = "fp32";
    }
  }
  if (name == "bf16") return DType::kBF16;
  if (name == "fp32") return DType::kF32;
  fail("export: --dtype must be bf16 or fp32, got {}", name);
}

// The [lora] section of the run's recorded config (the resolved one: an adapter's settings).
LoraConfig lora_of_run(const std::string& config_toml) {
  LoraConfig lora;
  try {
    const toml::table run = toml::parse(config_toml);
    const auto section = run["lora"];
    lora.enabled = section["enabled"].value_or(false);
    lora.rank = section["rank"].value_or(lora.rank);
    lora.alpha = section["alpha"].value_or(lora.alpha);
    lora.dropout = section["dropout"].value_or(lora.dropout);
    lora.target_modules = section["target_modules"].value_or(lora.target_modules);
    lora.use_rslora = section["use_rslora"].value_or(lora.use_rslora);
  } catch (const toml::parse_error&) {
    return LoraConfig();
  }
  return lora;
}

}  // namespace

uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  uint64_t scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KB")
    scale = 1'000;
  else if (unit == "MB")
    scale = 1'000'000;
  else if (unit == "GB")
    scale = 1'000'000'000;
  else if (unit == "KIB")
    scale = 1ULL << 10;
  else if (unit == "MIB")
    scale = 1ULL << 20;
  else if (unit == "GIB")
    scale = 1ULL << 30;
  if (digits == 0 || scale == 0) {
    fail("{} must be a size like 5GB, 500MB or 1048576, got '{}'", what, text);
  }
  uint64_t count = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + digits, count);
  if (error != std::errc() || end != text.data() + digits ||
      count > std::numeric_limits<uint64_t>::max() / scale) {
    fail("{} = '{}' is too large; HINT: use a size like 5GB", what, text);
  }
  return count * scale;
}

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out_dir,
                               const ExportOptions& options) {
  ExportResult result;
  result.step_dir = resolve_step_dir(checkpoint);
  const Manifest manifest = read_manifest(result.step_dir);
  const ManifestEntry* config_entry = manifest.find(kModelConfigFile);
  if (config_entry == nullptr) {
    fail("{}/{} does not list {}", result.step_dir, kManifestFile, kModelConfigFile);
  }
  verify_checkpoint_file(result.step_dir, *config_entry);
  const ModelConfig model_config =
      read_hf_config((fs::path(result.step_dir) / kModelConfigFile).string());
  const LoraConfig lora = lora_of_run(read_checkpoint_config_toml(result.step_dir));
  result.lora = lora.enabled;
  if (options.merge_lora && !lora.enabled) {
    fail("export --merge: checkpoint {} is of a run without LoRA (lora.enabled is off); HINT: "
         "drop --merge, the export is the whole model already",
         result.step_dir);
  }
  const ParamLayout layout = make_param_layout(model_config, lora);
  // Expert parallelism: the shards follow each expert rank's layout (rank 0's is recorded);
  // the export assembles every rank's experts into the canonical layout above.
  const int expert_parallel = read_checkpoint_expert_parallel(result.step_dir);
  std::vector<ParamLayout> expert_layouts;
  for (int j = 0; expert_parallel > 1 && j < expert_parallel; ++j) {
    expert_layouts.push_back(
        make_param_layout(model_config, lora, ExpertPlacement{expert_parallel, j}));
  }
  const SavedCheckpoint saved =
      open_checkpoint(result.step_dir, expert_parallel > 1 ? expert_layouts[0] : layout);
  result.step = saved.progress.step;

  SaveHfOptions save;
  save.max_shard_bytes = options.max_shard_bytes;
  save.protected_dirs = {checkpoint, result.step_dir, saved.model_path};
  std::error_code ec;
  const ExportedTokenizer tokenizer = exported_tokenizer(
      run_data_settings_from_toml(saved.config_toml), saved.model_path, options.tokenizer_dir);
  save.extra_files = tokenizer.files;
  for (const std::string& file : save.extra_files) {
    result.copied_files.push_back(fs::path(file).filename().string());
  }
  if (tokenizer.chat_template_jinja) {
    save.extra_contents.emplace_back("chat_template.jinja", *tokenizer.chat_template_jinja);
    result.copied_files.push_back("chat_template.jinja");
    log::info("export: chat template {} written as chat_template.jinja", tokenizer.template_note);
  }
  if (!fs::is_directory(tokenizer.dir, ec)) {
    log::warn(
        "export: tokenizer dir {} of the run is gone; no tokenizer files copied; HINT: pass "
        "--tokenizer DIR",
        tokenizer.dir);
  }

  CheckpointShardReader reader(saved);
  std::vector<std::unique_ptr<CheckpointShardReader>> expert_readers;  // [expert rank]
  for (int j = 0; j < static_cast<int>(expert_layouts.size()); ++j) {
    expert_readers.push_back(std::make_unique<CheckpointShardReader>(saved, j));
  }
  std::vector<float> unit_values;  // (unit numel) one unit at a time
  std::vector<float> staged;       // expert parallelism: one saved unit before it is placed
  std::optional<HfCheckpoint> base;
  if (options.merge_lora) {
    std::error_code exists_ec;
    if (!fs::is_directory(saved.model_path, exists_ec)) {
      fail("export --merge: the run's base model {} is gone; HINT: restore it, or export the "
           "adapter (without --merge)",
           saved.model_path);
    }
    base = HfCheckpoint::open(saved.model_path);
  }
  // A canonical unit from an expert-parallel checkpoint: the saved block (attention, router,
  // norms), then every expert rank's unit of experts, each placed by parameter name.
  const auto assemble_experts = [&](int u) {
    const UnitLayout& unit = layout.units[u];
    unit_values.assign(unit.numel, 0.0f);
    const UnitLayout& block = expert_layouts[0].units[u];
    staged.assign(block.numel, 0.0f);
    reader.read(u, "master", 0, block.numel, staged.data());
    copy_params_by_name(block, staged.data(), unit, unit_values.data());
    const int experts_unit = u == kRootUnit ? -1 : expert_layouts[0].expert_unit[u - block_unit(0)];
    for (size_t j = 0; experts_unit >= 0 && j < expert_layouts.size(); ++j) {
      const UnitLayout& experts = expert_layouts[j].units[experts_unit];
      staged.assign(experts.numel, 0.0f);
      expert_readers[j]->read(experts_unit, "master", 0, experts.numel, staged.data());
      copy_params_by_name(experts, staged.data(), unit, unit_values.data());
    }
    return unit_values.data();
  };
  const auto assemble = [&](int u) -> const float* {
    if (!expert_layouts.empty()) return assemble_experts(u);
    const UnitLayout& unit = layout.units[u];
    const int64_t frozen = saved.units[u].frozen_numel;
    unit_values.assign(unit.numel, 0.0f);
    reader.read(u, "master", 0, unit.numel - frozen, unit_values.data() + frozen);
    if (base) {
      for (const ParamSpec& spec : unit.params) {
        if (!is_lora_param(spec)) {
          base->read_into_f32(spec.name, spec.shape, unit_values.data() + spec.offset);
        }
      }
      merge_lora_unit(lora, unit, unit_values.data());
    }
    return unit_values.data();
  };
  // One writer per output dir: an export and a run (or two exports) never interleave files.
  // A path that exists and is not a dir is left to save_hf_checkpoint's error.
  DirLock out_lock;
  if (!fs::exists(out_dir, ec) || fs::is_directory(out_dir, ec)) {
    out_lock = DirLock(out_dir, "export --out");
  }
  const DType dtype = export_dtype(options.dtype, saved.config_toml);
  if (lora.enabled && !options.merge_lora) {
    save_peft_adapter(out_dir, lora, layout, assemble,
                      {saved.model_path, dtype, save.extra_files, save.extra_contents,
                       save.protected_dirs});
    return result;
  }
  // Merged: the base part of each LoRA unit is the plain model's unit (model/param_layout.h).
  save_hf_checkpoint(out_dir, model_config, make_param_layout(model_config), assemble, dtype, save);
  return result;
}

}  // namespace shardtrain
