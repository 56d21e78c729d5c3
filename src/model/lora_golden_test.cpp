// Parity with PEFT on tiny models (tests/golden/lora/, tools/make_lora_fixture.py, made with
// transformers 5.17 and peft 0.21 in fp32):
//  - an adapter PEFT saved (B set nonzero) loads into shardtrain: the same logits, loss and
//    gradients of every lora_A and lora_B (all-linear on llama; q, v and down with rslora on
//    qwen2, whose packed q/k/v has no k adapter, biases and a tied head);
//  - the other way (tests/golden/lora/ours_*/): an adapter shardtrain trained and saved, loaded
//    by PeftModel.from_pretrained, gives PEFT the logits and loss shardtrain computes with it,
//    and shardtrain's `export --merge` of it gives transformers the same loss.
//  - the adapter we save has exactly PEFT's tensor names and shapes, and config keys PEFT writes.
// Bands as llama_golden_test: logits 1e-4 relative, loss 1e-5, gradients 1e-4.
// The fixtures need transformers and peft (the GPU machine has them): until they are generated
// and committed, these tests skip, saying so.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "model/hf_config.h"
#include "model/peft_adapter.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::entry_f32;
using testing::max_relative_error;

const std::string kLoraGolden = testing::kGolden + "lora/";

// The base a fixture adapter was made on (its base_model_name_or_path: a golden dir's name).
std::string base_dir_of(const std::string& adapter_dir) {
  const PeftAdapterConfig config = read_peft_adapter_config(adapter_dir);
  return testing::kGolden + fs::path(config.base_model_name_or_path).filename().string();
}

// The base with the adapter on the fp32 CPU backend, as `eval --adapter` loads it.
struct AdaptedModel {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  LoraConfig lora;
  std::optional<DecoderModel> model;
  std::optional<LocalUnits> units;

  AdaptedModel(const std::string& adapter_dir, const Batch& batch) {
    const std::string base_dir = base_dir_of(adapter_dir);
    LoraConfig wanted;
    wanted.adapter = adapter_dir;
    lora = resolve_lora_config(wanted, base_dir);
    const HfCheckpoint base = HfCheckpoint::open(base_dir);
    model.emplace(read_hf_config(base.config_json_path()), *ops, lora);
    units.emplace(*ops, model->layout(), /*with_optimizer_state=*/true);
    const PeftAdapterWeights adapter = PeftAdapterWeights::open(adapter_dir, model->layout());
    for (int u = 0; u < model->unit_count(); ++u) {
      const UnitLayout& unit = model->layout().units[u];
      std::vector<float> values(unit.numel, 0.0f);
      for (const ParamSpec& spec : unit.params) {
        if (is_lora_param(spec)) {
          adapter.read_range(spec, 0, spec.numel(), values.data() + spec.offset);
        } else {
          base.read_into_f32(spec.name, spec.shape, values.data() + spec.offset);
        }
      }
      units->upload_master(u, values.data());
    }
    model->reserve(batch.batch_size, batch.seq_len);
    model->set_batch(batch);
  }

  testing::GoldenModel::Forward forward(const Batch& batch) {
    testing::GoldenModel::Forward result;
    result.logits.resize(batch.batch_size * batch.seq_len * model->config().vocab_size);
    DeviceBuffer buffer(*ops, sizeof(float));
    const Tensor loss_sum = buffer.view(DType::kF32, {1});
    ops->fill_zero(loss_sum);
    model->forward(*units, loss_sum, result.logits.data());
    result.loss = ops->read_scalar(loss_sum) / static_cast<double>(batch.target_count);
    return result;
  }
};

// Skips (visibly) when the fixture has not been generated yet.
#define SKIP_WITHOUT_FIXTURE(path)                                                             \
  if (!fs::exists(path)) {                                                                     \
    GTEST_SKIP() << path << " not generated yet: run tools/make_lora_fixture.py --ours where " \
                 << "transformers and peft are, and commit tests/golden/lora/";                \
  }

class LoraGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraGoldenTest, PeftAdapterGivesPeftsLogitsLossAndGradients) {
  const std::string dir = kLoraGolden + GetParam();
  SKIP_WITHOUT_FIXTURE(dir + "/expected.safetensors");
  const SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  const Batch batch = testing::golden_batch(expected);
  AdaptedModel adapted(dir, batch);
  const testing::GoldenModel::Forward forward = adapted.forward(batch);
  const double logits_error =
      max_relative_error(forward.logits, entry_f32(*expected.find("logits")));
  const double want_loss = entry_f32(*expected.find("loss"))[0];
  EXPECT_LE(logits_error, 1e-4);
  EXPECT_NEAR(forward.loss, want_loss, 1e-5 * want_loss);

  DeviceBuffer buffer(*adapted.ops, sizeof(float));
  const Tensor loss_sum = buffer.view(DType::kF32, {1});
  adapted.ops->fill_zero(loss_sum);
  adapted.units->zero_grads();
  adapted.model->forward_backward(*adapted.units, 1.0f / static_cast<float>(batch.target_count),
                                  loss_sum);
  int compared = 0;
  double worst = 0;
  for (int u = 0; u < adapted.model->unit_count(); ++u) {
    const UnitLayout& unit = adapted.model->layout().units[u];
    std::vector<float> grads(unit.numel);
    adapted.ops->copy_to_host(grads.data(), adapted.units->grads(u));
    for (const ParamSpec& spec : unit.params) {
      if (!is_lora_param(spec)) continue;
      const SafetensorsEntry* want = expected.find("grad." + peft_tensor_name(spec.name));
      ASSERT_NE(want, nullptr) << spec.name;
      const std::vector<float> ours(grads.begin() + spec.offset,
                                    grads.begin() + spec.offset + spec.numel());
      const double error = max_relative_error(ours, entry_f32(*want));
      EXPECT_LE(error, 1e-4) << spec.name;
      worst = std::max(worst, error);
      ++compared;
    }
  }
  EXPECT_EQ(compared, static_cast<int>(expected.entries().size()) - 4)
      << "every adapter gradient PEFT computed is compared";
  std::printf("%s: logits rel %.3g, loss %.7f vs PEFT %.7f, %d adapter grads (worst rel %.3g)\n",
              GetParam().c_str(), logits_error, forward.loss, want_loss, compared, worst);
}

INSTANTIATE_TEST_SUITE_P(PeftFixtures, LoraGoldenTest,
                         ::testing::Values("llama_gqa_all_linear", "qwen2_qv_down_rslora",
                                           "gemma3_text_all_linear"));

// Each ours_* dir: shardtrain's adapter, and what PEFT and transformers computed from it.
std::vector<std::string> ours_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (fs::directory_iterator it(kLoraGolden, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("ours_", 0) == 0) dirs.push_back(it->path());
  }
  return dirs;
}

TEST(LoraGoldenOursTest, PeftLoadsOurAdapterAndTransformersOurMergedExport) {
  const std::vector<std::string> dirs = ours_dirs();
  ASSERT_FALSE(dirs.empty()) << "no tests/golden/lora/ours_* fixture";
  for (const std::string& dir : dirs) {
    SKIP_WITHOUT_FIXTURE(dir + "/peft_expected.safetensors");
    const SafetensorsFile peft = SafetensorsFile::open(dir + "/peft_expected.safetensors");
    const SafetensorsFile base_expected =
        SafetensorsFile::open(base_dir_of(dir) + "/expected.safetensors");
    const Batch batch = testing::golden_batch(base_expected);
    AdaptedModel adapted(dir, batch);
    const testing::GoldenModel::Forward forward = adapted.forward(batch);
    const double peft_loss = entry_f32(*peft.find("loss"))[0];
    const double merged_loss = entry_f32(*peft.find("merged_loss"))[0];
    EXPECT_LE(max_relative_error(forward.logits, entry_f32(*peft.find("logits"))), 1e-4) << dir;
    EXPECT_NEAR(forward.loss, peft_loss, 1e-5 * peft_loss) << dir;
    EXPECT_NEAR(merged_loss, peft_loss, 1e-5 * peft_loss) << dir;
    std::printf("%s: ours %.7f, PEFT on our adapter %.7f, transformers on our merge %.7f\n",
                dir.c_str(), forward.loss, peft_loss, merged_loss);
  }
}

TEST(LoraGoldenOursTest, OurAdapterHasPeftsNamesShapesAndConfigKeys) {
  const std::string peft_dir = kLoraGolden + "llama_gqa_all_linear";
  SKIP_WITHOUT_FIXTURE(peft_dir + "/adapter_model.safetensors");
  const PeftAdapterConfig config = read_peft_adapter_config(peft_dir);
  const ParamLayout layout =
      make_param_layout(read_hf_config(base_dir_of(peft_dir) + "/config.json"), config.lora);
  testing::TempDir out("shardtrain_lora_golden_");
  std::vector<std::vector<float>> values;
  for (const UnitLayout& unit : layout.units) values.emplace_back(unit.numel, 0.0f);
  save_peft_adapter(
      out.path(), config.lora, layout, [&](int u) { return values[u].data(); }, SavePeftOptions{});
  const auto tensors = [](const std::string& path) {
    std::set<std::pair<std::string, std::string>> named;
    const SafetensorsFile file = SafetensorsFile::open(path);  // entries() refer into it
    for (const SafetensorsEntry& e : file.entries()) {
      named.insert({e.name, e.shape.to_string()});
    }
    return named;
  };
  EXPECT_EQ(tensors(out.path() + "/adapter_model.safetensors"),
            tensors(peft_dir + "/adapter_model.safetensors"));
  const auto keys = [](const std::string& path) {
    std::ifstream in(path);
    std::set<std::string> names;
    const nlohmann::json config = nlohmann::json::parse(in);  // items() refers into it
    for (const auto& [key, value] : config.items()) names.insert(key);
    return names;
  };
  const std::set<std::string> ours = keys(out.path() + "/adapter_config.json");
  const std::set<std::string> theirs = keys(peft_dir + "/adapter_config.json");
  for (const std::string& key : ours) EXPECT_EQ(theirs.count(key), 1u) << key << " is not PEFT's";
  for (const char* key : {"peft_type", "r", "lora_alpha", "target_modules", "lora_dropout",
                          "base_model_name_or_path", "task_type", "use_rslora", "bias"}) {
    EXPECT_EQ(ours.count(key), 1u) << key;
  }
}

}  // namespace
}  // namespace shardtrain
