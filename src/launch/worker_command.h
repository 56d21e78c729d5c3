// The worker command of `shardtrain launch`, resolved as torchrun users expect. The words are
// kept exactly as typed (LaunchFlags::command); the first one decides what runs:
//   -m MODULE                   python -m MODULE WORDS...
//   --no-python                 WORDS[0] is an executable (a path, or found on PATH)
//   a shardtrain subcommand     this binary: `launch -- train --config job.toml`, or without --
//   SCRIPT.py                   python SCRIPT.py ARGS... (torchrun's `torchrun script.py`)
//   a path, or a name on PATH   that executable (`-- /bin/echo hi`, `-- python3 x.py`)
//   any other existing file     python FILE ARGS...
// "python" is --python (default: python3 on PATH). A first word that looks like a flag and did
// not follow "--" is a launcher flag we do not know: an Error naming it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/launch_config.h"

namespace shardtrain::launch {

struct WorkerCommand {
  std::vector<std::string> argv;       // argv[0] is a path
  bool shardtrain_subcommand = false;  // runs this binary's own subcommand
};

// Throws Error (one line naming the word, the flag or the file) when nothing is given, a flag
// is unknown, the script or executable does not exist, or python is not found.
WorkerCommand resolve_worker_command(const LaunchFlags& flags, const EnvLookup& env);

// `name` resolved on `env`'s PATH as an executable file; nullopt when absent.
std::optional<std::string> find_on_path(const std::string& name, const EnvLookup& env);

}  // namespace shardtrain::launch
