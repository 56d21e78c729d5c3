// `shardtrain eval` reads what `train` reads and agrees with the evaluation during training:
// raw examples (packed into the cache at --seq-len), a prepared token file (its recorded
// sequence length is the default), and the last eval_loss train logged for data.eval_path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/testing/test_support.h"
#include "data/testing/tiny_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Result = shardtrain::testing::CommandResult;

Result run(const std::string& args) {
  return shardtrain::testing::run_command(std::string(SHARDTRAIN_BINARY) + " " + args);
}

class EvalCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardtrain_eval_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // A byte-level model (the demo config, vocab 260) with the tiny tokenizer, random init.
    model_ = path("model");
    fs::create_directories(model_);
    fs::copy_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo-model/config.json",
                  model_ + "/config.json");
    shardtrain::testing::write_tiny_tokenizer(model_);
    std::ofstream text(path("examples.jsonl"));
    for (int i = 0; i < 24; ++i) {
      text << nlohmann::json{{"text", "example " + std::to_string(i) + ": the cat sat."}}.dump()
           << "\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static nlohmann::json last_json(const Result& r) {
    return nlohmann::json::parse(r.lines().back());
  }

  fs::path dir_;
  std::string model_;
};

TEST_F(EvalCliTest, RawExamplesAndTokenFilesGiveTheLossTrainingLogged) {
  const std::string examples = path("examples.jsonl"), out = path("trained");
  const std::string metrics = path("metrics.jsonl");
  Result train = run("train --model.path " + model_ + " --model.init random --data.path " +
                     examples + " --data.seq_len 32 --data.cache_dir " + path("cache") +
                     " --train.steps 2 --train.micro_batch 2 --train.device cpu "
                     "--train.output_dir " +
                     out + " --data.eval_path " + examples + " --metrics " + metrics);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  nlohmann::json last;
  std::ifstream records(metrics);
  for (std::string line; std::getline(records, line);) last = nlohmann::json::parse(line);
  ASSERT_TRUE(last.contains("eval_loss")) << last.dump();
  const double logged = last["eval_loss"].get<double>();

  Result raw = run("eval --model " + out + " --data " + examples + " --seq-len 32 --cache-dir " +
                   path("cache2") + " --device cpu");
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_NEAR(last_json(raw)["loss"].get<double>(), logged, 1e-5 * logged) << raw.output;
  EXPECT_EQ(last_json(raw)["tokens"].get<int64_t>(), last["eval_tokens"].get<int64_t>());

  Result prepared = run("prepare --tokenizer " + model_ + " --data " + examples + " --out " +
                        path("eval.bin") + " --seq-len 32");
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  Result tokens = run("eval --model " + out + " --data " + path("eval.bin") + " --device cpu");
  ASSERT_EQ(tokens.exit_code, 0) << tokens.output;
  EXPECT_NE(tokens.output.find("sequences of 32 tokens"), std::string::npos)
      << "the packed length is the default:\n"
      << tokens.output;
  EXPECT_NEAR(last_json(tokens)["loss"].get<double>(), logged, 1e-5 * logged) << tokens.output;
}

TEST_F(EvalCliTest, TrainMixesSeveralSourcesAndNamesAnEmptyGlob) {
  fs::create_directories(path("shards"));
  fs::copy_file(path("examples.jsonl"), path("shards/a.jsonl"));
  fs::copy_file(path("examples.jsonl"), path("shards/b.jsonl"));
  const std::string common = "train --model.path " + model_ +
                             " --model.init random --data.seq_len 32 --data.cache_dir " +
                             path("cache") +
                             " --train.steps 1 --train.micro_batch 2 "
                             "--train.device cpu";
  Result mixed = run(common + " --data.path \"" + path("examples.jsonl") + ", " + path("shards") +
                     "\" --data.weights 1,3");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  EXPECT_NE(mixed.output.find("data source " + path("shards") + " (2 files)"), std::string::npos)
      << mixed.output;
  const std::string pattern = path("shards/*.bin");
  Result empty = run(common + " --data.path '" + pattern + "'");
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  ASSERT_EQ(empty.error_lines().size(), 1u) << empty.output;
  EXPECT_NE(empty.error_lines()[0].find("no file matches '" + pattern + "'"), std::string::npos)
      << empty.output;
}

TEST_F(EvalCliTest, MissingDataIsOneLineNamingIt) {
  const std::string missing = path("missing.jsonl");
  Result r = run("eval --model " + std::string(SHARDTRAIN_SOURCE_DIR) +
                 "/tests/golden/llama_gqa --data " + missing + " --seq-len 16 --device cpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  ASSERT_EQ(r.error_lines().size(), 1u) << r.output;
  EXPECT_NE(r.error_lines()[0].find(missing), std::string::npos) << r.output;
}

}  // namespace
