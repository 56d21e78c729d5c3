// Safetensors: the Hugging Face tensor file format, read through a memory map and written as a
// stream.
//
// Format: 8-byte little-endian header length N, then N bytes of JSON
//   {"<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>"}}
// then the data section; offsets are relative to the start of the data section.
//
// SafetensorsFile::open validates the whole header before any tensor is exposed: every entry's
// dtype, shape and offsets must be well-formed, lie inside the data section, match
// numel * dtype_size, and not overlap another tensor. Any violation throws Error with one line
// naming the file (and the tensor) and a HINT. After open() succeeds, each entry's
// [data, data + bytes) is readable. Supported dtypes: F32, BF16, F16, I32.
//
// SafetensorsWriter streams a file: the header is computed from the declared tensor list, then
// tensors are written one at a time in declared order (peak memory = the caller's one tensor),
// and finish() commits atomically (io/atomic_file.h). Output loads in Python's `safetensors`.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace shardtrain {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;  // inside the file's mapping; valid while the file is open
  size_t bytes = 0;            // == shape.numel() * dtype_size(dtype)
};

// "F32", "BF16", "F16", "I32"; parse returns nullopt for any other string.
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  // nullptr when absent.
  const SafetensorsEntry* find(const std::string& name) const;
  // In data-offset order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_by_name_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

class SafetensorsWriter {
 public:
  // Writes the header immediately. Throws Error on duplicate or empty names, or if the file
  // cannot be created.
  SafetensorsWriter(std::string path, std::vector<SafetensorsTensorSpec> tensors,
                    std::map<std::string, std::string> metadata = {});

  // REQUIRES: `name` is the next declared tensor and `bytes` == its numel * dtype_size
  // (violations throw Error).
  void write_tensor(const std::string& name, const void* data, size_t bytes);
  // REQUIRES: every declared tensor was written. Makes the file visible at its path.
  void finish();

  const std::string& path() const { return out_.path(); }

 private:
  AtomicFileWriter out_;
  std::vector<SafetensorsTensorSpec> tensors_;
  size_t next_tensor_ = 0;
};

}  // namespace shardtrain
