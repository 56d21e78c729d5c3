// PEFT adapter files: what we write is what PEFT writes (names, shapes, config keys), it reads
// back into the same values, and every bad adapter dir is one Error line naming the file.
#include "model/peft_adapter.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

LoraConfig lora_config(const std::string& targets = "all-linear") {
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 4;
  lora.alpha = 8;
  lora.target_modules = targets;
  return lora;
}

ModelConfig golden_config() { return read_hf_config(testing::kGolden + "llama_gqa/config.json"); }

// Unit values with every adapter element distinct.
std::vector<std::vector<float>> numbered(const ParamLayout& layout) {
  std::vector<std::vector<float>> values;
  for (const UnitLayout& unit : layout.units) {
    values.emplace_back(unit.numel, 0.0f);
    for (int64_t i = 0; i < unit.numel; ++i)
      values.back()[i] = 0.001f * static_cast<float>(i % 997);
  }
  return values;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class PeftAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = make_param_layout(golden_config(), lora_config());
    values_ = numbered(layout_);
    SavePeftOptions options;
    options.base_model_name_or_path = "meta-llama/Llama-2-7b-hf";
    save_peft_adapter(
        dir(), lora_config(), layout_, [this](int u) { return values_[u].data(); }, options);
  }
  std::string dir() const { return tmp_.path() + "/adapter"; }
  // Rewrites adapter_model.safetensors with `edit` applied to the list of (name, shape).
  void rewrite_weights(const std::function<void(std::vector<SafetensorsTensorSpec>&)>& edit) {
    std::vector<SafetensorsTensorSpec> specs;
    for (const UnitLayout& unit : layout_.units) {
      for (const ParamSpec& p : unit.params) {
        if (is_lora_param(p)) specs.push_back({peft_tensor_name(p.name), DType::kF32, p.shape});
      }
    }
    edit(specs);
    const std::string path = dir() + "/adapter_model.safetensors";
    SafetensorsWriter writer(path, specs, {{"format", "pt"}});
    for (const SafetensorsTensorSpec& s : specs) {
      std::vector<float> zeros(s.shape.numel(), 0.0f);
      writer.write_tensor(s.name, zeros.data(), zeros.size() * sizeof(float));
    }
    writer.finish();
  }

  testing::TempDir tmp_{"shardtrain_peft_"};
  ParamLayout layout_;
  std::vector<std::vector<float>> values_;
};

TEST_F(PeftAdapterTest, WritesPeftsNamesShapesAndConfigKeys) {
  const SafetensorsFile file = SafetensorsFile::open(dir() + "/adapter_model.safetensors");
  std::set<std::string> names;
  for (const SafetensorsEntry& e : file.entries()) names.insert(e.name);
  EXPECT_EQ(names.size(), 2u * 7u * 2u);  // 2 layers x 7 modules x (A, B)
  const SafetensorsEntry* q_a =
      file.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  ASSERT_NE(q_a, nullptr);
  EXPECT_EQ(q_a->shape, (Shape{4, 64}));
  const SafetensorsEntry* down_b =
      file.find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  ASSERT_NE(down_b, nullptr);
  EXPECT_EQ(down_b->shape, (Shape{64, 4}));
  EXPECT_EQ(file.metadata().at("format"), "pt");

  std::ifstream in(dir() + "/adapter_config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 4);
  EXPECT_EQ(j["lora_alpha"], 8.0);
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["use_rslora"], false);
  EXPECT_EQ(j["base_model_name_or_path"], "meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(j["target_modules"].size(), 7u);
  EXPECT_FALSE(fs::exists(dir() + "/model.safetensors")) << "the base is not copied";
}

// Gemma 3's text model (Gemma3ForCausalLM) under PEFT: the same module paths as Llama's, and
// only the adapters: no tensor of its extra norms.
TEST(PeftGemma3Test, WritesPeftsNamesForTheTextModelAndReadsThemBack) {
  const ModelConfig config = read_hf_config(testing::kGolden + "gemma3_text/config.json");
  const ParamLayout layout = make_param_layout(config, lora_config());
  const std::vector<std::vector<float>> values = numbered(layout);
  const testing::TempDir tmp("shardtrain_peft_gemma3_");
  save_peft_adapter(
      tmp.path(), lora_config(), layout, [&values](int u) { return values[u].data(); },
      SavePeftOptions());
  const SafetensorsFile file = SafetensorsFile::open(tmp.path() + "/adapter_model.safetensors");
  std::set<std::string> names;
  for (const SafetensorsEntry& e : file.entries()) names.insert(e.name);
  std::set<std::string> expected;
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      for (const char* which : {"A", "B"}) {
        expected.insert(
            fmt::format("base_model.model.model.layers.{}.{}.lora_{}.weight", layer, m, which));
      }
    }
  }
  EXPECT_EQ(names, expected);
  // q: 4 heads x head_dim 32 from hidden 64; gate: intermediate 128 from 64; down: 64 from 128.
  const auto shape_of = [&file](const std::string& name) {
    const SafetensorsEntry* e = file.find("base_model.model.model.layers.1." + name);
    return e ? e->shape : Shape{};
  };
  EXPECT_EQ(shape_of("self_attn.q_proj.lora_B.weight"), (Shape{128, 4}));
  EXPECT_EQ(shape_of("self_attn.k_proj.lora_B.weight"), (Shape{64, 4}));
  EXPECT_EQ(shape_of("self_attn.o_proj.lora_A.weight"), (Shape{4, 128}));
  EXPECT_EQ(shape_of("mlp.gate_proj.lora_B.weight"), (Shape{128, 4}));
  EXPECT_EQ(shape_of("mlp.down_proj.lora_A.weight"), (Shape{4, 128}));

  const PeftAdapterWeights adapter = PeftAdapterWeights::open(tmp.path(), layout);
  for (size_t u = 0; u < layout.units.size(); ++u) {
    for (const ParamSpec& spec : layout.units[u].params) {
      if (!is_lora_param(spec)) continue;
      std::vector<float> read(spec.numel());
      adapter.read_range(spec, 0, spec.numel(), read.data());
      for (int64_t i = 0; i < spec.numel(); ++i) {
        ASSERT_EQ(read[i], values[u][spec.offset + i]) << spec.name << "[" << i << "]";
      }
    }
  }
}

TEST_F(PeftAdapterTest, ReadsBackTheConfigAndTheValues) {
  const PeftAdapterConfig read = read_peft_adapter_config(dir());
  EXPECT_TRUE(read.lora.enabled);
  EXPECT_EQ(read.lora.rank, 4);
  EXPECT_EQ(read.lora.alpha, 8.0);
  EXPECT_EQ(read.lora.modules().size(), 7u);
  EXPECT_EQ(read.lora.adapter, dir());
  const PeftAdapterWeights weights = PeftAdapterWeights::open(dir(), layout_);
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    for (const ParamSpec& spec : layout_.units[u].params) {
      if (!is_lora_param(spec)) continue;
      std::vector<float> got(spec.numel());
      weights.read_range(spec, 0, spec.numel(), got.data());
      for (int64_t i = 0; i < spec.numel(); ++i) {
        ASSERT_EQ(got[i], values_[u][spec.offset + i]) << spec.name;
      }
    }
  }
}

TEST_F(PeftAdapterTest, ShapeMismatchMissingAndExtraTensorsAreOneLine) {
  // Another rank in the model than in the file.
  LoraConfig wider = lora_config();
  wider.rank = 8;
  const std::string shape =
      error_of([&] { PeftAdapterWeights::open(dir(), make_param_layout(golden_config(), wider)); });
  EXPECT_NE(shape.find("has shape [4, 64], the model needs [8, 64]"), std::string::npos) << shape;

  rewrite_weights([](std::vector<SafetensorsTensorSpec>& specs) { specs.pop_back(); });
  const std::string missing = error_of([&] { PeftAdapterWeights::open(dir(), layout_); });
  EXPECT_NE(missing.find("is missing"), std::string::npos) << missing;
  EXPECT_NE(missing.find("adapter_model.safetensors"), std::string::npos) << missing;

  rewrite_weights([](std::vector<SafetensorsTensorSpec>& specs) {
    specs.push_back(
        {"base_model.model.model.layers.0.mlp.extra.lora_A.weight", DType::kF32, Shape{4, 64}});
  });
  const std::string extra = error_of([&] { PeftAdapterWeights::open(dir(), layout_); });
  EXPECT_NE(extra.find("layers.0.mlp.extra.lora_A.weight is not an adapter"), std::string::npos)
      << extra;
  for (const std::string& e : {shape, missing, extra}) EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST_F(PeftAdapterTest, BadConfigsAreOneLine) {
  const std::string path = dir() + "/adapter_config.json";
  const auto with = [&](const std::string& key, const nlohmann::json& value) {
    std::ifstream in(path);
    nlohmann::json j = nlohmann::json::parse(in);
    j[key] = value;
    std::ofstream(path) << j.dump();
    return error_of([&] { read_peft_adapter_config(dir()); });
  };
  EXPECT_NE(with("r", 0).find("'lora.rank' must be > 0"), std::string::npos);
  with("r", 4);
  const std::string target = with("target_modules", nlohmann::json::array({"wq", "wv"}));
  EXPECT_NE(target.find("names 'wq'"), std::string::npos) << target;
  EXPECT_NE(target.find("adapter_config.json"), std::string::npos) << target;
  with("target_modules", nlohmann::json::array({"q_proj"}));
  EXPECT_NE(with("use_dora", true).find("DoRA"), std::string::npos);
  with("use_dora", false);
  EXPECT_NE(with("peft_type", "IA3").find("expected \"LORA\""), std::string::npos);
  EXPECT_NE(error_of([&] { read_peft_adapter_config(tmp_.path()); }).find("not found"),
            std::string::npos);
}

TEST(LoraInitTest, AIsKaimingUniformAndBIsZero) {
  ParamSpec a;
  a.name = "model.layers.0.mlp.up_proj.lora_A.weight";
  a.shape = {8, 400};
  std::vector<float> values(a.numel());
  init_lora_param(a, 1, values.data());
  double sum = 0, sum_sq = 0, max_abs = 0;
  for (float v : values) {
    sum += v;
    sum_sq += double{v} * v;
    max_abs = std::max(max_abs, double{std::abs(v)});
  }
  const double bound = 1.0 / std::sqrt(400.0);  // kaiming_uniform_(a = sqrt(5)) over fan_in 400
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.95 * bound);
  EXPECT_NEAR(sum_sq / values.size(), bound * bound / 3.0, 0.1 * bound * bound / 3.0);
  EXPECT_NEAR(sum / values.size(), 0.0, 0.05 * bound);
  std::vector<float> again(a.numel());
  init_lora_param(a, 1, again.data());
  EXPECT_EQ(values, again);  // the same on every rank
  ParamSpec b = a;
  b.name = "model.layers.0.mlp.up_proj.lora_B.weight";
  b.shape = {400, 8};
  std::vector<float> zeros(b.numel(), 1.0f);
  init_lora_param(b, 1, zeros.data());
  for (float v : zeros) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace shardtrain
