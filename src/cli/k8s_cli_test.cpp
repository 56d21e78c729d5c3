// `shardtrain k8s` through the binary: every committed example in deploy/examples/ is exactly
// what its first line's command renders now (tools/render_k8s_examples.sh re-renders them),
// and bad input ends in one error line with exit code 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

using testing::read_text;

TEST(K8sCliTest, CommittedExamplesEqualWhatTheCommandRendersNow) {
  const fs::path examples = fs::path(SHARDTRAIN_SOURCE_DIR) / "deploy/examples";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(examples)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string text = read_text(entry.path());
    const std::string prefix = "# shardtrain ";
    ASSERT_EQ(text.rfind(prefix + "k8s ", 0), 0u) << entry.path() << " must start with the command";
    const size_t end_of_header = text.find('\n');
    const std::string args = text.substr(prefix.size(), end_of_header - prefix.size());
    const auto result = run_command(std::string(SHARDTRAIN_BINARY) + " " + args);
    ASSERT_EQ(result.exit_code, 0) << args << "\n" << result.output;
    EXPECT_EQ(result.output, text.substr(end_of_header + 1))
        << entry.path() << " is stale: run tools/render_k8s_examples.sh";
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(K8sCliTest, BadInputIsOneLineAndExitCode2) {
  const std::string k8s = std::string(SHARDTRAIN_BINARY) + " k8s ";
  const std::string ok = " --name j --image reg/img:1 ";
  const std::pair<std::string, std::string> cases[] = {
      {"pytorchjob" + ok + "--nodes 0 --gpus-per-node 8 -- train --config x.toml",
       "shardtrain: error: --nodes '0': expected an integer from 1 to 10000"},
      {"pytorchjob" + ok + "--nodes 2 -- train --config x.toml",
       "shardtrain: error: --gpus-per-node is required, e.g. --gpus-per-node 8 (0 for a CPU job)"},
      {"mpijob" + ok + "--nodes 2 --gpus-per-node 8 -- train --config x.toml",
       "shardtrain: error: unknown KIND 'mpijob': expected pytorchjob, trainjob, jobset or rayjob"},
      {"jobset" + ok + "--nodes 2 --min-nodes 3 --gpus-per-node 8 -- train",
       "shardtrain: error: --min-nodes 3 is greater than --nodes 2; an elastic job runs between "
       "--min-nodes and --nodes nodes"},
      {"jobset --name j --image 'reg/my img:1' --nodes 2 --gpus-per-node 8 -- train",
       "shardtrain: error: --image 'reg/my img:1': expected an image reference without spaces, "
       "e.g. registry.example/shardtrain:0.1.0"},
      {"trainjob" + ok + "--nodes 2 --gpus-per-node 8 -- python train.py",
       "shardtrain: error: worker command 'python': shardtrain launch runs a shardtrain "
       "subcommand (train, eval, bench, doctor) or an absolute path to an executable, e.g. -- "
       "train --config job.toml"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = run_command(k8s + args);
    EXPECT_EQ(result.exit_code, 2) << args;
    EXPECT_EQ(result.output, message + "\n") << args;
  }
}

// The worker command is parsed at render time by the parser the worker runs; an unknown k8s
// flag is named in one line.
TEST(K8sCliTest, WorkerCommandAndUnknownFlagsAreCheckedAtRenderTime) {
  const std::string k8s = std::string(SHARDTRAIN_BINARY) + " k8s pytorchjob --name j --image " +
                          "reg/img:1 --nodes 2 --gpus-per-node 8 ";
  const std::pair<std::string, std::string> cases[] = {
      {"--bogus -- train --config a.toml",
       "shardtrain: error: unknown flag '--bogus' for shardtrain k8s; see shardtrain k8s --help"},
      {"-- train",
       "shardtrain: error: worker command: train without --config has no model or data to train "
       "on; HINT: -- train --config /etc/shardtrain/job.toml (a path in the image or a volume), "
       "or --config-file PATH to mount a local file"},
      {"-- train --config a.toml --nproc-per-node 2",
       "shardtrain: error: worker command: --nproc-per-node belongs to the launcher, which the "
       "manifests give one worker per GPU (--gpus-per-node); drop it from the worker command"},
      {"--shm-size 0 -- train --config a.toml",
       "shardtrain: error: --shm-size '0': /dev/shm must be larger than 0 (NCCL and Gloo need "
       "it), e.g. 64Gi"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = run_command(k8s + args);
    EXPECT_EQ(result.exit_code, 2) << args;
    EXPECT_EQ(result.output, message + "\n") << args;
  }
  // A misspelt flag: train reads it as a config override, which the schema refuses.
  const auto typo = run_command(k8s + "-- train --confg a.toml");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_EQ(typo.output.rfind("shardtrain: error: worker command: ", 0), 0u) << typo.output;
  EXPECT_NE(typo.output.find("confg"), std::string::npos) << typo.output;
  EXPECT_EQ(std::count(typo.output.begin(), typo.output.end(), '\n'), 1) << typo.output;
  // eval's own parser: an unknown flag of eval.
  const auto eval = run_command(k8s + "-- eval --model /m --data /d --bogus-eval-flag");
  EXPECT_EQ(eval.exit_code, 2) << eval.output;
  EXPECT_NE(eval.output.find("worker command: 'eval'"), std::string::npos) << eval.output;
  // A valid command with an override the schema knows renders.
  EXPECT_EQ(run_command(k8s + "-- train --config a.toml --optim.lr=1e-4").exit_code, 0);
}

TEST(K8sCliTest, ConfigFileIsCheckedAndRenderedAsAConfigMap) {
  const fs::path dir = fs::temp_directory_path() / ("k8s_cli_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "good.toml") << "[train]\nsteps = 5\n";
  std::ofstream(dir / "bad.toml") << "[train]\nstepz = 5\n";
  const std::string k8s = std::string(SHARDTRAIN_BINARY) + " k8s jobset --name j --image " +
                          "reg/img:1 --nodes 2 --gpus-per-node 0 --config-file ";
  const auto good = run_command(k8s + (dir / "good.toml").string() + " -- train --steps 5");
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_NE(good.output.find("kind: ConfigMap"), std::string::npos) << good.output;
  EXPECT_NE(good.output.find("/etc/shardtrain/job.toml"), std::string::npos) << good.output;
  const auto bad = run_command(k8s + (dir / "bad.toml").string() + " -- train");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("stepz"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("bad.toml"), std::string::npos) << bad.output;
  const auto missing = run_command(k8s + (dir / "none.toml").string() + " -- train");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("none.toml': no such file"), std::string::npos) << missing.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardtrain
