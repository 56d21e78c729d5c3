// save_hf_checkpoint: a saved model loads back bit-identically (fp32) and gives identical
// logits; bf16 saves hold the bf16-rounded values; only our own files in the output dir are
// replaced; input and checkpoint dirs are refused.
#include "model/save_hf.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/decoder_model.h"
#include "ops/cpu/cpu_ops.h"
#include "testing/golden_fixture.h"  // LocalUnits: whole-model units for one process

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_config() {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 64;
  c.rope.theta = 10000;
  return c;
}

std::vector<std::vector<float>> random_units(const ParamLayout& layout) {
  std::vector<std::vector<float>> units;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    units.emplace_back(layout.units[u].numel);
    init_unit_random(layout.units[u], static_cast<int>(u), 7, 0.3, units.back().data());
    // Make norms and biases non-trivial so a mix-up would show (padding stays zero).
    for (const ParamSpec& p : layout.units[u].params)
      for (int64_t i = 0; i < p.numel(); ++i) units.back()[p.offset + i] += 0.01f * (i % 13);
  }
  return units;
}

std::vector<float> logits_of(const ModelConfig& config,
                             const std::vector<std::vector<float>>& values) {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  DecoderModel model(config, *ops);
  LocalUnits units(*ops, model.layout(), false);
  for (int u = 0; u < model.unit_count(); ++u) units.upload_master(u, values[u].data());
  Example example;
  for (int t = 0; t < 12; ++t) {
    example.input_ids.push_back((t * 7 + 3) % 50);
    example.labels.push_back(example.input_ids.back());
  }
  model.reserve(1, 12);
  model.set_batch(make_batch({example}));
  std::vector<float> logits(12 * config.vocab_size);
  model.forward(units, Tensor(), logits.data());
  return logits;
}

std::vector<std::vector<float>> load(const std::string& dir, const ParamLayout& layout) {
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  std::vector<std::vector<float>> units;
  for (const UnitLayout& unit : layout.units) {
    units.emplace_back(unit.numel);
    load_unit_from_checkpoint(checkpoint, unit, units.back().data());
  }
  return units;
}

class SaveHfTest : public testing::TempDirTest {};

TEST_F(SaveHfTest, Fp32RoundTripGivesIdenticalLogits) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  const std::string out = (dir_ / "model").string();
  save_hf_checkpoint(
      out, config, layout, [&](int u) { return values[u].data(); }, DType::kF32);

  EXPECT_EQ(read_hf_config(out + "/config.json").num_hidden_layers, 2);
  const auto loaded = load(out, layout);
  for (size_t u = 0; u < values.size(); ++u) EXPECT_EQ(loaded[u], values[u]) << "unit " << u;
  EXPECT_EQ(logits_of(config, loaded), logits_of(config, values));
  // Tied embeddings: no lm_head tensor is written.
  EXPECT_EQ(HfCheckpoint::open(out).find("lm_head.weight"), nullptr);
}

TEST_F(SaveHfTest, Bf16SaveHoldsRoundedValues) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  const std::string out = (dir_ / "model_bf16").string();
  save_hf_checkpoint(
      out, config, layout, [&](int u) { return values[u].data(); }, DType::kBF16);
  const auto loaded = load(out, layout);
  for (size_t u = 0; u < values.size(); ++u) {
    for (size_t i = 0; i < values[u].size(); ++i) {
      ASSERT_EQ(loaded[u][i], bf16_to_f32(f32_to_bf16(values[u][i]))) << "unit " << u << " " << i;
    }
  }
  EXPECT_EQ(read_hf_config(out + "/config.json").torch_dtype, "bfloat16");
}

// An output dir with a user's files in it: only our files are replaced (the old code renamed the
// dir away and deleted it whole, notes included).
TEST_F(SaveHfTest, ReplacesOnlyItsOwnFilesAndLeavesEverythingElse) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  const std::string out = (dir_ / "model").string();
  const auto save = [&](uint64_t max_shard_bytes) {
    SaveHfOptions options;
    options.max_shard_bytes = max_shard_bytes;
    save_hf_checkpoint(
        out, config, layout, [&](int u) { return values[u].data(); }, DType::kF32, options);
  };
  fs::create_directories(out + "/runs");
  std::ofstream(out + "/notes.txt") << "mine";
  std::ofstream(out + "/runs/log.txt") << "also mine";
  std::ofstream(out + "/config.json") << "{old}";
  save(4096);  // sharded: model-0000K-of-0000N.safetensors + index
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  std::vector<std::string> shards;
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("model-000", 0) == 0) shards.push_back(name);
  }
  ASSERT_GE(shards.size(), 2u);
  EXPECT_EQ(load(out, layout), values);
  save(0);  // one file: the earlier shards and index are ours and would mix with it
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  for (const std::string& shard : shards) EXPECT_FALSE(fs::exists(out + "/" + shard)) << shard;
  EXPECT_EQ(load(out, layout), values);
  EXPECT_EQ(read_hf_config(out + "/config.json").num_hidden_layers, 2);
  std::ifstream notes(out + "/notes.txt"), log(out + "/runs/log.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(notes), {}), "mine");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(log), {}), "also mine");
  for (const auto& entry : fs::recursive_directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
}

// A save that fails half-way (a truncated checkpoint shard while exporting): a dir it created
// is removed with what it wrote; an existing dir keeps the user's files.
TEST_F(SaveHfTest, AFailedSaveLeavesNoNewDirBehindAndKeepsOtherFiles) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  std::ofstream(dir_ / "tokenizer.json") << "{}";
  const auto failing_save = [&](const std::string& out) {
    SaveHfOptions options;
    options.max_shard_bytes = 4096;  // several files, so some are written before the failure
    options.extra_files = {(dir_ / "tokenizer.json").string()};
    const auto second_unit_fails = [&](int u) -> const float* {
      if (u == 1) fail("rank_00000.safetensors is truncated");
      return values[u].data();
    };
    EXPECT_THROW(save_hf_checkpoint(out, config, layout, second_unit_fails, DType::kF32, options),
                 Error);
  };
  const std::string fresh = (dir_ / "fresh").string();
  failing_save(fresh);
  EXPECT_FALSE(fs::exists(fresh));
  const std::string existing = (dir_ / "existing").string();
  fs::create_directories(existing);
  std::ofstream(existing + "/notes.txt") << "mine";
  failing_save(existing);
  EXPECT_TRUE(fs::exists(existing + "/notes.txt"));
  EXPECT_FALSE(fs::exists(existing + "/config.json")) << "config.json is written last";
}

std::string contents_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A save over an older model that fails half-way keeps the old model whole: before, the new
// tokenizer files were already in place when the weights failed, so the old weights sat beside
// the new tokenizer.
TEST_F(SaveHfTest, AFailedSaveOverAnOldModelLeavesItWhole) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto old_values = random_units(layout);
  auto new_values = old_values;  // every parameter moved; the padding stays zero
  for (size_t u = 0; u < layout.units.size(); ++u)
    for (const ParamSpec& p : layout.units[u].params)
      for (int64_t i = 0; i < p.numel(); ++i) new_values[u][p.offset + i] += 1.0f;
  const std::string out = (dir_ / "model").string();
  const auto save = [&](const std::string& tokenizer, const UnitValues& values) {
    std::ofstream(dir_ / "tokenizer.json") << tokenizer;
    SaveHfOptions options;
    options.max_shard_bytes = 4096;
    options.extra_files = {(dir_ / "tokenizer.json").string()};
    options.extra_contents = {{"chat_template.jinja", tokenizer + " template"}};
    save_hf_checkpoint(out, config, layout, values, DType::kF32, options);
  };
  save("old", [&](int u) { return old_values[u].data(); });
  const auto last_unit_fails = [&](int u) -> const float* {
    if (u + 1 == static_cast<int>(layout.units.size())) fail("rank_00001.safetensors is truncated");
    return new_values[u].data();
  };
  EXPECT_THROW(save("new", last_unit_fails), Error);
  EXPECT_EQ(contents_of(out + "/tokenizer.json"), "old");
  EXPECT_EQ(contents_of(out + "/chat_template.jinja"), "old template");
  EXPECT_EQ(load(out, layout), old_values);
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_EQ(entry.path().filename().string().rfind(".shardtrain-save", 0), std::string::npos)
        << "a temporary is left: " << entry.path();
  }
  save("new", [&](int u) { return new_values[u].data(); });
  EXPECT_EQ(contents_of(out + "/tokenizer.json"), "new");
  EXPECT_EQ(load(out, layout), new_values);
}

// A write that really fails (RLIMIT_FSIZE: the process may not write files over 8 KiB, as on a
// nearly full disk the weights are the file that does not fit): one Error, the old model whole.
TEST_F(SaveHfTest, AWriteFailureKeepsTheOldModelAndRemovesTheTemporaries) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto old_values = random_units(layout);
  const std::string out = (dir_ / "model").string();
  std::ofstream(dir_ / "tokenizer.json") << "old";
  SaveHfOptions options;
  options.extra_files = {(dir_ / "tokenizer.json").string()};
  save_hf_checkpoint(
      out, config, layout, [&](int u) { return old_values[u].data(); }, DType::kF32, options);
  ASSERT_GT(fs::file_size(out + "/model.safetensors"), 8192u);

  std::ofstream(dir_ / "tokenizer.json") << "new";
  auto new_values = old_values;
  new_values[0][0] += 1.0f;
  rlimit saved_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_limit), 0);
  const auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of death
  rlimit small = saved_limit;
  small.rlim_cur = 8192;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    save_hf_checkpoint(
        out, config, layout, [&](int u) { return new_values[u].data(); }, DType::kF32, options);
  } catch (const Error& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved_limit);
  std::signal(SIGXFSZ, saved_handler);
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  EXPECT_EQ(contents_of(out + "/tokenizer.json"), "old");
  EXPECT_EQ(load(out, layout), old_values);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(out)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
}

TEST_F(SaveHfTest, RefusesTheInputDirAndCheckpointDirs) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  const auto save_to = [&](const std::string& out, std::vector<std::string> protected_dirs) {
    SaveHfOptions options;
    options.protected_dirs = std::move(protected_dirs);
    try {
      save_hf_checkpoint(
          out, config, layout, [&](int u) { return values[u].data(); }, DType::kF32, options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(saved)");
  };
  const std::string input = (dir_ / "input").string();
  fs::create_directories(input);
  std::ofstream(input + "/config.json") << "{}";
  EXPECT_NE(save_to(input + "/.", {input}).find("is the input dir"), std::string::npos);
  const std::string checkpoints = (dir_ / "ckpt").string();
  fs::create_directories(checkpoints + "/step_00000010");
  std::ofstream(checkpoints + "/step_00000010/manifest.json") << "{}";
  EXPECT_NE(save_to(checkpoints, {}).find("sharded training checkpoints"), std::string::npos);
  EXPECT_NE(save_to(checkpoints + "/step_00000010", {}).find("sharded training checkpoints"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(checkpoints + "/config.json"));
  std::ofstream(dir_ / "a_file") << "x";
  EXPECT_NE(save_to((dir_ / "a_file").string(), {}).find("not a directory"), std::string::npos);
  EXPECT_EQ(save_to((dir_ / "fine").string(), {input}), "(saved)");
}

}  // namespace
}  // namespace shardtrain
