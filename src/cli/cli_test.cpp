// End-to-end tests of the shardtrain binary: the stable interfaces (train, eval, --help,
// --print-config, --metrics) and every bad input a user can give them, each of which must end in
// one error line naming the file or key and exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "data/testing/tiny_tokenizer.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using shardtrain::testing::kBinary;
using shardtrain::testing::kGolden;

using Result = shardtrain::testing::CommandResult;

Result run(const std::string& args) {
  return shardtrain::testing::run_command(kBinary + " " + args);
}

class CliTest : public shardtrain::testing::TempDirTest {
 protected:
  // A copy of a golden checkpoint dir that a test may damage.
  std::string copy_golden(const std::string& name) const {
    const std::string target = path(name);
    fs::create_directories(target);
    fs::copy_file(kGolden + name + "/config.json", target + "/config.json");
    fs::copy_file(kGolden + name + "/model.safetensors", target + "/model.safetensors");
    return target;
  }
  // JSONL of random-ish sequences below `vocab`, one per line.
  std::string write_jsonl(const std::string& name, int lines, int length, int vocab) const {
    std::string text;
    for (int l = 0; l < lines; ++l) {
      nlohmann::json ids = nlohmann::json::array();
      for (int t = 0; t < length; ++t) ids.push_back((l * 31 + t * 7 + t * t) % vocab);
      text += nlohmann::json{{"input_ids", ids}}.dump() + "\n";
    }
    return write(name, text);
  }
  std::string train_toml(const std::string& model_dir, const std::string& data,
                         const std::string& extra = "") const {
    return write("job.toml", "[model]\npath = \"" + model_dir + "\"\n[data]\npath = \"" + data +
                                 "\"\nseq_len = 16\n[train]\nsteps = 3\nmicro_batch = 2\n"
                                 "device = \"cpu\"\n" +
                                 extra);
  }

  // Expects exit code 2 and exactly one error line that contains every needle.
  static void expect_user_error(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const auto errors = r.error_lines();
    ASSERT_EQ(errors.size(), 1u) << r.output;
    for (const auto& needle : needles)
      EXPECT_NE(errors[0].find(needle), std::string::npos) << errors[0] << " lacks " << needle;
  }
};

TEST_F(CliTest, VersionAndHelpComeFromTheParser) {
  Result version = run("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.output.find("shardtrain " SHARDTRAIN_VERSION), std::string::npos);
  for (const std::string sub : {"train", "eval"}) {
    Result help = run(sub + " --help");
    EXPECT_EQ(help.exit_code, 0) << sub;
    EXPECT_NE(help.output.find("Usage:"), std::string::npos) << sub;
  }
  EXPECT_NE(run("train --help").output.find("--print-config"), std::string::npos);
  EXPECT_NE(run("eval --help").output.find("--seq-len"), std::string::npos);
  EXPECT_EQ(run("no-such-command").exit_code, 2);
}

TEST_F(CliTest, PrintConfigShowsResolvedValuesAndReloads) {
  const std::string toml = train_toml(kGolden + "llama_gqa", "x.jsonl");
  Result r = run("train --config " + toml + " --optim.lr=0.0123 --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[optim]"), std::string::npos);
  EXPECT_NE(r.output.find("lr = 0.0123"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("steps = 3"), std::string::npos);
  // The printed config is itself a valid config.
  const std::string printed = write("printed.toml", r.output);
  Result again = run("train --config " + printed + " --print-config");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, r.output);
}

TEST_F(CliTest, EvalMatchesTransformersLossOnGoldenBatch) {
  // expected.safetensors holds the batch and the loss transformers computed on it; the same
  // sequences and labels as JSONL must give the same mean loss through `shardtrain eval`.
  for (const std::string model : {"llama_gqa", "qwen2_tied_bias"}) {
    const auto expected =
        shardtrain::SafetensorsFile::open(kGolden + model + "/expected.safetensors");
    const auto* ids = expected.find("input_ids");
    const auto* labels = expected.find("labels");
    const int64_t batch = ids->shape[0], seq = ids->shape[1];
    std::string text;
    for (int64_t b = 0; b < batch; ++b) {
      const auto* id = static_cast<const int32_t*>(ids->data) + b * seq;
      const auto* label = static_cast<const int32_t*>(labels->data) + b * seq;
      text += nlohmann::json{{"input_ids", std::vector<int32_t>(id, id + seq)},
                             {"labels", std::vector<int32_t>(label, label + seq)}}
                  .dump() +
              "\n";
    }
    const std::string data = write("golden.jsonl", text);
    Result r = run("eval --model " + kGolden + model + " --data " + data + " --seq-len " +
                   std::to_string(seq) + " --device cpu");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto result = nlohmann::json::parse(r.lines().back());
    const double want = *static_cast<const float*>(expected.find("loss")->data);
    EXPECT_NEAR(result["loss"].get<double>(), want, 1e-5 * want) << model;
    EXPECT_NEAR(result["ppl"].get<double>(), std::exp(result["loss"].get<double>()), 1e-6);
  }
}

TEST_F(CliTest, TrainWritesMetricsSavesCheckpointAndEvalReadsIt) {
  const std::string data = write_jsonl("data.jsonl", 16, 16, 96);
  const std::string out = path("trained");
  const std::string toml =
      train_toml(kGolden + "llama_gqa", data, "output_dir = \"" + out + "\"\n[optim]\nlr = 1e-3\n");
  const std::string metrics = path("metrics.jsonl");
  Result r = run("train --config " + toml + " --steps 4 --metrics " + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 4/4 | loss"), std::string::npos) << r.output;
  std::ifstream in(metrics);
  int records = 0;
  for (std::string line; std::getline(in, line); ++records) {
    const auto record = nlohmann::json::parse(line);
    EXPECT_EQ(record["step"].get<int>(), records + 1);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"})
      EXPECT_TRUE(record.contains(key)) << key;
  }
  EXPECT_EQ(records, 4);
  ASSERT_TRUE(fs::exists(out + "/model.safetensors"));
  ASSERT_TRUE(fs::exists(out + "/config.json"));
  Result eval = run("eval --model " + out + " --data " + data + " --seq-len 16 --device cpu");
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_EQ(nlohmann::json::parse(eval.lines().back())["tokens"].get<int>(), 16 * 15);
}

TEST_F(CliTest, TrainOnRawTextExamplesPreparesOnceIntoTheCache) {
  // A byte-level model dir (demo config, vocab 260) with a tokenizer, and {"text"} examples:
  // train tokenizes and packs them into data.cache_dir, and a second run reuses that file.
  const std::string model = path("model");
  fs::create_directories(model);
  fs::copy_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo-model/config.json",
                model + "/config.json");
  shardtrain::testing::write_tiny_tokenizer(model);
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += nlohmann::json{{"text", "example " + std::to_string(i) + ": the cat sat on the mat."}}
                .dump() +
            "\n";
  const std::string data = write("examples.jsonl", text);
  const std::string cache = path("cache");
  const std::string toml =
      write("job.toml", "[model]\npath = \"" + model + "\"\ninit = \"random\"\n[data]\npath = \"" +
                            data + "\"\nseq_len = 32\ncache_dir = \"" + cache +
                            "\"\n[train]\nsteps = 2\nmicro_batch = 2\ndevice = \"cpu\"\n");
  Result first = run("train --config " + toml);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::vector<fs::path> cached;
  for (const auto& entry : fs::directory_iterator(cache))
    if (entry.path().extension() == ".bin") cached.push_back(entry.path());
  ASSERT_EQ(cached.size(), 1u);
  const auto written = fs::last_write_time(cached[0]);
  Result second = run("train --config " + toml);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(fs::last_write_time(cached[0]), written);
  EXPECT_NE(second.output.find(cached[0].string()), std::string::npos) << second.output;
}

TEST_F(CliTest, TrainedModelCarriesItsTokenizerAndGenerates) {
  // Train the demo model briefly on raw text; the saved dir gets the tokenizer files, and
  // `generate` continues a prompt deterministically (greedy, and seeded top-p sampling).
  const std::string out = path("trained");
  // demo.toml's paths are relative to the repository root.
  Result train = shardtrain::testing::run_command(
      "cd " + std::string(SHARDTRAIN_SOURCE_DIR) + " && " + kBinary +
      " train --config examples/demo.toml --steps 2 --optim.warmup_steps=1 --train.device=cpu"
      " --train.micro_batch=2 --data.cache_dir=" +
      path("cache") + " --train.output_dir=" + out + " --train.log_every=1");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  ASSERT_TRUE(fs::exists(out + "/tokenizer.json"));
  ASSERT_TRUE(fs::exists(out + "/tokenizer_config.json"));
  const std::string greedy =
      "generate --model " + out + " --prompt \"The red horse\" --max-new-tokens 12 --device cpu";
  Result first = run(greedy);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.lines().back().rfind("The red horse", 0), 0u) << first.output;
  EXPECT_GT(first.lines().back().size(), std::string("The red horse").size());
  EXPECT_EQ(run(greedy).output, first.output);
  const std::string sampled = greedy + " --temperature 1.0 --top-p 0.9 --seed 5";
  Result a = run(sampled), b = run(sampled);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  // A checkpoint without tokenizer files cannot generate: one error line naming the dir.
  fs::remove(out + "/tokenizer.json");
  expect_user_error(run(greedy), {out});
}

TEST_F(CliTest, BenchCommRunsAcrossLaunchedRanks) {
  // A measurement command, checked only for working: 2 Gloo ranks, 2 sizes, one row each.
  Result r =
      run("launch --standalone --nproc-per-node 2 -- bench comm --device cpu "
          "--min-mib 1 --max-mib 2 --iterations 1 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bench comm: 2 ranks, gloo"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1048576"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2097152"), std::string::npos) << r.output;
  expect_user_error(run("bench comm --min-mib 8 --max-mib 1"), {"--min-mib"});
  // nan measured nothing and exited 0; 1e12 MiB allocated ever larger buffers until it failed.
  for (const char* sizes : {"--min-mib nan", "--max-mib 1e12", "--min-mib 1e-9 --max-mib 1"}) {
    expect_user_error(run(std::string("bench comm --device cpu ") + sizes),
                      {"need 0.0009765625 <= min <= max <= 16384"});
  }
  for (const char* counts : {"--iterations 2000000000", "--warmup 2000000000"}) {
    EXPECT_EQ(run(std::string("bench comm --device cpu ") + counts).exit_code, 2) << counts;
  }
}

TEST_F(CliTest, MissingCheckpointDir) {
  const std::string data = write_jsonl("data.jsonl", 4, 16, 96);
  expect_user_error(run("eval --model " + path("nowhere") + " --data " + data), {path("nowhere")});
}

TEST_F(CliTest, UnsupportedModelType) {
  const std::string model = copy_golden("llama_gqa");
  auto config = nlohmann::json::parse(std::ifstream(model + "/config.json"));
  config["model_type"] = "gpt2";
  write("llama_gqa/config.json", config.dump());
  const std::string data = write_jsonl("data.jsonl", 4, 16, 96);
  expect_user_error(run("eval --model " + model + " --data " + data), {"config.json", "gpt2"});
}

TEST_F(CliTest, TruncatedSafetensors) {
  const std::string model = copy_golden("llama_gqa");
  fs::resize_file(model + "/model.safetensors", fs::file_size(model + "/model.safetensors") / 2);
  const std::string data = write_jsonl("data.jsonl", 4, 16, 96);
  expect_user_error(run("eval --model " + model + " --data " + data), {"model.safetensors"});
}

TEST_F(CliTest, TensorMissingFromCheckpoint) {
  const std::string model = copy_golden("llama_gqa");
  auto config = nlohmann::json::parse(std::ifstream(model + "/config.json"));
  config["num_hidden_layers"] = 3;  // layer 2 is not in the file
  write("llama_gqa/config.json", config.dump());
  const std::string data = write_jsonl("data.jsonl", 4, 16, 96);
  expect_user_error(run("eval --model " + model + " --data " + data), {"model.layers.2.", model});
}

// `shardtrain plan` counts activation memory per checkpointing mode: full keeps the least,
// selective (attention outputs kept) more, none the most; an unknown mode is a one-line error.
TEST_F(CliTest, PlanActivationMemoryPerCheckpointingMode) {
  const std::string toml = write(
      "plan.toml", "[model]\npath = \"" + kGolden + "llama_gqa\"\n[data]\npath = \"" +
                       path("unused.jsonl") + "\"\nseq_len = 128\n[train]\nmicro_batch = 64\n");
  const auto activations_mib = [&](const std::string& mode) {
    const Result r = run("plan --config " + toml + " --train.activation_checkpointing=" + mode);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("FULL_SHARD", 0) != 0) continue;
      // strategy, group, then "<value> MiB" columns by category: activations, then the total.
      std::istringstream fields(line);
      std::string strategy, unit;
      double group = 0, value = 0;
      std::vector<double> values;
      fields >> strategy >> group;
      while (fields >> value >> unit) values.push_back(value);
      EXPECT_EQ(values.size(), 8u) << line;
      return values.size() >= 2 ? values[values.size() - 2] : 0.0;
    }
    ADD_FAILURE() << "no FULL_SHARD row in " << r.output;
    return 0.0;
  };
  const double none = activations_mib("none"), selective = activations_mib("selective"),
               full = activations_mib("full");
  EXPECT_LT(full, selective);
  EXPECT_LT(selective, none);
  expect_user_error(run("plan --config " + toml + " --train.activation_checkpointing=partial"),
                    {"train.activation_checkpointing", "selective"});
}

// `shardtrain plan --gpu-memory` (no GPU needed): a verdict per strategy and checkpointing mode
// and the smallest setting that fits; a malformed size or unknown GPU is a one-line error.
TEST_F(CliTest, PlanGpuMemoryVerdicts) {
  const std::string toml = write(
      "plan.toml", "[model]\npath = \"" + kGolden + "llama_gqa\"\n[data]\npath = \"" +
                       path("unused.jsonl") + "\"\nseq_len = 128\n[train]\nmicro_batch = 4\n");
  const Result roomy = run("plan --config " + toml + " --world-size 8 --gpu-memory h200");
  EXPECT_EQ(roomy.exit_code, 0) << roomy.output;
  EXPECT_NE(roomy.output.find("fit on 140.40 GiB per GPU (h200"), std::string::npos)
      << roomy.output;
  // A tiny model fits anywhere: the least memory is full checkpointing, where FULL_SHARD and
  // SHARD_GRAD_OP need the same bytes (three units: nothing to free between forward and
  // backward) and the tie goes to the faster of the two; the fastest is NO_SHARD without
  // checkpointing.
  EXPECT_NE(roomy.output.find("smallest setting that fits: --fsdp.strategy=SHARD_GRAD_OP "
                              "--train.activation_checkpointing=full"),
            std::string::npos)
      << roomy.output;
  EXPECT_NE(roomy.output.find("fastest setting that fits (least recomputation and "
                              "communication): --fsdp.strategy=NO_SHARD "
                              "--train.activation_checkpointing=none"),
            std::string::npos)
      << roomy.output;
  // 1 GiB is below the 1.5 GiB reserve: nothing fits, at any micro-batch.
  const Result tiny = run("plan --config " + toml + " --gpu-memory 1GiB");
  EXPECT_EQ(tiny.exit_code, 0) << tiny.output;
  EXPECT_NE(tiny.output.find("nothing fits, even at micro_batch 1"), std::string::npos)
      << tiny.output;
  EXPECT_NE(tiny.output.find("no   "), std::string::npos) << tiny.output;
  for (const char* bad : {"24", "24XB", "a100", "0GiB", "GiB"}) {
    expect_user_error(run("plan --config " + toml + " --gpu-memory " + bad),
                      {"--gpu-memory", bad, "HINT"});
  }
}

TEST_F(CliTest, TomlUnknownKeySuggestsNearest) {
  const std::string data = write_jsonl("data.jsonl", 4, 16, 96);
  const std::string toml = train_toml(kGolden + "llama_gqa", data, "[optim]\nlearning_rat = 0.1\n");
  expect_user_error(run("train --config " + toml), {"optim.learning_rat", toml});
}

TEST_F(CliTest, TomlWrongType) {
  const std::string data = write_jsonl("data.jsonl", 4, 16, 96);
  const std::string toml = write("job.toml", "[train]\nsteps = \"ten\"\n");
  expect_user_error(run("train --config " + toml), {"train.steps", toml});
}

TEST_F(CliTest, OverrideUnknownKeySuggestsNearest) {
  const std::string data = write_jsonl("data.jsonl", 4, 16, 96);
  const std::string toml = train_toml(kGolden + "llama_gqa", data);
  expect_user_error(run("train --config " + toml + " --optim.weight_decy=0.1"),
                    {"optim.weight_decy", "optim.weight_decay"});
}

TEST_F(CliTest, TokenIdBeyondVocab) {
  const std::string data =
      write("data.jsonl", "{\"input_ids\":[1,2,3]}\n{\"input_ids\":[4,500,6]}\n");
  const std::string toml = train_toml(kGolden + "llama_gqa", data);
  expect_user_error(run("train --config " + toml), {data, "500", "96"});
}

TEST_F(CliTest, EmptyDataFile) {
  for (const std::string name : {"empty.jsonl", "empty.bin"}) {
    const std::string data = write(name, "");
    const std::string toml = train_toml(kGolden + "llama_gqa", data);
    expect_user_error(run("train --config " + toml), {data});
  }
}

// Inputs that crashed the binary (rc 134: bad_alloc, a negative tensor dim, an uncaught JSON
// type_error) or leaked the JSON library's text: now one line naming the key, exit 2.
TEST_F(CliTest, HostileSizesAndFilesEndInOneLineErrors) {
  const std::string data = write_jsonl("data.jsonl", 8, 20, 90);
  const auto model_with = [&](const std::string& name, const std::string& key,
                              const std::string& value) {
    const std::string dir = copy_golden("llama_gqa");
    std::ifstream in(dir + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config[key] = nlohmann::json::parse(value);
    fs::rename(dir, path(name));
    std::ofstream(path(name) + "/config.json", std::ios::trunc) << config.dump();
    return path(name);
  };
  expect_user_error(
      run("train --config " + train_toml(model_with("h40", "hidden_size", "1099511627776"), data)),
      {"'hidden_size' = 1099511627776", "maximum"});
  expect_user_error(run("train --config " +
                        train_toml(model_with("h62", "hidden_size", "4611686018427387904"), data)),
                    {"'hidden_size'", "maximum"});
  expect_user_error(run("train --config " +
                        train_toml(model_with("l9", "num_hidden_layers", "1000000000"), data)),
                    {"'num_hidden_layers'", "maximum"});
  expect_user_error(run("train --config " + train_toml(kGolden + "llama_gqa", data) +
                        " --data.seq_len=1000000000000"),
                    {"'data.seq_len'", "1000000000000"});

  const std::string tokenizer_dir = path("tok");
  fs::create_directories(tokenizer_dir);
  shardtrain::testing::write_tiny_tokenizer(tokenizer_dir);
  const Result bad_line = shardtrain::testing::run_command(
      "echo '{\"text\": ' | " + kBinary + " tokenize --tokenizer " + tokenizer_dir);
  expect_user_error(bad_line, {"stdin:1: not valid JSON"});
  EXPECT_EQ(bad_line.output.find("[json.exception"), std::string::npos) << bad_line.output;
  std::string text;
  {
    std::ifstream in(tokenizer_dir + "/tokenizer.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  write("tok/tokenizer.json", text.substr(0, text.size() / 2));  // truncated
  const Result truncated = shardtrain::testing::run_command(
      "echo '{\"text\": \"hi\"}' | " + kBinary + " tokenize --tokenizer " + tokenizer_dir);
  expect_user_error(truncated, {"tokenizer.json: not valid JSON"});
  EXPECT_EQ(truncated.output.find("[json.exception"), std::string::npos) << truncated.output;
  nlohmann::json dropout = nlohmann::json::parse(text);
  dropout["model"]["dropout"] = "high";
  write("tok/tokenizer.json", dropout.dump());
  expect_user_error(shardtrain::testing::run_command("echo '{\"text\": \"hi\"}' | " + kBinary +
                                                     " tokenize --tokenizer " + tokenizer_dir),
                    {"model.dropout must be a number"});
}

TEST_F(CliTest, Fp8IsRefusedOnTheCpuBackend) {
  // FP8 is a GPU feature: on the CPU, one line naming the key, why, and what to use instead.
  const std::string data = write_jsonl("data.jsonl", 8, 17, 64);
  const std::string toml = train_toml(kGolden + "llama_gqa", data);
  expect_user_error(run("train --config " + toml + " --train.precision=fp8"),
                    {"train.precision = \"fp8\"", "CPU backend", "train.precision = \"bf16\""});
  expect_user_error(run("train --config " + toml + " --train.precision=fp16"),
                    {"train.precision", "fp8"});
}

TEST_F(CliTest, MisspeltEnvironmentSwitchesEndInOneLineErrors) {
  // A measurement switch or the log level with a value it does not know stops the run before any
  // work, naming the variable and what it accepts, on the CPU backend too (where the switch
  // itself would not apply).
  const std::string data = write_jsonl("data.jsonl", 8, 17, 64);
  const std::string train = " " + kBinary + " train --config " +
                            train_toml(kGolden + "llama_gqa", data) + " --train.steps=1";
  const auto with = [&](const std::string& assignment) {
    return shardtrain::testing::run_command(assignment + train);
  };
  expect_user_error(with("SHARDTRAIN_PROFILE_OPS=yes"), {"SHARDTRAIN_PROFILE_OPS='yes'", "1", "0"});
  expect_user_error(with("SHARDTRAIN_GEMM_AUTOTUNE=off"), {"SHARDTRAIN_GEMM_AUTOTUNE='off'"});
  expect_user_error(with("SHARDTRAIN_MOE_GEMM=wgmm"), {"SHARDTRAIN_MOE_GEMM='wgmm'", "cublas"});
  expect_user_error(with("SHARDTRAIN_LORA_KERNELS=true"), {"SHARDTRAIN_LORA_KERNELS='true'"});
  expect_user_error(with("SHARDTRAIN_FP8_FUSED_SWIGLU=2"), {"SHARDTRAIN_FP8_FUSED_SWIGLU='2'"});
  expect_user_error(with("SHARDTRAIN_LOG=verbose"), {"SHARDTRAIN_LOG='verbose'", "debug"});
  // Accepted spellings run; an empty value is the default.
  EXPECT_EQ(with("SHARDTRAIN_PROFILE_OPS=0 SHARDTRAIN_MOE_GEMM= SHARDTRAIN_LOG=warn").exit_code, 0);
}

TEST_F(CliTest, NonFiniteNumbersAndLoraKeysWithoutLora) {
  const std::string data = write_jsonl("data.jsonl", 8, 16, 90);
  const std::string toml = train_toml(kGolden + "llama_gqa", data);
  expect_user_error(run("train --config " + toml + " --optim.lr=inf"),
                    {"'optim.lr=inf'", "'optim.lr' must be a finite number"});
  // An adapter to continue with LoRA off: refused (it would train the whole model instead).
  expect_user_error(run("train --config " + toml + " --lora.adapter=" + path("adapter")),
                    {"'lora.adapter'", "'lora.enabled' is false"});
  // Other [lora] keys with LoRA off: the run goes on and says which keys it did not use.
  const Result r =
      run("train --config " + toml + " --steps 1 --lora.rank=16 --lora.target_modules=q_proj");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("config keys lora.rank, lora.target_modules are set but 'lora.enabled' "
                          "is false: the whole model is trained"),
            std::string::npos)
      << r.output;
  // Floating-point flags: CLI::Range let nan through (doctor's NCCL test then failed an
  // internal check).
  for (const std::string& flags : std::vector<std::string>{
           "doctor --network-timeout nan", "doctor --nccl-test --nccl-test-mib nan",
           "generate --model " + kGolden + "llama_gqa --prompt hi --top-p nan",
           "launch --metrics-gpu-interval inf -- train --config " + toml}) {
    const Result bad = run(flags);
    EXPECT_EQ(bad.exit_code, 2) << flags << ": " << bad.output;
    EXPECT_NE(bad.output.find("is not a finite number in ["), std::string::npos)
        << flags << ": " << bad.output;
  }
  // TOML's nan literal (train_toml rewrites job.toml).
  expect_user_error(
      run("train --config " + train_toml(kGolden + "llama_gqa", data, "[optim]\nlr = nan\n")),
      {"job.toml", "'optim.lr' must be a finite number"});
}

TEST_F(CliTest, EvalBoundsItsSizes) {
  const std::string data = write_jsonl("data.jsonl", 8, 16, 90);
  const std::string eval = "eval --model " + kGolden + "llama_gqa --data " + data + " --device cpu";
  expect_user_error(run(eval + " --seq-len 2000000"),
                    {"sequence length 2000000", "outside [2, 1048576]"});
  // Was an allocation of 10^8 sequences, ending in "out of memory".
  expect_user_error(run(eval + " --seq-len 16 --batch 100000000"),
                    {"--batch 100000000 x --seq-len 16 exceed 16777216 tokens"});
  for (const char* flag : {"--seq-len -5", "--max-sequences -1"}) {
    const Result r = run(eval + " " + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
  }
}

TEST_F(CliTest, MissingConfigFile) {
  Result r = run("train --config " + path("absent.toml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("absent.toml"), std::string::npos);
}

}  // namespace
