// Mixture-of-experts models through the binary: `shardtrain plan` on the Qwen3-30B-A3B bench
// shape (8 of its 48 layers) counts the experts' parameters and activations, and a config.json
// with more experts per token than experts is refused before anything runs: exit 2, one line
// naming the key.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

const std::string kSource = SHARDTRAIN_SOURCE_DIR;

testing::CommandResult plan(const std::string& model_dir) {
  return testing::run_command(std::string(SHARDTRAIN_BINARY) + " plan --config " + kSource +
                              "/bench/bench.toml --model.path=" + model_dir +
                              " --data.path=unused --data.seq_len=4096 --train.micro_batch=1 " +
                              "--gpu-memory h200");
}

TEST(MoeCli, PlanCountsTheExperts) {
  const auto result = plan(kSource + "/bench/shapes/qwen3-30b-a3b-8l");
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

class MoeCliBadConfig : public testing::TempDirTest {};

TEST_F(MoeCliBadConfig, MoreExpertsPerTokenThanExpertsExitsTwoWithOneLine) {
  std::ifstream in(kSource + "/bench/shapes/qwen3-30b-a3b-8l/config.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string bad = std::regex_replace(text.str(), std::regex(R"("num_experts_per_tok": 8)"),
                                             R"("num_experts_per_tok": 200)");
  std::ofstream((dir_ / "config.json").string()) << bad;
  const auto result = plan(dir_.string());
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("'num_experts_per_tok' = 200"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << result.output;  // one line
}

}  // namespace
}  // namespace shardtrain
