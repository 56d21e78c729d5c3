#include "model/save_hf.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

namespace shardtrain {
namespace fs = std::filesystem;

void save_hf_checkpoint(const std::string& out_dir, const ModelConfig& config,
                        const ParamLayout& layout, const UnitValues& unit_values, DType dtype) {
  SHARDTRAIN_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "save dtype");
  const fs::path target = fs::absolute(fs::path(out_dir)).lexically_normal();
  const fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail("cannot create directory {}: {}; HINT: check train.output_dir", parent.string(), ec.message());
  const fs::path staging = parent / (target.filename().string() + ".tmp-" + std::to_string(getpid()));
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  if (ec) fail("cannot create {}: {}; HINT: check that {} is writable", staging.string(), ec.message(), parent.string());

  ModelConfig saved = config;
  saved.torch_dtype = dtype == DType::kBF16 ? "bfloat16" : "float32";
  write_file_atomically((staging / "config.json").string(), write_hf_config_json(saved));

  std::vector<SafetensorsTensorSpec> specs;
  for (const UnitLayout& unit : layout.units)
    for (const ParamSpec& p : unit.params) specs.push_back({p.name, dtype, p.shape});
  SafetensorsWriter writer((staging / "model.safetensors").string(), specs,
                           {{"format", "pt"}});
  std::vector<uint16_t> converted;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const float* values = unit_values(static_cast<int>(u));
    for (const ParamSpec& p : layout.units[u].params) {
      const float* src = values + p.offset;
      if (dtype == DType::kF32) {
        writer.write_tensor(p.name, src, static_cast<size_t>(p.numel()) * sizeof(float));
      } else {
        converted.resize(p.numel());
        convert_from_f32(src, dtype, converted.data(), converted.size());
        writer.write_tensor(p.name, converted.data(), converted.size() * sizeof(uint16_t));
      }
    }
  }
  writer.finish();

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
