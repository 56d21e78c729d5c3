#include "cli/commands.h"

#include <algorithm>
#include <string>
#include <vector>

namespace shardtrain::cli {

int run(int argc, char** argv, const WorkerHooks& hooks) {
  CLI::App app{
      "shardtrain: fully sharded fine-tuning (full or LoRA, bf16 or FP8) of Hugging Face decoder "
      "models: Llama 2/3, Qwen2/2.5, Qwen3, Mistral, Gemma 3, Qwen3-MoE, Mixtral"};
  app.set_version_flag("--version", std::string("shardtrain ") + SHARDTRAIN_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  int exit_code = 0;
  add_train_command(app, exit_code, hooks);
  add_eval_command(app, exit_code);
  add_launch_command(app, exit_code);
  add_plan_command(app, exit_code);
  add_prepare_command(app, exit_code);
  add_tokenize_command(app, exit_code);
  add_render_command(app, exit_code);
  add_export_command(app, exit_code);
  add_generate_command(app, exit_code);
  add_bench_command(app, exit_code);
  add_doctor_command(app, exit_code);
  add_k8s_command(app, exit_code);
  // `launch`'s worker command must reach it exactly as typed (cli/launch_command.cpp).
  std::vector<std::string> args(argv + 1, argv + argc);
  mark_launch_separator(args);
  std::reverse(args.begin(), args.end());  // CLI11's order for a vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace shardtrain::cli
