#include "train/checkpoint/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_message.h"
#include "io/atomic_file.h"
#include "io/read_file.h"

namespace shardtrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kDigestSuffix = ".digest.json";

// The step of a "step_XXXXXXXX" directory name, or -1.
int64_t parse_step_dir(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<int64_t> step_dirs(const std::string& dir, bool complete) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = parse_step_dir(e.path().filename().string());
    if (step < 0 || !e.is_directory(ec)) continue;
    if (fs::exists(e.path() / kManifestFile, ec) == complete) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

nlohmann::json entry_json(const ManifestEntry& e) {
  return {{"file", e.file}, {"bytes", e.digest.bytes}, {"xxh64", xxhash64_hex(e.digest.xxh64)}};
}

ManifestEntry entry_of(const nlohmann::json& j, const std::string& source) {
  ManifestEntry e;
  try {
    e.file = j.at("file").get<std::string>();
    e.digest.bytes = j.at("bytes").get<uint64_t>();
    if (!parse_xxhash64_hex(j.at("xxh64").get<std::string>(), &e.digest.xxh64)) {
      fail("{}: entry for {} has a malformed xxh64 checksum", source, e.file);
    }
  } catch (const nlohmann::json::exception& error) {
    fail("{} is malformed: {}; HINT: the checkpoint is damaged, resume from another", source,
         json_message(error));
  }
  if (e.file.empty() || e.file.find('/') != std::string::npos) {
    fail("{} names an invalid file '{}'", source, e.file);
  }
  return e;
}

}  // namespace

const ManifestEntry* Manifest::find(const std::string& file) const {
  for (const ManifestEntry& e : files)
    if (e.file == file) return &e;
  return nullptr;
}

std::string step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }
std::string step_dir_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / step_dir_name(step)).string();
}

std::vector<int64_t> complete_checkpoint_steps(const std::string& dir) {
  return step_dirs(dir, true);
}
std::vector<int64_t> incomplete_checkpoint_steps(const std::string& dir) {
  return step_dirs(dir, false);
}

std::string named_checkpoint(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / kManifestFile, ec)) return path;
  const std::vector<int64_t> steps = complete_checkpoint_steps(path);
  if (steps.empty()) {
    fail("{} {}: not a complete checkpoint (no {}) and holds no complete step_* checkpoint", what,
         path, kManifestFile);
  }
  return step_dir_path(path, steps.back());
}

void write_rank_digest(const std::string& step_dir, int rank, const ManifestEntry& entry) {
  write_file_atomically(
      (fs::path(step_dir) / fmt::format("rank_{:05d}{}", rank, kDigestSuffix)).string(),
      entry_json(entry).dump());
}

std::vector<ManifestEntry> take_rank_digests(const std::string& step_dir) {
  std::vector<std::string> paths;
  for (const fs::directory_entry& e : fs::directory_iterator(step_dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > std::string(kDigestSuffix).size() && name.ends_with(kDigestSuffix) &&
        name.rfind("rank_", 0) == 0) {
      paths.push_back(e.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<ManifestEntry> entries;
  for (const std::string& path : paths) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& error) {
      fail("{} is malformed: {}", path, json_message(error));
    }
    entries.push_back(entry_of(j, path));
  }
  for (const std::string& path : paths) fs::remove(path);
  return entries;
}

void write_manifest(const std::string& step_dir, const Manifest& manifest) {
  nlohmann::json files = nlohmann::json::array();
  for (const ManifestEntry& e : manifest.files) files.push_back(entry_json(e));
  const nlohmann::json j = {{"format", "shardtrain-checkpoint"},
                            {"version", 1},
                            {"step", manifest.step},
                            {"checksum", "xxh64"},
                            {"files", files}};
  write_file_atomically((fs::path(step_dir) / kManifestFile).string(), j.dump(1) + "\n");
}

Manifest read_manifest(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / kManifestFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    fail(
        "checkpoint {} is incomplete: it has no {} (a save was interrupted); HINT: resume from "
        "an earlier checkpoint, or use --resume auto",
        step_dir, kManifestFile);
  }
  Manifest manifest;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(path));
    if (j.at("format").get<std::string>() != "shardtrain-checkpoint" ||
        j.at("version").get<int>() != 1) {
      fail("{} is not a shardtrain checkpoint manifest (format/version)", path);
    }
    manifest.step = j.at("step").get<int64_t>();
    for (const nlohmann::json& f : j.at("files")) manifest.files.push_back(entry_of(f, path));
  } catch (const nlohmann::json::exception& error) {
    fail("{} is malformed: {}; HINT: the checkpoint is damaged, resume from another", path,
         json_message(error));
  }
  return manifest;
}

void verify_checkpoint_file(const std::string& step_dir, const ManifestEntry& entry) {
  const std::string path = (fs::path(step_dir) / entry.file).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    fail("checkpoint file {} is missing (listed in {}/{})", path, step_dir, kManifestFile);
  }
  const uint64_t size = fs::file_size(path, ec);
  if (size != entry.digest.bytes) {
    fail("checkpoint file {} is truncated or damaged: {} bytes, the manifest says {}", path, size,
         entry.digest.bytes);
  }
  const FileDigest digest = file_xxhash64(path);
  if (digest.xxh64 != entry.digest.xxh64) {
    fail("checkpoint file {} is corrupt: xxh64 {} but the manifest says {}", path,
         xxhash64_hex(digest.xxh64), xxhash64_hex(entry.digest.xxh64));
  }
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep) {
  SHARDTRAIN_CHECK(keep >= 1, "keep {}", keep);
  std::vector<std::string> removed;
  const std::vector<int64_t> complete = complete_checkpoint_steps(dir);
  if (complete.empty()) return removed;
  std::vector<int64_t> doomed;
  if (static_cast<int64_t>(complete.size()) > keep) {
    doomed.assign(complete.begin(), complete.end() - keep);
  }
  for (const int64_t step : incomplete_checkpoint_steps(dir))
    if (step < complete.back()) doomed.push_back(step);
  for (const int64_t step : doomed) {
    const std::string path = step_dir_path(dir, step);
    // The manifest goes first: a half-removed checkpoint is then merely incomplete.
    std::error_code ec;
    fs::remove(fs::path(path) / kManifestFile, ec);
    fs::remove_all(path, ec);
    removed.push_back(path);
  }
  return removed;
}

}  // namespace shardtrain
