// `shardtrain k8s` checks the worker command at render time with the parser the worker itself
// will run, so a typo fails on the laptop in one line (exit 2), not in every pod after the image
// pull: the `train`, `eval`, `bench` and `doctor` subcommands are registered on a parser of
// their own (the same add_*_command functions `shardtrain` uses), their callbacks replaced by
// no-ops, and the words after `--` parsed by it.
//   - an unknown flag (`--confg a.toml`) or a bad value is CLI11's complaint, quoted;
//   - `train` / `eval` need a config: --config, or --config-file (k8s mounts it);
//   - config overrides (`--optim.lr=1e-4`) are checked against the config schema (key and type);
//   - `--nproc-per-node` inside the worker command is refused: the launcher starts one worker
//     per GPU (--gpus-per-node);
//   - files named by --config are paths inside the container: not checked here.
// With `config_file_text` (--config-file) the config is loaded into the schema too, so an unknown
// key or a bad value in it fails here, naming the file.
#pragma once

#include <string>
#include <vector>

namespace shardtrain::cli {

// REQUIRES: `command` is resolved (launch/k8s/manifest_options.h: no leading "--", non-empty).
// Throws Error naming the worker command's problem.
void check_worker_command(const std::vector<std::string>& command,
                          const std::string& config_file_path, const std::string& config_file_text);

// The --config-file at `path`: a regular file of at most 900 KiB (a ConfigMap holds 1 MiB),
// read whole. Throws Error naming the path and the fix.
std::string read_config_file(const std::string& path);

}  // namespace shardtrain::cli
