// Gemma 3 checkpoints in and out, on the fp32 CPU reference with the transformers fixture
// (tests/golden/gemma3_text): save_hf writes a Gemma3ForCausalLM directory (the fixture's tensor
// names, a config transformers 5 reads) that loads back to the same loss; the same weights laid
// out as a multimodal checkpoint (model_type gemma3 + text_config, the text model under
// model.language_model.* or language_model.model.*, a vision tower beside it) load to the same
// loss too; random init gives Gemma's 1 + weight norms the identity (zero) weight.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/save_hf.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/gemma3_text";

// The fixture's batch loss with the model loaded from `dir`.
double loss_of(const std::string& dir) {
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  const SafetensorsFile expected = SafetensorsFile::open(kFixture + "/expected.safetensors");
  const Batch batch = testing::golden_batch(expected);
  testing::GoldenModel golden(config, checkpoint, batch, /*with_grads=*/false);
  return golden.forward(batch).loss;
}

// Copies every tensor of `from` (one safetensors file) into `to`, each name mapped by `rename`,
// plus `extra` (name, shape) tensors of zeros.
void write_renamed(const std::string& from, const std::string& to,
                   const std::function<std::string(const std::string&)>& rename,
                   const std::map<std::string, Shape>& extra) {
  const SafetensorsFile source = SafetensorsFile::open(from);
  std::vector<SafetensorsTensorSpec> specs;
  for (const SafetensorsEntry& e : source.entries())
    specs.push_back({rename(e.name), e.dtype, e.shape});
  for (const auto& [name, shape] : extra) specs.push_back({name, DType::kF32, shape});
  SafetensorsWriter writer(to, specs);
  for (const SafetensorsEntry& e : source.entries()) {
    writer.write_tensor(rename(e.name), e.data, e.shape.numel() * dtype_size(e.dtype));
  }
  for (const auto& [name, shape] : extra) {
    const std::vector<float> zeros(shape.numel());
    writer.write_tensor(name, zeros.data(), zeros.size() * sizeof(float));
  }
  writer.finish();
}

class Gemma3CheckpointTest : public testing::TempDirTest {};

TEST_F(Gemma3CheckpointTest, SaveAndReloadGivesTheSameLoss) {
  const HfCheckpoint fixture = HfCheckpoint::open(kFixture);
  const ModelConfig config = read_hf_config(fixture.config_json_path());
  const ParamLayout layout = make_param_layout(config);
  std::vector<std::vector<float>> values;
  for (const UnitLayout& unit : layout.units) {
    values.emplace_back(unit.numel);
    load_unit_from_checkpoint(fixture, unit, values.back().data());
  }
  const std::string out = (dir_ / "saved").string();
  save_hf_checkpoint(
      out, config, layout, [&](int u) { return values[u].data(); }, DType::kF32);

  // The names and shapes transformers wrote, nothing else (tied: no lm_head).
  const HfCheckpoint saved = HfCheckpoint::open(out);
  EXPECT_EQ(saved.tensor_names(), fixture.tensor_names());
  const nlohmann::json written = nlohmann::json::parse(testing::read_text(out + "/config.json"));
  EXPECT_EQ(written["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_EQ(written["model_type"], "gemma3_text");
  EXPECT_EQ(written["layer_types"],
            nlohmann::json::parse(R"(["sliding_attention", "full_attention"])"));
  EXPECT_EQ(written["rope_parameters"]["sliding_attention"]["rope_theta"], 10000.0);
  EXPECT_EQ(written["final_logit_softcapping"], 30.0);
  EXPECT_TRUE(written["attn_logit_softcapping"].is_null());

  const double original = loss_of(kFixture);
  EXPECT_EQ(loss_of(out), original);
  const SafetensorsFile expected = SafetensorsFile::open(kFixture + "/expected.safetensors");
  const double reference = testing::entry_f32(*expected.find("loss"))[0];
  EXPECT_NEAR(original, reference, 1e-5 * reference);
}

TEST_F(Gemma3CheckpointTest, MultimodalLayoutsLoadTheirLanguageModel) {
  const double original = loss_of(kFixture);
  nlohmann::json text = nlohmann::json::parse(testing::read_text(kFixture + "/config.json"));
  text.erase("architectures");
  const nlohmann::json wrapper = {
      {"architectures", {"Gemma3ForConditionalGeneration"}},
      {"model_type", "gemma3"},
      {"text_config", text},
      {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 8}}}};
  const std::map<std::string, Shape> vision = {
      {"model.vision_tower.vision_model.embeddings.patch_embedding.weight", Shape{8, 3, 2, 2}},
      {"model.multi_modal_projector.mm_input_projection_weight", Shape{8, 64}}};
  // transformers 5 (model.language_model.*) and the Hub's files (language_model.model.*).
  for (const std::string& prefix : {"model.language_model.", "language_model.model."}) {
    SCOPED_TRACE(prefix);
    const fs::path dir = dir_ / (prefix == "model.language_model." ? "v5" : "hub");
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << wrapper.dump(2);
    write_renamed(
        kFixture + "/model.safetensors", (dir / "model.safetensors").string(),
        [&](const std::string& name) { return prefix + name.substr(std::string("model.").size()); },
        vision);
    EXPECT_EQ(read_hf_config((dir / "config.json").string()).model_type, "gemma3_text");
    EXPECT_EQ(loss_of(dir.string()), original);
  }
}

TEST_F(Gemma3CheckpointTest, RandomInitGivesNormsTheIdentityScale) {
  const ModelConfig config = read_hf_config(kFixture + "/config.json");
  const ParamLayout layout = make_param_layout(config);
  int norms = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    std::vector<float> values(layout.units[u].numel);
    init_unit_random(layout.units[u], static_cast<int>(u), 1, 0.02, values.data());
    for (const ParamSpec& p : layout.units[u].params) {
      const bool norm = p.name.find("norm.weight") != std::string::npos;
      EXPECT_EQ(p.zero_init, norm) << p.name;
      if (!norm) continue;
      ++norms;
      for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(values[p.offset + i], 0.0f) << p.name;
    }
  }
  EXPECT_EQ(norms, 1 + 2 * 6);  // final norm; per block 4 sandwich norms and q/k norms
}

}  // namespace
}  // namespace shardtrain
