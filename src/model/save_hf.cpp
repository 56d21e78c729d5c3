#include "model/save_hf.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/read_file.h"
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

// Whether `name` is a weight file or index this function writes (model.safetensors,
// model-0000K-of-0000N.safetensors, model.safetensors.index.json).
bool is_weight_file_name(const std::string& name) {
  if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
  static const std::regex sharded(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, sharded);
}

// Refuses an output dir that holds sharded training checkpoints (step_*/manifest.json, see
// train/checkpoint_dir.h) or is one of `protected_dirs` (e.g. the input model).
void refuse_unsafe_output_dir(const fs::path& target,
                              const std::vector<std::string>& protected_dirs) {
  std::error_code ec;
  for (const std::string& dir : protected_dirs) {
    if (!dir.empty() && fs::equivalent(target, dir, ec)) {
      fail(
          "cannot save to {}: it is the input dir {}; saving there would overwrite what is being "
          "read; HINT: choose another output dir",
          target.string(), dir);
    }
  }
  const auto is_step_dir = [&ec](const fs::path& dir) {
    return dir.filename().string().rfind("step_", 0) == 0 &&
           fs::is_regular_file(dir / "manifest.json", ec);
  };
  bool checkpoints = is_step_dir(target);
  for (fs::directory_iterator it(target, ec), end; !checkpoints && !ec && it != end;
       it.increment(ec)) {
    checkpoints = it->is_directory(ec) && is_step_dir(it->path());
  }
  if (checkpoints) {
    fail(
        "cannot save to {}: it holds sharded training checkpoints (step_*/manifest.json); "
        "HINT: write the Hugging Face model to another dir",
        target.string());
  }
}

// The files one save writes, in the order they are moved into the output dir: weights and
// index first, config.json last (a reader that finds the new config.json finds the new weights).
struct SavedFiles {
  std::set<std::string> weights;      // weight files and index
  std::vector<std::string> in_order;  // every file written
};

// Writes the weights, (when split) the index, the extra files and config.json into `out` (the
// staging dir).
SavedFiles write_hf_files(const fs::path& out, const ModelConfig& config, const ParamLayout& layout,
                          const UnitValues& unit_values, DType dtype,
                          const SaveHfOptions& options) {
  ModelConfig saved = config;
  saved.torch_dtype = dtype == DType::kBF16 ? "bfloat16" : "float32";
  std::set<std::string> written;

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
            (out / file_name(file)).string(), files[file],
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
      written.insert(file_name(file));
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
    write_file_atomically((out / "model.safetensors.index.json").string(), index.dump(2) + "\n");
    written.insert("model.safetensors.index.json");
  }
  SavedFiles files_out{written, {}};
  for (const std::string& name : written) {
    if (name != "model.safetensors.index.json") files_out.in_order.push_back(name);
  }
  if (written.count("model.safetensors.index.json")) {
    files_out.in_order.push_back("model.safetensors.index.json");
  }
  const auto add_extra = [&](const std::string& name, const std::string& contents) {
    write_file_atomically((out / name).string(), contents);
    // extra_contents may replace an extra file of the same name: written once, moved once.
    if (std::find(files_out.in_order.begin(), files_out.in_order.end(), name) ==
        files_out.in_order.end()) {
      files_out.in_order.push_back(name);
    }
  };
  for (const std::string& extra : options.extra_files) {
    add_extra(fs::path(extra).filename().string(), read_file(extra));
  }
  for (const auto& [name, contents] : options.extra_contents) add_extra(name, contents);
  write_file_atomically((out / "config.json").string(), write_hf_config_json(saved));
  files_out.in_order.push_back("config.json");
  return files_out;
}

constexpr const char* kStagingPrefix = ".shardtrain-save.";

// Staging dirs of a save that was killed before it finished: nothing else writes them (the
// output dir is locked by its run, train/checkpoint/dir_lock.h), so they are removed.
void remove_leftover_staging(const fs::path& out) {
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(kStagingPrefix, 0) == 0) {
      leftovers.push_back(it->path());
    }
  }
  for (const fs::path& path : leftovers) fs::remove_all(path, ec);
}

// Moves each staged file over its old version (rename: atomic per file, no new data blocks, so
// a full disk cannot stop it half-way as it stops a write), then makes the renames durable.
void move_into_place(const fs::path& staging, const fs::path& out,
                     const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    std::error_code ec;
    fs::rename(staging / name, out / name, ec);
    if (ec) {
      fail(
          "cannot move the saved {} into {}: {}; HINT: the files before it are already "
          "replaced; save again",
          name, out.string(), ec.message());
    }
  }
  const int dir_fd = ::open(out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

// Removes weight files of an earlier save (another shard count) that this save did not write,
// so loaders never mix old and new weights. Only names of is_weight_file_name are touched.
void remove_stale_weight_files(const fs::path& out, const std::set<std::string>& written) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) && is_weight_file_name(name) && written.count(name) == 0) {
      stale.push_back(it->path());
    }
  }
  for (const fs::path& path : stale) fs::remove(path, ec);
}

}  // namespace

std::vector<std::string> tokenizer_files_in(const std::string& model_dir) {
  // What transformers looks for next to the weights.
  static constexpr const char* kNames[] = {"tokenizer.json",
                                           "tokenizer_config.json",
                                           "special_tokens_map.json",
                                           "tokenizer.model",
                                           "vocab.json",
                                           "merges.txt",
                                           "added_tokens.json",
                                           "generation_config.json",
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
  std::error_code ec;
  if (fs::exists(target, ec) && !fs::is_directory(target, ec)) {
    fail("cannot save to {}: it exists and is not a directory; HINT: choose another output dir",
         target.string());
  }
  const bool created = !fs::exists(target, ec);
  fs::create_directories(target, ec);
  if (ec) {
    fail("cannot create directory {}: {}; HINT: check the output dir and its permissions",
         target.string(), ec.message());
  }
  refuse_unsafe_output_dir(target, options.protected_dirs);
  // Every new file is written in a staging dir first; only when all are complete do they
  // replace the old ones. A failure before that (full disk, a bad shard, a file-size limit)
  // removes the staging dir and leaves the old model exactly as it was.
  remove_leftover_staging(target);
  const fs::path staging = target / (kStagingPrefix + std::to_string(::getpid()));
  SavedFiles files;
  try {
    fs::create_directory(staging);
    files = write_hf_files(staging, config, layout, unit_values, dtype, options);
  } catch (const fs::filesystem_error& error) {
    fs::remove_all(staging, ec);
    if (created) fs::remove(target, ec);  // only when empty
    fail("cannot save to {}: {}; HINT: check the output dir and its permissions", target.string(),
         error.code().message());
  } catch (...) {
    fs::remove_all(staging, ec);
    if (created) fs::remove(target, ec);
    throw;
  }
  move_into_place(staging, target, files.in_order);
  fs::remove_all(staging, ec);
  remove_stale_weight_files(target, files.weights);
}

}  // namespace shardtrain
