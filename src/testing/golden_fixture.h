// The transformers fixtures of tests/golden/ (tools/make_golden.py) in tests (header-only; tests
// only): the fixture's batch, a fp32 CPU forward of a checkpoint on it, and the error measure
// of the parity bands. src/testing/ is the test-support target that spans layers: a model/ test
// that needs whole-model units of one process (train/local_units.h) gets them from here, never
// by including train/ itself; library code never includes testing/. Used by model/llama_golden_test.cpp, train/export_golden_dist_test.cpp and
// the model tests that compare two ways of computing the same step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/error.h"
#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/init_weights.h"
#include "model/decoder_model.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/device_buffer.h"
#include "train/local_units.h"

namespace shardtrain::testing {

inline std::vector<float> entry_f32(const SafetensorsEntry& e) {
  std::vector<float> out(e.shape.numel());
  convert_to_f32(e.data, e.dtype, out.data(), out.size());
  return out;
}

// max|ours - theirs| / max|theirs| over the tensor (the "relative" of the parity bands).
inline double max_relative_error(const float* ours, const float* theirs, size_t n) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(ours[i]) - theirs[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(theirs[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}
inline double max_relative_error(const std::vector<float>& ours, const std::vector<float>& theirs) {
  SHARDTRAIN_CHECK(ours.size() == theirs.size(), "{} vs {} values", ours.size(), theirs.size());
  return max_relative_error(ours.data(), theirs.data(), ours.size());
}

// The fixture's batch: its input_ids and labels, [B, T] int32 each.
inline Batch golden_batch(const SafetensorsFile& expected) {
  const SafetensorsEntry* ids = expected.find("input_ids");
  const SafetensorsEntry* labels = expected.find("labels");
  SHARDTRAIN_CHECK(ids != nullptr && labels != nullptr, "fixture without input_ids / labels");
  const int64_t B = ids->shape[0], T = ids->shape[1];
  std::vector<Example> examples(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto* id_data = static_cast<const int32_t*>(ids->data) + b * T;
    const auto* label_data = static_cast<const int32_t*>(labels->data) + b * T;
    examples[b].input_ids.assign(id_data, id_data + T);
    examples[b].labels.assign(label_data, label_data + T);
  }
  return make_batch(examples);
}

// A checkpoint loaded into DecoderModel on the fp32 CPU backend, with `batch` set. `configure`
// (optional) sets model options that must precede reserve() (checkpointing, head chunks).
struct GoldenModel {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  DecoderModel model;
  LocalUnits units;
  GoldenModel(const ModelConfig& config, const HfCheckpoint& checkpoint, const Batch& batch,
              bool with_grads, const std::function<void(DecoderModel&)>& configure = {})
      : model(config, *ops), units(*ops, model.layout(), with_grads) {
    for (int u = 0; u < model.unit_count(); ++u) {
      std::vector<float> values(model.layout().units[u].numel);
      load_unit_from_checkpoint(checkpoint, model.layout().units[u], values.data());
      units.upload_master(u, values.data());
    }
    if (configure) configure(model);
    model.reserve(batch.batch_size, batch.seq_len);
    model.set_batch(batch);
  }

  // The summed loss and every unit's gradients after `micro_batches` forward-backward passes
  // of `batch` (gradients accumulate across them). REQUIRES: built with_grads.
  struct Gradients {
    float loss_sum = 0;
    std::vector<std::vector<float>> per_unit;
  };
  Gradients gradients(const Batch& batch, int micro_batches = 1) {
    DeviceBuffer loss_buffer(*ops, sizeof(float));
    const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});
    ops->fill_zero(loss_sum);
    units.zero_grads();
    for (int m = 0; m < micro_batches; ++m) {
      model.forward_backward(units, 1.0f / static_cast<float>(batch.target_count), loss_sum);
    }
    Gradients result;
    result.loss_sum = ops->read_scalar(loss_sum);
    for (int u = 0; u < model.unit_count(); ++u) {
      result.per_unit.emplace_back(model.layout().units[u].numel);
      ops->copy_to_host(result.per_unit.back().data(), units.grads(u));
    }
    return result;
  }

  // Logits [B, T, V] and the mean loss over the batch's targets.
  struct Forward {
    std::vector<float> logits;
    double loss = 0;
  };
  Forward forward(const Batch& batch) {
    Forward result;
    result.logits.resize(batch.batch_size * batch.seq_len * model.config().vocab_size);
    DeviceBuffer loss_buffer(*ops, sizeof(float));
    const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});
    ops->fill_zero(loss_sum);
    model.forward(units, loss_sum, result.logits.data());
    result.loss = ops->read_scalar(loss_sum) / static_cast<double>(batch.target_count);
    return result;
  }
};

}  // namespace shardtrain::testing
