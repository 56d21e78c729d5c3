// shardtrain entry point: dispatches to subcommands (cli/commands.h). User errors
// (shardtrain::Error) print one line and exit 2.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  try {
    return shardtrain::cli::run(argc, argv);
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "shardtrain: error: %s\n", e.what());
    return 2;
  }
}
