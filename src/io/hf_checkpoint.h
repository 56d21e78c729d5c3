// HfCheckpoint: a Hugging Face model directory (config.json + safetensors weights), opened for
// reading tensors by name.
//
// Accepts a single `model.safetensors` (preferred when present) or a sharded checkpoint described
// by `model.safetensors.index.json` ({"weight_map": {tensor name: shard file}}). open() validates
// the directory, config.json's presence, the index and every shard header (io/safetensors.h), and
// that every tensor the index lists is in its shard; all failures throw Error naming the path and
// the fix. PyTorch `.bin` pickles are rejected with the conversion command.
//
// Reads convert bf16/f16/f32 to fp32 on the fly from the memory map, so a rank that reads only
// its FSDP shard (read_range_into_f32) touches only those bytes. Movable, not copyable.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace shardtrain {

class HfCheckpoint {
 public:
  static HfCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::string config_json_path() const;
  // nullptr when no shard holds `name`. A multimodal checkpoint's language model answers to
  // the text model's names: "model.X" finds model.language_model.X (transformers 5) or
  // language_model.model.X (Gemma 3 on the Hub); the vision tower's tensors are ignored.
  const SafetensorsEntry* find(const std::string& name) const;
  // Sorted.
  std::vector<std::string> tensor_names() const;

  // Reads all of tensor `name` as fp32 into dst (expected.numel() floats). Throws Error if the
  // tensor is missing, its shape differs from `expected`, or its dtype is not a float type.
  void read_into_f32(const std::string& name, const Shape& expected, float* dst) const;
  // Reads elements [begin_elem, begin_elem + count) of the row-major flattened tensor.
  // REQUIRES: 0 <= begin_elem, 0 <= count, begin_elem + count <= expected.numel().
  void read_range_into_f32(const std::string& name, const Shape& expected, int64_t begin_elem,
                           int64_t count, float* dst) const;

 private:
  const SafetensorsEntry& checked_entry(const std::string& name, const Shape& expected) const;
  const SafetensorsFile& shard_of(const std::string& name) const;
  // The entry of shard_by_name_ that holds `name` (see find), or end().
  std::unordered_map<std::string, size_t>::const_iterator locate(const std::string& name) const;

  std::string dir_;
  std::vector<SafetensorsFile> shards_;
  std::unordered_map<std::string, size_t> shard_by_name_;
};

}  // namespace shardtrain
