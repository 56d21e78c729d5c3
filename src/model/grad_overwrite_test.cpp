// A backward handed gradient buffers with GradBuffer::accumulate = false must overwrite every
// element (model/unit_access.h): buffers filled with NaN give exactly the gradients of zeroed
// buffers that are added to, over two micro-batches (the second adds to the first), for every
// tiny model (tied and untied embeddings, q/k/v bias) with and without activation
// checkpointing. A gradient the backward only added to would stay NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/decoder_model.h"
#include "model/unit_access.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

using Checkpointing = DecoderModel::Checkpointing;

// LocalUnits whose gradient buffers are stale at the start of a step: the first backward of
// each unit is told to overwrite, later ones to add.
class StaleGradUnits final : public UnitAccess {
 public:
  explicit StaleGradUnits(LocalUnits& units) : units_(units) {}
  void begin_step() { stale_.assign(units_.unit_count(), true); }
  Tensor acquire_params(int unit) override { return units_.acquire_params(unit); }
  void release_params(int unit) override { units_.release_params(unit); }
  GradBuffer acquire_grads(int unit) override {
    const bool accumulate = !stale_[unit];
    stale_[unit] = false;
    return {units_.grads(unit), accumulate};
  }
  void grads_ready(int unit) override { units_.grads_ready(unit); }

 private:
  LocalUnits& units_;
  std::vector<bool> stale_;
};

Batch test_batch() {
  std::vector<Example> examples(2);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 20; ++t) {
      examples[b].input_ids.push_back((b * 13 + t * 7 + t * t) % 96);
      examples[b].labels.push_back(t % 5 == 2 ? -100 : examples[b].input_ids.back());
    }
  }
  return make_batch(examples);
}

struct Case {
  std::string model;
  Checkpointing checkpointing;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << ", checkpointing " << static_cast<int>(c.checkpointing);
}

class GradOverwrite : public ::testing::TestWithParam<Case> {};

TEST_P(GradOverwrite, NanFilledBuffersGetTheAccumulatedGradients) {
  const std::string dir = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + GetParam().model;
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  const Batch batch = test_batch();
  const auto configure = [&](DecoderModel& m) {
    m.set_activation_checkpointing(GetParam().checkpointing);
    m.set_head_chunk_logits(7 * config.vocab_size);  // several head chunks: only the first
                                                     // may overwrite
  };
  const float grad_scale = 1.0f / static_cast<float>(batch.target_count);

  // Reference: zeroed buffers, every backward adds.
  testing::GoldenModel reference(config, checkpoint, batch, true, configure);
  const testing::GoldenModel::Gradients want = reference.gradients(batch, 2);

  testing::GoldenModel golden(config, checkpoint, batch, true, configure);
  Ops& ops = *golden.ops;
  for (int u = 0; u < golden.model.unit_count(); ++u) {
    const Tensor grads = golden.units.grads(u);
    const std::vector<float> nan(grads.numel(), std::numeric_limits<float>::quiet_NaN());
    ops.copy_from_host(grads, nan.data());
  }
  StaleGradUnits stale(golden.units);
  stale.begin_step();
  DeviceBuffer loss_buffer(ops, sizeof(float));
  const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});
  ops.fill_zero(loss_sum);
  for (int m = 0; m < 2; ++m) golden.model.forward_backward(stale, grad_scale, loss_sum);

  EXPECT_EQ(ops.read_scalar(loss_sum), want.loss_sum);
  for (int u = 0; u < golden.model.unit_count(); ++u) {
    std::vector<float> got(golden.model.layout().units[u].numel);
    ops.copy_to_host(got.data(), golden.units.grads(u));
    ASSERT_EQ(got.size(), want.per_unit[u].size());
    size_t nans = 0;
    for (float g : got) nans += std::isnan(g) ? 1 : 0;
    EXPECT_EQ(nans, 0u) << "unit " << u << ": elements backward did not write";
    EXPECT_EQ(got, want.per_unit[u]) << "unit " << u;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GradOverwrite,
                         ::testing::Values(Case{"llama_gqa", Checkpointing::kNone},
                                           Case{"qwen2_tied_bias", Checkpointing::kNone},
                                           Case{"llama3_rope", Checkpointing::kNone},
                                           Case{"mistral", Checkpointing::kNone},
                                           Case{"qwen2_tied_bias", Checkpointing::kFull},
                                           Case{"llama_gqa", Checkpointing::kSelective}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const char* mode =
                               info.param.checkpointing == Checkpointing::kNone   ? "none"
                               : info.param.checkpointing == Checkpointing::kFull ? "full"
                                                                                  : "selective";
                           return info.param.model + "_" + mode;
                         });

}  // namespace
}  // namespace shardtrain
