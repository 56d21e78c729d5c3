// Sharded training checkpoints of an FSDP job: save, verify, load (at any world size and
// strategy) and resume. The directory layout and its safety rules are in
// train/checkpoint/checkpoint_dir.h; the asynchronous save protocol of the step loop (host
// snapshot, background write, manifest once every rank is done) is
// train/checkpoint/checkpoint_saver.h; docs/checkpoints.md is the user's guide. Implemented by
// checkpoint_write.cpp (snapshot, files, manifest), checkpoint_read.cpp (open, verify, load at
// any world size) and checkpoint_resume.cpp (which checkpoint to resume from, the metrics file).
//
// What a checkpoint holds: per shard-group rank k, one safetensors file with the fp32 tensors
// `unit.U.master`, `unit.U.exp_avg`, `unit.U.exp_avg_sq` (each the rank's shard of unit U,
// shard_numel elements including padding), written by the rank with shard rank k in replicate
// group 0 (replicas hold identical shards, so they are written once). Gradient shards are not
// saved: checkpoints are taken at step boundaries, where no accumulation state exists. Frozen
// parameters (LoRA's base: fsdp/shard_plan.h) are not saved either: the shards are those of each
// unit's trainable region, and the frozen base is read from model.path again on resume.
// train_state.json holds the step, tokens seen, elapsed time, the sampler state (the only
// random state of a run: init and data order derive from train.seed), the whole config as TOML,
// the model path and the layout the shards follow.
//
// Expert parallelism (fsdp.expert_parallel = N > 1, docs/fsdp.md): a unit of experts holds
// different experts on each expert rank, so shard rank k's file holds expert rank k % N's
// experts, its expert shard k / N (of G / N). train_state.json records N and which units hold
// experts (their parameter names are expert rank 0's). Resuming needs the same N (any world
// size and strategy whose shard group N divides): expert rank j reads its experts from the
// files k = j + N x (saved expert shard). `shardtrain export` assembles every expert rank's
// experts back into their blocks under the per-expert Hub names.
//
// Resharding: the flat layout of a unit is a pure function of the model config; only its padding
// and split points depend on the shard group size. Loading at another world size or strategy
// therefore reads, for each unit, the element ranges of the saved shards that overlap this
// rank's new range (pure index arithmetic on the saved layout). Each rank touches only the
// files it needs, and verifies each of them against the manifest before reading it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "fsdp/fsdp_units.h"
#include "model/param_layout.h"
#include "ops/ops.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace shardtrain {

// Where a run stands after a completed optimizer step.
struct TrainProgress {
  int64_t step = 0;         // optimizer steps completed
  int64_t total_steps = 0;  // train.steps when saved (the LR schedule's length)
  int64_t tokens_seen = 0;  // over all ranks
  double elapsed_s = 0;     // training time so far, over all resumed segments
  double lr = 0;            // learning rate of the last step
  SamplerState sampler;
};

// What a save needs to know about the run beyond the tensors.
struct CheckpointRunInfo {
  std::string strategy;           // fsdp.strategy name
  std::string config_toml;        // ConfigSchema::to_toml() of the run
  std::string model_path;         // model.path (export copies tokenizer files from it)
  std::string model_config_path;  // the model's config.json, copied into the checkpoint
};

// One rank's part of one checkpoint, staged in host memory (copied from the device at the step
// boundary), so that it can be written while training continues
// (train/checkpoint/checkpoint_saver.h). The staging buffers are meant to be reused across
// checkpoints: snapshot_checkpoint() only grows them.
struct CheckpointSnapshot {
  int64_t step = 0;
  std::string step_dir;  // DIR/step_XXXXXXXX
  // Replicas hold identical shards: only replicate group 0 writes them.
  bool writes_shard = false;
  int shard_rank = 0, group_size = 1, world_size = 1;
  std::vector<int64_t> shard_numel;  // [unit]
  // (units, 3, shard_numel): per unit its master, exp_avg and exp_avg_sq shard, back to back.
  std::vector<float> shard_values;
  // World rank 0 only: train_state.json's contents and the model config.json to copy.
  bool writes_run_state = false;
  std::string train_state_json;
  std::string model_config_path;
};

// Local: fills `snapshot` for `progress.step` under checkpoint dir `dir`: copies this rank's
// fp32 master and moment shards to host (ops.copy_to_host) and, on world rank 0, serialises the
// run state. No disk access.
void snapshot_checkpoint(const std::string& dir, FsdpUnits& units, Ops& ops,
                         const ParamLayout& layout, const CheckpointRunInfo& info,
                         const TrainProgress& progress, CheckpointSnapshot* snapshot);

// What write_checkpoint_files wrote.
struct CheckpointFilesWritten {
  uint64_t bytes = 0;                          // all files this rank wrote
  std::vector<ManifestEntry> run_state_files;  // rank 0: train_state.json, model_config.json
};

// Local, touches no device and no communicator (safe on a background thread): creates the step
// dir, removes any manifest an earlier attempt left there (before any file changes), then
// writes this rank's shard file and its digest (rank_RRRRR.digest.json) and, on rank 0, the
// run state files; each atomically (temp + fsync + rename). `delay_per_file` is a test hook
// (slept before each file). Throws Error naming the file on failure; a failed write leaves no
// partial file behind (only its temp file is removed).
CheckpointFilesWritten write_checkpoint_files(const CheckpointSnapshot& snapshot,
                                              std::chrono::milliseconds delay_per_file = {});

// World rank 0, only after every rank's write_checkpoint_files of `step` succeeded: folds the
// rank digests of shard ranks [0, group_size) into the manifest with `run_state_files`, writes
// the manifest (which makes the checkpoint exist), then prunes `dir` to `keep` complete
// checkpoints. Returns the removed step dirs. Throws Error when a shard's digest is missing.
std::vector<std::string> finalize_checkpoint(const std::string& dir, int64_t keep, int64_t step,
                                             int group_size,
                                             const std::vector<ManifestEntry>& run_state_files);

// The saved layout of a checkpoint (from its train_state.json).
struct SavedUnit {
  std::string name;
  int64_t numel = 0, shard_numel = 0;
  // The unit's frozen elements [0, frozen_numel) are not in the shards, which cover its
  // trainable region [frozen_numel, numel) (shard element e = unit element frozen_numel + e).
  int64_t frozen_numel = 0;
  bool experts = false;  // a unit of experts (expert parallelism, header comment)
  int64_t trainable_numel() const { return numel - frozen_numel; }
};
struct SavedCheckpoint {
  std::string step_dir;
  TrainProgress progress;
  std::string config_toml, model_path, strategy;
  int world_size = 1, group_size = 1;
  int expert_parallel = 1;               // fsdp.expert_parallel of the run that saved it
  std::vector<std::string> shard_files;  // [shard rank] -> file name
  std::vector<SavedUnit> units;
};

// Reads step_dir's manifest and train_state.json (verifying train_state.json's checksum) and
// checks that the saved layout is `layout` (the same model config). Local, no communication.
// Throws Error naming the file, or the first differing unit/parameter for a layout mismatch.
SavedCheckpoint open_checkpoint(const std::string& step_dir, const ParamLayout& layout);
// The run's recorded config (train_state.json's config_toml; the file verified against the
// manifest), before the layout is known (export reads its [lora] section to make the layout).
std::string read_checkpoint_config_toml(const std::string& step_dir);
// The fsdp.expert_parallel step_dir was saved with (1 for checkpoints that do not record it),
// before the layout is known (export makes each expert rank's layout from it).
int read_checkpoint_expert_parallel(const std::string& step_dir);

// Reads elements [begin, begin + count) of `kind` ("master", "exp_avg", "exp_avg_sq") of unit
// `unit`'s trainable region from the saved shards into dst (zeros beyond it), verifying each shard
// file against the manifest the first time it is used, and its header (shard rank, group and
// world size, step, unit count) against the manifest and train_state.json: a shard file renamed
// to another rank's name is refused, not read as that rank's. Local; throws Error naming the
// file.
class CheckpointShardReader {
 public:
  // expert_rank: this rank's index in its expert group (the experts whose shards it reads).
  explicit CheckpointShardReader(const SavedCheckpoint& checkpoint, int expert_rank = 0);
  ~CheckpointShardReader();
  CheckpointShardReader(const CheckpointShardReader&) = delete;
  CheckpointShardReader& operator=(const CheckpointShardReader&) = delete;

  void read(int unit, const char* kind, int64_t begin, int64_t count, float* dst);

 private:
  struct OpenFiles;
  const SavedCheckpoint& checkpoint_;
  const int expert_rank_;
  std::unique_ptr<OpenFiles> files_;
};

// Local: fills this rank's master and moment shards from `checkpoint` (any saved world size or
// strategy) and refreshes the compute copies. World rank 0 logs progress with an ETA when it
// takes long (obs/phase_progress.h).
void load_checkpoint_shards(const SavedCheckpoint& checkpoint, FsdpUnits& units, Ops& ops);

// --resume: "auto" (newest complete checkpoint in dir, falling back to older ones when one is
// damaged), "never", or a path (a step directory, or a checkpoint dir whose newest complete
// checkpoint is taken, without fallback).
struct ResumeResult {
  bool resumed = false;
  TrainProgress progress;
  std::string step_dir;
  std::string config_toml;  // the resolved config of the run that saved it
  int world_size = 1;       // the world size that saved it
};
// Collective over all ranks (they agree on success through the Mesh (dist/mesh.h), so either
// every rank resumes from the same checkpoint or every rank throws). Throws Error for a missing
// path, a damaged checkpoint (explicit path, or every candidate damaged under auto) or a layout
// mismatch.
ResumeResult resume_training(const std::string& resume, const std::string& dir, FsdpUnits& units,
                             Ops& ops, const ParamLayout& layout);

// Rewrites the metrics JSONL at `path` keeping only records with "step" <= step, so a resumed
// run appends from the step it resumed at (one record per completed step). Atomic. A last line
// that is not JSON (a record torn by a crash) is dropped; any other line that is not a record
// with an integer "step", or a line past the JSONL bound, throws Error naming path:line and the
// file is left unchanged (it is not ours to rewrite). Anything but a regular file (a FIFO,
// /dev/stdout) is left alone.
void truncate_metrics_after(const std::string& path, int64_t step);

}  // namespace shardtrain
