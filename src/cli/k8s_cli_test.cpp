// `shardtrain k8s` through the binary: every committed example in deploy/examples/ is exactly
// what its first line's command renders now (tools/render_k8s_examples.sh re-renders them),
// and bad input ends in one error line with exit code 2.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shardtrain
