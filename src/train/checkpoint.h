// Sharded training checkpoints of an FSDP job: save, verify, load (at any world size and
// strategy) and resume. The directory layout and its safety rules are in train/checkpoint_dir.h;
// docs/checkpoints.md is the user's guide.
//
// What a checkpoint holds: per shard-group rank k, one safetensors file with the fp32 tensors
// `unit.U.master`, `unit.U.exp_avg`, `unit.U.exp_avg_sq` (each the rank's shard of unit U,
// shard_numel elements including padding), written by the rank with shard rank k in replicate
// group 0 (replicas hold identical shards, so they are written once). Gradient shards are not
// saved: checkpoints are taken at step boundaries, where no accumulation state exists.
// train_state.json holds the step, tokens seen, elapsed time, the sampler state (the only
// random state of a run: init and data order derive from train.seed), the whole config as TOML,
// the model path and the layout the shards follow.
//
// Resharding: the flat layout of a unit is a pure function of the model config; only its padding
// and split points depend on the shard group size. Loading at another world size or strategy
// therefore reads, for each unit, the element ranges of the saved shards that overlap this
// rank's new range (pure index arithmetic on the saved layout). Each rank touches only the
// files it needs, and verifies each of them against the manifest before reading it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "fsdp/fsdp_units.h"
#include "model/param_layout.h"
#include "ops/ops.h"

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

struct CheckpointSaveStats {
  std::string step_dir;
  uint64_t bytes_written = 0;  // this rank's shard file (0 if it writes none)
  double stall_s = 0;          // time the step loop waited on this rank
};

// Collective over all ranks: writes DIR/step_XXXXXXXX (train/checkpoint_dir.h) for
// `progress.step`, then (rank 0) the manifest and pruning to `keep` checkpoints. Any rank's
// failure throws Error on every rank and leaves the checkpoint incomplete.
CheckpointSaveStats save_checkpoint(const std::string& dir, int64_t keep, FsdpUnits& units,
                                    Ops& ops, const ParamLayout& layout,
                                    const CheckpointRunInfo& info, const TrainProgress& progress);

// The saved layout of a checkpoint (from its train_state.json).
struct SavedUnit {
  std::string name;
  int64_t numel = 0, shard_numel = 0;
};
struct SavedCheckpoint {
  std::string step_dir;
  TrainProgress progress;
  std::string config_toml, model_path, strategy;
  int world_size = 1, group_size = 1;
  std::vector<std::string> shard_files;  // [shard rank] -> file name
  std::vector<SavedUnit> units;
};

// Reads step_dir's manifest and train_state.json (verifying train_state.json's checksum) and
// checks that the saved layout is `layout` (the same model config). Local, no communication.
// Throws Error naming the file, or the first differing unit/parameter for a layout mismatch.
SavedCheckpoint open_checkpoint(const std::string& step_dir, const ParamLayout& layout);

// Reads elements [begin, begin + count) of `kind` ("master", "exp_avg", "exp_avg_sq") of unit
// `unit` from the saved shards into dst (zeros beyond the unit's numel), verifying each shard
// file against the manifest the first time it is used. Local; throws Error naming the file.
class CheckpointShardReader {
 public:
  explicit CheckpointShardReader(const SavedCheckpoint& checkpoint);
  ~CheckpointShardReader();
  CheckpointShardReader(const CheckpointShardReader&) = delete;
  CheckpointShardReader& operator=(const CheckpointShardReader&) = delete;

  void read(int unit, const char* kind, int64_t begin, int64_t count, float* dst);

 private:
  struct OpenFiles;
  const SavedCheckpoint& checkpoint_;
  std::unique_ptr<OpenFiles> files_;
};

// Local: fills this rank's master and moment shards from `checkpoint` (any saved world size or
// strategy) and refreshes the compute copies.
void load_checkpoint_shards(const SavedCheckpoint& checkpoint, FsdpUnits& units, Ops& ops);

// --resume: "auto" (newest complete checkpoint in dir, falling back to older ones when one is
// damaged), "never", or a path (a step directory, or a checkpoint dir whose newest complete
// checkpoint is taken, without fallback).
struct ResumeResult {
  bool resumed = false;
  TrainProgress progress;
  std::string step_dir;
};
// Collective over all ranks (they agree on success through FsdpUnits::sum_over_ranks, so either
// every rank resumes from the same checkpoint or every rank throws). Throws Error for a missing
// path, a damaged checkpoint (explicit path, or every candidate damaged under auto) or a layout
// mismatch.
ResumeResult resume_training(const std::string& resume, const std::string& dir, FsdpUnits& units,
                             Ops& ops, const ParamLayout& layout);

// Rewrites the metrics JSONL at `path` keeping only records with "step" <= step, so a resumed
// run appends from the step it resumed at (one record per completed step). Atomic.
void truncate_metrics_after(const std::string& path, int64_t step);

}  // namespace shardtrain
