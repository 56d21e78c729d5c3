#include "train/checkpoint/checkpoint.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/json_message.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "io/read_file.h"
#include "io/safetensors.h"
#include "obs/phase_progress.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace shardtrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kKinds[] = {"master", "exp_avg", "exp_avg_sq"};

std::string tensor_name(int unit, const char* kind) {
  return fmt::format("unit.{}.{}", unit, kind);
}

std::vector<int64_t> dims_of(const Shape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.rank(); ++i) dims.push_back(shape[i]);
  return dims;
}

nlohmann::json layout_json(const FsdpUnits& units, const ParamLayout& layout,
                           const std::string& strategy) {
  nlohmann::json unit_list = nlohmann::json::array();
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const UnitLayout& unit = layout.units[u];
    nlohmann::json params = nlohmann::json::array();
    for (const ParamSpec& p : unit.params) {
      params.push_back({{"name", p.name}, {"shape", dims_of(p.shape)}, {"offset", p.offset}});
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

// Runs `action` on this rank; every rank learns whether any rank failed (a collective).
// Returns "" when all succeeded, else this rank's message or a note that another rank failed.
std::string agree(FsdpUnits& units, const std::function<void()>& action) {
  std::string message;
  try {
    action();
  } catch (const Error& error) {
    message = error.what();
  }
  const int failures = units.mesh().count(!message.empty(), "checkpoint agreement");
  if (failures > 0 && message.empty()) {
    message = fmt::format("{} of {} ranks failed (see their logs)", failures, units.world_size());
  }
  return message;
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
      for (const char* kind : kKinds) {
        specs.push_back(
            {tensor_name(static_cast<int>(u), kind), DType::kF32, Shape{s.shard_numel[u]}});
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
      for (const char* kind : kKinds) {
        writer.write_tensor(tensor_name(static_cast<int>(u), kind), cursor,
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
    fail("{}: layout lists {} shard files for group size {}", state_path,
         saved.shard_files.size(), saved.group_size);
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
        dims != dims_of(p.shape) || params[i].at("offset").get<int64_t>() != p.offset) {
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
    const std::string name = tensor_name(unit, kind);
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
      reader.read(u, kKinds[k], begin, shard, host.data());
      ops.copy_from_host(targets[k], host.data());
    }
    progress.advance();
  }
  units.refresh_compute_params();
}

namespace {

ResumeResult resume_from(const std::string& resume, const std::string& dir, FsdpUnits& units,
                         Ops& ops, const ParamLayout& layout) {
  ResumeResult result;
  if (resume == "never") return result;
  std::vector<std::string> candidates;  // newest first
  bool fallback = false;
  if (resume == "auto") {
    if (dir.empty()) return result;
    const std::vector<int64_t> steps = complete_checkpoint_steps(dir);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it)
      candidates.push_back(step_dir_path(dir, *it));
    if (candidates.empty()) return result;
    fallback = true;
  } else {
    std::error_code ec;
    if (!fs::exists(resume, ec)) {
      fail(
          "--resume {}: no such checkpoint; HINT: give a step_XXXXXXXX directory or a "
          "checkpoint dir, or use --resume auto",
          resume);
    }
    candidates.push_back(named_checkpoint(resume, "--resume"));
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    SavedCheckpoint saved;
    const std::string failed = agree(units, [&] {
      saved = open_checkpoint(candidates[i], layout);
      load_checkpoint_shards(saved, units, ops);
    });
    if (failed.empty()) {
      result.resumed = true;
      result.progress = saved.progress;
      result.step_dir = candidates[i];
      result.config_toml = saved.config_toml;
      result.world_size = saved.world_size;
      return result;
    }
    // A layout mismatch (open_checkpoint's "saved for a different model", the same on every
    // rank) is the user's config, not damage: no older checkpoint would fit either.
    if (!fallback || failed.find("different model") != std::string::npos) throw Error(failed);
    if (i + 1 < candidates.size()) {
      log::warn("cannot resume from {}: {}; falling back to the previous checkpoint {}",
                candidates[i], failed, candidates[i + 1]);
      // Demoted to incomplete (every rank is past reading it): a later auto resume skips it,
      // and pruning removes it once a newer checkpoint is complete.
      if (units.world_rank() == 0) {
        std::error_code ec;
        fs::rename(fs::path(candidates[i]) / kManifestFile,
                   fs::path(candidates[i]) / (std::string(kManifestFile) + ".damaged"), ec);
      }
    } else {
      fail(
          "cannot resume from {}: {}; no older complete checkpoint in {} (HINT: use "
          "--resume never with a new --checkpoint-dir to start over)",
          candidates[i], failed, dir);
    }
  }
  return result;
}

}  // namespace

ResumeResult resume_training(const std::string& resume, const std::string& dir, FsdpUnits& units,
                             Ops& ops, const ParamLayout& layout) {
  const ResumeResult result = resume_from(resume, dir, units, ops, layout);
  // Saving into a dir that holds later checkpoints would mix two runs' histories.
  const std::vector<int64_t> steps = complete_checkpoint_steps(dir);
  if (!dir.empty() && !steps.empty() && steps.back() > result.progress.step) {
    fail(
        "checkpoint dir {} holds a checkpoint at step {}, after the step this run starts from "
        "({}); HINT: use --resume auto, or a new --checkpoint-dir",
        dir, steps.back(), result.progress.step);
  }
  return result;
}

void truncate_metrics_after(const std::string& path, int64_t step) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return;
  std::ifstream in(path);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.contains("step") && record["step"].get<int64_t>() > step) continue;
    } catch (const nlohmann::json::exception&) {
      continue;  // a torn last line from a crash
    }
    kept += line + "\n";
  }
  write_file_atomically(path, kept);
}

}  // namespace shardtrain
