#include "io/hf_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/read_file.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

void check_directory(const std::string& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (ec || !fs::exists(status)) {
    fail("checkpoint directory {} does not exist; HINT: check the path", dir);
  }
  if (!fs::is_directory(status)) {
    fail("checkpoint path {} is not a directory; HINT: pass the directory that holds config.json",
         dir);
  }
  if (::access(dir.c_str(), R_OK | X_OK) != 0) {
    fail("checkpoint directory {} is not readable; HINT: check its permissions", dir);
  }
}

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// Shard file names from the index must stay inside the checkpoint directory.
bool is_plain_relative(const std::string& file) {
  const fs::path path(file);
  if (file.empty() || path.is_absolute()) return false;
  for (const auto& part : path)
    if (part == "..") return false;
  return true;
}

std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  // One line per tensor: a few MiB for the largest models.
  const std::string text =
      read_small_file(index_path, std::uintmax_t{256} << 20, "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(text, nullptr, false);
  const char* hint =
      "HINT: the checkpoint is corrupt; re-download it or re-save it with "
      "save_pretrained";
  if (index.is_discarded()) fail("{} is not valid JSON; {}", index_path, hint);
  if (!index.is_object()) fail("{} is not a JSON object; {}", index_path, hint);
  const auto it = index.find("weight_map");
  if (it == index.end() || !it->is_object()) {
    fail("{} has no 'weight_map' object; {}", index_path, hint);
  }
  if (it->empty()) fail("{} has an empty 'weight_map'; {}", index_path, hint);
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, file] : it->items()) {
    if (!file.is_string() || !is_plain_relative(file.get<std::string>())) {
      fail("{}: weight_map entry '{}' is not a shard file name inside the directory; {}",
           index_path, tensor, hint);
    }
    weight_map[tensor] = file.get<std::string>();
  }
  return weight_map;
}

}  // namespace

HfCheckpoint HfCheckpoint::open(const std::string& dir) {
  check_directory(dir);
  HfCheckpoint checkpoint;
  checkpoint.dir_ = dir;
  const fs::path root(dir);
  if (!is_file(root / "config.json")) {
    fail(
        "checkpoint directory {} has no config.json; HINT: pass a Hugging Face model directory "
        "(the one save_pretrained wrote)",
        dir);
  }

  if (is_file(root / kSingleFile)) {
    checkpoint.shards_.push_back(SafetensorsFile::open((root / kSingleFile).string()));
    for (const SafetensorsEntry& entry : checkpoint.shards_[0].entries()) {
      checkpoint.shard_by_name_[entry.name] = 0;
    }
    return checkpoint;
  }

  const std::string index_path = (root / kIndexFile).string();
  if (!is_file(index_path)) {
    fail(
        "checkpoint directory {} has neither {} nor {} (PyTorch .bin pickles are not "
        "supported); HINT: convert it with python -c \"from transformers import "
        "AutoModelForCausalLM as M; M.from_pretrained('{}').save_pretrained('{}', "
        "safe_serialization=True)\"",
        dir, kSingleFile, kIndexFile, dir, dir);
  }
  const std::map<std::string, std::string> weight_map = read_weight_map(index_path);
  std::map<std::string, size_t> shard_by_file;
  for (const auto& [tensor, file] : weight_map) {
    if (shard_by_file.count(file)) continue;
    const fs::path shard_path = root / file;
    if (!is_file(shard_path)) {
      fail(
          "{} lists tensor '{}' in shard {}, which is missing; HINT: the download is incomplete; "
          "re-download the checkpoint",
          index_path, tensor, shard_path.string());
    }
    shard_by_file[file] = checkpoint.shards_.size();
    checkpoint.shards_.push_back(SafetensorsFile::open(shard_path.string()));
  }
  for (const auto& [tensor, file] : weight_map) {
    const size_t shard = shard_by_file.at(file);
    if (checkpoint.shards_[shard].find(tensor) == nullptr) {
      fail(
          "{} lists tensor '{}' in {}, but that shard does not contain it; HINT: the checkpoint "
          "is inconsistent; re-download it",
          index_path, tensor, checkpoint.shards_[shard].path());
    }
    checkpoint.shard_by_name_[tensor] = shard;
  }
  return checkpoint;
}

std::string HfCheckpoint::config_json_path() const {
  return (fs::path(dir_) / "config.json").string();
}

std::unordered_map<std::string, size_t>::const_iterator HfCheckpoint::locate(
    const std::string& name) const {
  auto it = shard_by_name_.find(name);
  if (it != shard_by_name_.end()) return it;
  // A multimodal checkpoint's language model (Gemma 3 4B-27B): transformers 5 saves it as
  // model.language_model.*, the Hub's files hold language_model.model.* and
  // language_model.lm_head.weight. The other towers' tensors are never asked for.
  const std::string model_prefix = "model.";
  if (name.compare(0, model_prefix.size(), model_prefix) == 0) {
    const std::string rest = name.substr(model_prefix.size());
    for (const char* prefix : {"model.language_model.", "language_model.model."}) {
      it = shard_by_name_.find(std::string(prefix) + rest);
      if (it != shard_by_name_.end()) return it;
    }
  }
  if (name == "lm_head.weight") return shard_by_name_.find("language_model.lm_head.weight");
  return shard_by_name_.end();
}

const SafetensorsEntry* HfCheckpoint::find(const std::string& name) const {
  const auto it = locate(name);
  return it == shard_by_name_.end() ? nullptr : shards_[it->second].find(it->first);
}

const SafetensorsFile& HfCheckpoint::shard_of(const std::string& name) const {
  return shards_[locate(name)->second];
}

std::vector<std::string> HfCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(shard_by_name_.size());
  for (const auto& [name, shard] : shard_by_name_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

const SafetensorsEntry& HfCheckpoint::checked_entry(const std::string& name,
                                                    const Shape& expected) const {
  const SafetensorsEntry* entry = find(name);
  if (entry == nullptr) {
    fail(
        "tensor '{}' not found in checkpoint {}; HINT: is this checkpoint for a different model "
        "type?",
        name, dir_);
  }
  if (entry->shape != expected) {
    fail(
        "tensor '{}' in {} has shape {} but the model config expects {}; HINT: check that "
        "config.json matches the weights",
        name, shard_of(name).path(), entry->shape.to_string(), expected.to_string());
  }
  if (entry->dtype == DType::kI32) {
    fail(
        "tensor '{}' in {} has dtype I32 where a floating-point weight is expected; HINT: is "
        "this checkpoint for a different model type?",
        name, shard_of(name).path());
  }
  return *entry;
}

void HfCheckpoint::read_into_f32(const std::string& name, const Shape& expected, float* dst) const {
  read_range_into_f32(name, expected, 0, expected.numel(), dst);
}

void HfCheckpoint::read_range_into_f32(const std::string& name, const Shape& expected,
                                       int64_t begin_elem, int64_t count, float* dst) const {
  const SafetensorsEntry& entry = checked_entry(name, expected);
  SHARDTRAIN_CHECK(begin_elem >= 0 && count >= 0 && begin_elem <= expected.numel() - count,
                   "range [{}, +{}) outside tensor {} of {} elements", begin_elem, count, name,
                   expected.numel());
  const char* src = static_cast<const char*>(entry.data) +
                    static_cast<size_t>(begin_elem) * dtype_size(entry.dtype);
  convert_to_f32(src, entry.dtype, dst, static_cast<size_t>(count));
}

}  // namespace shardtrain
