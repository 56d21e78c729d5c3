// Parity of the mixture-of-experts families with transformers 5.17 (fixtures by
// tools/make_golden.py, in the Hub's per-expert tensor names): qwen3_moe (8 experts, top 2
// renormalised, a dense mlp_only layer between sparse ones), qwen3_moe_sparse_step
// (decoder_sparse_step 2, top 3 of 4 unnormalised, tied) and mixtral (top 2 of 4), on the fp32
// CPU backend. Without the load-balancing loss: logits, cross-entropy and every gradient; with
// it (transformers' output_router_logits=True): the aux value, loss + coef * aux and every
// gradient, also under full activation checkpointing (the recompute must not count twice).
// Bands as model/llama_golden_test.cpp: logits 1e-4, loss 1e-5, gradients 1e-3 (relative to the
// tensor's largest magnitude).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

using testing::entry_f32;
using testing::GoldenModel;
using testing::max_relative_error;

std::string fixture_dir(const std::string& name) {
  return std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + name;
}

// Every parameter's gradient against the fixture's `prefix`<name> entries; returns the worst.
double check_gradients(const DecoderModel& model, const GoldenModel::Gradients& grads,
                       const SafetensorsFile& expected, const std::string& prefix) {
  double worst = 0;
  for (int u = 0; u < model.unit_count(); ++u) {
    for (const ParamSpec& p : model.layout().units[u].params) {
      const SafetensorsEntry* e = expected.find(prefix + p.name);
      EXPECT_NE(e, nullptr) << "no expected gradient for " << p.name;
      if (e == nullptr) continue;
      EXPECT_EQ(e->shape, p.shape) << p.name;
      const std::vector<float> want = entry_f32(*e);
      const double error =
          max_relative_error(grads.per_unit[u].data() + p.offset, want.data(), want.size());
      EXPECT_LE(error, 1e-3) << prefix << p.name;
      worst = std::max(worst, error);
    }
  }
  return worst;
}

class MoeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeParity, LogitsLossAndGradientsMatchTransformers) {
  const std::string dir = fixture_dir(GetParam());
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  ASSERT_TRUE(config.moe.enabled());
  const SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  const Batch batch = testing::golden_batch(expected);
  GoldenModel golden(config, checkpoint, batch, /*with_grads=*/true);

  const GoldenModel::Forward forward = golden.forward(batch);
  const double logits_error =
      max_relative_error(forward.logits, entry_f32(*expected.find("logits")));
  const double expected_loss = entry_f32(*expected.find("loss"))[0];
  std::printf("%s: logits max rel error %.3g, loss %.7f vs %.7f\n", GetParam().c_str(),
              logits_error, forward.loss, expected_loss);
  EXPECT_LE(logits_error, 1e-4);
  EXPECT_LE(std::abs(forward.loss - expected_loss) / expected_loss, 1e-5);
  EXPECT_EQ(golden.model.last_aux_loss(), 0.0);  // off unless asked for

  const GoldenModel::Gradients grads = golden.gradients(batch);
  EXPECT_NEAR(grads.loss_sum / batch.target_count, expected_loss, 1e-5 * expected_loss);
  const double worst = check_gradients(golden.model, grads, expected, "grad.");
  std::printf("%s: gradients without aux loss, largest rel error %.3g\n", GetParam().c_str(),
              worst);
}

// The aux loss's value and gradients, with the recompute of `checkpointing` in between.
void check_with_aux(const std::string& name, DecoderModel::Checkpointing checkpointing) {
  const std::string dir = fixture_dir(name);
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  const SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  const Batch batch = testing::golden_batch(expected);
  GoldenModel golden(config, checkpoint, batch, /*with_grads=*/true, [&](DecoderModel& model) {
    model.set_activation_checkpointing(checkpointing);
    model.set_router_aux_loss(true);
  });
  const GoldenModel::Gradients grads = golden.gradients(batch);
  const double aux = golden.model.last_aux_loss();
  const double expected_aux = entry_f32(*expected.find("aux_loss"))[0];
  const double total = grads.loss_sum / batch.target_count + config.moe.router_aux_loss_coef * aux;
  const double expected_total = entry_f32(*expected.find("loss_with_aux"))[0];
  std::printf("%s: aux %.7f vs %.7f, loss with aux %.7f vs %.7f\n", name.c_str(), aux, expected_aux,
              total, expected_total);
  EXPECT_NEAR(aux, expected_aux, 1e-5 * expected_aux);
  EXPECT_NEAR(total, expected_total, 1e-5 * expected_total);
  const double worst = check_gradients(golden.model, grads, expected, "grad_aux.");
  std::printf("%s: gradients with aux loss, largest rel error %.3g\n", name.c_str(), worst);
}

TEST_P(MoeParity, AuxLossAndItsGradientsMatchTransformers) {
  check_with_aux(GetParam(), DecoderModel::Checkpointing::kNone);
}

TEST_P(MoeParity, AuxLossUnderFullCheckpointingCountsEachBlockOnce) {
  check_with_aux(GetParam(), DecoderModel::Checkpointing::kFull);
}

INSTANTIATE_TEST_SUITE_P(TinyMoeModels, MoeParity,
                         ::testing::Values("qwen3_moe", "qwen3_moe_sparse_step", "mixtral"));

}  // namespace
}  // namespace shardtrain
