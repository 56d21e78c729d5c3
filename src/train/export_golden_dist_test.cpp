// "Export then load in transformers gives equal logits", checked against the committed
// transformers fixtures in tests/golden/ (tools/make_golden.py), so it runs without transformers:
//  1. `shardtrain launch --standalone --nproc-per-node 2 -- train` from a golden model dir for one
//     step whose learning rate is 0 (linear decay to min_lr 0 over one step, no warmup; AdamW's
//     decoupled weight decay is lr x weight_decay, so it is a no-op too), with a sharded
//     checkpoint after the step: the fp32 master shards hold the golden weights exactly;
//  2. `shardtrain export CKPT --out DIR --dtype fp32`;
//  3. (a) every tensor of DIR/model.safetensors equals the golden model.safetensors bit for bit
//     (same names, dtypes, shapes and bytes; a tied model has no lm_head.weight), and config.json
//     describes the same model; (b) DecoderModel's forward on DIR gives transformers' logits and
//     loss (the bands of llama_golden_test: 1e-4 / 1e-5 relative).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/testing/expect_model_config.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;

using testing::kBinary;
using testing::kGolden;

using testing::entry_f32;
using testing::GoldenModel;
using testing::max_relative_error;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class ExportGoldenDistTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardtrain_export_golden_XXXXXX";
    dir_ = ::mkdtemp(pattern);
    testing::write_random_sequences(dir_ + "/data.jsonl", 16, 11, 96);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Trains `model` one step at lr 0 on two ranks with a checkpoint, and exports it (fp32).
  std::string train_and_export(const std::string& model) {
    const std::string toml = dir_ + "/job.toml";
    std::ofstream(toml) << "[model]\npath = \"" << kGolden << model << "\"\ndtype = \"fp32\"\n"
                        << "[data]\npath = \"" << dir_ << "/data.jsonl\"\nseq_len = 16\n"
                        << "[train]\nsteps = 1\nmicro_batch = 1\nseed = 7\ndevice = \"cpu\"\n"
                        << "[optim]\nlr = 1e-2\nmin_lr = 0.0\nwarmup_steps = 0\n"
                        << "schedule = \"linear\"\nweight_decay = 0.1\n";
    const std::string ckpt = dir_ + "/ckpt", hf = dir_ + "/hf";
    CommandResult r = run_command(kBinary + " launch --standalone --nproc-per-node 2 -- train " +
                                  "--config " + toml + " --metrics " + dir_ + "/metrics.jsonl " +
                                  "--checkpoint-dir " + ckpt + " --checkpoint-every 1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream metrics(dir_ + "/metrics.jsonl");
    std::string line;
    EXPECT_TRUE(std::getline(metrics, line)) << "no metrics record; output:\n" << r.output;
    if (!line.empty()) {
      const nlohmann::json record = nlohmann::json::parse(line);
      EXPECT_EQ(record["step"].get<int64_t>(), 1);
      EXPECT_EQ(record["lr"].get<double>(), 0.0) << "the step must not move the weights";
      EXPECT_GT(record["grad_norm"].get<double>(), 0.0) << "a real step with real gradients";
    }
    int shards = 0;  // the checkpoint is sharded: one rank_XXXXX file per rank
    if (fs::is_directory(ckpt + "/step_00000001")) {
      for (const auto& entry : fs::directory_iterator(ckpt + "/step_00000001")) {
        shards += entry.path().filename().string().rfind("rank_", 0) == 0;
      }
    }
    EXPECT_EQ(shards, 2) << "want a 2-rank sharded checkpoint in " << ckpt;
    r = run_command(kBinary + " export " + ckpt + " --out " + hf + " --dtype fp32");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return hf;
  }

  std::string dir_;
};

TEST_P(ExportGoldenDistTest, ExportedModelIsTheGoldenOneAndGivesTransformersLogits) {
  const std::string golden = kGolden + GetParam();
  const std::string hf = train_and_export(GetParam());
  ASSERT_TRUE(fs::exists(hf + "/model.safetensors")) << "no export in " << hf;
  EXPECT_FALSE(fs::exists(hf + "/model.safetensors.index.json"));

  // (a) The weights, bit for bit.
  const SafetensorsFile want = SafetensorsFile::open(golden + "/model.safetensors");
  const SafetensorsFile got = SafetensorsFile::open(hf + "/model.safetensors");
  std::set<std::string> want_names, got_names;
  for (const SafetensorsEntry& e : want.entries()) want_names.insert(e.name);
  for (const SafetensorsEntry& e : got.entries()) got_names.insert(e.name);
  EXPECT_EQ(got_names, want_names);
  for (const SafetensorsEntry& w : want.entries()) {
    const SafetensorsEntry* g = got.find(w.name);
    if (g == nullptr) continue;  // reported by the name sets above
    EXPECT_EQ(g->dtype, w.dtype) << w.name;
    EXPECT_EQ(g->shape, w.shape) << w.name;
    ASSERT_EQ(g->bytes, w.bytes) << w.name;
    EXPECT_TRUE(std::memcmp(g->data, w.data, w.bytes) == 0) << w.name << " differs";
  }
  const nlohmann::json want_json = read_json(golden + "/config.json");
  const nlohmann::json got_json = read_json(hf + "/config.json");
  const bool tied = want_json.value("tie_word_embeddings", false);
  EXPECT_EQ(got_names.count("lm_head.weight"), tied ? 0u : 1u);

  // config.json: the same model as transformers wrote it (rope may be spelled either way).
  for (const char* key : {"model_type", "vocab_size", "hidden_size", "intermediate_size",
                          "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                          "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings"}) {
    EXPECT_EQ(got_json.value(key, nlohmann::json()), want_json.value(key, nlohmann::json())) << key;
  }
  EXPECT_EQ(got_json["architectures"], want_json["architectures"]);
  const ModelConfig want_config = read_hf_config(golden + "/config.json");
  const ModelConfig got_config = read_hf_config(hf + "/config.json");
  shardtrain::testing::expect_same_model_config(got_config, want_config,
                                                shardtrain::testing::CompareDtype::kNo);
  EXPECT_EQ(got_config.torch_dtype, "float32");
  EXPECT_EQ(got_config.parameter_count(), want_config.parameter_count());

  // (b) Our forward on the exported dir against transformers' logits and loss.
  const SafetensorsFile expected = SafetensorsFile::open(golden + "/expected.safetensors");
  const Batch batch = testing::golden_batch(expected);
  GoldenModel exported(got_config, HfCheckpoint::open(hf), batch, /*with_grads=*/false);
  const GoldenModel::Forward forward = exported.forward(batch);
  const std::vector<float>& logits = forward.logits;
  const std::vector<float> want_logits = entry_f32(*expected.find("logits"));
  ASSERT_EQ(logits.size(), want_logits.size());
  const double logits_error = max_relative_error(logits, want_logits);
  const double loss = forward.loss;
  const double want_loss = entry_f32(*expected.find("loss"))[0];
  const double loss_error = std::abs(loss - want_loss) / std::abs(want_loss);
  std::printf(
      "%s: %zu tensors equal bit for bit; exported model's logits max rel error %.3g, "
      "loss %.7f vs transformers %.7f (rel %.3g)\n",
      GetParam().c_str(), want.entries().size(), logits_error, loss, want_loss, loss_error);
  EXPECT_LE(logits_error, 1e-4);
  EXPECT_LE(loss_error, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, ExportGoldenDistTest,
                         ::testing::Values("qwen2_tied_bias", "llama_gqa", "llama3_rope",
                                           "mistral"));

}  // namespace
}  // namespace shardtrain
