// Resuming a run (train/checkpoint/checkpoint.h): the newest complete checkpoint that every
// rank can load (falling back past damaged ones under --resume auto), the refusal to save into a
// dir with later checkpoints, and the metrics file cut back to the resumed step.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/log.h"
#include "data/jsonl_lines.h"
#include "io/atomic_file.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace shardtrain {
namespace fs = std::filesystem;
namespace {

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
  // A stream (--metrics /dev/stdout, a FIFO) has nothing to rewrite, and reading it could wait
  // forever (a terminal, a FIFO with no writer).
  if (path.empty() || !fs::is_regular_file(path, ec)) return;
  // Only a file of our records is rewritten: a path that names someone else's file (a typo, a
  // shared log) fails before a byte of it changes. A last line that is not JSON is the torn
  // record of a crash and is dropped.
  const auto not_ours = [&](size_t line_number) {
    fail(
        "--metrics {}:{}: not a shardtrain metrics record; resuming rewrites the metrics file from "
        "the checkpoint's step, so it was left as it is: pass the run's own metrics file or a new "
        "path",
        path, line_number);
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("--metrics {}: cannot open ({}); check the path", path, std::strerror(errno));
  std::string kept, line;
  std::optional<size_t> unparsed_line;  // a line that is not JSON: only the last may be
  for (size_t line_number = 1; read_jsonl_line(in, line, "--metrics " + path, line_number);
       ++line_number) {
    if (is_blank_line(line)) continue;
    if (unparsed_line) not_ours(*unparsed_line);
    if (json_nesting_problem(line)) not_ours(line_number);  // ours are flat; a deep tree is not
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded()) {
      unparsed_line = line_number;
      continue;
    }
    const auto found = record.is_object() ? record.find("step") : record.end();
    if (found == record.end() || !found->is_number_integer()) not_ours(line_number);
    if (found->get<int64_t>() > step) continue;
    kept += line + "\n";
  }
  if (in.bad()) fail("--metrics {}: read failed ({})", path, std::strerror(errno));
  write_file_atomically(path, kept);
}

}  // namespace shardtrain
