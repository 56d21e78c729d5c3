#include "model/save_hf.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

namespace shardtrain {
namespace fs = std::filesystem;

namespace {

// Tensors in layout order, split into files of at most max_shard_bytes (0 = one file).
std::vector<std::vector<SafetensorsTensorSpec>> split_into_files(const ParamLayout& layout,
                                                                 DType dtype,
                                                                 uint64_t max_shard_bytes) {
  std::vector<std::vector<SafetensorsTensorSpec>> files(1);
  uint64_t file_bytes = 0;
  for (const UnitLayout& unit : layout.units) {
    for (const ParamSpec& p : unit.params) {
      const uint64_t bytes = static_cast<uint64_t>(p.numel()) * dtype_size(dtype);
      if (max_shard_bytes > 0 && !files.back().empty() && file_bytes + bytes > max_shard_bytes) {
        files.emplace_back();
        file_bytes = 0;
      }
      files.back().push_back({p.name, dtype, p.shape});
      file_bytes += bytes;
    }
  }
  return files;
}

// Writes config.json, the extra files, the weights and (when split) the index into `staging`.
void write_hf_files(const fs::path& staging, const ModelConfig& config, const ParamLayout& layout,
                    const UnitValues& unit_values, DType dtype, const SaveHfOptions& options) {
  std::error_code ec;
  ModelConfig saved = config;
  saved.torch_dtype = dtype == DType::kBF16 ? "bfloat16" : "float32";
  write_file_atomically((staging / "config.json").string(), write_hf_config_json(saved));
  for (const std::string& extra : options.extra_files) {
    fs::copy_file(extra, staging / fs::path(extra).filename(), ec);
    if (ec) fail("cannot copy {}: {}", extra, ec.message());
  }
  for (const auto& [name, contents] : options.extra_contents) {
    write_file_atomically((staging / name).string(), contents);
  }

  const std::vector<std::vector<SafetensorsTensorSpec>> files =
      split_into_files(layout, dtype, options.max_shard_bytes);
  const auto file_name = [&](size_t f) {
    return files.size() == 1
               ? std::string("model.safetensors")
               : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, files.size());
  };
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_bytes = 0;
  size_t file = 0, in_file = 0;
  std::unique_ptr<SafetensorsWriter> writer;
  std::vector<uint16_t> converted;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const float* values = unit_values(static_cast<int>(u));
    for (const ParamSpec& p : layout.units[u].params) {
      if (!writer) {
        writer = std::make_unique<SafetensorsWriter>(
            (staging / file_name(file)).string(), files[file],
            std::map<std::string, std::string>{{"format", "pt"}});
      }
      const float* src = values + p.offset;
      if (dtype == DType::kF32) {
        writer->write_tensor(p.name, src, static_cast<size_t>(p.numel()) * sizeof(float));
      } else {
        converted.resize(p.numel());
        convert_from_f32(src, dtype, converted.data(), converted.size());
        writer->write_tensor(p.name, converted.data(), converted.size() * sizeof(uint16_t));
      }
      weight_map[p.name] = file_name(file);
      total_bytes += static_cast<uint64_t>(p.numel()) * dtype_size(dtype);
      if (++in_file == files[file].size()) {
        writer->finish();
        writer.reset();
        ++file;
        in_file = 0;
      }
    }
  }
  if (files.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                                  {"weight_map", weight_map}};
    write_file_atomically((staging / "model.safetensors.index.json").string(),
                          index.dump(2) + "\n");
  }
}

}  // namespace

std::vector<std::string> tokenizer_files_in(const std::string& model_dir) {
  // What transformers looks for next to the weights.
  static constexpr const char* kNames[] = {"tokenizer.json",    "tokenizer_config.json",
                                           "special_tokens_map.json", "tokenizer.model",
                                           "vocab.json",        "merges.txt",
                                           "added_tokens.json", "generation_config.json",
                                           "chat_template.jinja"};
  std::vector<std::string> found;
  std::error_code ec;
  for (const char* name : kNames) {
    const fs::path source = fs::path(model_dir) / name;
    if (fs::is_regular_file(source, ec)) found.push_back(source.string());
  }
  return found;
}

void save_hf_checkpoint(const std::string& out_dir, const ModelConfig& config,
                        const ParamLayout& layout, const UnitValues& unit_values, DType dtype,
                        const SaveHfOptions& options) {
  SHARDTRAIN_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "save dtype");
  const fs::path target = fs::absolute(fs::path(out_dir)).lexically_normal();
  const fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec)
    fail("cannot create directory {}: {}; HINT: check train.output_dir", parent.string(),
         ec.message());
  const fs::path staging =
      parent / (target.filename().string() + ".tmp-" + std::to_string(getpid()));
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  if (ec)
    fail("cannot create {}: {}; HINT: check that {} is writable", staging.string(), ec.message(),
         parent.string());

  try {
    write_hf_files(staging, config, layout, unit_values, dtype, options);
  } catch (...) {
    fs::remove_all(staging, ec);  // no half-written directory is left behind
    throw;
  }

  // Swap the finished directory into place; the previous one is removed only afterwards.
  const fs::path previous = parent / (target.filename().string() + ".old-" + std::to_string(getpid()));
  const bool had_previous = fs::exists(target);
  if (had_previous) {
    fs::rename(target, previous, ec);
    if (ec) fail("cannot replace {}: {}", target.string(), ec.message());
  }
  fs::rename(staging, target, ec);
  if (ec) fail("cannot move {} to {}: {}", staging.string(), target.string(), ec.message());
  if (had_previous) fs::remove_all(previous, ec);
}

}  // namespace shardtrain
