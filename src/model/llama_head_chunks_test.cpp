// The lm head and loss run over token chunks (DecoderModel::set_head_chunk_logits). Splitting the
// tokens into several chunks, even and uneven, must give the loss, the gradients and the eval
// logits of a single chunk (up to fp32 summation order, which the CPU GEMM's blocking varies),
// with less activation memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/decoder_model.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

constexpr int kBatch = 3, kSeq = 24;

struct Outcome {
  float loss_sum = 0;
  std::vector<std::vector<float>> grads;  // per unit
  std::vector<float> logits;              // eval forward, N x V
  size_t activation_bytes = 0;
};

Outcome run(const std::string& model, int64_t head_chunk_logits) {
  const std::string dir = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + model;
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  std::vector<Example> examples(kBatch);
  for (int b = 0; b < kBatch; ++b) {
    for (int t = 0; t < kSeq; ++t) {
      examples[b].input_ids.push_back((b * 13 + t * 7 + t * t) % 96);
      examples[b].labels.push_back(t % 5 == 2 ? -100 : examples[b].input_ids.back());
    }
  }
  const Batch batch = make_batch(examples);
  testing::GoldenModel golden(config, checkpoint, batch, true, [&](DecoderModel& m) {
    m.set_head_chunk_logits(head_chunk_logits);
  });
  const testing::GoldenModel::Gradients step = golden.gradients(batch);
  Outcome outcome;
  outcome.loss_sum = step.loss_sum;
  outcome.grads = step.per_unit;
  outcome.logits = golden.forward(batch).logits;
  outcome.activation_bytes = golden.model.activation_bytes();
  EXPECT_EQ(outcome.activation_bytes,
            DecoderModel::activation_bytes_for(config, kBatch, kSeq, DType::kF32,
                                             DecoderModel::Checkpointing::kNone,
                                             head_chunk_logits));
  return outcome;
}

float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

float max_abs(const std::vector<float>& a) {
  float worst = 0;
  for (float x : a) worst = std::max(worst, std::fabs(x));
  return worst;
}

class HeadChunks : public ::testing::TestWithParam<std::string> {};

TEST_P(HeadChunks, SeveralChunksEqualOneChunk) {
  const Outcome whole = run(GetParam(), DecoderModel::kDefaultHeadChunkLogits);
  const int64_t vocab = static_cast<int64_t>(whole.logits.size()) / (kBatch * kSeq);
  // 7 rows per chunk: 72 tokens make 11 chunks (10 of 7 rows, one of 2, none aligned to a
  // sequence); 1 row per chunk is the smallest split.
  for (const int64_t rows : {int64_t{7}, int64_t{1}}) {
    const Outcome chunked = run(GetParam(), rows * vocab);
    EXPECT_LT(chunked.activation_bytes, whole.activation_bytes);
    EXPECT_NEAR(chunked.loss_sum, whole.loss_sum, 1e-5 * std::fabs(whole.loss_sum));
    EXPECT_LE(max_abs_difference(chunked.logits, whole.logits), 1e-5f * max_abs(whole.logits))
        << rows << " rows per chunk";
    ASSERT_EQ(chunked.grads.size(), whole.grads.size());
    for (size_t u = 0; u < whole.grads.size(); ++u) {
      EXPECT_LE(max_abs_difference(chunked.grads[u], whole.grads[u]),
                1e-5f * max_abs(whole.grads[u]))
          << "unit " << u << ", " << rows << " rows per chunk";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, HeadChunks,
                         ::testing::Values("llama_gqa", "qwen2_tied_bias", "gemma3_text"));

}  // namespace
}  // namespace shardtrain
