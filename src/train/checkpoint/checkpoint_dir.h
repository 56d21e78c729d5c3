// CheckpointDir: the on-disk layout of sharded training checkpoints, and the rules that make
// them safe to write, find, verify and prune. No tensors, no communication.
//
//   DIR/step_00000010/rank_00000.safetensors   fp32 shards of rank 0 (checkpoint.h)
//   DIR/step_00000010/rank_00001.safetensors
//   DIR/step_00000010/train_state.json         step, sampler, config, layout (rank 0)
//   DIR/step_00000010/model_config.json        the model's config.json (rank 0)
//   DIR/step_00000010/manifest.json            written LAST: size + XXH64 of every file above
//
// A step directory without manifest.json is incomplete and does not exist as a checkpoint
// (a crash mid-save leaves it behind; pruning removes it once a newer checkpoint is complete).
// Every file is written atomically (temp + fsync + rename, io/atomic_file.h). While a save is in
// progress each writing rank leaves `rank_RRRRR.digest.json` (its file's size and checksum) for
// rank 0, which folds them into the manifest and removes them.
//
// Errors a user can meet (missing/incomplete checkpoint, a file whose size or checksum differs
// from the manifest) throw shardtrain::Error with one line naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/checkpoint/checkpoint_checksum.h"

namespace shardtrain {

struct ManifestEntry {
  std::string file;  // relative to the step directory
  FileDigest digest;
};

struct Manifest {
  int64_t step = 0;
  std::vector<ManifestEntry> files;
  // nullptr when `file` is not listed.
  const ManifestEntry* find(const std::string& file) const;
};

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kTrainStateFile = "train_state.json";
inline constexpr const char* kModelConfigFile = "model_config.json";

// "step_00000010"
std::string step_dir_name(int64_t step);
// "rank_00003.safetensors"
std::string rank_file_name(int rank);
// DIR/step_XXXXXXXX
std::string step_dir_path(const std::string& dir, int64_t step);

// Steps of the checkpoints under `dir` that have a manifest, ascending ([] when dir is absent).
std::vector<int64_t> complete_checkpoint_steps(const std::string& dir);
// Steps of step_* directories under `dir` with no manifest, ascending.
std::vector<int64_t> incomplete_checkpoint_steps(const std::string& dir);
// The checkpoint a user named by `path` (`what`: "--resume", "export"): `path` itself when it
// has a manifest, else the newest complete step_* directory under it. Throws Error naming `what`
// and `path` when it is neither.
std::string named_checkpoint(const std::string& path, const std::string& what);

// A writing rank's record of its file (rank_RRRRR.digest.json), written atomically.
void write_rank_digest(const std::string& step_dir, int rank, const ManifestEntry& entry);
// Reads and removes every rank digest in step_dir, ordered by rank.
std::vector<ManifestEntry> take_rank_digests(const std::string& step_dir);

// Writes manifest.json atomically; it is what makes the checkpoint exist.
void write_manifest(const std::string& step_dir, const Manifest& manifest);
// Reads step_dir/manifest.json. Throws Error when it is missing (the checkpoint is incomplete)
// or malformed.
Manifest read_manifest(const std::string& step_dir);
// Checks that step_dir/entry.file exists with the manifest's size and checksum. Throws Error
// naming the file ("truncated" for a size mismatch, "corrupt" for a checksum mismatch).
void verify_checkpoint_file(const std::string& step_dir, const ManifestEntry& entry);

// Keeps the newest `keep` complete checkpoints (never fewer than one: the newest complete one is
// never removed) and removes incomplete step directories older than the newest complete one.
// Returns the removed step directories. REQUIRES: keep >= 1.
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep);

}  // namespace shardtrain
