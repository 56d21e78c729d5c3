#include "train/inference_model.h"

#include <vector>

#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "ops/backend.h"

namespace shardtrain {

InferenceModel load_inference_model(const std::string& model_dir, DeviceChoice device) {
  const HfCheckpoint checkpoint = HfCheckpoint::open(model_dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  InferenceModel result;
  result.ops = make_ops(device);
  result.model = std::make_unique<DecoderModel>(config, *result.ops);
  result.units = std::make_unique<LocalUnits>(*result.ops, result.model->layout(),
                                              /*with_optimizer_state=*/false);
  std::vector<float> values;
  for (int u = 0; u < result.model->unit_count(); ++u) {
    values.assign(result.model->layout().units[u].numel, 0.0f);
    load_unit_from_checkpoint(checkpoint, result.model->layout().units[u], values.data());
    result.units->upload_master(u, values.data());
  }
  result.units->refresh_compute_params();
  return result;
}

}  // namespace shardtrain
