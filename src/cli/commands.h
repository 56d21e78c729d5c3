// The shardtrain command line. One CLI11 parser: each subcommand registers its options in
// its own file (cli/*_command.cpp), and --help is generated from those same definitions.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "train/step_hooks.h"

namespace shardtrain::cli {

// Parses argv and runs the chosen subcommand; returns the process exit code
// (0 ok, 2 usage or user error). Throws shardtrain::Error for user mistakes. `hooks` reach
// `train` workers (train/step_hooks.h): the shipped binary passes none.
int run(int argc, char** argv, const WorkerHooks& hooks = {});

// Each adds its subcommand to `app`; the callback runs the command and stores its exit code.
void add_train_command(CLI::App& app, int& exit_code, const WorkerHooks& hooks);
void add_eval_command(CLI::App& app, int& exit_code);
void add_launch_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_prepare_command(CLI::App& app, int& exit_code);
void add_tokenize_command(CLI::App& app, int& exit_code);
void add_render_command(CLI::App& app, int& exit_code);
void add_export_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_doctor_command(CLI::App& app, int& exit_code);

// In `args` (argv without argv[0]) of a `launch` command, replaces the first "--" with a
// marker CLI11 takes for a positional word, so that the worker command after it is kept
// verbatim (CLI11 would otherwise move its flags behind its positional words).
void mark_launch_separator(std::vector<std::string>& args);
void add_k8s_command(CLI::App& app, int& exit_code);

// What run(args...) returns as the exit code, or 0 when run returns nothing (a command that
// succeeds or throws Error).
template <typename Run, typename... Args>
int exit_code_of(const Run& run, const Args&... args) {
  if constexpr (std::is_void_v<std::invoke_result_t<const Run&, const Args&...>>) {
    run(args...);
    return 0;
  } else {
    return run(args...);
  }
}

// Adds subcommand `name` to `parent`: its options bind into one `Args`, shared with the callback
// so that it lives as long as the parser, and its callback runs run(args), or run(args, the words
// CLI11 left over) for a command that allows extras, and stores the exit code (exit_code_of).
// Returns the subcommand and its Args, to declare the options with.
template <typename Args, typename Run>
std::pair<CLI::App*, std::shared_ptr<Args>> add_command(CLI::App& parent, int& exit_code,
                                                        std::string name, std::string description,
                                                        Run run) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = parent.add_subcommand(std::move(name), std::move(description));
  cmd->callback([cmd, args, run, &exit_code] {
    if constexpr (std::is_invocable_v<Run, const Args&>) {
      exit_code = exit_code_of(run, *args);
    } else {
      exit_code = exit_code_of(run, *args, cmd->remaining());
    }
  });
  return {cmd, args};
}

}  // namespace shardtrain::cli
