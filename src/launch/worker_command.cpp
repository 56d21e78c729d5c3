#include "launch/worker_command.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace shardtrain::launch {
namespace {

namespace fs = std::filesystem;

bool is_executable_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

std::string self_executable() {
  std::error_code ec;
  const fs::path path = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : path.string();
}

std::string python_path(const LaunchFlags& flags, const EnvLookup& env) {
  const std::string python = flags.python.value_or("python3");
  if (python.find('/') != std::string::npos) {
    if (!is_executable_file(python)) fail("--python '{}': no such executable file", python);
    return python;
  }
  if (std::optional<std::string> found = find_on_path(python, env)) return *found;
  fail(
      "--python '{}': not found on PATH; HINT: give the interpreter's path, e.g. --python "
      "/usr/bin/python3",
      python);
}

std::vector<std::string> with_python(const LaunchFlags& flags, const EnvLookup& env,
                                     std::vector<std::string> rest) {
  rest.insert(rest.begin(), python_path(flags, env));
  return rest;
}

}  // namespace

std::optional<std::string> find_on_path(const std::string& name, const EnvLookup& env) {
  const std::string path = env("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  while (start <= path.size()) {
    const size_t colon = std::min(path.find(':', start), path.size());
    const std::string dir = path.substr(start, colon - start);
    start = colon + 1;
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

WorkerCommand resolve_worker_command(const LaunchFlags& flags, const EnvLookup& env) {
  const std::vector<std::string>& words = flags.command;
  if (flags.module) {
    std::vector<std::string> argv = {"-m", *flags.module};
    argv.insert(argv.end(), words.begin(), words.end());
    return {with_python(flags, env, argv), false};
  }
  if (words.empty()) {
    fail(
        "nothing to launch: give a script (shardtrain launch --nproc-per-node 2 train.py), "
        "-m MODULE, or a shardtrain subcommand (shardtrain launch --nproc-per-node 2 -- train "
        "--config job.toml)");
  }
  const std::string& first = words.front();
  if (!flags.after_separator && first.size() > 1 && first[0] == '-') {
    fail(
        "unknown launch flag '{}'; HINT: see shardtrain launch --help (the worker command "
        "comes after the launcher's flags, or after --)",
        first);
  }
  const bool has_slash = first.find('/') != std::string::npos;
  if (flags.no_python) {
    const std::optional<std::string> exe =
        has_slash ? (is_executable_file(first) ? std::optional(first) : std::nullopt)
                  : find_on_path(first, env);
    if (!exe) fail("--no-python: '{}' is not an executable file (nor found on PATH)", first);
    std::vector<std::string> argv = words;
    argv.front() = *exe;
    return {argv, false};
  }
  if (std::find(flags.subcommands.begin(), flags.subcommands.end(), first) !=
      flags.subcommands.end()) {
    std::vector<std::string> argv = words;
    argv.insert(argv.begin(), self_executable());
    return {argv, true};
  }
  std::error_code ec;
  const bool exists = fs::is_regular_file(first, ec);
  const bool python_script = first.size() > 3 && first.compare(first.size() - 3, 3, ".py") == 0;
  if (python_script) {
    if (!exists) fail("script '{}' not found (relative to {})", first, fs::current_path().string());
    return {with_python(flags, env, words), false};
  }
  if (has_slash && is_executable_file(first)) return {words, false};
  if (!has_slash) {
    if (std::optional<std::string> exe = find_on_path(first, env)) {
      std::vector<std::string> argv = words;
      argv.front() = *exe;
      return {argv, false};
    }
  }
  if (exists) return {with_python(flags, env, words), false};
  fail(
      "worker command '{}' is not a shardtrain subcommand, a script or an executable on PATH; "
      "HINT: e.g. shardtrain launch --nproc-per-node 2 train.py, or -- train --config job.toml",
      first);
}

}  // namespace shardtrain::launch
