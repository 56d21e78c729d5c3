#include "cli/commands.h"

#include <CLI/CLI.hpp>

namespace shardtrain::cli {

int run(int argc, char** argv) {
  CLI::App app{"shardtrain: fully sharded fine-tuning of Llama-family models"};
  app.set_version_flag("--version", std::string("shardtrain ") + SHARDTRAIN_VERSION);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}

}  // namespace shardtrain::cli
