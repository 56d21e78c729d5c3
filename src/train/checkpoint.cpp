#include "train/checkpoint.h"

#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/read_file.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint_dir.h"

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
                         {"shard_numel", units.plan().units[u].shard_numel},
                         {"params", params}});
  }
  const int group_size = units.plan().group_size;
  nlohmann::json shard_files = nlohmann::json::array();
  for (int k = 0; k < group_size; ++k) shard_files.push_back(rank_file_name(k));
  return {
      {"world_size", units.world_size()},    {"group_size", group_size},   {"strategy", strategy},
      {"alignment_elems", kParamAlignElems}, {"shard_files", shard_files}, {"units", unit_list}};
}

nlohmann::json sampler_json(const SamplerState& s) {
  return {{"epoch", s.epoch},
          {"index", s.index},
          {"seed", s.seed},
          {"dataset_size", s.dataset_size},
          {"world", s.world}};
}

// Writes this rank's shard file; returns its size and checksum.
ManifestEntry write_shard_file(const std::string& step_dir, FsdpUnits& units, Ops& ops,
                               int64_t step) {
  std::vector<SafetensorsTensorSpec> specs;
  for (int u = 0; u < units.unit_count(); ++u) {
    for (const char* kind : kKinds) {
      specs.push_back(
          {tensor_name(u, kind), DType::kF32, Shape{units.plan().units[u].shard_numel}});
    }
  }
  const std::string file = rank_file_name(units.shard_rank());
  const std::string path = (fs::path(step_dir) / file).string();
  SafetensorsWriter writer(path, specs,
                           {{"format", "shardtrain-shard"},
                            {"step", std::to_string(step)},
                            {"shard_rank", std::to_string(units.shard_rank())},
                            {"group_size", std::to_string(units.plan().group_size)}});
  std::vector<float> host;  // (shard_numel) one tensor at a time
  for (int u = 0; u < units.unit_count(); ++u) {
    const Tensor shards[] = {units.master_shard(u), units.exp_avg_shard(u),
                             units.exp_avg_sq_shard(u)};
    for (int k = 0; k < 3; ++k) {
      host.resize(shards[k].numel());
      ops.copy_to_host(host.data(), shards[k]);
      writer.write_tensor(tensor_name(u, kKinds[k]), host.data(), host.size() * sizeof(float));
    }
  }
  writer.finish();
  return {file, file_xxhash64(path)};
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
  const double failures = units.sum_over_ranks(message.empty() ? 0.0 : 1.0);
  if (failures > 0 && message.empty()) {
    message = fmt::format("{} of {} ranks failed (see their logs)", failures, units.world_size());
  }
  return message;
}

}  // namespace

CheckpointSaveStats save_checkpoint(const std::string& dir, int64_t keep, FsdpUnits& units,
                                    Ops& ops, const ParamLayout& layout,
                                    const CheckpointRunInfo& info, const TrainProgress& progress) {
  const auto start = std::chrono::steady_clock::now();
  CheckpointSaveStats stats;
  stats.step_dir = step_dir_path(dir, progress.step);
  const bool is_rank0 = units.world_rank() == 0;
  // Replicas hold identical shards: the first replica group writes them.
  const bool writes_shard = units.replicate_rank() == 0;
  SHARDTRAIN_CHECK(!writes_shard || units.world_rank() == units.shard_rank(),
                   "replicate group 0 is world ranks [0, G)");

  // Phase 1 (rank 0): an existing directory for this step (from an abandoned run or an
  // interrupted save) loses its manifest before any file in it changes.
  std::string failed = agree(units, [&] {
    if (!is_rank0) return;
    std::error_code ec;
    fs::create_directories(stats.step_dir, ec);
    if (ec)
      fail("cannot create checkpoint dir {}: {}; HINT: check train.checkpoint_dir", stats.step_dir,
           ec.message());
    fs::remove(fs::path(stats.step_dir) / kManifestFile, ec);
  });
  if (!failed.empty()) fail("checkpoint step {} not saved: {}", progress.step, failed);

  // Phase 2: every writing rank writes its shard file and digest; rank 0 the run state.
  std::vector<ManifestEntry> rank0_files;
  failed = agree(units, [&] {
    if (writes_shard) {
      const ManifestEntry entry = write_shard_file(stats.step_dir, units, ops, progress.step);
      stats.bytes_written = entry.digest.bytes;
      write_rank_digest(stats.step_dir, units.shard_rank(), entry);
    }
    if (!is_rank0) return;
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
    rank0_files.push_back(write_small_file(stats.step_dir, kTrainStateFile, state.dump(1) + "\n"));
    rank0_files.push_back(
        write_small_file(stats.step_dir, kModelConfigFile, read_file(info.model_config_path)));
  });
  if (!failed.empty()) fail("checkpoint step {} not saved: {}", progress.step, failed);

  // Phase 3 (rank 0, after every rank finished): the manifest, last; then pruning.
  if (is_rank0) {
    Manifest manifest;
    manifest.step = progress.step;
    manifest.files = take_rank_digests(stats.step_dir);
    if (static_cast<int>(manifest.files.size()) != units.plan().group_size) {
      fail("checkpoint step {} not saved: {} shard files reported, expected {}", progress.step,
           manifest.files.size(), units.plan().group_size);
    }
    manifest.files.insert(manifest.files.end(), rank0_files.begin(), rank0_files.end());
    write_manifest(stats.step_dir, manifest);
    for (const std::string& removed : prune_checkpoints(dir, keep)) {
      log::info("removed old checkpoint {}", removed);
    }
  }
  stats.stall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

SavedCheckpoint open_checkpoint(const std::string& step_dir, const ParamLayout& layout) {
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec)) fail("checkpoint {} does not exist", step_dir);
  const Manifest manifest = read_manifest(step_dir);
  const ManifestEntry* state_entry = manifest.find(kTrainStateFile);
  if (state_entry == nullptr)
    fail("{}/{} does not list {}", step_dir, kManifestFile, kTrainStateFile);
  verify_checkpoint_file(step_dir, *state_entry);
  const std::string state_path = (fs::path(step_dir) / kTrainStateFile).string();

  SavedCheckpoint saved;
  saved.step_dir = step_dir;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(state_path));
    TrainProgress& p = saved.progress;
    p.step = j.at("step").get<int64_t>();
    p.total_steps = j.at("total_steps").get<int64_t>();
    p.lr = j.at("lr").get<double>();
    p.tokens_seen = j.at("tokens_seen").get<int64_t>();
    p.elapsed_s = j.at("elapsed_s").get<double>();
    const nlohmann::json& s = j.at("sampler");
    p.sampler = {s.at("epoch").get<uint64_t>(), s.at("index").get<uint64_t>(),
                 s.at("seed").get<uint64_t>(), s.at("dataset_size").get<uint64_t>(),
                 s.at("world").get<uint64_t>()};
    saved.config_toml = j.at("config_toml").get<std::string>();
    saved.model_path = j.at("model_path").get<std::string>();
    const nlohmann::json& l = j.at("layout");
    saved.world_size = l.at("world_size").get<int>();
    saved.group_size = l.at("group_size").get<int>();
    saved.strategy = l.at("strategy").get<std::string>();
    saved.shard_files = l.at("shard_files").get<std::vector<std::string>>();
    if (static_cast<int>(saved.shard_files.size()) != saved.group_size) {
      fail("{}: layout lists {} shard files for group size {}", state_path,
           saved.shard_files.size(), saved.group_size);
    }
    const nlohmann::json& units = l.at("units");
    if (units.size() != layout.units.size()) {
      fail(
          "checkpoint {} was saved for a different model: {} units there, {} in this model "
          "({} layers); HINT: resume with the model config it was saved with (copy: {}/{})",
          step_dir, units.size(), layout.units.size(), layout.units.size() - 1, step_dir,
          kModelConfigFile);
    }
    for (size_t u = 0; u < units.size(); ++u) {
      const UnitLayout& want = layout.units[u];
      SavedUnit unit{units[u].at("name").get<std::string>(), units[u].at("numel").get<int64_t>(),
                     units[u].at("shard_numel").get<int64_t>()};
      const nlohmann::json& params = units[u].at("params");
      std::string mismatch;
      if (unit.name != want.name || unit.numel != want.numel ||
          params.size() != want.params.size()) {
        mismatch = fmt::format("unit {} is {} with {} elements there, {} with {} here", u,
                               unit.name, unit.numel, want.name, want.numel);
      }
      for (size_t i = 0; mismatch.empty() && i < params.size(); ++i) {
        const ParamSpec& p = want.params[i];
        const auto dims = params[i].at("shape").get<std::vector<int64_t>>();
        if (params[i].at("name").get<std::string>() != p.name || dims != dims_of(p.shape) ||
            params[i].at("offset").get<int64_t>() != p.offset) {
          mismatch = fmt::format("parameter {} has shape {} there, {} here",
                                 params[i].at("name").get<std::string>(),
                                 fmt::format("[{}]", fmt::join(dims, ", ")), p.shape.to_string());
        }
      }
      if (!mismatch.empty()) {
        fail(
            "checkpoint {} was saved for a different model (layout mismatch: {}); HINT: "
            "resume with the model config it was saved with (copy: {}/{})",
            step_dir, mismatch, step_dir, kModelConfigFile);
      }
      if (unit.shard_numel * saved.group_size < unit.numel) {
        fail("{}: unit {} shards ({} x {}) do not cover its {} elements", state_path, u,
             unit.shard_numel, saved.group_size, unit.numel);
      }
      saved.units.push_back(unit);
    }
  } catch (const nlohmann::json::exception& error) {
    fail("{} is malformed: {}", state_path, error.what());
  }
  if (saved.progress.step != manifest.step) {
    fail("{}: step {} but the manifest says {}", state_path, saved.progress.step, manifest.step);
  }
  return saved;
}

struct CheckpointShardReader::OpenFiles {
  Manifest manifest;
  std::map<int, SafetensorsFile> by_shard;
};

CheckpointShardReader::CheckpointShardReader(const SavedCheckpoint& checkpoint)
    : checkpoint_(checkpoint), files_(std::make_unique<OpenFiles>()) {
  files_->manifest = read_manifest(checkpoint.step_dir);
}
CheckpointShardReader::~CheckpointShardReader() = default;

void CheckpointShardReader::read(int unit, const char* kind, int64_t begin, int64_t count,
                                 float* dst) {
  std::fill(dst, dst + count, 0.0f);
  const SavedUnit& saved = checkpoint_.units[unit];
  const int64_t end = std::min(begin + count, saved.numel);
  const int64_t shard = saved.shard_numel;
  for (int64_t lo = begin; lo < end;) {
    const int k = static_cast<int>(lo / shard);
    const int64_t hi = std::min(end, (k + 1) * shard);
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
    std::copy(values + (lo - k * shard), values + (hi - k * shard), dst + (lo - begin));
    lo = hi;
  }
}

void load_checkpoint_shards(const SavedCheckpoint& checkpoint, FsdpUnits& units, Ops& ops) {
  CheckpointShardReader reader(checkpoint);
  std::vector<float> host;  // (shard_numel) one tensor at a time
  for (int u = 0; u < units.unit_count(); ++u) {
    const int64_t begin = units.shard_begin(u), shard = units.plan().units[u].shard_numel;
    host.resize(shard);
    const Tensor targets[] = {units.master_shard(u), units.exp_avg_shard(u),
                              units.exp_avg_sq_shard(u)};
    for (int k = 0; k < 3; ++k) {
      reader.read(u, kKinds[k], begin, shard, host.data());
      ops.copy_from_host(targets[k], host.data());
    }
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
    if (fs::exists(fs::path(resume) / kManifestFile, ec)) {
      candidates.push_back(resume);
    } else {
      const std::vector<int64_t> steps = complete_checkpoint_steps(resume);
      if (steps.empty()) {
        fail(
            "--resume {}: not a complete checkpoint (no {}) and holds no complete step_* "
            "checkpoint",
            resume, kManifestFile);
      }
      candidates.push_back(step_dir_path(resume, steps.back()));
    }
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
