// LoRA end to end with real processes of the shardtrain binary on the CPU (Gloo):
//  - equal losses at world sizes 1, 2 and 4 (the same global batch), and train.output_dir holds
//    a PEFT adapter (adapter_config.json, adapter_model.safetensors, no base weights);
//  - a run stopped at step 2 and resumed gives the same losses and adapter as one straight run
//    (the checkpoint holds only the adapters and their optimizer state);
//  - `eval --adapter` on the base equals `eval` of `export --merge`'s model, and `export` of
//    the checkpoint writes the same adapter the run wrote;
//  - Gemma 3 (gemma3_text): equal losses at world sizes 1 and 2, PEFT's names in the adapter,
//    and its `eval --adapter` equals the merged export's;
//  - bad inputs are one line and exit 2: a target that is no module of the model, rank 0, an
//    adapter of another rank, --merge of a run without LoRA; another base_model_name_or_path
//    is one warning line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "io/safetensors.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::kBinary;
using testing::kGolden;
using testing::run_command;

std::vector<double> metric_losses(const std::string& path) {
  std::vector<double> losses;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_discarded() && record.contains("loss")) {
      losses.push_back(record["loss"].get<double>());
    }
  }
  return losses;
}

// The mean loss of `eval`'s JSON line ({"loss":4.562,...}).
double eval_loss(const CommandResult& r) {
  std::smatch m;
  static const std::regex loss(R"re("loss":([0-9.eE+-]+))re");
  if (!std::regex_search(r.output, m, loss)) {
    ADD_FAILURE() << "no loss in: " << r.output;
    return -1;
  }
  return std::stod(m[1]);
}

class LoraCliTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_random_sequences(dir() + "/data.jsonl", 16, 11, 96); }
  std::string dir() const { return tmp_.path(); }

  // A job training LoRA adapters on a golden model (llama_gqa unless `model`; 4 sequences a
  // step).
  std::string job(const std::string& name, const std::string& lora_keys, int steps = 3,
                  const std::string& model = "llama_gqa") {
    const std::string path = dir() + "/" + name + ".toml";
    std::ofstream(path) << "[model]\npath = \"" << kGolden << model << "\"\ndtype = \"fp32\"\n"
                        << "[data]\npath = \"" << dir() << "/data.jsonl\"\nseq_len = 16\n"
                        << "[train]\nsteps = " << steps << "\nmicro_batch = 1\nglobal_batch = 4\n"
                        << "seed = 7\ndevice = \"cpu\"\n"
                        << "[optim]\nlr = 2e-2\nwarmup_steps = 0\nschedule = \"constant\"\n"
                        << "[lora]\nenabled = true\nalpha = 8\n"
                        << (lora_keys.find("rank") == std::string::npos ? "rank = 4\n" : "")
                        << lora_keys;
    return path;
  }
  CommandResult train(int world, const std::string& toml, const std::string& name,
                      const std::string& extra = "") {
    return run_command(kBinary + " launch --standalone --nproc-per-node " + std::to_string(world) +
                       " -- train --config " + toml + " --metrics " + dir() + "/" + name +
                       ".jsonl --train.output_dir=" + dir() + "/" + name + "_out " + extra);
  }

  testing::TempDir tmp_{"shardtrain_lora_cli_"};
};

TEST_F(LoraCliTest, EqualLossesAtWorldSizesOneTwoFourAndAPeftAdapterOut) {
  const std::string toml = job("equal", "target_modules = \"all-linear\"\ndropout = 0.0\n");
  std::vector<std::vector<double>> losses;
  for (int world : {1, 2, 4}) {
    const std::string name = "w" + std::to_string(world);
    const CommandResult r = train(world, toml, name);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    losses.push_back(metric_losses(dir() + "/" + name + ".jsonl"));
    ASSERT_EQ(losses.back().size(), 3u) << r.output;
  }
  for (size_t w = 1; w < losses.size(); ++w) {
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_NEAR(losses[w][s], losses[0][s], 1e-5 * losses[0][s])
          << "world " << w << " step " << s + 1;
    }
  }
  const std::string out = dir() + "/w2_out";
  EXPECT_TRUE(fs::exists(out + "/adapter_config.json"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors")) << "the base is not copied";
  const SafetensorsFile adapter = SafetensorsFile::open(out + "/adapter_model.safetensors");
  EXPECT_EQ(adapter.entries().size(), 2u * 7u * 2u);
  // B starts at zero (PEFT's init) and trained away from it.
  const SafetensorsEntry* k_b =
      adapter.find("base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight");
  ASSERT_NE(k_b, nullptr);
  ASSERT_EQ(k_b->dtype, DType::kF32);
  const float* b = static_cast<const float*>(k_b->data);
  float largest = 0;
  for (int64_t i = 0; i < k_b->shape.numel(); ++i) largest = std::max(largest, std::abs(b[i]));
  EXPECT_GT(largest, 1e-3f) << "the adapters learn";
}

TEST_F(LoraCliTest, ResumeIsExactAndEvalOfAdapterEqualsTheMergedExport) {
  const std::string toml = job("resume", "target_modules = \"q_proj,v_proj,down_proj\"\n", 4);
  const std::string ckpt_a = dir() + "/ckpt_a", ckpt_b = dir() + "/ckpt_b";
  CommandResult r = train(2, toml, "straight", "--checkpoint-dir " + ckpt_a);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(2, toml, "stopped", "--checkpoint-dir " + ckpt_b + " --train.stop_at_step=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(2, toml, "stopped", "--checkpoint-dir " + ckpt_b);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> straight = metric_losses(dir() + "/straight.jsonl");
  const std::vector<double> resumed = metric_losses(dir() + "/stopped.jsonl");
  ASSERT_EQ(straight.size(), 4u);
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(resumed[s], straight[s]) << "step " << s + 1;
  EXPECT_EQ(testing::read_existing(dir() + "/straight_out/adapter_model.safetensors"),
            testing::read_existing(dir() + "/stopped_out/adapter_model.safetensors"));

  // Only the adapters and their moments are in the checkpoint: far below the base's bytes.
  uint64_t shard_bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(ckpt_a)) {
    if (e.path().filename().string().rfind("rank_", 0) == 0) shard_bytes += e.file_size();
  }
  EXPECT_GT(shard_bytes, 0u);
  EXPECT_LT(shard_bytes, fs::file_size(kGolden + "llama_gqa/model.safetensors") / 2);

  // export writes the run's adapter; --merge a whole model that evaluates the same.
  r = run_command(kBinary + " export " + ckpt_a + " --out " + dir() + "/exported --dtype fp32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::read_existing(dir() + "/exported/adapter_model.safetensors"),
            testing::read_existing(dir() + "/straight_out/adapter_model.safetensors"));
  r = run_command(kBinary + " export " + ckpt_a + " --out " + dir() + "/merged --merge " +
                  "--dtype fp32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string data = " --data " + dir() + "/data.jsonl --seq-len 16 --device cpu";
  const CommandResult adapted = run_command(kBinary + " eval --model " + kGolden + "llama_gqa" +
                                            " --adapter " + dir() + "/straight_out" + data);
  ASSERT_EQ(adapted.exit_code, 0) << adapted.output;
  const CommandResult merged = run_command(kBinary + " eval --model " + dir() + "/merged" + data);
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  const CommandResult base = run_command(kBinary + " eval --model " + kGolden + "llama_gqa" + data);
  EXPECT_NEAR(eval_loss(adapted), eval_loss(merged), 2e-4) << adapted.output << merged.output;
  EXPECT_GT(std::abs(eval_loss(adapted) - eval_loss(base)), 1e-3) << "the adapter matters";
}

TEST_F(LoraCliTest, Gemma3TextTrainsAtWorldSizesOneTwoAndItsAdapterEvalEqualsTheMerge) {
  const std::string toml = job("gemma", "target_modules = \"all-linear\"\n", 3, "gemma3_text");
  const std::string ckpt = dir() + "/ckpt_gemma";
  CommandResult r = train(1, toml, "gemma1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(2, toml, "gemma2", "--checkpoint-dir " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> one = metric_losses(dir() + "/gemma1.jsonl");
  const std::vector<double> two = metric_losses(dir() + "/gemma2.jsonl");
  ASSERT_EQ(one.size(), 3u) << r.output;
  ASSERT_EQ(two.size(), 3u) << r.output;
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(two[s], one[s], 1e-5 * one[s]) << "step " << s + 1;
  }
  const std::string out = dir() + "/gemma2_out";
  const SafetensorsFile adapter = SafetensorsFile::open(out + "/adapter_model.safetensors");
  EXPECT_EQ(adapter.entries().size(), 2u * 7u * 2u);
  // B starts at zero (PEFT's init) and trained away from it.
  const SafetensorsEntry* gate_b =
      adapter.find("base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight");
  ASSERT_NE(gate_b, nullptr);
  ASSERT_EQ(gate_b->dtype, DType::kF32);
  const float* b = static_cast<const float*>(gate_b->data);
  float largest = 0;
  for (int64_t i = 0; i < gate_b->shape.numel(); ++i) largest = std::max(largest, std::abs(b[i]));
  EXPECT_GT(largest, 1e-3f) << "the adapters learn";

  r = run_command(kBinary + " export " + ckpt + " --out " + dir() + "/gemma_merged --merge " +
                  "--dtype fp32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string data = " --data " + dir() + "/data.jsonl --seq-len 16 --device cpu";
  const std::string base_dir = kGolden + "gemma3_text";
  const CommandResult adapted =
      run_command(kBinary + " eval --model " + base_dir + " --adapter " + out + data);
  ASSERT_EQ(adapted.exit_code, 0) << adapted.output;
  const CommandResult merged =
      run_command(kBinary + " eval --model " + dir() + "/gemma_merged" + data);
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  const CommandResult base = run_command(kBinary + " eval --model " + base_dir + data);
  EXPECT_NEAR(eval_loss(adapted), eval_loss(merged), 2e-4) << adapted.output << merged.output;
  EXPECT_GT(std::abs(eval_loss(adapted) - eval_loss(base)), 1e-3) << "the adapter matters";
}

TEST_F(LoraCliTest, PlanFitsLlama2_70BLoraOnOneNodeOf80GBGpus) {
  const std::string toml = dir() + "/plan.toml";
  std::ofstream(toml) << "[model]\npath = \"" << SHARDTRAIN_SOURCE_DIR
                      << "/bench/shapes/llama2-70b\"\ninit = \"random\"\n"
                      << "[data]\npath = \"x.bin\"\nseq_len = 4096\n[train]\nmicro_batch = 1\n";
  const std::string plan = kBinary + " plan --config " + toml + " --world-size 8 --gpu-memory 80GB";
  const CommandResult lora = run_command(plan + " --lora.enabled=true --lora.rank=16 " +
                                         "--lora.target_modules=all-linear");
  ASSERT_EQ(lora.exit_code, 0) << lora.output;
  EXPECT_NE(lora.output.find("lora: rank 16 on all-linear: 207093760 trainable"), std::string::npos)
      << lora.output;
  EXPECT_NE(lora.output.find("smallest setting that fits: --fsdp.strategy=FULL_SHARD "
                             "--train.activation_checkpointing=full"),
            std::string::npos)
      << lora.output;
  // Full fine-tuning of the same model does not fit there (16 bytes of state per parameter).
  const CommandResult full = run_command(plan);
  EXPECT_EQ(full.output.find("smallest setting that fits"), std::string::npos) << full.output;
}

TEST_F(LoraCliTest, BadInputsAreOneLineAndExitTwo) {
  const auto expect_one_line = [](const CommandResult& r, const std::string& want) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
    EXPECT_EQ(r.error_lines().size(), 1u) << r.output;
  };
  const auto train_one = [&](const std::string& toml) {  // no launcher: the worker's own line
    return run_command(kBinary + " train --config " + toml);
  };
  expect_one_line(train_one(job("bad_target", "target_modules = \"q_proj,query\"\n")),
                  "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
  expect_one_line(train_one(job("bad_rank", "rank = 0\n")), "'lora.rank' must be > 0");

  // An adapter whose config says another rank than its tensors have.
  const std::string toml = job("good", "target_modules = \"q_proj\"\n", 1);
  ASSERT_EQ(train(1, toml, "good").exit_code, 0);
  const std::string adapter = dir() + "/good_out";
  std::ifstream in(adapter + "/adapter_config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["base_model_name_or_path"] = "someone/another-base";
  std::ofstream(adapter + "/adapter_config.json") << config.dump();
  const std::string data = " --data " + dir() + "/data.jsonl --seq-len 16 --device cpu";
  const CommandResult warned = run_command(kBinary + " eval --model " + kGolden + "llama_gqa" +
                                           " --adapter " + adapter + data);
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_NE(warned.output.find("was trained on base_model_name_or_path someone/another-base"),
            std::string::npos)
      << warned.output;
  config["r"] = 8;
  std::ofstream(adapter + "/adapter_config.json") << config.dump();
  expect_one_line(
      run_command(kBinary + " eval --model " + kGolden + "llama_gqa --adapter " + adapter + data),
      "the model needs [8, 64]");

  // --merge of a run without LoRA.
  const std::string plain = dir() + "/plain.toml";
  std::ofstream(plain) << "[model]\npath = \"" << kGolden << "llama_gqa\"\n"
                       << "[data]\npath = \"" << dir() << "/data.jsonl\"\nseq_len = 16\n"
                       << "[train]\nsteps = 1\nmicro_batch = 2\ndevice = \"cpu\"\n";
  ASSERT_EQ(run_command(kBinary + " train --config " + plain + " --checkpoint-dir " + dir() +
                        "/plain_ckpt")
                .exit_code,
            0);
  expect_one_line(run_command(kBinary + " export " + dir() + "/plain_ckpt --out " + dir() +
                              "/plain_merged --merge"),
                  "without LoRA");
}

}  // namespace
}  // namespace shardtrain
