#include "train/precision_check.h"

#include "core/error.h"

namespace shardtrain {

void require_precision_supported(const TrainConfig& config, const ModelConfig& model,
                                 const Ops& ops) {
  if (config.train.precision != TrainPrecision::kFp8) return;
  require_precision_supported(config, model, ops.fp8_unsupported_reason());
}

void require_precision_supported(const TrainConfig& config, const ModelConfig& model,
                                 const std::string& reason) {
  if (config.train.precision != TrainPrecision::kFp8) return;
  if (!reason.empty()) {
    fail("train.precision = \"fp8\" cannot run here: {}; HINT: use train.precision = \"bf16\"",
         reason);
  }
  const int64_t keep = config.fp8.keep_bf16_layers;
  if (2 * keep >= model.num_hidden_layers) {
    fail(
        "fp8.keep_bf16_layers = {} keeps all {} blocks of the model in bf16 (the first and the "
        "last {} each); HINT: lower it below {}, or use train.precision = \"bf16\"",
        keep, model.num_hidden_layers, keep, (model.num_hidden_layers + 1) / 2);
  }
}

}  // namespace shardtrain
