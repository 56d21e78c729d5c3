// Packed documents on the fp32 CPU reference (data.packing = documents): the loss of a packed
// micro-batch equals the token-weighted mean of the losses of its documents evaluated alone,
// and its parameter gradients equal the sum of theirs (both scaled by the packed target count),
// within 1e-5 relative, for tiny transformers fixtures (llama with GQA; qwen3 with q/k norms;
// mistral with a sliding window shorter than the documents; gemma3_text with a sliding and a
// global layer, sandwich norms and a final soft cap, with and without recompute; llama with
// full activation checkpointing, whose backward recomputes attention). Without the document mask the same
// tokens and targets give another loss, so the comparison can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/decoder_model.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

constexpr int32_t kVocab = 96;
constexpr int32_t kPad = 0;

// A document of `length` tokens, every label set (its first is dropped by make_batch).
Example document(int length, int seed) {
  Example out;
  for (int t = 0; t < length; ++t) {
    out.input_ids.push_back((seed * 31 + t * 7 + t * t * 3) % kVocab);
    out.labels.push_back(out.input_ids.back());
  }
  return out;
}

// The documents packed one after another into a sequence of seq_len, padded (labels -100).
// Each document's first label is -100 either way, so marked or not the targets are the same.
Example pack(const std::vector<Example>& documents, int seq_len, bool mark_documents) {
  Example out;
  for (const Example& d : documents) {
    const auto start = static_cast<int32_t>(out.input_ids.size());
    if (start > 0 && mark_documents) out.document_starts.push_back(start);
    out.input_ids.insert(out.input_ids.end(), d.input_ids.begin(), d.input_ids.end());
    out.labels.insert(out.labels.end(), d.labels.begin(), d.labels.end());
    out.labels[start] = kIgnoreIndex;
  }
  out.input_ids.resize(seq_len, kPad);
  out.labels.resize(seq_len, kIgnoreIndex);
  return out;
}

struct Result {
  double loss_sum = 0;
  std::vector<std::vector<float>> grads;  // per unit
};

// Forward-backward of `batches` in turn into zeroed gradients, each with the same grad_scale.
Result run(testing::GoldenModel& golden, const std::vector<Batch>& batches, float grad_scale) {
  Ops& ops = *golden.ops;
  DeviceBuffer loss_buffer(ops, sizeof(float));
  const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});
  golden.units.zero_grads();
  Result result;
  for (const Batch& batch : batches) {
    ops.fill_zero(loss_sum);
    golden.model.set_batch(batch);
    golden.model.forward_backward(golden.units, grad_scale, loss_sum);
    result.loss_sum += ops.read_scalar(loss_sum);
  }
  for (int u = 0; u < golden.model.unit_count(); ++u) {
    result.grads.emplace_back(golden.model.layout().units[u].numel);
    ops.copy_to_host(result.grads.back().data(), golden.units.grads(u));
  }
  return result;
}

struct Case {
  std::string model;
  DecoderModel::Checkpointing checkpointing;
};

class PackedDocuments : public ::testing::TestWithParam<Case> {};

TEST_P(PackedDocuments, LossAndGradientsEqualTheDocumentsAlone) {
  const std::string dir = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + GetParam().model;
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  constexpr int kSeq = 24;
  // Row 0: three documents and 3 padding tokens; row 1: two documents filling the row.
  const std::vector<std::vector<Example>> rows = {
      {document(9, 1), document(8, 2), document(4, 3)},
      {document(13, 4), document(11, 5)},
  };
  std::vector<Example> packed_rows, stream_rows;
  std::vector<Batch> alone;
  int64_t document_targets = 0;
  for (const std::vector<Example>& row : rows) {
    packed_rows.push_back(pack(row, kSeq, true));
    stream_rows.push_back(pack(row, kSeq, false));
    for (const Example& d : row) {
      alone.push_back(make_batch({d}));
      document_targets += alone.back().target_count;
    }
  }
  const Batch packed = make_batch(packed_rows);
  ASSERT_TRUE(packed.has_documents());
  ASSERT_EQ(packed.target_count, document_targets) << "each document's first token is no target";
  const float scale = 1.0f / static_cast<float>(packed.target_count);

  const DecoderModel::Checkpointing checkpointing = GetParam().checkpointing;
  testing::GoldenModel golden(config, checkpoint, packed, true, [&](DecoderModel& model) {
    model.set_activation_checkpointing(checkpointing);
  });
  const Result want = run(golden, alone, scale);
  const Result got = run(golden, {packed}, scale);
  const double want_loss = want.loss_sum / static_cast<double>(document_targets);
  const double got_loss = got.loss_sum / static_cast<double>(packed.target_count);
  const double loss_error = std::abs(got_loss - want_loss) / want_loss;
  EXPECT_LT(loss_error, 1e-5) << "packed " << got_loss << " documents alone " << want_loss;
  double worst_grad_error = 0;
  for (size_t u = 0; u < got.grads.size(); ++u) {
    const double error = testing::max_relative_error(got.grads[u], want.grads[u]);
    EXPECT_LT(error, 1e-5) << "unit " << u;
    worst_grad_error = std::max(worst_grad_error, error);
  }
  std::printf("packed vs alone: loss %.6f, relative error %.2e; gradients worst %.2e\n", got_loss,
              loss_error, worst_grad_error);

  // The same tokens and targets as one causal stream (concatenate) see across documents and
  // run positions on: another loss.
  const Batch stream = make_batch(stream_rows);
  ASSERT_FALSE(stream.has_documents());
  ASSERT_EQ(stream.targets, packed.targets);
  const Result leaked = run(golden, {stream}, scale);
  const double leaked_loss = leaked.loss_sum / static_cast<double>(stream.target_count);
  double leaked_grad_error = 0;
  for (size_t u = 0; u < leaked.grads.size(); ++u) {
    leaked_grad_error =
        std::max(leaked_grad_error, testing::max_relative_error(leaked.grads[u], want.grads[u]));
  }
  std::printf("one causal stream vs alone: loss relative difference %.2e; gradients %.2e\n",
              std::abs(leaked_loss - want_loss) / want_loss, leaked_grad_error);
  // Tens of times the parity tolerance: the comparison above can fail.
  EXPECT_GT(std::abs(leaked_loss - want_loss) / want_loss, 1e-4);
  EXPECT_GT(leaked_grad_error, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, PackedDocuments,
                         ::testing::Values(Case{"llama_gqa", DecoderModel::Checkpointing::kNone},
                                           Case{"qwen3", DecoderModel::Checkpointing::kNone},
                                           Case{"mistral_window", DecoderModel::Checkpointing::kNone},
                                           Case{"gemma3_text", DecoderModel::Checkpointing::kNone},
                                           Case{"gemma3_text", DecoderModel::Checkpointing::kFull},
                                           Case{"llama_gqa", DecoderModel::Checkpointing::kFull}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.model +
                                  (info.param.checkpointing == DecoderModel::Checkpointing::kFull
                                       ? "_full_checkpointing"
                                       : "");
                         });

}  // namespace
}  // namespace shardtrain
