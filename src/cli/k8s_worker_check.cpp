#include "cli/k8s_worker_check.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "core/config.h"
#include "core/error.h"
#include "launch/k8s/text_checks.h"
#include "train/step_hooks.h"
#include "train/train_config.h"

namespace shardtrain::cli {
namespace {

using launch::k8s::quote_for_error;

constexpr size_t kMaxConfigBytes = 900 * 1024;

bool names_option(const std::vector<std::string>& words, const std::string& option) {
  for (const std::string& word : words) {
    if (word == option || word.rfind(option + "=", 0) == 0) return true;
  }
  return false;
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

std::string read_config_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    fail("--config-file {}: no such file; give the job's TOML config", quote_for_error(path));
  }
  if (!S_ISREG(info.st_mode)) {
    fail("--config-file {}: not a regular file; give the job's TOML config", quote_for_error(path));
  }
  if (static_cast<size_t>(info.st_size) > kMaxConfigBytes) {
    fail(
        "--config-file {}: {} bytes, more than a ConfigMap holds (900 KiB here); keep data out of "
        "the config",
        quote_for_error(path), info.st_size);
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) fail("--config-file {}: cannot be read", quote_for_error(path));
  return text.str().substr(0, kMaxConfigBytes);
}

void check_worker_command(const std::vector<std::string>& command,
                          const std::string& config_file_path,
                          const std::string& config_file_text) {
  const std::string& subcommand = command.front();
  if (subcommand.front() == '/') return;  // an executable of the image: its own parser
  CLI::App parser;
  parser.require_subcommand(1);
  parser.fallthrough(false);
  int unused_exit_code = 0;
  const WorkerHooks no_hooks;
  add_train_command(parser, unused_exit_code, no_hooks);
  add_eval_command(parser, unused_exit_code);
  add_bench_command(parser, unused_exit_code);
  add_doctor_command(parser, unused_exit_code);
  for (CLI::App* sub : parser.get_subcommands([](CLI::App*) { return true; })) {
    sub->callback([] {});  // parse only: nothing runs
    for (CLI::Option* option : sub->get_options()) {
      // Paths name files inside the container image, not on this machine: CLI::ExistingFile
      // (described "FILE", unnamed) is switched off.
      for (int index = 0;; ++index) {
        CLI::Validator* validator = nullptr;
        try {
          validator = option->get_validator(index);
        } catch (const CLI::OptionNotFound&) {
          break;
        }
        if (validator->get_description() == "FILE") validator->active(false);
      }
    }
  }
  std::vector<std::string> args(command.rbegin(), command.rend());  // CLI11's order
  try {
    parser.parse(args);
  } catch (const CLI::ParseError& e) {
    fail("worker command: {} {}; HINT: see shardtrain {} --help", quote_for_error(subcommand),
         quote_for_error(one_line(e.what())), subcommand);
  }
  const std::vector<std::string> words(command.begin() + 1, command.end());
  if (subcommand != "train") return;
  if (names_option(words, "--nproc-per-node")) {
    fail(
        "worker command: --nproc-per-node belongs to the launcher, which the manifests give one "
        "worker per GPU (--gpus-per-node); drop it from the worker command");
  }
  // Overrides (and a misspelt flag, which train reads as one) are checked against the schema.
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  if (!config_file_text.empty()) schema.load_toml_text(config_file_text, config_file_path);
  try {
    for (const std::string& assignment :
         config_assignments(parser.get_subcommand(subcommand)->remaining())) {
      schema.apply_override(assignment);
    }
  } catch (const Error& e) {
    fail("worker command: {}", e.what());
  }
  if (!names_option(words, "--config") && config_file_text.empty()) {
    fail(
        "worker command: train without --config has no model or data to train on; HINT: -- "
        "train --config /etc/shardtrain/job.toml (a path in the image or a volume), or "
        "--config-file PATH to mount a local file");
  }
}

}  // namespace shardtrain::cli
