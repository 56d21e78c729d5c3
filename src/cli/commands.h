// The shardtrain command line: one parser (CLI11) whose definitions also generate --help.
#pragma once

namespace shardtrain::cli {

// Parses argv and runs the chosen subcommand; returns the process exit code.
// Throws shardtrain::Error for user mistakes.
int run(int argc, char** argv);

}  // namespace shardtrain::cli
