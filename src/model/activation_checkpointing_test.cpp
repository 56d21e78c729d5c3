// Activation checkpointing recomputes each block in backward from its saved input ("full"), or
// all but its attention, whose output it keeps ("selective"): on the deterministic CPU backend
// the loss and every gradient are bit-identical to the run that keeps all activations, and the
// activation memory is smaller (full < selective < none).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/decoder_model.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

struct Outcome {
  float loss_sum = 0;
  std::vector<std::vector<float>> grads;  // per unit
  size_t activation_bytes = 0;
};

using Checkpointing = DecoderModel::Checkpointing;

Outcome run(const std::string& model, Checkpointing checkpointing) {
  const std::string dir = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + model;
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  std::vector<Example> examples(3);
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 24; ++t) {
      examples[b].input_ids.push_back((b * 17 + t * 5 + t * t) % 96);
      examples[b].labels.push_back(t % 7 == 3 ? -100 : examples[b].input_ids.back());
    }
  }
  const Batch batch = make_batch(examples);
  testing::GoldenModel golden(config, checkpoint, batch, true, [&](DecoderModel& m) {
    m.set_activation_checkpointing(checkpointing);
  });
  // Two micro-batches, so recomputation must not disturb gradient accumulation either.
  const testing::GoldenModel::Gradients step = golden.gradients(batch, 2);
  Outcome outcome;
  outcome.loss_sum = step.loss_sum;
  outcome.grads = step.per_unit;
  outcome.activation_bytes = golden.model.activation_bytes();
  // `shardtrain plan` reports this figure before anything runs: it must be what reserve took.
  EXPECT_EQ(outcome.activation_bytes,
            DecoderModel::activation_bytes_for(config, 3, 24, DType::kF32, checkpointing));
  return outcome;
}

class ActivationCheckpointing : public ::testing::TestWithParam<std::string> {};

TEST_P(ActivationCheckpointing, GradientsAreBitIdenticalAndMemoryIsSmaller) {
  const Outcome kept = run(GetParam(), Checkpointing::kNone);
  const Outcome full = run(GetParam(), Checkpointing::kFull);
  const Outcome selective = run(GetParam(), Checkpointing::kSelective);
  for (const Outcome* recomputed : {&full, &selective}) {
    const char* mode = recomputed == &full ? "full" : "selective";
    EXPECT_EQ(recomputed->loss_sum, kept.loss_sum) << mode;
    ASSERT_EQ(recomputed->grads.size(), kept.grads.size());
    for (size_t u = 0; u < kept.grads.size(); ++u) {
      EXPECT_EQ(recomputed->grads[u], kept.grads[u]) << mode << ", unit " << u;
    }
  }
  EXPECT_LT(full.activation_bytes, selective.activation_bytes);
  EXPECT_LT(selective.activation_bytes, kept.activation_bytes);
  std::printf("%s: activation memory %zu (none) -> %zu (selective) -> %zu (full) bytes\n",
              GetParam().c_str(), kept.activation_bytes, selective.activation_bytes,
              full.activation_bytes);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, ActivationCheckpointing,
                         ::testing::Values("llama_gqa", "qwen2_tied_bias", "llama3_rope",
                                           "gemma3_text"));

}  // namespace
}  // namespace shardtrain
