// Saving a sharded checkpoint (train/checkpoint/checkpoint.h): the host snapshot of this rank's
// shards and the run state, the background write of its files, and the manifest once every
// rank is done.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/read_file.h"
#include "io/safetensors.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_names.h"

namespace shardtrain {
namespace fs = std::filesystem;
namespace {

nlohmann::json layout_json(const FsdpUnits& units, const ParamLayout& layout,
                           const std::string& strategy) {
  nlohmann::json unit_list = nlohmann::json::array();
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const UnitLayout& unit = layout.units[u];
    nlohmann::json params = nlohmann::json::array();
    for (const ParamSpec& p : unit.params) {
      params.push_back({{"name", p.name}, {"shape", shape_dims(p.shape)}, {"offset", p.offset}});
    }
    unit_list.push_back({{"name", unit.name},
                         {"numel", unit.numel},
                         {"frozen_numel", units.plan().units[u].frozen_numel},
                         {"shard_numel", units.plan().units[u].shard_numel},
                         {"experts", unit.experts},
                         {"params", params}});
  }
  const int group_size = units.plan().group_size;
  nlohmann::json shard_files = nlohmann::json::array();
  for (int k = 0; k < group_size; ++k) shard_files.push_back(rank_file_name(k));
  return {{"world_size", units.world_size()},
          {"group_size", group_size},
          {"strategy", strategy},
          {"alignment_elems", kParamAlignElems},
          {"shard_files", shard_files},
          {"units", unit_list},
          {"expert_parallel", layout.expert_parallel}};
}

nlohmann::json sampler_json(const SamplerState& s) {
  return {{"epoch", s.epoch},
          {"index", s.index},
          {"seed", s.seed},
          {"dataset_size", s.dataset_size},
          {"world", s.world}};
}

ManifestEntry write_small_file(const std::string& step_dir, const std::string& file,
                               const std::string& contents) {
  const std::string path = (fs::path(step_dir) / file).string();
  write_file_atomically(path, contents);
  return {file, {contents.size(), xxhash64(contents.data(), contents.size())}};
}

}  // namespace

void snapshot_checkpoint(const std::string& dir, FsdpUnits& units, Ops& ops,
                         const ParamLayout& layout, const CheckpointRunInfo& info,
                         const TrainProgress& progress, CheckpointSnapshot* snapshot) {
  CheckpointSnapshot& s = *snapshot;
  s.step = progress.step;
  s.step_dir = step_dir_path(dir, progress.step);
  s.writes_shard = units.replicate_rank() == 0;
  SHARDTRAIN_CHECK(!s.writes_shard || units.world_rank() == units.shard_rank(),
                   "replicate group 0 is world ranks [0, G)");
  s.shard_rank = units.shard_rank();
  s.group_size = units.plan().group_size;
  s.world_size = units.world_size();
  s.shard_numel.clear();
  int64_t total = 0;
  for (int u = 0; u < units.unit_count(); ++u) {
    s.shard_numel.push_back(units.plan().units[u].shard_numel);
    total += 3 * s.shard_numel.back();
  }
  if (s.writes_shard) {
    // Grows once; later checkpoints reuse the buffer (the values are all overwritten).
    if (s.shard_values.size() < static_cast<size_t>(total)) s.shard_values.resize(total);
    float* cursor = s.shard_values.data();
    for (int u = 0; u < units.unit_count(); ++u) {
      for (const Tensor& shard :
           {units.master_shard(u), units.exp_avg_shard(u), units.exp_avg_sq_shard(u)}) {
        ops.copy_to_host(cursor, shard);
        cursor += shard.numel();
      }
    }
  }
  s.writes_run_state = units.world_rank() == 0;
  s.train_state_json.clear();
  s.model_config_path = info.model_config_path;
  if (!s.writes_run_state) return;
  const nlohmann::json state = {
      {"format", "shardtrain-train-state"},
      {"version", 1},
      {"step", progress.step},
      {"total_steps", progress.total_steps},
      {"lr", progress.lr},
      {"tokens_seen", progress.tokens_seen},
      {"elapsed_s", progress.elapsed_s},
      {"sampler", sampler_json(progress.sampler)},
      {"rng", "none: init and data order derive from train.seed and the sampler state"},
      {"model_path", info.model_path},
      {"config_toml", info.config_toml},
      {"layout", layout_json(units, layout, info.strategy)}};
  s.train_state_json = state.dump(1) + "\n";
}

CheckpointFilesWritten write_checkpoint_files(const CheckpointSnapshot& s,
                                              std::chrono::milliseconds delay_per_file) {
  CheckpointFilesWritten written;
  if (!s.writes_shard && !s.writes_run_state) return written;
  const auto before_file = [&] {
    if (delay_per_file.count() > 0) std::this_thread::sleep_for(delay_per_file);
  };
  std::error_code ec;
  fs::create_directories(s.step_dir, ec);
  if (ec) {
    fail("cannot create checkpoint dir {}: {}; HINT: check train.checkpoint_dir", s.step_dir,
         ec.message());
  }
  // An existing directory for this step (an abandoned run, an interrupted save) loses its
  // manifest before any file in it changes: each writing rank removes it before touching a file
  // of its own, so no rank needs to wait for another.
  fs::remove(fs::path(s.step_dir) / kManifestFile, ec);

  if (s.writes_shard) {
    before_file();
    std::vector<SafetensorsTensorSpec> specs;
    for (size_t u = 0; u < s.shard_numel.size(); ++u) {
      for (const char* kind : kCheckpointKinds) {
        specs.push_back({checkpoint_tensor_name(static_cast<int>(u), kind), DType::kF32,
                         Shape{s.shard_numel[u]}});
      }
    }
    const std::string file = rank_file_name(s.shard_rank);
    const std::string path = (fs::path(s.step_dir) / file).string();
    SafetensorsWriter writer(path, specs,
                             {{"format", "shardtrain-shard"},
                              {"step", std::to_string(s.step)},
                              {"shard_rank", std::to_string(s.shard_rank)},
                              {"group_size", std::to_string(s.group_size)},
                              {"world_size", std::to_string(s.world_size)},
                              {"units", std::to_string(s.shard_numel.size())}});
    const float* cursor = s.shard_values.data();
    for (size_t u = 0; u < s.shard_numel.size(); ++u) {
      for (const char* kind : kCheckpointKinds) {
        writer.write_tensor(checkpoint_tensor_name(static_cast<int>(u), kind), cursor,
                            s.shard_numel[u] * sizeof(float));
        cursor += s.shard_numel[u];
      }
    }
    writer.finish();
    const ManifestEntry entry{file, file_xxhash64(path)};
    written.bytes += entry.digest.bytes;
    before_file();
    write_rank_digest(s.step_dir, s.shard_rank, entry);
  }
  if (s.writes_run_state) {
    before_file();
    written.run_state_files.push_back(
        write_small_file(s.step_dir, kTrainStateFile, s.train_state_json));
    before_file();
    written.run_state_files.push_back(
        write_small_file(s.step_dir, kModelConfigFile, read_file(s.model_config_path)));
    for (const ManifestEntry& e : written.run_state_files) written.bytes += e.digest.bytes;
  }
  return written;
}

std::vector<std::string> finalize_checkpoint(const std::string& dir, int64_t keep, int64_t step,
                                             int group_size,
                                             const std::vector<ManifestEntry>& run_state_files) {
  const std::string step_dir = step_dir_path(dir, step);
  Manifest manifest;
  manifest.step = step;
  // Digests of shard ranks >= group_size can only be left over from an abandoned save of this
  // step at another world size; they are dropped with the rest.
  const std::vector<ManifestEntry> digests = take_rank_digests(step_dir);
  for (int k = 0; k < group_size; ++k) {
    const std::string file = rank_file_name(k);
    const auto it = std::find_if(digests.begin(), digests.end(),
                                 [&](const ManifestEntry& e) { return e.file == file; });
    if (it == digests.end()) {
      fail(
          "no digest of {} in {} (expected {} shard files); HINT: a rank's write was lost, "
          "check that every rank sees the same checkpoint dir",
          file, step_dir, group_size);
    }
    manifest.files.push_back(*it);
  }
  manifest.files.insert(manifest.files.end(), run_state_files.begin(), run_state_files.end());
  write_manifest(step_dir, manifest);
  return prune_checkpoints(dir, keep);
}

}  // namespace shardtrain
