#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"

namespace shardtrain {
namespace {

// Python's safetensors refuses headers above 100 MB; a larger length means a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kCorruptHint =
    "HINT: the file is truncated or corrupt; re-download or re-export it";

struct ParsedHeader {
  uint64_t data_begin = 0;  // file offset of the data section
  nlohmann::json json;
};

ParsedHeader parse_header(const MappedFile& file) {
  const std::string& path = file.path();
  if (file.size() < 8) {
    fail("{} is {} bytes, too short to be a safetensors file (needs an 8-byte header length); {}",
         path, file.size(), kCorruptHint);
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | file.data()[i];
  if (header_bytes > kMaxHeaderBytes) {
    fail("{} declares a {}-byte safetensors header, more than the {}-byte limit; {}", path,
         header_bytes, kMaxHeaderBytes, kCorruptHint);
  }
  if (header_bytes > file.size() - 8) {
    fail("{} declares a {}-byte header but only {} bytes follow the length field; {}", path,
         header_bytes, file.size() - 8, kCorruptHint);
  }
  const char* text = reinterpret_cast<const char*>(file.data()) + 8;
  ParsedHeader parsed;
  parsed.data_begin = 8 + header_bytes;
  parsed.json = nlohmann::json::parse(text, text + header_bytes, nullptr,
                                      /*allow_exceptions=*/false);
  if (parsed.json.is_discarded()) {
    fail("{} has a header that is not valid JSON; {}", path, kCorruptHint);
  }
  if (!parsed.json.is_object()) {
    fail("{} has a header that is not a JSON object; {}", path, kCorruptHint);
  }
  return parsed;
}

// Validates one header entry's JSON and returns it with `data` still relative (set later).
struct RawEntry {
  SafetensorsEntry entry;
  uint64_t begin = 0;
  uint64_t end = 0;
};

RawEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& value,
                     uint64_t data_bytes) {
  auto bad = [&](const std::string& what) {
    fail("{}: tensor '{}' {}; {}", path, name, what, kCorruptHint);
  };
  if (!value.is_object()) bad("is not a JSON object in the header");
  const auto dtype_it = value.find("dtype");
  const auto shape_it = value.find("shape");
  const auto offsets_it = value.find("data_offsets");
  if (dtype_it == value.end() || !dtype_it->is_string()) bad("has no string 'dtype'");
  if (shape_it == value.end() || !shape_it->is_array()) bad("has no array 'shape'");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    bad("has no 'data_offsets' array of two integers");
  }

  RawEntry raw;
  raw.entry.name = name;
  const std::string dtype_text = dtype_it->get<std::string>();
  const std::optional<DType> dtype = parse_safetensors_dtype(dtype_text);
  if (!dtype) {
    fail(
        "{}: tensor '{}' has dtype '{}', which shardtrain does not support (supported: F32, "
        "BF16, F16, I32); HINT: convert the checkpoint to bf16 or f32",
        path, name, dtype_text);
  }
  raw.entry.dtype = *dtype;

  if (shape_it->size() > static_cast<size_t>(Shape::kMaxDims)) {
    bad(fmt::format("has {} dimensions, more than the supported {}", shape_it->size(),
                    Shape::kMaxDims));
  }
  // Bound the element count so numel * dtype_size cannot overflow.
  const uint64_t max_numel = std::numeric_limits<int64_t>::max() / 8;
  uint64_t numel = 1;
  for (const auto& dim : *shape_it) {
    if (!dim.is_number_unsigned()) bad("has a shape dimension that is not a non-negative integer");
    const uint64_t d = dim.get<uint64_t>();
    if (d > max_numel || (d != 0 && numel > max_numel / d)) bad("has an absurdly large shape");
    numel *= d;
    raw.entry.shape.push_back(static_cast<int64_t>(d));
  }
  for (const auto& offset : *offsets_it) {
    if (!offset.is_number_unsigned()) bad("has a data offset that is not a non-negative integer");
  }
  raw.begin = (*offsets_it)[0].get<uint64_t>();
  raw.end = (*offsets_it)[1].get<uint64_t>();
  if (raw.begin > raw.end) {
    bad(fmt::format("has data_offsets [{}, {}] with begin after end", raw.begin, raw.end));
  }
  if (raw.end > data_bytes) {
    bad(fmt::format("has data_offsets [{}, {}] beyond the {}-byte data section", raw.begin, raw.end,
                    data_bytes));
  }
  const uint64_t expected = numel * dtype_size(raw.entry.dtype);
  if (raw.end - raw.begin != expected) {
    bad(fmt::format("spans {} bytes but dtype {} and shape {} need {} bytes", raw.end - raw.begin,
                    dtype_text, raw.entry.shape.to_string(), expected));
  }
  raw.entry.bytes = static_cast<size_t>(expected);
  return raw;
}

// As the reference implementation (safetensors' `validate`) requires: sorted by offset, the
// tensors' data regions tile the data section exactly, from 0 to its last byte, with no gap and
// no overlap (zero-byte tensors included: each must sit where the previous one ends).
void require_contiguous_data(const std::string& path, std::vector<RawEntry>& raw_entries,
                             uint64_t data_bytes) {
  std::sort(raw_entries.begin(), raw_entries.end(), [](const RawEntry& a, const RawEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected_begin = 0;
  const RawEntry* previous = nullptr;
  for (const RawEntry& current : raw_entries) {
    if (current.begin != expected_begin) {
      const std::string after =
          previous == nullptr ? std::string("the start of the data section")
                              : fmt::format("tensor '{}' (bytes {}..{})", previous->entry.name,
                                            previous->begin, previous->end);
      fail("{}: tensor '{}' (bytes {}..{}) {} {}; data regions must be contiguous; {}", path,
           current.entry.name, current.begin, current.end,
           current.begin < expected_begin ? "overlaps" : "leaves a gap after", after, kCorruptHint);
    }
    expected_begin = current.end;
    previous = &current;
  }
  if (expected_begin != data_bytes) {
    fail("{}: the tensors cover {} bytes of the {}-byte data section; {}", path, expected_begin,
         data_bytes, kCorruptHint);
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kU8:
      return "U8";
  }
  SHARDTRAIN_CHECK(false, "unknown dtype");
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "I32") return DType::kI32;
  return std::nullopt;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile result;
  result.file_ = MappedFile::open(path);
  ParsedHeader header = parse_header(result.file_);
  const uint64_t data_bytes = result.file_.size() - header.data_begin;

  std::vector<RawEntry> raw_entries;
  for (const auto& [name, value] : header.json.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) continue;  // metadata is informational only
      for (const auto& [key, text] : value.items()) {
        if (text.is_string()) result.metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    raw_entries.push_back(parse_entry(path, name, value, data_bytes));
  }

  require_contiguous_data(path, raw_entries, data_bytes);

  const uint8_t* data_section = result.file_.data() + header.data_begin;
  result.entries_.reserve(raw_entries.size());
  for (RawEntry& raw : raw_entries) {
    raw.entry.data = data_section + raw.begin;
    result.index_by_name_[raw.entry.name] = result.entries_.size();
    result.entries_.push_back(std::move(raw.entry));
  }
  return result;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_by_name_.find(name);
  return it == index_by_name_.end() ? nullptr : &entries_[it->second];
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsTensorSpec> tensors,
                                     std::map<std::string, std::string> metadata)
    : out_(std::move(path)), tensors_(std::move(tensors)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const SafetensorsTensorSpec& spec : tensors_) {
    if (spec.name.empty() || spec.name == "__metadata__" || !seen.insert(spec.name).second) {
      fail("cannot write {}: tensor name '{}' is empty, reserved or duplicated", out_.path(),
           spec.name);
    }
    const uint64_t bytes = static_cast<uint64_t>(spec.shape.numel()) * dtype_size(spec.dtype);
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int axis = 0; axis < spec.shape.rank(); ++axis) shape.push_back(spec.shape[axis]);
    header[spec.name] = {{"dtype", safetensors_dtype_name(spec.dtype)},
                         {"shape", std::move(shape)},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (the format allows trailing spaces).
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t length_le[8];
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) length_le[i] = static_cast<uint8_t>(length >> (8 * i));
  out_.write(length_le, sizeof(length_le));
  out_.write(text.data(), text.size());
}

void SafetensorsWriter::write_tensor(const std::string& name, const void* data, size_t bytes) {
  if (next_tensor_ >= tensors_.size() || tensors_[next_tensor_].name != name) {
    fail("cannot write {}: tensor '{}' written out of the declared order (expected '{}')",
         out_.path(), name,
         next_tensor_ < tensors_.size() ? tensors_[next_tensor_].name : "<none: all written>");
  }
  const SafetensorsTensorSpec& spec = tensors_[next_tensor_];
  const size_t expected = static_cast<size_t>(spec.shape.numel()) * dtype_size(spec.dtype);
  if (bytes != expected) {
    fail("cannot write {}: tensor '{}' got {} bytes but {} {} needs {}", out_.path(), name, bytes,
         safetensors_dtype_name(spec.dtype), spec.shape.to_string(), expected);
  }
  out_.write(data, bytes);
  ++next_tensor_;
}

void SafetensorsWriter::finish() {
  if (next_tensor_ != tensors_.size()) {
    fail("cannot finish {}: only {} of {} declared tensors were written (next: '{}')", out_.path(),
         next_tensor_, tensors_.size(), tensors_[next_tensor_].name);
  }
  out_.commit();
}

}  // namespace shardtrain
