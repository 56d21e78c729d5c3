// Opening and loading a sharded checkpoint (train/checkpoint/checkpoint.h): train_state.json
// verified and checked against this model's layout, then each rank's element ranges read from
// the saved shards that overlap them, at any world size and strategy.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_message.h"
#include "io/read_file.h"
#include "io/safetensors.h"
#include "obs/phase_progress.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_names.h"

namespace shardtrain {
namespace fs = std::filesystem;

namespace {

// train_state.json of a step dir, parsed after its manifest entry verified it.
struct TrainState {
  nlohmann::json json;
  std::string path;           // for messages
  int64_t manifest_step = 0;  // the step the manifest records
};

TrainState read_train_state(const std::string& step_dir) {
  const Manifest manifest = read_manifest(step_dir);
  const ManifestEntry* state_entry = manifest.find(kTrainStateFile);
  if (state_entry == nullptr)
    fail("{}/{} does not list {}", step_dir, kManifestFile, kTrainStateFile);
  verify_checkpoint_file(step_dir, *state_entry);
  TrainState state;
  state.path = (fs::path(step_dir) / kTrainStateFile).string();
  state.manifest_step = manifest.step;
  try {
    state.json = nlohmann::json::parse(read_file(state.path));
  } catch (const nlohmann::json::exception& error) {
    fail("{} is malformed: {}", state.path, json_message(error));
  }
  return state;
}

// The rest read parts of a parsed train_state.json; nlohmann exceptions (a missing key, a wrong
// type) reach open_checkpoint, which names the file.

TrainProgress read_progress(const nlohmann::json& j) {
  TrainProgress p;
  p.step = j.at("step").get<int64_t>();
  p.total_steps = j.at("total_steps").get<int64_t>();
  p.lr = j.at("lr").get<double>();
  p.tokens_seen = j.at("tokens_seen").get<int64_t>();
  p.elapsed_s = j.at("elapsed_s").get<double>();
  const nlohmann::json& s = j.at("sampler");
  p.sampler = {s.at("epoch").get<uint64_t>(), s.at("index").get<uint64_t>(),
               s.at("seed").get<uint64_t>(), s.at("dataset_size").get<uint64_t>(),
               s.at("world").get<uint64_t>()};
  return p;
}

// The layout's groups and files into `saved`, checked against each other and this run's
// expert parallelism.
void read_saved_groups(const nlohmann::json& l, const ParamLayout& layout,
                       const std::string& state_path, SavedCheckpoint& saved) {
  saved.world_size = l.at("world_size").get<int>();
  saved.group_size = l.at("group_size").get<int>();
  saved.strategy = l.at("strategy").get<std::string>();
  saved.shard_files = l.at("shard_files").get<std::vector<std::string>>();
  saved.expert_parallel = l.value("expert_parallel", 1);
  if (saved.expert_parallel != layout.expert_parallel) {
    fail(
        "checkpoint {} was saved with fsdp.expert_parallel = {}, this run has {}; HINT: "
        "resume with --fsdp.expert_parallel={}",
        saved.step_dir, saved.expert_parallel, layout.expert_parallel, saved.expert_parallel);
  }
  if (saved.expert_parallel < 1 || saved.group_size % saved.expert_parallel != 0) {
    fail("{}: expert_parallel {} for a shard group of {}", state_path, saved.expert_parallel,
         saved.group_size);
  }
  if (static_cast<int>(saved.shard_files.size()) != saved.group_size) {
    fail("{}: layout lists {} shard files for group size {}", state_path, saved.shard_files.size(),
         saved.group_size);
  }
}

// How saved unit u differs from this model's (empty: it does not).
std::string unit_mismatch(const nlohmann::json& saved_unit, const SavedUnit& unit, size_t u,
                          const UnitLayout& want) {
  const nlohmann::json& params = saved_unit.at("params");
  if (unit.name != want.name || unit.numel != want.numel || unit.experts != want.experts ||
      params.size() != want.params.size()) {
    return fmt::format("unit {} is {} with {} elements there, {} with {} here", u, unit.name,
                       unit.numel, want.name, want.numel);
  }
  // Units of experts are rank 0's there: their names differ from this expert rank's, their
  // shapes and offsets do not.
  const bool compare_names = !unit.experts;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = want.params[i];
    const auto dims = params[i].at("shape").get<std::vector<int64_t>>();
    if ((compare_names && params[i].at("name").get<std::string>() != p.name) ||
        dims != shape_dims(p.shape) || params[i].at("offset").get<int64_t>() != p.offset) {
      return fmt::format(
          "parameter {} of unit {} is {} {} at offset {} there, {} {} at offset {} here", i, u,
          params[i].at("name").get<std::string>(), fmt::format("[{}]", fmt::join(dims, ", ")),
          params[i].at("offset").get<int64_t>(), p.name, p.shape.to_string(), p.offset);
    }
  }
  return "";
}

// Saved unit u, checked against this model's unit and the saved groups.
SavedUnit read_saved_unit(const nlohmann::json& saved_unit, size_t u, const UnitLayout& want,
                          const SavedCheckpoint& saved, const std::string& state_path) {
  SavedUnit unit{saved_unit.at("name").get<std::string>(), saved_unit.at("numel").get<int64_t>(),
                 saved_unit.at("shard_numel").get<int64_t>(),
                 saved_unit.value("frozen_numel", int64_t{0}), saved_unit.value("experts", false)};
  const std::string mismatch = unit_mismatch(saved_unit, unit, u, want);
  if (!mismatch.empty()) {
    fail(
        "checkpoint {} was saved for a different model (layout mismatch: {}); HINT: "
        "resume with the model config it was saved with (copy: {}/{}); a checkpoint of an "
        "older shardtrain with another layout: export it with that version first",
        saved.step_dir, mismatch, saved.step_dir, kModelConfigFile);
  }
  const int unit_group = unit.experts ? saved.group_size / saved.expert_parallel : saved.group_size;
  if (unit.frozen_numel < 0 || unit.frozen_numel > unit.numel ||
      unit.shard_numel * unit_group < unit.trainable_numel()) {
    fail("{}: unit {} shards ({} x {}) do not cover its {} trainable elements", state_path, u,
         unit.shard_numel, unit_group, unit.trainable_numel());
  }
  return unit;
}

}  // namespace

std::string read_checkpoint_config_toml(const std::string& step_dir) {
  const nlohmann::json state = read_train_state(step_dir).json;
  try {
    return state.at("config_toml").get<std::string>();
  } catch (const nlohmann::json::exception& error) {
    fail("{}/{} is malformed: {}", step_dir, kTrainStateFile, json_message(error));
  }
}

int read_checkpoint_expert_parallel(const std::string& step_dir) {
  const nlohmann::json state = read_train_state(step_dir).json;
  try {
    const int n = state.at("layout").value("expert_parallel", 1);
    if (n < 1) fail("{}/{}: expert_parallel {}", step_dir, kTrainStateFile, n);
    return n;
  } catch (const nlohmann::json::exception& error) {
    fail("{}/{} is malformed: {}", step_dir, kTrainStateFile, json_message(error));
  }
}

SavedCheckpoint open_checkpoint(const std::string& step_dir, const ParamLayout& layout) {
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec)) fail("checkpoint {} does not exist", step_dir);
  const TrainState state = read_train_state(step_dir);
  SavedCheckpoint saved;
  saved.step_dir = step_dir;
  try {
    const nlohmann::json& j = state.json;
    saved.progress = read_progress(j);
    saved.config_toml = j.at("config_toml").get<std::string>();
    saved.model_path = j.at("model_path").get<std::string>();
    const nlohmann::json& l = j.at("layout");
    read_saved_groups(l, layout, state.path, saved);
    const nlohmann::json& units = l.at("units");
    if (units.size() != layout.units.size()) {
      fail(
          "checkpoint {} was saved for a different model: {} units there, {} in this model "
          "({} layers); HINT: resume with the model config it was saved with (copy: {}/{})",
          step_dir, units.size(), layout.units.size(), layout.units.size() - 1, step_dir,
          kModelConfigFile);
    }
    for (size_t u = 0; u < units.size(); ++u) {
      saved.units.push_back(read_saved_unit(units[u], u, layout.units[u], saved, state.path));
    }
  } catch (const nlohmann::json::exception& error) {
    fail("{} is malformed: {}", state.path, json_message(error));
  }
  if (saved.progress.step != state.manifest_step) {
    fail("{}: step {} but the manifest says {}", state.path, saved.progress.step,
         state.manifest_step);
  }
  return saved;
}

namespace {

// The shard file's own record of what it holds must agree with where the manifest puts it: the
// checksums only prove the bytes are the ones saved, not that they are this rank's. Keys that
// older checkpoints lack (world_size, units) are checked where present.
void check_shard_header(const SafetensorsFile& file, int shard_rank,
                        const SavedCheckpoint& checkpoint, int64_t step) {
  const auto& metadata = file.metadata();
  const auto expect = [&](const char* key, const std::string& want, bool required) {
    const auto found = metadata.find(key);
    if (found == metadata.end() && !required) return;
    const std::string have = found == metadata.end() ? "(absent)" : found->second;
    if (have != want) {
      fail(
          "checkpoint file {}: its header says {} = {}, but the checkpoint expects {} there; "
          "HINT: the shard files were renamed, swapped or copied from another checkpoint; "
          "restore them or resume from another checkpoint",
          file.path(), key, have, want);
    }
  };
  expect("format", "shardtrain-shard", true);
  expect("shard_rank", std::to_string(shard_rank), true);
  expect("group_size", std::to_string(checkpoint.group_size), true);
  expect("step", std::to_string(step), true);
  expect("world_size", std::to_string(checkpoint.world_size), false);
  expect("units", std::to_string(checkpoint.units.size()), false);
}

}  // namespace

struct CheckpointShardReader::OpenFiles {
  Manifest manifest;
  std::map<int, SafetensorsFile> by_shard;
};

CheckpointShardReader::CheckpointShardReader(const SavedCheckpoint& checkpoint, int expert_rank)
    : checkpoint_(checkpoint), expert_rank_(expert_rank), files_(std::make_unique<OpenFiles>()) {
  files_->manifest = read_manifest(checkpoint.step_dir);
}
CheckpointShardReader::~CheckpointShardReader() = default;

void CheckpointShardReader::read(int unit, const char* kind, int64_t begin, int64_t count,
                                 float* dst) {
  std::fill(dst, dst + count, 0.0f);
  const SavedUnit& saved = checkpoint_.units[unit];
  const int64_t end = std::min(begin + count, saved.trainable_numel());
  const int64_t shard = saved.shard_numel;
  for (int64_t lo = begin; lo < end;) {
    const int part = static_cast<int>(lo / shard);  // the saved (expert) shard rank
    const int64_t hi = std::min(end, (part + 1) * shard);
    // A unit of experts: this expert rank's shards are those of shard ranks j + N x part.
    const int k = saved.experts ? expert_rank_ + checkpoint_.expert_parallel * part : part;
    auto it = files_->by_shard.find(k);
    if (it == files_->by_shard.end()) {
      const std::string& file = checkpoint_.shard_files[k];
      const ManifestEntry* entry = files_->manifest.find(file);
      if (entry == nullptr)
        fail("{}/{} does not list {}", checkpoint_.step_dir, kManifestFile, file);
      verify_checkpoint_file(checkpoint_.step_dir, *entry);
      it = files_->by_shard
               .emplace(k, SafetensorsFile::open((fs::path(checkpoint_.step_dir) / file).string()))
               .first;
      check_shard_header(it->second, k, checkpoint_, files_->manifest.step);
    }
    const std::string name = checkpoint_tensor_name(unit, kind);
    const SafetensorsEntry* tensor = it->second.find(name);
    if (tensor == nullptr || tensor->dtype != DType::kF32 || tensor->shape.numel() != shard) {
      fail(
          "checkpoint file {} lacks tensor {} (F32, {} elements); HINT: the checkpoint is "
          "damaged or from another program",
          it->second.path(), name, shard);
    }
    const float* values = static_cast<const float*>(tensor->data);
    std::copy(values + (lo - part * shard), values + (hi - part * shard), dst + (lo - begin));
    lo = hi;
  }
}

void load_checkpoint_shards(const SavedCheckpoint& checkpoint, FsdpUnits& units, Ops& ops) {
  CheckpointShardReader reader(checkpoint, units.mesh().expert_rank());
  units.settle_updates();   // the copies below overwrite the shards an update may still be writing
  std::vector<float> host;  // (shard_numel) one tensor at a time
  PhaseProgress progress("load checkpoint " + checkpoint.step_dir,
                         static_cast<uint64_t>(units.unit_count()), "units",
                         units.world_rank() == 0);
  for (int u = 0; u < units.unit_count(); ++u) {
    const int64_t begin = units.shard_begin(u), shard = units.plan().units[u].shard_numel;
    host.resize(shard);
    const Tensor targets[] = {units.master_shard(u), units.exp_avg_shard(u),
                              units.exp_avg_sq_shard(u)};
    for (int k = 0; k < 3; ++k) {
      reader.read(u, kCheckpointKinds[k], begin, shard, host.data());
      ops.copy_from_host(targets[k], host.data());
    }
    progress.advance();
  }
  units.refresh_compute_params();
}

}  // namespace shardtrain
