// run_main: the whole of the shardtrain process (cli/main.cpp, and the test worker binary,
// cli/testing/test_worker_main.cpp): dispatches to the subcommands (cli/commands.h) and turns
// every exception into one line on stderr:
//   shardtrain::Error (a user mistake: file, key, flag, peer)  -> "error: ...", exit 2
//   std::bad_alloc (a job too large for this machine's memory) -> "error: out of memory", exit 2
//   anything else (a bug: no user input may reach it)          -> "internal error at FILE:LINE"
//                                                                  with the exception's type,
//                                                                  exit 1
// Nothing escapes it, so no input ends in std::terminate / abort (rc 134).
#pragma once

#include <functional>

#include "train/step_hooks.h"

namespace shardtrain::cli {

// `hooks`, when set, runs first (inside the same error handling, so a bad test variable is a
// one-line error, exit 2) and returns what `train` workers get; the shipped binary passes none.
int run_main(int argc, char** argv, const std::function<WorkerHooks()>& hooks = {});

}  // namespace shardtrain::cli
